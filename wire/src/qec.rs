//! QEC decoder RPC payloads (PROTOCOLS.md 3, CUDA-Q QEC realtime wire format): the
//! argument bytes of `enqueue_syndromes`, `get_corrections` and `reset_decoder` that follow
//! the 24-byte `RPCHeader` of [`crate::rpc`], the correction bits that answer them, and
//! rocelink's decode report. Little-endian, packed.
//!
//! ```text
//! enqueue_syndromes  0  i64 decoder_id
//!                    8  i64 counter               round index of the first round carried
//!                   16  i64 syndrome_mapping_id
//!                   24  i64 num_syndromes         n, in bits
//!                   32  ceil(n/8) bytes           detection events, LSB first (stim b8 order)
//! get_corrections    0  i64 decoder_id
//!                    8  i64 return_size           in bits
//!                   16  u8  reset                 non-zero: clear after reading
//! reset_decoder      0  i64 decoder_id
//! corrections           ceil(return_size/8) bytes, LSB first, zero-padded to a multiple of 8
//! ```
//!
//! Guarantees: views and Reprs never panic on any byte string and never allocate; `parse`
//! checks only lengths (`Truncated`) and that `num_syndromes` is a usable bit count
//! (`Malformed` when negative or too large to address); ids, counters and the reset byte are
//! carried verbatim, so `parse` then `emit` reproduces the input bytes. Whether a decoder id
//! exists or a counter is in sequence is the decoder's business (status codes in
//! [`crate::rpc::status`]).

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// Bit `i` of an LSB-first bit string (stim's b8 order: bit `i` is bit `i % 8` of byte
/// `i / 8`); `false` beyond the buffer.
#[inline]
pub fn bit(buf: &[u8], i: usize) -> bool {
    buf.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1)
}

/// Sets bit `i` of an LSB-first bit string; ignored beyond the buffer.
#[inline]
pub fn set_bit(buf: &mut [u8], i: usize, value: bool) {
    if let Some(b) = buf.get_mut(i / 8) {
        let m = 1u8 << (i % 8);
        if value {
            *b |= m;
        } else {
            *b &= !m;
        }
    }
}

/// Bytes that hold `bits` bits LSB first: `ceil(bits / 8)`.
#[inline]
pub const fn packed_len(bits: usize) -> usize {
    bits.div_ceil(8)
}

/// Bytes of a correction answer for `return_size` bits: the packed bits, zero-padded to a
/// multiple of 8 bytes (PROTOCOLS.md 3, "padded to 8 bytes").
#[inline]
pub const fn correction_len(return_size: usize) -> usize {
    packed_len(return_size).div_ceil(8) * 8
}

/// Writes the low `return_size` bits of `mask` (bit k = observable k) as a correction
/// answer: [`correction_len`] bytes, LSB first, zero padding. Bits of `mask` at or above
/// 64 read as zero. `BufferTooSmall` if `buf` is shorter than the answer.
pub fn emit_corrections(mask: u64, return_size: usize, buf: &mut [u8]) -> Result<usize> {
    let len = correction_len(return_size);
    let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
    out.fill(0);
    for k in 0..return_size.min(64) {
        set_bit(out, k, mask >> k & 1 == 1);
    }
    Ok(len)
}

/// Reads up to 64 correction bits (LSB first) into a mask; bits beyond the buffer read zero.
pub fn parse_corrections(buf: &[u8], return_size: usize) -> u64 {
    (0..return_size.min(64)).fold(0u64, |m, k| m | (bit(buf, k) as u64) << k)
}

mod field {
    use crate::bytes::{Field, Rest};
    pub const DECODER_ID: Field = 0..8;
    // enqueue_syndromes
    pub const COUNTER: Field = 8..16;
    pub const SYNDROME_MAPPING_ID: Field = 16..24;
    pub const NUM_SYNDROMES: Field = 24..32;
    pub const SYNDROMES: Rest = 32..;
    // get_corrections
    pub const RETURN_SIZE: Field = 8..16;
    pub const RESET: usize = 16;
}

