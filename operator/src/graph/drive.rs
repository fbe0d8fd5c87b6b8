//! Driving the peer through a run, as an HSB host does over ECB: configure its data plane,
//! program and start its traffic player, arm its capture, then watch until the run is over
//! (the count is captured, the duration has passed, SIGINT, a fault, the timeout, or no
//! answer for 10 s), stop the player, read the rest of the capture, and unconfigure the peer
//! (player stopped, VP mask cleared, data-plane registers zeroed: PROTOCOLS.md 2.2) whatever
//! ended the run, within a bounded time.
//!
//! The capture RAM is a ring (`hsb::reg::CAPTURE_RAM_RECORDS`): the records that arrived
//! since the last look are read every [`POLL`] while the run goes on and fed to a streaming
//! [`Analyzer`], so a run of any length keeps constant memory on both sides. Raw records are
//! kept only up to [`KEEP_RECORDS`] (the first ones, for `records.csv` and the QEC report)
//! and [`TAIL_RECORDS`] (the last ones, joined with the data path's own record ring). Records
//! the peer overwrote before they were read are counted as `uncaptured`.
//!
//! A QEC graph runs in shots: the peer's replay is turned on with the decoder's rounds per
//! message, each player window is one shot (its messages, one capture record each), the
//! syndrome cycle is the player interval per round (closed loop: one message in flight), and
//! the peer's QEC counters are read at the end.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rocelink_wire::hsb::{reg, CaptureRecord};

use super::compile::RunPlan;
use super::error::RunError;
use super::model::Stop;
use super::qec::{self, QecDriven, QecRun};
use crate::hsb::{DataPlaneConfig, EcbClient, EcbError, HsbHost, PeerStats, PlayerConfig, QecPlayerConfig};
use crate::latency::Analyzer;
use crate::peer::HOST_MAC;
use crate::stage::request_template;
use crate::tap::{Fault, TapStats};

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The peer sent every message and has every answer (or its timeout).
    Count,
    Duration,
    Interrupt,
    /// The peer was not done in time.
    Timeout,
    /// A flow or operator failed.
    Fault,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Count => "count",
            StopReason::Duration => "duration",
            StopReason::Interrupt => "interrupt",
            StopReason::Timeout => "timeout",
            StopReason::Fault => "fault",
        }
    }
}

/// Where the peer writes: our queue pair.
pub struct Target {
    pub qpn: u32,
    pub rkey: u32,
    pub buffer_addr: u64,
    pub slot_stride: u32,
    pub slots: u32,
    pub host_ip: Ipv4Addr,
    pub host_port: u16,
}

/// What the peer saw.
pub struct Driven {
    /// The first [`KEEP_RECORDS`] capture records, in arrival order.
    pub records: Vec<CaptureRecord>,
    /// The last [`TAIL_RECORDS`] capture records, in arrival order.
    pub tail: Vec<CaptureRecord>,
    /// Every capture record read, analysed (not yet finished: `sent` is below).
    pub analyzer: Analyzer,
    /// Answers the peer captured and overwrote before they were read.
    pub uncaptured: u64,
    pub stats: Option<PeerStats>,
    pub missing_extensions: Vec<&'static str>,
    /// Requests the peer sent.
    pub sent: u64,
    pub first_request_id: u32,
    /// Most requests in flight at once (1 in closed loop).
    pub window: u64,
    pub stopped_by: StopReason,
    pub elapsed: Duration,
    /// A QEC run's replay, settings and counters.
    pub qec: Option<QecDriven>,
    /// The peer's control channel failed during or at the end of the run.
    pub peer_lost: bool,
}

impl Driven {
    fn empty() -> Driven {
        Driven {
            records: Vec::new(),
            tail: Vec::new(),
            analyzer: Analyzer::new(1, 0, 0),
            uncaptured: 0,
            stats: None,
            missing_extensions: Vec::new(),
            sent: 0,
            first_request_id: 1,
            window: 1,
            stopped_by: StopReason::Count,
            elapsed: Duration::ZERO,
            qec: None,
            peer_lost: false,
        }
    }
}

