//! RPC messages carried in a slot (PROTOCOLS.md 3; CUDA-Q Realtime `RPCHeader` /
//! `RPCResponse`): packed, little-endian, 24-byte headers followed by the argument or
//! result bytes.
//!
//! Guarantees: views and Reprs never panic on any byte string; `parse` checks the length
//! (`Truncated`) and the magic (`BadMagic`) and nothing else, because status, lengths and
//! ids are the application's business; `emit` writes exactly [`HEADER_LEN`] bytes or
//! fails with `BufferTooSmall`. The PTP timestamp is carried verbatim (the FPGA writes its
//! send time into bytes 16-23 and the answer echoes it).

use crate::bytes;
use crate::{Error, Result};

/// `'CUQR'` read as a little-endian u32.
pub const REQUEST_MAGIC: u32 = 0x4355_5152;
/// `'CUQS'` read as a little-endian u32.
pub const RESPONSE_MAGIC: u32 = 0x4355_5153;
/// Both headers are 24 bytes.
pub const HEADER_LEN: usize = 24;

/// FNV-1a, 32-bit: how CUDA-Q Realtime turns a function name into its id.
pub const fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811C_9DC5;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u32;
        hash = hash.wrapping_mul(0x0100_0193);
        i += 1;
    }
    hash
}

/// Function ids (PROTOCOLS.md 3), pinned against [`fnv1a32`] by a test.
pub mod function_id {
    /// `enqueue_syndromes`: {i64 decoder_id, i64 counter, i64 syndrome_mapping_id,
    /// i64 num_syndromes} then ceil(n/8) bit-packed bytes, LSB first.
    pub const ENQUEUE_SYNDROMES: u32 = 0x7ED8_BE82;
    /// `get_corrections`: {i64 decoder_id, i64 return_size, u8 reset}.
    pub const GET_CORRECTIONS: u32 = 0x882D_5BA1;
    /// `reset_decoder`: {i64 decoder_id}.
    pub const RESET_DECODER: u32 = 0x977A_59CF;
    /// `echo`: answered with status 0 and exactly the argument bytes.
    pub const ECHO: u32 = super::fnv1a32(b"echo");
    /// `increment`: answered with status 0 and the argument bytes each plus one, modulo 256
    /// ([`super::increment`]): an answer that differs from its request.
    pub const INCREMENT: u32 = super::fnv1a32(b"increment");
}

/// The result of `increment` (`function_id::INCREMENT`) in place: each byte plus one,
/// wrapping at 256.
pub fn increment(bytes: &mut [u8]) {
    for b in bytes {
        *b = b.wrapping_add(1);
    }
}

/// Response status codes (CUDA-Q QEC); `>0` handler error, `<0` protocol error.
pub mod status {
    /// Success.
    pub const OK: i32 = 0;
    /// No such decoder.
    pub const INVALID_DECODER: i32 = 1;
    /// Arguments do not parse.
    pub const BAD_REQUEST: i32 = 2;
    /// The handler failed.
    pub const INTERNAL_ERROR: i32 = 3;
    /// No result yet.
    pub const NOT_READY: i32 = 4;
    /// The decoder is busy.
    pub const BUSY: i32 = 5;
    /// Syndromes were dropped.
    pub const SYNDROMES_DROPPED: i32 = 6;
}

/// Where a request's `request_id` (u32, little-endian) sits: a peer rewrites it per message.
pub const REQUEST_ID_AT: usize = field::REQUEST_ID.start;
/// Where a request's `ptp_timestamp` (u64, little-endian) sits: a peer stamps its send time.
pub const TIMESTAMP_AT: usize = field::PTP_TIMESTAMP.start;

mod field {
    use crate::bytes::{Field, Rest};
    pub const MAGIC: Field = 0..4;
    /// function_id in a request, status (i32) in a response.
    pub const WORD1: Field = 4..8;
    /// arg_len in a request, result_len in a response.
    pub const LEN: Field = 8..12;
    pub const REQUEST_ID: Field = 12..16;
    pub const PTP_TIMESTAMP: Field = 16..24;
    pub const BODY: Rest = 24..;
}

