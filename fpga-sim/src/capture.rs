//! Capture RAM: one [`CaptureRecord`] per answer the peer receives, readable over ECB at
//! `hsb::reg::CAPTURE_RAM`, a ring of `hsb::reg::CAPTURE_RAM_RECORDS` records (the HSB map's
//! capture RAM region): record `i` of a capture lives at `CaptureRecord::address(i)` and
//! overwrites record `i - CAPTURE_RAM_RECORDS` (word layout in
//! `rocelink_wire::hsb::CaptureRecord`). CAPTURE_COUNT counts every record since the arm.
//!
//! Guarantees:
//! - Allocated when the host arms the capture (or when the player starts): appending a record
//!   never allocates, and the memory does not grow with the run.
//! - Single writer (the data-plane thread), any number of readers. Ordering contract: the
//!   writer stores the record's words (`Relaxed`), then publishes the new count with a
//!   `Release` store; a reader loads the count with `Acquire` and reads only records below
//!   it. A record older than `count - capacity` has been (or is being) overwritten: a host
//!   that reads the ring while the run goes on reads the count again after its read and
//!   keeps only records that were still in the ring then.

use std::sync::atomic::{AtomicU32, Ordering};

use rocelink_wire::hsb::{reg, CaptureRecord};

/// Records of the ring: the capture RAM region of the HSB map.
pub const MAX_RECORDS: usize = reg::CAPTURE_RAM_RECORDS as usize;

/// Bytes of the capture RAM's address window.
pub const WINDOW_BYTES: u32 = (MAX_RECORDS * CaptureRecord::WORDS * 4) as u32;

#[derive(Debug)]
pub struct CaptureRam {
    words: Box<[AtomicU32]>,
    /// Records published since the arm. Written by the data plane only (Release), read with
    /// Acquire.
    count: AtomicU32,
}

impl CaptureRam {
    /// The ring ([`MAX_RECORDS`] records). `0` makes an empty RAM that holds nothing (the
    /// one a register file starts with, before the host arms a capture).
    pub fn with_capacity(records: usize) -> Self {
        let words = if records == 0 { 0 } else { MAX_RECORDS * CaptureRecord::WORDS };
        CaptureRam { words: (0..words).map(|_| AtomicU32::new(0)).collect(), count: AtomicU32::new(0) }
    }

    /// Records the ring holds.
    pub fn capacity(&self) -> usize {
        self.words.len() / CaptureRecord::WORDS
    }

    /// Records published since the arm (`Acquire`: records below it are complete, the last
    /// `capacity` of them still in the ring).
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// Appends one record, overwriting the oldest once the ring is full. Only the data-plane
    /// thread calls this (single writer). Returns false when the RAM holds nothing.
    pub fn push(&self, record: &CaptureRecord) -> bool {
        let cap = self.capacity();
        if cap == 0 {
            return false;
        }
        let i = self.count.load(Ordering::Relaxed);
        let start = (i as usize % cap) * CaptureRecord::WORDS;
        for (cell, word) in self.words[start..start + CaptureRecord::WORDS].iter().zip(record.to_words()) {
            cell.store(word, Ordering::Relaxed);
        }
        // Publishes the words above (module docs: ordering contract).
        self.count.store(i.wrapping_add(1), Ordering::Release);
        true
    }

    /// Word `index` of the RAM's window as the host reads it: what its ring place holds now;
    /// 0 where nothing was written since the arm.
    pub fn read_word(&self, index: usize) -> u32 {
        let written = (self.count() as usize).min(self.capacity()) * CaptureRecord::WORDS;
        if index < written {
            self.words.get(index).map_or(0, |w| w.load(Ordering::Relaxed))
        } else {
            0
        }
    }

    /// Record `i` of the capture, if published and still in the ring.
    pub fn record(&self, i: usize) -> Option<CaptureRecord> {
        let count = self.count() as usize;
        if i >= count || i + self.capacity() < count {
            return None;
        }
        let start = (i % self.capacity()) * CaptureRecord::WORDS;
        let mut w = [0u32; CaptureRecord::WORDS];
        for (k, word) in w.iter_mut().enumerate() {
            *word = self.read_word(start + k);
        }
        Some(CaptureRecord::from_words(&w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32) -> CaptureRecord {
        CaptureRecord {
            request_id: id,
            echoed_timestamp: 0x1122_3344_5566_7788,
            arrival_timestamp: 99,
            flags: 3,
            result_len: 8,
            rpc_status: -1,
        }
    }

    #[test]
    fn push_publishes_and_read_hides_unpublished() {
        let ram = CaptureRam::with_capacity(2);
        assert_eq!(ram.read_word(0), 0);
        assert!(ram.push(&rec(7)));
        assert_eq!(ram.count(), 1);
        assert_eq!(ram.record(0), Some(rec(7)));
        assert_eq!(ram.read_word(0), 7);
        assert_eq!(ram.read_word(CaptureRecord::WORDS), 0, "record 1 not published");
        assert!(ram.push(&rec(8)));
        assert_eq!(ram.count(), 2);
        assert_eq!(ram.record(2), None);
        assert!(!CaptureRam::with_capacity(0).push(&rec(1)), "an unarmed RAM holds nothing");
    }

    #[test]
    fn the_ring_overwrites_the_oldest_and_keeps_counting() {
        let ram = CaptureRam::with_capacity(1);
        assert_eq!(ram.capacity(), MAX_RECORDS);
        let n = MAX_RECORDS as u32 + 5;
        for id in 0..n {
            assert!(ram.push(&rec(id)));
        }
        assert_eq!(ram.count(), n);
        assert_eq!(ram.record(4), None, "overwritten");
        assert_eq!(ram.record(5), Some(rec(5)), "the oldest still in the ring");
        assert_eq!(ram.record(MAX_RECORDS + 4), Some(rec(MAX_RECORDS as u32 + 4)));
        // its place in the window is the ring's: record MAX_RECORDS + 1 at place 1
        assert_eq!(ram.read_word(CaptureRecord::WORDS), MAX_RECORDS as u32 + 1);
        assert_eq!(CaptureRecord::address(MAX_RECORDS as u32 + 1), CaptureRecord::address(1));
    }
}
