//! ECB, the HSB control plane over UDP (PROTOCOLS.md 2.1; HSB RTL `ecb_rdwr_ctrl.sv`).
//!
//! Guarantees: [`Request`] and [`Reply`] views never panic on any byte string, whatever its
//! length, and every index past the last pair reads as "absent" (`None`, or 0 where the
//! contract returns a bare value). Emitters write big-endian fields, zero the reserved
//! bytes, and fail with [`Error::BufferTooSmall`] instead of writing a partial message.
//!
//! Request: `cmd | flags | seq(BE16) | 2 reserved | (address BE32, value BE32)*`. A read may
//! omit its final value word (the 10-byte RD_DWORD), so the last pair of any request may be
//! an address alone.
//!
//! Reply: `cmd|0x80 | flags | seq(BE16) | status | reserved | (address, value)* |
//! latched seq(BE16) | pad`. The RTL pads only a reply of at most one pair, with 2 bytes
//! (PROTOCOLS.md 2.1: "a DWORD reply is 18 bytes ... a block reply of n pairs is 6 + 8n + 2
//! bytes"), so [`reply_len`] is 18 for one pair and `8 + 8n` for `n >= 2`. NVIDIA's
//! emulator writes 4 zero bytes after the pairs instead, and no latched sequence (it reads as
//! 0): `10 + 8n`. Both give `pair_count = (len - 8) / 8`, so one parser accepts both
//! (PROTOCOLS.md 2.1: "a host must accept both reply lengths").

use crate::bytes;
use crate::{Error, Result};

/// UDP port of the FPGA's ECB server.
pub const PORT: u16 = 8192;
/// Request header: command, flags, sequence, 2 reserved bytes.
pub const HEADER_LEN: usize = 6;
/// Reply header: command | 0x80, flags, sequence, status, reserved.
pub const REPLY_HEADER_LEN: usize = 6;
/// Most pairs in one BLOCK command.
pub const MAX_PAIRS: usize = 511;
/// One (address, value) pair.
pub const PAIR_LEN: usize = 8;
/// Smallest request: header and one address (RD_DWORD without its value word).
pub const MIN_REQUEST_LEN: usize = HEADER_LEN + 4;
/// Smallest reply: header and the 2-byte latched sequence (or 2 trailer bytes).
pub const MIN_REPLY_LEN: usize = REPLY_HEADER_LEN + 2;
/// Pad bytes after the latched sequence of an RTL reply of at most one pair.
pub const DWORD_PAD_LEN: usize = 2;
/// Zero bytes NVIDIA's emulator writes after the pairs (no latched sequence, no pad).
pub const EMULATOR_TRAILER_LEN: usize = 4;
/// Bit set in a reply's command byte.
pub const REPLY_BIT: u8 = 0x80;

/// Request flag bits (byte 1); the other bits must be 0 (else the RTL answers 0x06).
pub mod flags {
    /// Ask for a reply to a write (reads are always answered).
    pub const ACK_REQUEST: u8 = 0x01;
    /// The FPGA requires `sequence == latched + 1`, else status 0x0B.
    pub const SEQUENCE_CHECK: u8 = 0x02;
}

mod field {
    use crate::bytes::Field;
    pub const COMMAND: usize = 0;
    pub const FLAGS: usize = 1;
    pub const SEQUENCE: Field = 2..4;
    pub const RESERVED: Field = 4..6;
    pub const STATUS: usize = 4;
    pub const REPLY_RESERVED: usize = 5;
    pub const PAIRS: usize = 6;
}

/// ECB command byte. Total: every byte maps to a variant and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// 0x04: write one DWORD.
    WrDword,
    /// 0x09: write up to [`MAX_PAIRS`] DWORDs.
    WrBlock,
    /// 0x14: read one DWORD.
    RdDword,
    /// 0x19: read up to [`MAX_PAIRS`] DWORDs.
    RdBlock,
    /// Any other byte (the RTL answers it with status 0x04 and the raw byte).
    Unknown(u8),
}

