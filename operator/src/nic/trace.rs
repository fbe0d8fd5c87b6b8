//! The software NIC's send trace: when each answer's frame left (the clock read after
//! `Link::send` returned, so nothing is added in front of the frame), by the index of its WQE's
//! first WQEBB, the producer index the data path stamps into its per-message record. A report
//! joins the two (`latency::breakdown`) and splits the part of a round trip after the data
//! path's turnaround into the GPU's two PCIe hops plus the NIC's send work (CQE written to
//! frame sent, less the turnaround) and the wire out (frame sent to the peer's capture).
//!
//! Written by the NIC engine only, one slot per sent WQE (the slot of WQEBB index `i` is
//! `i & (entries - 1)`, tagged with `i`, so a slot reused by a later WQE is told apart); read
//! after the engine thread has been joined (the join orders the writes before the reads, so
//! relaxed atomics suffice).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Slots of a trace by default: WQEBB indices of the last 2^18 (a run's last 131,072 answers
/// of two WQEBBs, more of one).
pub const DEFAULT_ENTRIES: usize = 1 << 18;

pub struct SendTrace {
    /// The WQEBB index each slot holds the time of, plus one (0: empty).
    tags: Box<[AtomicU32]>,
    sent_ns: Box<[AtomicU64]>,
}

impl SendTrace {
    /// A trace of `entries` slots (rounded up to a power of two, at least 1).
    pub fn new(entries: usize) -> SendTrace {
        let n = entries.max(1).next_power_of_two();
        SendTrace {
            tags: (0..n).map(|_| AtomicU32::new(0)).collect(),
            sent_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, wqebb: u32) -> usize {
        wqebb as usize & (self.tags.len() - 1)
    }

    /// The WQE starting at WQEBB `wqebb` left at `sent_ns` (CLOCK_MONOTONIC).
    pub fn record(&self, wqebb: u32, sent_ns: u64) {
        let i = self.slot(wqebb);
        self.sent_ns[i].store(sent_ns, Relaxed);
        self.tags[i].store(wqebb.wrapping_add(1), Relaxed);
    }

    /// When the WQE starting at WQEBB `wqebb` left, if the trace still holds it.
    pub fn sent_ns(&self, wqebb: u32) -> Option<u64> {
        let i = self.slot(wqebb);
        (self.tags[i].load(Relaxed) == wqebb.wrapping_add(1)).then(|| self.sent_ns[i].load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_answers_for_the_wqe_it_holds_only() {
        let t = SendTrace::new(5); // 8 slots
        assert_eq!(t.sent_ns(0), None, "empty");
        t.record(3, 100);
        assert_eq!(t.sent_ns(3), Some(100));
        assert_eq!(t.sent_ns(11), None, "same slot, another WQE");
        t.record(11, 200);
        assert_eq!(t.sent_ns(11), Some(200));
        assert_eq!(t.sent_ns(3), None, "overwritten by a later WQE");
        t.record(u32::MAX, 7);
        assert_eq!(t.sent_ns(u32::MAX), Some(7), "the last index is a tag like any other");
    }
}
