//! Property tests: every Repr round-trips (emit then parse gives the Repr back; parse then
//! emit gives the bytes back), whole frames round-trip, and no parser panics on any
//! bytes (random, up to a 9216-byte jumbo frame, or a valid frame with random damage).

use proptest::prelude::*;
use rocelink_wire::aeth::{self, AethRepr};
use rocelink_wire::bth::{self, BthRepr, Opcode};
use rocelink_wire::ecb::{self, Command, Status};
use rocelink_wire::ethernet::{self, EthernetRepr};
use rocelink_wire::hsb::{self, CaptureRecord};
use rocelink_wire::ipv4::{self, Ipv4Repr};
use rocelink_wire::reth::{self, RethRepr};
use rocelink_wire::roce::{self, parse_frame, Endpoints, RoceRepr};
use rocelink_wire::rpc::{self, RequestRepr, ResponseRepr};
use rocelink_wire::udp::{self, UdpRepr};
use rocelink_wire::{icrc, immdt};

const JUMBO: usize = 9216;

fn opcode() -> impl Strategy<Value = Opcode> {
    prop_oneof![
        4 => (0x20u8..=0x2B).prop_map(Opcode::from),
        1 => Just(Opcode::RcSendOnly),
        1 => Just(Opcode::RcRdmaWriteOnly),
        1 => Just(Opcode::RcAcknowledge),
        1 => any::<u8>().prop_map(Opcode::from),
    ]
}

fn bth_repr() -> impl Strategy<Value = BthRepr> {
    (
        opcode(),
        any::<(bool, bool)>(),
        0u8..4,
        0u8..16,
        any::<u16>(),
        any::<(bool, bool)>(),
        0u8..0x40,
        0u32..1 << 24,
        any::<bool>(),
        0u8..0x80,
        0u32..1 << 24,
    )
        .prop_map(
            |(
                opcode,
                (solicited, migreq),
                pad_count,
                tver,
                pkey,
                (fecn, becn),
                resv6,
                dest_qp,
                ack_req,
                resv7,
                psn,
            )| {
                BthRepr {
                    opcode,
                    solicited,
                    migreq,
                    pad_count,
                    tver,
                    pkey,
                    fecn,
                    becn,
                    resv6,
                    dest_qp,
                    ack_req,
                    resv7,
                    psn,
                }
            },
        )
}

fn ipv4_repr(max_payload: usize) -> impl Strategy<Value = Ipv4Repr> {
    (any::<([u8; 4], [u8; 4], u8)>(), 0..=max_payload, any::<(u8, u8, u16, bool)>()).prop_map(
        |((src_addr, dst_addr, protocol), payload_len, (ttl, tos, ident, dont_frag))| Ipv4Repr {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl,
            tos,
            ident,
            dont_frag,
        },
    )
}

fn endpoints() -> impl Strategy<Value = Endpoints> {
    any::<([u8; 6], [u8; 6], [u8; 4], [u8; 4], u16)>().prop_map(|(src_mac, dst_mac, src_ip, dst_ip, src_port)| {
        Endpoints { src_mac, dst_mac, src_ip, dst_ip, src_port, dst_port: roce::UDP_PORT }
    })
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..=300),
        1 => proptest::collection::vec(any::<u8>(), roce::PMTU - 3..=roce::PMTU),
    ]
}

/// A valid RoCEv2 frame's Repr and payload: any opcode (extension headers to match), any
/// BTH bits, any IPv4 TOS/TTL/ident/DF, any pad count.
fn roce_repr() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (
        endpoints(),
        bth_repr(),
        any::<(u64, u32, u32)>(),
        any::<u32>(),
        any::<(u8, u32)>(),
        any::<(u8, u8, u16, bool, u16)>(),
        payload(),
    )
        .prop_map(|(ep, bth, (va, rkey, dma_len), imm, (syndrome, msn), (tos, ttl, ident, df, csum), payload)| {
            let mut r = RoceRepr::uc_send_only(&ep, bth.dest_qp, bth.psn, payload.len());
            r.bth = bth;
            r.reth = bth.opcode.has_reth().then_some(RethRepr { va, rkey, dma_len });
            r.aeth = bth.opcode.has_aeth().then_some(AethRepr { syndrome, msn: msn & 0xFF_FFFF });
            r.immdt = bth.opcode.has_immdt().then_some(imm);
            r.ipv4.tos = tos;
            r.ipv4.ttl = ttl;
            r.ipv4.ident = ident;
            r.ipv4.dont_frag = df;
            r.udp.checksum = csum;
            r.update_lengths();
            (r, payload)
        })
}