impl Command {
    /// True for RD_DWORD and RD_BLOCK.
    pub fn is_read(self) -> bool {
        matches!(self, Command::RdDword | Command::RdBlock)
    }

    /// True for WR_BLOCK and RD_BLOCK.
    pub fn is_block(self) -> bool {
        matches!(self, Command::WrBlock | Command::RdBlock)
    }
}

impl From<u8> for Command {
    fn from(b: u8) -> Self {
        match b {
            0x04 => Command::WrDword,
            0x09 => Command::WrBlock,
            0x14 => Command::RdDword,
            0x19 => Command::RdBlock,
            other => Command::Unknown(other),
        }
    }
}

impl From<Command> for u8 {
    fn from(c: Command) -> u8 {
        match c {
            Command::WrDword => 0x04,
            Command::WrBlock => 0x09,
            Command::RdDword => 0x14,
            Command::RdBlock => 0x19,
            Command::Unknown(other) => other,
        }
    }
}

/// Reply status byte. Total. RTL priority when several apply: 0x04 > 0x06 > 0x0B > 0x03.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 0x00.
    Ok,
    /// 0x02, a rocelink peer's status (neither the RTL nor the emulator sends it): the write
    /// was stored but the function it starts cannot run. fpga-sim answers it to a player
    /// start that cannot play; `hsb::ext::PLAYER_START_ERROR` says why.
    Refused,
    /// 0x03: no register at that address (a block stops at its first bad address).
    InvalidAddress,
    /// 0x04: unknown command.
    InvalidCommand,
    /// 0x06: a reserved flag bit is set.
    InvalidFlags,
    /// 0x0B: sequence checking is on and `seq != latched + 1`.
    SequenceCheckFailed,
    /// Any other byte.
    Unknown(u8),
}

impl From<u8> for Status {
    fn from(b: u8) -> Self {
        match b {
            0x00 => Status::Ok,
            0x02 => Status::Refused,
            0x03 => Status::InvalidAddress,
            0x04 => Status::InvalidCommand,
            0x06 => Status::InvalidFlags,
            0x0B => Status::SequenceCheckFailed,
            other => Status::Unknown(other),
        }
    }
}

impl From<Status> for u8 {
    fn from(s: Status) -> u8 {
        match s {
            Status::Ok => 0x00,
            Status::Refused => 0x02,
            Status::InvalidAddress => 0x03,
            Status::InvalidCommand => 0x04,
            Status::InvalidFlags => 0x06,
            Status::SequenceCheckFailed => 0x0B,
            Status::Unknown(other) => other,
        }
    }
}

/// Length of a request carrying `pairs` full pairs.
pub const fn request_len(pairs: usize) -> usize {
    HEADER_LEN + PAIR_LEN * pairs
}

/// Length of a reply in the RTL layout carrying `pairs` pairs: header, pairs, latched
/// sequence, and 2 pad bytes only when `pairs <= 1` (PROTOCOLS.md 2.1: "only a reply of at
/// most one pair is padded, a block reply of n pairs is 6 + 8n + 2 bytes"): 18 bytes for
/// one pair, 32 for 3, 4096 for 511.
pub const fn reply_len(pairs: usize) -> usize {
    let pad = if pairs <= 1 { DWORD_PAD_LEN } else { 0 };
    REPLY_HEADER_LEN + PAIR_LEN * pairs + 2 + pad
}

/// Length of a reply in NVIDIA's emulator layout carrying `pairs` pairs (4 trailing zero
/// bytes, PROTOCOLS.md 2.1).
pub const fn emulator_reply_len(pairs: usize) -> usize {
    REPLY_HEADER_LEN + PAIR_LEN * pairs + EMULATOR_TRAILER_LEN
}