fn le_i64(buf: &[u8], f: Field) -> i64 {
    i64::from_le_bytes(bytes::array(buf, f.start))
}

fn set_le_i64(buf: &mut [u8], f: Field, v: i64) {
    bytes::put(buf, f.start, v.to_le_bytes());
}

/// The fixed part of `enqueue_syndromes`: four i64.
pub const ENQUEUE_SYNDROMES_FIXED_LEN: usize = 32;
/// `get_corrections` arguments: two i64 and a u8.
pub const GET_CORRECTIONS_LEN: usize = 17;
/// `reset_decoder` arguments: one i64.
pub const RESET_DECODER_LEN: usize = 8;

/// The largest `num_syndromes` a parser accepts: the bits of a 4 GiB argument. Larger
/// (or negative) counts are `Malformed`, so that length arithmetic cannot overflow.
pub const MAX_SYNDROMES: i64 = (u32::MAX as i64) * 8;

/// Payload bytes for `num_syndromes`, or `None` when the count is negative or above
/// [`MAX_SYNDROMES`].
pub fn syndrome_bytes(num_syndromes: i64) -> Option<usize> {
    if (0..=MAX_SYNDROMES).contains(&num_syndromes) {
        usize::try_from(num_syndromes).ok().map(packed_len)
    } else {
        None
    }
}

