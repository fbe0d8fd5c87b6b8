//! Base Transport Header (IBTA vol 1 section 9.2; carried over UDP by Annex A17, RoCEv2).
//!
//! Guarantees: [`Opcode`] is total (every byte maps to a variant and back), the 12-byte
//! [`Packet`] view never panics, and [`BthRepr`] keeps the reserved bits (Resv6 in byte 4,
//! Resv7 in byte 8) so that parse then emit reproduces the exact bytes: NVIDIA's HSB
//! emulator sends byte 4 as 0xFF (PROTOCOLS.md 1.2). Nothing here judges a field's
//! value (TVer, P_Key, PSN): that is the receiver's policy, counted, not dropped.

use crate::bytes::{self, Field};
use crate::{Error, Result};

/// The BTH is 12 bytes.
pub const HEADER_LEN: usize = 12;
/// P_Key the HSB sends and accepts (the default partition, full membership).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// DestQP and PSN are 24-bit fields.
pub const MASK_24: u32 = 0x00FF_FFFF;

mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    /// SE(1) M(1) PadCnt(2) TVer(4)
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN(1) BECN(1) Resv6 — replaced by 0xFF in the ICRC (A17)
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: Field = 5..8;
    /// AckReq(1) Resv7
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;
}

/// Byte 4 of the BTH, the one the ICRC masks.
pub const ICRC_MASKED_BYTE: usize = field::FECN_BECN;

/// BTH opcode (IBTA vol 1 9.2, opcode table: bits 7:5 the transport, 4:0 the operation).
/// Total: `u8::from(Opcode::from(b)) == b` for every byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// 0x04 RC SEND Only.
    RcSendOnly,
    /// 0x0A RC RDMA WRITE Only (RETH).
    RcRdmaWriteOnly,
    /// 0x11 RC Acknowledge (AETH).
    RcAcknowledge,
    /// 0x20 UC SEND First.
    UcSendFirst,
    /// 0x21 UC SEND Middle.
    UcSendMiddle,
    /// 0x22 UC SEND Last.
    UcSendLast,
    /// 0x23 UC SEND Last with Immediate (ImmDt).
    UcSendLastImm,
    /// 0x24 UC SEND Only: host -> FPGA (PROTOCOLS.md 2.3).
    UcSendOnly,
    /// 0x25 UC SEND Only with Immediate (ImmDt).
    UcSendOnlyImm,
    /// 0x26 UC RDMA WRITE First (RETH).
    UcWriteFirst,
    /// 0x27 UC RDMA WRITE Middle.
    UcWriteMiddle,
    /// 0x28 UC RDMA WRITE Last.
    UcWriteLast,
    /// 0x29 UC RDMA WRITE Last with Immediate (ImmDt).
    UcWriteLastImm,
    /// 0x2A UC RDMA WRITE Only (RETH).
    UcWriteOnly,
    /// 0x2B UC RDMA WRITE Only with Immediate (RETH, ImmDt): FPGA -> host.
    UcWriteOnlyImm,
    /// Any other opcode: parsed with no extension headers.
    Unknown(u8),
}

impl Opcode {
    /// A RETH follows the BTH (IBTA vol 1 9.3: RDMA WRITE First/Only).
    pub fn has_reth(self) -> bool {
        matches!(self, Opcode::RcRdmaWriteOnly | Opcode::UcWriteFirst | Opcode::UcWriteOnly | Opcode::UcWriteOnlyImm)
    }

    /// An ImmDt follows the BTH (and the RETH, if any).
    pub fn has_immdt(self) -> bool {
        matches!(self, Opcode::UcSendLastImm | Opcode::UcSendOnlyImm | Opcode::UcWriteLastImm | Opcode::UcWriteOnlyImm)
    }

    /// An AETH follows the BTH.
    pub fn has_aeth(self) -> bool {
        matches!(self, Opcode::RcAcknowledge)
    }

    /// Unreliable Connected transport (opcode bits 7:5 = 001), unknown opcodes included.
    pub fn is_uc(self) -> bool {
        u8::from(self) >> 5 == 0b001
    }

    /// Bytes of extension headers between the BTH and the payload.
    pub fn ext_len(self) -> usize {
        let mut n = 0;
        if self.has_reth() {
            n += crate::reth::HEADER_LEN;
        }
        if self.has_aeth() {
            n += crate::aeth::HEADER_LEN;
        }
        if self.has_immdt() {
            n += crate::immdt::HEADER_LEN;
        }
        n
    }
}

impl From<u8> for Opcode {
    fn from(b: u8) -> Self {
        match b {
            0x04 => Opcode::RcSendOnly,
            0x0A => Opcode::RcRdmaWriteOnly,
            0x11 => Opcode::RcAcknowledge,
            0x20 => Opcode::UcSendFirst,
            0x21 => Opcode::UcSendMiddle,
            0x22 => Opcode::UcSendLast,
            0x23 => Opcode::UcSendLastImm,
            0x24 => Opcode::UcSendOnly,
            0x25 => Opcode::UcSendOnlyImm,
            0x26 => Opcode::UcWriteFirst,
            0x27 => Opcode::UcWriteMiddle,
            0x28 => Opcode::UcWriteLast,
            0x29 => Opcode::UcWriteLastImm,
            0x2A => Opcode::UcWriteOnly,
            0x2B => Opcode::UcWriteOnlyImm,
            other => Opcode::Unknown(other),
        }
    }
}

impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        match o {
            Opcode::RcSendOnly => 0x04,
            Opcode::RcRdmaWriteOnly => 0x0A,
            Opcode::RcAcknowledge => 0x11,
            Opcode::UcSendFirst => 0x20,
            Opcode::UcSendMiddle => 0x21,
            Opcode::UcSendLast => 0x22,
            Opcode::UcSendLastImm => 0x23,
            Opcode::UcSendOnly => 0x24,
            Opcode::UcSendOnlyImm => 0x25,
            Opcode::UcWriteFirst => 0x26,
            Opcode::UcWriteMiddle => 0x27,
            Opcode::UcWriteLast => 0x28,
            Opcode::UcWriteLastImm => 0x29,
            Opcode::UcWriteOnly => 0x2A,
            Opcode::UcWriteOnlyImm => 0x2B,
            Opcode::Unknown(other) => other,
        }
    }
}

/// A view of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors still never panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer of at least 12 bytes.
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

    fn byte(&self, at: usize) -> u8 {
        bytes::u8_at(self.buffer.as_ref(), at)
    }

    /// Byte 0.
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.byte(field::OPCODE))
    }

    /// Solicited event (byte 1 bit 7).
    pub fn solicited(&self) -> bool {
        self.byte(field::FLAGS) & 0x80 != 0
    }

    /// MigReq (byte 1 bit 6).
    pub fn migreq(&self) -> bool {
        self.byte(field::FLAGS) & 0x40 != 0
    }

    /// Pad count (byte 1 bits 5:4): pad bytes between payload and ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.byte(field::FLAGS) >> 4) & 0x3
    }

    /// Transport header version (byte 1 bits 3:0; 0 in IBTA 1.x).
    pub fn tver(&self) -> u8 {
        self.byte(field::FLAGS) & 0x0F
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        bytes::be16(self.buffer.as_ref(), field::PKEY.start)
    }

    /// Forward explicit congestion notification (byte 4 bit 7).
    pub fn fecn(&self) -> bool {
        self.byte(field::FECN_BECN) & 0x80 != 0
    }

    /// Backward explicit congestion notification (byte 4 bit 6).
    pub fn becn(&self) -> bool {
        self.byte(field::FECN_BECN) & 0x40 != 0
    }

    /// Reserved bits 5:0 of byte 4.
    pub fn resv6(&self) -> u8 {
        self.byte(field::FECN_BECN) & 0x3F
    }

    /// Destination QP (24 bits).
    pub fn dest_qp(&self) -> u32 {
        bytes::be24(self.buffer.as_ref(), field::DEST_QP.start)
    }

    /// Acknowledge request (byte 8 bit 7).
    pub fn ack_req(&self) -> bool {
        self.byte(field::ACK_REQ) & 0x80 != 0
    }

    /// Reserved bits 6:0 of byte 8.
    pub fn resv7(&self) -> u8 {
        self.byte(field::ACK_REQ) & 0x7F
    }

    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        bytes::be24(self.buffer.as_ref(), field::PSN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_bits(&mut self, at: usize, mask: u8, value: u8) {
        let old = bytes::u8_at(self.buffer.as_ref(), at);
        bytes::set_u8(self.buffer.as_mut(), at, (old & !mask) | (value & mask));
    }

    /// Sets byte 0.
    pub fn set_opcode(&mut self, o: Opcode) {
        bytes::set_u8(self.buffer.as_mut(), field::OPCODE, o.into());
    }

    /// Sets SE.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bits(field::FLAGS, 0x80, if v { 0x80 } else { 0 });
    }

    /// Sets MigReq.
    pub fn set_migreq(&mut self, v: bool) {
        self.set_bits(field::FLAGS, 0x40, if v { 0x40 } else { 0 });
    }

    /// Sets PadCnt (2 bits; higher bits are dropped).
    pub fn set_pad_count(&mut self, v: u8) {
        self.set_bits(field::FLAGS, 0x30, v << 4);
    }

    /// Sets TVer (4 bits).
    pub fn set_tver(&mut self, v: u8) {
        self.set_bits(field::FLAGS, 0x0F, v);
    }

    /// Sets the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        bytes::set_be16(self.buffer.as_mut(), field::PKEY.start, v);
    }

    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bits(field::FECN_BECN, 0x80, if v { 0x80 } else { 0 });
    }

    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        self.set_bits(field::FECN_BECN, 0x40, if v { 0x40 } else { 0 });
    }

    /// Sets the 6 reserved bits of byte 4.
    pub fn set_resv6(&mut self, v: u8) {
        self.set_bits(field::FECN_BECN, 0x3F, v);
    }

    /// Sets DestQP (24 bits; higher bits are dropped).
    pub fn set_dest_qp(&mut self, v: u32) {
        bytes::set_be24(self.buffer.as_mut(), field::DEST_QP.start, v);
    }

    /// Sets AckReq.
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bits(field::ACK_REQ, 0x80, if v { 0x80 } else { 0 });
    }

    /// Sets the 7 reserved bits of byte 8.
    pub fn set_resv7(&mut self, v: u8) {
        self.set_bits(field::ACK_REQ, 0x7F, v);
    }

    /// Sets the PSN (24 bits; higher bits are dropped).
    pub fn set_psn(&mut self, v: u32) {
        bytes::set_be24(self.buffer.as_mut(), field::PSN.start, v);
    }
}