/// A read-only or read-write view of an ECB request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Request<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Request { buffer }
    }

    /// Wraps a buffer that holds at least the header and one address.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// `Truncated` below [`MIN_REQUEST_LEN`] bytes. Longer requests (more than
    /// [`MAX_PAIRS`] pairs, trailing bytes) are accepted; the server decides.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MIN_REQUEST_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the request in bytes.
    pub fn len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// True for an empty buffer (never for a checked view).
    pub fn is_empty(&self) -> bool {
        self.buffer.as_ref().is_empty()
    }

    /// Byte 0.
    pub fn command(&self) -> Command {
        Command::from(bytes::u8_at(self.buffer.as_ref(), field::COMMAND))
    }

    /// Byte 1.
    pub fn flags(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::FLAGS)
    }

    /// Bytes 2-3.
    pub fn sequence(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::SEQUENCE.start)
    }

    /// Bytes 4-5 (0 from a well-behaved host).
    pub fn reserved(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::RESERVED.start)
    }

    /// Number of addresses present: a pair counts once its address is there, so a
    /// 10-byte RD_DWORD has one pair whose value is absent.
    pub fn pair_count(&self) -> usize {
        let len = self.buffer.as_ref().len();
        if len < MIN_REQUEST_LEN {
            0
        } else {
            (len - HEADER_LEN + 4) / PAIR_LEN
        }
    }

    /// Address of pair `i`; 0 when `i >= pair_count()` (use [`Request::get_address`] to tell).
    pub fn address(&self, i: usize) -> u32 {
        self.get_address(i).unwrap_or(0)
    }

    /// Address of pair `i`, `None` past the last pair.
    pub fn get_address(&self, i: usize) -> Option<u32> {
        let at = pair_offset(i)?;
        let end = at.checked_add(4)?;
        let b = self.buffer.as_ref().get(at..end)?;
        Some(bytes::be32(b, 0))
    }

    /// Value of pair `i`; `None` when the request omits it (a short read) or past the last pair.
    pub fn value(&self, i: usize) -> Option<u32> {
        let at = pair_offset(i)?.checked_add(4)?;
        let end = at.checked_add(4)?;
        let b = self.buffer.as_ref().get(at..end)?;
        Some(bytes::be32(b, 0))
    }

    /// Iterator over `(address, value)`; the value is `None` where it is omitted.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, Option<u32>)> + '_ {
        (0..self.pair_count()).map(move |i| (self.address(i), self.value(i)))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Request<T> {
    /// Sets byte 0.
    pub fn set_command(&mut self, c: Command) {
        bytes::set_u8(self.buffer.as_mut(), field::COMMAND, c.into());
    }

    /// Sets byte 1.
    pub fn set_flags(&mut self, f: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::FLAGS, f);
    }

    /// Sets bytes 2-3.
    pub fn set_sequence(&mut self, s: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::SEQUENCE.start, s);
    }

    /// Sets bytes 4-5.
    pub fn set_reserved(&mut self, r: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::RESERVED.start, r);
    }

    /// Sets the address of pair `i`; ignored past the end of the buffer.
    pub fn set_address(&mut self, i: usize, a: u32) {
        if let Some(at) = pair_offset(i) {
            bytes::set_be32(self.buffer.as_mut(), at, a);
        }
    }

    /// Sets the value of pair `i`; ignored past the end of the buffer.
    pub fn set_value(&mut self, i: usize, v: u32) {
        if let Some(at) = pair_offset(i).and_then(|a| a.checked_add(4)) {
            bytes::set_be32(self.buffer.as_mut(), at, v);
        }
    }
}

fn pair_offset(i: usize) -> Option<usize> {
    i.checked_mul(PAIR_LEN)?.checked_add(field::PAIRS)
}

/// Writes a request with full pairs; returns its length ([`request_len`]).
///
/// `Malformed` for zero or more than [`MAX_PAIRS`] pairs; `BufferTooSmall` if it does not fit.
pub fn emit_request(command: Command, flags: u8, sequence: u16, pairs: &[(u32, u32)], buf: &mut [u8]) -> Result<usize> {
    if pairs.is_empty() || pairs.len() > MAX_PAIRS {
        return Err(Error::Malformed);
    }
    let len = request_len(pairs.len());
    let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
    let mut r = Request::new_unchecked(out);
    r.set_command(command);
    r.set_flags(flags);
    r.set_sequence(sequence);
    r.set_reserved(0);
    for (i, &(a, v)) in pairs.iter().enumerate() {
        r.set_address(i, a);
        r.set_value(i, v);
    }
    Ok(len)
}