/// UDP source port of the peer's frames (HSB hosts write 12288 into DP_PACKET_UDP_PORT).
const PEER_SRC_PORT: u16 = 12288;
/// Most requests a duration run plans for (request ids are 32-bit).
const MAX_RUN: u32 = 4_000_000_000;
/// Raw capture records kept from the start of a run (32 MiB).
pub const KEEP_RECORDS: usize = 1 << 20;
/// Raw capture records kept from the end of a run (4 MiB; the data path's record ring holds
/// the last 131,072 messages by default).
pub const TAIL_RECORDS: usize = 1 << 17;
/// A run without an explicit timeout gives up when no answer has come back for this long.
pub const STALL: Duration = Duration::from_secs(10);
/// How often the run's end conditions are checked.
const POLL: Duration = Duration::from_millis(20);
/// Capture records read between two reads of the count (the check for records overwritten
/// while they were read).
const READ_CHUNK: u32 = 4_096;
/// Most records read in one look at the capture before the run's end conditions are checked
/// again; a look that leaves records behind is followed by another without the sleep.
const LOOK_READ: u32 = 16_384;
/// Open loop keeps at most this many requests in flight (the player's window).
pub(crate) const OPEN_LOOP_WINDOW: u64 = 64;

/// Runs the peer through `run` against `target` (a QEC run when `qec` is given).
/// `failure` says whether the data path has died (a failed kernel): the run then stops with a
/// fault.
#[allow(clippy::too_many_arguments)]
pub fn drive(
    ecb: SocketAddrV4,
    target: &Target,
    run: &RunPlan,
    qec: Option<&QecRun>,
    progress: bool,
    fault: &Fault,
    failure: &dyn Fn() -> Option<String>,
    tap: Option<&TapStats>,
) -> Result<Driven, RunError> {
    let client = EcbClient::connect(ecb)
        .map_err(|e| RunError::Start { what: "the ECB client".into(), detail: e.to_string() })?;
    let mut host = HsbHost::new(client);
    host.check_version().map_err(RunError::Peer)?;
    let driven = drive_peer(&mut host, target, run, qec, progress, fault, failure, tap);
    // Whatever ended the run (its end, an error, SIGINT, a fault), the peer is left as it was
    // found: player stopped, VP mask cleared, data-plane registers zeroed. Bounded: a peer
    // that no longer answers costs at most CLEANUP_TIMEOUT per register, the first failure
    // ends the cleanup.
    let peer_gone = driven.as_ref().is_ok_and(|d| d.peer_lost);
    if !peer_gone {
        if let Err(e) = unconfigure(&mut host) {
            let what =
                format!("the peer could not be unconfigured at the end of the run (its player may still run): {e}");
            match &driven {
                Ok(_) => fault.raise(what),
                Err(_) => tracing::warn!("{what}"),
            }
        }
    }
    driven
}

/// Each ECB exchange of the cleanup waits this long for its reply, once.
const CLEANUP_TIMEOUT: Duration = Duration::from_millis(200);

/// Stops the player and undoes the data-plane configuration ([`HsbHost::unconfigure`]).
fn unconfigure(host: &mut HsbHost) -> Result<(), EcbError> {
    host.ecb().set_timeout(CLEANUP_TIMEOUT, 1).map_err(EcbError::from)?;
    host.stop_player()?;
    host.unconfigure(0, 0)
}

