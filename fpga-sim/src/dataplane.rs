//! The data-plane thread: owns the [`Link`], runs the [`Player`] when the host sets the run
//! bit, and counts whatever arrives between runs.
//!
//! Guarantees:
//! - One thread, pinned to the configured core if any, polling with [`Backoff`] in the
//!   caller's [`SpinMode`] while a run is active; between runs it drains the link and waits
//!   for the next command with a 1 ms timeout (no spinning while idle).
//! - No lock and no allocation per packet: counters are atomics ([`crate::stats`]), capture
//!   records are published with Release ([`crate::capture`]). The only allocation is the
//!   run's scratch space, when a run starts.
//! - At the end of a run the capture is complete before `done` is set (Release), and `done`
//!   before `running` is cleared.
//! - Exits within a millisecond of `shutdown` (a send blocked on a full in-process ring whose
//!   peer neither reads nor goes away is the one thing that can hold it).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rocelink_link::clock::monotonic_ns;
use rocelink_link::{affinity, Backoff, Link, SpinMode, MAX_FRAME};

use crate::player::{count_idle_frame, Player, RunConfig, Transmit};
use crate::regs::PeerShared;
use crate::stats::Stats;

/// Commands from the ECB thread.
#[derive(Debug)]
pub enum Command {
    /// Start a run (the ECB thread has already set `running`).
    Start(Box<RunConfig>),
    /// Device reset: PSN back to 0.
    Reset,
}

/// Frames received per loop turn before the transmitter gets a look in.
const RX_BURST: usize = 32;
/// While the transmitter can only wait for answers (the in-flight window is full, or every
/// frame is sent), the run loop reads the clock (for timeouts) only every this many idle turns,
/// so an answer is taken within a few nanoseconds of landing rather than after a clock read
/// and the transmitter's look (~50 ns). Timeouts are milliseconds; this is about a microsecond.
const WAITING_TURNS_PER_CLOCK: u32 = 64;
/// Idle wait for a command between runs.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// What the data-plane thread needs.
pub struct DataPlane {
    pub link: Box<dyn Link>,
    pub shared: Arc<PeerShared>,
    pub commands: Receiver<Command>,
    pub spin: SpinMode,
    pub core: Option<usize>,
    /// The peer's power-on QP, for classifying frames between runs.
    pub qp: u32,
}

impl DataPlane {
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new().name("fpga-sim-dataplane".into()).spawn(move || self.run())
    }

    fn run(mut self) {
        affinity::pin_current_thread(self.core);
        let mut rx = vec![0u8; MAX_FRAME];
        let mut tx = vec![0u8; MAX_FRAME];
        let mut psn = 0u32;
        let mut qp = self.qp;
        while !self.shared.shutdown.load(Ordering::Acquire) {
            self.drain_idle(&mut rx, qp);
            match self.commands.recv_timeout(IDLE_WAIT) {
                Ok(Command::Start(cfg)) => {
                    qp = cfg.fpga_qp;
                    psn = self.play(*cfg, psn, &mut rx, &mut tx);
                }
                Ok(Command::Reset) => psn = 0,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// Counts frames that arrive while no run is active.
    fn drain_idle(&mut self, rx: &mut [u8], qp: u32) {
        for _ in 0..RX_BURST {
            match self.link.try_recv(rx) {
                Ok(Some(n)) => count_idle_frame(&rx[..n], qp, &self.shared.stats),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "link receive error");
                    break;
                }
            }
        }
    }

    /// Runs one player run to its end (or abort/shutdown); returns the next PSN.
    fn play(&mut self, cfg: RunConfig, psn: u32, rx: &mut [u8], tx: &mut [u8]) -> u32 {
        let shared = Arc::clone(&self.shared);
        let stats: &Stats = &shared.stats;
        let generation = cfg.generation;
        let frames = cfg.frames;
        let mut player = Player::new(cfg, psn, monotonic_ns());
        // Frames are built ahead, while the loop waits, and stamped when sent (player docs).
        player.prepare();
        let mut backoff = Backoff::new(self.spin);
        let mut send_errors = 0u64;
        let mut aborted = false;
        // the transmitter's last answer was Stalled or AllSent, and idle turns since
        let (mut waiting, mut idle_turns) = (false, 0u32);
        tracing::debug!(frames, link = %self.link.describe(), "run started");

        while !player.is_done() {
            if shared.shutdown.load(Ordering::Relaxed) || shared.abort_generation.load(Ordering::Acquire) == generation
            {
                aborted = true;
                break;
            }
            let mut work = false;
            for _ in 0..RX_BURST {
                match self.link.try_recv(rx) {
                    Ok(Some(n)) => {
                        player.on_frame(&rx[..n], monotonic_ns(), stats);
                        work = true;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "link receive error");
                        break;
                    }
                }
            }
            if !work && waiting && idle_turns < WAITING_TURNS_PER_CLOCK {
                idle_turns += 1;
                backoff.idle();
                continue;
            }
            idle_turns = 0;
            let now = monotonic_ns();
            player.expire(now, stats);
            let t = player.poll_transmit(now, stats, tx);
            waiting = matches!(t, Transmit::Stalled | Transmit::AllSent);
            if let Transmit::Frame(n) = t {
                work = true;
                match self.link.send(&tx[..n]) {
                    Ok(()) => Stats::bump_in_run(&stats.sent),
                    Err(e) => {
                        // The frame is lost like one the network dropped; it times out.
                        if send_errors == 0 {
                            tracing::warn!(error = %e, "link send failed");
                        }
                        send_errors += 1;
                    }
                }
                // the next frame, while this one's answer is on its way
                player.prepare();
            }
            if work {
                backoff.reset();
            } else {
                backoff.idle();
            }
        }

        tracing::debug!(sent = player.frames_sent(), aborted, send_errors, "run ended");
        // Capture records are already published (Release on the count); now say so.
        shared.done.store(true, Ordering::Release);
        shared.running.store(false, Ordering::Release);
        player.psn()
    }
}

