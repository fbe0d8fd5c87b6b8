//! Whole RoCEv2 frames, Ethernet header first (IBTA Annex A17, RoCEv2; PROTOCOLS.md 1):
//! `Ethernet(14) | IPv4(20+) | UDP(8) | BTH(12) | [RETH(16)] | [AETH(4)] | [ImmDt(4)] |
//! payload | pad | ICRC(4)`.
//!
//! Guarantees:
//! - [`parse_frame`] never panics or allocates; it returns a [`RoceFrame`] only for a frame
//!   whose lengths are consistent, whose IPv4 checksum is right and whose ICRC verifies.
//!   Errors come in stage order: `Truncated` (Ethernet, IPv4 lengths), `NotRoce`
//!   (ethertype, IP protocol, UDP port 4791), `BadChecksum`, `Malformed` (version,
//!   fragments, UDP length != IP payload, pad count > payload, payload > [`PMTU`]), then
//!   `Truncated` for transport headers that do not fit, and `BadIcrc` last. Unknown
//!   opcodes parse with no extension headers (the caller counts them).
//! - Liberal where the IBTA rules allow (PROTOCOLS.md 1.2): any BTH byte 4 (NVIDIA's
//!   emulator sends 0xFF), any PSN, TVer and P_Key, unpadded payloads (pad count 0 with
//!   any length), IPv4 options, Ethernet padding after the IP datagram, UDP checksum
//!   ignored.
//! - [`RoceRepr::emit`] writes a frame that [`parse_frame`] accepts and that parses back to
//!   the same Repr; parse then emit reproduces the input bytes of every frame with a
//!   20-byte IPv4 header, no reserved IPv4 flag, zero pad bytes and no Ethernet padding.
//!
//! Which IPv4 header the ICRC is checked against (PROTOCOLS.md 1.1): the one in the buffer.
//! `parse_frame` is for raw receive paths (raw IPv4 socket, AF_PACKET, in-process rings)
//! that see the header actually sent. A receiver behind a plain UDP socket never sees the
//! header; it must rebuild it with the HSB conventions of [`RoceRepr::uc_write_imm`] /
//! [`RoceRepr::uc_send_only`] (identification 0, DF, TTL 64, TOS 0) before verifying, and
//! so it cannot accept a sender that does not use them. Senders must likewise control the
//! header (identification 0, DF) for the ICRC they emit to hold on the wire.

use crate::aeth::{self, AethRepr};
use crate::bth::{self, BthRepr, Opcode};
use crate::ethernet::{self, EthernetRepr};
use crate::icrc;
use crate::immdt;
use crate::ipv4::{self, Ipv4Repr};
use crate::reth::{self, RethRepr};
use crate::udp::{self, UdpRepr};
use crate::{Error, Result};

/// UDP destination port of RoCEv2 (IANA; Annex A17).
pub const UDP_PORT: u16 = 4791;
/// Largest payload per packet accepted or emitted.
pub const PMTU: usize = 4096;
/// Largest frame: headers, RETH, ImmDt, a PMTU of payload, 3 pad bytes, ICRC.
pub const MAX_FRAME_LEN: usize = 14 + 20 + 8 + 12 + 16 + 4 + PMTU + 3 + 4;
/// Ethernet, IPv4 (no options), UDP and BTH.
pub const BASE_HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;

/// HSB conventions for frames rocelink emits (PROTOCOLS.md 1.1, 2.3).
pub mod hsb_defaults {
    /// IPv4 TTL.
    pub const TTL: u8 = 64;
    /// IPv4 TOS.
    pub const TOS: u8 = 0;
    /// IPv4 identification.
    pub const IDENT: u16 = 0;
    /// IPv4 don't-fragment.
    pub const DONT_FRAG: bool = true;
    /// UDP checksum.
    pub const UDP_CHECKSUM: u16 = 0;
    /// BTH P_Key.
    pub const PKEY: u16 = 0xFFFF;
}

/// Addresses and ports of one direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Endpoints {
    /// Sender MAC.
    pub src_mac: [u8; 6],
    /// Receiver MAC.
    pub dst_mac: [u8; 6],
    /// Sender IPv4 address.
    pub src_ip: [u8; 4],
    /// Receiver IPv4 address.
    pub dst_ip: [u8; 4],
    /// UDP source port (HSB: DP_PACKET_UDP_PORT).
    pub src_port: u16,
    /// UDP destination port ([`UDP_PORT`]).
    pub dst_port: u16,
}

