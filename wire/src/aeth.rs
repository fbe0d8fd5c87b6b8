//! ACK Extended Transport Header (IBTA vol 1 section 9.3, AETH): syndrome byte and a 24-bit
//! MSN, after the BTH of an RC Acknowledge. rocelink's UC traffic never carries one, but
//! the receive path parses it so an unexpected ACK is counted, not misread.
//!
//! Guarantees: the 4-byte view never panics; any 4 bytes are an AETH.

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// Syndrome (1) and MSN (3).
pub const HEADER_LEN: usize = 4;

mod field {
    use super::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

/// A view of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer of at least 4 bytes.
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

    /// Syndrome: ACK, RNR NAK or NAK and its code.
    pub fn syndrome(&self) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), field::SYNDROME)
    }

    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        bytes::be24(self.buffer.as_ref(), field::MSN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, v: u8) {
        bytes::set_u8(self.buffer.as_mut(), field::SYNDROME, v);
    }

    /// Sets the MSN (24 bits; higher bits are dropped).
    pub fn set_msn(&mut self, v: u32) {
        bytes::set_be24(self.buffer.as_mut(), field::MSN.start, v);
    }
}

/// An AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: u8,
    /// MSN, 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH; `Truncated` below 4 bytes.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(AethRepr { syndrome: p.syndrome(), msn: p.msn() })
    }

    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET_BYTES: [u8; 4] = [0x1F, 0x01, 0x02, 0x03];

    fn repr() -> AethRepr {
        AethRepr { syndrome: 0x1F, msn: 0x01_0203 }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.syndrome(), 0x1F);
        assert_eq!(p.msn(), 0x01_0203);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 4];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_syndrome(0x1F);
        p.set_msn(0x01_0203);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        assert_eq!(AethRepr::parse(&Packet::new_unchecked(&PACKET_BYTES[..])), Ok(repr()));
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..3]), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 4];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PACKET_BYTES);
    }
}
