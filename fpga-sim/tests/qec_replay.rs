//! QEC syndrome replay end to end: the peer replays the committed stim/PyMatching fixtures
//! (operator/tests/fixtures/qec) over the in-process wire, a host configures it over real
//! ECB requests, and a responder thread stands in for the decoder.
//!
//! The responder is a perfect decoder written here, independent of fpga-sim's code: it
//! parses each `enqueue_syndromes` with `rocelink_wire::qec`, reassembles the shot the way
//! `operator::qec::session` does (counter 0 starts a shot, a gap answers SYNDROMES_DROPPED
//! until the next start, non-final rounds are answered OK with no result), checks the
//! reassembled bits against the fixture's `dets.b8` shot, and answers the final round with
//! PyMatching's prediction from `pred.01` as the correction plus a decode report. So a run
//! must report zero disagreements, and exactly as many logical errors as there are shots
//! where PyMatching's prediction differs from the true observable.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{configure_vp, next_frame, note_error, read_capture, spawn_ready, wait_done, EcbClient, HOST};
use rocelink_fpga_sim::{start_with_qec, FpgaSim, QecReplay, QecReplayConfig, SimConfig};
use rocelink_link::{inproc, Backoff, Link, SpinMode, MAX_FRAME};
use rocelink_wire::hsb::{capture_flags as cf, ext, reg, CaptureRecord};
use rocelink_wire::qec::{self as wq, DecodeReportRepr, EnqueueSyndromes, EnqueueSyndromesRepr};
use rocelink_wire::roce::{self, Endpoints, RoceRepr};
use rocelink_wire::rpc::{self, function_id, status, RequestRepr, ResponseRepr};

const SIM_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const SIM_IP: [u8; 4] = [127, 0, 0, 2];
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../operator/tests/fixtures/qec");

/// A fixture as the test reads it (its own parsing, not fpga-sim's).
struct Fixture {
    dir: PathBuf,
    /// Detectors per round (stim's time steps of the rotated memory-Z circuit).
    split: Vec<usize>,
    detectors: usize,
    dets: Vec<u8>,
    obs: Vec<bool>,
    pred: Vec<bool>,
}

impl Fixture {
    fn load(name: &str) -> Arc<Self> {
        let dir = Path::new(FIXTURES).join(name);
        let split = if name.starts_with("d3_") { vec![4, 8, 8, 4] } else { vec![12, 24, 24, 24, 24, 12] };
        let bits = |file: &str| -> Vec<bool> {
            std::fs::read_to_string(dir.join(file)).expect("fixture 01 file").lines().map(|l| l == "1").collect()
        };
        let f = Fixture {
            detectors: split.iter().sum(),
            dets: std::fs::read(dir.join("dets.b8")).expect("fixture b8"),
            obs: bits("obs.01"),
            pred: bits("pred.01"),
            split,
            dir,
        };
        assert_eq!(f.dets.len(), f.shots() * f.shot_bytes());
        Arc::new(f)
    }

    fn shots(&self) -> usize {
        self.obs.len()
    }

    fn shot_bytes(&self) -> usize {
        self.detectors.div_ceil(8)
    }

    fn shot(&self, i: usize) -> &[u8] {
        &self.dets[i * self.shot_bytes()..(i + 1) * self.shot_bytes()]
    }

    /// Shots among the first `n` replayed where PyMatching gets the observable wrong.
    fn reference_errors(&self, n: usize) -> u32 {
        (0..n).filter(|&k| self.pred[k % self.shots()] != self.obs[k % self.shots()]).count() as u32
    }

    fn replay(&self, rounds_per_message: u32) -> QecReplay {
        QecReplay::load(&QecReplayConfig {
            dem: self.dir.join("model.dem"),
            dets: self.dir.join("dets.b8"),
            obs: self.dir.join("obs.01"),
            pred: Some(self.dir.join("pred.01")),
            rounds_per_message,
            ..QecReplayConfig::default()
        })
        .expect("fixture loads")
    }
}

/// What the responder does wrong. Shots are numbered from 0 in the order the responder
/// sees them start; messages by request id.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// Messages lost on the wire (never seen by the decoder).
    drop: [Option<u32>; 2],
    /// Flip correction bit 0 of this shot.
    flip_shot: Option<u32>,
    /// Report overflow for this shot.
    overflow_shot: Option<u32>,
}

