//! RoCEv2 invariant CRC (IBTA vol 1 section 7.8.1, ICRC; Annex A17 for the RoCEv2 masks;
//! PROTOCOLS.md 1).
//!
//! The ICRC is CRC-32 (the Ethernet/zlib polynomial, crc32fast) over:
//! 8 bytes of 0xFF standing in for the InfiniBand LRH | the IPv4 header with TOS, TTL
//! and header checksum replaced by ones | the UDP header with its checksum replaced by
//! ones | the BTH with byte 4 (FECN, BECN, Resv6) replaced by 0xFF | everything after
//! the BTH up to the ICRC (extension headers, payload, pad). The masked fields are the
//! ones routers and switches may rewrite in flight; everything else, the IPv4
//! identification and flags included (PROTOCOLS.md 1.1), is covered. The 4-byte result
//! is appended little-endian (as scapy's `contrib.roce` and Linux soft-RoCE do).
//!
//! Guarantees: no allocation (the masked headers, at most 88 bytes, are assembled on the
//! stack, then the rest is hashed in place; a frame with a 20-byte IPv4 header whose
//! covered bytes fit 240 is copied whole into a stack buffer and hashed in one call) and
//! no panic on any input. These functions
//! check only what they need to find the headers: the IPv4 checksum, lengths and
//! protocol are [`crate::roce::parse_frame`]'s business.

use crate::{bth, ipv4, udp};
use crate::{Error, Result};

/// The ICRC is 4 bytes, after the pad.
pub const LEN: usize = 4;

/// Bytes of 0xFF hashed first, in place of the LRH.
const LRH_STANDIN: usize = 8;
/// Largest IPv4 header (IHL 15).
const MAX_IPV4_HEADER: usize = 60;
const MAX_MASKED: usize = LRH_STANDIN + MAX_IPV4_HEADER + udp::HEADER_LEN + bth::HEADER_LEN;

// Offsets of the masked fields inside their headers.
const IPV4_TOS: usize = 1;
const IPV4_TTL: usize = 8;
const IPV4_CHECKSUM: core::ops::Range<usize> = 10..12;
const UDP_CHECKSUM: core::ops::Range<usize> = 6..8;

/// ICRC of `ip_packet`: from the first byte of the IPv4 header to the last byte before
/// the ICRC (pad included).
///
/// `Truncated` if the slice cannot hold the IPv4 header (IHL included), UDP header and
/// BTH; `Malformed` for IHL < 5.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let ip = ipv4::Packet::new_unchecked(ip_packet);
    if ip_packet.len() < ipv4::HEADER_LEN {
        return Err(Error::Truncated);
    }
    let hl = usize::from(ip.header_len());
    if hl < ipv4::HEADER_LEN {
        return Err(Error::Malformed);
    }
    if hl == ipv4::HEADER_LEN {
        if let Some(crc) = compute_one_pass(ip_packet) {
            return Ok(crc);
        }
    }
    let headers_end = hl + udp::HEADER_LEN + bth::HEADER_LEN;
    let headers = ip_packet.get(..headers_end).ok_or(Error::Truncated)?;
    let rest = ip_packet.get(headers_end..).ok_or(Error::Truncated)?;

    // Masked copy of the three headers, behind the LRH stand-in.
    let mut masked = [0xFFu8; MAX_MASKED];
    let len = LRH_STANDIN + headers_end;
    let (_, m) = masked.split_at_mut(LRH_STANDIN);
    let m = m.get_mut(..headers_end).ok_or(Error::Truncated)?;
    m.copy_from_slice(headers);
    // A17: TOS (DSCP/ECN), TTL and the header checksum change hop by hop.
    m[IPV4_TOS] = 0xFF;
    m[IPV4_TTL] = 0xFF;
    m[IPV4_CHECKSUM].fill(0xFF);
    // A17: the UDP checksum is masked (it may be 0 or filled in by an offload).
    let u = hl;
    m[u + UDP_CHECKSUM.start..u + UDP_CHECKSUM.end].fill(0xFF);
    // IBTA 7.8.1: BTH byte 4 (FECN/BECN/Resv6) is variant, replaced by ones.
    m[u + udp::HEADER_LEN + bth::ICRC_MASKED_BYTE] = 0xFF;

    let mut h = crc32fast::Hasher::new();
    h.update(masked.get(..len).unwrap_or(&[]));
    h.update(rest);
    Ok(h.finalize())
}