impl Endpoints {
    /// The other direction.
    pub const fn reversed(&self) -> Self {
        Endpoints {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }
}

/// Every header of a RoCEv2 frame, and the payload length.
///
/// `ipv4.payload_len` and `udp.payload_len` are what [`parse_frame`] read; [`RoceRepr::emit`]
/// ignores them and writes the lengths implied by the other fields, so they cannot
/// disagree on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr {
    /// Ethernet header.
    pub eth: EthernetRepr,
    /// IPv4 header.
    pub ipv4: Ipv4Repr,
    /// UDP header.
    pub udp: UdpRepr,
    /// BTH.
    pub bth: BthRepr,
    /// Present iff `bth.opcode.has_reth()`.
    pub reth: Option<RethRepr>,
    /// Present iff `bth.opcode.has_immdt()`.
    pub immdt: Option<u32>,
    /// Present iff `bth.opcode.has_aeth()`.
    pub aeth: Option<AethRepr>,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
}

/// A parsed, verified frame borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// The headers.
    pub repr: RoceRepr,
    /// The payload, pad excluded.
    pub payload: &'a [u8],
    /// The ICRC as received (already verified).
    pub icrc: u32,
}

const fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

/// Parses and verifies a whole frame (see the module docs for the checks and their order).
pub fn parse_frame(frame: &[u8]) -> Result<RoceFrame<'_>> {
    // Ethernet.
    let eth = EthernetRepr::parse(&ethernet::Frame::new_checked(frame)?)?;
    if eth.ethertype != ethernet::ETHERTYPE_IPV4 {
        return Err(Error::NotRoce);
    }

    // IPv4 and UDP structure, and the RoCEv2 identification, before any checksum.
    let ip_all = frame.get(ethernet::HEADER_LEN..).ok_or(Error::Truncated)?;
    let ip = ipv4::Packet::new_checked(ip_all)?;
    if ip.protocol() != ipv4::PROTO_UDP {
        return Err(Error::NotRoce);
    }
    // check_len guarantees header_len <= total_len <= ip_all.len(); anything after
    // total_len is Ethernet padding.
    let ip_packet = ip_all.get(..usize::from(ip.total_len())).ok_or(Error::Truncated)?;
    let hl = usize::from(ip.header_len());
    let udp_all = ip_packet.get(hl..).ok_or(Error::Truncated)?;
    let udp_p = udp::Packet::new_checked(udp_all)?;
    if udp_p.dst_port() != UDP_PORT {
        return Err(Error::NotRoce);
    }

    let ipv4 = Ipv4Repr::parse(&ip)?;
    let udp = UdpRepr::parse(&udp_p)?;
    // The ICRC sits at the end of the UDP payload, which must be the end of the IP
    // datagram, else the ICRC would not cover the whole packet.
    if udp.payload_len + udp::HEADER_LEN != ipv4.payload_len {
        return Err(Error::Malformed);
    }

    // Transport headers (IBTA vol 1 9.2, 9.3): BTH, then RETH, AETH, ImmDt per opcode.
    let ib = udp_all.get(udp::HEADER_LEN..).ok_or(Error::Truncated)?;
    let bth = BthRepr::parse(&bth::Packet::new_checked(ib)?)?;
    let op = bth.opcode;
    let mut at = bth::HEADER_LEN;
    let reth = if op.has_reth() {
        let r = RethRepr::parse(&reth::Packet::new_checked(ib.get(at..).unwrap_or(&[]))?)?;
        at += reth::HEADER_LEN;
        Some(r)
    } else {
        None
    };
    let aeth = if op.has_aeth() {
        let a = AethRepr::parse(&aeth::Packet::new_checked(ib.get(at..).unwrap_or(&[]))?)?;
        at += aeth::HEADER_LEN;
        Some(a)
    } else {
        None
    };
    let immdt = if op.has_immdt() {
        let i = immdt::parse(ib.get(at..).unwrap_or(&[]))?;
        at += immdt::HEADER_LEN;
        Some(i)
    } else {
        None
    };

    // Payload, pad (IBTA 9.2: PadCnt bytes align the payload to 4), ICRC.
    let data_len = ib.len().checked_sub(at + icrc::LEN).ok_or(Error::Truncated)?;
    let pad = usize::from(bth.pad_count);
    let payload_len = data_len.checked_sub(pad).ok_or(Error::Malformed)?;
    if payload_len > PMTU {
        return Err(Error::Malformed);
    }
    let payload = ib.get(at..at + payload_len).ok_or(Error::Truncated)?;
    let icrc_at = at + data_len;
    let stored: [u8; icrc::LEN] = crate::bytes::array(ib, icrc_at);

    icrc::verify(ip_packet)?;

    Ok(RoceFrame {
        repr: RoceRepr { eth, ipv4, udp, bth, reth, immdt, aeth, payload_len },
        payload,
        icrc: u32::from_le_bytes(stored),
    })
}