#[derive(Debug, Default)]
struct Report {
    requests: u32,
    shots_decoded: u32,
    errors: Vec<String>,
}

/// The decoder's side of the wire (module docs). Every run replays from the fixture's
/// first shot: the test bumps `run` before each, and the responder then counts shots from 0.
fn responder(
    mut link: Box<dyn Link>,
    fx: Arc<Fixture>,
    faults: Faults,
    stop: Arc<AtomicBool>,
    run: Arc<AtomicU32>,
) -> JoinHandle<Report> {
    std::thread::spawn(move || {
        let mut report = Report::default();
        let mut rx = vec![0u8; MAX_FRAME];
        let mut tx = vec![0u8; MAX_FRAME];
        let mut answer = vec![0u8; 256];
        let mut backoff = Backoff::new(SpinMode::Shared);
        let ep = Endpoints {
            src_mac: HOST.mac,
            dst_mac: SIM_MAC,
            src_ip: HOST.ip,
            dst_ip: SIM_IP,
            src_port: 49152,
            dst_port: roce::UDP_PORT,
        };
        // Session state (operator::qec::session semantics).
        let mut shot = vec![0u8; fx.shot_bytes()];
        let (mut in_shot, mut bits, mut next_counter) = (false, 0usize, 0i64);
        let mut shots_started = 0u32;
        let mut this_run = 0u32;
        let mut psn = 0u32;
        while let Some(n) = next_frame(&mut *link, &mut rx, &mut backoff, &stop) {
            if run.load(Ordering::Acquire) != this_run {
                this_run = run.load(Ordering::Acquire);
                shots_started = 0;
            }
            let Ok(f) = roce::parse_frame(&rx[..n]) else {
                note_error(&mut report.errors, "unparseable frame".into());
                continue;
            };
            report.requests += 1;
            let Ok(req) = RequestRepr::parse(f.payload) else {
                note_error(&mut report.errors, "no CUQR header".into());
                continue;
            };
            let id = req.request_id;
            if faults.drop.contains(&Some(id)) {
                continue;
            }
            let args = f.payload.get(rpc::HEADER_LEN..rpc::HEADER_LEN + req.arg_len as usize).unwrap_or(&[]);
            let parsed = EnqueueSyndromesRepr::parse(args);
            let (st, len) = match (req.function_id, parsed) {
                (function_id::ENQUEUE_SYNDROMES, Ok(m)) => {
                    let view = EnqueueSyndromes::new_checked(args).expect("parsed above");
                    if (m.decoder_id, m.syndrome_mapping_id) != (0, 0) {
                        note_error(&mut report.errors, format!("{id}: ids {m:?}"));
                    }
                    if m.counter == 0 {
                        shots_started += 1;
                        shot.fill(0);
                        (in_shot, bits) = (true, 0);
                    }
                    if !in_shot || (m.counter != 0 && m.counter != next_counter) {
                        in_shot = false;
                        (status::SYNDROMES_DROPPED, 0)
                    } else {
                        // The message must carry whole rounds, from round `counter` on.
                        let first = m.counter as usize;
                        let offset: usize = fx.split[..first.min(fx.split.len())].iter().sum();
                        let (mut sum, mut r) = (0usize, first);
                        while sum < m.num_syndromes as usize && r < fx.split.len() {
                            sum += fx.split[r];
                            r += 1;
                        }
                        if sum != m.num_syndromes as usize || offset != bits {
                            note_error(&mut report.errors, format!("{id}: {m:?} is not whole rounds at bit {bits}"));
                        }
                        for i in 0..m.num_syndromes as usize {
                            wq::set_bit(&mut shot, bits + i, view.syndrome(i));
                        }
                        bits += m.num_syndromes as usize;
                        next_counter = r as i64;
                        if bits < fx.detectors {
                            (status::OK, 0)
                        } else {
                            in_shot = false;
                            let n = shots_started - 1;
                            let k = n as usize % fx.shots();
                            if shot[..] != *fx.shot(k) {
                                note_error(&mut report.errors, format!("shot {n}: bits differ from dets.b8 shot {k}"));
                            }
                            let correction = fx.pred[k] ^ (faults.flip_shot == Some(n));
                            let body = &mut answer[rpc::HEADER_LEN..];
                            let c = wq::emit_corrections(u64::from(correction), 1, body).expect("fits");
                            DecodeReportRepr {
                                status: if faults.overflow_shot == Some(n) { wq::REPORT_OVERFLOW } else { 0 },
                                shot: report.shots_decoded,
                                ..Default::default()
                            }
                            .emit(&mut body[c..])
                            .expect("fits");
                            report.shots_decoded += 1;
                            (status::OK, c + wq::DECODE_REPORT_LEN)
                        }
                    }
                }
                (other, _) => {
                    note_error(&mut report.errors, format!("{id}: function {other:#x} or arguments bad"));
                    (status::BAD_REQUEST, 0)
                }
            };
            ResponseRepr { status: st, result_len: len as u32, request_id: id, ptp_timestamp: req.ptp_timestamp }
                .emit(&mut answer)
                .expect("header");
            let total = rpc::HEADER_LEN + len;
            let n = RoceRepr::uc_send_only(&ep, ext::DEFAULT_FPGA_QP, psn, total)
                .emit(&answer[..total], &mut tx)
                .expect("emit answer");
            psn = (psn + 1) & 0xFF_FFFF;
            link.send(&tx[..n]).expect("send answer");
        }
        report
    })
}