/// A view of `enqueue_syndromes` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueSyndromes<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EnqueueSyndromes<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        EnqueueSyndromes { buffer }
    }

    /// Wraps a buffer that holds the fixed part and the syndrome bytes it announces.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// `Truncated` below 32 bytes or below 32 + ceil(n/8); `Malformed` for a bad `n`.
    /// Bytes after the syndromes (padding) are allowed and ignored.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < ENQUEUE_SYNDROMES_FIXED_LEN {
            return Err(Error::Truncated);
        }
        let n = syndrome_bytes(self.num_syndromes()).ok_or(Error::Malformed)?;
        if len - ENQUEUE_SYNDROMES_FIXED_LEN < n {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Bytes 0-7.
    pub fn decoder_id(&self) -> i64 {
        le_i64(self.buffer.as_ref(), field::DECODER_ID)
    }

    /// Bytes 8-15: the round index of the first round this message carries.
    pub fn counter(&self) -> i64 {
        le_i64(self.buffer.as_ref(), field::COUNTER)
    }

    /// Bytes 16-23.
    pub fn syndrome_mapping_id(&self) -> i64 {
        le_i64(self.buffer.as_ref(), field::SYNDROME_MAPPING_ID)
    }

    /// Bytes 24-31: number of detection-event bits that follow.
    pub fn num_syndromes(&self) -> i64 {
        le_i64(self.buffer.as_ref(), field::NUM_SYNDROMES)
    }

    /// The ceil(n/8) syndrome bytes (fewer, or none, if the buffer is short or `n` bad).
    pub fn syndromes(&self) -> &[u8] {
        let rest = bytes::rest(self.buffer.as_ref(), field::SYNDROMES);
        let n = syndrome_bytes(self.num_syndromes()).unwrap_or(0);
        rest.get(..n).unwrap_or(rest)
    }

    /// Detection event `i` of this message (LSB first); `false` at or beyond `n`.
    pub fn syndrome(&self, i: usize) -> bool {
        usize::try_from(self.num_syndromes()).is_ok_and(|n| i < n) && bit(self.syndromes(), i)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EnqueueSyndromes<T> {
    /// Sets bytes 0-7.
    pub fn set_decoder_id(&mut self, v: i64) {
        set_le_i64(self.buffer.as_mut(), field::DECODER_ID, v);
    }
    /// Sets bytes 8-15.
    pub fn set_counter(&mut self, v: i64) {
        set_le_i64(self.buffer.as_mut(), field::COUNTER, v);
    }
    /// Sets bytes 16-23.
    pub fn set_syndrome_mapping_id(&mut self, v: i64) {
        set_le_i64(self.buffer.as_mut(), field::SYNDROME_MAPPING_ID, v);
    }
    /// Sets bytes 24-31.
    pub fn set_num_syndromes(&mut self, v: i64) {
        set_le_i64(self.buffer.as_mut(), field::NUM_SYNDROMES, v);
    }
    /// The syndrome bytes that `num_syndromes` announces, writable (fewer if the buffer is short).
    pub fn syndromes_mut(&mut self) -> &mut [u8] {
        let n = syndrome_bytes(self.num_syndromes()).unwrap_or(0);
        let rest = bytes::rest_mut(self.buffer.as_mut(), field::SYNDROMES);
        let len = rest.len().min(n);
        &mut rest[..len]
    }
}

/// The fixed part of `enqueue_syndromes`; the syndrome bytes go through the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EnqueueSyndromesRepr {
    /// Which decoder (its configured id).
    pub decoder_id: i64,
    /// Round index of the first round carried (rocelink's sequencing, see `operator::qec::session`).
    pub counter: i64,
    /// Which syndrome layout the bits follow.
    pub syndrome_mapping_id: i64,
    /// Detection-event bits that follow.
    pub num_syndromes: i64,
}

impl EnqueueSyndromesRepr {
    /// Reads the fixed part and checks that the syndrome bytes are present.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let v = EnqueueSyndromes::new_checked(buf)?;
        Ok(EnqueueSyndromesRepr {
            decoder_id: v.decoder_id(),
            counter: v.counter(),
            syndrome_mapping_id: v.syndrome_mapping_id(),
            num_syndromes: v.num_syndromes(),
        })
    }

    /// Fixed part plus syndrome bytes (0 syndrome bytes when `num_syndromes` is unusable).
    pub fn buffer_len(&self) -> usize {
        ENQUEUE_SYNDROMES_FIXED_LEN + syndrome_bytes(self.num_syndromes).unwrap_or(0)
    }

    /// Writes the 32-byte fixed part; the caller fills [`EnqueueSyndromes::syndromes_mut`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..ENQUEUE_SYNDROMES_FIXED_LEN).ok_or(Error::BufferTooSmall)?;
        let mut v = EnqueueSyndromes::new_unchecked(out);
        v.set_decoder_id(self.decoder_id);
        v.set_counter(self.counter);
        v.set_syndrome_mapping_id(self.syndrome_mapping_id);
        v.set_num_syndromes(self.num_syndromes);
        Ok(())
    }

    /// Writes the fixed part and `syndromes` (ceil(n/8) bytes, LSB first) after it.
    /// `Malformed` when `syndromes` is not exactly ceil(n/8) bytes or `n` is unusable.
    pub fn emit_with(&self, syndromes: &[u8], buf: &mut [u8]) -> Result<usize> {
        let n = syndrome_bytes(self.num_syndromes).ok_or(Error::Malformed)?;
        if syndromes.len() != n {
            return Err(Error::Malformed);
        }
        let end = ENQUEUE_SYNDROMES_FIXED_LEN + n;
        let out = buf.get_mut(..end).ok_or(Error::BufferTooSmall)?;
        self.emit(out)?;
        out[ENQUEUE_SYNDROMES_FIXED_LEN..].copy_from_slice(syndromes);
        Ok(end)
    }
}

/// `get_corrections` arguments: {i64 decoder_id, i64 return_size, u8 reset}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GetCorrectionsRepr {
    /// Which decoder.
    pub decoder_id: i64,
    /// Correction bits wanted (CUDA-Q: the number of observables).
    pub return_size: i64,
    /// Raw reset byte, carried verbatim; see [`GetCorrectionsRepr::reset`].
    pub reset: u8,
}