#[cfg(test)]
mod tests {
    use crate::player::accept_answer;
    use crate::stats::Stats;
    use rocelink_wire::roce::{self, Endpoints, RoceRepr};

    const HOST: [u8; 4] = [10, 0, 0, 1];
    const PEER_QP: u32 = 2;

    /// A host's UC SEND to the peer's QP, from `src`, with TVer `tver` (ICRC valid).
    fn send_from(src: [u8; 4], tver: u8) -> Vec<u8> {
        let ep = Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: src,
            dst_ip: [10, 0, 0, 2],
            src_port: 4791,
            dst_port: roce::UDP_PORT,
        };
        let mut r = RoceRepr::uc_send_only(&ep, PEER_QP, 9, 8);
        r.bth.tver = tver;
        let mut f = vec![0u8; 256];
        let n = r.emit(b"answer!!", &mut f).unwrap();
        f.truncate(n);
        f
    }

    #[test]
    fn the_receiver_drops_and_counts_tver_other_than_0() {
        let stats = Stats::default();
        for tver in [1, 7, 15] {
            assert_eq!(accept_answer(&send_from(HOST, tver), PEER_QP, Some(HOST), &stats), None, "TVer {tver}");
        }
        // between runs too (counted there as well, not as unexpected)
        assert_eq!(accept_answer(&send_from(HOST, 1), PEER_QP, None, &stats), None);
        let s = stats.snapshot();
        assert_eq!((s.bad_tver, s.unexpected, s.malformed, s.icrc_failures), (4, 0, 0, 0));
        assert_eq!(accept_answer(&send_from(HOST, 0), PEER_QP, Some(HOST), &stats), Some(&b"answer!!"[..]));
    }

    #[test]
    fn the_receiver_accepts_sends_from_the_configured_host_only() {
        let stats = Stats::default();
        for src in [[10, 0, 0, 3], [10, 0, 0, 2], [127, 0, 0, 1]] {
            assert_eq!(accept_answer(&send_from(src, 0), PEER_QP, Some(HOST), &stats), None, "from {src:?}");
        }
        let s = stats.snapshot();
        assert_eq!((s.wrong_source, s.unexpected, s.bad_tver), (3, 0, 0));
        assert_eq!(accept_answer(&send_from(HOST, 0), PEER_QP, Some(HOST), &stats), Some(&b"answer!!"[..]));
        assert_eq!(stats.snapshot().wrong_source, 3);
        // counters reset with the others at a run's start
        stats.reset();
        assert_eq!(stats.snapshot().wrong_source, 0);
    }
}
