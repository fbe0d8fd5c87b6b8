//! Capture RAM: one [`CaptureRecord`] per answer the peer receives, readable over ECB at
//! `hsb::reg::CAPTURE_RAM` (record `i` at `CAPTURE_RAM + 4 * WORDS * i`, word layout in
//! `rocelink_wire::hsb::CaptureRecord`).
//!
//! Guarantees:
//! - Preallocated when the host arms the capture (or, if the armed RAM is too small, when
//!   the player starts): appending a record never allocates.
//! - Single writer (the data-plane thread), any number of readers. Ordering contract: the
//!   writer stores the record's words (`Relaxed`), then publishes the new count with a
//!   `Release` store; a reader loads the count with `Acquire` and reads only records below
//!   it, so it never sees a half-written record.
//! - A full RAM drops further records (and says so through [`CaptureRam::push`]).

use std::sync::atomic::{AtomicU32, Ordering};

use rocelink_wire::hsb::CaptureRecord;

/// Most records one capture holds (4 Mi records = 128 MiB): the address window
/// `CAPTURE_RAM .. CAPTURE_RAM + 4 * WORDS * MAX_RECORDS` is what ECB accepts.
pub const MAX_RECORDS: usize = 1 << 22;

/// Bytes of the capture RAM's address window.
pub const WINDOW_BYTES: u32 = (MAX_RECORDS * CaptureRecord::WORDS * 4) as u32;

#[derive(Debug)]
pub struct CaptureRam {
    words: Box<[AtomicU32]>,
    /// Records published. Written by the data plane only (Release), read with Acquire.
    count: AtomicU32,
}

impl CaptureRam {
    /// A RAM for `records` records (capped at [`MAX_RECORDS`]).
    pub fn with_capacity(records: usize) -> Self {
        let words = records.min(MAX_RECORDS) * CaptureRecord::WORDS;
        CaptureRam {
            words: (0..words).map(|_| AtomicU32::new(0)).collect(),
            count: AtomicU32::new(0),
        }
    }

    /// Records this RAM holds.
    pub fn capacity(&self) -> usize {
        self.words.len() / CaptureRecord::WORDS
    }

    /// Records published so far (`Acquire`: records below it are complete).
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// Appends one record. Only the data-plane thread calls this (single writer). Returns
    /// false when the RAM is full.
    pub fn push(&self, record: &CaptureRecord) -> bool {
        let i = self.count.load(Ordering::Relaxed) as usize;
        let start = i * CaptureRecord::WORDS;
        let Some(slot) = self.words.get(start..start + CaptureRecord::WORDS) else {
            return false;
        };
        for (cell, word) in slot.iter().zip(record.to_words()) {
            cell.store(word, Ordering::Relaxed);
        }
        // Publishes the words above (module docs: ordering contract).
        self.count.store(i as u32 + 1, Ordering::Release);
        true
    }

    /// Word `index` of the RAM as the host reads it; 0 beyond the published records.
    pub fn read_word(&self, index: usize) -> u32 {
        let published = self.count() as usize * CaptureRecord::WORDS;
        if index < published {
            self.words
                .get(index)
                .map_or(0, |w| w.load(Ordering::Relaxed))
        } else {
            0
        }
    }

    /// Record `i`, if published.
    pub fn record(&self, i: usize) -> Option<CaptureRecord> {
        if i >= self.count() as usize {
            return None;
        }
        let mut w = [0u32; CaptureRecord::WORDS];
        for (k, word) in w.iter_mut().enumerate() {
            *word = self.read_word(i * CaptureRecord::WORDS + k);
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
        assert_eq!(
            ram.read_word(CaptureRecord::WORDS),
            0,
            "record 1 not published"
        );
        assert!(ram.push(&rec(8)));
        assert!(!ram.push(&rec(9)), "full");
        assert_eq!(ram.count(), 2);
        assert_eq!(ram.record(2), None);
    }
}
