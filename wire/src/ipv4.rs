//! IPv4 header (RFC 791), as RoCEv2 carries it (IBTA Annex A17, RoCEv2 over IPv4/UDP).
//!
//! Guarantees: a checked [`Packet`] has `5 <= IHL`, the whole header (options included)
//! inside the buffer and `header_len <= total_len <= buffer length`, so [`Packet::payload`]
//! is exactly the datagram payload (Ethernet padding of short frames excluded).
//! [`Ipv4Repr::parse`] additionally verifies the header checksum and rejects fragments,
//! which RoCEv2 never sends (a fragment's ICRC could not be checked). Options are accepted
//! on parse and never emitted (IHL 5).

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// Header length without options (IHL 5); the only length emitted.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// RFC 1071 Internet checksum: the one's complement of the one's complement sum.
/// A header whose checksum field is right sums (checksum included) to 0xFFFF, so this
/// returns 0 for it.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer whose lengths are consistent (see [`Packet::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` when the buffer is shorter than 20 bytes, than the IHL, or than
    /// total_len; `Malformed` for IHL < 5 or total_len < header length. The buffer may be
    /// longer than total_len (Ethernet pads frames to 60 bytes).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = usize::from(self.header_len());
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < header_len {
            return Err(Error::Truncated);
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::Malformed);
        }
        if len < total_len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (4 for IPv4).
    pub fn version(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::VER_IHL) >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> u8 {
        (bytes::u8_at(self.buffer.as_ref(), field::VER_IHL) & 0x0F) * 4
    }

    /// Type of service / DSCP+ECN byte (masked out of the ICRC).
    pub fn tos(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::TOS)
    }

    /// Total length, header included.
    pub fn total_len(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification (covered by the ICRC: PROTOCOLS.md 1.1).
    pub fn ident(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        bytes::be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        bytes::be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::FLG_OFF.start) & FRAG_OFFSET_MASK
    }

    /// Time to live (masked out of the ICRC).
    pub fn ttl(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::TTL)
    }

    /// Protocol number.
    pub fn protocol(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::PROTOCOL)
    }

    /// Header checksum as stored.
    pub fn checksum(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        bytes::array(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        bytes::array(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// True when the header checksum (over IHL * 4 bytes) is right.
    pub fn verify_checksum(&self) -> bool {
        let hl = usize::from(self.header_len());
        match self.buffer.as_ref().get(..hl) {
            Some(h) if hl >= HEADER_LEN => checksum(h) == 0,
            _ => false,
        }
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        bytes::slice(self.buffer.as_ref(), 0..usize::from(self.header_len()))
    }

    /// The payload: from the end of the header to total_len.
    pub fn payload(&self) -> &[u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        bytes::slice(self.buffer.as_ref(), range)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version.
    pub fn set_version(&mut self, v: u8) {
        let b = bytes::u8_at(self.buffer.as_ref(), field::VER_IHL);
        bytes::set_u8(self.buffer.as_mut(), field::VER_IHL, (b & 0x0F) | (v << 4));
    }

    /// Sets the header length in bytes (rounded down to a multiple of 4).
    pub fn set_header_len(&mut self, len: u8) {
        let b = bytes::u8_at(self.buffer.as_ref(), field::VER_IHL);
        bytes::set_u8(self.buffer.as_mut(), field::VER_IHL, (b & 0xF0) | ((len / 4) & 0x0F));
    }

    /// Sets the TOS byte.
    pub fn set_tos(&mut self, v: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::TOS, v);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::IDENT.start, v);
    }

    fn set_flg_off_bits(&mut self, mask: u16, value: u16) {
        let old = bytes::be16(self.buffer.as_ref(), field::FLG_OFF.start);
        bytes::set_be16(self.buffer.as_mut(), field::FLG_OFF.start, (old & !mask) | (value & mask));
    }

    /// Sets the don't-fragment flag.
    pub fn set_dont_frag(&mut self, v: bool) {
        self.set_flg_off_bits(FLAG_DF, if v { FLAG_DF } else { 0 });
    }

    /// Sets the more-fragments flag.
    pub fn set_more_frags(&mut self, v: bool) {
        self.set_flg_off_bits(FLAG_MF, if v { FLAG_MF } else { 0 });
    }

    /// Sets the fragment offset (8-byte units, 13 bits).
    pub fn set_frag_offset(&mut self, v: u16) {
        self.set_flg_off_bits(FRAG_OFFSET_MASK, v);
    }

    /// Clears the reserved flag bit and both flags and the offset.
    pub fn clear_flags(&mut self) {
        bytes::set_be16(self.buffer.as_mut(), field::FLG_OFF.start, 0);
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::TTL, v);
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::PROTOCOL, v);
    }

    /// Sets the checksum field as given.
    pub fn set_checksum(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: [u8; 4]) {
        bytes::put(self.buffer.as_mut(), field::SRC_ADDR.start, a);
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: [u8; 4]) {
        bytes::put(self.buffer.as_mut(), field::DST_ADDR.start, a);
    }

    /// Computes and stores the header checksum (over IHL * 4 bytes).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum(self.header());
        self.set_checksum(sum);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        bytes::slice_mut(self.buffer.as_mut(), range)
    }
}

