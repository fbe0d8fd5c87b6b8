//! Data-plane counters, readable over ECB in the rocelink extension block
//! (`hsb::ext::STATS_BASE`).
//!
//! Who writes: only the data-plane thread (and the ECB thread when it resets them at the
//! start of a run, while the data plane is idle). Who reads: the ECB thread. Every counter
//! is a `Relaxed` atomic: each is a monotonic tally with no data published behind it, so
//! no ordering with other memory is needed (the capture count, which does publish data,
//! lives in [`crate::capture`] and uses Release/Acquire).

use std::sync::atomic::{AtomicU32, Ordering};

/// One counter per `hsb::ext::STAT_*` register.
#[derive(Debug, Default)]
pub struct Stats {
    /// WRITE_IMM frames handed to the link.
    pub sent: AtomicU32,
    /// SEND answers to the peer's QP (every one gets a capture record while capturing).
    pub received: AtomicU32,
    /// Frames whose ICRC did not match (PROTOCOLS.md 1).
    pub icrc_failures: AtomicU32,
    /// Frames that did not parse as RoCEv2, or answers without a valid CUQS header.
    pub malformed: AtomicU32,
    /// Times a frame was due but the in-flight limit held it back (counted once per frame).
    pub stalls: AtomicU32,
    /// Well-formed frames we did not expect: other opcodes or QPs, answers to request ids
    /// this run never sent, answers while no run is active.
    pub unexpected: AtomicU32,
}

/// A copy of the counters at one moment (each read on its own: not a consistent cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub sent: u32,
    pub received: u32,
    pub icrc_failures: u32,
    pub malformed: u32,
    pub stalls: u32,
    pub unexpected: u32,
}

impl Stats {
    /// Adds one to `counter` (a field of this struct).
    #[inline]
    pub fn bump(counter: &AtomicU32) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for c in self.counters() {
            c.store(0, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |c: &AtomicU32| c.load(Ordering::Relaxed);
        StatsSnapshot {
            sent: r(&self.sent),
            received: r(&self.received),
            icrc_failures: r(&self.icrc_failures),
            malformed: r(&self.malformed),
            stalls: r(&self.stalls),
            unexpected: r(&self.unexpected),
        }
    }

    /// The counters in register order (STAT_SENT, STAT_RECEIVED, STAT_ICRC_FAILURES,
    /// STAT_MALFORMED, STAT_STALLS, STAT_UNEXPECTED: one word each from `STATS_BASE`).
    pub fn counters(&self) -> [&AtomicU32; 6] {
        [
            &self.sent,
            &self.received,
            &self.icrc_failures,
            &self.malformed,
            &self.stalls,
            &self.unexpected,
        ]
    }
}
