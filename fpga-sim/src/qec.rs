//! QEC syndrome replay (docs/qec.md, PROTOCOLS.md 3): the peer plays a stim
//! detection-event file to a decoder, round by round, and checks every correction.
//!
//! Loading ([`QecReplay::load`], once, when the peer starts): the DEM gives the detector and
//! observable counts and the per-round split (detectors grouped by their last coordinate,
//! stim's time, e.g. `[12, 24, 24, 24, 24, 12]` for d=5 memory-Z), read with the decoder's
//! own loader (`rocelink_wire::dem`); `dets.b8` the shots
//! (stim b8, each shot `ceil(detectors / 8)` bytes, LSB first); `obs.01` the true
//! observables and, optionally, `pred.01` a reference prediction (PyMatching's). Every
//! problem is an error that names the file (and the line, for text files); nothing panics.
//!
//! Preparing ([`QecReplay::plan`], once per rounds-per-message setting, when a run starts):
//! every message's bytes are laid out in advance, so the data path only copies (no
//! allocation, no lock, no parsing per packet).
//!
//! What goes on the wire for shot `s`, message `j` (rounds `j*r .. min((j+1)*r, R)` of the
//! shot's `R` rounds): a CUQR header (function ENQUEUE_SYNDROMES, arg_len, request_id =
//! first request id + message number within the run, ptp_timestamp = send time), then
//! `enqueue_syndromes{decoder_id, counter = j*r (round index of the first round carried),
//! syndrome_mapping_id, num_syndromes = detectors of those rounds}` and their detection
//! events, re-packed LSB first from bit 0. `counter == 0` starts a shot; the last message of
//! a shot is the one whose answer carries the correction (`operator::qec::session`).
//!
//! Checking ([`QecPlan::check_answer`]): an answer to a message before the last must be OK
//! with no result; the answer to the last must be OK with `correction_len(observables)`
//! correction bytes and a 16-byte [`DecodeReportRepr`]. The correction is compared with the
//! true observables (logical error) and the reference (disagreement); the report's status
//! gives overflows and unmatchable shots; non-OK statuses are counted by status. All of it
//! lands in [`QecStats`] (ECB registers `hsb::ext::QEC_*`) and in capture flags.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocelink_wire::dem::DetectorErrorModel;
use rocelink_wire::hsb::capture_flags;
use rocelink_wire::qec::{self as wq, DecodeReportRepr, EnqueueSyndromesRepr, REPORT_OVERFLOW, REPORT_UNMATCHABLE};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};

use crate::stats::{QecStats, Stats};

/// Corrections are compared as 64-bit masks.
pub const MAX_OBSERVABLES: usize = 64;
/// Most detectors a shot may have, most flattened DEM steps, deepest `repeat` nesting: the
/// shared DEM loader's bounds.
pub use rocelink_wire::dem::{MAX_DETECTORS, MAX_FLAT_STEPS as MAX_DEM_STEPS, MAX_REPEAT_DEPTH};

/// RPC header plus the fixed part of `enqueue_syndromes`: the bytes before the syndromes.
const HEAD_LEN: usize = rpc::HEADER_LEN + wq::ENQUEUE_SYNDROMES_FIXED_LEN;
// Where the player stamps request_id and send time.
use rocelink_wire::rpc::{REQUEST_ID_AT, TIMESTAMP_AT};

/// Why a replay could not be loaded or set up.
#[derive(Debug, thiserror::Error)]
pub enum QecError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}, line {line}: {reason}", path.display())]
    Line { path: PathBuf, line: usize, reason: String },
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("QEC replay: {0}")]
    Config(String),
}

/// Where the replay comes from and how to send it (the `--qec-*` flags of `fpga-sim`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QecReplayConfig {
    /// stim DEM (`model.dem`): detector and observable counts, per-round split.
    pub dem: PathBuf,
    /// stim b8 detection events (`dets.b8`).
    pub dets: PathBuf,
    /// True observable flips, stim `01` format (`obs.01`).
    pub obs: PathBuf,
    /// Reference prediction, stim `01` format (`pred.01`, e.g. `pymatching predict`).
    pub pred: Option<PathBuf>,
    /// Detectors per round, overriding the DEM's coordinates (for DEMs without them).
    pub detectors_per_round: Option<Vec<usize>>,
    /// Rounds per `enqueue_syndromes` message; 0 = a whole shot per message.
    pub rounds_per_message: u32,
    /// `decoder_id` of every message.
    pub decoder_id: i64,
    /// `syndrome_mapping_id` of every message.
    pub syndrome_mapping_id: i64,
}