struct Bench {
    ecb: EcbClient,
    fx: Arc<Fixture>,
    stop: Arc<AtomicBool>,
    run: Arc<AtomicU32>,
    responder: Option<JoinHandle<Report>>,
    sim: Option<FpgaSim>,
}

/// One QEC run as a host programs it.
#[derive(Debug, Clone, Copy)]
struct Run {
    shots: u32,
    /// 0 = all rounds in one message.
    rounds_per_message: u32,
    /// Time per round in player clocks (156.25 MHz); 0 = as fast as the window allows.
    interval_clocks: u32,
    /// 1 = closed loop, 0 = up to 64 in flight.
    max_outstanding: u32,
    first_request_id: u32,
    timeout_us: u32,
}

/// What a host reads back after a run.
#[derive(Debug)]
struct Outcome {
    records: Vec<CaptureRecord>,
    shots_sent: u32,
    shots_decoded: u32,
    logical_errors: u32,
    disagreements: u32,
    overflows: u32,
    rounds_sent: u32,
    bad_answers: u32,
    first_send: u64,
    last_send: u64,
    last_correction: u64,
    status: Vec<u32>,
    timeouts: u32,
    messages_per_shot: u32,
}

impl Bench {
    fn new(name: &str, faults: Faults) -> Self {
        let fx = Fixture::load(name);
        let (peer, host) = inproc::pair(256);
        let config = SimConfig {
            ecb_bind: "127.0.0.2:0".parse().expect("addr"),
            mac: SIM_MAC,
            ip: SIM_IP,
            spin: SpinMode::Shared,
            ..SimConfig::default()
        };
        let sim = start_with_qec(config, Some(fx.replay(1)), Box::new(peer)).expect("start sim");
        let stop = Arc::new(AtomicBool::new(false));
        let run = Arc::new(AtomicU32::new(0));
        let responder = responder(Box::new(host), Arc::clone(&fx), faults, Arc::clone(&stop), Arc::clone(&run));
        let mut ecb = EcbClient::connect(sim.ecb_addr());
        configure_vp(&mut ecb, &HOST);
        Bench { ecb, fx, stop, run, responder: Some(responder), sim: Some(sim) }
    }