#[allow(clippy::too_many_arguments)]
fn drive_peer(
    host: &mut HsbHost,
    target: &Target,
    run: &RunPlan,
    qec: Option<&QecRun>,
    progress: bool,
    fault: &Fault,
    failure: &dyn Fn() -> Option<String>,
    tap: Option<&TapStats>,
) -> Result<Driven, RunError> {
    // The replay first: its largest message sizes the frames configured below.
    let qec_info = match qec {
        None => {
            // A peer left in QEC mode (by an earlier QEC run against a standalone peer)
            // would replay shots instead of the template; an FPGA without the registers
            // has no such mode.
            if host.qec_info()?.is_some_and(|i| i.enabled) {
                host.set_qec(false, 0)?;
            }
            None
        }
        Some(q) => {
            let info = host.set_qec(true, q.rounds_per_message)?.ok_or_else(|| {
                RunError::Peer(
                    "the peer has no QEC replay registers (QEC_CTRL): a QEC graph needs a peer in fpga-sim's QEC mode"
                        .into(),
                )
            })?;
            qec::check_peer(q, &info, target.slot_stride).map_err(RunError::Peer)?;
            Some(info)
        }
    };
    let frame_len = qec_info.map_or(run.size as u32, |i| i.max_message_bytes);
    host.configure(&DataPlaneConfig {
        vp: 0,
        data_plane: 0,
        qpn: target.qpn,
        rkey: target.rkey,
        buffer_addr: target.buffer_addr,
        page_stride: target.slot_stride,
        pages: target.slots,
        frame_len,
        host_mac: HOST_MAC,
        host_ip: target.host_ip,
        host_port: target.host_port,
        peer_src_port: PEER_SRC_PORT,
        packet_size: frame_len,
    })?;
    let first_request_id = 1;
    let response_timeout = Duration::from_millis(500);
    // Messages per shot (1 for echo runs, where every message is a "shot").
    let per_shot = qec_info.map_or(1, |i| i.messages_per_shot.max(1));
    let closed_loop = run.rate.is_none() && run.round_cycle_us.is_none();
    let (count, stop_after) = match run.stop {
        Stop::Count(n) => (n, None),
        Stop::Duration(d) => {
            let most = f64::from(MAX_RUN / per_shot);
            let per_second = match (run.rate, run.round_cycle_us, qec_info) {
                (Some(r), ..) => Some(r),
                (None, Some(us), Some(i)) if us > 0.0 => Some(1e6 / (us * f64::from(i.rounds_per_shot.max(1)))),
                _ => None,
            };
            let n = per_second.map_or(most, |r| (r * d * 1.05 + 1000.0).min(most));
            (n as u32, Some(Duration::from_secs_f64(d)))
        }
    };
    let mut interval_clocks = 0;
    if let Some(q) = qec {
        interval_clocks = run.round_cycle_us.map_or(0, |us| qec::cycle_clocks(us) as u32);
        host.program_qec_player(&QecPlayerConfig {
            shots: count,
            interval_clocks,
            closed_loop,
            first_request_id,
            response_timeout,
            peer_qpn: rocelink_wire::hsb::ext::DEFAULT_FPGA_QP,
        })?;
        host.arm_capture()?;
        host.start_qec_player()?;
        tracing::debug!(decoder = %q.decoder, shots = count, interval_clocks, "QEC run started");
    } else {
        let player = PlayerConfig {
            template: request_template(run.function_id, run.size),
            count,
            interval: run.rate.map_or(Duration::ZERO, |r| Duration::from_secs_f64(1.0 / r)),
            closed_loop,
            stamp: true,
            scramble: true,
            first_request_id,
            response_timeout,
            peer_qpn: rocelink_wire::hsb::ext::DEFAULT_FPGA_QP,
        };
        host.program_player(&player)?;
        host.arm_capture()?;
        host.start_player(&player)?;
    }
    // Capture records (messages) the run ends with.
    let messages = count.saturating_mul(per_shot);

    let started = Instant::now();
    // An explicit timeout is a hard limit; without one the run gives up only when no answer
    // has come back for STALL (a slow machine is not a dead peer).
    let deadline = run.timeout.map(|t| started + t);
    let (mut answered, mut last_answer) = (0u32, started);
    let window = if closed_loop { 1 } else { OPEN_LOOP_WINDOW };
    let mut shown = Progress::new(progress, messages, stop_after, window, per_shot, qec.is_some());
    let warmup = u64::from(run.warmup) * u64::from(per_shot);
    let mut capture = CaptureReader::new(Analyzer::new(first_request_id, u64::from(messages), warmup));
    // The peer's control channel failing during the run (the peer died, the link went) is a
    // fault of the run, not a failure to run: what was captured and read so far is reported.
    let mut peer_lost = false;
    // what the peer said it had sent, at the last progress read (for a report without it)
    let mut sent_seen = 0u64;
    macro_rules! ecb {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => {
                    peer_lost = true;
                    fault.raise(format!("peer control (ECB) failed during the run: {e}"));
                    break StopReason::Fault;
                }
            }
        };
    }
    let stopped_by = loop {
        if ecb!(host.capture_done()) {
            break StopReason::Count;
        }
        if crate::interrupted() {
            break StopReason::Interrupt;
        }
        if let Some(f) = failure() {
            fault.raise(f);
        }
        if fault.is_raised() {
            break StopReason::Fault;
        }
        let now = Instant::now();
        if stop_after.is_some_and(|d| now >= started + d) {
            break StopReason::Duration;
        }
        let n = ecb!(host.capture_count());
        if n != answered {
            (answered, last_answer) = (n, now);
        }
        if deadline.map_or(now.duration_since(last_answer) > STALL, |d| now > d) {
            break StopReason::Timeout;
        }
        let caught_up = ecb!(capture.read(host, n, LOOK_READ));
        if shown.due() {
            // Count and counters back to back, so `sent - answered` is what is in flight.
            let sent = ecb!(host.read_stats()).map_or(u64::from(n), |s| u64::from(s.sent));
            sent_seen = sent_seen.max(sent);
            shown.show(started.elapsed(), n, sent, capture.analyzer.rtt(), tap);
        }
        if caught_up {
            std::thread::sleep(POLL);
        }
    };
    shown.end();
    // After the loop too: a peer that went away (its process killed, its link down) ends the
    // run with a fault and the records read so far, not with an error that reports nothing.
    // What was sent is at least what the peer last said, and every request answered: a gap
    // before the last answer is a loss, not answers to requests never sent.
    let lost = |stopped_by: StopReason, capture: CaptureReader, host: &HsbHost, peer_lost: bool| {
        let sent =
            capture.analyzer.answered_upto().min(u64::from(messages)).max(capture.analyzer_records()).max(sent_seen);
        capture.into_driven(Driven {
            sent,
            stats: None,
            missing_extensions: host.missing_extensions.clone(),
            first_request_id,
            window,
            stopped_by,
            elapsed: started.elapsed(),
            qec: None,
            peer_lost,
            ..Driven::empty()
        })
    };
    if peer_lost {
        return Ok(lost(stopped_by, capture, host, true));
    }
    let finish = |host: &mut HsbHost,
                  capture: &mut CaptureReader|
     -> Result<(Option<PeerStats>, Option<QecDriven>, Duration), EcbError> {
        if stopped_by != StopReason::Count {
            host.stop_player()?;
            // The data plane finishes the run it was in and marks the capture done; wait for
            // it so the count read below is final.
            let until = Instant::now() + Duration::from_millis(500);
            while !host.capture_done()? && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let elapsed = started.elapsed();
        let n = host.capture_count()?;
        while !capture.read(host, n, LOOK_READ)? {}
        // Counters that all read 0 after a run that captured answers are no counters (a
        // peer without rocelink's STAT_* registers may read 0 with status OK).
        let stats = host.read_stats()?.filter(|s| !(*s == PeerStats::default() && n > 0));
        if stats.is_none() && !host.missing_extensions.contains(&"counters") {
            host.missing_extensions.push("counters");
        }
        let qec = match qec_info {
            Some(info) => Some(QecDriven { info, counters: host.read_qec_counters()?, interval_clocks, closed_loop }),
            None => None,
        };
        Ok((stats, qec, elapsed))
    };
    let (stats, qec, elapsed) = match finish(host, &mut capture) {
        Ok(x) => x,
        Err(e) => {
            fault.raise(format!("peer control (ECB) failed at the end of the run: {e}"));
            return Ok(lost(
                if stopped_by == StopReason::Count { StopReason::Fault } else { stopped_by },
                capture,
                host,
                true,
            ));
        }
    };
    if stopped_by == StopReason::Timeout {
        tracing::warn!("the peer did not finish in time; reporting what it captured");
    }
    // A peer without the counters extension (a real FPGA) does not say how many it sent: a
    // finished run sent them all; of a run cut short we know only the answers.
    let sent = stats
        .map_or(if stopped_by == StopReason::Count { u64::from(messages) } else { capture.analyzer_records() }, |s| {
            u64::from(s.sent)
        });
    Ok(capture.into_driven(Driven {
        stats,
        missing_extensions: host.missing_extensions.clone(),
        sent,
        first_request_id,
        window,
        stopped_by,
        elapsed,
        qec,
        ..Driven::empty()
    }))
}