/// What a DEM says about the shape of a shot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemLayout {
    /// 1 + the largest detector id mentioned (stim's `count_detectors`): bits per shot.
    pub num_detectors: usize,
    /// 1 + the largest observable id mentioned (stim's `count_observables`).
    pub num_observables: usize,
    /// Detectors per time step, when every detector has coordinates and the last one
    /// (time) never decreases along detector ids; `None` otherwise.
    pub detectors_per_round: Option<Vec<usize>>,
}

impl DemLayout {
    /// Reads the layout from DEM text with the decoder's own loader (`rocelink_wire::dem`:
    /// `repeat` flattened, `shift_detectors` applied, bounded in size, depth and detector
    /// ids); `Err((line, reason))` for a malformed file.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let dem = DetectorErrorModel::parse(text).map_err(|e| (e.line, e.kind.to_string()))?;
        Ok(DemLayout {
            num_detectors: dem.num_detectors,
            num_observables: dem.num_observables,
            detectors_per_round: dem.detectors_per_round().filter(|s| !s.is_empty()),
        })
    }
}

/// Shots loaded for replay, and how to send them. Immutable once built; shared by the
/// register model and the runs (`Arc`).
#[derive(Debug, Clone)]
pub struct QecReplay {
    /// Rounds per message, 0 = a whole shot: the power-on value of
    /// `hsb::ext::QEC_ROUNDS_PER_MESSAGE`.
    pub rounds_per_message: u32,
    /// `decoder_id` of every message.
    pub decoder_id: i64,
    /// `syndrome_mapping_id` of every message.
    pub syndrome_mapping_id: i64,
    detectors_per_round: Vec<usize>,
    num_detectors: usize,
    num_observables: usize,
    /// b8 bytes per shot.
    shot_bytes: usize,
    dets: Vec<u8>,
    obs: Vec<u64>,
    pred: Option<Vec<u64>>,
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, QecError> {
    std::fs::read(path).map_err(|source| QecError::Read { path: path.to_path_buf(), source })
}

fn read_text(path: &Path) -> Result<String, QecError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|e| QecError::File {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })
}

/// Parses stim's `01` format: one line per shot, character `k` is observable `k`.
pub fn parse_01(text: &str, observables: usize) -> Result<Vec<u64>, (usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.len() != observables {
                return Err((i + 1, format!("{} characters, expected {observables} (one per observable)", line.len())));
            }
            line.bytes().enumerate().try_fold(0u64, |m, (k, c)| match c {
                b'0' => Ok(m),
                b'1' => Ok(m | 1 << k),
                _ => Err((i + 1, format!("`{}` is not 0 or 1", char::from(c).escape_default()))),
            })
        })
        .collect()
}

impl QecReplay {
    /// A replay of `dets` (b8, `ceil(sum(detectors_per_round) / 8)` bytes per shot) with the
    /// true observables `obs` and, optionally, a reference prediction `pred` (bit `k` =
    /// observable `k`, one mask per shot). Options default to one round per message,
    /// decoder 0, mapping 0.
    pub fn new(
        detectors_per_round: Vec<usize>,
        num_observables: usize,
        dets: Vec<u8>,
        obs: Vec<u64>,
        pred: Option<Vec<u64>>,
    ) -> Result<Self, QecError> {
        let bad = |m: String| Err(QecError::Config(m));
        if detectors_per_round.is_empty() || detectors_per_round.contains(&0) {
            return bad(format!("every round needs at least one detector (got {detectors_per_round:?})"));
        }
        let num_detectors =
            detectors_per_round.iter().try_fold(0usize, |a, &d| a.checked_add(d)).filter(|&n| n <= MAX_DETECTORS);
        let Some(num_detectors) = num_detectors else {
            return bad(format!("more than {MAX_DETECTORS} detectors per shot"));
        };
        if u32::try_from(detectors_per_round.len()).is_err() {
            return bad("too many rounds".into());
        }
        if !(1..=MAX_OBSERVABLES).contains(&num_observables) {
            return bad(format!("{num_observables} observables; 1 to {MAX_OBSERVABLES} are supported"));
        }
        let shot_bytes = wq::packed_len(num_detectors);
        if dets.is_empty() || !dets.len().is_multiple_of(shot_bytes) {
            return bad(format!(
                "{} bytes of detection events is not a whole number of {shot_bytes}-byte shots",
                dets.len()
            ));
        }
        let shots = dets.len() / shot_bytes;
        if obs.len() != shots {
            return bad(format!("{} observable lines for {shots} shots", obs.len()));
        }
        if let Some(p) = &pred {
            if p.len() != shots {
                return bad(format!("{} prediction lines for {shots} shots", p.len()));
            }
        }
        Ok(QecReplay {
            rounds_per_message: 1,
            decoder_id: 0,
            syndrome_mapping_id: 0,
            detectors_per_round,
            num_detectors,
            num_observables,
            shot_bytes,
            dets,
            obs,
            pred,
        })
    }

