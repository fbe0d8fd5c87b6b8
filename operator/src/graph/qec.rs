//! QEC graphs (docs/qec.md): a peer replaying stim syndromes round by round to a
//! `QecDecoder` on the stage chain, and what such a run reports.
//!
//! A graph is a QEC graph when its chain holds a `QecDecoder`. Checked before anything runs
//! ([`check`]), each error at the setting or operator it is about:
//! - the software peer needs a replay (`peer: FpgaSim(.., qec: (..))`) to feed the decoder, and
//!   a replay needs a decoder to answer it; a peer already running (`Fpga(..)`) brings its own
//!   replay, checked when the run starts (QEC_CTRL says whether one is loaded);
//! - the replay's files exist and load (the shots, observables and prediction agree with the
//!   DEM), the decoder's DEM parses and has the replay's detectors and observables, and the
//!   two DEMs are the same file (a warning otherwise: a different DEM may still describe the
//!   same circuit);
//! - both sides send and expect the same rounds per message (the decoder advances its round
//!   counter by its own setting, so a mismatch would drop every shot);
//! - `run.load` is `ClosedLoop` or `RoundCycle(us)` (and `RoundCycle` only in a QEC graph),
//!   and `Count(n)` shots fit the peer's capture RAM.
//!
//! The run drives the peer in shots (`graph::drive`), and [`report`] turns its QEC counters
//! and capture into the report's `qec` section. The reaction latency is the round trip of
//! each shot's final message (its answer carries the correction); the throughput is rounds
//! decoded per microsecond from the first message sent to the last correction back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocelink_fpga_sim::{QecReplay, QecReplayConfig};
use rocelink_wire::hsb::{capture_flags as cf, CaptureRecord, PLAYER_CLOCK_HZ};
use rocelink_wire::{roce, rpc};

use super::error::{At, GraphError, GraphErrors};
use super::model::{Graph, Load, PeerSpec, Stop};
use crate::hsb::{QecCounters, QecInfo};
use crate::latency::{new_histogram, Summary};
pub use crate::peer::Replay;
pub use crate::report::qec::{markdown, summary_text, QecReport};
use crate::stage::StageSpec;

/// Most messages a run may send: what the peer's capture RAM holds (as `drive` bounds echo
/// runs).
pub const MAX_MESSAGES: u64 = 4_000_000;
/// A fixed cycle is kept up with when the decoded rounds per microsecond reach this share of
/// the offered ones (the last correction comes back one reaction latency after the last
/// round, so a finite run never reaches quite 100%).
pub const KEEP_UP_SHARE: f64 = 0.95;

/// A QEC graph, compiled.
#[derive(Debug, Clone)]
pub struct QecRun {
    /// The `QecDecoder` stage's name.
    pub decoder: String,
    /// Its detector error model.
    pub dem: PathBuf,
    /// Rounds per `enqueue_syndromes` message (the decoder's; the replay's is the same).
    pub rounds_per_message: u32,
    /// The replay the software peer starts with; `None` for a peer already running, which
    /// has its own.
    pub replay: Option<Replay>,
}

impl QecRun {
    /// Messages per shot, when the replay is known.
    pub fn messages_per_shot(&self) -> Option<u32> {
        self.replay.as_ref().map(|r| r.loaded.messages_per_shot(self.rounds_per_message))
    }

    /// Bytes of the largest message, when the replay is known.
    pub fn max_message_len(&self) -> Option<usize> {
        self.replay.as_ref().map(|r| r.loaded.max_message_len(self.rounds_per_message))
    }
}

/// Player clocks (156.25 MHz) per round of a `RoundCycle(us)`, rounded to the nearest.
pub fn cycle_clocks(us: f64) -> f64 {
    (us * PLAYER_CLOCK_HZ as f64 / 1e6).round()
}

/// Nanoseconds of `clocks` player clocks.
pub fn clocks_ns(clocks: u32) -> f64 {
    f64::from(clocks) * 1e9 / PLAYER_CLOCK_HZ as f64
}

