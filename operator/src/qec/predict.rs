//! The offline decoder, mirroring `pymatching predict --dem model.dem --in dets.b8
//! --in_format b8 --out pred.01 --out_format 01` (docs/qec.md, "Oracles"), so
//! users check rocelink's decoder with the files and tools they already have.
//!
//! Formats (stim's result formats, those PyMatching's `predict` reads and writes):
//! - `b8`: each shot is ceil(n/8) bytes, bit i of the shot is bit `i % 8` of byte `i / 8`;
//! - `01`: each shot is one line of n characters `0`/`1` (`\n`, or `\r\n`);
//! - `r8`: each byte the count of 0 bits before the next 1 (255: 255 zeros and no 1 yet),
//!   every shot ending with a 1 just past its n bits, which its last byte reaches;
//! - `hits`: each shot one line, the indices of its 1 bits, comma-separated (empty: none);
//! - `dets`: each shot one line, `shot` and then a token per 1 bit: `D<i>` for detector i,
//!   `L<k>` for observable k (predictions are observables only).
//!
//! Input shots have n = the DEM's detector count, and its observable count more with
//! [`InputFormat::appended_observables`] (`pymatching predict
//! --in_includes_appended_observables`: the shot's observables after its detectors, which
//! the decoder ignores); output shots n = its observable count.
//!
//! Guarantees:
//! - output shot k is the decoder's prediction for input shot k, in order, by the exact
//!   decoder (`rocelink_qec::MatchingDecoder`, any number of defects, any code size);
//! - a malformed input (wrong line length, a character other than 0/1, a b8 file ending
//!   inside a shot) stops with [`QecError::Input`] naming the shot and the file;
//! - with `expected_shots` set, a b8 input whose size is not that many shots of the DEM's
//!   detector count is refused before decoding (a b8 file of another detector count reads
//!   as valid shots otherwise), and any input with another shot count is an error;
//! - the predictions file appears only complete: it is written beside the target
//!   (`<out>.partial`) and renamed over it on success; on any error the partial file is
//!   removed and an existing target is left as it was;
//! - with more than one thread ([`predict_threads`]) the shots are decoded in batches, each
//!   split over the threads' decoders, and the output and statistics are those of one thread
//!   byte for byte: a shot's answer depends on that shot alone.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use rocelink_wire::qec::{packed_len, set_bit};

use rocelink_qec::{MatchingDecoder, SparseGraph};

use super::exact::ExactDecoder;
use super::graph::TableWeight;
use super::session::{SessionDecoder, ShotOutcome};
use super::QecError;

/// A detection-event or prediction file format (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShotFormat {
    /// stim `b8`: bit-packed, LSB first, each shot padded to whole bytes.
    B8,
    /// stim `01`: one line of '0'/'1' per shot.
    Zero1,
    /// stim `r8`: run lengths of zeros, a byte each.
    R8,
    /// stim `hits`: the 1 bits' indices, comma-separated, a line per shot.
    Hits,
    /// stim `dets`: `shot D<i> ... L<k> ...`, a line per shot.
    Dets,
}

impl ShotFormat {
    /// Every format, by its stim name.
    pub const ALL: [ShotFormat; 5] =
        [ShotFormat::B8, ShotFormat::Zero1, ShotFormat::R8, ShotFormat::Hits, ShotFormat::Dets];

    /// stim's name of the format.
    pub const fn name(self) -> &'static str {
        match self {
            ShotFormat::B8 => "b8",
            ShotFormat::Zero1 => "01",
            ShotFormat::R8 => "r8",
            ShotFormat::Hits => "hits",
            ShotFormat::Dets => "dets",
        }
    }
}

impl FromStr for ShotFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ShotFormat::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            if s == "ptb64" {
                "the `ptb64` format (64 shots transposed) is not read or written here: \
                 `stim convert` turns it into `b8`"
                    .to_string()
            } else {
                format!("unknown shot format `{s}` (expected b8, 01, r8, hits or dets)")
            }
        })
    }
}

impl fmt::Display for ShotFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the input's shots are laid out: their format, and whether each shot carries its
/// observables after its detectors (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InputFormat {
    /// The file format.
    pub format: ShotFormat,
    /// Each shot is the DEM's detectors and then its observables (ignored).
    pub appended_observables: bool,
}

impl From<ShotFormat> for InputFormat {
    fn from(format: ShotFormat) -> Self {
        InputFormat { format, appended_observables: false }
    }
}

impl InputFormat {
    /// Bits of one input shot for a DEM of `detectors` and `observables`.
    pub fn record_bits(self, detectors: usize, observables: usize) -> usize {
        detectors + if self.appended_observables { observables } else { 0 }
    }
}

/// What a `predict` run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictStats {
    /// Shots decoded.
    pub shots: u64,
    /// Shots the GPU could not decode (a cluster over its scratch), decoded on the CPU; 0 on
    /// the CPU.
    pub overflows: u64,
    /// Shots without a perfect matching (the prediction is that of the clusters that
    /// matched).
    pub unmatchable: u64,
    /// `defect_histogram[k]`: shots with k defects.
    pub defect_histogram: Vec<u64>,
    /// Sum of per-shot decode times (the decoder alone, no I/O), ns.
    pub decode_ns_total: u64,
    /// Median per-shot decode time, ns.
    pub decode_ns_p50: u64,
    /// 99th percentile, ns.
    pub decode_ns_p99: u64,
    /// Slowest shot, ns.
    pub decode_ns_max: u64,
    /// Each shot's matching weight, in order (ln((1-p)/p) units as PyMatching's
    /// `decode(..., return_weight=True)`; +inf when unmatchable): `rocelink decode
    /// --weights-out`, so that a prediction that differs from another decoder's can be told a
    /// tie (an equal weight) from a worse matching.
    pub weights: Vec<f64>,
}