    /// Loads the files of `cfg`. Errors name the file (and line).
    pub fn load(cfg: &QecReplayConfig) -> Result<Self, QecError> {
        let dem = &cfg.dem;
        let layout = DemLayout::parse(&read_text(dem)?).map_err(|(line, reason)| QecError::Line {
            path: dem.clone(),
            line,
            reason,
        })?;
        let file_err = |path: &Path, reason: String| QecError::File { path: path.to_path_buf(), reason };
        if layout.num_detectors == 0 {
            return Err(file_err(dem, "the DEM names no detectors".into()));
        }
        if !(1..=MAX_OBSERVABLES).contains(&layout.num_observables) {
            return Err(file_err(
                dem,
                format!("{} observables; 1 to {MAX_OBSERVABLES} are supported", layout.num_observables),
            ));
        }
        let split = match (&cfg.detectors_per_round, layout.detectors_per_round) {
            (Some(s), _) => {
                let sum: usize = s.iter().sum();
                if sum != layout.num_detectors || s.contains(&0) {
                    return Err(QecError::Config(format!(
                        "detectors per round {s:?} (sum {sum}) do not split the {} detectors of {}",
                        layout.num_detectors,
                        dem.display()
                    )));
                }
                s.clone()
            }
            (None, Some(s)) => s,
            (None, None) => {
                return Err(file_err(
                    dem,
                    "no per-round split: some detector lacks coordinates or time decreases \
                     along detector ids; give the detectors per round explicitly"
                        .into(),
                ))
            }
        };
        let dets = read_bytes(&cfg.dets)?;
        let shot_bytes = wq::packed_len(layout.num_detectors);
        if dets.is_empty() || !dets.len().is_multiple_of(shot_bytes) {
            return Err(file_err(
                &cfg.dets,
                format!(
                    "{} bytes is not a whole number of {shot_bytes}-byte shots ({} detectors \
                     per shot in {}); is it stim's b8 format for this DEM?",
                    dets.len(),
                    layout.num_detectors,
                    dem.display()
                ),
            ));
        }
        let shots = dets.len() / shot_bytes;
        let read_01 = |path: &Path| -> Result<Vec<u64>, QecError> {
            let masks = parse_01(&read_text(path)?, layout.num_observables)
                .map_err(|(line, reason)| QecError::Line { path: path.to_path_buf(), line, reason })?;
            if masks.len() != shots {
                return Err(file_err(path, format!("{} shots, but {} holds {shots}", masks.len(), cfg.dets.display())));
            }
            Ok(masks)
        };
        let obs = read_01(&cfg.obs)?;
        let pred = cfg.pred.as_deref().map(read_01).transpose()?;
        let mut replay = QecReplay::new(split, layout.num_observables, dets, obs, pred)?;
        replay.rounds_per_message = cfg.rounds_per_message;
        replay.decoder_id = cfg.decoder_id;
        replay.syndrome_mapping_id = cfg.syndrome_mapping_id;
        Ok(replay)
    }

    /// Shots loaded.
    pub fn shots(&self) -> usize {
        self.obs.len()
    }

    /// Detectors (bits) per shot.
    pub fn num_detectors(&self) -> usize {
        self.num_detectors
    }

    /// Observables (correction bits) per shot.
    pub fn num_observables(&self) -> usize {
        self.num_observables
    }

    /// Detectors of each round, in order.
    pub fn detectors_per_round(&self) -> &[usize] {
        &self.detectors_per_round
    }

    /// Rounds per shot.
    pub fn rounds_per_shot(&self) -> u32 {
        self.detectors_per_round.len() as u32
    }

    /// A reference prediction is loaded.
    pub fn has_reference(&self) -> bool {
        self.pred.is_some()
    }

    /// Shot `i`'s detection events (b8 bytes).
    pub fn shot(&self, i: usize) -> Option<&[u8]> {
        self.dets.get(i * self.shot_bytes..(i + 1) * self.shot_bytes)
    }

    /// Shot `i`'s true observables.
    pub fn observables(&self, i: usize) -> Option<u64> {
        self.obs.get(i).copied()
    }

    /// Shot `i`'s reference prediction.
    pub fn prediction(&self, i: usize) -> Option<u64> {
        self.pred.as_ref().and_then(|p| p.get(i).copied())
    }

    /// Rounds each message carries for the setting `rounds_per_message` (0 = whole shot,
    /// and anything above the rounds of a shot means the same).
    pub fn effective_rounds_per_message(&self, rounds_per_message: u32) -> u32 {
        let r = self.rounds_per_shot();
        if rounds_per_message == 0 {
            r
        } else {
            rounds_per_message.min(r)
        }
    }

