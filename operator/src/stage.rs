//! Processing stages: what the transceiver does with a request between receive and send.
//!
//! A stage reads the request bytes (the RX slot, RPC header first) and writes the answer into
//! the TX slot. It never allocates or blocks; a request it cannot answer is dropped and
//! counted by the caller.

use rocelink_wire::rpc::{self, RequestRepr, ResponseRepr};

/// What a stage did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The answer is the first `n` bytes of the output.
    Answer(usize),
    /// Not answerable (no RPC header): drop it, count it.
    Drop,
}

pub trait Stage: Send {
    fn name(&self) -> &'static str;
    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome;
}

/// Answers every request with a CUQS response echoing `request_id` and `ptp_timestamp`,
/// status 0, followed by exactly the request's argument bytes (PROTOCOLS.md 3).
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

/// The status of a response to a request whose lengths are inconsistent (a protocol error,
/// negative per PROTOCOLS.md 3).
pub const STATUS_BAD_LENGTH: i32 = -1;

impl Stage for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn process(&mut self, request: &[u8], out: &mut [u8]) -> Outcome {
        let Ok(req) = RequestRepr::parse(request) else { return Outcome::Drop };
        let args = request.get(rpc::HEADER_LEN..rpc::HEADER_LEN + req.arg_len as usize);
        let (status, args) = match args {
            Some(a) if rpc::HEADER_LEN + a.len() <= out.len() => (0, a),
            _ => (STATUS_BAD_LENGTH, &[][..]),
        };
        let resp = ResponseRepr {
            status,
            result_len: args.len() as u32,
            request_id: req.request_id,
            ptp_timestamp: req.ptp_timestamp,
        };
        if out.len() < rpc::HEADER_LEN || resp.emit(&mut out[..rpc::HEADER_LEN]).is_err() {
            return Outcome::Drop;
        }
        out[rpc::HEADER_LEN..rpc::HEADER_LEN + args.len()].copy_from_slice(args);
        Outcome::Answer(rpc::HEADER_LEN + args.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u32, ts: u64, args: &[u8], arg_len: u32) -> Vec<u8> {
        let mut b = vec![0u8; rpc::HEADER_LEN + args.len()];
        RequestRepr { function_id: rpc::function_id::ECHO, arg_len, request_id: id, ptp_timestamp: ts }
            .emit(&mut b[..rpc::HEADER_LEN])
            .unwrap();
        b[rpc::HEADER_LEN..].copy_from_slice(args);
        b
    }

    #[test]
    fn echo_answers_with_cuqs_and_the_args() {
        let req = request(7, 0x1122_3344_5566_7788, b"payload!", 8);
        let mut out = [0u8; 128];
        let Outcome::Answer(n) = Echo.process(&req, &mut out) else { panic!() };
        assert_eq!(n, 32);
        let resp = ResponseRepr::parse(&out[..n]).unwrap();
        assert_eq!((resp.status, resp.result_len, resp.request_id, resp.ptp_timestamp), (0, 8, 7, 0x1122_3344_5566_7788));
        assert_eq!(&out[24..32], b"payload!");
        assert_eq!(&out[0..4], &0x4355_5153u32.to_le_bytes());
    }

    #[test]
    fn echo_refuses_bad_requests_without_panicking() {
        let mut out = [0u8; 64];
        assert_eq!(Echo.process(b"short", &mut out), Outcome::Drop);
        let mut bad_magic = request(1, 2, b"x", 1);
        bad_magic[0] ^= 1;
        assert_eq!(Echo.process(&bad_magic, &mut out), Outcome::Drop);
        // arg_len larger than what arrived: answered with a protocol-error status, no args.
        let req = request(9, 3, b"abc", 300);
        assert_eq!(Echo.process(&req, &mut out), Outcome::Answer(24));
        let resp = ResponseRepr::parse(&out[..24]).unwrap();
        assert_eq!((resp.status, resp.result_len, resp.request_id), (STATUS_BAD_LENGTH, 0, 9));
    }
}
