//! Each header on its own: the first byte picks the header, the rest is its buffer.
//! Parsers never panic; BTH, RETH, AETH and Ethernet re-emit exactly (every bit pattern
//! is valid for them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocelink_wire::{aeth, bth, ethernet, immdt, ipv4, reth, udp};

fuzz_target!(|data: &[u8]| {
    let Some((&which, buf)) = data.split_first() else {
        return;
    };
    match which % 7 {
        0 => {
            if let Ok(f) = ethernet::Frame::new_checked(buf) {
                let r = ethernet::EthernetRepr::parse(&f).unwrap();
                let mut out = [0u8; ethernet::HEADER_LEN];
                r.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
                assert_eq!(&out[..], &buf[..ethernet::HEADER_LEN]);
            }
        }
        1 => {
            if let Ok(p) = ipv4::Packet::new_checked(buf) {
                let _ = (p.payload(), p.header(), p.verify_checksum());
                if let Ok(r) = ipv4::Ipv4Repr::parse(&p) {
                    assert!(p.verify_checksum());
                    assert_eq!(r.payload_len, p.payload().len());
                }
            }
            let _ = ipv4::Packet::new_unchecked(buf).payload();
        }
        2 => {
            if let Ok(p) = udp::Packet::new_checked(buf) {
                let r = udp::UdpRepr::parse(&p).unwrap();
                assert_eq!(r.payload_len, p.payload().len());
            }
            let _ = udp::Packet::new_unchecked(buf).payload();
        }
        3 => {
            if let Ok(p) = bth::Packet::new_checked(buf) {
                let r = bth::BthRepr::parse(&p).unwrap();
                let mut out = [0u8; bth::HEADER_LEN];
                r.emit(&mut bth::Packet::new_unchecked(&mut out[..]));
                assert_eq!(&out[..], &buf[..bth::HEADER_LEN]);
            }
        }
        4 => {
            if let Ok(p) = reth::Packet::new_checked(buf) {
                let r = reth::RethRepr::parse(&p).unwrap();
                let mut out = [0u8; reth::HEADER_LEN];
                r.emit(&mut reth::Packet::new_unchecked(&mut out[..]));
                assert_eq!(&out[..], &buf[..reth::HEADER_LEN]);
            }
        }
        5 => {
            if let Ok(p) = aeth::Packet::new_checked(buf) {
                let r = aeth::AethRepr::parse(&p).unwrap();
                let mut out = [0u8; aeth::HEADER_LEN];
                r.emit(&mut aeth::Packet::new_unchecked(&mut out[..]));
                assert_eq!(&out[..], &buf[..aeth::HEADER_LEN]);
            }
        }
        _ => {
            if let Ok(imm) = immdt::parse(buf) {
                let mut out = [0u8; immdt::HEADER_LEN];
                immdt::emit(imm, &mut out).unwrap();
                assert_eq!(&out[..], &buf[..immdt::HEADER_LEN]);
            }
        }
    }
});
