//! RDMA Extended Transport Header (IBTA vol 1 section 9.3, RETH): follows the BTH of
//! RDMA WRITE First/Only (and READ requests, which rocelink does not use).
//!
//! Guarantees: the 16-byte view never panics; every bit pattern is a valid RETH, so the
//! only parse error is `Truncated`. Whether VA/R_Key/length are acceptable is the
//! receiver's check against its memory region (PROTOCOLS.md 2.3: VA = buffer + slot *
//! stride).

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// VA (8), R_Key (4), DMA length (4).
pub const HEADER_LEN: usize = 16;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// A view of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer of at least 16 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
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

    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        bytes::be64(self.buffer.as_ref(), field::VA.start)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        bytes::be32(self.buffer.as_ref(), field::RKEY.start)
    }

    /// DMA length of the whole message.
    pub fn dma_len(&self) -> u32 {
        bytes::be32(self.buffer.as_ref(), field::DMA_LEN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the VA.
    pub fn set_va(&mut self, v: u64) {
        bytes::set_be64(self.buffer.as_mut(), field::VA.start, v);
    }

    /// Sets the R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        bytes::set_be32(self.buffer.as_mut(), field::RKEY.start, v);
    }

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        bytes::set_be32(self.buffer.as_mut(), field::DMA_LEN.start, v);
    }
}

/// A RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH; `Truncated` below 16 bytes.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(RethRepr { va: p.va(), rkey: p.rkey(), dma_len: p.dma_len() })
    }

    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the RETH.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET_BYTES: [u8; 16] =
        [0x00, 0x00, 0x7F, 0x12, 0x34, 0x56, 0x78, 0x80, 0xCA, 0xFE, 0xF0, 0x0D, 0x00, 0x00, 0x10, 0x00];

    fn repr() -> RethRepr {
        RethRepr { va: 0x7F12_3456_7880, rkey: 0xCAFE_F00D, dma_len: 4096 }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x7F12_3456_7880);
        assert_eq!(p.rkey(), 0xCAFE_F00D);
        assert_eq!(p.dma_len(), 4096);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 16];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_va(0x7F12_3456_7880);
        p.set_rkey(0xCAFE_F00D);
        p.set_dma_len(4096);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        assert_eq!(RethRepr::parse(&Packet::new_unchecked(&PACKET_BYTES[..])), Ok(repr()));
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..15]), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 16];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PACKET_BYTES);
    }
}