fn body(buf: &[u8], len: u32) -> Result<&[u8]> {
    let end = usize::try_from(len).ok().and_then(|l| l.checked_add(HEADER_LEN)).ok_or(Error::Truncated)?;
    buf.get(field::BODY.start..end).ok_or(Error::Truncated)
}

fn body_mut(buf: &mut [u8], len: u32) -> Result<&mut [u8]> {
    let end = usize::try_from(len).ok().and_then(|l| l.checked_add(HEADER_LEN)).ok_or(Error::BufferTooSmall)?;
    buf.get_mut(field::BODY.start..end).ok_or(Error::BufferTooSmall)
}

/// A view of a request: header and arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Request<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Request { buffer }
    }

    /// Wraps a buffer that holds at least the header. The arguments are checked by [`Request::args`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// `Truncated` below [`HEADER_LEN`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Bytes 0-3.
    pub fn magic(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::MAGIC.start)
    }

    /// Bytes 4-7.
    pub fn function_id(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::WORD1.start)
    }

    /// Bytes 8-11.
    pub fn arg_len(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::LEN.start)
    }

    /// Bytes 12-15.
    pub fn request_id(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::REQUEST_ID.start)
    }

    /// Bytes 16-23.
    pub fn ptp_timestamp(&self) -> u64 {
        bytes::le64(self.buffer.as_ref(), field::PTP_TIMESTAMP.start)
    }

    /// The `arg_len` argument bytes; `Truncated` if the buffer holds fewer.
    pub fn args(&self) -> Result<&[u8]> {
        body(self.buffer.as_ref(), self.arg_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Request<T> {
    /// Sets bytes 0-3.
    pub fn set_magic(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::MAGIC.start, v);
    }
    /// Sets bytes 4-7.
    pub fn set_function_id(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::WORD1.start, v);
    }
    /// Sets bytes 8-11.
    pub fn set_arg_len(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::LEN.start, v);
    }
    /// Sets bytes 12-15.
    pub fn set_request_id(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::REQUEST_ID.start, v);
    }
    /// Sets bytes 16-23.
    pub fn set_ptp_timestamp(&mut self, v: u64) {
        bytes::set_le64(self.buffer.as_mut(), field::PTP_TIMESTAMP.start, v);
    }
    /// The `arg_len` argument bytes, writable; `BufferTooSmall` if the buffer holds fewer.
    pub fn args_mut(&mut self) -> Result<&mut [u8]> {
        let len = self.arg_len();
        body_mut(self.buffer.as_mut(), len)
    }
}

/// A view of a response: header and result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Response<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Response { buffer }
    }

    /// Wraps a buffer that holds at least the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// `Truncated` below [`HEADER_LEN`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Bytes 0-3.
    pub fn magic(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::MAGIC.start)
    }

    /// Bytes 4-7, signed.
    pub fn status(&self) -> i32 {
        bytes::le32(self.buffer.as_ref(), field::WORD1.start) as i32
    }

    /// Bytes 8-11.
    pub fn result_len(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::LEN.start)
    }

    /// Bytes 12-15 (echoed from the request).
    pub fn request_id(&self) -> u32 {
        bytes::le32(self.buffer.as_ref(), field::REQUEST_ID.start)
    }

    /// Bytes 16-23 (echoed from the request).
    pub fn ptp_timestamp(&self) -> u64 {
        bytes::le64(self.buffer.as_ref(), field::PTP_TIMESTAMP.start)
    }

    /// The `result_len` result bytes; `Truncated` if the buffer holds fewer.
    pub fn result(&self) -> Result<&[u8]> {
        body(self.buffer.as_ref(), self.result_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Response<T> {
    /// Sets bytes 0-3.
    pub fn set_magic(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::MAGIC.start, v);
    }
    /// Sets bytes 4-7.
    pub fn set_status(&mut self, v: i32) {
        bytes::set_le32(self.buffer.as_mut(), field::WORD1.start, v as u32);
    }
    /// Sets bytes 8-11.
    pub fn set_result_len(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::LEN.start, v);
    }
    /// Sets bytes 12-15.
    pub fn set_request_id(&mut self, v: u32) {
        bytes::set_le32(self.buffer.as_mut(), field::REQUEST_ID.start, v);
    }
    /// Sets bytes 16-23.
    pub fn set_ptp_timestamp(&mut self, v: u64) {
        bytes::set_le64(self.buffer.as_mut(), field::PTP_TIMESTAMP.start, v);
    }
    /// The `result_len` result bytes, writable; `BufferTooSmall` if the buffer holds fewer.
    pub fn result_mut(&mut self) -> Result<&mut [u8]> {
        let len = self.result_len();
        body_mut(self.buffer.as_mut(), len)
    }
}

