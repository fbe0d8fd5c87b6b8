//! The offline decoder, mirroring `pymatching predict --dem model.dem --in dets.b8
//! --in_format b8 --out pred.01 --out_format 01` (docs/qec.md, "Oracles"), so
//! users check rocelink's decoder with the files and tools they already have.
//!
//! Formats (stim's result formats, the subset PyMatching's `predict` reads and writes):
//! - `b8`: each shot is ceil(n/8) bytes, bit i of the shot is bit `i % 8` of byte `i / 8`;
//! - `01`: each shot is one line of n characters `0`/`1` (`\n`, or `\r\n`).
//!
//! Input shots have n = the DEM's detector count, output shots n = its observable count.
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
use std::time::Instant;

use rocelink_wire::qec::{packed_len, set_bit};

use rocelink_qec::MatchingDecoder;

use super::exact::ExactDecoder;
use super::graph::TableWeight;
use super::session::{SessionDecoder, ShotOutcome};
use super::QecError;

/// A detection-event or prediction file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShotFormat {
    /// stim `b8`: bit-packed, LSB first, each shot padded to whole bytes.
    B8,
    /// stim `01`: one line of '0'/'1' per shot.
    Zero1,
}

impl FromStr for ShotFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "b8" => Ok(ShotFormat::B8),
            "01" => Ok(ShotFormat::Zero1),
            other => Err(format!("unknown shot format `{other}` (expected `b8` or `01`)")),
        }
    }
}

impl fmt::Display for ShotFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShotFormat::B8 => "b8",
            ShotFormat::Zero1 => "01",
        })
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

