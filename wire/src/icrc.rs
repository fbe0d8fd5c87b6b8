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

/// Updates a frame's ICRC when one 8-byte field of its payload changes, without hashing the
/// frame again: CRC-32 is affine, so for covered byte strings of one length
/// `crc(a) ^ crc(b) = crc(a ^ b) ^ crc(0)`, and the difference of two frames that differ in
/// the field alone depends only on the field's difference and on how many covered bytes follow
/// it. The tables (8 x 256 words, built from 64 hashes of `9 + trailing` bytes) hold that
/// difference for each byte value at each of the field's 8 places; a patch is 8 lookups.
/// What a generator does that stamps a frame on its way out (a hardware one computes the ICRC
/// as the bytes pass).
pub struct FieldPatch {
    ip_len: usize,
    at: usize,
    table: Box<[[u32; 256]; 8]>,
}

impl core::fmt::Debug for FieldPatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FieldPatch").field("ip_len", &self.ip_len).field("at", &self.at).finish_non_exhaustive()
    }
}

impl FieldPatch {
    /// For 8-byte fields at byte `at` of `ip_len`-byte IPv4 packets (IPv4 header through the
    /// ICRC). `None` unless the field lies after the IPv4 (options included), UDP and BTH
    /// headers, where nothing is masked, and before the ICRC.
    pub fn new(ip_packet: &[u8], at: usize) -> Option<FieldPatch> {
        let ip_len = ip_packet.len();
        if ip_len < ipv4::HEADER_LEN {
            return None;
        }
        let hl = usize::from(ipv4::Packet::new_unchecked(ip_packet).header_len());
        if hl < ipv4::HEADER_LEN || at < hl + udp::HEADER_LEN + bth::HEADER_LEN || at.checked_add(8 + LEN)? > ip_len {
            return None;
        }
        let trailing = ip_len - LEN - at - 8;
        let mut buf = vec![0u8; 8 + trailing];
        let zero = crc32fast::hash(&buf);
        let mut bit = [[0u32; 8]; 8];
        for (j, row) in bit.iter_mut().enumerate() {
            for (b, v) in row.iter_mut().enumerate() {
                buf[j] = 1 << b;
                *v = crc32fast::hash(&buf) ^ zero;
                buf[j] = 0;
            }
        }
        let mut table = Box::new([[0u32; 256]; 8]);
        for (row, bits) in table.iter_mut().zip(&bit) {
            for (v, t) in row.iter_mut().enumerate() {
                *t = (0..8).filter(|b| v >> b & 1 == 1).fold(0, |acc, b| acc ^ bits[b]);
            }
        }
        Some(FieldPatch { ip_len, at, table })
    }

    /// Whether this patch is for fields at `at` of `ip_len`-byte packets.
    pub fn fits(&self, ip_len: usize, at: usize) -> bool {
        self.ip_len == ip_len && self.at == at
    }

    /// Writes `new` into the field of `ip_packet` (whose ICRC is right for what the field
    /// holds now) and updates the ICRC to match. `Truncated` (nothing written) when the
    /// packet is not of the length this patch was built for.
    pub fn write(&self, ip_packet: &mut [u8], new: [u8; 8]) -> Result<()> {
        if ip_packet.len() != self.ip_len {
            return Err(Error::Truncated);
        }
        let (field, rest) = ip_packet[self.at..].split_at_mut(8);
        let mut d = 0u32;
        for (j, (f, n)) in field.iter_mut().zip(new).enumerate() {
            d ^= self.table[j][usize::from(*f ^ n)];
            *f = n;
        }
        let end = rest.len();
        let icrc = &mut rest[end - LEN..];
        let old = u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]);
        icrc.copy_from_slice(&(old ^ d).to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "uc_send_only len=0 pad=0" from tests/vectors/roce-icrc.txt (scapy), IPv4 header
    // through the ICRC (0x2D1063B4, little-endian).
    static IP_PACKET: [u8; 44] = [
        0x45, 0x00, 0x00, 0x2C, 0x3A, 0x6B, 0x40, 0x00, 0x40, 0x11, 0x7E, 0x9E, 0xC0, 0xA8, 0x00, 0x65, 0xC0, 0xA8,
        0x00, 0x02, 0xEC, 0x5A, 0x12, 0xB7, 0x00, 0x18, 0x00, 0x00, 0x24, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02,
        0x00, 0xA0, 0x88, 0xBD, 0xB4, 0x63, 0x10, 0x2D,
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

    #[test]
    fn a_field_patch_gives_the_icrc_a_full_hash_gives() {
        // a UC SEND of 100 payload bytes: the vector's headers, a longer payload
        let mut p = vec![0u8; 20 + 8 + 12 + 100 + LEN];
        p[..40].copy_from_slice(&IP_PACKET[..40]);
        for (i, b) in p[40..140].iter_mut().enumerate() {
            *b = (i * 37 + 5) as u8;
        }
        fill(&mut p).unwrap();
        for at in [40, 41, 64, 132] {
            let patch = FieldPatch::new(&p, at).unwrap();
            assert!(patch.fits(p.len(), at) && !patch.fits(p.len() + 1, at));
            for stamp in [0u64, 1, 0x8000_0000_0000_0000, 0x0123_4567_89AB_CDEF, u64::MAX] {
                patch.write(&mut p, stamp.to_le_bytes()).unwrap();
                assert_eq!(&p[at..at + 8], &stamp.to_le_bytes());
                verify(&p).unwrap_or_else(|e| panic!("field at {at}, stamp {stamp:#x}: {e:?}"));
            }
        }
    }

    #[test]
    fn a_field_patch_refuses_masked_headers_the_icrc_and_other_lengths() {
        let mut p = vec![0u8; 20 + 8 + 12 + 16 + LEN];
        p[..40].copy_from_slice(&IP_PACKET[..40]);
        fill(&mut p).unwrap();
        assert!(FieldPatch::new(&p, 39).is_none(), "overlaps the BTH");
        assert!(FieldPatch::new(&p, 49).is_none(), "overlaps the ICRC");
        assert!(FieldPatch::new(&p[..10], 40).is_none(), "no IPv4 header");
        let patch = FieldPatch::new(&p, 48).unwrap();
        let before = p.clone();
        assert_eq!(patch.write(&mut p[..59], [1; 8]), Err(Error::Truncated));
        assert_eq!(p, before, "nothing written");
    }

    proptest::proptest! {
        #[test]
        fn field_patches_agree_with_full_hashes(payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 8..300), at_frac in 0.0f64..1.0, stamp in proptest::prelude::any::<u64>()) {
            let mut p = vec![0u8; 40 + payload.len() + LEN];
            p[..40].copy_from_slice(&IP_PACKET[..40]);
            p[40..40 + payload.len()].copy_from_slice(&payload);
            fill(&mut p).unwrap();
            let at = 40 + ((payload.len() - 8) as f64 * at_frac) as usize;
            let patch = FieldPatch::new(&p, at).unwrap();
            patch.write(&mut p, stamp.to_le_bytes()).unwrap();
            let mut again = p.clone();
            fill(&mut again).unwrap();
            proptest::prop_assert_eq!(p, again);
        }
    }
}