impl PredictStats {
    /// Mean decode time per shot, ns.
    pub fn mean_decode_ns(&self) -> f64 {
        if self.shots == 0 {
            0.0
        } else {
            self.decode_ns_total as f64 / self.shots as f64
        }
    }
}

/// A decoder of whole shots (b8 order), for [`predict_stream`].
pub trait BatchDecoder {
    /// Detection bits per shot.
    fn num_detectors(&self) -> usize;
    /// Observables per prediction.
    fn num_observables(&self) -> usize;
    /// Decodes one shot.
    fn decode_shot(&mut self, shot: &[u8]) -> ShotOutcome;
}

impl BatchDecoder for MatchingDecoder {
    fn num_detectors(&self) -> usize {
        self.graph().num_detectors()
    }
    fn num_observables(&self) -> usize {
        self.graph().num_observables()
    }
    fn decode_shot(&mut self, shot: &[u8]) -> ShotOutcome {
        ShotOutcome::from(self.decode_b8(shot))
    }
}

impl<W: TableWeight> BatchDecoder for ExactDecoder<W> {
    fn num_detectors(&self) -> usize {
        self.table().num_detectors
    }
    fn num_observables(&self) -> usize {
        self.table().num_observables
    }
    fn decode_shot(&mut self, shot: &[u8]) -> ShotOutcome {
        SessionDecoder::finish(self, shot)
    }
}