/// A BTH, every bit kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// MigReq.
    pub migreq: bool,
    /// PadCnt, 0..=3.
    pub pad_count: u8,
    /// TVer, 0..=15.
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Reserved bits of byte 4, 0..=0x3F (kept for byte-exact round trips).
    pub resv6: u8,
    /// DestQP, 24 bits.
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// Reserved bits of byte 8, 0..=0x7F.
    pub resv7: u8,
    /// PSN, 24 bits.
    pub psn: u32,
}

impl BthRepr {
    /// Reads a BTH; only `Truncated` can fail (every bit pattern is a BTH).
    // Always inlined: parse_frame's hot path gets the fields in registers instead of a
    // Result written to the stack and read back (a store-forwarding stall per frame).
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            migreq: p.migreq(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            resv6: p.resv6(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            resv7: p.resv7(),
            psn: p.psn(),
        })
    }

    /// [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the BTH; fields wider than their bits are truncated to them.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_opcode(self.opcode);
        p.set_solicited(self.solicited);
        p.set_migreq(self.migreq);
        p.set_pad_count(self.pad_count);
        p.set_tver(self.tver);
        p.set_pkey(self.pkey);
        p.set_fecn(self.fecn);
        p.set_becn(self.becn);
        p.set_resv6(self.resv6);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_resv7(self.resv7);
        p.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 0x2B; SE M pad=1 tver=1; P_Key 0xFFFF; FECN BECN resv6=1; QP 0x123456; AckReq; PSN 0x0ABCDE.
    static PACKET_BYTES: [u8; 12] = [0x2B, 0xD1, 0xFF, 0xFF, 0xC1, 0x12, 0x34, 0x56, 0x80, 0x0A, 0xBC, 0xDE];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::UcWriteOnlyImm,
            solicited: true,
            migreq: true,
            pad_count: 1,
            tver: 1,
            pkey: 0xFFFF,
            fecn: true,
            becn: true,
            resv6: 1,
            dest_qp: 0x12_3456,
            ack_req: true,
            resv7: 0,
            psn: 0x0A_BCDE,
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::UcWriteOnlyImm);
        assert!(p.solicited());
        assert!(p.migreq());
        assert_eq!(p.pad_count(), 1);
        assert_eq!(p.tver(), 1);
        assert_eq!(p.pkey(), 0xFFFF);
        assert!(p.fecn());
        assert!(p.becn());
        assert_eq!(p.resv6(), 1);
        assert_eq!(p.dest_qp(), 0x12_3456);
        assert!(p.ack_req());
        assert_eq!(p.resv7(), 0);
        assert_eq!(p.psn(), 0x0A_BCDE);
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_opcode(Opcode::UcWriteOnlyImm);
        p.set_solicited(true);
        p.set_migreq(true);
        p.set_pad_count(1);
        p.set_tver(1);
        p.set_pkey(0xFFFF);
        p.set_fecn(true);
        p.set_becn(true);
        p.set_resv6(1);
        p.set_dest_qp(0x12_3456);
        p.set_ack_req(true);
        p.set_resv7(0);
        p.set_psn(0x0A_BCDE);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(BthRepr::parse(&p), Ok(repr()));
        assert_eq!(Packet::new_checked(&PACKET_BYTES[..11]), Err(Error::Truncated));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn emulator_byte4_round_trips() {
        // NVIDIA's HSB emulator: byte 4 = 0xFF, byte 8 reserved bits set too.
        let mut b = PACKET_BYTES;
        b[4] = 0xFF;
        b[8] = 0xFF;
        let r = BthRepr::parse(&Packet::new_unchecked(&b[..])).unwrap();
        assert_eq!((r.fecn, r.becn, r.resv6, r.ack_req, r.resv7), (true, true, 0x3F, true, 0x7F));
        let mut out = [0u8; 12];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn opcodes_are_total() {
        for b in 0..=255u8 {
            let o = Opcode::from(b);
            assert_eq!(u8::from(o), b);
            assert_eq!(o.is_uc(), (0x20..=0x3F).contains(&b));
            if let Opcode::Unknown(_) = o {
                assert_eq!(o.ext_len(), 0);
            }
        }
        assert_eq!(Opcode::UcWriteOnlyImm.ext_len(), 20);
        assert_eq!(Opcode::UcSendOnly.ext_len(), 0);
        assert_eq!(Opcode::UcSendOnlyImm.ext_len(), 4);
        assert_eq!(Opcode::RcAcknowledge.ext_len(), 4);
        assert_eq!(Opcode::UcWriteFirst.ext_len(), 16);
    }
}