/// Reads the peer's capture ring as the run goes on (the module's doc): every record into the
/// analyzer, the first [`KEEP_RECORDS`] and the last [`TAIL_RECORDS`] kept as they are.
struct CaptureReader {
    /// The next record to read (counted from the arm, as CAPTURE_COUNT counts).
    next: u32,
    uncaptured: u64,
    analyzer: Analyzer,
    kept: Vec<CaptureRecord>,
    tail: VecDeque<CaptureRecord>,
}

impl CaptureReader {
    fn new(analyzer: Analyzer) -> CaptureReader {
        CaptureReader { next: 0, uncaptured: 0, analyzer, kept: Vec::new(), tail: VecDeque::new() }
    }

    /// Records read (blank ones included).
    fn analyzer_records(&self) -> u64 {
        u64::from(self.next) - self.uncaptured
    }

    /// Reads records up to `count` (the CAPTURE_COUNT just read), at most `most` of them;
    /// true when it caught up. Records the ring overwrote before or while they were read are
    /// counted as uncaptured: the count is read again after each chunk, and a record that was
    /// no longer among the ring's last `CAPTURE_RAM_RECORDS` then is not trusted.
    fn read(&mut self, host: &mut HsbHost, count: u32, most: u32) -> Result<bool, EcbError> {
        let ring = reg::CAPTURE_RAM_RECORDS;
        let stop = count.min(self.next.saturating_add(most));
        while self.next < stop {
            if count - self.next > ring {
                self.uncaptured += u64::from(count - ring - self.next);
                self.next = count - ring;
            }
            let upto = stop.min(self.next + READ_CHUNK);
            let records = read_capture_range(host, self.next, upto)?;
            let now = host.capture_count()?;
            let intact_from = now.saturating_sub(ring);
            for (i, r) in (self.next..upto).zip(records) {
                if i < intact_from {
                    self.uncaptured += 1;
                } else {
                    self.take(r);
                }
            }
            self.next = upto;
        }
        Ok(self.next >= count)
    }