/// An IPv4 header as rocelink uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: [u8; 4],
    /// Destination address.
    pub dst_addr: [u8; 4],
    /// Protocol number.
    pub protocol: u8,
    /// Bytes after the header (total_len - header length).
    pub payload_len: usize,
    /// Time to live (HSB: 64).
    pub ttl: u8,
    /// TOS byte (HSB: 0).
    pub tos: u8,
    /// Identification (HSB: 0).
    pub ident: u16,
    /// Don't-fragment (HSB: set).
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Reads a checked header: `Truncated`/`Malformed` from [`Packet::check_len`],
    /// `BadChecksum`, then `Malformed` for a version other than 4 or a fragment (MF set or
    /// a non-zero offset). The reserved flag bit is ignored (be liberal, PROTOCOLS.md 1.2).
    // Always inlined: parse_frame's hot path gets the fields in registers instead of a
    // Result written to the stack and read back (a store-forwarding stall per frame).
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        if p.version() != 4 || p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - usize::from(p.header_len()),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// [`HEADER_LEN`]: options are never emitted.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with total_len = 20 + payload_len (saturating at 65535)
    /// and a correct checksum.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version(4);
        p.set_header_len(HEADER_LEN as u8);
        p.set_tos(self.tos);
        let total = HEADER_LEN.saturating_add(self.payload_len);
        p.set_total_len(u16::try_from(total).unwrap_or(u16::MAX));
        p.set_ident(self.ident);
        p.clear_flags();
        p.set_dont_frag(self.dont_frag);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        if p.buffer.as_ref().len() >= HEADER_LEN {
            // The same sum fill_checksum would take over the bytes just written, from the
            // values in registers: reading the header back would load 16-bit words that
            // narrower stores just wrote (a store-forwarding stall per frame).
            p.set_checksum(self.header_checksum(u16::try_from(total).unwrap_or(u16::MAX)));
        } else {
            p.fill_checksum();
        }
    }

    /// The checksum of the 20-byte header [`Ipv4Repr::emit`] writes with this total length
    /// (RFC 791/1071: one's complement of the one's-complement sum of its ten 16-bit words,
    /// the checksum word taken as 0).
    #[inline]
    fn header_checksum(&self, total_len: u16) -> u16 {
        let [s0, s1, s2, s3] = self.src_addr;
        let [d0, d1, d2, d3] = self.dst_addr;
        let words = [
            u16::from_be_bytes([0x45, self.tos]),
            total_len,
            self.ident,
            if self.dont_frag { FLAG_DF } else { 0 },
            u16::from_be_bytes([self.ttl, self.protocol]),
            0,
            u16::from_be_bytes([s0, s1]),
            u16::from_be_bytes([s2, s3]),
            u16::from_be_bytes([d0, d1]),
            u16::from_be_bytes([d2, d3]),
        ];
        let mut sum: u32 = words.iter().map(|&w| u32::from(w)).sum();
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        !(sum as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_checksum_equals_the_sum_over_the_written_bytes() {
        for (i, tos) in [0u8, 0x02, 0xFF].into_iter().enumerate() {
            for payload_len in [0usize, 8, 1500, 65515, 70000] {
                for (dont_frag, ttl, ident) in [(true, 64, 0), (false, 255, 0xFFFF), (true, 1, 0x1234)] {
                    let r = Ipv4Repr {
                        src_addr: [192, 168, i as u8, 0xFE],
                        dst_addr: [0xFF, 0xFF, 10, 1],
                        protocol: PROTO_UDP,
                        payload_len,
                        ttl,
                        tos,
                        ident,
                        dont_frag,
                    };
                    let mut a = [0xAAu8; HEADER_LEN];
                    r.emit(&mut Packet::new_unchecked(&mut a[..]));
                    let mut b = a;
                    Packet::new_unchecked(&mut b[..]).fill_checksum();
                    assert_eq!(a, b, "{r:?}");
                    assert!(Packet::new_unchecked(&a[..]).verify_checksum());
                }
            }
        }
    }

    // TOS 0x02, total 28, ident 0x1234, DF, TTL 255, UDP, 192.168.0.2 -> 192.168.0.101.
    static PACKET_BYTES: [u8; 28] = [
        0x45, 0x02, 0x00, 0x1C, 0x12, 0x34, 0x40, 0x00, 0xFF, 0x11, 0xE7, 0xE2, 0xC0, 0xA8, 0x00, 0x02, 0xC0, 0xA8,
        0x00, 0x65, 0xAA, 0xBB, 0xCC, 0xDD, 0x01, 0x02, 0x03, 0x04,
    ];
    static PAYLOAD: [u8; 8] = [0xAA, 0xBB, 0xCC, 0xDD, 0x01, 0x02, 0x03, 0x04];

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: [192, 168, 0, 2],
            dst_addr: [192, 168, 0, 101],
            protocol: PROTO_UDP,
            payload_len: 8,
            ttl: 255,
            tos: 0x02,
            ident: 0x1234,
            dont_frag: true,
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.tos(), 0x02);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 255);
        assert_eq!(p.protocol(), PROTO_UDP);
        assert_eq!(p.checksum(), 0xE7E2);
        assert_eq!(p.src_addr(), [192, 168, 0, 2]);
        assert_eq!(p.dst_addr(), [192, 168, 0, 101]);
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &PAYLOAD);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xFFu8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_tos(0x02);
        p.set_total_len(28);
        p.set_ident(0x1234);
        p.clear_flags();
        p.set_dont_frag(true);
        p.set_more_frags(false);
        p.set_frag_offset(0);
        p.set_ttl(255);
        p.set_protocol(PROTO_UDP);
        p.set_src_addr([192, 168, 0, 2]);
        p.set_dst_addr([192, 168, 0, 101]);
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&PAYLOAD);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr().emit(&mut p);
        p.payload_mut().copy_from_slice(&PAYLOAD);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn length_and_checksum_errors() {
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..19]), Err(Error::Truncated));
        // total_len 28 but 27 bytes.
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..27]), Err(Error::Truncated));
        // Longer buffers (Ethernet padding) are fine; the payload stops at total_len.
        let mut padded = [0u8; 40];
        padded[..28].copy_from_slice(&PACKET_BYTES);
        assert_eq!(Packet::new_checked(&padded[..]).unwrap().payload(), &PAYLOAD);
        let mut b = PACKET_BYTES;
        b[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Malformed));
        b[0] = 0x46; // IHL 6 > total 28? no: 24 <= 28, but the checksum is now wrong
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::BadChecksum));
        b[0] = 0x48; // 32-byte header > 28 bytes
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Truncated));
        let mut b = PACKET_BYTES;
        b[3] = 19; // total_len < header
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Malformed));
        let mut b = PACKET_BYTES;
        b[5] ^= 1;
        assert_eq!(Ipv4Repr::parse(&Packet::new_unchecked(&b[..])), Err(Error::BadChecksum));
    }

    #[test]
    fn fragments_and_versions_are_malformed() {
        for (mf, off, ver) in [(true, 0, 4), (false, 1, 4), (false, 0, 6)] {
            let mut b = PACKET_BYTES;
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.set_more_frags(mf);
            p.set_frag_offset(off);
            p.set_version(ver);
            p.fill_checksum();
            assert_eq!(Ipv4Repr::parse(&Packet::new_unchecked(&b[..])), Err(Error::Malformed));
        }
    }

    #[test]
    fn options_are_accepted() {
        // IHL 6: one 4-byte option (NOPs + EOL).
        let mut b = [0u8; 32];
        b[..20].copy_from_slice(&PACKET_BYTES[..20]);
        b[20..24].copy_from_slice(&[1, 1, 1, 0]);
        b[24..].copy_from_slice(&PAYLOAD);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_header_len(24);
        p.set_total_len(32);
        p.fill_checksum();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload(), &PAYLOAD);
        assert_eq!(Ipv4Repr::parse(&p).unwrap().payload_len, 8);
    }

    #[test]
    fn checksum_handles_odd_lengths() {
        assert_eq!(checksum(&[]), 0xFFFF);
        assert_eq!(checksum(&[0x01]), !0x0100);
        assert_eq!(checksum(&[0xFF, 0xFF, 0xFF, 0xFF]), 0);
    }
}