    /// The messages of one shot, in order.
    pub fn message_layouts(&self, rounds_per_message: u32) -> Vec<MessageLayout> {
        let r = self.effective_rounds_per_message(rounds_per_message) as usize;
        let mut out = Vec::with_capacity(self.detectors_per_round.len().div_ceil(r));
        let (mut first_detector, mut syn_offset) = (0usize, 0usize);
        for (j, group) in self.detectors_per_round.chunks(r).enumerate() {
            let detectors: usize = group.iter().sum();
            let syn = wq::packed_len(detectors);
            out.push(MessageLayout {
                first_round: (j * r) as u32,
                rounds: group.len() as u32,
                first_detector,
                detectors,
                syn_offset,
                len: HEAD_LEN + syn,
            });
            first_detector += detectors;
            syn_offset += syn;
        }
        out
    }

    /// Messages per shot for the setting `rounds_per_message`.
    pub fn messages_per_shot(&self, rounds_per_message: u32) -> u32 {
        self.rounds_per_shot().div_ceil(self.effective_rounds_per_message(rounds_per_message))
    }

    /// Bytes of the largest message (RPC header + arguments) for `rounds_per_message`.
    pub fn max_message_len(&self, rounds_per_message: u32) -> usize {
        let r = self.effective_rounds_per_message(rounds_per_message) as usize;
        self.detectors_per_round.chunks(r).map(|g| HEAD_LEN + wq::packed_len(g.iter().sum())).max().unwrap_or(HEAD_LEN)
    }

    /// Lays out every message of every shot for `rounds_per_message` (allocates; done when
    /// a run starts, never per packet).
    pub fn plan(self: &Arc<Self>, rounds_per_message: u32) -> QecPlan {
        let messages = self.message_layouts(rounds_per_message);
        let mut heads = vec![0u8; messages.len() * HEAD_LEN];
        for (m, head) in messages.iter().zip(heads.chunks_mut(HEAD_LEN)) {
            let syn = m.len - HEAD_LEN;
            let header = RequestRepr {
                function_id: function_id::ENQUEUE_SYNDROMES,
                arg_len: (wq::ENQUEUE_SYNDROMES_FIXED_LEN + syn) as u32,
                request_id: 0,
                ptp_timestamp: 0,
            };
            let args = EnqueueSyndromesRepr {
                decoder_id: self.decoder_id,
                counter: i64::from(m.first_round),
                syndrome_mapping_id: self.syndrome_mapping_id,
                num_syndromes: m.detectors as i64,
            };
            // Both fit by construction (HEAD_LEN bytes); a failure would leave zeros, which
            // the decoder answers BAD_REQUEST and the counters show.
            let _ = header.emit(head);
            let _ = args.emit(&mut head[rpc::HEADER_LEN..]);
        }
        let stride = messages.last().map_or(0, |m| m.syn_offset + m.len - HEAD_LEN);
        let mut syndromes = vec![0u8; stride * self.shots()];
        for (s, out) in syndromes.chunks_mut(stride.max(1)).enumerate() {
            let shot = self.shot(s).unwrap_or(&[]);
            for m in &messages {
                let dst = &mut out[m.syn_offset..];
                for i in 0..m.detectors {
                    wq::set_bit(dst, i, wq::bit(shot, m.first_detector + i));
                }
            }
        }
        QecPlan {
            replay: Arc::clone(self),
            rounds_per_message: self.effective_rounds_per_message(rounds_per_message),
            setting: rounds_per_message,
            max_message_len: messages.iter().map(|m| m.len).max().unwrap_or(HEAD_LEN),
            correction_len: wq::correction_len(self.num_observables),
            messages,
            heads,
            syndromes,
            stride,
        }
    }
}

/// One message of a shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLayout {
    /// Round index of its first round: the `counter` it sends.
    pub first_round: u32,
    /// Rounds it carries.
    pub rounds: u32,
    /// Bit offset of its first detector within the shot.
    pub first_detector: usize,
    /// Detectors it carries: its `num_syndromes`.
    pub detectors: usize,
    /// Offset of its syndrome bytes within a shot's prepared bytes.
    syn_offset: usize,
    /// Bytes on the wire: RPC header plus arguments.
    pub len: usize,
}

/// Every message of a replay laid out for one rounds-per-message setting: what a run sends.
/// Message `k` of a run is message `k mod M` of shot `(k / M) mod S` (`M` messages per shot,
/// `S` shots loaded).
#[derive(Debug)]
pub struct QecPlan {
    replay: Arc<QecReplay>,
    rounds_per_message: u32,
    /// The register value it was made for (0 = whole shot).
    setting: u32,
    messages: Vec<MessageLayout>,
    /// Per message position: RPC header and fixed arguments, request_id and timestamp 0.
    heads: Vec<u8>,
    /// Per shot, `stride` bytes: each message's syndrome bytes at its `syn_offset`.
    syndromes: Vec<u8>,
    stride: usize,
    max_message_len: usize,
    correction_len: usize,
}