/// Checks the QEC side of `g` (module docs); `Some` for a QEC graph. Called once `g`'s
/// settings are valid (`run.load` among them), with its compiled chain.
pub fn check(
    g: &Graph,
    chain: &[(String, StageSpec)],
    warnings: &mut Vec<String>,
) -> Result<Option<QecRun>, GraphErrors> {
    let op_at = |name: &str| g.operators.iter().find(|o| o.name == name).map_or(At::Nowhere, |o| o.at.clone());
    let param_at = |name: &str, param: &str| {
        g.operators
            .iter()
            .find(|o| o.name == name)
            .and_then(|o| o.params.iter().find(|p| p.name == param))
            .map_or_else(|| op_at(name), |p| p.at.clone())
    };
    let line_of = |at: &At| match at {
        At::File { line, .. } => format!(" (line {line})"),
        _ => String::new(),
    };
    let decoders: Vec<(&str, &PathBuf, u32)> = chain
        .iter()
        .filter_map(|(n, s)| match s {
            StageSpec::QecDecoder { dem, rounds_per_message, .. } => Some((n.as_str(), dem, *rounds_per_message)),
            _ => None,
        })
        .collect();
    if let Some((second, ..)) = decoders.get(1) {
        return Err(GraphError::new(op_at(second), format!("operator `{second}`: a second QecDecoder on the chain; one decoder answers the peer's syndromes (give it more `decoders` for more decoder ids)")).into());
    }
    let load_at = g.places.at("run.load");
    let Some(&(name, dem, rpm)) = decoders.first() else {
        if g.qec.is_some() {
            return Err(GraphError::new(g.places.at("peer.qec"), "peer.qec replays syndromes to a decoder, but the stage chain has none: put a `QecDecoder` between the transceiver's rx and tx (see graphs/qec_d5.ron)").into());
        }
        if matches!(g.run.load, Load::RoundCycle(_)) {
            return Err(GraphError::new(load_at, "run.load: RoundCycle is the syndrome cycle of a QEC graph (a QecDecoder on the chain); an echo graph runs ClosedLoop or Rate(messages per second)").into());
        }
        return Ok(None);
    };
    if matches!(g.run.load, Load::Rate(_)) {
        return Err(GraphError::new(load_at, "run.load: a QEC graph runs ClosedLoop (one message in flight) or RoundCycle(microseconds per round), not Rate").into());
    }

    let mut errors = Vec::new();
    // The decoder's DEM, read now so that a bad one is an error of the graph, not of the
    // backend's start.
    let decoder_dem = match crate::qec::load_dem(dem) {
        Ok(d) => Some(d),
        Err(e) => {
            errors.push(GraphError::new(param_at(name, "dem"), format!("operator `{name}`: parameter `dem`: {e}")));
            None
        }
    };
    let replay = match (&g.qec, &g.peer) {
        (None, PeerSpec::Fpga { .. }) => None,
        (None, PeerSpec::FpgaSim { .. }) => {
            errors.push(GraphError::new(
                op_at(name),
                format!("operator `{name}` (QecDecoder) decodes syndromes, but the peer has none to send: give it a replay, `peer: FpgaSim(mode: InProcess, qec: (dem: \"..\", dets: \"..\", obs: \"..\", pred: \"..\"))`"),
            ));
            None
        }
        (Some(spec), _) => {
            let mut missing = false;
            let files = [
                ("dem", Some(&spec.dem)),
                ("dets", Some(&spec.dets)),
                ("obs", Some(&spec.obs)),
                ("pred", spec.pred.as_ref()),
            ];
            for (field, path) in files {
                let Some(path) = path else { continue };
                if !Path::new(path).is_file() {
                    missing = true;
                    let cwd =
                        std::env::current_dir().map(|d| format!(" (relative to {})", d.display())).unwrap_or_default();
                    errors.push(GraphError::new(
                        g.places.at(&format!("peer.qec.{field}")),
                        format!("peer.qec.{field}: no file at `{path}`{cwd}"),
                    ));
                }
            }
            let rpm_at = g.places.at("peer.qec.rounds_per_message");
            if spec.rounds_per_message == 0 {
                errors.push(GraphError::new(rpm_at.clone(), "peer.qec.rounds_per_message must be at least 1 (a value at or above the rounds of a shot sends whole shots)"));
            } else if spec.rounds_per_message != rpm {
                errors.push(GraphError::new(
                    rpm_at.clone(),
                    format!(
                        "peer.qec.rounds_per_message is {} but decoder `{name}` takes {rpm} rounds per message{}: the decoder would see every shot's round counter jump and drop it; set both the same",
                        spec.rounds_per_message,
                        line_of(&param_at(name, "rounds_per_message"))
                    ),
                ));
            }
            if !same_file(Path::new(&spec.dem), dem) {
                warnings.push(format!(
                    "peer.qec.dem `{}` is not the decoder's DEM `{}`: the decoder matches on its own model",
                    spec.dem,
                    dem.display()
                ));
            }
            if missing || spec.rounds_per_message == 0 {
                None
            } else {
                let config = QecReplayConfig {
                    dem: spec.dem.clone().into(),
                    dets: spec.dets.clone().into(),
                    obs: spec.obs.clone().into(),
                    pred: spec.pred.clone().map(PathBuf::from),
                    detectors_per_round: spec.detectors_per_round.clone(),
                    rounds_per_message: spec.rounds_per_message,
                    decoder_id: 0,
                    syndrome_mapping_id: 0,
                };
                match QecReplay::load(&config) {
                    Ok(loaded) => {
                        let max = loaded.max_message_len(spec.rounds_per_message);
                        if max > roce::PMTU {
                            errors.push(GraphError::new(rpm_at, format!("peer.qec.rounds_per_message {}: messages of up to {max} bytes do not fit one {}-byte packet; send fewer rounds per message", spec.rounds_per_message, roce::PMTU)));
                        }
                        if let Some(d) = &decoder_dem {
                            if (d.num_detectors, d.num_observables)
                                != (loaded.num_detectors(), loaded.num_observables())
                            {
                                errors.push(GraphError::new(
                                    param_at(name, "dem"),
                                    format!(
                                        "operator `{name}`: its DEM has {} detectors and {} observables, the replay's shots {} and {}: every shot would be refused",
                                        d.num_detectors,
                                        d.num_observables,
                                        loaded.num_detectors(),
                                        loaded.num_observables()
                                    ),
                                ));
                            }
                        }
                        Some(Replay { config, loaded: Arc::new(loaded) })
                    }
                    Err(e) => {
                        errors.push(GraphError::new(g.places.at("peer.qec"), format!("peer.qec: {e}")));
                        None
                    }
                }
            }
        }
    };
    if !errors.is_empty() {
        return Err(GraphErrors(errors));
    }
    let q = QecRun { decoder: name.to_string(), dem: dem.clone(), rounds_per_message: rpm, replay };
    if let (Stop::Count(n), Some(m)) = (g.run.stop, q.messages_per_shot()) {
        let messages = u64::from(n) * u64::from(m);
        if messages > MAX_MESSAGES {
            return Err(GraphError::new(g.places.at("run.stop"), format!("run.stop: Count({n}) shots of {m} messages each is {messages} messages; the peer captures at most {MAX_MESSAGES} (send more rounds per message, or fewer shots)")).into());
        }
    }
    Ok(Some(q))
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The QEC side of a driven run (`graph::drive`).
#[derive(Debug, Clone)]
pub struct QecDriven {
    pub info: QecInfo,
    /// `None` from a peer without the counters.
    pub counters: Option<QecCounters>,
    /// PLAYER_INTERVAL (player clocks per round; 0 in closed loop).
    pub interval_clocks: u32,
    pub closed_loop: bool,
}

/// Names of the QEC_STATUS_COUNTS words 1..=7.
const STATUS_NAMES: [&str; 7] =
    ["INVALID_DECODER", "BAD_REQUEST", "INTERNAL_ERROR", "NOT_READY", "BUSY", "SYNDROMES_DROPPED", "other"];

/// The `qec` section of a run of `q`: the peer's counters, the capture's final-round records
/// (request ids from `first_request_id`; shots before `warmup` left out of the latency) and
/// the data path's record ring.
pub fn report(
    q: &QecRun,
    d: &QecDriven,
    records: &[CaptureRecord],
    first_request_id: u32,
    warmup: u32,
    ring: &[crate::abi::rl_msg_timestamp],
) -> QecReport {
    let info = &d.info;
    let mps = info.messages_per_shot.max(1);
    let shot_of = |request_id: u32| request_id.wrapping_sub(first_request_id) / mps;
    let is_final = |request_id: u32| request_id.wrapping_sub(first_request_id) % mps == mps - 1;
    let decoded: Vec<&CaptureRecord> = records
        .iter()
        .filter(|r| {
            r.flags & (cf::FINAL_ROUND | cf::PAYLOAD_OK) == cf::FINAL_ROUND | cf::PAYLOAD_OK
                && r.flags & cf::DUPLICATE == 0
        })
        .collect();

    let mut reaction = new_histogram();
    for r in decoded.iter().filter(|r| shot_of(r.request_id) >= warmup) {
        let _ = reaction.record(r.round_trip().clamp(1, reaction.high()));
    }
    let (mut final_loop, mut other_loop) = (new_histogram(), new_histogram());
    for t in ring.iter().filter(|t| shot_of(t.request_id) >= warmup) {
        let h = if is_final(t.request_id) { &mut final_loop } else { &mut other_loop };
        let _ = h.record(t.doorbell_ns.saturating_sub(t.cqe_seen_ns).clamp(1, h.high()));
    }

    let has_reference = info.has_reference;
    // The reference's own errors on the same shots: from its files when they are here, else
    // from the capture flags, which tell it for one observable (ours equals the reference
    // and is wrong, or differs from it and is right).
    let reference_logical_errors = if !has_reference {
        None
    } else if let Some(r) = &q.replay {
        let n = r.loaded.shots().max(1);
        Some(
            decoded
                .iter()
                .filter(|rec| {
                    let s = shot_of(rec.request_id) as usize % n;
                    r.loaded.prediction(s) != r.loaded.observables(s)
                })
                .count() as u64,
        )
    } else if info.observables == 1 {
        Some(
            decoded.iter().filter(|r| (r.flags & cf::MATCHES_REFERENCE != 0) != (r.flags & cf::LOGICAL_OK != 0)).count()
                as u64,
        )
    } else {
        None
    };

    let disagreements_on_overflow = has_reference.then(|| {
        decoded.iter().filter(|r| r.flags & cf::OVERFLOW != 0 && r.flags & cf::MATCHES_REFERENCE == 0).count() as u64
    });
    let c = d.counters.unwrap_or_default();
    let shots_decoded = u64::from(c.shots_decoded);
    let span = c.last_correction_ns.saturating_sub(c.first_send_ns);
    let throughput = (shots_decoded > 0 && span > 0)
        .then(|| 1000.0 * shots_decoded as f64 * f64::from(info.rounds_per_shot) / span as f64);
    let cycle_ns = (!d.closed_loop && d.interval_clocks > 0).then(|| clocks_ns(d.interval_clocks));
    let offered = cycle_ns.map(|ns| 1000.0 / ns);
    let keeps_up = offered.map(|o| throughput.is_some_and(|t| t >= KEEP_UP_SHARE * o));
    let status = c.status[1..]
        .iter()
        .zip(STATUS_NAMES)
        .filter(|(n, _)| **n > 0)
        .map(|(n, name)| (name.to_string(), u64::from(*n)))
        .collect();
    QecReport {
        decoder: q.decoder.clone(),
        dem: q.dem.display().to_string(),
        dets: q.replay.as_ref().map(|r| r.config.dets.display().to_string()),
        loaded_shots: info.loaded_shots,
        detectors: info.detectors,
        observables: info.observables,
        rounds_per_shot: info.rounds_per_shot,
        rounds_per_message: info.rounds_per_message,
        messages_per_shot: info.messages_per_shot,
        max_message_bytes: info.max_message_bytes,
        load: if d.closed_loop { "closed-loop".into() } else { "round-cycle".into() },
        round_cycle_ns: cycle_ns,
        shots_sent: u64::from(c.shots_sent),
        shots_decoded,
        rounds_sent: u64::from(c.rounds_sent),
        logical_errors: u64::from(c.logical_errors),
        logical_error_rate: if shots_decoded > 0 { f64::from(c.logical_errors) / shots_decoded as f64 } else { 0.0 },
        reference: has_reference,
        reference_logical_errors,
        disagreements: has_reference.then_some(u64::from(c.disagreements)),
        disagreements_on_overflow,
        overflows: u64::from(c.overflows),
        unmatchable: u64::from(c.unmatchable),
        bad_answers: u64::from(c.bad_answers),
        status,
        unanswered: u64::from(c.timeouts),
        warmup_shots: warmup,
        reaction_ns: Summary::of(&reaction),
        throughput_rounds_per_us: throughput,
        offered_rounds_per_us: offered,
        keeps_up,
        final_round_loop_ns: Summary::of(&final_loop),
        other_rounds_loop_ns: Summary::of(&other_loop),
        decoder_time: (c.decode.count > 0).then_some(c.decode),
    }
}

/// Why a QEC run cannot go on with this peer (`drive` calls it once the peer has said what
/// it holds): nothing loaded, a replay other than the one checked, slots too small.
pub fn check_peer(q: &QecRun, info: &QecInfo, slot_stride: u32) -> Result<(), String> {
    if !info.loaded {
        return Err("the peer has no QEC replay loaded (QEC_CTRL): start fpga-sim with --qec-dets, --qec-dem and --qec-obs, or give the graph's peer a `qec` replay".into());
    }
    if let Some(r) = &q.replay {
        let l = &r.loaded;
        let want = (l.shots() as u64, l.num_detectors() as u64, u64::from(l.rounds_per_shot()));
        let got = (u64::from(info.loaded_shots), u64::from(info.detectors), u64::from(info.rounds_per_shot));
        if want != got {
            return Err(format!(
                "the peer's replay (shots, detectors, rounds) is {got:?}, not the {want:?} of `{}`",
                r.config.dets.display()
            ));
        }
    }
    if info.max_message_bytes > slot_stride {
        return Err(format!(
            "the peer's messages are up to {} bytes but the RX slots hold {slot_stride}: raise run.size to at least {}",
            info.max_message_bytes, info.max_message_bytes
        ));
    }
    if (info.max_message_bytes as usize) < rpc::HEADER_LEN {
        return Err(format!(
            "the peer reports messages of {} bytes, shorter than an RPC header",
            info.max_message_bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rec(id: u32, rtt: u64, flags: u32) -> CaptureRecord {
        CaptureRecord {
            request_id: id,
            echoed_timestamp: 1000,
            arrival_timestamp: 1000 + rtt,
            flags,
            result_len: 0,
            rpc_status: 0,
        }
    }

    #[test]
    fn reaction_latency_reference_errors_and_throughput_from_the_capture_and_counters() {
        let ok = cf::HEADER_OK | cf::PAYLOAD_OK;
        // 2 messages per shot, ids from 5: shots 0, 1, 2; shot 0 is warm-up.
        let records = [
            rec(5, 10, ok),
            rec(6, 5000, ok | cf::FINAL_ROUND | cf::LOGICAL_OK | cf::MATCHES_REFERENCE),
            rec(7, 10, ok),
            rec(8, 7000, ok | cf::FINAL_ROUND | cf::MATCHES_REFERENCE), // both wrong
            rec(9, 10, ok),
            rec(10, 9000, ok | cf::FINAL_ROUND | cf::LOGICAL_OK | cf::OVERFLOW), // ours right, reference wrong
            rec(10, 9999, ok | cf::FINAL_ROUND | cf::DUPLICATE),
        ];
        let info = QecInfo {
            loaded: true,
            has_reference: true,
            messages_per_shot: 2,
            rounds_per_shot: 4,
            observables: 1,
            ..QecInfo::default()
        };
        let counters = QecCounters {
            peer: rocelink_wire::hsb::QecCounters {
                shots_sent: 3,
                shots_decoded: 3,
                logical_errors: 1,
                disagreements: 1,
                overflows: 1,
                first_send_ns: 1_000,
                last_correction_ns: 13_000,
                status: [2, 0, 0, 0, 0, 0, 2, 0],
                ..Default::default()
            },
            ..QecCounters::default()
        };
        let q = QecRun { decoder: "decoder".into(), dem: "m.dem".into(), rounds_per_message: 2, replay: None };
        let mut d = QecDriven { info, counters: Some(counters), interval_clocks: 0, closed_loop: true };
        let r = report(&q, &d, &records, 5, 1, &[]);
        assert_eq!((r.reaction_ns.count, r.reaction_ns.min), (2, 7000));
        assert_eq!(r.reference_logical_errors, Some(2));
        assert_eq!((r.disagreements, r.disagreements_on_overflow), (Some(1), Some(1)));
        assert_eq!(r.status, BTreeMap::from([("SYNDROMES_DROPPED".to_string(), 2)]));
        // 3 shots of 4 rounds in 12 us.
        assert!((r.throughput_rounds_per_us.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!((r.keeps_up, r.offered_rounds_per_us), (None, None));
        // A 1 us cycle (156 clocks = 0.9984 us) is kept up with; a 0.5 us one is not.
        d.closed_loop = false;
        d.interval_clocks = 156;
        assert_eq!(report(&q, &d, &records, 5, 1, &[]).keeps_up, Some(true));
        d.interval_clocks = 78;
        assert_eq!(report(&q, &d, &records, 5, 1, &[]).keeps_up, Some(false));
    }

    #[test]
    fn cycle_clocks_round_to_the_nearest_clock() {
        assert_eq!(cycle_clocks(1.0), 156.0);
        assert_eq!(cycle_clocks(2.0), 313.0);
        assert!((clocks_ns(156) - 998.4).abs() < 1e-9);
    }
}