    fn run(&mut self, run: &Run) -> Outcome {
        self.run.fetch_add(1, Ordering::Release);
        let c = &mut self.ecb;
        assert_eq!(c.read(ext::QEC_CTRL), ext::QEC_ENABLE | ext::QEC_LOADED | ext::QEC_HAS_REFERENCE);
        c.write(ext::QEC_ROUNDS_PER_MESSAGE, run.rounds_per_message);
        // The host sizes its slots from this.
        assert!(c.read(ext::QEC_MAX_MESSAGE_BYTES) <= HOST.page_inc * 128);
        c.write_block(&[
            (reg::PLAYER_INTERVAL, run.interval_clocks),
            (reg::PLAYER_WINDOW_COUNT, run.shots),
            (ext::PLAYER_MAX_OUTSTANDING, run.max_outstanding),
            (ext::PLAYER_FIRST_REQUEST_ID, run.first_request_id),
            (ext::PLAYER_RESPONSE_TIMEOUT_US, run.timeout_us),
        ]);
        c.write(reg::CAPTURE_CTRL, reg::CAPTURE_ARM);
        c.write(reg::PLAYER_ENABLE, reg::PLAYER_RUN);
        wait_done(c, Duration::from_secs(60));
        let time = |c: &mut EcbClient, lo: u32| u64::from(c.read(lo)) | u64::from(c.read(lo + 4)) << 32;
        Outcome {
            records: read_capture(c),
            shots_sent: c.read(ext::QEC_SHOTS_SENT),
            shots_decoded: c.read(ext::QEC_SHOTS_DECODED),
            logical_errors: c.read(ext::QEC_LOGICAL_ERRORS),
            disagreements: c.read(ext::QEC_DISAGREEMENTS),
            overflows: c.read(ext::QEC_OVERFLOWS),
            rounds_sent: c.read(ext::QEC_ROUNDS_SENT),
            bad_answers: c.read(ext::QEC_BAD_ANSWERS),
            first_send: time(c, ext::QEC_FIRST_SEND_LO),
            last_send: time(c, ext::QEC_LAST_SEND_LO),
            last_correction: time(c, ext::QEC_LAST_CORRECTION_LO),
            status: c.read_words(ext::QEC_STATUS_COUNTS, ext::QEC_STATUS_WORDS as usize),
            timeouts: c.stat(ext::STAT_TIMEOUTS),
            messages_per_shot: c.read(ext::QEC_MESSAGES_PER_SHOT),
        }
    }

    /// Checks a fault-free run: every shot decoded, no disagreement with PyMatching, the
    /// logical errors PyMatching makes, one FINAL_ROUND record per shot.
    fn check_clean(&self, run: &Run, o: &Outcome) {
        let shots = run.shots;
        let rounds = self.fx.split.len() as u32;
        let r = if run.rounds_per_message == 0 { rounds } else { run.rounds_per_message.min(rounds) };
        assert_eq!(o.messages_per_shot, rounds.div_ceil(r), "{run:?}");
        assert_eq!((o.shots_sent, o.shots_decoded), (shots, shots), "{run:?}");
        assert_eq!(o.disagreements, 0, "{run:?}");
        assert_eq!(o.logical_errors, self.fx.reference_errors(shots as usize), "{run:?}");
        assert_eq!((o.overflows, o.bad_answers, o.timeouts), (0, 0, 0), "{run:?}");
        assert_eq!(o.status, [0; 8], "{run:?}");
        assert_eq!(o.rounds_sent, shots * rounds);
        assert!(o.first_send > 0 && o.first_send <= o.last_send && o.last_send < o.last_correction);

        assert_eq!(o.records.len() as u32, shots * o.messages_per_shot, "one record per message");
        let finals: Vec<&CaptureRecord> = o.records.iter().filter(|r| r.flags & cf::FINAL_ROUND != 0).collect();
        assert_eq!(finals.len() as u32, shots);
        for rec in &o.records {
            let k = rec.request_id - run.first_request_id;
            let last = (k + 1).is_multiple_of(o.messages_per_shot);
            assert_eq!(rec.flags & cf::FINAL_ROUND != 0, last, "{rec:?}");
            assert_eq!(rec.rpc_status, 0, "{rec:?}");
            assert!(rec.round_trip() > 0 && rec.round_trip() < 10_000_000_000, "{rec:?}");
            let shot = (k / o.messages_per_shot) as usize % self.fx.shots();
            let want = if last {
                let logical = if self.fx.pred[shot] == self.fx.obs[shot] { cf::LOGICAL_OK } else { 0 };
                cf::HEADER_OK | cf::PAYLOAD_OK | cf::FINAL_ROUND | cf::MATCHES_REFERENCE | logical
            } else {
                cf::HEADER_OK | cf::PAYLOAD_OK
            };
            assert_eq!(rec.flags, want, "{rec:?}");
            assert_eq!(rec.result_len, if last { 24 } else { 0 });
        }
    }