/// A read-only or read-write view of an ECB reply (RTL or emulator layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Reply<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Reply { buffer }
    }

    /// Wraps a buffer of at least [`MIN_REPLY_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// `Truncated` below [`MIN_REPLY_LEN`]. A short DWORD read reply (16 bytes: no pad)
    /// and both 18-byte layouts pass.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MIN_REPLY_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Byte 0 as sent: the request's command | 0x80 (the raw byte for an unknown command).
    pub fn command_byte(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::COMMAND)
    }

    /// The command this reply answers (byte 0 without [`REPLY_BIT`]).
    pub fn command(&self) -> Command {
        Command::from(self.command_byte() & !REPLY_BIT)
    }

    /// True when byte 0 has [`REPLY_BIT`] set.
    pub fn is_reply(&self) -> bool {
        self.command_byte() & REPLY_BIT != 0
    }

    /// Byte 1.
    pub fn flags(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::FLAGS)
    }

    /// Bytes 2-3: the request's sequence, for matching.
    pub fn sequence(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::SEQUENCE.start)
    }

    /// Byte 4.
    pub fn status(&self) -> Status {
        Status::from(bytes::u8_at(self.buffer.as_ref(), field::STATUS))
    }

    /// `(len - 8) / 8`: the same for the RTL layout (`8 + 8n`, or 18 bytes for one pair)
    /// and the emulator's (`10 + 8n`).
    pub fn pair_count(&self) -> usize {
        self.buffer.as_ref().len().saturating_sub(MIN_REPLY_LEN) / PAIR_LEN
    }

    /// Pair `i`; `(0, 0)` past the last pair (use [`Reply::get_pair`] to tell).
    pub fn pair(&self, i: usize) -> (u32, u32) {
        self.get_pair(i).unwrap_or((0, 0))
    }

    /// Pair `i`, `None` when `i >= pair_count()`.
    pub fn get_pair(&self, i: usize) -> Option<(u32, u32)> {
        if i >= self.pair_count() {
            return None;
        }
        let at = pair_offset(i)?;
        let b = self.buffer.as_ref();
        Some((bytes::be32(b, at), bytes::be32(b, at + 4)))
    }

    /// Iterator over the pairs.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.pair_count()).map(move |i| self.pair(i))
    }

    /// Byte 5 (0 from the RTL).
    pub fn reserved(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::REPLY_RESERVED)
    }

    /// The 2 bytes after the pairs: the RTL's latched sequence (0 from the emulator).
    pub fn latched_sequence(&self) -> u16 {
        match pair_offset(self.pair_count()) {
            Some(at) => bytes::be16(self.buffer.as_ref(), at),
            None => 0,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reply<T> {
    /// Sets byte 0.
    pub fn set_command_byte(&mut self, b: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::COMMAND, b);
    }

    /// Sets byte 1.
    pub fn set_flags(&mut self, f: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::FLAGS, f);
    }

    /// Sets bytes 2-3.
    pub fn set_sequence(&mut self, s: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::SEQUENCE.start, s);
    }

    /// Sets byte 4.
    pub fn set_status(&mut self, s: Status) {
        bytes::set_u8(self.buffer.as_mut(), field::STATUS, s.into());
    }

    /// Sets byte 5.
    pub fn set_reserved(&mut self, r: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::REPLY_RESERVED, r);
    }

    /// Sets pair `i`; ignored past the end of the buffer.
    pub fn set_pair(&mut self, i: usize, address: u32, value: u32) {
        if let Some(at) = pair_offset(i) {
            bytes::set_be32(self.buffer.as_mut(), at, address);
            bytes::set_be32(self.buffer.as_mut(), at.saturating_add(4), value);
        }
    }

    /// Sets the 2 bytes after the pairs.
    pub fn set_latched_sequence(&mut self, s: u16) {
        if let Some(at) = pair_offset(self.pair_count()) {
            bytes::set_be16(self.buffer.as_mut(), at, s);
        }
    }
}

