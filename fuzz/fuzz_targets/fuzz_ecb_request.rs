//! ECB requests: the view and every accessor must never panic; full requests re-emit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::ecb;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = ecb::Request::new_checked(data) else {
        return;
    };
    let _ = (r.command(), r.flags(), r.sequence(), r.reserved());
    let _ = (r.command().is_read(), r.command().is_block());
    let n = r.pair_count();
    let mut pairs = Vec::with_capacity(n);
    for i in 0..n {
        let a = r.address(i);
        assert_eq!(r.get_address(i), Some(a));
        if let Some(v) = r.value(i) {
            pairs.push((a, v));
        }
    }
    assert_eq!(r.get_address(n), None);
    assert_eq!(r.value(n), None);
    let _ = (r.address(usize::MAX), r.value(usize::MAX));

    // A request of whole pairs with zero reserved bytes re-emits byte for byte.
    if r.reserved() == 0 && data.len() == ecb::request_len(n) && n <= ecb::MAX_PAIRS {
        let mut out = vec![0u8; data.len()];
        let len = ecb::emit_request(r.command(), r.flags(), r.sequence(), &pairs, &mut out).unwrap();
        assert_eq!(&out[..len], data);
    }
});