    fn finish(mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.responder.take().expect("responder").join().expect("responder ran");
        self.sim.take().expect("sim").stop();
        assert!(report.errors.is_empty(), "responder saw: {:#?}", report.errors);
        report
    }
}

#[test]
fn closed_loop_d3_and_d5_agree_with_pymatching() {
    for (name, shots) in [("d3_p0.003", 5000), ("d5_p0.001", 3000)] {
        let mut b = Bench::new(name, Faults::default());
        let run = Run {
            shots,
            rounds_per_message: 1,
            interval_clocks: 0,
            max_outstanding: 1,
            first_request_id: 7,
            timeout_us: 1_000_000,
        };
        let o = b.run(&run);
        b.check_clean(&run, &o);
        // Closed loop: each answer is back before the next message leaves.
        let mut by_id = o.records.clone();
        by_id.sort_by_key(|r| r.request_id);
        for w in by_id.windows(2) {
            assert!(w[0].arrival_timestamp <= w[1].echoed_timestamp, "overlap: {w:?}");
        }
        let report = b.finish();
        assert_eq!(report.shots_decoded, shots);
    }
}

#[test]
fn fixed_cycle_with_1_2_and_all_rounds_per_message() {
    // d5 at p = 0.3% (the harder fixture), then d3, at one round per microsecond.
    for name in ["d5_p0.003", "d3_p0.001"] {
        let mut b = Bench::new(name, Faults::default());
        let mut first = 1u32;
        for rounds_per_message in [1, 2, 0] {
            let run = Run {
                shots: 1500,
                rounds_per_message,
                interval_clocks: 156, // 0.998 us per round
                max_outstanding: 0,
                first_request_id: first,
                timeout_us: 1_000_000,
            };
            let o = b.run(&run);
            b.check_clean(&run, &o);
            first += o.records.len() as u32;
            // How the sends line up with the cycle is a matter of timing, which a loaded CI
            // machine distorts (a late first send is followed by catch-up sends that are
            // on schedule but closer together); the schedule itself is unit-tested with a
            // fake clock in the player. Here: the run is clean and every round went out.
            assert!(o.last_send >= o.first_send, "{name} r={rounds_per_message}");
        }
        b.finish();
    }
}

#[test]
fn a_wrong_correction_and_an_overflow_are_caught() {
    let faults = Faults { flip_shot: Some(7), overflow_shot: Some(9), ..Faults::default() };
    let mut b = Bench::new("d3_p0.003", faults);
    let run = Run {
        shots: 300,
        rounds_per_message: 2,
        interval_clocks: 0,
        max_outstanding: 0,
        first_request_id: 1,
        timeout_us: 1_000_000,
    };
    let o = b.run(&run);
    assert_eq!((o.shots_decoded, o.disagreements, o.overflows), (300, 1, 1));
    // Flipping shot 7 turns a right answer wrong, or a wrong one right.
    let base = b.fx.reference_errors(300);
    let delta: i64 = if b.fx.pred[7] == b.fx.obs[7] { 1 } else { -1 };
    assert_eq!(i64::from(o.logical_errors), i64::from(base) + delta);
    let final_of = |shot: u32| {
        let id = run.first_request_id + shot * o.messages_per_shot + o.messages_per_shot - 1;
        *o.records.iter().find(|r| r.request_id == id).expect("record")
    };
    assert_eq!(final_of(7).flags & cf::MATCHES_REFERENCE, 0);
    assert_ne!(final_of(8).flags & cf::MATCHES_REFERENCE, 0);
    assert_ne!(final_of(9).flags & cf::OVERFLOW, 0);
    assert_eq!(final_of(8).flags & cf::OVERFLOW, 0);
    b.finish();
}