/// A request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestRepr {
    /// FNV-1a of the function name.
    pub function_id: u32,
    /// Bytes of arguments after the header.
    pub arg_len: u32,
    /// Chosen by the sender, echoed by the answer.
    pub request_id: u32,
    /// The FPGA's send time, echoed by the answer.
    pub ptp_timestamp: u64,
}

impl RequestRepr {
    /// Reads the header at the start of `buf`: `Truncated` below 24 bytes, `BadMagic`.
    /// The arguments are not required to be present (see [`Request::args`]).
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let r = Request::new_checked(buf)?;
        if r.magic() != REQUEST_MAGIC {
            return Err(Error::BadMagic);
        }
        Ok(RequestRepr {
            function_id: r.function_id(),
            arg_len: r.arg_len(),
            request_id: r.request_id(),
            ptp_timestamp: r.ptp_timestamp(),
        })
    }

    /// The header length, [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus arguments.
    pub const fn message_len(&self) -> usize {
        HEADER_LEN + self.arg_len as usize
    }

    /// Writes the 24-byte header (magic included) at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        let mut r = Request::new_unchecked(out);
        r.set_magic(REQUEST_MAGIC);
        r.set_function_id(self.function_id);
        r.set_arg_len(self.arg_len);
        r.set_request_id(self.request_id);
        r.set_ptp_timestamp(self.ptp_timestamp);
        Ok(())
    }
}

/// A response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResponseRepr {
    /// 0 ok, >0 handler error, <0 protocol error (see [`status`]).
    pub status: i32,
    /// Bytes of result after the header.
    pub result_len: u32,
    /// Echoed from the request.
    pub request_id: u32,
    /// Echoed from the request.
    pub ptp_timestamp: u64,
}

impl ResponseRepr {
    /// Reads the header at the start of `buf`: `Truncated` below 24 bytes, `BadMagic`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let r = Response::new_checked(buf)?;
        if r.magic() != RESPONSE_MAGIC {
            return Err(Error::BadMagic);
        }
        Ok(ResponseRepr {
            status: r.status(),
            result_len: r.result_len(),
            request_id: r.request_id(),
            ptp_timestamp: r.ptp_timestamp(),
        })
    }

    /// The header length, [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus result.
    pub const fn message_len(&self) -> usize {
        HEADER_LEN + self.result_len as usize
    }

    /// Writes the 24-byte header (magic included) at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        let mut r = Response::new_unchecked(out);
        r.set_magic(RESPONSE_MAGIC);
        r.set_status(self.status);
        r.set_result_len(self.result_len);
        r.set_request_id(self.request_id);
        r.set_ptp_timestamp(self.ptp_timestamp);
        Ok(())
    }

    /// The echo answer to `req` (PROTOCOLS.md 3: status 0, result_len = arg_len, ids and
    /// timestamp echoed verbatim).
    pub const fn echo_of(req: &RequestRepr) -> Self {
        ResponseRepr {
            status: status::OK,
            result_len: req.arg_len,
            request_id: req.request_id,
            ptp_timestamp: req.ptp_timestamp,
        }
    }
}