/// Covered bytes (LRH stand-in included) up to which [`compute_one_pass`] copies a frame.
const ONE_PASS_MAX: usize = 240;
/// The LRH stand-in and the IPv4 (no options), UDP and BTH headers.
const ONE_PASS_HEADERS: usize = LRH_STANDIN + ipv4::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;

/// [`compute`] for a 20-byte IPv4 header and a short frame, in one crc32fast call: the
/// masked headers and the rest are copied, 16 bytes at a time, into one stack buffer.
/// Two calls (masked headers, then the rest in place) cost about twice one call's fixed
/// cost, and the masked copy's byte stores stalled the hash's 16-byte loads; here each
/// 16-byte load reads exactly one 16-byte store, the masks applied in registers.
/// `None` when the headers do not fit or the frame is longer than [`ONE_PASS_MAX`].
fn compute_one_pass(ip_packet: &[u8]) -> Option<u32> {
    const HEADERS: usize = ONE_PASS_HEADERS - LRH_STANDIN;
    let (h, rest) = ip_packet.split_first_chunk::<HEADERS>()?;
    let len = LRH_STANDIN + ip_packet.len();
    if len > ONE_PASS_MAX {
        return None;
    }
    let word = |at: usize| -> u128 {
        let mut b = [0u8; 16];
        b.copy_from_slice(&h[at..at + 16]);
        u128::from_le_bytes(b)
    };
    let mut lo = [0u8; 8];
    lo.copy_from_slice(&h[..8]);
    // Bytes 0-15: the LRH stand-in (8 x 0xFF), IPv4 bytes 0-7 with the TOS (byte 1) masked.
    let c0 = (u128::from(u64::from_le_bytes(lo) | 0xFF << (8 * IPV4_TOS)) << 64) | u128::from(u64::MAX);
    // Bytes 16-31: IPv4 bytes 8-23 (UDP bytes 0-3); TTL and header checksum masked.
    let c1 = word(8) | 0xFF << (8 * (IPV4_TTL - 8)) | 0xFFFF << (8 * (IPV4_CHECKSUM.start - 8));
    // Bytes 32-47: UDP bytes 4-7, BTH bytes 0-11; UDP checksum and BTH byte 4 masked.
    let c2 = word(24)
        | 0xFFFF << (8 * (ipv4::HEADER_LEN + UDP_CHECKSUM.start - 24))
        | 0xFF << (8 * (ipv4::HEADER_LEN + udp::HEADER_LEN + bth::ICRC_MASKED_BYTE - 24));
    let mut buf = [0u8; ONE_PASS_MAX];
    for (k, c) in [c0, c1, c2].into_iter().enumerate() {
        buf[16 * k..16 * (k + 1)].copy_from_slice(&c.to_le_bytes());
    }
    let (whole, tail) = buf[ONE_PASS_HEADERS..].split_at_mut(rest.len() / 16 * 16);
    let mut chunks = rest.chunks_exact(16);
    for (to, from) in whole.chunks_exact_mut(16).zip(&mut chunks) {
        to.copy_from_slice(from);
    }
    let last = chunks.remainder();
    tail[..last.len()].copy_from_slice(last);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&buf[..len]);
    Some(hasher.finalize())
}

/// Checks the ICRC of `ip_packet`: the IPv4 header through the ICRC inclusive.
///
/// `BadIcrc` on mismatch; `Truncated`/`Malformed` as [`compute`] when the headers cannot
/// be found.
pub fn verify(ip_packet: &[u8]) -> Result<()> {
    let split = ip_packet.len().checked_sub(LEN).ok_or(Error::Truncated)?;
    let (covered, stored) = ip_packet.split_at(split);
    let expected = compute(covered)?;
    if stored == expected.to_le_bytes() {
        Ok(())
    } else {
        Err(Error::BadIcrc)
    }
}