#[test]
fn dropped_messages_are_counted() {
    // d3 at one round per message: 4 messages per shot. Lose the second message of shot 3
    // (the decoder then answers the rest of that shot SYNDROMES_DROPPED) and the last
    // message of shot 10 (its correction never comes).
    let first = 100;
    let faults = Faults { drop: [Some(first + 3 * 4 + 1), Some(first + 10 * 4 + 3)], ..Faults::default() };
    let mut b = Bench::new("d3_p0.001", faults);
    let run = Run {
        shots: 50,
        rounds_per_message: 1,
        interval_clocks: 156,
        max_outstanding: 0,
        first_request_id: first,
        timeout_us: 20_000,
    };
    let o = b.run(&run);
    assert_eq!(o.timeouts, 2);
    assert_eq!((o.shots_sent, o.shots_decoded), (50, 48));
    assert_eq!(o.status[0], 2, "rounds 2 and 3 of shot 3");
    assert_eq!(o.status[status::SYNDROMES_DROPPED as usize], 2);
    assert_eq!(o.disagreements, 0);
    assert_eq!(o.records.len(), 50 * 4 - 2, "no record for a lost message");
    let dropped_final = first + 3 * 4 + 3;
    let rec = o.records.iter().find(|r| r.request_id == dropped_final).expect("record");
    assert_eq!(rec.flags, cf::HEADER_OK | cf::FINAL_ROUND);
    assert_eq!(rec.rpc_status, status::SYNDROMES_DROPPED);
    // The next shot starts at counter 0 and decodes again.
    let next = first + 4 * 4 + 3;
    let rec = o.records.iter().find(|r| r.request_id == next).expect("record");
    assert_ne!(rec.flags & cf::PAYLOAD_OK, 0);
    b.finish();
}

#[test]
fn binary_takes_the_qec_flags() {
    let bin = env!("CARGO_BIN_EXE_fpga-sim");
    let help = Process::new(bin).arg("--help").output().expect("runs");
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--qec-dets",
        "--qec-dem",
        "--qec-obs",
        "--qec-pred",
        "--qec-rounds-per-message",
        "--qec-detectors-per-round",
        "--qec-decoder-id",
        "--qec-syndrome-mapping-id",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}");
    }

    let dir = Path::new(FIXTURES).join("d3_p0.001");
    let file = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let base = ["--ecb", "127.0.0.2:0", "--roce", "127.0.0.2:0", "--spin", "shared"];
    // --qec-dets alone is incomplete.
    let out = Process::new(bin).args(base).args(["--qec-dets", &file("dets.b8")]).output().expect("runs");
    assert!(!out.status.success());
    // A file that does not fit the DEM is named.
    let out = Process::new(bin)
        .args(base)
        .args(["--qec-dets", &file("obs.01"), "--qec-dem", &file("model.dem")])
        .args(["--qec-obs", &file("obs.01"), "--qec-rounds-per-message", "all"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("obs.01") && stderr.contains("3-byte shots"), "{stderr}");
    let out = Process::new(bin).args(base).args(["--qec-rounds-per-message", "0"]).output().expect("runs");
    assert!(!out.status.success(), "0 is not a round count");

    // Good flags: the replay is loaded and readable over ECB.
    let (mut child, ecb, _) = spawn_ready(
        Process::new(bin)
            .args(base)
            .args(["--qec-dets", &file("dets.b8"), "--qec-dem", &file("model.dem")])
            .args(["--qec-obs", &file("obs.01"), "--qec-pred", &file("pred.01")])
            .args(["--qec-rounds-per-message", "2", "--exit-on-stdin-close"]),
    );
    let mut c = EcbClient::connect(ecb);
    assert_eq!(c.read(ext::QEC_CTRL), ext::QEC_ENABLE | ext::QEC_LOADED | ext::QEC_HAS_REFERENCE);
    assert_eq!(c.read(ext::QEC_LOADED_SHOTS), 5000);
    assert_eq!(c.read(ext::QEC_DETECTORS), 24);
    assert_eq!(c.read(ext::QEC_ROUNDS_PER_SHOT), 4);
    assert_eq!(c.read(ext::QEC_ROUNDS_PER_MESSAGE), 2);
    assert_eq!(c.read(ext::QEC_MESSAGES_PER_SHOT), 2);
    assert_eq!(c.read(ext::QEC_MAX_MESSAGE_BYTES), 24 + 32 + 2);
    drop(child.stdin.take());
    let status = child.wait().expect("exits");
    assert!(status.success());
}
