//! Immediate Data extended transport header (IBTA vol 1 section 9.3, ImmDt): 4 bytes,
//! big-endian, after the BTH (and RETH) of the "with Immediate" opcodes.
//!
//! Guarantees: `parse` and `emit` never panic; any 4 bytes are an immediate. The HSB puts
//! `psn[19:0] << 12 | slot[11:0]` here (PROTOCOLS.md 2.3); [`slot`] and [`psn20`] read it.

use crate::bytes;
use crate::{Error, Result};

/// The immediate is 4 bytes.
pub const HEADER_LEN: usize = 4;

/// Reads the immediate from the first 4 bytes of `buf`; `Truncated` below 4.
pub fn parse(buf: &[u8]) -> Result<u32> {
    match buf.get(..HEADER_LEN) {
        Some(b) => Ok(bytes::be32(b, 0)),
        None => Err(Error::Truncated),
    }
}

/// Writes the immediate into the first 4 bytes of `buf`; `BufferTooSmall` below 4.
pub fn emit(imm: u32, buf: &mut [u8]) -> Result<()> {
    let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
    out.copy_from_slice(&imm.to_be_bytes());
    Ok(())
}

/// The HSB immediate for `psn` and `slot`: `psn[19:0] << 12 | slot[11:0]`.
pub const fn hsb_imm(psn: u32, slot: u32) -> u32 {
    ((psn & 0xF_FFFF) << 12) | (slot & 0xFFF)
}

/// The slot of an HSB immediate (`imm & 0xFFF`).
pub const fn slot(imm: u32) -> u32 {
    imm & 0xFFF
}

/// The low 20 PSN bits of an HSB immediate.
pub const fn psn20(imm: u32) -> u32 {
    imm >> 12
}

#[cfg(test)]
mod tests {
    use super::*;

    // From vector "uc_write_imm len=32 pad=0 slot=29": PSN 0x2B9862, slot 29.
    static BYTES: [u8; 4] = [0xB9, 0x86, 0x20, 0x1D];

    #[test]
    fn test_deconstruct() {
        let imm = parse(&BYTES).unwrap();
        assert_eq!(slot(imm), 29);
        assert_eq!(psn20(imm), 0x2B9862 & 0xF_FFFF);
    }

    #[test]
    fn test_construct() {
        assert_eq!(hsb_imm(0x2B9862, 29), 0xB986_201D);
        // Bits above 20 of the PSN and above 12 of the slot are dropped.
        assert_eq!(hsb_imm(0xFF2B_9862, 29 + 0x1000), 0xB986_201D);
    }

    #[test]
    fn test_parse() {
        assert_eq!(parse(&BYTES), Ok(0xB986_201D));
        assert_eq!(parse(&BYTES[..3]), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 4];
        emit(0xB986_201D, &mut buf).unwrap();
        assert_eq!(buf, BYTES);
        assert_eq!(emit(1, &mut buf[..3]), Err(Error::BufferTooSmall));
    }
}