impl GetCorrectionsRepr {
    /// Reads the 17 argument bytes; `Truncated` below 17. Extra bytes are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < GET_CORRECTIONS_LEN {
            return Err(Error::Truncated);
        }
        Ok(GetCorrectionsRepr {
            decoder_id: le_i64(buf, field::DECODER_ID),
            return_size: le_i64(buf, field::RETURN_SIZE),
            reset: bytes::u8_at(buf, field::RESET),
        })
    }

    /// Whether the accumulated corrections are cleared after reading (any non-zero byte).
    pub const fn reset(&self) -> bool {
        self.reset != 0
    }

    /// 17.
    pub const fn buffer_len(&self) -> usize {
        GET_CORRECTIONS_LEN
    }

    /// Writes the 17 argument bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..GET_CORRECTIONS_LEN).ok_or(Error::BufferTooSmall)?;
        set_le_i64(out, field::DECODER_ID, self.decoder_id);
        set_le_i64(out, field::RETURN_SIZE, self.return_size);
        bytes::set_u8(out, field::RESET, self.reset);
        Ok(())
    }
}

/// `reset_decoder` arguments: {i64 decoder_id}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResetDecoderRepr {
    /// Which decoder.
    pub decoder_id: i64,
}

impl ResetDecoderRepr {
    /// Reads the 8 argument bytes; `Truncated` below 8. Extra bytes are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < RESET_DECODER_LEN {
            return Err(Error::Truncated);
        }
        Ok(ResetDecoderRepr { decoder_id: le_i64(buf, field::DECODER_ID) })
    }

    /// 8.
    pub const fn buffer_len(&self) -> usize {
        RESET_DECODER_LEN
    }

    /// Writes the 8 argument bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..RESET_DECODER_LEN).ok_or(Error::BufferTooSmall)?;
        set_le_i64(out, field::DECODER_ID, self.decoder_id);
        Ok(())
    }
}

/// rocelink's extension: the answer to the `enqueue_syndromes` that completes a shot is the
/// correction bits ([`correction_len`] bytes, as `get_corrections` would return them for
/// every observable) followed by this 16-byte report, so a peer gets the status, defects,
/// weight and decode time (docs/qec.md, "Inputs and outputs") without a second round trip.
/// A CUDA-Q peer that expects an empty answer can ignore it.
///
/// ```text
/// 0  u8  status      0 ok, 1 overflow (not decoded), 2 unmatchable
/// 1  u8  reserved
/// 2  u16 defects     saturating
/// 4  f32 weight      matching weight, ln((1-p)/p) units
/// 8  u32 decode_ns   saturating; 0 when the decoder does not measure time
/// 12 u32 shot        shots this decoder completed before this one (wrapping)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DecodeReportRepr {
    /// 0 ok, 1 overflow, 2 unmatchable; other values are carried verbatim.
    pub status: u8,
    /// Reserved, carried verbatim.
    pub reserved: u8,
    /// Defects (detection events) in the shot.
    pub defects: u16,
    /// Matching weight.
    pub weight: f32,
    /// Decode time in ns.
    pub decode_ns: u32,
    /// Shot index within this decoder.
    pub shot: u32,
}

/// The decode report is 16 bytes.
pub const DECODE_REPORT_LEN: usize = 16;

/// Report status: exact matching within the defect cap.
pub const REPORT_OK: u8 = 0;
/// Report status: not decoded (a cluster over the decoder's capacity); no correction.
pub const REPORT_OVERFLOW: u8 = 1;
/// Report status: no perfect matching exists (odd defects in a component without boundary).
pub const REPORT_UNMATCHABLE: u8 = 2;

