//! Running a compiled graph: the lifecycle `echo::run_echo` had, for any graph.
//!
//! Start, in order: memory and host operators (built first, so a file that cannot be written
//! fails the run before anything runs), the peer and its wire, the NIC engine, the backend
//! (`spawn_backend` with the fused chain), the host operator threads and the tap reader.
//! Then the peer is driven until the count, the duration, SIGINT, a fault or the timeout.
//! A QEC graph (`graph::qec`) starts the peer with its replay, is driven in shots, and its
//! report gets a `qec` section.
//!
//! Stop: the data path first (backend, with a timeout) so the tap sees every message it
//! answered, then the tap reader and the host operators (they end when their inputs end),
//! the NIC engine, the peer, each within a timeout. A thread that does not stop in time is
//! left behind and named in the report's `problems`; nothing waits forever. Then the capture
//! is analysed, host operators write their files, and the JSON report is written.
//!
//! A start failure stops what was started, in reverse, and returns the error.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;
use rocelink_wire::hsb::ext::DEFAULT_HOST_QP;

use super::compile::{NicPlan, Plan};
use super::drive::{drive, StopReason, Target};
pub use super::error::RunError;
use crate::backend::{spawn_backend, LoopConfig, RunningBackend};
use crate::env::Environment;
use crate::gpu::kernels::KernelOptions;
use crate::latency::{Analysis, Summary};
use crate::mem::SharedMem;
use crate::nic::{DoorbellMode, MrTable, NicCounters, NicEngine, NicEngineConfig, NicOptions, QpRegions, SoftNic};
use crate::ops::host::{self, HostThread};
use crate::ops::{Build, Finished, HostContext, HostOperator, Live, Message, Outputs};
use crate::peer::{self, RunningPeer};
pub use crate::report::{summary_text, FlowReport, RunReport, TapReport};
use crate::rings::{QpMemory, QpSizes};
use crate::settings::PeerMode;
use crate::tap::{self, Fault, FlowCounters, TapReader, TapStats};

/// How long each part gets to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// A progress line on stderr a few times a second.
    pub progress: bool,
    /// How the transceiver loop rings sends and the NIC watches for them (the proxy word by
    /// default; `Mmio` builds the GPU kernel with `RL_DOORBELL_MMIO`). An experiment switch:
    /// the command line takes it from `ROCELINK_DOORBELL`.
    pub doorbell: DoorbellMode,
    /// How a GPU backend's persistent kernel is built (the command line takes it from
    /// `ROCELINK_KERNEL_THREADS`, `ROCELINK_KERNEL_DEFINES`, `ROCELINK_TEST_STALL_KERNEL`).
    pub kernel: KernelOptions,
}

/// The exit status of `rocelink run` for `r`: 1 for a fault or a problem, 130 when
/// interrupted, 2 when messages were lost, duplicated or corrupted or the answers could not be
/// verified ([`RunReport::not_verified`]), else 0.
pub fn exit_code(r: &RunReport) -> u8 {
    if r.fault.is_some() || !r.problems.is_empty() {
        1
    } else if r.interrupted {
        130
    } else if !r.is_clean() || !r.not_verified.is_empty() {
        2
    } else {
        0
    }
}

/// Why a run's answers are not shown to have come back (empty: they are). A run passes only
/// on evidence: answers in the peer's capture, and the peer's own count of what it sent.
pub fn verdict(r: &RunReport, analysis: &Analysis, stopped_by: StopReason) -> Vec<String> {
    let mut why = Vec::new();
    let c = &r.counts;
    if stopped_by == StopReason::Timeout {
        why.push("the peer did not finish the run in time (stopped by the timeout)".to_string());
    }
    if analysis.capture_missing() {
        why.push(format!(
            "the peer's capture RAM holds no records ({} read, all zeros): it lacks rocelink's capture layout, so its round trips and answer checks are missing{}",
            analysis.records,
            r.host_side_ns.as_ref().map_or(String::new(), |h| format!("; the host side measured request in -> answer out p50 {:.2} us over {} messages", h.p50 as f64 / 1000.0, h.count))
        ));
    } else if c.received == 0 && !r.interrupted {
        why.push(if c.sent == 0 {
            "the peer sent no request".to_string()
        } else {
            format!("no answer came back: 0 of {} requests answered", c.sent)
        });
    }
    if r.peer.is_none() {
        why.push("the peer has no counters (rocelink's STAT_* registers, absent or reading 0): how many requests it sent is not known, so losses are not counted".into());
    }
    why
}

