//! ECB replies (RTL and emulator layouts): the view and every accessor must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::ecb;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = ecb::Reply::new_checked(data) else {
        return;
    };
    let _ = (r.command_byte(), r.command(), r.is_reply(), r.flags(), r.sequence());
    let _ = (r.status(), r.reserved(), r.latched_sequence());
    let n = r.pair_count();
    assert_eq!(n, (data.len() - 8) / 8);
    let pairs: Vec<(u32, u32)> = r.pairs().collect();
    assert_eq!(pairs.len(), n);
    assert_eq!(r.get_pair(n), None);
    let _ = r.pair(usize::MAX);

    // An RTL-layout reply (zero reserved and pad bytes) re-emits byte for byte.
    if data.len() == ecb::reply_len(n) && r.reserved() == 0 && data[data.len() - 2..] == [0, 0] && n <= ecb::MAX_PAIRS {
        let mut out = vec![0u8; data.len()];
        let len = ecb::emit_reply(
            r.command_byte(),
            r.flags(),
            r.sequence(),
            r.status(),
            &pairs,
            r.latched_sequence(),
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..len], data);
    }
});
