//! The independent ICRC vectors (tests/vectors/roce-icrc.txt, computed by scapy's
//! `contrib.roce`): every frame parses, verifies and re-emits byte for byte; every single
//! bit flip is either harmless (a field the ICRC masks or does not cover) or rejected
//! with the specific error its stage produces (PROTOCOLS.md 1).

use rocelink_wire::bth::Opcode;
use rocelink_wire::roce::{self, parse_frame, RoceRepr};
use rocelink_wire::{icrc, ipv4, Error};

const ETH: usize = 14;
const IP: usize = ETH;
const UDP: usize = IP + 20;
const BTH: usize = UDP + 8;
const AFTER_BTH: usize = BTH + 12;

struct Vector {
    name: String,
    frame: Vec<u8>,
}

fn hex(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0, "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn vectors() -> Vec<Vector> {
    include_str!("vectors/roce-icrc.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, h) = l.split_once('\t').expect("description TAB hex");
            Vector { name: name.to_string(), frame: hex(h.trim()) }
        })
        .collect()
}

/// `key=value` from a description such as "uc_write_imm len=27 pad=1 slot=33".
fn described(name: &str, key: &str) -> Option<usize> {
    name.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')).map(|v| v.parse().unwrap())
}

fn emit(repr: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(payload, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    buf
}

fn refill_ipv4_checksum(frame: &mut [u8]) {
    ipv4::Packet::new_unchecked(&mut frame[IP..]).fill_checksum();
}

#[test]
fn the_file_holds_sixteen_frames_with_the_variety_we_need() {
    let v = vectors();
    assert_eq!(v.len(), 16);
    let tos: Vec<u8> = v.iter().map(|v| v.frame[IP + 1]).collect();
    let ttl: Vec<u8> = v.iter().map(|v| v.frame[IP + 8]).collect();
    assert!(tos.contains(&0x02) && tos.contains(&0x88) && tos.contains(&0));
    assert!(ttl.contains(&255) && ttl.contains(&64));
    assert!(v.iter().any(|v| v.frame[BTH] == 0x2B) && v.iter().any(|v| v.frame[BTH] == 0x24));
    for pad in 0..4 {
        assert!(v.iter().any(|v| described(&v.name, "pad") == Some(pad)), "no pad={pad}");
    }
    // None of scapy's frames sets BTH byte 4; byte4_ff_round_trips covers that case.
    assert!(v.iter().all(|v| v.frame[BTH + 4] == 0));
}

#[test]
fn every_vector_parses_verifies_and_reemits_exactly() {
    for v in vectors() {
        let f = &v.frame;
        let n = f.len();
        let parsed = parse_frame(f).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let stored = u32::from_le_bytes(f[n - 4..].try_into().unwrap());
        assert_eq!(icrc::verify(&f[IP..]), Ok(()), "{}", v.name);
        assert_eq!(icrc::compute(&f[IP..n - 4]), Ok(stored), "{}", v.name);
        assert_eq!(parsed.icrc, stored, "{}", v.name);

        let r = parsed.repr;
        assert_eq!(Some(r.payload_len), described(&v.name, "len"), "{}", v.name);
        assert_eq!(Some(usize::from(r.bth.pad_count)), described(&v.name, "pad"), "{}", v.name);
        if v.name.starts_with("uc_write_imm") {
            assert_eq!(r.bth.opcode, Opcode::UcWriteOnlyImm);
            let imm = r.immdt.unwrap();
            assert_eq!(Some((imm & 0xFFF) as usize), described(&v.name, "slot"), "{}", v.name);
            // PROTOCOLS.md 2.3: imm = psn[19:0] << 12 | slot.
            assert_eq!(imm >> 12, r.bth.psn & 0xF_FFFF, "{}", v.name);
            assert!(r.reth.is_some());
        } else {
            assert_eq!(r.bth.opcode, Opcode::UcSendOnly);
            assert!(r.reth.is_none() && r.immdt.is_none());
        }
        assert_eq!(parsed.payload.len(), r.payload_len);
        assert_eq!(r.buffer_len(), n);
        assert_eq!(emit(&r, parsed.payload), *f, "{}: re-emit differs", v.name);
    }
}

#[test]
fn byte4_ff_and_reserved_bits_round_trip() {
    for v in vectors() {
        // NVIDIA's emulator sends BTH byte 4 as 0xFF; the ICRC masks it (PROTOCOLS.md 1.2).
        let mut f = v.frame.clone();
        f[BTH + 4] = 0xFF;
        let p = parse_frame(&f).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let b = p.repr.bth;
        assert_eq!((b.fecn, b.becn, b.resv6), (true, true, 0x3F));
        assert_eq!(emit(&p.repr, p.payload), f, "{}", v.name);
        // Resv7 (byte 8) is covered: set it and recompute the ICRC as a sender would.
        let mut f = v.frame.clone();
        f[BTH + 8] |= 0x55;
        icrc::fill(&mut f[IP..]).unwrap();
        let p = parse_frame(&f).unwrap();
        assert_eq!(p.repr.bth.resv7, 0x55);
        assert_eq!(emit(&p.repr, p.payload), f, "{}", v.name);
    }
}

/// What a flipped bit must do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Still parses (masked by the ICRC or outside it); re-emit reproduces the bytes.
    Ok,
    /// Fails with exactly this error.
    Err(Error),
    /// The IPv4 checksum catches it first (`BadChecksum`); with the checksum fixed
    /// the frame parses if `Ok`, or fails with the error.
    IpHeader(Result<(), Error>),
    /// IHL changes move every later header: some structural error, never `Ok`/`BadIcrc`.
    Structural,
}