/// A whole request: the header of `function_id`, `request_id` and `ptp_timestamp`, then
/// `args` (its `arg_len`).
pub fn request(function_id: u32, request_id: u32, ptp_timestamp: u64, args: &[u8]) -> Vec<u8> {
    let h = RequestRepr { function_id, arg_len: args.len() as u32, request_id, ptp_timestamp };
    message(|b| h.emit(b), args)
}

/// A whole response: the header of `status`, `request_id` and `ptp_timestamp`, then `result`
/// (its `result_len`).
pub fn response(status: i32, request_id: u32, ptp_timestamp: u64, result: &[u8]) -> Vec<u8> {
    let h = ResponseRepr { status, result_len: result.len() as u32, request_id, ptp_timestamp };
    message(|b| h.emit(b), result)
}

fn message(emit_header: impl FnOnce(&mut [u8]) -> Result<()>, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; HEADER_LEN + body.len()];
    // a buffer of HEADER_LEN bytes or more always takes the header
    let _ = emit_header(&mut m);
    m[HEADER_LEN..].copy_from_slice(body);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_are_header_then_body() {
        assert_eq!(request(function_id::ECHO, 7, 0x0102_0304_0506_0708, &[0xAA, 0xBB, 0xCC, 0xDD]), REQUEST_BYTES);
        let r = response(status::OK, 9, 3, b"abc");
        assert_eq!(
            ResponseRepr::parse(&r),
            Ok(ResponseRepr { status: status::OK, result_len: 3, request_id: 9, ptp_timestamp: 3 })
        );
        assert_eq!(&r[HEADER_LEN..], b"abc");
    }

    // echo request, 4 argument bytes, request 7, timestamp 0x0102030405060708.
    static REQUEST_BYTES: [u8; 28] = [
        0x52, 0x51, 0x55, 0x43, 0x84, 0xD4, 0x9D, 0xD4, 0x04, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, 0x07,
        0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0xAA, 0xBB, 0xCC, 0xDD,
    ];

    static RESPONSE_BYTES: [u8; 24] = [
        0x53, 0x51, 0x55, 0x43, 0xFE, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, 0x07,
        0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
    ];

    fn request_repr() -> RequestRepr {
        RequestRepr { function_id: function_id::ECHO, arg_len: 4, request_id: 7, ptp_timestamp: 0x0102_0304_0506_0708 }
    }

    fn response_repr() -> ResponseRepr {
        ResponseRepr { status: -2, result_len: 0, request_id: 7, ptp_timestamp: 0x0102_0304_0506_0708 }
    }

    #[test]
    fn function_ids_are_fnv1a_of_their_names() {
        assert_eq!(fnv1a32(b"enqueue_syndromes"), 0x7ED8_BE82);
        assert_eq!(fnv1a32(b"get_corrections"), 0x882D_5BA1);
        assert_eq!(fnv1a32(b"reset_decoder"), 0x977A_59CF);
        assert_eq!(function_id::ENQUEUE_SYNDROMES, fnv1a32(b"enqueue_syndromes"));
        assert_eq!(function_id::GET_CORRECTIONS, fnv1a32(b"get_corrections"));
        assert_eq!(function_id::RESET_DECODER, fnv1a32(b"reset_decoder"));
        assert_eq!(function_id::ECHO, 0xD49D_D484);
        assert_eq!(function_id::INCREMENT, 0x3812_E73E);
        // FNV-1a reference values (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv1a32(b""), 0x811C_9DC5);
        assert_eq!(fnv1a32(b"a"), 0xE40C_292C);
    }

    #[test]
    fn magics_spell_cuqr_cuqs() {
        assert_eq!(&REQUEST_MAGIC.to_le_bytes(), b"RQUC");
        assert_eq!(&REQUEST_MAGIC.to_be_bytes(), b"CUQR");
        assert_eq!(&RESPONSE_MAGIC.to_be_bytes(), b"CUQS");
    }

    #[test]
    fn test_deconstruct() {
        let r = Request::new_checked(&REQUEST_BYTES[..]).unwrap();
        assert_eq!(r.magic(), REQUEST_MAGIC);
        assert_eq!(r.function_id(), function_id::ECHO);
        assert_eq!(r.arg_len(), 4);
        assert_eq!(r.request_id(), 7);
        assert_eq!(r.ptp_timestamp(), 0x0102_0304_0506_0708);
        assert_eq!(r.args(), Ok(&[0xAA, 0xBB, 0xCC, 0xDD][..]));
        let s = Response::new_checked(&RESPONSE_BYTES[..]).unwrap();
        assert_eq!(s.magic(), RESPONSE_MAGIC);
        assert_eq!(s.status(), -2);
        assert_eq!(s.result_len(), 0);
        assert_eq!(s.result(), Ok(&[][..]));
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 28];
        let mut r = Request::new_unchecked(&mut buf[..]);
        r.set_magic(REQUEST_MAGIC);
        r.set_function_id(function_id::ECHO);
        r.set_arg_len(4);
        r.set_request_id(7);
        r.set_ptp_timestamp(0x0102_0304_0506_0708);
        r.args_mut().unwrap().copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, REQUEST_BYTES);
        let mut buf = [0u8; 24];
        let mut s = Response::new_unchecked(&mut buf[..]);
        s.set_magic(RESPONSE_MAGIC);
        s.set_status(-2);
        s.set_result_len(0);
        s.set_request_id(7);
        s.set_ptp_timestamp(0x0102_0304_0506_0708);
        assert_eq!(buf, RESPONSE_BYTES);
    }

    #[test]
    fn test_parse() {
        assert_eq!(RequestRepr::parse(&REQUEST_BYTES), Ok(request_repr()));
        assert_eq!(ResponseRepr::parse(&RESPONSE_BYTES), Ok(response_repr()));
        assert_eq!(RequestRepr::parse(&RESPONSE_BYTES), Err(Error::BadMagic));
        assert_eq!(ResponseRepr::parse(&REQUEST_BYTES), Err(Error::BadMagic));
        assert_eq!(RequestRepr::parse(&REQUEST_BYTES[..23]), Err(Error::Truncated));
        let short = Request::new_checked(&REQUEST_BYTES[..27]).unwrap();
        assert_eq!(short.args(), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 28];
        request_repr().emit(&mut buf).unwrap();
        buf[24..].copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, REQUEST_BYTES);
        assert_eq!(request_repr().message_len(), 28);
        let mut buf = [0u8; 24];
        response_repr().emit(&mut buf).unwrap();
        assert_eq!(buf, RESPONSE_BYTES);
        assert_eq!(response_repr().emit(&mut buf[..23]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn echo_answer_echoes_ids() {
        let e = ResponseRepr::echo_of(&request_repr());
        assert_eq!((e.status, e.result_len, e.request_id), (0, 4, 7));
        assert_eq!(e.ptp_timestamp, 0x0102_0304_0506_0708);
    }

    #[test]
    fn increment_adds_one_to_each_byte() {
        let mut b = [0x00, 0x7F, 0xFE, 0xFF];
        increment(&mut b);
        assert_eq!(b, [0x01, 0x80, 0xFF, 0x00]);
    }

    #[test]
    fn huge_lengths_do_not_panic() {
        let mut buf = REQUEST_BYTES;
        buf[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let r = Request::new_checked(&buf[..]).unwrap();
        assert_eq!(r.args(), Err(Error::Truncated));
        let mut r = Request::new_unchecked(&mut buf[..]);
        assert_eq!(r.args_mut().err(), Some(Error::BufferTooSmall));
    }
}