impl QecPlan {
    /// The replay it sends.
    pub fn replay(&self) -> &Arc<QecReplay> {
        &self.replay
    }

    /// The `QEC_ROUNDS_PER_MESSAGE` value it was made for.
    pub fn setting(&self) -> u32 {
        self.setting
    }

    /// Rounds per message (the last message of a shot may carry fewer).
    pub fn rounds_per_message(&self) -> u32 {
        self.rounds_per_message
    }

    /// Messages per shot (at least 1).
    pub fn messages_per_shot(&self) -> u32 {
        self.messages.len().max(1) as u32
    }

    /// The messages of a shot.
    pub fn messages(&self) -> &[MessageLayout] {
        &self.messages
    }

    /// Bytes of the largest message.
    pub fn max_message_len(&self) -> usize {
        self.max_message_len
    }

    /// Messages in a run of `shots` shots (saturating).
    pub fn frames(&self, shots: u32) -> u32 {
        shots.saturating_mul(self.messages_per_shot())
    }

    /// (loaded shot, message position) of run message `frame`.
    #[inline]
    fn locate(&self, frame: u32) -> (usize, usize) {
        let m = self.messages_per_shot();
        let shots = self.replay.shots().max(1);
        ((frame / m) as usize % shots, (frame % m) as usize)
    }

    /// Rounds that run message `frame` carries.
    #[inline]
    pub fn rounds_of(&self, frame: u32) -> u32 {
        let (_, pos) = self.locate(frame);
        self.messages.get(pos).map_or(1, |m| m.rounds)
    }

    /// Run message `frame` is the last of its shot (its answer carries the correction).
    #[inline]
    pub fn is_final(&self, frame: u32) -> bool {
        self.locate(frame).1 + 1 == self.messages.len()
    }

    /// Writes run message `frame` into `out` with `request_id` and send time `now`; returns
    /// its length, or `None` when `out` is too small. Copies only.
    pub fn write_message(&self, frame: u32, request_id: u32, now: u64, out: &mut [u8]) -> Option<usize> {
        let (shot, pos) = self.locate(frame);
        let m = self.messages.get(pos)?;
        let (head, syn) = out.get_mut(..m.len)?.split_at_mut(HEAD_LEN);
        head.copy_from_slice(self.heads.get(pos * HEAD_LEN..(pos + 1) * HEAD_LEN)?);
        head[REQUEST_ID_AT..REQUEST_ID_AT + 4].copy_from_slice(&request_id.to_le_bytes());
        head[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&now.to_le_bytes());
        let start = shot * self.stride + m.syn_offset;
        syn.copy_from_slice(self.syndromes.get(start..start + syn.len())?);
        Some(m.len)
    }

    /// Counts run message `frame` as sent at `now`.
    #[inline]
    pub fn on_sent(&self, frame: u32, now: u64, stats: &QecStats) {
        if frame == 0 {
            stats.first_send_ns.store(now, Ordering::Relaxed);
        }
        stats.last_send_ns.store(now, Ordering::Relaxed);
        stats.rounds_sent.fetch_add(self.rounds_of(frame), Ordering::Relaxed);
        if self.is_final(frame) {
            Stats::bump(&stats.shots_sent);
        }
    }