fn emit_frame(r: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; r.buffer_len()];
    assert_eq!(r.emit(payload, &mut buf), Ok(buf.len()));
    buf
}

proptest! {
    // ---- Repr round trips, header by header ----

    #[test]
    fn ethernet_round_trips(bytes in any::<[u8; 14]>()) {
        let repr = EthernetRepr::parse(&ethernet::Frame::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; 14];
        repr.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, bytes);
        prop_assert_eq!(EthernetRepr::parse(&ethernet::Frame::new_unchecked(&out[..])), Ok(repr));
    }

    #[test]
    fn ipv4_round_trips(repr in ipv4_repr(2000)) {
        let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..]));
        let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(Ipv4Repr::parse(&p), Ok(repr));
        let mut again = vec![0u8; buf.len()];
        Ipv4Repr::parse(&p).unwrap().emit(&mut ipv4::Packet::new_unchecked(&mut again[..]));
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn ipv4_header_bytes_round_trip(
        fields in any::<(u8, u16, bool, u8, u8, [u8; 8])>(), extra in 0usize..64
    ) {
        // Any header rocelink can emit: version 4, IHL 5, no fragment, reserved flag 0.
        let (tos, ident, df, ttl, proto, addrs) = fields;
        let mut b = vec![0u8; 20 + extra];
        b[0] = 0x45;
        b[1] = tos;
        b[2..4].copy_from_slice(&((20 + extra) as u16).to_be_bytes());
        b[4..6].copy_from_slice(&ident.to_be_bytes());
        b[6] = if df { 0x40 } else { 0 };
        b[8] = ttl;
        b[9] = proto;
        b[12..20].copy_from_slice(&addrs);
        ipv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
        let repr = Ipv4Repr::parse(&ipv4::Packet::new_checked(&b[..]).unwrap()).unwrap();
        let mut out = [0u8; 20];
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(&out[..], &b[..20]);
    }

    #[test]
    fn udp_round_trips(ports in any::<(u16, u16, u16)>(), payload_len in 0usize..2000) {
        let repr = UdpRepr { src_port: ports.0, dst_port: ports.1, payload_len, checksum: ports.2 };
        let mut buf = vec![0u8; 8 + payload_len];
        repr.emit(&mut udp::Packet::new_unchecked(&mut buf[..]));
        let p = udp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(UdpRepr::parse(&p), Ok(repr));
        let mut out = vec![0u8; buf.len()];
        UdpRepr::parse(&p).unwrap().emit(&mut udp::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, buf);
    }

    #[test]
    fn bth_round_trips(repr in bth_repr(), bytes in any::<[u8; 12]>()) {
        let mut out = [0u8; 12];
        repr.emit(&mut bth::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(BthRepr::parse(&bth::Packet::new_unchecked(&out[..])), Ok(repr));
        // Every 12 bytes are a BTH, reserved bits included.
        let parsed = BthRepr::parse(&bth::Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        parsed.emit(&mut bth::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, bytes);
    }

    #[test]
    fn reth_aeth_immdt_round_trip(r in any::<[u8; 16]>(), a in any::<[u8; 4]>(), imm in any::<u32>()) {
        let reth = RethRepr::parse(&reth::Packet::new_checked(&r[..]).unwrap()).unwrap();
        let mut out = [0u8; 16];
        reth.emit(&mut reth::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, r);
        prop_assert_eq!(RethRepr::parse(&reth::Packet::new_unchecked(&out[..])), Ok(reth));

        let aeth = AethRepr::parse(&aeth::Packet::new_checked(&a[..]).unwrap()).unwrap();
        let mut out = [0u8; 4];
        aeth.emit(&mut aeth::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, a);
        prop_assert_eq!(AethRepr::parse(&aeth::Packet::new_unchecked(&out[..])), Ok(aeth));

        let mut out = [0u8; 4];
        immdt::emit(imm, &mut out).unwrap();
        prop_assert_eq!(immdt::parse(&out), Ok(imm));
    }

    #[test]
    fn ecb_request_round_trips(
        cmd in any::<u8>(), flags in any::<u8>(), seq in any::<u16>(),
        pairs in proptest::collection::vec(any::<(u32, u32)>(), 1..=ecb::MAX_PAIRS),
    ) {
        let mut buf = vec![0u8; ecb::request_len(pairs.len())];
        let n = ecb::emit_request(Command::from(cmd), flags, seq, &pairs, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let r = ecb::Request::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(u8::from(r.command()), cmd);
        prop_assert_eq!((r.flags(), r.sequence(), r.pair_count()), (flags, seq, pairs.len()));
        let parsed: Vec<(u32, u32)> = r.pairs().map(|(a, v)| (a, v.unwrap())).collect();
        prop_assert_eq!(&parsed, &pairs);
        let mut again = vec![0u8; n];
        ecb::emit_request(r.command(), r.flags(), r.sequence(), &parsed, &mut again).unwrap();
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn ecb_reply_round_trips(
        cmd in any::<u8>(), flags in any::<u8>(), seq in any::<u16>(), status in any::<u8>(),
        pairs in proptest::collection::vec(any::<(u32, u32)>(), 0..=ecb::MAX_PAIRS),
        latched in any::<u16>(), emulator in any::<bool>(),
    ) {
        let mut buf = vec![0u8; ecb::reply_len(pairs.len())];
        let n = ecb::emit_reply(cmd, flags, seq, Status::from(status), &pairs, latched, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let rtl = buf.clone();
        let at = ecb::REPLY_HEADER_LEN + ecb::PAIR_LEN * pairs.len();
        if emulator {
            // The emulator's layout: 4 zero bytes after the pairs (10 + 8n bytes).
            buf.truncate(at);
            buf.extend_from_slice(&[0; ecb::EMULATOR_TRAILER_LEN]);
            prop_assert_eq!(buf.len(), ecb::emulator_reply_len(pairs.len()));
        }
        let r = ecb::Reply::new_checked(&buf[..]).unwrap();
        prop_assert_eq!((r.command_byte(), r.flags(), r.sequence()), (cmd, flags, seq));
        prop_assert_eq!(u8::from(r.status()), status);
        prop_assert_eq!(r.pairs().collect::<Vec<_>>(), pairs.clone());
        prop_assert_eq!(r.latched_sequence(), if emulator { 0 } else { latched });
        let mut again = vec![0u8; n];
        ecb::emit_reply(r.command_byte(), r.flags(), r.sequence(), r.status(), &pairs, r.latched_sequence(), &mut again).unwrap();
        if emulator {
            // Re-emitted in the RTL layout, with the emulator's latched sequence (0).
            prop_assert_eq!(&again[..at], &rtl[..at]);
        } else {
            prop_assert_eq!(again, buf);
        }
    }

    #[test]
    fn rpc_round_trips(req in any::<(u32, u32, u32, u64)>(), resp in any::<(i32, u32, u32, u64)>(), tail in any::<[u8; 20]>()) {
        let q = RequestRepr { function_id: req.0, arg_len: req.1, request_id: req.2, ptp_timestamp: req.3 };
        let mut buf = [0u8; rpc::HEADER_LEN];
        q.emit(&mut buf).unwrap();
        prop_assert_eq!(RequestRepr::parse(&buf), Ok(q));
        let s = ResponseRepr { status: resp.0, result_len: resp.1, request_id: resp.2, ptp_timestamp: resp.3 };
        s.emit(&mut buf).unwrap();
        prop_assert_eq!(ResponseRepr::parse(&buf), Ok(s));
        // Bytes -> Repr -> bytes, for any header with the right magic.
        let mut b = [0u8; rpc::HEADER_LEN];
        b[..4].copy_from_slice(&rpc::REQUEST_MAGIC.to_le_bytes());
        b[4..].copy_from_slice(&tail);
        let mut out = [0u8; rpc::HEADER_LEN];
        RequestRepr::parse(&b).unwrap().emit(&mut out).unwrap();
        prop_assert_eq!(out, b);
        b[..4].copy_from_slice(&rpc::RESPONSE_MAGIC.to_le_bytes());
        ResponseRepr::parse(&b).unwrap().emit(&mut out).unwrap();
        prop_assert_eq!(out, b);
    }

    #[test]
    fn hsb_record_and_scramble_round_trip(
        w in any::<[u32; 8]>(), id in any::<u32>(), args in proptest::collection::vec(any::<u8>(), 0..600)
    ) {
        let rec = CaptureRecord::from_words(&w);
        prop_assert_eq!(rec.to_words(), w);
        prop_assert_eq!(CaptureRecord::from_words(&rec.to_words()), rec);
        let mut s = args.clone();
        hsb::scramble_args(id, &mut s);
        hsb::scramble_args(id, &mut s);
        prop_assert_eq!(s, args);
    }

    // ---- Whole frames ----

    #[test]
    fn frames_round_trip((repr, payload) in roce_repr()) {
        let bytes = emit_frame(&repr, &payload);
        prop_assert!(bytes.len() <= roce::MAX_FRAME_LEN);
        let f = parse_frame(&bytes).unwrap();
        prop_assert_eq!(f.repr, repr);
        prop_assert_eq!(f.payload, &payload[..]);
        prop_assert_eq!(icrc::verify(&bytes[ethernet::HEADER_LEN..]), Ok(()));
        prop_assert_eq!(emit_frame(&f.repr, f.payload), bytes);
    }

    #[test]
    fn hsb_constructors_round_trip(
        ep in endpoints(), qp in any::<u32>(), psn in any::<u32>(), reth in any::<(u64, u32, u32)>(),
        slot in 0u32..64, payload in payload(),
    ) {
        let reth = RethRepr { va: reth.0, rkey: reth.1, dma_len: reth.2 };
        let imm = immdt::hsb_imm(psn, slot);
        let w = RoceRepr::uc_write_imm(&ep, qp, psn, reth, imm, payload.len());
        prop_assert_eq!((w.buffer_len() - roce::BASE_HEADERS_LEN - 24) % 4, 0);
        let f = emit_frame(&w, &payload);
        let p = parse_frame(&f).unwrap();
        prop_assert_eq!(p.repr, w);
        prop_assert_eq!(immdt::slot(p.repr.immdt.unwrap()), slot);
        let back = Endpoints { dst_port: roce::UDP_PORT, ..ep.reversed() };
        let s = RoceRepr::uc_send_only(&back, qp, psn, payload.len());
        let f = emit_frame(&s, &payload);
        prop_assert_eq!(parse_frame(&f).unwrap().repr, s);
    }

    // ---- No parser panics ----

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..JUMBO)) {
        poke_everything(&bytes);
    }

    #[test]
    fn damaged_frames_never_panic(
        (repr, payload) in roce_repr(),
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(), extend in 0usize..64,
    ) {
        let mut bytes = emit_frame(&repr, &payload);
        for (at, v) in damage {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if extend > 32 {
            let n = cut.index(bytes.len() + 1);
            bytes.truncate(n);
        } else {
            bytes.resize(bytes.len() + extend, 0xA5);
        }
        poke_everything(&bytes);
        // Damage the IPv4 header but keep its checksum right, to reach the later stages.
        if bytes.len() >= 34 {
            ipv4::Packet::new_unchecked(&mut bytes[14..]).fill_checksum();
            poke_everything(&bytes);
            // ...and the ICRC right too, to reach the success path with odd structure.
            let total = usize::from(ipv4::Packet::new_unchecked(&bytes[14..]).total_len());
            if let Some(ip) = bytes.get_mut(14..14 + total) {
                let _ = icrc::fill(ip);
                poke_everything(&bytes);
            }
        }
    }
}

/// Feeds `bytes` to every parser and every accessor; only the absence of a panic matters,
/// plus a few invariants that hold for any input.
fn poke_everything(bytes: &[u8]) {
    if let Ok(f) = parse_frame(bytes) {
        assert!(f.payload.len() <= roce::PMTU);
        assert_eq!(f.repr.payload_len, f.payload.len());
        // Whatever parsed must verify on its own, over exactly the IP datagram.
        let ip = ipv4::Packet::new_checked(&bytes[ethernet::HEADER_LEN..]).unwrap();
        let end = ethernet::HEADER_LEN + usize::from(ip.total_len());
        assert_eq!(icrc::verify(&bytes[ethernet::HEADER_LEN..end]), Ok(()));
        assert_eq!(u32::from_le_bytes(bytes[end - 4..end].try_into().unwrap()), f.icrc);
    }
    let _ = icrc::compute(bytes);
    let _ = icrc::verify(bytes);

    if let Ok(r) = ecb::Request::new_checked(bytes) {
        let _ = (r.command(), r.flags(), r.sequence(), r.reserved(), r.command().is_read());
        let n = r.pair_count();
        assert!(n >= 1);
        for i in 0..n {
            let _ = (r.address(i), r.value(i));
        }
        assert_eq!(r.get_address(n), None);
        assert_eq!(r.value(n), None);
        assert_eq!(r.pairs().count(), n);
    }
    if let Ok(r) = ecb::Reply::new_checked(bytes) {
        let _ = (r.command_byte(), r.command(), r.flags(), r.sequence(), r.status(), r.latched_sequence());
        let n = r.pair_count();
        assert_eq!(n, (bytes.len() - 8) / 8);
        for i in 0..=n {
            let _ = r.pair(i);
        }
        assert_eq!(r.get_pair(n), None);
    }
    // Unchecked views on any bytes must not panic either.
    let r = ecb::Request::new_unchecked(bytes);
    let _ = (r.address(usize::MAX), r.value(usize::MAX), r.pair_count());
    let p = ecb::Reply::new_unchecked(bytes);
    let _ = (p.pair(usize::MAX), p.latched_sequence(), p.pair_count());

    if let Ok(q) = RequestRepr::parse(bytes) {
        let _ = rpc::Request::new_checked(bytes).unwrap().args();
        let _ = q.message_len();
    }
    if ResponseRepr::parse(bytes).is_ok() {
        let _ = rpc::Response::new_checked(bytes).unwrap().result();
    }

    if let Ok(f) = ethernet::Frame::new_checked(bytes) {
        let _ = EthernetRepr::parse(&f);
        let _ = f.payload();
    }
    if let Ok(p) = ipv4::Packet::new_checked(bytes) {
        let _ = (Ipv4Repr::parse(&p), p.payload(), p.verify_checksum());
    }
    let p = ipv4::Packet::new_unchecked(bytes);
    let _ = (p.payload(), p.header(), p.verify_checksum());
    if let Ok(p) = udp::Packet::new_checked(bytes) {
        let _ = (UdpRepr::parse(&p), p.payload());
    }
    let _ = udp::Packet::new_unchecked(bytes).payload();
    if let Ok(p) = bth::Packet::new_checked(bytes) {
        let _ = BthRepr::parse(&p);
    }
    if let Ok(p) = reth::Packet::new_checked(bytes) {
        let _ = RethRepr::parse(&p);
    }
    if let Ok(p) = aeth::Packet::new_checked(bytes) {
        let _ = AethRepr::parse(&p);
    }
    let _ = immdt::parse(bytes);
}
