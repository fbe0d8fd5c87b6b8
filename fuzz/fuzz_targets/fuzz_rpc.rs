//! RPC request and response headers: parse never panics; what parses re-emits exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::rpc;

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = rpc::RequestRepr::parse(data) {
        let mut out = [0u8; rpc::HEADER_LEN];
        q.emit(&mut out).unwrap();
        assert_eq!(&out[..], &data[..rpc::HEADER_LEN]);
        let _ = rpc::Request::new_checked(data).unwrap().args();
    }
    if let Ok(s) = rpc::ResponseRepr::parse(data) {
        let mut out = [0u8; rpc::HEADER_LEN];
        s.emit(&mut out).unwrap();
        assert_eq!(&out[..], &data[..rpc::HEADER_LEN]);
        let _ = rpc::Response::new_checked(data).unwrap().result();
    }
    let _ = rpc::Request::new_unchecked(data).args();
    let _ = rpc::Response::new_unchecked(data).result();
});