    /// Checks the first answer to run message `frame` (`h` its parsed header, `payload` the
    /// whole RPC payload), arrived at `now`; counts it and returns its capture flags beyond
    /// HEADER_OK (module docs).
    pub fn check_answer(&self, frame: u32, h: &ResponseRepr, payload: &[u8], now: u64, stats: &QecStats) -> u32 {
        let (shot, pos) = self.locate(frame);
        let last = pos + 1 == self.messages.len();
        let mut flags = if last { capture_flags::FINAL_ROUND } else { 0 };
        if h.status != status::OK {
            stats.count_status(h.status);
            return flags;
        }
        if !last {
            if h.result_len == 0 {
                flags |= capture_flags::PAYLOAD_OK;
            } else {
                Stats::bump(&stats.bad_answers);
            }
            return flags;
        }
        let need = self.correction_len + wq::DECODE_REPORT_LEN;
        let result =
            payload.get(rpc::HEADER_LEN..).and_then(|r| r.get(..h.result_len as usize)).filter(|r| r.len() >= need);
        let Some(result) = result else {
            Stats::bump(&stats.bad_answers);
            return flags;
        };
        let (correction, report) = result.split_at(self.correction_len);
        let correction = wq::parse_corrections(correction, self.replay.num_observables);
        // 16 bytes are there (checked above), so the report parses.
        let report = DecodeReportRepr::parse(report).unwrap_or_default();
        stats.decode.record(report.decode_ns);
        flags |= capture_flags::PAYLOAD_OK;
        Stats::bump(&stats.shots_decoded);
        stats.last_correction_ns.store(now, Ordering::Relaxed);
        if self.replay.observables(shot) == Some(correction) {
            flags |= capture_flags::LOGICAL_OK;
        } else {
            Stats::bump(&stats.logical_errors);
        }
        if let Some(p) = self.replay.prediction(shot) {
            if p == correction {
                flags |= capture_flags::MATCHES_REFERENCE;
            } else {
                Stats::bump(&stats.disagreements);
            }
        }
        match report.status {
            REPORT_OVERFLOW => {
                flags |= capture_flags::OVERFLOW;
                Stats::bump(&stats.overflows);
            }
            REPORT_UNMATCHABLE => {
                flags |= capture_flags::UNMATCHABLE;
                Stats::bump(&stats.unmatchable);
            }
            _ => {}
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::qec::EnqueueSyndromes;
    use rocelink_wire::rpc::Request;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../operator/tests/fixtures/qec");

    fn fixture_config(name: &str) -> QecReplayConfig {
        let dir = Path::new(FIXTURES).join(name);
        QecReplayConfig {
            dem: dir.join("model.dem"),
            dets: dir.join("dets.b8"),
            obs: dir.join("obs.01"),
            pred: Some(dir.join("pred.01")),
            ..QecReplayConfig::default()
        }
    }

    fn layout(text: &str) -> DemLayout {
        DemLayout::parse(text).expect("parses")
    }

    #[test]
    fn dem_layout_of_the_fixtures() {
        let read = |name: &str| {
            let text = std::fs::read_to_string(fixture_config(name).dem).expect("fixture");
            layout(&text)
        };
        let d3 = read("d3_p0.001");
        assert_eq!((d3.num_detectors, d3.num_observables), (24, 1));
        assert_eq!(d3.detectors_per_round, Some(vec![4, 8, 8, 4]));
        let d5 = read("d5_p0.003");
        assert_eq!(d5.num_detectors, 120);
        assert_eq!(d5.detectors_per_round, Some(vec![12, 24, 24, 24, 24, 12]));
        // stim's own layout: `repeat` and `shift_detectors` with time shifts.
        let r8 = read("d3_r8_p0.001_repeat");
        assert_eq!(r8.num_detectors, 64);
        let mut want = vec![4];
        want.extend([8; 7]);
        want.push(4);
        assert_eq!(r8.detectors_per_round, Some(want));
    }

    #[test]
    fn dem_layout_rules() {
        // Counts follow stim: 1 + the largest id mentioned anywhere.
        let l = layout("error(0.1) D0 D7 ^ D2 L3\nlogical_observable L5\n");
        assert_eq!((l.num_detectors, l.num_observables), (8, 6));
        assert_eq!(l.detectors_per_round, None, "no coordinates");
        // Time decreasing along ids: no split.
        let l = layout("detector(0, 1) D0\ndetector(0, 0) D1\n");
        assert_eq!(l.detectors_per_round, None);
        let l = layout("# c\nDETECTOR(1, 0) D0\ndetector[tag](2, 0) D1\ndetector(0, 2.5) D2\n\n");
        assert_eq!(l.detectors_per_round, Some(vec![2, 1]));
        let l = layout("repeat 3 {\n detector(0, 0) D0\n shift_detectors(0, 1) 1\n}\n");
        assert_eq!(l.detectors_per_round, Some(vec![1, 1, 1]));
        let err = |t: &str| DemLayout::parse(t).expect_err("refused");
        assert_eq!(err("error(0.1) D0\nerrror(0.1) D1\n"), (2, "unknown instruction `errror`".into()));
        assert_eq!(err("error(2) D0").0, 1);
        assert_eq!(err("error(0.1) X3").0, 1);
        assert_eq!(err("detector(0) L0").0, 1);
        assert_eq!(err("\nrepeat 2 {\nerror(0.1) D0\n").0, 2, "never closed");
        assert_eq!(err("}").0, 1);
        assert_eq!(err("repeat 0 {\n}").0, 1);
        assert_eq!(err("error(0.1) D99999999999").0, 1);
        let (line, reason) = err("repeat 1000000 {\nrepeat 1000000 {\nerror(0.1) D0\n}\n}\n");
        assert!(reason.contains("expand"), "{line}: {reason}");
        let deep = "repeat 1 {\n".repeat(100_000);
        assert_eq!(err(&deep).0, MAX_REPEAT_DEPTH + 1, "no stack overflow");
    }

    #[test]
    fn loads_fixtures_and_names_bad_files() {
        let q = QecReplay::load(&fixture_config("d5_p0.001")).expect("loads");
        assert_eq!((q.shots(), q.num_detectors(), q.rounds_per_shot()), (5000, 120, 6));
        assert!(q.has_reference());
        assert_eq!(q.shot(0).map(<[u8]>::len), Some(15));

        let dir = std::env::temp_dir().join(format!("fpga-sim-qec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).expect("write");
            p
        };
        let good = fixture_config("d3_p0.001");
        let msg = |c: &QecReplayConfig| QecReplay::load(c).expect_err("refused").to_string();

        let c = QecReplayConfig { dets: write("short.b8", &[0; 7]), ..good.clone() };
        assert!(msg(&c).contains("short.b8") && msg(&c).contains("3-byte shots"), "{}", msg(&c));
        let c = QecReplayConfig { obs: write("few.01", b"0\n1\n"), ..good.clone() };
        assert!(msg(&c).contains("few.01: 2 shots, but"), "{}", msg(&c));
        let c = QecReplayConfig { pred: Some(write("bad.01", b"0\n2\n")), ..good.clone() };
        assert!(msg(&c).contains("bad.01, line 2"), "{}", msg(&c));
        let c = QecReplayConfig { dem: write("bad.dem", b"error(0.1) D0\nnonsense\n"), ..good.clone() };
        assert!(msg(&c).contains("bad.dem, line 2: unknown instruction"), "{}", msg(&c));
        let c = QecReplayConfig { dem: write("nocoords.dem", b"error(0.1) D23 L0\n"), ..good.clone() };
        assert!(msg(&c).contains("nocoords.dem: no per-round split"), "{}", msg(&c));
        // ... which an explicit split fixes.
        let c = QecReplayConfig { detectors_per_round: Some(vec![12, 12]), ..c };
        assert_eq!(QecReplay::load(&c).expect("loads").detectors_per_round(), [12, 12]);
        let c = QecReplayConfig { detectors_per_round: Some(vec![12, 11]), ..c };
        assert!(msg(&c).contains("do not split"), "{}", msg(&c));
        let c = QecReplayConfig { dets: dir.join("missing.b8"), ..good.clone() };
        assert!(msg(&c).starts_with("cannot read") && msg(&c).contains("missing.b8"), "{}", msg(&c));
        let c = QecReplayConfig { dem: write("bin.dem", &[0xFF, 0xFE]), ..good };
        assert!(msg(&c).contains("bin.dem: not UTF-8"), "{}", msg(&c));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn replay(split: Vec<usize>, shots: &[&[u8]]) -> Arc<QecReplay> {
        let dets: Vec<u8> = shots.iter().flat_map(|s| s.iter().copied()).collect();
        let obs = (0..shots.len() as u64).map(|i| i % 2).collect();
        let pred = Some(vec![0; shots.len()]);
        Arc::new(QecReplay::new(split, 1, dets, obs, pred).expect("replay"))
    }

    #[test]
    fn plan_lays_out_rounds_as_enqueue_syndromes() {
        // 3 rounds of 3, 5 and 4 detectors; shot bits 0..12 = 0b1010_1100_1011.
        let bits = 0b1010_1100_1011u16;
        let r = replay(vec![3, 5, 4], &[&bits.to_le_bytes()]);
        for (setting, want) in
            [(1, vec![(0, 3), (1, 5), (2, 4)]), (2, vec![(0, 8), (2, 4)]), (0, vec![(0, 12)]), (9, vec![(0, 12)])]
        {
            let plan = r.plan(setting);
            assert_eq!(plan.messages_per_shot() as usize, want.len());
            assert_eq!(r.messages_per_shot(setting) as usize, want.len());
            assert_eq!(r.max_message_len(setting), plan.max_message_len());
            let mut buf = [0u8; 128];
            let mut at = 0;
            for (k, &(counter, n)) in want.iter().enumerate() {
                let len = plan.write_message(k as u32, 70 + k as u32, 1234, &mut buf).expect("fits");
                let req = Request::new_checked(&buf[..len]).expect("CUQR");
                assert_eq!(req.function_id(), function_id::ENQUEUE_SYNDROMES);
                assert_eq!((req.request_id(), req.ptp_timestamp()), (70 + k as u32, 1234));
                let args = req.args().expect("args");
                assert_eq!(args.len(), len - rpc::HEADER_LEN, "arg_len covers the message");
                let m = EnqueueSyndromes::new_checked(args).expect("parses");
                assert_eq!((m.counter(), m.num_syndromes()), (counter, n as i64));
                for i in 0..n {
                    assert_eq!(m.syndrome(i), bits >> (at + i) & 1 == 1, "setting {setting} bit {}", at + i);
                }
                assert_eq!(args.len(), 32 + n.div_ceil(8));
                at += n;
                assert_eq!(plan.is_final(k as u32), k + 1 == want.len());
            }
            assert!(plan.write_message(0, 0, 0, &mut buf[..20]).is_none(), "short buffer");
        }
    }

    #[test]
    fn runs_cycle_through_the_shots() {
        let r = replay(vec![2, 2], &[&[0b0001], &[0b0100], &[0b1111]]);
        let plan = r.plan(1);
        assert_eq!(plan.frames(4), 8);
        let mut buf = [0u8; 64];
        // Message 6 = shot 3 -> loaded shot 0, first round.
        let len = plan.write_message(6, 0, 0, &mut buf).expect("fits");
        let m = EnqueueSyndromes::new_checked(&buf[rpc::HEADER_LEN..len]).expect("parses");
        assert_eq!(m.syndromes(), &[0b01]);
        let len = plan.write_message(5, 0, 0, &mut buf).expect("fits");
        let m = EnqueueSyndromes::new_checked(&buf[rpc::HEADER_LEN..len]).expect("parses");
        assert_eq!((m.counter(), m.syndromes()), (1, &[0b11][..]));
    }

    fn answer(status: i32, result: &[u8]) -> (ResponseRepr, Vec<u8>) {
        let h = ResponseRepr { status, result_len: result.len() as u32, request_id: 0, ptp_timestamp: 0 };
        let mut p = vec![0u8; rpc::HEADER_LEN + result.len()];
        h.emit(&mut p).expect("header");
        p[rpc::HEADER_LEN..].copy_from_slice(result);
        (h, p)
    }

    fn final_result(correction: u64, report_status: u8) -> Vec<u8> {
        let mut r = vec![0u8; 8 + 16];
        wq::emit_corrections(correction, 1, &mut r).expect("fits");
        DecodeReportRepr { status: report_status, ..Default::default() }.emit(&mut r[8..]).expect("fits");
        r
    }

    #[test]
    fn answers_are_checked_and_counted() {
        use capture_flags::*;
        // Two shots of 2 rounds; obs = [0, 1], pred = [0, 0].
        let r = replay(vec![2, 2], &[&[0], &[0]]);
        let plan = r.plan(1);
        let stats = QecStats::default();
        let check = |frame, (h, p): (ResponseRepr, Vec<u8>)| plan.check_answer(frame, &h, &p, 99, &stats);
        assert_eq!(check(0, answer(0, &[])), PAYLOAD_OK);
        assert_eq!(check(0, answer(0, &[1])), 0, "a result before the last round");
        assert_eq!(check(1, answer(0, &final_result(0, 0))), FINAL_ROUND | PAYLOAD_OK | LOGICAL_OK | MATCHES_REFERENCE);
        assert_eq!(
            check(3, answer(0, &final_result(0, REPORT_OVERFLOW))),
            FINAL_ROUND | PAYLOAD_OK | MATCHES_REFERENCE | OVERFLOW
        );
        assert_eq!(
            check(3, answer(0, &final_result(1, REPORT_UNMATCHABLE))),
            FINAL_ROUND | PAYLOAD_OK | LOGICAL_OK | UNMATCHABLE
        );
        assert_eq!(check(3, answer(0, &final_result(1, 0)[..23])), FINAL_ROUND, "report cut short");
        assert_eq!(check(2, answer(status::SYNDROMES_DROPPED, &[])), 0);
        assert_eq!(check(3, answer(-1, &[])), FINAL_ROUND);
        let s = stats.snapshot();
        assert_eq!((s.shots_decoded, s.logical_errors, s.disagreements), (3, 1, 1));
        assert_eq!((s.overflows, s.unmatchable, s.bad_answers), (1, 1, 2));
        assert_eq!(s.status, [2, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(s.last_correction_ns, 99);
        for k in 0..4 {
            plan.on_sent(k, 10 + u64::from(k), &stats);
        }
        let s = stats.snapshot();
        assert_eq!((s.shots_sent, s.rounds_sent, s.first_send_ns, s.last_send_ns), (2, 4, 10, 13));
    }

    #[test]
    fn bad_replays_are_refused() {
        let new = |split: Vec<usize>, obs_n: usize, dets: Vec<u8>, n: usize| {
            QecReplay::new(split, obs_n, dets, vec![0; n], None).map(|_| ())
        };
        assert!(new(vec![], 1, vec![0], 1).is_err());
        assert!(new(vec![3, 0], 1, vec![0], 1).is_err());
        assert!(new(vec![3], 0, vec![0], 1).is_err());
        assert!(new(vec![3], 65, vec![0], 1).is_err());
        assert!(new(vec![9], 1, vec![0, 0, 0], 1).is_err(), "not whole shots");
        assert!(new(vec![3], 1, vec![], 0).is_err(), "no shots");
        assert!(new(vec![3], 1, vec![0, 0], 1).is_err(), "obs count");
        assert!(new(vec![3], 1, vec![0, 0], 2).is_ok());
        assert!(QecReplay::new(vec![3], 1, vec![0], vec![0], Some(vec![])).is_err());
        assert_eq!(parse_01("01\r\n10\n", 2), Ok(vec![2, 1]));
        assert_eq!(parse_01("0\n\n", 1).map_err(|e| e.0), Err(2));
    }
}