/// Computes the ICRC of `ip_packet` (IPv4 header through the 4 ICRC bytes, whose
/// content is ignored) and writes it into the last 4 bytes; returns it.
pub fn fill(ip_packet: &mut [u8]) -> Result<u32> {
    let split = ip_packet.len().checked_sub(LEN).ok_or(Error::Truncated)?;
    let (covered, stored) = ip_packet.split_at_mut(split);
    let crc = compute(covered)?;
    stored.copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    // "uc_send_only len=0 pad=0" from tests/vectors/roce-icrc.txt (scapy), IPv4 header
    // through the ICRC (0x2D1063B4, little-endian).
    static IP_PACKET: [u8; 44] = [
        0x45, 0x00, 0x00, 0x2C, 0x3A, 0x6B, 0x40, 0x00, 0x40, 0x11, 0x7E, 0x9E, 0xC0, 0xA8, 0x00,
        0x65, 0xC0, 0xA8, 0x00, 0x02, 0xEC, 0x5A, 0x12, 0xB7, 0x00, 0x18, 0x00, 0x00, 0x24, 0x00,
        0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02, 0x00, 0xA0, 0x88, 0xBD, 0xB4, 0x63, 0x10, 0x2D,
    ];

    fn vector() -> [u8; 44] {
        IP_PACKET
    }

    #[test]
    fn lrh_standin_is_linux_rxe_seed() {
        // Linux rxe seeds its raw CRC state with 0xdebb20e3: the state after 8 x 0xFF,
        // i.e. the complement of crc32 of those bytes.
        assert_eq!(crc32fast::hash(&[0xFF; 8]), !0xDEBB_20E3);
    }

    #[test]
    fn test_deconstruct() {
        let p = vector();
        let stored = u32::from_le_bytes([p[40], p[41], p[42], p[43]]);
        assert_eq!(compute(&p[..40]), Ok(stored));
    }

    #[test]
    fn test_construct() {
        let mut p = vector();
        let want = p;
        p[40..].fill(0);
        fill(&mut p).unwrap();
        assert_eq!(p, want);
    }

    #[test]
    fn test_parse() {
        let p = vector();
        assert_eq!(verify(&p), Ok(()));
        let mut bad = p;
        bad[43] ^= 0x80;
        assert_eq!(verify(&bad), Err(Error::BadIcrc));
    }

    #[test]
    fn test_emit() {
        // Masked fields do not change the ICRC; covered ones do.
        let p = vector();
        let mut q = p;
        q[IPV4_TOS] = 0x88;
        q[IPV4_TTL] = 1;
        q[10] = 0x12;
        q[26] = 0x34;
        q[20 + 8 + 4] = 0xFF;
        assert_eq!(verify(&q), Ok(()));
        let mut q = p;
        q[4] ^= 1; // IPv4 identification is covered (PROTOCOLS.md 1.1).
        assert_eq!(verify(&q), Err(Error::BadIcrc));
    }

    /// The general path of [`compute`], for comparison with the one-pass path.
    fn two_pass(p: &[u8]) -> u32 {
        let hl = usize::from(ipv4::Packet::new_unchecked(p).header_len());
        let end = hl + udp::HEADER_LEN + bth::HEADER_LEN;
        let mut m = p[..end].to_vec();
        m[IPV4_TOS] = 0xFF;
        m[IPV4_TTL] = 0xFF;
        m[IPV4_CHECKSUM].fill(0xFF);
        m[hl + UDP_CHECKSUM.start..hl + UDP_CHECKSUM.end].fill(0xFF);
        m[hl + udp::HEADER_LEN + bth::ICRC_MASKED_BYTE] = 0xFF;
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xFF; LRH_STANDIN]);
        h.update(&m);
        h.update(&p[end..]);
        h.finalize()
    }

    #[test]
    fn one_pass_equals_two_pass() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut byte = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        for len in 40..300 {
            for _ in 0..8 {
                let mut p: Vec<u8> = (0..len).map(|_| byte()).collect();
                p[0] = 0x45;
                assert_eq!(compute(&p), Ok(two_pass(&p)), "len {len}");
            }
        }
        // Every masked byte is masked, every other header byte covered.
        let base = [0u8; 100];
        let mut p = base;
        p[0] = 0x45;
        for i in 0..40 {
            let mut q = p;
            q[i] ^= 0x5A;
            let masked = [1, 8, 10, 11, 26, 27, 32].contains(&i);
            assert_eq!(compute(&q) == compute(&p), masked, "byte {i}");
            assert_eq!(compute(&q), Ok(two_pass(&q)));
        }
        p[0] = 0x46; // IHL 6: the general path.
        assert_eq!(compute(&p), Ok(two_pass(&p)));
    }

    #[test]
    fn structure_errors() {
        let p = vector();
        assert_eq!(compute(&p[..19]), Err(Error::Truncated));
        assert_eq!(compute(&p[..39]), Err(Error::Truncated));
        assert_eq!(verify(&p[..3]), Err(Error::Truncated));
        let mut q = p;
        q[0] = 0x44;
        assert_eq!(compute(&q), Err(Error::Malformed));
        q[0] = 0x4F; // 60-byte header: the slice is too short for it plus UDP and BTH.
        assert_eq!(compute(&q), Err(Error::Truncated));
        let long = [0x4Fu8; 200];
        assert!(compute(&long).is_ok());
    }
}