/// Writes `out_path` only complete: `write` fills `<out_path>.partial`, which is renamed
/// over `out_path` when it succeeds and removed when it fails.
pub fn write_atomically<T, E: From<QecError>>(
    out_path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
) -> Result<T, E> {
    let mut partial = out_path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let file = File::create(&partial).map_err(|e| QecError::io(&partial, e))?;
    let mut writer = BufWriter::new(file);
    let result = write(&mut writer).and_then(|v| {
        writer.flush().map_err(|e| QecError::io(out_path, e))?;
        writer.get_ref().sync_data().map_err(|e| QecError::io(out_path, e))?;
        Ok(v)
    });
    drop(writer);
    match result {
        Ok(v) => {
            std::fs::rename(&partial, out_path).map_err(|e| QecError::io(out_path, e))?;
            Ok(v)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// Writes `weights` one a line (Rust's shortest round-trip form, `inf` for +inf), only
/// complete ([`write_atomically`]).
pub fn write_weights(path: &Path, weights: &[f64]) -> Result<(), QecError> {
    write_atomically(path, |w| -> Result<(), QecError> {
        for x in weights {
            writeln!(w, "{x}").map_err(|e| QecError::io(path, e))?;
        }
        Ok(())
    })
}

/// Refuses a b8 input whose size is not `shots` shots of the DEM's `n` detectors and
/// `num_obs` observables (counted when `in_format` appends them; module docs).
pub fn check_shot_count(
    in_path: &Path,
    in_format: impl Into<InputFormat>,
    n: usize,
    num_obs: usize,
    shots: u64,
) -> Result<(), QecError> {
    let in_format = in_format.into();
    if in_format.format != ShotFormat::B8 {
        return Ok(());
    }
    let bits = in_format.record_bits(n, num_obs);
    let what = if bits == n { format!("{n} detectors") } else { format!("{n} detectors and {num_obs} observables") };
    let meta = std::fs::metadata(in_path).map_err(|e| QecError::io(in_path, e))?;
    if !meta.is_file() {
        // A pipe has no size to check; the count read is checked at its end.
        return Ok(());
    }
    let len = meta.len();
    let per_shot = packed_len(bits) as u64;
    if len != shots.saturating_mul(per_shot) {
        let fits = if per_shot > 0 && len % per_shot == 0 {
            format!("{} shots of {what}", len / per_shot)
        } else {
            format!("not a whole number of shots of {what}")
        };
        return Err(QecError::Input {
            path: in_path.to_path_buf(),
            reason: format!(
                "{len} bytes, but {shots} shots of the DEM's {what} are {} bytes ({fits}): \
                 the file was written for another shot count or another DEM",
                shots.saturating_mul(per_shot)
            ),
        });
    }
    Ok(())
}

/// Decodes every shot of `in_path` with the DEM of `dem_path` and writes the predicted
/// observable flips to `out_path` (module docs), with the exact decoder, on this thread.
pub fn predict(
    dem_path: &Path,
    in_path: &Path,
    in_format: impl Into<InputFormat>,
    out_path: &Path,
    out_format: ShotFormat,
    expected_shots: Option<u64>,
) -> Result<PredictStats, QecError> {
    predict_threads(dem_path, in_path, in_format, out_path, out_format, expected_shots, 1)
}

/// [`predict`] on `threads` threads (at least one), a decoder each (module docs).
pub fn predict_threads(
    dem_path: &Path,
    in_path: &Path,
    in_format: impl Into<InputFormat>,
    out_path: &Path,
    out_format: ShotFormat,
    expected_shots: Option<u64>,
    threads: usize,
) -> Result<PredictStats, QecError> {
    let graph = super::sparse_graph_from_file(dem_path)?;
    predict_on(graph, in_path, in_format, out_path, out_format, expected_shots, threads)
}

/// [`predict_threads`] on a graph already built (a DEM's, with its own options).
pub fn predict_on(
    graph: Arc<SparseGraph>,
    in_path: &Path,
    in_format: impl Into<InputFormat>,
    out_path: &Path,
    out_format: ShotFormat,
    expected_shots: Option<u64>,
    threads: usize,
) -> Result<PredictStats, QecError> {
    let in_format = in_format.into();
    if let Some(shots) = expected_shots {
        check_shot_count(in_path, in_format, graph.num_detectors(), graph.num_observables(), shots)?;
    }
    let mut decoders: Vec<MatchingDecoder> = (0..threads.max(1)).map(|_| MatchingDecoder::new(graph.clone())).collect();
    let input = File::open(in_path).map_err(|e| QecError::io(in_path, e))?;
    write_atomically(out_path, |writer| -> Result<PredictStats, QecError> {
        let stats =
            predict_stream_on(&mut decoders, BufReader::new(input), in_format, writer, out_format, in_path, out_path)?;
        if let Some(shots) = expected_shots.filter(|&s| s != stats.shots) {
            return Err(QecError::Input {
                path: in_path.to_path_buf(),
                reason: format!("{} shots, but {shots} were expected", stats.shots),
            });
        }
        Ok(stats)
    })
}

/// [`predict`] over open streams with a ready decoder; `in_name` and `out_name` only label
/// errors.
pub fn predict_stream<D: BatchDecoder>(
    decoder: &mut D,
    mut input: impl BufRead,
    in_format: impl Into<InputFormat>,
    mut output: impl Write,
    out_format: ShotFormat,
    in_name: &Path,
    out_name: &Path,
) -> Result<PredictStats, QecError> {
    let n = decoder.num_detectors();
    let num_obs = decoder.num_observables();
    let mut reader = ShotReader::new(in_format.into(), n, num_obs, in_name)?;
    let mut writer = PredictionWriter::new(out_format, num_obs);
    let mut shot = vec![0u8; packed_len(n)];
    let mut stats = PredictStats { defect_histogram: vec![0; n + 1], ..PredictStats::default() };
    let mut times: Vec<u64> = Vec::new();
    while reader.read(&mut input, stats.shots, &mut shot)? {
        let (d, ns) = timed_decode(decoder, &shot);
        tally(&mut stats, &mut times, &d, ns);
        writer.write(&mut output, d.observables).map_err(|e| QecError::io(out_name, e))?;
    }
    finish_stats(&mut stats, &mut times);
    Ok(stats)
}

/// One shot decoded, with the decoder's own time (ns).
fn timed_decode<D: BatchDecoder>(decoder: &mut D, shot: &[u8]) -> (ShotOutcome, u64) {
    let started = Instant::now();
    let d = decoder.decode_shot(shot);
    (d, u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// A decoded shot counted into `stats` (its time into `times`), in shot order.
fn tally(stats: &mut PredictStats, times: &mut Vec<u64>, d: &ShotOutcome, ns: u64) {
    times.push(ns);
    stats.decode_ns_total = stats.decode_ns_total.saturating_add(ns);
    stats.shots += 1;
    match d.report {
        rocelink_wire::qec::REPORT_OVERFLOW => stats.overflows += 1,
        rocelink_wire::qec::REPORT_UNMATCHABLE => stats.unmatchable += 1,
        _ => {}
    }
    if let Some(h) = stats.defect_histogram.get_mut(d.defects as usize) {
        *h += 1;
    }
    stats.weights.push(d.weight);
}

/// Shots a thread decodes per batch of [`predict_stream_on`] (a batch holds this many a
/// thread, at most [`BATCH_BYTES`] of shots): enough that starting the threads is a small
/// part of a batch.
const BATCH_SHOTS_PER_THREAD: usize = 1024;

/// The most bytes of shots a batch holds.
const BATCH_BYTES: usize = 64 << 20;

/// [`predict_stream`] over the decoders of `decoders`, one thread each (module docs); one
/// decoder is `predict_stream` itself.
pub fn predict_stream_on<D: BatchDecoder + Send>(
    decoders: &mut [D],
    mut input: impl BufRead,
    in_format: impl Into<InputFormat>,
    mut output: impl Write,
    out_format: ShotFormat,
    in_name: &Path,
    out_name: &Path,
) -> Result<PredictStats, QecError> {
    let Some(first) = decoders.first() else {
        return Err(QecError::Input { path: in_name.to_path_buf(), reason: "no decoder to decode with".into() });
    };
    if decoders.len() == 1 {
        return predict_stream(&mut decoders[0], input, in_format, output, out_format, in_name, out_name);
    }
    let n = first.num_detectors();
    let num_obs = first.num_observables();
    let mut reader = ShotReader::new(in_format.into(), n, num_obs, in_name)?;
    let mut writer = PredictionWriter::new(out_format, num_obs);
    let per = packed_len(n).max(1);
    let batch = (BATCH_SHOTS_PER_THREAD * decoders.len()).min((BATCH_BYTES / per).max(decoders.len()));
    let mut shots = vec![0u8; batch * per];
    let mut stats = PredictStats { defect_histogram: vec![0; n + 1], ..PredictStats::default() };
    let mut times: Vec<u64> = Vec::new();
    loop {
        // a batch read whole first: a malformed shot stops the run before any of it is decoded
        let mut got = 0;
        while got < batch
            && reader.read(&mut input, stats.shots + got as u64, &mut shots[got * per..(got + 1) * per])?
        {
            got += 1;
        }
        if got == 0 {
            break;
        }
        // contiguous runs of the batch, one a thread, answers in shot order
        let run = got.div_ceil(decoders.len());
        let answers: Vec<Vec<(ShotOutcome, u64)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = decoders
                .iter_mut()
                .zip(shots[..got * per].chunks(run * per))
                .map(|(decoder, part)| {
                    scope.spawn(move || part.chunks(per).map(|shot| timed_decode(decoder, shot)).collect())
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("a decoder thread panicked")).collect()
        });
        for (d, ns) in answers.into_iter().flatten() {
            tally(&mut stats, &mut times, &d, ns);
            writer.write(&mut output, d.observables).map_err(|e| QecError::io(out_name, e))?;
        }
        if got < batch {
            break;
        }
    }
    finish_stats(&mut stats, &mut times);
    Ok(stats)
}

/// Reads input shots (module docs) into b8 order, the DEM's detectors only.
pub(crate) struct ShotReader {
    format: ShotFormat,
    /// Detectors, and bits of one input shot (the detectors, then any appended observables).
    n: usize,
    bits: usize,
    /// Observables a `dets` line may name (appended ones only).
    observables: usize,
    /// The whole input shot, b8 order.
    record: Vec<u8>,
    line: String,
    in_name: std::path::PathBuf,
}

impl ShotReader {
    /// A reader of `in_format` shots for a DEM of `n` detectors and `num_obs` observables;
    /// refuses b8 shots of no bits (they have no length).
    pub(crate) fn new(in_format: InputFormat, n: usize, num_obs: usize, in_name: &Path) -> Result<Self, QecError> {
        let bits = in_format.record_bits(n, num_obs);
        if in_format.format == ShotFormat::B8 && bits == 0 {
            return Err(QecError::Input {
                path: in_name.to_path_buf(),
                reason: "the DEM has no detectors, so b8 shots have no length".into(),
            });
        }
        Ok(ShotReader {
            format: in_format.format,
            n,
            bits,
            observables: bits - n,
            record: vec![0; packed_len(bits)],
            line: String::new(),
            in_name: in_name.to_path_buf(),
        })
    }

    /// Reads shot `index` and leaves its n detection bits in `shot` (`packed_len(n)` bytes,
    /// b8 order, the bits past n clear); false at the end of the input; [`QecError::Input`]
    /// naming the shot for a malformed one.
    pub(crate) fn read(&mut self, input: &mut impl BufRead, index: u64, shot: &mut [u8]) -> Result<bool, QecError> {
        self.record.fill(0);
        let more = match self.format {
            ShotFormat::B8 => self.read_b8(input, index)?,
            ShotFormat::R8 => self.read_r8(input, index)?,
            ShotFormat::Zero1 | ShotFormat::Hits | ShotFormat::Dets => self.read_line(input, index)?,
        };
        if more {
            let len = shot.len();
            shot.copy_from_slice(&self.record[..len]);
            if !self.n.is_multiple_of(8) {
                shot[len - 1] &= (1u8 << (self.n % 8)) - 1;
            }
        }
        Ok(more)
    }

    fn bad(&self, reason: String) -> QecError {
        QecError::Input { path: self.in_name.clone(), reason }
    }

    fn read_b8(&mut self, input: &mut impl BufRead, index: u64) -> Result<bool, QecError> {
        let mut got = 0;
        while got < self.record.len() {
            match input.read(&mut self.record[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(QecError::io(&self.in_name, e)),
            }
        }
        if got == 0 {
            return Ok(false);
        }
        if got < self.record.len() {
            return Err(
                self.bad(format!("shot {index}: the file ends inside the shot ({got} of {} bytes)", self.record.len()))
            );
        }
        Ok(true)
    }

    /// Runs of zeros until the 1 just past the shot's bits.
    fn read_r8(&mut self, input: &mut impl BufRead, index: u64) -> Result<bool, QecError> {
        let mut at = 0usize;
        let mut first = true;
        loop {
            let mut byte = [0u8];
            match input.read(&mut byte) {
                Ok(0) if first => return Ok(false),
                Ok(0) => return Err(self.bad(format!("shot {index}: the file ends inside the shot (bit {at})"))),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(QecError::io(&self.in_name, e)),
            }
            first = false;
            at += usize::from(byte[0]);
            if byte[0] == 255 && at <= self.bits {
                continue;
            }
            match at.cmp(&self.bits) {
                std::cmp::Ordering::Less => set_bit(&mut self.record, at, true),
                std::cmp::Ordering::Equal => return Ok(true),
                std::cmp::Ordering::Greater => {
                    return Err(
                        self.bad(format!("shot {index}: a run reaches bit {at}, past the shot's {} bits", self.bits))
                    )
                }
            }
            at += 1;
        }
    }

    /// One line: `01`, `hits` or `dets`.
    fn read_line(&mut self, input: &mut impl BufRead, index: u64) -> Result<bool, QecError> {
        self.line.clear();
        if input.read_line(&mut self.line).map_err(|e| QecError::io(&self.in_name, e))? == 0 {
            return Ok(false);
        }
        let line = std::mem::take(&mut self.line);
        let text = line.trim_end_matches('\n').trim_end_matches('\r');
        let at = index + 1;
        let result = match self.format {
            ShotFormat::Zero1 => self.parse_01(text, at),
            ShotFormat::Hits => self.parse_hits(text, at),
            _ => self.parse_dets(text, at),
        };
        self.line = line;
        result.map(|()| true)
    }

    fn parse_01(&mut self, text: &str, at: u64) -> Result<(), QecError> {
        if text.len() != self.bits {
            return Err(self.bad(format!("line {at}: {} characters, {}", text.chars().count(), self.expect())));
        }
        for (i, c) in text.bytes().enumerate() {
            match c {
                b'0' => {}
                b'1' => set_bit(&mut self.record, i, true),
                _ => return Err(self.bad(format!("line {at}: character {} is not 0 or 1", i + 1))),
            }
        }
        Ok(())
    }

    fn parse_hits(&mut self, text: &str, at: u64) -> Result<(), QecError> {
        if text.is_empty() {
            return Ok(());
        }
        for item in text.split(',') {
            let i = item.trim();
            match i.parse::<usize>() {
                Ok(i) if i < self.bits => set_bit(&mut self.record, i, true),
                Ok(i) => return Err(self.bad(format!("line {at}: bit {i} is past the shot's {} bits", self.bits))),
                Err(_) => return Err(self.bad(format!("line {at}: `{i}` is not a bit index"))),
            }
        }
        Ok(())
    }

    fn parse_dets(&mut self, text: &str, at: u64) -> Result<(), QecError> {
        let mut tokens = text.split_ascii_whitespace();
        if tokens.next() != Some("shot") {
            return Err(self.bad(format!("line {at}: a dets line starts with `shot`")));
        }
        for t in tokens {
            let (kind, index) = t.split_at(t.len().min(1));
            let Ok(i) = index.parse::<usize>() else {
                return Err(self.bad(format!("line {at}: `{t}` is not D<index> or L<index>")));
            };
            let bit = match kind {
                "D" if i < self.n => i,
                "D" => return Err(self.bad(format!("line {at}: {t} is past the DEM's {} detectors", self.n))),
                "L" if i < self.observables => self.n + i,
                "L" if self.observables == 0 => {
                    return Err(self.bad(format!(
                        "line {at}: {t} is an observable: shots that carry them need \
                         --in-includes-appended-observables"
                    )))
                }
                "L" => {
                    return Err(self.bad(format!("line {at}: {t} is past the DEM's {} observables", self.observables)))
                }
                _ => return Err(self.bad(format!("line {at}: `{t}` is not D<index> or L<index>"))),
            };
            set_bit(&mut self.record, bit, true);
        }
        Ok(())
    }

    fn expect(&self) -> String {
        if self.observables == 0 {
            format!("the DEM has {} detectors", self.n)
        } else {
            format!("the DEM has {} detectors and {} observables", self.n, self.observables)
        }
    }
}

/// Writes predictions (the flipped observables) in a format (module docs).
pub(crate) struct PredictionWriter {
    format: ShotFormat,
    num_obs: usize,
    bytes: Vec<u8>,
    line: String,
}

impl PredictionWriter {
    pub(crate) fn new(format: ShotFormat, num_obs: usize) -> Self {
        PredictionWriter { format, num_obs, bytes: vec![0; packed_len(num_obs)], line: String::new() }
    }

    /// Writes one prediction: the low `num_obs` bits of `observables`.
    pub(crate) fn write(&mut self, output: &mut impl Write, observables: u64) -> std::io::Result<()> {
        use std::fmt::Write as _;
        let set = |k: usize| k < 64 && observables >> k & 1 == 1;
        self.line.clear();
        match self.format {
            ShotFormat::B8 => {
                self.bytes.fill(0);
                for k in 0..self.num_obs.min(64) {
                    set_bit(&mut self.bytes, k, set(k));
                }
                return output.write_all(&self.bytes);
            }
            ShotFormat::R8 => {
                self.bytes.clear();
                let mut run = 0usize;
                for k in 0..=self.num_obs {
                    if k < self.num_obs && !set(k) {
                        run += 1;
                        continue;
                    }
                    while run >= 255 {
                        self.bytes.push(255);
                        run -= 255;
                    }
                    self.bytes.push(run as u8);
                    run = 0;
                }
                return output.write_all(&self.bytes);
            }
            ShotFormat::Zero1 => (0..self.num_obs).for_each(|k| self.line.push(if set(k) { '1' } else { '0' })),
            ShotFormat::Hits => {
                for k in (0..self.num_obs).filter(|&k| set(k)) {
                    let sep = if self.line.is_empty() { "" } else { "," };
                    let _ = write!(self.line, "{sep}{k}");
                }
            }
            ShotFormat::Dets => {
                self.line.push_str("shot");
                for k in (0..self.num_obs).filter(|&k| set(k)) {
                    let _ = write!(self.line, " L{k}");
                }
            }
        }
        self.line.push('\n');
        output.write_all(self.line.as_bytes())
    }
}

/// Trims the histogram to the largest defect count seen and sets the percentiles of
/// `times` (per-shot decode times, ns; sorted here).
pub(crate) fn finish_stats(stats: &mut PredictStats, times: &mut [u64]) {
    while stats.defect_histogram.len() > 1 && stats.defect_histogram.last() == Some(&0) {
        stats.defect_histogram.pop();
    }
    times.sort_unstable();
    let pick = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    stats.decode_ns_p50 = pick(0.5);
    stats.decode_ns_p99 = pick(0.99);
    stats.decode_ns_max = times.last().copied().unwrap_or(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = "error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1 D2\nerror(0.1) D2\n";

    fn decoder() -> MatchingDecoder {
        // 3 detectors in a chain; the left boundary edge flips L0.
        MatchingDecoder::new(rocelink_qec::sparse_graph_from_dem_text(CHAIN).unwrap())
    }

    fn run(input: &[u8], inf: ShotFormat, outf: ShotFormat) -> Result<(PredictStats, Vec<u8>), QecError> {
        let mut out = Vec::new();
        let s = predict_stream(&mut decoder(), input, inf, &mut out, outf, Path::new("in"), Path::new("out"))?;
        Ok((s, out))
    }

    #[test]
    fn formats_round_trip() {
        let (s, out) = run(b"100\n001\r\n110\n000\n", ShotFormat::Zero1, ShotFormat::Zero1).unwrap();
        assert_eq!(out, b"1\n0\n0\n0\n");
        assert_eq!((s.shots, s.overflows), (4, 0));
        assert_eq!(s.defect_histogram, [1, 2, 1]);
        let (_, out) = run(&[0b001, 0b100, 0b011, 0], ShotFormat::B8, ShotFormat::B8).unwrap();
        assert_eq!(out, [1, 0, 0, 0]);
        let (_, out) = run(&[0b001, 0b100], ShotFormat::B8, ShotFormat::Zero1).unwrap();
        assert_eq!(out, b"1\n0\n");
        for f in ShotFormat::ALL {
            assert_eq!(f.name().parse::<ShotFormat>(), Ok(f));
        }
        assert!("bits".parse::<ShotFormat>().is_err());
        assert!("ptb64".parse::<ShotFormat>().unwrap_err().contains("stim convert"));
    }

    /// The same four shots (`100`, `001`, `110`, `000`) in every format stim writes, and their
    /// predictions (`1`, `0`, `0`, `0`) in every format; with the observable appended too.
    #[test]
    fn every_stim_format_reads_and_writes() {
        let inputs: [(ShotFormat, &[u8], &[u8]); 5] = [
            (ShotFormat::B8, &[0b001, 0b100, 0b011, 0], &[0b1001, 0b100, 0b011, 0]),
            (ShotFormat::Zero1, b"100\n001\n110\n000\n", b"1001\n0010\n1100\n0000\n"),
            (ShotFormat::R8, &[0, 2, 2, 0, 0, 0, 1, 3], &[0, 2, 0, 2, 1, 0, 0, 2, 4]),
            (ShotFormat::Hits, b"0\n2\n0,1\n\n", b"0,3\n2\n0,1\n\n"),
            (ShotFormat::Dets, b"shot D0\nshot D2\nshot D0 D1\nshot\n", b"shot D0 L0\nshot D2\nshot D1 D0\nshot\n"),
        ];
        let outputs: [(ShotFormat, &[u8]); 5] = [
            (ShotFormat::B8, &[1, 0, 0, 0]),
            (ShotFormat::Zero1, b"1\n0\n0\n0\n"),
            (ShotFormat::R8, &[0, 0, 1, 1, 1]),
            (ShotFormat::Hits, b"0\n\n\n\n"),
            (ShotFormat::Dets, b"shot L0\nshot\nshot\nshot\n"),
        ];
        for (inf, plain, appended) in inputs {
            for (outf, want) in outputs {
                let (s, out) = run(plain, inf, outf).unwrap();
                assert_eq!((s.shots, out.as_slice()), (4, want), "{inf} -> {outf}");
                let with = InputFormat { format: inf, appended_observables: true };
                let mut out = Vec::new();
                predict_stream(&mut decoder(), appended, with, &mut out, outf, Path::new("in"), Path::new("out"))
                    .unwrap();
                assert_eq!(out, want, "{inf} with the observable -> {outf}");
            }
        }
    }

    /// r8 runs of 255 and more, read bit for bit; a run past the shot, a shot cut short and
    /// bad lines are named.
    #[test]
    fn r8_runs_and_malformed_lines() {
        let read = |format: ShotFormat, n: usize, bytes: &[u8]| -> Result<Vec<Vec<usize>>, String> {
            let mut r = ShotReader::new(format.into(), n, 0, Path::new("in")).map_err(|e| e.to_string())?;
            let (mut input, mut shot, mut shots) = (bytes, vec![0u8; packed_len(n)], Vec::new());
            while r.read(&mut input, shots.len() as u64, &mut shot).map_err(|e| e.to_string())? {
                shots.push((0..n).filter(|&i| shot[i / 8] >> (i % 8) & 1 == 1).collect());
            }
            Ok(shots)
        };
        let got = read(ShotFormat::R8, 300, &[255, 44, 0, 255, 45, 255, 0, 44]).unwrap();
        assert_eq!(got, [vec![299], vec![], vec![255]]);
        assert_eq!(read(ShotFormat::R8, 600, &[0, 255, 255, 89]).unwrap(), [vec![0]]);
        assert_eq!(
            read(ShotFormat::R8, 3, &[5]).unwrap_err(),
            "in: shot 0: a run reaches bit 5, past the shot's 3 bits"
        );
        assert_eq!(
            read(ShotFormat::R8, 300, &[3, 255]).unwrap_err(),
            "in: shot 0: the file ends inside the shot (bit 259)"
        );
        let past = "in: shot 0: a run reaches bit 510, past the shot's 300 bits";
        assert_eq!(read(ShotFormat::R8, 300, &[255, 255]).unwrap_err(), past);
        assert_eq!(read(ShotFormat::R8, 255, &[255, 0]).unwrap(), [Vec::<usize>::new()]);
        assert_eq!(read(ShotFormat::Hits, 3, b"1,3\n").unwrap_err(), "in: line 1: bit 3 is past the shot's 3 bits");
        assert_eq!(read(ShotFormat::Hits, 3, b"\n1,,2\n").unwrap_err(), "in: line 2: `` is not a bit index");
        assert_eq!(read(ShotFormat::Dets, 3, b"D1\n").unwrap_err(), "in: line 1: a dets line starts with `shot`");
        assert_eq!(
            read(ShotFormat::Dets, 3, b"shot D3\n").unwrap_err(),
            "in: line 1: D3 is past the DEM's 3 detectors"
        );
        assert_eq!(
            read(ShotFormat::Dets, 3, b"shot M1\n").unwrap_err(),
            "in: line 1: `M1` is not D<index> or L<index>"
        );
        assert!(read(ShotFormat::Dets, 3, b"shot L0\n").unwrap_err().contains("--in-includes-appended-observables"));
        assert_eq!(read(ShotFormat::Hits, 3, b"2,0\n\n").unwrap(), [vec![0, 2], vec![]]);
    }

    /// Each shot's weight, in order, as PyMatching counts it: every edge here weighs
    /// ln(0.9 / 0.1); D0 alone is matched to the boundary (one edge), D0 and D2 take two edges
    /// (through D1, or each to its boundary), no defect costs nothing. They are written one a
    /// line and read back exactly.
    #[test]
    fn weights_are_the_matchings_in_order() {
        let (s, _) = run(b"100\n101\n000\n", ShotFormat::Zero1, ShotFormat::Zero1).unwrap();
        let w = (0.9f64 / 0.1).ln();
        assert_eq!(s.weights.len(), 3);
        for (got, want) in s.weights.iter().zip([w, 2.0 * w, 0.0]) {
            assert!((got - want).abs() < 1e-9 * w, "{got} against {want}");
        }
        let d = scratch("weights");
        let path = d.join("w.txt");
        write_weights(&path, &[s.weights[0], f64::INFINITY, 0.0]).unwrap();
        let back: Vec<f64> = std::fs::read_to_string(&path).unwrap().lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(back, [s.weights[0], f64::INFINITY, 0.0]);
    }

    /// Threads answer as one thread does, byte for byte and in order: a grid DEM whose shots
    /// have clusters to match, more shots than a batch (the batches' seams), and both output
    /// formats; a malformed shot in a later batch is named as one thread names it.
    #[test]
    fn threads_answer_as_one_thread() {
        let (w, h) = (7u32, 6u32);
        let mut dem = String::new();
        for y in 0..h {
            for x in 0..w {
                let d = y * w + x;
                if x + 1 < w {
                    dem.push_str(&format!("error(0.02) D{d} D{}\n", d + 1));
                }
                if y + 1 < h {
                    dem.push_str(&format!("error(0.03) D{d} D{}\n", d + w));
                }
                if x == 0 {
                    dem.push_str(&format!("error(0.02) D{d} L0\n"));
                }
                if x + 1 == w {
                    dem.push_str(&format!("error(0.02) D{d}\n"));
                }
            }
        }
        let graph = rocelink_qec::sparse_graph_from_dem_text(&dem).unwrap();
        let n = graph.num_detectors();
        let per = packed_len(n);
        let shots = BATCH_SHOTS_PER_THREAD * 3 + 17;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut input = vec![0u8; shots * per];
        for s in 0..shots {
            for d in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(9) {
                    set_bit(&mut input[s * per..(s + 1) * per], d, true);
                }
            }
        }
        let mut zero1 = String::new();
        for s in 0..shots {
            for d in 0..n {
                zero1.push(if input[s * per + d / 8] >> (d % 8) & 1 == 1 { '1' } else { '0' });
            }
            zero1.push('\n');
        }
        for (inf, bytes) in [(ShotFormat::B8, input.clone()), (ShotFormat::Zero1, zero1.clone().into_bytes())] {
            for outf in [ShotFormat::B8, ShotFormat::Zero1] {
                let mut one = Vec::new();
                let mut d1 = [MatchingDecoder::new(graph.clone())];
                let s1 = predict_stream_on(&mut d1, &bytes[..], inf, &mut one, outf, Path::new("in"), Path::new("out"))
                    .unwrap();
                let mut many = Vec::new();
                let mut d3: Vec<MatchingDecoder> = (0..3).map(|_| MatchingDecoder::new(graph.clone())).collect();
                let s3 =
                    predict_stream_on(&mut d3, &bytes[..], inf, &mut many, outf, Path::new("in"), Path::new("out"))
                        .unwrap();
                assert_eq!(one, many, "{inf:?} -> {outf:?}");
                assert_eq!(s1.shots, shots as u64);
                assert_eq!(
                    (s1.shots, s1.unmatchable, &s1.defect_histogram, &s1.weights),
                    (s3.shots, s3.unmatchable, &s3.defect_histogram, &s3.weights)
                );
                assert!(
                    s1.weights.iter().filter(|&&w| w > 0.0).count() > shots / 2,
                    "most shots have defects to match"
                );
            }
        }
        // a short line in the second batch
        let bad_at = BATCH_SHOTS_PER_THREAD * 3 + 5;
        let mut lines: Vec<&str> = zero1.lines().collect();
        lines[bad_at] = "01";
        let bad = lines.join("\n") + "\n";
        let mut d3: Vec<MatchingDecoder> = (0..3).map(|_| MatchingDecoder::new(graph.clone())).collect();
        let mut out = Vec::new();
        let want = predict_stream(
            &mut MatchingDecoder::new(graph.clone()),
            bad.as_bytes(),
            ShotFormat::Zero1,
            &mut Vec::new(),
            ShotFormat::Zero1,
            Path::new("in"),
            Path::new("o"),
        )
        .unwrap_err()
        .to_string();
        let got = predict_stream_on(
            &mut d3,
            bad.as_bytes(),
            ShotFormat::Zero1,
            &mut out,
            ShotFormat::Zero1,
            Path::new("in"),
            Path::new("o"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(got, want);
        assert!(got.contains(&format!("line {}", bad_at + 1)), "{got}");
    }

    #[test]
    fn malformed_input_names_the_shot() {
        let e = run(b"100\n10\n", ShotFormat::Zero1, ShotFormat::Zero1).unwrap_err();
        assert_eq!(e.to_string(), "in: line 2: 2 characters, the DEM has 3 detectors");
        let e = run(b"1x0\n", ShotFormat::Zero1, ShotFormat::Zero1).unwrap_err();
        assert_eq!(e.to_string(), "in: line 1: character 2 is not 0 or 1");
        let mut d =
            MatchingDecoder::new(rocelink_qec::sparse_graph_from_dem_text("error(0.1) D0\nerror(0.1) D8\n").unwrap());
        let mut out = Vec::new();
        let e = predict_stream(
            &mut d,
            &[0u8; 3][..],
            ShotFormat::B8,
            &mut out,
            ShotFormat::B8,
            Path::new("x.b8"),
            Path::new("o"),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "x.b8: shot 1: the file ends inside the shot (1 of 2 bytes)");
    }

    #[test]
    fn missing_files_are_io_errors() {
        let e = predict(
            Path::new("/nonexistent/model.dem"),
            Path::new("/nonexistent/in"),
            ShotFormat::B8,
            Path::new("/nonexistent/out"),
            ShotFormat::Zero1,
            None,
        )
        .unwrap_err();
        assert!(matches!(e, QecError::Io { .. }), "{e}");
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rocelink-predict-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("model.dem"), CHAIN).unwrap();
        d
    }

    #[test]
    fn a_truncated_input_leaves_no_predictions_and_keeps_an_old_file() {
        let d = scratch("trunc");
        std::fs::write(d.join("in.01"), "100\n001\n1").unwrap();
        std::fs::write(d.join("out.01"), "old").unwrap();
        let e = predict(
            &d.join("model.dem"),
            &d.join("in.01"),
            ShotFormat::Zero1,
            &d.join("out.01"),
            ShotFormat::Zero1,
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
        assert_eq!(std::fs::read_to_string(d.join("out.01")).unwrap(), "old");
        assert!(!d.join("out.01.partial").exists());
        let e = predict(
            &d.join("model.dem"),
            &d.join("in.01"),
            ShotFormat::Zero1,
            &d.join("new.01"),
            ShotFormat::Zero1,
            None,
        )
        .unwrap_err();
        assert!(matches!(e, QecError::Input { .. }));
        assert!(!d.join("new.01").exists(), "no partial predictions file");
        std::fs::write(d.join("in.01"), "100\n001\n").unwrap();
        let s = predict(
            &d.join("model.dem"),
            &d.join("in.01"),
            ShotFormat::Zero1,
            &d.join("out.01"),
            ShotFormat::Zero1,
            None,
        )
        .unwrap();
        assert_eq!(s.shots, 2);
        assert_eq!(std::fs::read_to_string(d.join("out.01")).unwrap(), "1\n0\n");
    }

    #[test]
    fn num_shots_refuses_a_b8_file_of_another_size() {
        let d = scratch("count");
        // 3 detectors: 1 byte a shot. 4 bytes are 4 shots here, or 2 of a 9..16-detector DEM.
        std::fs::write(d.join("in.b8"), [1u8, 4, 3, 0]).unwrap();
        let run = |n| {
            predict(&d.join("model.dem"), &d.join("in.b8"), ShotFormat::B8, &d.join("out.01"), ShotFormat::Zero1, n)
        };
        let e = run(Some(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: 4 bytes, but 2 shots of the DEM's 3 detectors are 2 bytes (4 shots of 3 detectors): the file was \
                 written for another shot count or another DEM",
                d.join("in.b8").display()
            )
        );
        assert!(!d.join("out.01").exists());
        assert_eq!(run(Some(4)).unwrap().shots, 4);
        assert_eq!(std::fs::read_to_string(d.join("out.01")).unwrap(), "1\n0\n0\n0\n");
        // 01 input: the count is checked after reading.
        std::fs::write(d.join("in.01"), "100\n").unwrap();
        let e = predict(
            &d.join("model.dem"),
            &d.join("in.01"),
            ShotFormat::Zero1,
            &d.join("o.01"),
            ShotFormat::Zero1,
            Some(3),
        )
        .unwrap_err();
        assert!(e.to_string().contains("1 shots, but 3 were expected"), "{e}");
        assert!(!d.join("o.01").exists());
    }
}
