//! fpga-sim's ECB server end to end (`EcbServer::handle`: request datagram in, reply out,
//! the register model and the player start behind it), fed a conversation of datagrams
//! (records, see the crate docs).
//!
//! Record tag bit 0 clear: the bytes are the datagram. Set: a request is built, its command
//! from bits 1-2 (WR_DWORD, WR_BLOCK, RD_DWORD, RD_BLOCK), ACK and sequence-check flags from
//! bits 3-4, an undefined flag when bit 5 is set, the sequence the server expects unless
//! bit 6 is set, and the (address, value) pairs from the bytes (big-endian, 8 each). The
//! first byte of the input gives the peer a QEC replay when bit 0 is set.
//!
//! Checked: no panic; a reply parses, is as long as its pair count says (PROTOCOLS.md 2.1),
//! answers the request (command | 0x80, flags, sequence, the request's addresses in order,
//! write and refused values 0), carries the server's latched sequence and zero pad bytes; only a
//! request that parses is answered.
#![no_main]

use std::sync::mpsc;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use rocelink_fpga_sim::ecb_server::{EcbServer, MAX_REPLY_LEN, MAX_REQUEST_LEN};
use rocelink_fpga_sim::regs::{PeerIdentity, PeerShared, Registers};
use rocelink_fpga_sim::QecReplay;
use rocelink_fuzz::records;
use rocelink_wire::ecb::{self, flags, Command, Reply, Request, Status};

fn replay() -> Arc<QecReplay> {
    // 2 rounds of 3 detectors, 1 observable, 4 shots of 1 byte.
    let r = QecReplay::new(vec![3, 3], 1, vec![0x01, 0x12, 0x00, 0x3f], vec![1, 0, 0, 1], Some(vec![1, 0, 1, 1]))
        .expect("a valid replay");
    Arc::new(r)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, data)) = data.split_first() else {
        return;
    };
    let id = PeerIdentity { mac: [2, 0, 0, 0, 0, 2], ip: [127, 0, 0, 2], qp: 2 };
    let shared = Arc::new(PeerShared::default());
    let regs = Registers::with_qec(id, shared, (cfg & 1 != 0).then(replay));
    let (tx, rx) = mpsc::channel();
    let mut server = EcbServer::new(regs, Some(tx));
    let mut request = [0u8; MAX_REQUEST_LEN];
    let mut reply = [0u8; MAX_REPLY_LEN];
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(ecb::MAX_PAIRS);
    for (k, r) in records(data).enumerate() {
        let datagram: &[u8] =
            if r.tag & 1 == 0 {
                r.bytes
            } else {
                let command = [Command::WrDword, Command::WrBlock, Command::RdDword, Command::RdBlock]
                    [usize::from(r.tag >> 1 & 3)];
                let mut fl = r.tag >> 3 & (flags::ACK_REQUEST | flags::SEQUENCE_CHECK);
                if r.tag & 0x20 != 0 {
                    fl |= 0x40;
                }
                let sequence = if r.tag & 0x40 == 0 { server.latched_sequence().wrapping_add(1) } else { k as u16 };
                pairs.clear();
                pairs.extend(r.bytes.chunks_exact(8).take(ecb::MAX_PAIRS).map(|p| {
                    (u32::from_be_bytes([p[0], p[1], p[2], p[3]]), u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
                }));
                if pairs.is_empty() {
                    pairs.push((0, 0));
                }
                let n = ecb::emit_request(command, fl, sequence, &pairs, &mut request).expect("fits");
                &request[..n]
            };
        let answer = server.handle(datagram, &mut reply);
        while rx.try_recv().is_ok() {}
        let Some(n) = answer else {
            continue;
        };
        let req = Request::new_checked(datagram).expect("only a request that parses is answered");
        assert!(n <= MAX_REPLY_LEN);
        let rep = Reply::new_checked(&reply[..n]).expect("the reply parses");
        let pc = rep.pair_count();
        assert_eq!(n, ecb::reply_len(pc), "reply length for {pc} pairs");
        assert!(pc >= 1 && pc <= req.pair_count().clamp(1, ecb::MAX_PAIRS));
        assert_eq!(rep.command_byte(), u8::from(req.command()) | ecb::REPLY_BIT);
        assert_eq!(rep.flags(), req.flags());
        assert_eq!(rep.sequence(), req.sequence());
        assert_eq!(rep.reserved(), 0);
        assert_eq!(rep.latched_sequence(), server.latched_sequence());
        if pc <= 1 {
            // only a reply of at most one pair is padded (PROTOCOLS.md 2.1)
            assert_eq!(reply[n - 2..n], [0, 0], "pad bytes");
        }
        let st = rep.status();
        for i in 0..pc {
            let (address, value) = rep.pair(i);
            assert_eq!(address, req.address(i), "pair {i}");
            // Writes answer 0; a refused request echoes its addresses with 0; a block stopped at
            // a bad address carries the values read before it and 0 for the bad one.
            let read_value =
                req.command().is_read() && (st == Status::Ok || st == Status::InvalidAddress && i + 1 < pc);
            if !read_value {
                assert_eq!(value, 0, "pair {i} of a reply with status {st:?}");
            }
        }
        if st == Status::Ok {
            // A read may omit its last value word; a write needs whole pairs.
            let available =
                if req.command().is_read() { req.pair_count() } else { (req.len() - ecb::HEADER_LEN) / ecb::PAIR_LEN };
            assert_eq!(pc, if req.command().is_block() { available.min(ecb::MAX_PAIRS) } else { 1 });
        }
    }
});