/// Refuses a b8 input whose size is not `shots` shots of `n` detectors (module docs).
pub fn check_shot_count(in_path: &Path, in_format: ShotFormat, n: usize, shots: u64) -> Result<(), QecError> {
    if in_format != ShotFormat::B8 {
        return Ok(());
    }
    let len = std::fs::metadata(in_path).map_err(|e| QecError::io(in_path, e))?.len();
    let per_shot = packed_len(n) as u64;
    if len != shots.saturating_mul(per_shot) {
        let fits = if per_shot > 0 && len % per_shot == 0 {
            format!("{} shots of {n} detectors", len / per_shot)
        } else {
            format!("not a whole number of {n}-detector shots")
        };
        return Err(QecError::Input {
            path: in_path.to_path_buf(),
            reason: format!(
                "{len} bytes, but {shots} shots of the DEM's {n} detectors are {} bytes ({fits}): \
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
    in_format: ShotFormat,
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
    in_format: ShotFormat,
    out_path: &Path,
    out_format: ShotFormat,
    expected_shots: Option<u64>,
    threads: usize,
) -> Result<PredictStats, QecError> {
    let graph = super::sparse_graph_from_file(dem_path)?;
    if let Some(shots) = expected_shots {
        check_shot_count(in_path, in_format, graph.num_detectors(), shots)?;
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
    in_format: ShotFormat,
    mut output: impl Write,
    out_format: ShotFormat,
    in_name: &Path,
    out_name: &Path,
) -> Result<PredictStats, QecError> {
    let n = decoder.num_detectors();
    let num_obs = decoder.num_observables();
    check_format(in_format, n, in_name)?;
    let mut shot = vec![0u8; packed_len(n)];
    let mut line = String::new();
    let mut out_bytes = vec![0u8; packed_len(num_obs)];
    let mut out_line = String::with_capacity(num_obs + 1);
    let mut stats = PredictStats { defect_histogram: vec![0; n + 1], ..PredictStats::default() };
    let mut times: Vec<u64> = Vec::new();
    while read_shot(&mut input, in_format, n, stats.shots, &mut shot, &mut line, in_name)? {
        let (d, ns) = timed_decode(decoder, &shot);
        tally(&mut stats, &mut times, &d, ns);
        write_prediction(&mut output, out_format, d.observables, num_obs, &mut out_bytes, &mut out_line)
            .map_err(|e| QecError::io(out_name, e))?;
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
    in_format: ShotFormat,
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
    check_format(in_format, n, in_name)?;
    let per = packed_len(n).max(1);
    let batch = (BATCH_SHOTS_PER_THREAD * decoders.len()).min((BATCH_BYTES / per).max(decoders.len()));
    let mut shots = vec![0u8; batch * per];
    let mut line = String::new();
    let mut out_bytes = vec![0u8; packed_len(num_obs)];
    let mut out_line = String::with_capacity(num_obs + 1);
    let mut stats = PredictStats { defect_histogram: vec![0; n + 1], ..PredictStats::default() };
    let mut times: Vec<u64> = Vec::new();
    loop {
        // a batch read whole first: a malformed shot stops the run before any of it is decoded
        let mut got = 0;
        while got < batch
            && read_shot(
                &mut input,
                in_format,
                n,
                stats.shots + got as u64,
                &mut shots[got * per..(got + 1) * per],
                &mut line,
                in_name,
            )?
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
            write_prediction(&mut output, out_format, d.observables, num_obs, &mut out_bytes, &mut out_line)
                .map_err(|e| QecError::io(out_name, e))?;
        }
        if got < batch {
            break;
        }
    }
    finish_stats(&mut stats, &mut times);
    Ok(stats)
}

/// `b8` shots of a DEM without detectors have no length: refused before reading.
pub(crate) fn check_format(in_format: ShotFormat, n: usize, in_name: &Path) -> Result<(), QecError> {
    if in_format == ShotFormat::B8 && n == 0 {
        return Err(QecError::Input {
            path: in_name.to_path_buf(),
            reason: "the DEM has no detectors, so b8 shots have no length".into(),
        });
    }
    Ok(())
}

/// Reads shot `index` (n detection bits) into `shot` (`packed_len(n)` bytes, b8 order);
/// false at the end of the input; [`QecError::Input`] for a malformed shot. `line` is
/// scratch for `01`.
pub(crate) fn read_shot(
    input: &mut impl BufRead,
    in_format: ShotFormat,
    n: usize,
    index: u64,
    shot: &mut [u8],
    line: &mut String,
    in_name: &Path,
) -> Result<bool, QecError> {
    let bad = |reason: String| QecError::Input { path: in_name.to_path_buf(), reason };
    match in_format {
        ShotFormat::B8 => {
            let mut got = 0;
            while got < shot.len() {
                match input.read(&mut shot[got..]) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(QecError::io(in_name, e)),
                }
            }
            if got == 0 {
                return Ok(false);
            }
            if got < shot.len() {
                return Err(bad(format!(
                    "shot {index}: the file ends inside the shot ({got} of {} bytes)",
                    shot.len()
                )));
            }
        }
        ShotFormat::Zero1 => {
            line.clear();
            if input.read_line(line).map_err(|e| QecError::io(in_name, e))? == 0 {
                return Ok(false);
            }
            let text = line.trim_end_matches('\n').trim_end_matches('\r');
            if text.len() != n {
                return Err(bad(format!(
                    "line {}: {} characters, the DEM has {n} detectors",
                    index + 1,
                    text.chars().count()
                )));
            }
            shot.fill(0);
            for (i, c) in text.bytes().enumerate() {
                match c {
                    b'0' => {}
                    b'1' => set_bit(shot, i, true),
                    _ => return Err(bad(format!("line {}: character {} is not 0 or 1", index + 1, i + 1))),
                }
            }
        }
    }
    Ok(true)
}

/// Writes one prediction (the low `num_obs` bits of `observables`); `out_bytes`
/// (`packed_len(num_obs)` bytes) and `out_line` are scratch.
pub(crate) fn write_prediction(
    output: &mut impl Write,
    out_format: ShotFormat,
    observables: u64,
    num_obs: usize,
    out_bytes: &mut [u8],
    out_line: &mut String,
) -> std::io::Result<()> {
    match out_format {
        ShotFormat::B8 => {
            out_bytes.fill(0);
            for k in 0..num_obs.min(64) {
                set_bit(out_bytes, k, observables >> k & 1 == 1);
            }
            output.write_all(out_bytes)
        }
        ShotFormat::Zero1 => {
            out_line.clear();
            for k in 0..num_obs {
                out_line.push(if k < 64 && observables >> k & 1 == 1 { '1' } else { '0' });
            }
            out_line.push('\n');
            output.write_all(out_line.as_bytes())
        }
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
        assert_eq!("b8".parse::<ShotFormat>(), Ok(ShotFormat::B8));
        assert_eq!("01".parse::<ShotFormat>(), Ok(ShotFormat::Zero1));
        assert!("bits".parse::<ShotFormat>().is_err());
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