    fn take(&mut self, r: CaptureRecord) {
        self.analyzer.push(&r);
        if self.kept.len() < KEEP_RECORDS {
            self.kept.push(r);
        }
        if self.tail.len() == TAIL_RECORDS {
            self.tail.pop_front();
        }
        self.tail.push_back(r);
    }

    /// `d` with what was read.
    fn into_driven(self, d: Driven) -> Driven {
        Driven { records: self.kept, tail: self.tail.into(), analyzer: self.analyzer, uncaptured: self.uncaptured, ..d }
    }
}

/// Capture records `from..to`.
fn read_capture_range(host: &mut HsbHost, from: u32, to: u32) -> Result<Vec<CaptureRecord>, EcbError> {
    if to <= from {
        return Ok(Vec::new());
    }
    let addrs: Vec<u32> = (from..to)
        .flat_map(|i| (0..CaptureRecord::WORDS as u32).map(move |w| CaptureRecord::address(i) + 4 * w))
        .collect();
    let mut words = Vec::with_capacity(addrs.len());
    host.ecb().read_block(&addrs, &mut words)?;
    Ok(words
        .chunks_exact(CaptureRecord::WORDS)
        .map(|c| CaptureRecord::from_words(&[c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// The progress line on stderr: rewritten in place a few times a second on a terminal, one
/// line a second otherwise.
struct Progress {
    on: bool,
    tty: bool,
    every: Duration,
    last: Instant,
    count: u32,
    duration: Option<Duration>,
    /// Requests that may be in flight (not yet lost).
    window: u64,
    /// Messages per shot, for QEC runs.
    per_shot: u32,
    qec: bool,
    printed: bool,
}

impl Progress {
    fn new(on: bool, count: u32, duration: Option<Duration>, window: u64, per_shot: u32, qec: bool) -> Progress {
        let tty = std::io::stderr().is_terminal();
        let every = if tty { Duration::from_millis(250) } else { Duration::from_secs(1) };
        Progress {
            on,
            tty,
            every,
            last: Instant::now(),
            count,
            duration,
            window,
            per_shot: per_shot.max(1),
            qec,
            printed: false,
        }
    }

    fn due(&self) -> bool {
        self.on && self.last.elapsed() >= self.every
    }

    fn show(&mut self, elapsed: Duration, answered: u32, sent: u64, rtt: &Histogram<u64>, tap: Option<&TapStats>) {
        self.last = Instant::now();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut line = match self.duration {
            Some(d) => format!("{:.1}/{:.1} s  {answered} answered", secs, d.as_secs_f64()),
            None => format!("{answered}/{} answered", self.count),
        };
        if self.qec {
            line += &format!(" (~{} shots)", answered / self.per_shot);
        }
        // Sent but not answered, beyond what may still be in flight: lost (or very late).
        line += &format!(
            "  {:.0} msg/s  lost {}",
            f64::from(answered) / secs,
            sent.saturating_sub(u64::from(answered) + self.window)
        );
        if !rtt.is_empty() {
            line += &format!(
                "  rtt p50 {:.2} us  p99 {:.2} us",
                us(rtt.value_at_quantile(0.5)),
                us(rtt.value_at_quantile(0.99))
            );
        }
        if let Some(h) = tap.and_then(|t| t.loop_ns.lock().ok()).filter(|h| !h.is_empty()) {
            line += &format!("  loop p50 {:.2} us", us(h.value_at_quantile(0.5)));
        }
        let mut err = std::io::stderr().lock();
        let _ = if self.tty { write!(err, "\r  {line}   ") } else { writeln!(err, "  {line}") };
        self.printed = true;
    }

    fn end(&self) {
        if self.on && self.tty && self.printed {
            eprintln!();
        }
    }
}
