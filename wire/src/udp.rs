//! UDP header (RFC 768) as RoCEv2 uses it (IBTA Annex A17, RoCEv2: destination port 4791).
//!
//! Guarantees: a checked [`Packet`] has `8 <= length <= buffer length`, so
//! [`Packet::payload`] is exactly the datagram payload. The checksum is carried raw and
//! never verified: RoCEv2 senders write 0 (Annex A17 allows it: the ICRC protects the
//! packet) and the ICRC masks it anyway.

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// Source port, destination port, length, checksum.
pub const HEADER_LEN: usize = 8;

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer whose length field is consistent (see [`Packet::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` below 8 bytes or below the length field; `Malformed` for a length
    /// field below 8.
    pub fn check_len(&self) -> Result<()> {
        let buf_len = self.buffer.as_ref().len();
        if buf_len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            Err(Error::Malformed)
        } else if buf_len < len {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port (HSB: DP_PACKET_UDP_PORT).
    pub fn src_port(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port (4791 for RoCEv2).
    pub fn dst_port(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length field, header included.
    pub fn len(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum as stored (0 from RoCEv2 senders).
    pub fn checksum(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The payload: from byte 8 to the length field.
    pub fn payload(&self) -> &[u8] {
        bytes::slice(self.buffer.as_ref(), HEADER_LEN..usize::from(self.len()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        bytes::slice_mut(self.buffer.as_mut(), HEADER_LEN..end)
    }
}

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Bytes after the header.
    pub payload_len: usize,
    /// Checksum, raw (not verified on parse, written as given on emit).
    pub checksum: u16,
}

impl UdpRepr {
    /// Reads a checked header (errors of [`Packet::check_len`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
            checksum: p.checksum(),
        })
    }

    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; length = 8 + payload_len (saturating at 65535); checksum as given.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        let len = HEADER_LEN.saturating_add(self.payload_len);
        p.set_len(u16::try_from(len).unwrap_or(u16::MAX));
        p.set_checksum(self.checksum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET_BYTES: [u8; 12] = [0x30, 0x00, 0x12, 0xB7, 0x00, 0x0C, 0x00, 0x00, 0xAA, 0xBB, 0xCC, 0xDD];

    fn repr() -> UdpRepr {
        UdpRepr { src_port: 12288, dst_port: 4791, payload_len: 4, checksum: 0 }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.src_port(), 12288);
        assert_eq!(p.dst_port(), 4791);
        assert_eq!(p.len(), 12);
        assert_eq!(p.checksum(), 0);
        assert_eq!(p.payload(), &[0xAA, 0xBB, 0xCC, 0xDD]);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xFFu8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(12288);
        p.set_dst_port(4791);
        p.set_len(12);
        p.set_checksum(0);
        p.payload_mut().copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p), Ok(repr()));
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..11]), Err(Error::Truncated));
        let mut b = PACKET_BYTES;
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Malformed));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr().emit(&mut p);
        p.payload_mut().copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, PACKET_BYTES);
    }
}
