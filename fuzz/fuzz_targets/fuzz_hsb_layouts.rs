//! HSB layouts (`rocelink_wire::hsb`) and what reads them: capture records as a host reads
//! them over ECB (8 words each), fpga-sim's capture RAM that stores them, the host's
//! analysis of a capture (`rocelink_operator::latency::analyze`), the register address
//! helpers and the player's argument scrambling.
//!
//! Input: u16 sent, u32 first_request_id, u16 warm-up, u16 RAM capacity, then the capture's
//! words (little-endian u32, 8 per record; a short last record is zero-filled).
//!
//! Checked: records re-emit their words exactly; the RAM returns what was pushed, zero
//! beyond, and refuses every record while unarmed; the analysis never panics and its counts
//! add up; address helpers wrap; scrambling twice is the identity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_fpga_sim::capture::CaptureRam;
use rocelink_operator::latency::analyze;
use rocelink_wire::hsb::{self, reg, CaptureRecord};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<10>() else {
        return;
    };
    let sent = u64::from(u16::from_le_bytes([head[0], head[1]]));
    let first = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    let warmup = u64::from(u16::from_le_bytes([head[6], head[7]]));
    let capacity = usize::from(u16::from_le_bytes([head[8], head[9]]) % 512);

    let records: Vec<CaptureRecord> = body
        .chunks(4 * CaptureRecord::WORDS)
        .map(|chunk| {
            let mut w = [0u32; CaptureRecord::WORDS];
            for (word, b) in w.iter_mut().zip(chunk.chunks(4)) {
                let mut x = [0u8; 4];
                x[..b.len()].copy_from_slice(b);
                *word = u32::from_le_bytes(x);
            }
            let r = CaptureRecord::from_words(&w);
            assert_eq!(r.to_words(), w);
            assert_eq!(r.round_trip(), r.arrival_timestamp.wrapping_sub(r.echoed_timestamp));
            r
        })
        .collect();

    // Any capacity but 0 arms the whole ring (the HSB map's capture region); 0 is the
    // unarmed RAM, which refuses every record.
    let ram = CaptureRam::with_capacity(capacity);
    let armed = capacity != 0;
    assert!(!armed || ram.capacity() == reg::CAPTURE_RAM_RECORDS as usize);
    for r in &records {
        assert_eq!(ram.push(r), armed);
    }
    let stored = if armed { records.len().min(ram.capacity()) } else { 0 };
    assert_eq!(ram.count() as usize, stored);
    for (i, r) in records.iter().take(stored).enumerate() {
        assert_eq!(ram.record(i), Some(*r));
    }
    assert_eq!(ram.record(stored), None);
    assert_eq!(ram.read_word(stored * CaptureRecord::WORDS), 0);
    assert_eq!(ram.read_word(usize::MAX), 0);

    let a = analyze(&records, sent, first, warmup);
    let c = a.counts;
    assert_eq!(c.sent, sent);
    assert_eq!(c.received + c.lost, sent);
    assert!(c.received + c.duplicated <= records.len() as u64);
    assert!(c.corrupted <= records.len() as u64);
    assert!(a.samples.len() as u64 <= c.received);
    assert_eq!(a.rtt.len(), a.samples.len() as u64);

    let n = first;
    let off = u32::from(head[6]) << 2;
    let _ = (reg::vp(n, off), reg::hif(n, off), CaptureRecord::address(n));
    assert_eq!(CaptureRecord::address(n), reg::CAPTURE_RAM + CaptureRecord::STRIDE * (n % reg::CAPTURE_RAM_RECORDS));
    let mut args = body.to_vec();
    hsb::scramble_args(first, &mut args);
    hsb::scramble_args(first, &mut args);
    assert_eq!(args, body);
});