impl RoceRepr {
    fn hsb(ep: &Endpoints, opcode: Opcode, dest_qp: u32, psn: u32, payload_len: usize) -> Self {
        let mut r = RoceRepr {
            eth: EthernetRepr { dst_addr: ep.dst_mac, src_addr: ep.src_mac, ethertype: ethernet::ETHERTYPE_IPV4 },
            ipv4: Ipv4Repr {
                src_addr: ep.src_ip,
                dst_addr: ep.dst_ip,
                protocol: ipv4::PROTO_UDP,
                payload_len: 0,
                ttl: hsb_defaults::TTL,
                tos: hsb_defaults::TOS,
                ident: hsb_defaults::IDENT,
                dont_frag: hsb_defaults::DONT_FRAG,
            },
            udp: UdpRepr {
                src_port: ep.src_port,
                dst_port: ep.dst_port,
                payload_len: 0,
                checksum: hsb_defaults::UDP_CHECKSUM,
            },
            bth: BthRepr {
                opcode,
                solicited: false,
                migreq: false,
                pad_count: pad_for(payload_len),
                tver: 0,
                pkey: hsb_defaults::PKEY,
                fecn: false,
                becn: false,
                resv6: 0,
                dest_qp: dest_qp & bth::MASK_24,
                ack_req: false,
                resv7: 0,
                psn: psn & bth::MASK_24,
            },
            reth: None,
            immdt: None,
            aeth: None,
            payload_len,
        };
        r.update_lengths();
        r
    }

    /// FPGA -> host: UC RDMA WRITE Only with Immediate (PROTOCOLS.md 2.3), HSB conventions:
    /// IPv4 ident 0, DF, TTL 64, TOS 0, UDP checksum 0, P_Key 0xFFFF, pad to 4 bytes.
    /// `dest_qp` and `psn` are truncated to 24 bits.
    pub fn uc_write_imm(ep: &Endpoints, dest_qp: u32, psn: u32, reth: RethRepr, imm: u32, payload_len: usize) -> Self {
        let mut r = Self::hsb(ep, Opcode::UcWriteOnlyImm, dest_qp, psn, payload_len);
        r.reth = Some(reth);
        r.immdt = Some(imm);
        r.update_lengths();
        r
    }

    /// Host -> FPGA: UC SEND Only (PROTOCOLS.md 2.3), HSB conventions as [`Self::uc_write_imm`].
    pub fn uc_send_only(ep: &Endpoints, dest_qp: u32, psn: u32, payload_len: usize) -> Self {
        Self::hsb(ep, Opcode::UcSendOnly, dest_qp, psn, payload_len)
    }

    #[inline]
    fn ext_len(&self) -> usize {
        self.reth.map_or(0, |_| reth::HEADER_LEN)
            + self.aeth.map_or(0, |_| aeth::HEADER_LEN)
            + self.immdt.map_or(0, |_| immdt::HEADER_LEN)
    }

    /// Sets the payload length, the pad count that aligns it to 4 bytes and the IPv4 and
    /// UDP lengths, as the HSB constructors do: `uc_send_only(ep, qp, psn, n)` equals
    /// `uc_send_only(ep, qp, psn, 0)` after `set_payload_len(n)`, and likewise
    /// [`Self::uc_write_imm`]. A sender can so keep a connection's Repr and change only
    /// what changes per packet, instead of building the whole Repr again.
    #[inline]
    pub fn set_payload_len(&mut self, payload_len: usize) {
        self.payload_len = payload_len;
        self.bth.pad_count = pad_for(payload_len);
        self.update_lengths();
    }

    /// Sets `ipv4.payload_len` and `udp.payload_len` to what [`RoceRepr::emit`] will write.
    /// Call it after changing `payload_len`, `bth.pad_count` or the extension headers if
    /// the Repr is compared with a parsed one.
    #[inline]
    pub fn update_lengths(&mut self) {
        let udp_payload =
            bth::HEADER_LEN + self.ext_len() + self.payload_len + usize::from(self.bth.pad_count) + icrc::LEN;
        self.udp.payload_len = udp_payload;
        self.ipv4.payload_len = udp::HEADER_LEN + udp_payload;
    }