fn expect(f: &[u8], k: usize, bit: u8) -> Expect {
    use Expect::*;
    let mask = 1u8 << bit;
    let be16 = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]) as usize;
    let flipped16 = |at: usize| be16(at) ^ (usize::from(mask) << if k == at { 8 } else { 0 });
    let udp_payload = be16(UDP + 4) - 8; // BTH through ICRC
    match k {
        0..=11 => Ok, // MACs are not in the ICRC (the LRH stand-in replaces the L2 header)
        12..=13 => Err(Error::NotRoce),
        _ if k == IP => {
            if bit >= 4 {
                IpHeader(Result::Err(Error::Malformed)) // version != 4
            } else if (5u8 ^ mask) < 5 {
                Err(Error::Malformed) // IHL < 5
            } else {
                Structural
            }
        }
        _ if k == IP + 1 || k == IP + 8 || k == IP + 10 || k == IP + 11 => {
            IpHeader(Result::Ok(())) // TOS, TTL, checksum: masked by the ICRC
        }
        _ if k == IP + 2 || k == IP + 3 => {
            // total_len: longer than the buffer, or shorter than the UDP length says.
            if flipped16(IP + 2) < 20 {
                Err(Error::Malformed)
            } else {
                Err(Error::Truncated)
            }
        }
        _ if k == IP + 4 || k == IP + 5 => IpHeader(Result::Err(Error::BadIcrc)), // ident is covered
        _ if k == IP + 6 || k == IP + 7 => {
            let flag_bit = if k == IP + 6 { bit + 8 } else { bit };
            match flag_bit {
                15 | 14 => IpHeader(Result::Err(Error::BadIcrc)), // reserved, DF: covered
                _ => IpHeader(Result::Err(Error::Malformed)),     // MF, fragment offset
            }
        }
        _ if k == IP + 9 => Err(Error::NotRoce),
        _ if (IP + 12..IP + 20).contains(&k) => IpHeader(Result::Err(Error::BadIcrc)),
        _ if k == UDP || k == UDP + 1 => Err(Error::BadIcrc),
        _ if k == UDP + 2 || k == UDP + 3 => Err(Error::NotRoce),
        _ if k == UDP + 4 || k == UDP + 5 => {
            let new = flipped16(UDP + 4);
            if new > 8 + udp_payload {
                Err(Error::Truncated)
            } else {
                Err(Error::Malformed) // < 8, or shorter than the IP payload
            }
        }
        _ if k == UDP + 6 || k == UDP + 7 => Ok, // UDP checksum: masked, never verified
        _ if k == BTH => {
            let op = Opcode::from(f[BTH] ^ mask);
            let after_bth = udp_payload - 12;
            let pad = usize::from((f[BTH + 1] >> 4) & 3);
            match after_bth.checked_sub(op.ext_len() + 4) {
                None => Err(Error::Truncated),
                Some(data) if pad > data || data - pad > roce::PMTU => Err(Error::Malformed),
                Some(_) => Err(Error::BadIcrc),
            }
        }
        _ if k == BTH + 1 && (bit == 4 || bit == 5) => {
            let op = Opcode::from(f[BTH]);
            let data = udp_payload - 12 - op.ext_len() - 4;
            let pad = usize::from(((f[BTH + 1] ^ mask) >> 4) & 3);
            if pad > data {
                Err(Error::Malformed)
            } else {
                Err(Error::BadIcrc)
            }
        }
        _ if k == BTH + 4 => Ok,  // FECN/BECN/Resv6: masked
        _ => Err(Error::BadIcrc), // rest of the BTH, RETH, ImmDt, payload, pad, ICRC
    }
}

#[test]
fn every_single_bit_flip_is_masked_or_rejected_with_its_error() {
    let mut checked = 0usize;
    for v in vectors() {
        let original = &v.frame;
        assert!(original.len() > AFTER_BTH);
        for k in 0..original.len() {
            for bit in 0..8u8 {
                let mut f = original.clone();
                f[k] ^= 1 << bit;
                let got = parse_frame(&f).map(|_| ());
                let ctx = format!("{} byte {k} bit {bit}", v.name);
                match expect(original, k, bit) {
                    Expect::Ok => {
                        let p = parse_frame(&f).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                        assert_eq!(emit(&p.repr, p.payload), f, "{ctx}");
                        assert_eq!(icrc::verify(&f[IP..]), Ok(()), "{ctx}");
                    }
                    Expect::Err(e) => assert_eq!(got, Err(e), "{ctx}"),
                    Expect::IpHeader(after_fix) => {
                        assert_eq!(got, Err(Error::BadChecksum), "{ctx}");
                        let masked = after_fix.is_ok();
                        assert_eq!(icrc::verify(&f[IP..]).is_ok(), masked, "{ctx}");
                        refill_ipv4_checksum(&mut f);
                        let fixed = parse_frame(&f);
                        assert_eq!(fixed.map(|_| ()), after_fix, "{ctx} (checksum fixed)");
                        if let Ok(p) = fixed {
                            assert_eq!(emit(&p.repr, p.payload), f, "{ctx}");
                        }
                    }
                    Expect::Structural => {
                        assert!(
                            matches!(got, Err(Error::Malformed | Error::NotRoce | Error::Truncated)),
                            "{ctx}: {got:?}"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 40_000, "{checked}");
}

#[test]
fn truncating_any_vector_is_an_error_never_a_panic() {
    for v in vectors() {
        for n in 0..v.frame.len() {
            let e = parse_frame(&v.frame[..n]).unwrap_err();
            assert!(matches!(e, Error::Truncated | Error::Malformed), "{} at {n}: {e}", v.name);
        }
        // Trailing bytes after the IP datagram are Ethernet padding.
        let mut padded = v.frame.clone();
        padded.extend_from_slice(&[0; 7]);
        assert!(parse_frame(&padded).is_ok());
    }
}