/// Request in (the NIC wrote its CQE) -> answer out (the NIC sent its frame), per message of
/// the data path's record ring whose answer the send trace holds: the host's own share of the
/// round trip, on the host's clock.
fn host_side(stamps: &[crate::abi::rl_msg_timestamp], trace: &crate::nic::SendTrace) -> Option<Summary> {
    let mut h = crate::latency::new_histogram();
    for s in stamps {
        if let Some(sent) = trace.sent_ns(s.sq_index) {
            if sent >= s.nic_cqe_ns {
                let _ = h.record((sent - s.nic_cqe_ns).clamp(1, h.high()));
            }
        }
    }
    (!h.is_empty()).then(|| Summary::of(&h))
}

/// Joins `t`, waiting until `deadline`.
fn join_by<T>(t: JoinHandle<T>, deadline: Instant) -> Result<T, &'static str> {
    while !t.is_finished() {
        if Instant::now() > deadline {
            return Err("did not stop in time (left running)");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    t.join().map_err(|_| "panicked")
}

/// Runs `stop` on a helper thread, waiting at most `timeout` (for stops without a timeout of
/// their own).
fn stop_within(what: &str, timeout: Duration, stop: impl FnOnce() + Send + 'static) -> Result<(), String> {
    let t = std::thread::Builder::new()
        .name("rocelink-stop".into())
        .spawn(stop)
        .map_err(|e| format!("{what}: cannot stop: {e}"))?;
    join_by(t, Instant::now() + timeout).map_err(|e| format!("{what} {e}"))
}

/// What is running, stopped in reverse.
#[derive(Default)]
struct Running {
    peer: Option<RunningPeer>,
    engine: Option<NicEngine>,
    backend: Option<Box<dyn RunningBackend>>,
    tap: Option<TapReader>,
    host: Vec<(String, HostThread)>,
}

impl Running {
    /// Stops everything (data path, tap and host operators, NIC, peer), each within
    /// [`STOP_TIMEOUT`]; returns the host operators that ended and the problems.
    fn stop(&mut self, problems: &mut Vec<String>) -> Vec<(String, Box<dyn HostOperator>)> {
        if let Some(b) = self.backend.take() {
            let name = b.name();
            if let Err(e) = b.stop(STOP_TIMEOUT) {
                problems.push(format!("backend {name}: {e}"));
            }
        }
        if let Some(mut t) = self.tap.take() {
            t.finish();
            if let Some(th) = t.take_thread() {
                if let Err(e) = join_by(th, Instant::now() + STOP_TIMEOUT) {
                    problems.push(format!("the tap reader {e}"));
                }
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut ops = Vec::new();
        for (name, t) in self.host.drain(..) {
            match join_by(t, deadline) {
                Ok(op) => ops.push((name, op)),
                Err(e) => problems.push(format!("operator `{name}` {e}")),
            }
        }
        if let Some(e) = self.engine.take() {
            if let Err(e) = stop_within("the NIC engine", STOP_TIMEOUT, move || e.stop()) {
                problems.push(e);
            }
        }
        if let Some(p) = self.peer.take() {
            let what = p.describe();
            // A peer process gets 2 s after SIGTERM before it is killed; allow for that.
            if let Err(e) = stop_within(what, STOP_TIMEOUT + Duration::from_secs(1), move || p.stop()) {
                problems.push(e);
            }
        }
        ops
    }
}

/// `nic: Verbs(..)`: without the `verbs` feature, what it needs; with it, the device brought
/// up as far as this version goes (`nic::verbs`), then what is missing. Always an error: the
/// transceiver loop does not drive a ConnectX's rings yet.
fn verbs_nic(plan: &Plan, device: &str, port: u8, gid_index: u32) -> RunError {
    let asked = format!("nic: Verbs(device: \"{device}\", port: {port})");
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (plan, gid_index);
        RunError::Config(format!("{asked} needs rocelink built with the `verbs` feature (`cargo build --release --features verbs`: rdma-core's development files), and a ConnectX NIC; this build has only the software NIC (use `nic: Soft(wire: Udp())`)"))
    }
    #[cfg(feature = "verbs")]
    {
        let ip = match &plan.peer {
            PeerMode::Remote { roce, .. } => *roce.ip(),
            _ => {
                return RunError::Config(format!(
                    "{asked}: the verbs NIC talks to an FPGA on the network: `peer: Fpga(address: ..)`"
                ))
            }
        };
        let Ok(gid_index) = u8::try_from(gid_index) else {
            return RunError::Config(format!(
                "{asked}: GID index {gid_index} is past what a queue pair's route can name (0..=255)"
            ));
        };
        let peer = crate::nic::verbs::Peer { qpn: rocelink_wire::hsb::ext::DEFAULT_FPGA_QP, ip, psn: 0 };
        let stride = plan.slot_stride() as usize;
        let mut buffer = vec![0u8; stride * plan.transceiver.1.slots as usize];
        match crate::nic::verbs::bring_up(device, port, gid_index, peer, &mut buffer) {
            Err(e) => RunError::Config(format!("{asked}: {e}")),
            Ok(done) => RunError::Config(format!(
                "{asked}: brought up {done}; this version stops there: the transceiver loop does not drive a ConnectX's rings yet (the GPU kernel would write them and ring the UAR through rl_dev_verbs_ring_db_mmio): use `nic: Soft(wire: Udp(..))`"
            )),
        }
    }
}

/// Runs `plan` to its end and reports what it measured.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<RunReport, RunError> {
    if let NicPlan::Verbs { device, port, gid_index } = &plan.nic {
        return Err(verbs_nic(plan, device, *port, *gid_index));
    }
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    let backend = plan
        .backend
        .backend
        .clone()
        .map_err(|why| RunError::Start { what: "the backend".into(), detail: format!("GPU backend: {why}") })?;
    if let Some(why) = &plan.backend.fallback {
        // The one line saying why (shown at the default log level: a user who expected the
        // GPU learns at once why it is not used).
        tracing::warn!("backend Auto: using the CPU backend because {why}");
    }
    let spin = plan.spin_mode();
    let date_utc = crate::env::utc_timestamp(SystemTime::now());

    // Memory: one slot per page of the peer's buffer, the tap ring sized by the transceiver.
    let tc = plan.transceiver.1;
    let stride = plan.slot_stride();
    let sizes = QpSizes {
        rx_slots: tc.slots,
        rx_slot_stride: stride,
        tx_slot_stride: stride.max(64),
        timestamp_entries: tc.tap_ring,
        ..QpSizes::default()
    };
    let q = QpMemory::new(sizes, SharedMem::new).map_err(RunError::Config)?;
    let QpRegions { table: mrs, rx: rx_mr, tx: tx_mr } = MrTable::for_queue_pair(&q);
    let counters = Arc::new(NicCounters::default());
    let fault = Fault::default();
    let tap_stats = Arc::new(TapStats::default());

    // Host operators are built before anything runs.
    let live = Live::new(q.clone(), counters.clone(), tap_stats.clone());
    let mut built: Vec<Box<dyn HostOperator>> = Vec::new();
    for h in &plan.host_ops {
        let Build::Host(build) = h.decl.build else { continue };
        let ctx = HostContext {
            name: h.name.clone(),
            graph: plan.graph.name.clone(),
            out_dir: plan.out_dir.clone(),
            live: live.clone(),
        };
        built.push(
            build(&h.params, &ctx).map_err(|detail| RunError::Start {
                what: format!("operator `{}` ({})", h.name, h.decl.kind),
                detail,
            })?,
        );
    }

    let mut running = Running::default();
    let fail = |running: &mut Running, e: RunError| -> RunError {
        let mut problems = Vec::new();
        running.stop(&mut problems);
        for p in problems {
            tracing::error!("while stopping after a failed start: {p}");
        }
        e
    };

    // 1. The peer and its wire.
    let NicPlan::Soft { wire, bind } = plan.nic else {
        return Err(RunError::Config("the verbs NIC has no peer wire to start".into()));
    };
    let pw =
        peer::start(wire, bind, &plan.peer, plan.qec.as_ref().and_then(|q| q.replay.as_ref()), plan.cores.peer, spin)?;
    let attrs = pw.host_qp();
    running.peer = Some(pw.peer);
    // SIGINT from here on ends the run as an interrupt with its report: the drive below sees
    // it at its first look, stops and unconfigures the peer.

    // 2. The NIC, connected to the peer's QP.
    let mut nic = SoftNic::new(
        attrs,
        NicOptions { doorbell: opts.doorbell, ..NicOptions::default() },
        mrs,
        q.clone(),
        counters.clone(),
    );
    // when each answer left, for the report's breakdown (read after the engine stopped)
    let send_trace = std::sync::Arc::new(crate::nic::SendTrace::new(crate::nic::trace::DEFAULT_ENTRIES));
    nic.set_send_trace(send_trace.clone());
    match NicEngine::spawn(nic, pw.nic_link, NicEngineConfig { core: plan.cores.nic, spin }) {
        Ok(e) => running.engine = Some(e),
        Err(e) => {
            return Err(fail(&mut running, RunError::Start { what: "the NIC engine".into(), detail: e.to_string() }))
        }
    }

    // 3. The backend, running the fused chain.
    let chain: Vec<_> = plan.chain.iter().map(|(_, s)| s.clone()).collect();
    match spawn_backend(
        &backend,
        q.clone(),
        &chain,
        LoopConfig {
            qpn: DEFAULT_HOST_QP,
            tx_lkey: tx_mr.lkey,
            core: plan.cores.backend,
            spin,
            doorbell: opts.doorbell,
            kernel: opts.kernel.clone(),
        },
    ) {
        Ok(b) => running.backend = Some(b),
        Err(e) => {
            return Err(fail(&mut running, RunError::Start { what: "the backend".into(), detail: e.to_string() }))
        }
    }

    // 4. Host operators and the tap: one bounded channel per flow.
    let mut inputs: Vec<Vec<(&'static str, Receiver<Message>)>> =
        (0..plan.host_ops.len()).map(|_| Vec::new()).collect();
    let mut outputs: Vec<Outputs> = (0..plan.host_ops.len()).map(|_| Outputs::default()).collect();
    let mut tap_outs = Vec::new();
    let mut flow_counters: Vec<Arc<FlowCounters>> = Vec::new();
    let op_index = |name: &str| plan.host_ops.iter().position(|h| h.name == name);
    for f in &plan.host_flows {
        let (tx, rx) = tap::flow(f.name(), f.capacity, f.policy, fault.clone());
        flow_counters.push(tx.counters.clone());
        if let Some(i) = op_index(&f.to.0) {
            inputs[i].push((f.to.1, rx));
        }
        if f.from_tap {
            tap_outs.push(tx);
        } else if let Some(i) = op_index(&f.from.0) {
            outputs[i].add(f.from.1, tx);
        }
    }
    for (((h, op), ins), outs) in plan.host_ops.iter().zip(built).zip(inputs).zip(outputs) {
        match host::spawn(&h.name, op, ins, outs, h.core, fault.clone()) {
            Ok(t) => running.host.push((h.name.clone(), t)),
            Err(e) => {
                return Err(fail(
                    &mut running,
                    RunError::Start { what: format!("operator `{}`", h.name), detail: e.to_string() },
                ))
            }
        }
    }
    let tapped = !tap_outs.is_empty();
    if tapped {
        let on_overflow = plan
            .host_flows
            .iter()
            .any(|f| f.from_tap && f.policy == super::model::Policy::Fault)
            .then(|| fault.clone());
        match TapReader::spawn(q.clone(), tap_outs, plan.host_core, on_overflow, tap_stats.clone()) {
            Ok(t) => running.tap = Some(t),
            Err(e) => {
                return Err(fail(
                    &mut running,
                    RunError::Start { what: "the tap reader".into(), detail: e.to_string() },
                ))
            }
        }
    }

    // 5. The run.
    let target = Target {
        qpn: DEFAULT_HOST_QP,
        rkey: rx_mr.rkey,
        buffer_addr: rx_mr.addr,
        slot_stride: stride,
        slots: tc.slots,
        host_ip: pw.host_ip,
        host_port: pw.host_port,
    };
    let backend_failure = || {
        running
            .backend
            .as_ref()
            .and_then(|b| b.failure())
            .map(|f| format!("the transceiver loop failed during the run: {f}"))
    };
    let driven = drive(
        pw.ecb,
        &target,
        &plan.run,
        plan.qec.as_ref(),
        opts.progress,
        &fault,
        &backend_failure,
        tapped.then_some(&*tap_stats),
    );

    // 6. Stop, in reverse.
    let backend_processed = live.processed();
    let backend_dropped = live.dropped();
    let mut problems = Vec::new();
    let mut ops = running.stop(&mut problems);
    let nic_stats = counters.snapshot();
    let driven = driven?;

    // 7. What it measured.
    // The round trip split by the data path's own timestamps (the ring's last records, read
    // now that the data path has stopped), where the peer's clock is this host's.
    let same_host_clock = !matches!(plan.peer, PeerMode::Remote { .. });
    let ring = ring_records(&q, backend_processed);
    // A QEC run's warm-up is in shots; the per-message figures leave out the same messages.
    let per_shot = driven.qec.as_ref().map_or(1, |d| u64::from(d.info.messages_per_shot.max(1)));
    let warmup_messages = u64::from(plan.run.warmup) * per_shot;
    let breakdown_ns = same_host_clock.then(|| {
        crate::latency::breakdown(&driven.tail, &ring, driven.first_request_id, warmup_messages, Some(&send_trace))
    });
    let mut analysis = driven.analyzer.clone().finish(driven.sent, driven.uncaptured);
    let qec_report = match (&plan.qec, &driven.qec) {
        (Some(q), Some(d)) => {
            Some(super::qec::report(q, d, &driven.records, driven.first_request_id, plan.run.warmup, &ring))
        }
        _ => None,
    };
    let in_flight_at_stop = if matches!(driven.stopped_by, StopReason::Count) {
        0
    } else {
        unanswered_tail(&driven.tail, driven.sent, driven.first_request_id, driven.window)
    };
    analysis.counts.lost -= in_flight_at_stop.min(analysis.counts.lost);
    if analysis.capture_missing() {
        // Without records nothing is known of the answers: not lost, unverified (the verdict).
        analysis.counts.lost = 0;
    }
    let payload_size = driven.qec.as_ref().map_or(plan.run.size, |d| d.info.max_message_bytes as usize);
    let mut env = Environment::here(&backend.to_string(), &pw.wire, payload_size, &spin.to_string());
    if backend.gpu().is_some() {
        env.gpu = Some(backend.to_string());
    }
    let pin = |c: Option<usize>| c.map_or("unpinned".to_string(), |c| c.to_string());
    env.pinned.insert("nic".into(), pin(plan.cores.nic));
    env.pinned.insert("backend".into(), pin(plan.cores.backend));
    env.pinned.insert("peer".into(), pin(plan.cores.peer));
    for h in &plan.host_ops {
        env.pinned.insert(format!("op:{}", h.name), pin(h.core));
    }
    for (name, core) in plan.settle_workers() {
        env.pinned.insert(format!("settle:{name}"), pin(core));
    }
    let tap = tapped.then(|| TapReport {
        records: tap_stats.records.load(std::sync::atomic::Ordering::Relaxed),
        overflow: tap_stats.overflow.load(std::sync::atomic::Ordering::Relaxed),
        loop_ns: tap_stats.loop_ns.lock().map(|h| Summary::of(&h)).unwrap_or_default(),
        flows: plan
            .host_flows
            .iter()
            .zip(&flow_counters)
            .map(|(f, c)| FlowReport {
                flow: f.name(),
                capacity: f.capacity,
                policy: f.policy.as_str(),
                offered: c.offered.load(std::sync::atomic::Ordering::Relaxed),
                dropped: c.dropped.load(std::sync::atomic::Ordering::Relaxed),
            })
            .collect(),
    });
    let mut report = RunReport {
        counts: analysis.counts,
        rtt_ns: Summary::of(&analysis.rtt),
        nic_drops: nic_stats.drops.clone(),
        nic: nic_stats,
        peer: driven.stats,
        backend_processed,
        backend_dropped,
        breakdown_ns,
        peer_missing_extensions: driven.missing_extensions.clone(),
        mode: if plan.run.rate.is_some() || plan.run.round_cycle_us.is_some() {
            "open-loop".into()
        } else {
            "closed-loop".into()
        },
        rate: plan.run.rate,
        rate_achieved: plan.run.rate.and_then(|r| crate::report::OpenLoopRate::of(r, analysis.answers_per_us())),
        warmup: plan.run.warmup,
        env,
        graph: plan.graph.name.clone(),
        graph_file: plan.graph.file.clone(),
        date_utc,
        stage_chain: plan.chain.iter().map(|(n, _)| n.clone()).collect(),
        stopped_by: driven.stopped_by.as_str().into(),
        interrupted: driven.stopped_by == StopReason::Interrupt,
        in_flight_at_stop,
        elapsed_s: driven.elapsed.as_secs_f64(),
        tap,
        fault: fault.reason(),
        not_verified: Vec::new(),
        host_side_ns: host_side(&ring, &send_trace),
        problems: Vec::new(),
        files: Vec::new(),
        qec: qec_report,
        analysis: None,
    };

    report.not_verified = verdict(&report, &analysis, driven.stopped_by);

    // 8. Files: host operators, then the JSON report.
    let same_clock =
        matches!(plan.peer, PeerMode::InProcess { .. } | PeerMode::Process { .. }) && backend.loop_on_cpu();
    {
        let reaction = reaction_samples(&driven.records, driven.first_request_id, per_shot, u64::from(plan.run.warmup));
        let finished = Finished {
            report: &report,
            capture: &driven.records,
            first_request_id: driven.first_request_id,
            rtt_samples: &analysis.samples,
            qec_reaction_samples: &reaction,
            same_clock,
            nic_clock: same_host_clock,
            send_trace: Some(&send_trace),
        };
        let mut files = Vec::new();
        for (name, op) in ops.iter_mut() {
            match op.finish(&finished) {
                Ok(f) => files.extend(f),
                Err(e) => problems.push(format!("operator `{name}`: {e}")),
            }
        }
        report.files = files;
    }
    report.problems = problems;
    if let Some(json) = &plan.json {
        match crate::report::write_json(&report, json) {
            Ok(()) => report.files.push(json.clone()),
            Err(e) => report.problems.push(format!("writing {}: {e}", json.display())),
        }
    }
    report.analysis = Some(analysis);
    Ok(report)
}

/// The data path's per-message records still in the ring (the last `timestamp_entries` of
/// `processed`), oldest first. Only after the data path stopped.
fn ring_records(q: &QpMemory, processed: u64) -> Vec<crate::abi::rl_msg_timestamp> {
    let l = q.layout;
    let entries = u64::from(l.sizes.timestamp_entries);
    if entries == 0 {
        return Vec::new();
    }
    let first = processed.saturating_sub(entries);
    (first..processed)
        .map(|i| {
            q.mem.read_struct(
                l.timestamps + (i % entries) as usize * std::mem::size_of::<crate::abi::rl_msg_timestamp>(),
            )
        })
        .collect()
}

/// A QEC run's reaction latencies (ns) in arrival order, for plots: the round trips of the
/// well-formed answers to each shot's final message, warm-up shots left out.
fn reaction_samples(records: &[rocelink_wire::hsb::CaptureRecord], first: u32, per_shot: u64, warmup: u64) -> Vec<u64> {
    use rocelink_wire::hsb::capture_flags as cf;
    let want = cf::FINAL_ROUND | cf::PAYLOAD_OK;
    records
        .iter()
        .filter(|r| {
            r.flags & want == want
                && r.flags & cf::DUPLICATE == 0
                && u64::from(r.request_id.wrapping_sub(first)) / per_shot >= warmup
        })
        .map(|r| r.round_trip().max(1))
        .collect()
}

/// Requests among the last `window` sent that have no answer: in flight when a run was cut
/// short, not lost.
fn unanswered_tail(records: &[rocelink_wire::hsb::CaptureRecord], sent: u64, first: u32, window: u64) -> u64 {
    let from = sent.saturating_sub(window);
    let answered: HashSet<u64> = records
        .iter()
        .map(|r| u64::from(r.request_id.wrapping_sub(first)))
        .filter(|&i| i >= from && i < sent)
        .collect();
    (sent - from) - answered.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocelink_wire::hsb::CaptureRecord;

    #[test]
    fn only_the_unanswered_tail_counts_as_in_flight() {
        let rec = |id| CaptureRecord { request_id: id, ..Default::default() };
        // Sent 10 (ids 1..=10); answered all but 4 and 10; window 1: only 10 was in flight.
        let records: Vec<_> = [1, 2, 3, 5, 6, 7, 8, 9].into_iter().map(rec).collect();
        assert_eq!(unanswered_tail(&records, 10, 1, 1), 1);
        assert_eq!(unanswered_tail(&records, 10, 1, 64), 2);
        assert_eq!(unanswered_tail(&[], 0, 1, 64), 0);
    }
}