    /// Whole frame length: headers, payload, `bth.pad_count` pad bytes, ICRC.
    pub fn buffer_len(&self) -> usize {
        BASE_HEADERS_LEN + self.ext_len() + self.payload_len + usize::from(self.bth.pad_count) + icrc::LEN
    }

    /// Writes the whole frame (headers, payload, `bth.pad_count` zero pad bytes, ICRC)
    /// at the start of `buf`; returns its length ([`RoceRepr::buffer_len`]).
    ///
    /// `Malformed` when `payload.len() != payload_len`, `payload_len > PMTU`,
    /// `bth.pad_count > 3`, or the extension headers present disagree with the opcode;
    /// `BufferTooSmall` when the frame does not fit. Nothing is written on error.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let op = self.bth.opcode;
        if payload.len() != self.payload_len
            || self.payload_len > PMTU
            || self.bth.pad_count > 3
            || self.reth.is_some() != op.has_reth()
            || self.aeth.is_some() != op.has_aeth()
            || self.immdt.is_some() != op.has_immdt()
        {
            return Err(Error::Malformed);
        }
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        // The lengths update_lengths() would set, without copying the whole Repr.
        let udp_payload = len - BASE_HEADERS_LEN + bth::HEADER_LEN;
        let ipv4_repr = Ipv4Repr { payload_len: udp::HEADER_LEN + udp_payload, ..self.ipv4 };
        let udp_repr = UdpRepr { payload_len: udp_payload, ..self.udp };

