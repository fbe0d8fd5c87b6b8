//! Whole RoCEv2 frames: `parse_frame` must never panic, and whatever it accepts must
//! re-emit to the same bytes when the frame is in the form rocelink emits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::{icrc, ipv4, roce};

fuzz_target!(|data: &[u8]| {
    let _ = icrc::compute(data);
    let _ = icrc::verify(data);
    let Ok(f) = roce::parse_frame(data) else {
        return;
    };
    assert!(f.payload.len() <= roce::PMTU);
    assert_eq!(f.payload.len(), f.repr.payload_len);

    let mut out = vec![0u8; f.repr.buffer_len()];
    let n = f.repr.emit(f.payload, &mut out).expect("a parsed Repr emits");
    let again = roce::parse_frame(&out[..n]).expect("an emitted frame parses");
    assert_eq!(again.repr, f.repr);
    assert_eq!(again.payload, f.payload);

    // Byte-exact when the input has no IPv4 options, reserved flag, pad bytes or
    // Ethernet padding (the parts a Repr does not keep).
    let ip = ipv4::Packet::new_unchecked(&data[14..]);
    let pad_start = n - icrc::LEN - usize::from(f.repr.bth.pad_count);
    let simple = ip.header_len() == 20
        && data[14 + 6] & 0x80 == 0
        && data.len() == n
        && data[pad_start..n - icrc::LEN].iter().all(|&b| b == 0);
    if simple {
        assert_eq!(&out[..n], data);
    }
});
