//! The CPU execution backend: the transceiver loop in Rust on a pinned thread, over the same
//! rings and protocol as the GPU kernel (DESIGN.md, "Execution backends"):
//! poll the receive CQ, run the stage on the slot, post the SEND (inline when small), ring the
//! doorbell, re-post the receive WQE, stamp the message.
//!
//! It stops through the same control block as the GPU kernel (`rl_control.exit_flag`, read
//! every `RL_EXIT_POLL_EVERY` polls, idle or not, and in a wait for send-queue room) and
//! publishes the same heartbeat.

use std::sync::atomic::Ordering::{Relaxed, Release};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rocelink_link::{affinity, clock::monotonic_ns, Backoff, SpinMode};

use crate::abi::{self, rl_msg_timestamp};
use crate::gpu::kernels::KernelOptions;
use crate::nic::DoorbellMode;
use crate::rings::QpMemory;
use crate::stage::{Outcome, Stage};
use crate::verbs::HostVerbs;

/// How a transceiver loop runs, whichever backend runs it (the CPU loop, the launch baseline,
/// the persistent kernel).
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Its queue pair, and the key of the memory it sends from.
    pub qpn: u32,
    pub tx_lkey: u32,
    /// The core and spin of the CPU loop's thread (the kernel spins on the GPU).
    pub core: Option<usize>,
    pub spin: SpinMode,
    /// How the loop rings sends (the NIC must answer to the same, `NicOptions::doorbell`);
    /// for the GPU backend, how its kernel is built to ring them (`RL_DOORBELL_MMIO`).
    pub doorbell: DoorbellMode,
    /// How the GPU backend's persistent kernel is built (the other backends ignore it).
    pub kernel: KernelOptions,
}