        // Fixed-size views of the headers: their lengths are known when the header emitters
        // are compiled in here, so their field writes need no bounds checks. `len` covers
        // the base headers, so the splits cannot fail.
        let ip_start = ethernet::HEADER_LEN;
        let (eth, rest) = out.split_first_chunk_mut::<{ ethernet::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
        self.eth.emit(&mut ethernet::Frame::new_unchecked(eth));
        let (ip, rest) = rest.split_first_chunk_mut::<{ ipv4::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
        ipv4_repr.emit(&mut ipv4::Packet::new_unchecked(ip));
        let (udp_h, rest) = rest.split_first_chunk_mut::<{ udp::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
        udp_repr.emit(&mut udp::Packet::new_unchecked(udp_h));
        let (bth_h, mut rest) = rest.split_first_chunk_mut::<{ bth::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
        self.bth.emit(&mut bth::Packet::new_unchecked(bth_h));
        if let Some(r) = &self.reth {
            let (h, tail) = rest.split_first_chunk_mut::<{ reth::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
            r.emit(&mut reth::Packet::new_unchecked(h));
            rest = tail;
        }
        if let Some(a) = &self.aeth {
            let (h, tail) = rest.split_first_chunk_mut::<{ aeth::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
            a.emit(&mut aeth::Packet::new_unchecked(h));
            rest = tail;
        }
        if let Some(i) = self.immdt {
            let (h, tail) = rest.split_first_chunk_mut::<{ immdt::HEADER_LEN }>().ok_or(Error::BufferTooSmall)?;
            *h = i.to_be_bytes();
            rest = tail;
        }
        // What is left: payload, pad (0-3 bytes), ICRC (`len` was computed from exactly
        // these). Four zeros clear the pad; the ICRC bytes among them are written below.
        let (data, rest) = rest.split_at_mut(self.payload_len);
        data.copy_from_slice(payload);
        if let Some(z) = rest.first_chunk_mut::<{ icrc::LEN }>() {
            *z = [0; icrc::LEN];
        }
        icrc::fill(&mut out[ip_start..])?;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "uc_write_imm len=27 pad=1 slot=33" from tests/vectors/roce-icrc.txt (scapy).
    static FRAME_BYTES: [u8; 106] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x02, 0x00, 0x5C,
        0x20, 0xFB, 0x40, 0x00, 0x40, 0x11, 0x97, 0xDC, 0xC0, 0xA8, 0x00, 0x02, 0xC0, 0xA8, 0x00, 0x65, 0x30, 0x00,
        0x12, 0xB7, 0x00, 0x48, 0x00, 0x00, 0x2B, 0x10, 0xFF, 0xFF, 0x00, 0x5F, 0x1F, 0x5B, 0x00, 0x01, 0x08, 0x77,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x11, 0xF1, 0xD7, 0xA3, 0x00, 0x00, 0x00, 0x1B, 0x10, 0x87,
        0x70, 0x21, 0xF3, 0x27, 0xCF, 0xE7, 0x3D, 0x86, 0xAF, 0xD3, 0xD9, 0xAC, 0xC0, 0xEC, 0xE6, 0x63, 0x87, 0xEB,
        0xAB, 0x33, 0x13, 0xAB, 0xA9, 0xD1, 0x25, 0x0A, 0xB9, 0x9F, 0xE6, 0x00, 0xA4, 0x11, 0xBF, 0x47,
    ];
    const PAYLOAD: core::ops::Range<usize> = 74..101;

    fn endpoints() -> Endpoints {
        Endpoints {
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            src_ip: [192, 168, 0, 2],
            dst_ip: [192, 168, 0, 101],
            src_port: 12288,
            dst_port: UDP_PORT,
        }
    }

    fn repr() -> RoceRepr {
        let reth = RethRepr { va: 0x2100, rkey: 0x11F1_D7A3, dma_len: 27 };
        let mut r = RoceRepr::uc_write_imm(&endpoints(), 0x5F_1F5B, 0x01_0877, reth, immdt::hsb_imm(0x01_0877, 33), 27);
        // scapy wrote these two differently from the HSB conventions.
        r.ipv4.tos = 0x02;
        r.ipv4.ident = 0x20FB;
        r
    }

    #[test]
    fn test_deconstruct() {
        let f = parse_frame(&FRAME_BYTES).unwrap();
        let r = f.repr;
        assert_eq!(r.eth.src_addr, [0x02, 0, 0, 0, 0, 0x01]);
        assert_eq!(r.ipv4.ttl, 64);
        assert_eq!(r.ipv4.payload_len, 72);
        assert_eq!(r.udp.src_port, 12288);
        assert_eq!(r.udp.payload_len, 64);
        assert_eq!(r.bth.opcode, Opcode::UcWriteOnlyImm);
        assert_eq!(r.bth.pad_count, 1);
        assert_eq!(r.bth.dest_qp, 0x5F_1F5B);
        assert_eq!(r.bth.psn, 0x01_0877);
        assert_eq!(r.reth.unwrap().va, 0x2100);
        assert_eq!(immdt::slot(r.immdt.unwrap()), 33);
        assert_eq!(r.aeth, None);
        assert_eq!(r.payload_len, 27);
        assert_eq!(f.payload, &FRAME_BYTES[PAYLOAD]);
        assert_eq!(f.icrc, 0x47BF_11A4);
    }

    #[test]
    fn test_construct() {
        let r = repr();
        assert_eq!(r.buffer_len(), FRAME_BYTES.len());
        assert_eq!(r.ipv4.payload_len, 72);
        assert_eq!(r.udp.payload_len, 64);
        assert_eq!(r.bth.pad_count, 1);
    }

    #[test]
    fn test_parse() {
        let f = parse_frame(&FRAME_BYTES).unwrap();
        assert_eq!(f.repr, repr());
    }

    #[test]
    fn test_emit() {
        let mut buf = [0xEEu8; 128];
        let n = repr().emit(&FRAME_BYTES[PAYLOAD], &mut buf).unwrap();
        assert_eq!(&buf[..n], &FRAME_BYTES[..]);
    }

    #[test]
    fn emit_rejects_inconsistent_reprs() {
        let p = &FRAME_BYTES[PAYLOAD];
        let mut buf = [0u8; 256];
        let mut r = repr();
        assert_eq!(r.emit(&p[..26], &mut buf), Err(Error::Malformed));
        assert_eq!(r.emit(p, &mut buf[..105]), Err(Error::BufferTooSmall));
        r.immdt = None;
        assert_eq!(r.emit(p, &mut buf), Err(Error::Malformed));
        let mut r = repr();
        r.bth.pad_count = 4;
        assert_eq!(r.emit(p, &mut buf), Err(Error::Malformed));
        let big = [0u8; PMTU + 1];
        let mut r = RoceRepr::uc_send_only(&endpoints(), 2, 0, PMTU + 1);
        assert_eq!(r.emit(&big, &mut [0u8; MAX_FRAME_LEN + 8]), Err(Error::Malformed));
        r = RoceRepr::uc_send_only(&endpoints(), 2, 0, PMTU);
        assert_eq!(r.emit(&big[..PMTU], &mut [0u8; MAX_FRAME_LEN]), Ok(BASE_HEADERS_LEN + PMTU + 4));
    }

    #[test]
    fn set_payload_len_equals_building_again() {
        let ep = endpoints();
        let reth = RethRepr { va: 0x1000, rkey: 7, dma_len: 33 };
        for n in (0..=70).chain([PMTU - 1, PMTU, PMTU + 1]) {
            for psn in [0, 1, 0xFF_FFFF, 0x1234_5678] {
                let mut s = RoceRepr::uc_send_only(&ep, 0x102, psn, 0);
                s.set_payload_len(n);
                assert_eq!(s, RoceRepr::uc_send_only(&ep, 0x102, psn, n), "send {n}");
                let mut w = RoceRepr::uc_write_imm(&ep, 0x102, psn, reth, 9, 0);
                w.set_payload_len(n);
                assert_eq!(w, RoceRepr::uc_write_imm(&ep, 0x102, psn, reth, 9, n), "write {n}");
            }
        }
    }

    #[test]
    fn hsb_conventions_and_short_frames() {
        let r = RoceRepr::uc_send_only(&endpoints(), 0x0100_0002, 0x01FF_FFFF, 0);
        assert_eq!((r.bth.dest_qp, r.bth.psn), (2, 0xFF_FFFF));
        let mut buf = [0u8; 64];
        let n = r.emit(&[], &mut buf).unwrap();
        assert_eq!(n, 58);
        let ip = ipv4::Packet::new_checked(&buf[14..n]).unwrap();
        assert_eq!((ip.ident(), ip.dont_frag(), ip.ttl(), ip.tos()), (0, true, 64, 0));
        // NIC-style Ethernet padding to 60 bytes is accepted.
        let f = parse_frame(&buf[..60]).unwrap();
        assert_eq!(f.repr, r);
        assert!(f.payload.is_empty());
    }

    #[test]
    fn emulator_quirks_are_accepted() {
        // No padding to 4 bytes and BTH byte 4 = 0xFF, as NVIDIA's emulator sends.
        let mut r = RoceRepr::uc_write_imm(&endpoints(), 7, 1 << 20, RethRepr::default(), 1, 5);
        r.bth.pad_count = 0;
        r.bth.fecn = true;
        r.bth.becn = true;
        r.bth.resv6 = 0x3F;
        r.update_lengths();
        let mut buf = [0u8; 128];
        let n = r.emit(&[1, 2, 3, 4, 5], &mut buf).unwrap();
        assert_eq!(buf[14 + 20 + 8 + 4], 0xFF);
        let f = parse_frame(&buf[..n]).unwrap();
        assert_eq!(f.repr, r);
        assert_eq!(f.payload, &[1, 2, 3, 4, 5]);
    }

    #[test]
    fn unknown_opcodes_and_acks_parse() {
        let mut r = RoceRepr::uc_send_only(&endpoints(), 2, 0, 8);
        r.bth.opcode = Opcode::Unknown(0x64);
        let mut buf = [0u8; 128];
        let n = r.emit(&[9; 8], &mut buf).unwrap();
        assert_eq!(parse_frame(&buf[..n]).unwrap().repr, r);
        r.bth.opcode = Opcode::RcAcknowledge;
        r.aeth = Some(AethRepr { syndrome: 0, msn: 5 });
        r.update_lengths();
        let n = r.emit(&[9; 8], &mut buf).unwrap();
        assert_eq!(parse_frame(&buf[..n]).unwrap().repr, r);
    }

    #[test]
    fn error_stages() {
        let f = &FRAME_BYTES;
        assert_eq!(parse_frame(&f[..13]), Err(Error::Truncated));
        assert_eq!(parse_frame(&f[..33]), Err(Error::Truncated));
        assert_eq!(parse_frame(&f[..105]), Err(Error::Truncated));
        let mut b = *f;
        b[12] = 0x86; // IPv6 ethertype
        assert_eq!(parse_frame(&b), Err(Error::NotRoce));
        let mut b = *f;
        b[23] = 6; // TCP
        assert_eq!(parse_frame(&b), Err(Error::NotRoce));
        let mut b = *f;
        b[37] = 0xB8; // port 4792
        assert_eq!(parse_frame(&b), Err(Error::NotRoce));
        let mut b = *f;
        b[19] ^= 1; // ident: checksum first
        assert_eq!(parse_frame(&b), Err(Error::BadChecksum));
        let mut b = *f;
        b[100] ^= 1; // payload
        assert_eq!(parse_frame(&b), Err(Error::BadIcrc));
    }
}
