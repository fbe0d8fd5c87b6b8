//! Ethernet II header (IEEE 802.3 clause 3.2; no VLAN tags, which rocelink never sends).
//!
//! Guarantees: a checked [`Frame`] holds the 14-byte header; accessors never panic.
//! The frame check sequence is not part of the buffer (NICs and sockets strip it).

use crate::bytes::{self, Field, Rest};
use crate::{Error, Result};

/// Destination MAC, source MAC, ethertype.
pub const HEADER_LEN: usize = 14;
/// Ethertype of IPv4, the only one RoCEv2 over IPv4 uses.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

mod field {
    use super::{Field, Rest};
    pub const DST_ADDR: Field = 0..6;
    pub const SRC_ADDR: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = 14..;
}

/// A view of an Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer that holds the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
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

    /// Destination MAC.
    pub fn dst_addr(&self) -> [u8; 6] {
        bytes::array(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// Source MAC.
    pub fn src_addr(&self) -> [u8; 6] {
        bytes::array(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Ethertype.
    pub fn ethertype(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// Everything after the header (Ethernet padding of short frames included).
    pub fn payload(&self) -> &[u8] {
        bytes::rest(self.buffer.as_ref(), field::PAYLOAD)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        bytes::put(self.buffer.as_mut(), field::DST_ADDR.start, a);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        bytes::put(self.buffer.as_mut(), field::SRC_ADDR.start, a);
    }

    /// Sets the ethertype.
    pub fn set_ethertype(&mut self, t: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }

    /// Everything after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        bytes::rest_mut(self.buffer.as_mut(), field::PAYLOAD)
    }
}

/// An Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst_addr: [u8; 6],
    /// Source MAC.
    pub src_addr: [u8; 6],
    /// Ethertype.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header; `Truncated` below 14 bytes. Any ethertype parses.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<Self> {
        f.check_len()?;
        Ok(EthernetRepr { dst_addr: f.dst_addr(), src_addr: f.src_addr(), ethertype: f.ethertype() })
    }

    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (nothing is written where the buffer is too short).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_dst_addr(self.dst_addr);
        f.set_src_addr(self.src_addr);
        f.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME_BYTES: [u8; 18] =
        [0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0xAA, 0xBB, 0xCC, 0xDD];

    fn repr() -> EthernetRepr {
        EthernetRepr {
            dst_addr: [0x02, 0, 0, 0, 0, 0x02],
            src_addr: [0x02, 0, 0, 0, 0, 0x01],
            ethertype: ETHERTYPE_IPV4,
        }
    }

    #[test]
    fn test_deconstruct() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.dst_addr(), [0x02, 0, 0, 0, 0, 0x02]);
        assert_eq!(f.src_addr(), [0x02, 0, 0, 0, 0, 0x01]);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(f.payload(), &[0xAA, 0xBB, 0xCC, 0xDD]);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_dst_addr([0x02, 0, 0, 0, 0, 0x02]);
        f.set_src_addr([0x02, 0, 0, 0, 0, 0x01]);
        f.set_ethertype(ETHERTYPE_IPV4);
        f.payload_mut().copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn test_parse() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), Ok(repr()));
        assert_eq!(Frame::new_checked(&FRAME_BYTES[..13]), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        repr().emit(&mut f);
        f.payload_mut().copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(buf, FRAME_BYTES);
        assert_eq!(repr().buffer_len(), HEADER_LEN);
    }
}