/// A running CPU transceiver loop.
pub struct CpuBackend {
    q: QpMemory,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl CpuBackend {
    /// Posts the receive queue full and starts the loop.
    pub fn spawn(q: QpMemory, mut stage: Box<dyn Stage>, cfg: LoopConfig) -> std::io::Result<CpuBackend> {
        let mut verbs = HostVerbs::new(q.clone(), cfg.qpn, cfg.tx_lkey).with_doorbell(cfg.doorbell);
        verbs.post_recv(q.layout.sizes.rq_entries);
        let qq = q.clone();
        let thread = std::thread::Builder::new().name("rocelink-cpu".into()).spawn(move || {
            affinity::pin_current_thread(cfg.core);
            run_loop(&qq, &mut verbs, stage.as_mut(), cfg.spin)
        })?;
        Ok(CpuBackend { q, thread: Some(thread) })
    }

    /// Messages answered so far.
    pub fn processed(&self) -> u64 {
        self.q.mem.atomic_u64(self.q.layout.processed()).load(Relaxed)
    }

    /// Messages the data path refused.
    pub fn dropped(&self) -> u32 {
        self.q.mem.atomic_u32(self.q.layout.dropped()).load(Relaxed)
    }

    /// Sets the exit flag and joins the loop, waiting at most `timeout`.
    pub fn stop(mut self, timeout: Duration) -> Result<(), String> {
        self.stop_inner(timeout)
    }

    fn stop_inner(&mut self, timeout: Duration) -> Result<(), String> {
        self.q.mem.atomic_u32(self.q.layout.exit_flag()).store(1, Release);
        let Some(t) = self.thread.take() else { return Ok(()) };
        let deadline = Instant::now() + timeout;
        while !t.is_finished() {
            if Instant::now() > deadline {
                return Err(format!("CPU backend did not stop within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        t.join().map_err(|_| "CPU backend thread panicked".to_string())?
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner(Duration::from_secs(2)) {
            tracing::error!("{e}");
        }
    }
}

/// See the send-queue wait in [`run_loop`].
const SQ_FULL_GRACE: Duration = Duration::from_millis(100);

fn run_loop(q: &QpMemory, verbs: &mut HostVerbs, stage: &mut dyn Stage, spin: SpinMode) -> Result<(), String> {
    let l = q.layout;
    let m = &q.mem;
    m.atomic_u32(l.state()).store(abi::RL_STATE_RUNNING, Release);
    let mut backoff = Backoff::new(spin);
    let mut idle: u32 = 0;
    let mut processed: u64 = 0;
    let mut heartbeat: u64 = 0;
    let ts_mask = l.sizes.timestamp_entries.wrapping_sub(1);
    // A message was answered since the stage's idle work last ran.
    let mut idle_due = false;
    loop {
        let Some(rc) = verbs.poll_recv() else {
            if idle_due {
                // The stage's idle work, given up when a message comes (Stage::idle).
                idle_due = false;
                stage.idle(&mut || verbs.recv_pending());
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(abi::RL_EXIT_POLL_EVERY) && m.atomic_u32(l.exit_flag()).load(Relaxed) != 0 {
                break;
            }
            if idle.is_multiple_of(abi::RL_HEARTBEAT_EVERY) {
                heartbeat += 1;
                m.atomic_u64(l.heartbeat()).store(heartbeat, Relaxed);
            }
            backoff.idle();
            continue;
        };
        backoff.reset();
        let seen = monotonic_ns();
        // A poll that found a message counts too (as in the kernel): a stream that never
        // leaves the loop idle still sees the exit flag; the message is then left unanswered,
        // in flight at the stop.
        idle = idle.wrapping_add(1);
        if idle.is_multiple_of(abi::RL_EXIT_POLL_EVERY) && m.atomic_u32(l.exit_flag()).load(Relaxed) != 0 {
            break;
        }
        let cqe = rc.cqe;
        let slot = cqe.imm & 0xfff;
        let len = cqe.byte_cnt as usize;
        let mut answered = None;
        if u32::from(cqe.opcode) == abi::RL_CQE_RESP_WR_IMM
            && slot < l.sizes.rx_slots
            && len <= l.sizes.rx_slot_stride as usize
        {
            // Make room in the send queue (completions are signaled every `signal_every`).
            // Asked to stop while waiting, a NIC that is only slow gets SQ_FULL_GRACE to make
            // room (as in the kernel, RL_SQ_FULL_GRACE_NS); one that made none is reported.
            let mut give_up: Option<Instant> = None;
            while verbs.sq_free() == 0 {
                if verbs.poll_send_completions() == 0 {
                    match give_up {
                        None if m.atomic_u32(l.exit_flag()).load(Relaxed) != 0 => {
                            give_up = Some(Instant::now() + SQ_FULL_GRACE)
                        }
                        Some(t) if Instant::now() > t => {
                            m.atomic_u32(l.error()).store(abi::RL_ERR_SQ_FULL, Relaxed);
                            m.atomic_u32(l.state()).store(abi::RL_STATE_FAILED, Release);
                            return Err(
                                "send queue full: no send completion came back (the NIC stopped executing sends)"
                                    .into(),
                            );
                        }
                        _ => {}
                    }
                    backoff.idle();
                }
            }
            let i = verbs.next_send_index();
            let tx = verbs.tx_slot(i);
            // SAFETY: the RX slot is ours until the receive WQE is re-posted below (the peer
            // keeps at most one message per slot in flight); the TX slot of send index `i` is
            // ours until its WQE is posted (sq_free > 0 says the previous use completed).
            let (request, out) = unsafe {
                let request = if cqe.inline_scatter && len <= abi::RL_CQE_INLINE_MAX as usize {
                    m.slice(rc.cqe_offset, len)
                } else {
                    m.slice(l.rx_slot(slot), len)
                };
                (request, m.slice_mut(tx, l.sizes.tx_slot_stride as usize))
            };
            // A round's optional work is cut short once the next message waits (Stage::process_polled).
            if let Outcome::Answer(n) = stage.process_polled(request, out, &mut || verbs.recv_pending()) {
                let request_id = request.get(12..16).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0);
                verbs.prepare_send_from_slot(n);
                verbs.ring_send_doorbell();
                answered = Some((request_id, i));
                idle_due = true;
            }
        } else if u32::from(cqe.opcode) == abi::RL_CQE_RESP_WR_IMM {
            m.atomic_u32(l.error()).store(abi::RL_ERR_BAD_SLOT, Relaxed);
        } else {
            m.atomic_u32(l.error()).store(abi::RL_ERR_CQE_ERROR, Relaxed);
        }
        verbs.post_recv(1);
        match answered {
            Some((request_id, sq_index)) => {
                if l.sizes.timestamp_entries != 0 {
                    let rec = rl_msg_timestamp {
                        cqe_seen_ns: seen,
                        doorbell_ns: monotonic_ns(),
                        nic_cqe_ns: cqe.timestamp,
                        request_id,
                        slot,
                        byte_count: cqe.byte_cnt,
                        sq_index,
                        profile: [0; 2],
                    };
                    m.write_struct(l.timestamps + (processed as u32 & ts_mask) as usize * abi::TIMESTAMP, rec);
                }
                processed += 1;
                // Release: a tap that reads `processed` (Acquire) then sees the record above.
                m.atomic_u64(l.processed()).store(processed, Release);
            }
            None => {
                m.atomic_u32(l.dropped()).fetch_add(1, Relaxed);
            }
        }
    }
    m.atomic_u32(l.state()).store(abi::RL_STATE_EXITED, Release);
    Ok(())
}