/// Writes a reply in the RTL layout (pairs, latched sequence, and 2 zero pad bytes when at
/// most one pair); returns its length ([`reply_len`]). `Malformed` above [`MAX_PAIRS`] pairs.
pub fn emit_reply(
    command_byte: u8,
    flags: u8,
    sequence: u16,
    status: Status,
    pairs: &[(u32, u32)],
    latched_sequence: u16,
    buf: &mut [u8],
) -> Result<usize> {
    if pairs.len() > MAX_PAIRS {
        return Err(Error::Malformed);
    }
    let len = reply_len(pairs.len());
    let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
    out.fill(0);
    let mut r = Reply::new_unchecked(out);
    r.set_command_byte(command_byte);
    r.set_flags(flags);
    r.set_sequence(sequence);
    r.set_status(status);
    for (i, &(a, v)) in pairs.iter().enumerate() {
        r.set_pair(i, a, v);
    }
    r.set_latched_sequence(latched_sequence);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    // WR_DWORD, ACK|SEQ_CHECK, seq 0x1234, reg 0x1000 <- 0xDEADBEEF.
    static REQUEST_BYTES: [u8; 14] =
        [0x04, 0x03, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0xDE, 0xAD, 0xBE, 0xEF];

    // RD_DWORD reply, RTL layout: HSB_IP_VERSION (0x80) = 0x2602, latched 0x0007, 2 pad bytes.
    static REPLY_BYTES: [u8; 18] =
        [0x94, 0x01, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x26, 0x02, 0x00, 0x07, 0x00, 0x00];

    #[test]
    fn test_deconstruct() {
        let r = Request::new_checked(&REQUEST_BYTES[..]).unwrap();
        assert_eq!(r.command(), Command::WrDword);
        assert_eq!(r.flags(), flags::ACK_REQUEST | flags::SEQUENCE_CHECK);
        assert_eq!(r.sequence(), 0x1234);
        assert_eq!(r.pair_count(), 1);
        assert_eq!(r.address(0), 0x1000);
        assert_eq!(r.value(0), Some(0xDEAD_BEEF));
        assert_eq!(r.value(1), None);
        assert_eq!(r.get_address(1), None);

        let p = Reply::new_checked(&REPLY_BYTES[..]).unwrap();
        assert_eq!(p.command_byte(), 0x94);
        assert_eq!(p.command(), Command::RdDword);
        assert!(p.is_reply());
        assert_eq!(p.sequence(), 7);
        assert_eq!(p.status(), Status::Ok);
        assert_eq!(p.pair_count(), 1);
        assert_eq!(p.pair(0), (0x80, 0x2602));
        assert_eq!(p.get_pair(1), None);
        assert_eq!(p.latched_sequence(), 7);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xFFu8; 14];
        let mut r = Request::new_unchecked(&mut buf[..]);
        r.set_command(Command::WrDword);
        r.set_flags(0x03);
        r.set_sequence(0x1234);
        r.set_reserved(0);
        r.set_address(0, 0x1000);
        r.set_value(0, 0xDEAD_BEEF);
        assert_eq!(buf, REQUEST_BYTES);

        let mut buf = [0xFFu8; 18];
        let mut p = Reply::new_unchecked(&mut buf[..]);
        p.set_command_byte(0x94);
        p.set_flags(0x01);
        p.set_sequence(7);
        p.set_status(Status::Ok);
        p.set_reserved(0);
        p.set_pair(0, 0x80, 0x2602);
        p.set_latched_sequence(7);
        buf[16] = 0;
        buf[17] = 0;
        assert_eq!(buf, REPLY_BYTES);
    }

    #[test]
    fn test_parse() {
        let r = Request::new_checked(&REQUEST_BYTES[..]).unwrap();
        let pairs: Vec<_> = r.pairs().collect();
        assert_eq!(pairs, vec![(0x1000, Some(0xDEAD_BEEF))]);
        let p = Reply::new_checked(&REPLY_BYTES[..]).unwrap();
        assert_eq!(p.pairs().collect::<Vec<_>>(), vec![(0x80, 0x2602)]);
    }

    #[test]
    fn test_emit() {
        let mut buf = [0xFFu8; 32];
        let n = emit_request(Command::WrDword, 0x03, 0x1234, &[(0x1000, 0xDEAD_BEEF)], &mut buf).unwrap();
        assert_eq!(&buf[..n], &REQUEST_BYTES[..]);

        let mut buf = [0xFFu8; 32];
        let n = emit_reply(0x94, 0x01, 7, Status::Ok, &[(0x80, 0x2602)], 7, &mut buf).unwrap();
        assert_eq!(&buf[..n], &REPLY_BYTES[..]);
    }

    #[test]
    fn short_read_omits_value() {
        let bytes = [0x14, 0x00, 0x00, 0x01, 0, 0, 0x00, 0x00, 0x00, 0x80];
        let r = Request::new_checked(&bytes[..]).unwrap();
        assert_eq!(r.command(), Command::RdDword);
        assert!(r.command().is_read() && !r.command().is_block());
        assert_eq!(r.pair_count(), 1);
        assert_eq!(r.address(0), 0x80);
        assert_eq!(r.value(0), None);
        assert_eq!(Request::new_checked(&bytes[..9]), Err(Error::Truncated));
    }

    #[test]
    fn block_request_counts_pairs() {
        let pairs: Vec<(u32, u32)> = (0..MAX_PAIRS as u32).map(|i| (i * 4, !i)).collect();
        let mut buf = vec![0u8; request_len(MAX_PAIRS)];
        let n = emit_request(Command::WrBlock, 0, 9, &pairs, &mut buf).unwrap();
        assert_eq!(n, 6 + 8 * 511);
        let r = Request::new_checked(&buf[..]).unwrap();
        assert_eq!(r.pair_count(), MAX_PAIRS);
        assert!(r.pairs().map(|(a, v)| (a, v.unwrap())).eq(pairs.iter().copied()));
        // A trailing address with no value (a BLOCK read may stop short).
        let r = Request::new_checked(&buf[..n - 4]).unwrap();
        assert_eq!(r.pair_count(), MAX_PAIRS);
        assert_eq!(r.value(MAX_PAIRS - 1), None);
        let mut big = vec![0u8; request_len(MAX_PAIRS + 1)];
        let too_many = vec![(0, 0); MAX_PAIRS + 1];
        assert_eq!(emit_request(Command::WrBlock, 0, 0, &too_many, &mut big), Err(Error::Malformed));
        assert_eq!(emit_request(Command::WrBlock, 0, 0, &[], &mut big), Err(Error::Malformed));
        assert_eq!(emit_request(Command::WrDword, 0, 0, &[(1, 2)], &mut big[..13]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn emulator_reply_layout() {
        // The emulator writes 4 zero bytes after the pairs instead of latched seq + pad.
        let mut bytes = REPLY_BYTES;
        bytes[14] = 0;
        bytes[15] = 0;
        let p = Reply::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.pair_count(), 1);
        assert_eq!(p.pair(0), (0x80, 0x2602));
        assert_eq!(p.latched_sequence(), 0);
        // A 16-byte DWORD reply (no pad) still has one pair and the latched sequence.
        let p = Reply::new_checked(&REPLY_BYTES[..16]).unwrap();
        assert_eq!(p.pair_count(), 1);
        assert_eq!(p.latched_sequence(), 7);
        // A reply without pairs (e.g. an error reply) is 10 bytes.
        let mut buf = [0u8; 10];
        assert_eq!(emit_reply(0xA2, 0, 3, Status::InvalidCommand, &[], 2, &mut buf), Ok(10));
        let p = Reply::new_checked(&buf[..]).unwrap();
        assert_eq!((p.pair_count(), p.status(), p.latched_sequence()), (0, Status::InvalidCommand, 2));
        assert_eq!(p.command(), Command::Unknown(0x22));
        assert_eq!(Reply::new_checked(&buf[..7]), Err(Error::Truncated));
    }

    // RD_BLOCK reply, RTL layout, 3 pairs: 6 + 8 * 3 + 2 = 32 bytes, no pad.
    static BLOCK_REPLY_BYTES: [u8; 32] = [
        0x99, 0x00, 0x01, 0x02, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x26, 0x07, //
        0x00, 0x00, 0x00, 0x84, 0x20, 0x25, 0x11, 0x30, //
        0x00, 0x00, 0x01, 0x88, 0x00, 0x00, 0x00, 0x0F, //
        0x01, 0x02,
    ];

    #[test]
    fn reply_lengths_follow_the_rtl() {
        // PROTOCOLS.md 2.1: an 18-byte DWORD reply, 6 + 8n + 2 for a block of n pairs.
        assert_eq!(reply_len(1), 18);
        assert_eq!(reply_len(3), 32);
        assert_eq!(reply_len(MAX_PAIRS), 4096);
        assert_eq!(reply_len(0), 10);
        assert_eq!(emulator_reply_len(1), 18);
        assert_eq!(emulator_reply_len(3), 34);
        let pairs = [(0x80, 0x2607), (0x84, 0x2025_1130), (0x188, 0xF)];
        let mut buf = [0xFFu8; 40];
        let n = emit_reply(0x99, 0, 0x0102, Status::Ok, &pairs, 0x0102, &mut buf).unwrap();
        assert_eq!(&buf[..n], &BLOCK_REPLY_BYTES[..]);
        let big: Vec<(u32, u32)> = (0..MAX_PAIRS as u32).map(|i| (4 * i, !i)).collect();
        let mut buf = vec![0xFFu8; 5000];
        let n = emit_reply(0x99, 0, 7, Status::Ok, &big, 0xBEEF, &mut buf).unwrap();
        assert_eq!(n, 4096);
        assert_eq!(buf[4094..4096], [0xBE, 0xEF], "the latched sequence ends the reply");
        let p = Reply::new_checked(&buf[..n]).unwrap();
        assert_eq!((p.pair_count(), p.latched_sequence()), (MAX_PAIRS, 0xBEEF));
        assert!(p.pairs().eq(big.iter().copied()));
    }

    #[test]
    fn block_reply_in_both_layouts() {
        let p = Reply::new_checked(&BLOCK_REPLY_BYTES[..]).unwrap();
        assert_eq!(p.pair_count(), 3);
        assert_eq!(p.pair(2), (0x188, 0xF));
        assert_eq!(p.latched_sequence(), 0x0102);
        // The emulator: the same pairs, then 4 zero bytes (34 bytes).
        let mut emu = [0u8; 34];
        emu[..30].copy_from_slice(&BLOCK_REPLY_BYTES[..30]);
        let p = Reply::new_checked(&emu[..]).unwrap();
        assert_eq!(p.pair_count(), 3);
        assert_eq!(p.pairs().collect::<Vec<_>>(), [(0x80, 0x2607), (0x84, 0x2025_1130), (0x188, 0xF)]);
        assert_eq!(p.latched_sequence(), 0);
    }

    #[test]
    fn enums_are_total() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(Command::from(b)), b);
            assert_eq!(u8::from(Status::from(b)), b);
        }
    }

    #[test]
    fn unchecked_views_never_panic() {
        let r = Request::new_unchecked(&[][..]);
        assert_eq!((r.pair_count(), r.address(0), r.value(0), r.sequence()), (0, 0, None, 0));
        let p = Reply::new_unchecked(&[0x84u8][..]);
        assert_eq!((p.pair_count(), p.pair(usize::MAX), p.latched_sequence()), (0, (0, 0), 0));
        let mut tiny = [0u8; 3];
        let mut r = Request::new_unchecked(&mut tiny[..]);
        r.set_address(usize::MAX, 1);
        r.set_value(usize::MAX, 1);
        r.set_sequence(0xFFFF);
        // A field that does not fit entirely is not written at all.
        assert_eq!(tiny, [0, 0, 0]);
    }
}