impl DecodeReportRepr {
    /// Reads 16 bytes; `Truncated` below 16.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < DECODE_REPORT_LEN {
            return Err(Error::Truncated);
        }
        Ok(DecodeReportRepr {
            status: bytes::u8_at(buf, 0),
            reserved: bytes::u8_at(buf, 1),
            defects: u16::from_le_bytes(bytes::array(buf, 2)),
            weight: f32::from_bits(bytes::le32(buf, 4)),
            decode_ns: bytes::le32(buf, 8),
            shot: bytes::le32(buf, 12),
        })
    }

    /// 16.
    pub const fn buffer_len(&self) -> usize {
        DECODE_REPORT_LEN
    }

    /// Writes 16 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..DECODE_REPORT_LEN).ok_or(Error::BufferTooSmall)?;
        bytes::set_u8(out, 0, self.status);
        bytes::set_u8(out, 1, self.reserved);
        bytes::put(out, 2, self.defects.to_le_bytes());
        bytes::set_le32(out, 4, self.weight.to_bits());
        bytes::set_le32(out, 8, self.decode_ns);
        bytes::set_le32(out, 12, self.shot);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::{self, fnv1a32, function_id, RequestRepr};
    use proptest::prelude::*;

    // enqueue_syndromes: decoder 3, counter 5, mapping 0, 12 bits 0b1000_0000_0101 ->
    // bytes 0x05 0x08 (bit 0, bit 2, bit 11).
    static ENQUEUE_BYTES: [u8; 34] = [
        0x03, 0, 0, 0, 0, 0, 0, 0, //
        0x05, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0, //
        0x0C, 0, 0, 0, 0, 0, 0, 0, //
        0x05, 0x08,
    ];

    // get_corrections: decoder 3, return_size 1, reset 1.
    static GET_BYTES: [u8; 17] = [
        0x03, 0, 0, 0, 0, 0, 0, 0, //
        0x01, 0, 0, 0, 0, 0, 0, 0, //
        0x01,
    ];

    // reset_decoder: decoder -1 (all bits set: ids are carried verbatim).
    static RESET_BYTES: [u8; 8] = [0xFF; 8];

    // report: overflow, 14 defects, weight 1.5, 1234 ns, shot 7.
    static REPORT_BYTES: [u8; 16] = [0x01, 0x00, 0x0E, 0x00, 0x00, 0x00, 0xC0, 0x3F, 0xD2, 0x04, 0, 0, 0x07, 0, 0, 0];

    fn enqueue_repr() -> EnqueueSyndromesRepr {
        EnqueueSyndromesRepr { decoder_id: 3, counter: 5, syndrome_mapping_id: 0, num_syndromes: 12 }
    }

    fn report_repr() -> DecodeReportRepr {
        DecodeReportRepr { status: REPORT_OVERFLOW, reserved: 0, defects: 14, weight: 1.5, decode_ns: 1234, shot: 7 }
    }

    #[test]
    fn function_ids_are_pinned() {
        // PROTOCOLS.md 3: "Recompute the FNV-1a ids in a test and pin them."
        assert_eq!(function_id::ENQUEUE_SYNDROMES, 0x7ED8_BE82);
        assert_eq!(function_id::GET_CORRECTIONS, 0x882D_5BA1);
        assert_eq!(function_id::RESET_DECODER, 0x977A_59CF);
        assert_eq!(fnv1a32(b"enqueue_syndromes"), function_id::ENQUEUE_SYNDROMES);
        assert_eq!(fnv1a32(b"get_corrections"), function_id::GET_CORRECTIONS);
        assert_eq!(fnv1a32(b"reset_decoder"), function_id::RESET_DECODER);
    }

    #[test]
    fn test_deconstruct() {
        let v = EnqueueSyndromes::new_checked(&ENQUEUE_BYTES[..]).unwrap();
        assert_eq!(v.decoder_id(), 3);
        assert_eq!(v.counter(), 5);
        assert_eq!(v.syndrome_mapping_id(), 0);
        assert_eq!(v.num_syndromes(), 12);
        assert_eq!(v.syndromes(), &[0x05, 0x08]);
        let set: Vec<usize> = (0..16).filter(|&i| v.syndrome(i)).collect();
        assert_eq!(set, [0, 2, 11]);
        assert_eq!(parse_corrections(&[0b101], 3), 0b101);
        assert_eq!(parse_corrections(&[0b101], 1), 0b1);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 34];
        let mut v = EnqueueSyndromes::new_unchecked(&mut buf[..]);
        v.set_decoder_id(3);
        v.set_counter(5);
        v.set_syndrome_mapping_id(0);
        v.set_num_syndromes(12);
        let s = v.syndromes_mut();
        assert_eq!(s.len(), 2);
        for i in [0, 2, 11] {
            set_bit(s, i, true);
        }
        assert_eq!(buf, ENQUEUE_BYTES);
        let mut out = [0xAAu8; 8];
        assert_eq!(emit_corrections(0b1, 1, &mut out), Ok(8));
        assert_eq!(out, [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn test_parse() {
        assert_eq!(EnqueueSyndromesRepr::parse(&ENQUEUE_BYTES), Ok(enqueue_repr()));
        assert_eq!(EnqueueSyndromesRepr::parse(&ENQUEUE_BYTES[..33]), Err(Error::Truncated));
        assert_eq!(EnqueueSyndromesRepr::parse(&ENQUEUE_BYTES[..31]), Err(Error::Truncated));
        let mut neg = ENQUEUE_BYTES;
        neg[31] = 0x80;
        assert_eq!(EnqueueSyndromesRepr::parse(&neg), Err(Error::Malformed));
        assert_eq!(
            GetCorrectionsRepr::parse(&GET_BYTES),
            Ok(GetCorrectionsRepr { decoder_id: 3, return_size: 1, reset: 1 })
        );
        assert!(GetCorrectionsRepr::parse(&GET_BYTES).unwrap().reset());
        assert_eq!(GetCorrectionsRepr::parse(&GET_BYTES[..16]), Err(Error::Truncated));
        assert_eq!(ResetDecoderRepr::parse(&RESET_BYTES), Ok(ResetDecoderRepr { decoder_id: -1 }));
        assert_eq!(ResetDecoderRepr::parse(&RESET_BYTES[..7]), Err(Error::Truncated));
        assert_eq!(DecodeReportRepr::parse(&REPORT_BYTES), Ok(report_repr()));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 34];
        assert_eq!(enqueue_repr().emit_with(&[0x05, 0x08], &mut buf), Ok(34));
        assert_eq!(buf, ENQUEUE_BYTES);
        assert_eq!(enqueue_repr().buffer_len(), 34);
        assert_eq!(enqueue_repr().emit_with(&[0x05], &mut buf), Err(Error::Malformed));
        assert_eq!(enqueue_repr().emit_with(&[0x05, 0x08], &mut buf[..33]), Err(Error::BufferTooSmall));
        let mut buf = [0u8; 17];
        GetCorrectionsRepr { decoder_id: 3, return_size: 1, reset: 1 }.emit(&mut buf).unwrap();
        assert_eq!(buf, GET_BYTES);
        let mut buf = [0u8; 8];
        ResetDecoderRepr { decoder_id: -1 }.emit(&mut buf).unwrap();
        assert_eq!(buf, RESET_BYTES);
        let mut buf = [0u8; 16];
        report_repr().emit(&mut buf).unwrap();
        assert_eq!(buf, REPORT_BYTES);
        assert_eq!(report_repr().emit(&mut buf[..15]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn whole_request_in_a_slot() {
        // What the FPGA sends: RPC header, then the arguments.
        let mut slot = [0u8; 24 + 34];
        RequestRepr { function_id: function_id::ENQUEUE_SYNDROMES, arg_len: 34, request_id: 9, ptp_timestamp: 1 }
            .emit(&mut slot)
            .unwrap();
        enqueue_repr().emit_with(&[0x05, 0x08], &mut slot[24..]).unwrap();
        let req = rpc::Request::new_checked(&slot[..]).unwrap();
        assert_eq!(req.args().unwrap(), &ENQUEUE_BYTES[..]);
    }

    #[test]
    fn lengths() {
        assert_eq!(packed_len(0), 0);
        assert_eq!(packed_len(1), 1);
        assert_eq!(packed_len(120), 15);
        assert_eq!(packed_len(121), 16);
        assert_eq!(correction_len(0), 0);
        assert_eq!(correction_len(1), 8);
        assert_eq!(correction_len(64), 8);
        assert_eq!(correction_len(65), 16);
        assert_eq!(syndrome_bytes(-1), None);
        assert_eq!(syndrome_bytes(MAX_SYNDROMES + 1), None);
        assert_eq!(syndrome_bytes(24), Some(3));
        let mut b = [0u8; 2];
        set_bit(&mut b, 99, true);
        assert_eq!(b, [0, 0]);
        assert!(!bit(&b, 99));
        let mut c = [0u8; 16];
        emit_corrections(u64::MAX, 100, &mut c).unwrap();
        assert_eq!(&c[..8], &[0xFF; 8]);
        assert_eq!(&c[8..], &[0; 8]);
    }

    fn enqueue_strategy() -> impl Strategy<Value = (EnqueueSyndromesRepr, Vec<u8>)> {
        (any::<(i64, i64, i64)>(), 0i64..300).prop_flat_map(|((d, c, m), n)| {
            let bytes = packed_len(n as usize);
            proptest::collection::vec(any::<u8>(), bytes).prop_map(move |s| {
                (EnqueueSyndromesRepr { decoder_id: d, counter: c, syndrome_mapping_id: m, num_syndromes: n }, s)
            })
        })
    }

    proptest! {
        #[test]
        fn enqueue_round_trips((repr, syn) in enqueue_strategy()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            prop_assert_eq!(repr.emit_with(&syn, &mut buf), Ok(buf.len()));
            prop_assert_eq!(EnqueueSyndromesRepr::parse(&buf), Ok(repr));
            let v = EnqueueSyndromes::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(v.syndromes(), &syn[..]);
            let mut again = vec![0u8; buf.len()];
            repr.emit_with(v.syndromes(), &mut again).unwrap();
            prop_assert_eq!(again, buf);
        }

        #[test]
        fn get_and_reset_round_trip(d in any::<i64>(), r in any::<i64>(), reset in any::<u8>()) {
            let g = GetCorrectionsRepr { decoder_id: d, return_size: r, reset };
            let mut buf = [0u8; GET_CORRECTIONS_LEN];
            g.emit(&mut buf).unwrap();
            prop_assert_eq!(GetCorrectionsRepr::parse(&buf), Ok(g));
            let z = ResetDecoderRepr { decoder_id: d };
            let mut buf = [0u8; RESET_DECODER_LEN];
            z.emit(&mut buf).unwrap();
            prop_assert_eq!(ResetDecoderRepr::parse(&buf), Ok(z));
        }

        #[test]
        fn report_round_trips(bytes in any::<[u8; 16]>()) {
            // Every 16 bytes parse; re-emitting gives them back (NaN payloads included,
            // since the weight travels as raw bits).
            let r = DecodeReportRepr::parse(&bytes).unwrap();
            let mut out = [0u8; 16];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn corrections_round_trip(mask in any::<u64>(), size in 0usize..=64) {
            let mut buf = [0u8; 8];
            let n = emit_corrections(mask, size, &mut buf).unwrap();
            prop_assert_eq!(n, correction_len(size));
            let keep = if size == 64 { u64::MAX } else { (1u64 << size) - 1 };
            prop_assert_eq!(parse_corrections(&buf, size), mask & keep);
        }

        #[test]
        fn no_panic_on_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(r) = EnqueueSyndromesRepr::parse(&data) {
                let v = EnqueueSyndromes::new_checked(&data[..]).unwrap();
                let mut out = vec![0u8; r.buffer_len()];
                r.emit_with(v.syndromes(), &mut out).unwrap();
                prop_assert_eq!(&out[..], &data[..r.buffer_len()]);
            }
            let v = EnqueueSyndromes::new_unchecked(&data[..]);
            let _ = (v.syndromes(), v.syndrome(7), v.syndrome(usize::MAX));
            if let Ok(g) = GetCorrectionsRepr::parse(&data) {
                let mut out = [0u8; GET_CORRECTIONS_LEN];
                g.emit(&mut out).unwrap();
                prop_assert_eq!(&out[..], &data[..GET_CORRECTIONS_LEN]);
            }
            let _ = ResetDecoderRepr::parse(&data);
            let _ = DecodeReportRepr::parse(&data);
            let _ = parse_corrections(&data, 64);
            let mut copy = data.clone();
            let mut w = EnqueueSyndromes::new_unchecked(&mut copy[..]);
            let _ = w.syndromes_mut().len();
        }
    }
}
