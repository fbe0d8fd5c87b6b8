//! Bad input to the software NIC ([`SoftNic`]): the acceptance list of the NIC issue.
//!
//! Every receive case checks the same five things:
//! 1. `receive` returns the specific [`DropReason`];
//! 2. the counter of that reason moved by one and no other drop counter moved;
//! 3. no receive CQE appeared (`HostVerbs::poll_recv` is `None`);
//! 4. no byte of the queue pair's memory changed, nor of a second registered region that
//!    lives in other memory (stronger than "nothing outside the RX region": a drop writes
//!    nothing at all, qp.rs module docs);
//! 5. the NIC keeps serving: a good RDMA WRITE with immediate sent afterwards lands in its
//!    slot byte for byte, changes nothing but those bytes and one receive CQE, and
//!    `poll_recv` returns that CQE with the right immediate and byte count.
//!
//! The send side is checked for bad gather entries (error CQE, nothing on the link), good
//! SENDs (parseable UC SEND ONLY frames, a REQ CQE when signaled), checked doorbells whose
//! last WQE is still landing or never lands, and a WQE running past its doorbell. Two property tests
//! throw random bytes and mutated good frames at `receive`.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use proptest::prelude::*;
use rocelink_link::MAX_FRAME;
use rocelink_operator::abi::{self, CQE};
use rocelink_operator::nic::qp::Delivery;
use rocelink_operator::nic::{DropReason, NicOptions};
use rocelink_operator::rings::{QpLayout, QpSizes};
use rocelink_operator::verbs::{HostVerbs, RecvCompletion};
use rocelink_wire::aeth::AethRepr;
use rocelink_wire::bth::Opcode;
use rocelink_wire::reth::RethRepr;
use rocelink_wire::roce::{self, RoceRepr};
use rocelink_wire::{icrc, immdt, ipv4};

#[path = "support/nic_rig.rs"]
mod nic_rig;
use nic_rig::{emit, NicRig, Wire, HOST_IP, HOST_MAC, PEER_IP, PEER_MAC, PEER_QPN, QPN};

const SLOTS: u32 = 8;
const STRIDE: u32 = 1024;
/// Receive WQEs posted by [`Rig::new`] (no test completes more).
const POSTED: u32 = 8;

/// The reference bad frame: a WRITE_IMM of [`BASE_LEN`] bytes into [`BASE_SLOT`].
const BASE_SLOT: u32 = 1;
const BASE_LEN: usize = 64;
/// Offsets in the reference frame: Ethernet 0..14, IPv4 14..34, UDP 34..42, BTH 42..54,
/// RETH 54..70, ImmDt 70..74, payload 74..138, ICRC 138..142.
const IP: usize = 14;
const UDP: usize = 34;
const BTH: usize = 42;
const RETH: usize = 54;
const IMMDT: usize = 70;
const PAYLOAD: usize = 74;
const ICRC: usize = PAYLOAD + BASE_LEN;
const BASE_FRAME_LEN: usize = ICRC + 4;

/// A named way to make a bad frame for a rig.
type FrameCase = (&'static str, fn(&Rig) -> Vec<u8>);
/// The R_Key a bad frame carries.
type RkeyOf = fn(&Rig) -> u32;
/// The (VA, DMA length) a bad frame's RETH carries.
type TargetOf = fn(&Rig) -> (u64, u32);
/// A change to a send WQE's 16-byte data segment.
type Spoil = fn(&Rig, &mut [u8; 16]);

fn sizes() -> QpSizes {
    QpSizes {
        sq_entries: 16,
        rq_entries: 16,
        rx_slots: SLOTS,
        rx_slot_stride: STRIDE,
        tx_slot_stride: STRIDE,
        timestamp_entries: 0,
        signal_every: 8,
    }
}

/// Deterministic, non-zero-ish bytes (so a write of them is visible in memory).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

/// `repr` with opcode `op` and the extension headers that opcode carries (RETH kept when
/// both have one), lengths updated: the re-emitted frame has a valid ICRC.
fn with_opcode(mut repr: RoceRepr, op: Opcode) -> RoceRepr {
    repr.bth.opcode = op;
    repr.reth = op.has_reth().then(|| repr.reth.unwrap_or_default());
    repr.immdt = op.has_immdt().then(|| repr.immdt.unwrap_or(0x1234_5678));
    repr.aeth = op.has_aeth().then_some(AethRepr { syndrome: 0, msn: 1 });
    repr.update_lengths();
    repr
}

/// Rewrites the IPv4 header checksum after a header change.
fn fix_ip_checksum(frame: &mut [u8]) {
    ipv4::Packet::new_unchecked(&mut frame[IP..]).fill_checksum();
}

/// Cuts `frame` at `cut` and rewrites the IPv4 and UDP lengths (and the IPv4 checksum) to
/// say so: the frame is consistent up to the transport headers, which no longer fit.
fn cut_consistently(frame: &[u8], cut: usize) -> Vec<u8> {
    assert!(cut >= UDP, "needs the whole IPv4 header");
    let mut f = frame[..cut].to_vec();
    f[IP + 2..IP + 4].copy_from_slice(&((cut - IP) as u16).to_be_bytes());
    if cut >= UDP + 6 {
        f[UDP + 4..UDP + 6].copy_from_slice(&((cut - UDP) as u16).to_be_bytes());
    }
    fix_ip_checksum(&mut f);
    f
}

/// Offsets where `before` and `after` differ (quick when they do not).
fn changed(before: &[u8], after: &[u8]) -> Vec<usize> {
    if before == after {
        return Vec::new();
    }
    (0..before.len()).filter(|&i| before[i] != after[i]).collect()
}

/// Which part of the queue pair's memory byte `off` of a [`Rig::snapshot`] is.
fn region_of(l: &QpLayout, off: usize) -> &'static str {
    if off >= l.total {
        return "the region in other memory";
    }
    let starts = [
        ("sq", l.sq),
        ("rq", l.rq),
        ("scq", l.scq),
        ("rcq", l.rcq),
        ("qp_dbrec", l.qp_dbrec),
        ("scq_dbrec", l.scq_dbrec),
        ("rcq_dbrec", l.rcq_dbrec),
        ("proxy_doorbell", l.proxy_doorbell),
        ("control", l.control),
        ("timestamps", l.timestamps),
        ("rx_buffer", l.rx_buffer),
        ("tx_buffer", l.tx_buffer),
    ];
    starts.iter().filter(|(_, s)| *s <= off).max_by_key(|(_, s)| *s).map_or("?", |(n, _)| n)
}

/// The NIC rig with its data-path verbs, and what the NIC should have counted so far.
struct Rig {
    base: NicRig,
    verbs: HostVerbs,
    /// PSN of the next frame the "peer" sends.
    psn: u32,
    /// Drops the NIC should have counted, per reason.
    drops: [u64; DropReason::ALL.len()],
}

impl std::ops::Deref for Rig {
    type Target = NicRig;
    fn deref(&self) -> &NicRig {
        &self.base
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut NicRig {
        &mut self.base
    }
}

impl Rig {
    /// A rig with [`POSTED`] receive WQEs posted.
    fn new() -> Rig {
        let mut rig = Rig::without_receives();
        rig.verbs.post_recv(POSTED);
        rig
    }

    /// A rig whose receive queue is empty.
    fn without_receives() -> Rig {
        Rig::with_options(NicOptions::default())
    }

    /// A rig whose NIC has options `opts`, with an empty receive queue.
    fn with_options(opts: NicOptions) -> Rig {
        let base = NicRig::new(sizes(), opts);
        let verbs = base.host_verbs();
        Rig { base, verbs, psn: 0x10_0000, drops: [0; DropReason::ALL.len()] }
    }

    /// Offset in the shared memory of RX slot `slot`.
    fn slot_off(&self, slot: u32) -> usize {
        self.q.layout.rx_slot(slot)
    }

    fn rx_end(&self) -> u64 {
        self.rx.addr + self.rx.len
    }

    /// A WRITE_IMM Repr from the peer (current PSN, RX rkey) to `va`.
    fn write_imm_repr(&self, va: u64, dma_len: u32, imm: u32, len: usize) -> RoceRepr {
        self.base.write_imm_repr(self.psn, va, dma_len, imm, len)
    }

    /// A good WRITE_IMM Repr of `len` bytes into `slot` (HSB immediate: PSN and slot).
    fn good_repr(&self, slot: u32, len: usize) -> RoceRepr {
        self.write_imm_repr(self.slot_va(slot), len as u32, immdt::hsb_imm(self.psn, slot), len)
    }

    /// The reference frame every bad frame is made from.
    fn base_repr(&self) -> RoceRepr {
        self.good_repr(BASE_SLOT, BASE_LEN)
    }

    fn base_payload() -> Vec<u8> {
        pattern(BASE_LEN, 7)
    }

    fn base_frame(&self) -> Vec<u8> {
        let f = emit(&self.base_repr(), &Rig::base_payload());
        assert_eq!(f.len(), BASE_FRAME_LEN);
        f
    }

    /// The base frame re-emitted after `change` (so the ICRC stays valid).
    fn base_with(&self, change: impl FnOnce(&mut RoceRepr)) -> Vec<u8> {
        let mut r = self.base_repr();
        change(&mut r);
        emit(&r, &Rig::base_payload())
    }

    /// The queue pair's memory followed by the other memory's region.
    fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.q.layout.total + self.foreign.len as usize];
        let (ours, other) = v.split_at_mut(self.q.layout.total);
        self.q.mem.read(0, ours);
        self.foreign.mem.read(self.foreign.offset, other);
        v
    }

    fn read(&self, at: Range<usize>) -> Vec<u8> {
        let mut v = vec![0u8; at.len()];
        self.q.mem.read(at.start, &mut v);
        v
    }

    fn assert_drop_counters(&self) {
        for (r, want) in DropReason::ALL.iter().zip(self.drops) {
            assert_eq!(self.counters.drops(*r), want, "drop counter {}", r.name());
        }
        assert_eq!(self.counters.total_drops(), self.drops.iter().sum::<u64>());
    }

    /// `frame` is dropped for `reason`, counted once under it, and changes nothing.
    fn check_drop(&mut self, frame: &[u8], reason: DropReason, what: &str) {
        let before = self.snapshot();
        let rx_packets = self.counters.rx_packets.load(Relaxed);
        assert_eq!(self.nic.receive(frame), Err(reason), "{what}");
        self.drops[DropReason::ALL.iter().position(|r| *r == reason).expect("listed")] += 1;
        self.assert_drop_counters();
        assert_eq!(self.counters.rx_packets.load(Relaxed), rx_packets, "{what}: a drop counted as received");
        assert!(self.verbs.poll_recv().is_none(), "{what}: a dropped frame produced a CQE");
        let after = self.snapshot();
        if let Some(&i) = changed(&before, &after).first() {
            panic!(
                "{what}: dropped frame changed byte {i} ({}): {:#04x} -> {:#04x}",
                region_of(&self.q.layout, i),
                before[i],
                after[i]
            );
        }
    }

    /// `frame` is accepted as `expect`; it changes only bytes in `dest` and, when it
    /// completes, the one CQE `poll_recv` then returns (and no second one).
    fn accept(&mut self, frame: &[u8], dest: Range<usize>, expect: Delivery, what: &str) -> Option<RecvCompletion> {
        let before = self.snapshot();
        assert_eq!(self.nic.receive(frame), Ok(expect), "{what}");
        self.assert_drop_counters();
        let after = self.snapshot();
        let completion = self.verbs.poll_recv();
        assert_eq!(completion.is_some(), expect == Delivery::Completed, "{what}: CQE iff Completed");
        let cqe = completion.map_or(0..0, |c| c.cqe_offset..c.cqe_offset + CQE);
        for i in changed(&before, &after) {
            assert!(
                dest.contains(&i) || cqe.contains(&i),
                "{what}: byte {i} ({}) changed outside the write's target and its CQE",
                region_of(&self.q.layout, i)
            );
        }
        assert!(self.verbs.poll_recv().is_none(), "{what}: more than one CQE");
        self.psn = (self.psn + 1) & 0xff_ffff;
        completion
    }

    /// Sends a good WRITE_IMM of `len` bytes into `slot` and checks where it landed and
    /// what its CQE says.
    fn check_good_write(&mut self, slot: u32, len: usize, what: &str) {
        let data = pattern(len, slot as u8 ^ 0x5a);
        let repr = self.good_repr(slot, len);
        let imm = repr.immdt.expect("WRITE_IMM");
        let dest = self.slot_off(slot)..self.slot_off(slot) + len;
        let c = self.accept(&emit(&repr, &data), dest.clone(), Delivery::Completed, what).expect("a CQE");
        assert_eq!(u32::from(c.cqe.opcode), abi::RL_CQE_RESP_WR_IMM, "{what}");
        assert_eq!(c.cqe.imm, imm, "{what}");
        assert_eq!(c.cqe.byte_cnt, len as u32, "{what}");
        assert_eq!(c.cqe.qpn, QPN, "{what}");
        assert_eq!(self.read(dest), data, "{what}: payload in slot {slot}");
    }

    /// The NIC still serves after whatever came before.
    fn check_serves(&mut self) {
        self.check_good_write(5, 101, "good frame after the bad ones");
    }

    /// Drops `frame` on a fresh rig, then checks the rig still serves.
    fn drop_on_fresh(frame_of: impl FnOnce(&Rig) -> Vec<u8>, reason: DropReason, what: &str) {
        let mut rig = Rig::new();
        let frame = frame_of(&rig);
        rig.check_drop(&frame, reason, what);
        rig.check_serves();
    }
}

// ---------------------------------------------------------------------------------------
// Frame structure: length, identification, checksums, ICRC.

#[test]
fn truncated_frames_are_dropped() {
    // Raw cuts: the bytes stop, the headers still claim the whole frame. Inside Ethernet,
    // IPv4, UDP, BTH, RETH, ImmDt, payload and ICRC.
    let raw = [
        0,
        1,
        13,
        IP,
        IP + 1,
        UDP - 1,
        UDP,
        UDP + 4,
        BTH - 1,
        BTH,
        BTH + 4,
        RETH - 1,
        RETH,
        RETH + 8,
        IMMDT - 1,
        IMMDT,
        IMMDT + 2,
        PAYLOAD,
        PAYLOAD + 1,
        ICRC - 1,
        ICRC,
        ICRC + 1,
        ICRC + 2,
        ICRC + 3,
    ];
    for cut in raw {
        Rig::drop_on_fresh(|r| r.base_frame()[..cut].to_vec(), DropReason::Truncated, &format!("raw cut at {cut}"));
    }
    // Consistent cuts: IPv4 and UDP lengths (and the IPv4 checksum) rewritten to end at the
    // cut, so the parser gets past them and finds the transport headers short.
    for cut in [UDP + 4, UDP + 7, BTH, BTH + 11, RETH, RETH + 15, IMMDT, IMMDT + 3] {
        Rig::drop_on_fresh(
            |r| cut_consistently(&r.base_frame(), cut),
            DropReason::Truncated,
            &format!("consistent cut at {cut}"),
        );
    }
    // No room for the ICRC after the headers: a zero-length WRITE_IMM cut inside its ICRC.
    for cut in [PAYLOAD + 1, PAYLOAD + 3] {
        Rig::drop_on_fresh(
            |r| cut_consistently(&emit(&r.write_imm_repr(r.slot_va(0), 0, 1, 0), &[]), cut),
            DropReason::Truncated,
            &format!("empty WRITE_IMM cut at {cut} inside its ICRC"),
        );
    }
}

#[test]
fn any_identification_with_its_correct_icrc_is_accepted() {
    // PROTOCOLS.md 1.2: the identification is the sender's choice; the ICRC covers it
    for ident in [1, 0x1234, 0xffff] {
        let mut rig = Rig::new();
        let f = rig.base_with(|x| x.ipv4.ident = ident);
        let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
        rig.accept(&f, dest, Delivery::Completed, &format!("identification {ident:#x}")).expect("a CQE");
    }
}

#[test]
fn bad_icrc_is_dropped() {
    let flips: [(usize, &str); 8] = [
        (PAYLOAD, "first payload byte"),
        (ICRC - 1, "last payload byte"),
        (RETH + 3, "RETH VA (an address the ICRC protects)"),
        (IMMDT, "immediate"),
        (BTH + 7, "BTH DestQP (the ICRC is checked before the QP)"),
        (ICRC, "ICRC byte 0"),
        (ICRC + 3, "ICRC byte 3"),
        (BTH + 11, "BTH PSN"),
    ];
    for (at, what) in flips {
        Rig::drop_on_fresh(
            |r| {
                let mut f = r.base_frame();
                f[at] ^= 0x01;
                f
            },
            DropReason::BadIcrc,
            what,
        );
    }
    // The IPv4 identification is covered by the ICRC (PROTOCOLS.md 1.1), even with a
    // correct header checksum.
    Rig::drop_on_fresh(
        |r| {
            let mut f = r.base_frame();
            f[IP + 5] ^= 0x01;
            fix_ip_checksum(&mut f);
            f
        },
        DropReason::BadIcrc,
        "IPv4 identification changed, checksum fixed",
    );
    Rig::drop_on_fresh(
        |r| {
            let mut f = r.base_frame();
            f[ICRC..].fill(0);
            f
        },
        DropReason::BadIcrc,
        "zero ICRC",
    );
}

#[test]
fn frames_that_are_not_roce_are_dropped() {
    let cases: [FrameCase; 5] = [
        ("UDP destination port 4792", |r| r.base_with(|x| x.udp.dst_port = 4792)),
        ("UDP destination port 0", |r| r.base_with(|x| x.udp.dst_port = 0)),
        ("ethertype IPv6", |r| {
            let mut f = r.base_frame();
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f
        }),
        ("ethertype 802.1Q", |r| {
            let mut f = r.base_frame();
            f[12..14].copy_from_slice(&[0x81, 0x00]);
            f
        }),
        ("IP protocol TCP, checksum fixed", |r| {
            let mut f = r.base_frame();
            f[IP + 9] = 6;
            fix_ip_checksum(&mut f);
            f
        }),
    ];
    for (what, frame_of) in cases {
        Rig::drop_on_fresh(frame_of, DropReason::NotRoce, what);
    }
}

#[test]
fn bad_ipv4_header_checksum_is_dropped() {
    let cases: [FrameCase; 3] = [
        ("checksum byte flipped", |r| {
            let mut f = r.base_frame();
            f[IP + 10] ^= 0xff;
            f
        }),
        ("TTL changed, checksum not", |r| {
            let mut f = r.base_frame();
            f[IP + 8] -= 1;
            f
        }),
        ("source address changed, checksum not", |r| {
            let mut f = r.base_frame();
            f[IP + 15] ^= 0x01;
            f
        }),
    ];
    for (what, frame_of) in cases {
        Rig::drop_on_fresh(frame_of, DropReason::BadChecksum, what);
    }
    // A router decrementing the TTL and fixing the checksum is fine: the ICRC masks the TTL.
    let mut rig = Rig::new();
    let mut f = rig.base_frame();
    f[IP + 8] -= 1;
    fix_ip_checksum(&mut f);
    let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
    rig.accept(&f, dest, Delivery::Completed, "TTL decremented by a router").expect("a CQE");
}

#[test]
fn malformed_frames_are_dropped() {
    let cases: [FrameCase; 4] = [
        ("IPv4 more-fragments flag, checksum fixed", |r| {
            let mut f = r.base_frame();
            f[IP + 6] |= 0x20;
            fix_ip_checksum(&mut f);
            f
        }),
        ("IPv4 fragment offset, checksum fixed", |r| {
            let mut f = r.base_frame();
            f[IP + 7] = 1;
            fix_ip_checksum(&mut f);
            f
        }),
        ("UDP length one short of the IPv4 payload", |r| {
            let mut f = r.base_frame();
            f[UDP + 5] -= 1;
            f
        }),
        ("pad count larger than the payload", |r| {
            let mut f = emit(&r.write_imm_repr(r.slot_va(0), 0, 1, 0), &[]);
            f[BTH + 1] |= 0x30;
            f
        }),
    ];
    for (what, frame_of) in cases {
        Rig::drop_on_fresh(frame_of, DropReason::Malformed, what);
    }
}

/// A WRITE_IMM into `va` with `len` payload bytes and a valid ICRC, whatever `len`:
/// `RoceRepr::emit` refuses more than the PMTU, so the frame is assembled from an empty one.
fn hand_built_write_imm(rig: &Rig, va: u64, len: usize) -> Vec<u8> {
    assert_eq!(len % 4, 0, "keeps the pad count 0");
    let head = emit(&rig.write_imm_repr(va, len as u32, 0xfeed, 0), &[]);
    let mut f = head[..PAYLOAD].to_vec();
    f.extend(pattern(len, 3));
    f.extend([0u8; 4]);
    let n = f.len();
    f[IP + 2..IP + 4].copy_from_slice(&((n - IP) as u16).to_be_bytes());
    f[UDP + 4..UDP + 6].copy_from_slice(&((n - UDP) as u16).to_be_bytes());
    fix_ip_checksum(&mut f);
    icrc::fill(&mut f[IP..]).expect("headers present");
    icrc::verify(&f[IP..]).expect("the ICRC is valid");
    f
}

#[test]
fn oversized_frames_are_dropped() {
    // A payload one word over the 4096-byte PMTU, valid ICRC, RETH inside the region.
    Rig::drop_on_fresh(
        |r| hand_built_write_imm(r, r.slot_va(0), roce::PMTU + 4),
        DropReason::Oversized,
        "payload PMTU + 4",
    );
    Rig::drop_on_fresh(|r| hand_built_write_imm(r, r.slot_va(0), 8000), DropReason::Oversized, "payload 8000");
    // Longer than any frame the NIC receives (link MAX_FRAME): a good frame with padding.
    Rig::drop_on_fresh(
        |r| {
            let mut f = r.base_frame();
            f.resize(MAX_FRAME + 1, 0);
            f
        },
        DropReason::Oversized,
        "frame of MAX_FRAME + 1 bytes",
    );
    // The boundary: exactly a PMTU of payload is accepted, built either way.
    let mut rig = Rig::new();
    let f = hand_built_write_imm(&rig, rig.slot_va(0), roce::PMTU);
    let dest = rig.slot_off(0)..rig.slot_off(0) + roce::PMTU;
    rig.accept(&f, dest.clone(), Delivery::Completed, "hand-built PMTU payload").expect("a CQE");
    assert_eq!(rig.read(dest), pattern(roce::PMTU, 3));
    rig.check_good_write(2, roce::PMTU, "emitted PMTU payload");
}

// ---------------------------------------------------------------------------------------
// Transport checks: opcode, QP, P_Key.

#[test]
fn unsupported_opcodes_are_dropped() {
    let ops = [
        Opcode::Unknown(0x3f),
        Opcode::Unknown(0xff),
        Opcode::RcRdmaWriteOnly, // 0x0A, carries a RETH
        Opcode::RcAcknowledge,   // 0x11, carries an AETH
        Opcode::RcSendOnly,      // 0x04
        Opcode::UcSendFirst,     // 0x20: multi-packet SENDs are not accepted
        Opcode::UcSendLastImm,   // 0x23
    ];
    for op in ops {
        Rig::drop_on_fresh(
            |r| emit(&with_opcode(r.base_repr(), op), &Rig::base_payload()),
            DropReason::UnsupportedOpcode,
            &format!("opcode {:#04x}", u8::from(op)),
        );
    }
}

#[test]
fn unknown_destination_qp_is_dropped() {
    for qp in [QPN + 1, 0, PEER_QPN, 0xff_ffff, QPN | 0x10_0000] {
        Rig::drop_on_fresh(|r| r.base_with(|x| x.bth.dest_qp = qp), DropReason::UnknownQp, &format!("DestQP {qp:#x}"));
    }
}

#[test]
fn transport_version_other_than_0_is_dropped() {
    // IBTA 9.6, PROTOCOLS.md 1.2: a ConnectX drops a BTH TVer other than 0
    for tver in [1, 2, 0xf] {
        Rig::drop_on_fresh(|r| r.base_with(|x| x.bth.tver = tver), DropReason::BadTver, &format!("TVer {tver}"));
    }
}

#[test]
fn frames_from_another_source_than_the_peer_are_dropped() {
    // IBTA 9.6, PROTOCOLS.md 1.2: a connected QP accepts its peer's path only; the frame is
    // otherwise valid (ICRC over its own header) and addressed to our QP
    for src in [[10, 0, 0, 3], [127, 0, 0, 1], HOST_IP, [PEER_IP[0], PEER_IP[1], PEER_IP[2], PEER_IP[3] ^ 1]] {
        Rig::drop_on_fresh(
            |r| r.base_with(|x| x.ipv4.src_addr = src),
            DropReason::WrongSource,
            &format!("from {src:?}"),
        );
    }
    // the peer's address from another UDP source port is the peer (the port is entropy)
    let mut rig = Rig::new();
    let f = rig.base_with(|x| x.udp.src_port = 54321);
    let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
    rig.accept(&f, dest, Delivery::Completed, "the peer, another source port").expect("a CQE");
}

#[test]
fn wrong_pkey_is_dropped() {
    // Ours is 0xFFFF (default partition, full member).
    for pkey in [0xfffe, 0x7ffe, 0x1234, 0x0000, 0x8000] {
        Rig::drop_on_fresh(|r| r.base_with(|x| x.bth.pkey = pkey), DropReason::BadPkey, &format!("P_Key {pkey:#06x}"));
    }
    // IBTA 10.9.3: a limited member of our partition matches our full membership.
    let mut rig = Rig::new();
    let f = rig.base_with(|x| x.bth.pkey = 0x7fff);
    let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
    rig.accept(&f, dest, Delivery::Completed, "P_Key 0x7fff").expect("a CQE");
}

// ---------------------------------------------------------------------------------------
// The RETH: key, address, length.

#[test]
fn bad_rkey_is_dropped() {
    let cases: [(&str, RkeyOf); 6] = [
        ("rkey 0", |_| 0),
        ("rkey 0xffffffff", |_| u32::MAX),
        ("RX rkey with another index", |r| r.rx.rkey ^ 0x100),
        ("the RX region's lkey", |r| r.rx.lkey),
        ("TX region rkey (no REMOTE_WRITE)", |r| r.tx.rkey),
        ("rkey of a region in other memory", |r| r.foreign.rkey),
    ];
    for (what, rkey_of) in cases {
        Rig::drop_on_fresh(
            |r| {
                let rkey = rkey_of(r);
                let va = if rkey == r.foreign.rkey { r.foreign.addr } else { r.slot_va(BASE_SLOT) };
                r.base_with(|x| x.reth = Some(RethRepr { va, rkey, dma_len: BASE_LEN as u32 }))
            },
            DropReason::BadRkey,
            what,
        );
    }
}

#[test]
fn va_out_of_bounds_is_dropped() {
    let cases: [(&str, TargetOf); 8] = [
        ("wholly before the region", |r| (r.rx.addr - 4096, BASE_LEN as u32)),
        ("one byte before the region", |r| (r.rx.addr - 1, BASE_LEN as u32)),
        ("at the region's end", |r| (r.rx_end(), BASE_LEN as u32)),
        ("crossing the region's end", |r| (r.rx_end() - 32, BASE_LEN as u32)),
        ("VA + len overflows u64", |_| (u64::MAX - 15, BASE_LEN as u32)),
        ("VA 0", |_| (0, BASE_LEN as u32)),
        ("inside the TX region (registered, other key)", |r| (r.tx.addr, BASE_LEN as u32)),
        ("DMA length 2^32 - 1 from the region's start", |r| (r.rx.addr, u32::MAX)),
    ];
    for (what, target) in cases {
        Rig::drop_on_fresh(
            |r| {
                let (va, dma_len) = target(r);
                r.base_with(|x| x.reth = Some(RethRepr { va, rkey: r.rx.rkey, dma_len }))
            },
            DropReason::OutOfBounds,
            what,
        );
    }
}

#[test]
fn dma_length_disagreeing_with_the_payload_is_dropped() {
    for dma_len in [BASE_LEN as u32 + 1, BASE_LEN as u32 - 1, 0, 2 * STRIDE] {
        Rig::drop_on_fresh(
            |r| r.base_with(|x| x.reth = Some(RethRepr { va: r.slot_va(BASE_SLOT), rkey: r.rx.rkey, dma_len })),
            DropReason::LengthMismatch,
            &format!("DMA length {dma_len} for {BASE_LEN} payload bytes"),
        );
    }
}

#[test]
fn dma_length_past_the_last_slot_is_dropped() {
    let last = SLOTS - 1;
    // A whole slot and one byte more, starting at the last slot: past the region's end.
    Rig::drop_on_fresh(
        |r| {
            let len = STRIDE as usize + 4;
            emit(&r.good_repr(last, len), &pattern(len, 9))
        },
        DropReason::OutOfBounds,
        "slot + 4 bytes at the last slot",
    );
    // The last 32 bytes of the last slot plus 32 more.
    Rig::drop_on_fresh(
        |r| emit(&r.write_imm_repr(r.rx_end() - 32, 64, 1, 64), &pattern(64, 9)),
        DropReason::OutOfBounds,
        "64 bytes 32 before the region's end",
    );
    // The boundary: the last slot filled exactly is accepted.
    let mut rig = Rig::new();
    rig.check_good_write(last, STRIDE as usize, "the last slot, filled exactly");
    rig.check_serves();
}

// ---------------------------------------------------------------------------------------
// Receive queue and PSN rules.

#[test]
fn write_imm_with_no_receive_posted_is_dropped() {
    let mut rig = Rig::without_receives();
    let f = rig.base_frame();
    rig.check_drop(&f, DropReason::RqEmpty, "WRITE_IMM, receive queue empty");
    let send = emit(&RoceRepr::uc_send_only(&rig.peer, QPN, rig.psn, 8), &[1; 8]);
    rig.check_drop(&send, DropReason::RqEmpty, "SEND, receive queue empty");
    // A WRITE without immediate consumes no WQE: accepted, no CQE.
    let mut w = with_opcode(rig.base_repr(), Opcode::UcWriteOnly);
    w.reth = Some(RethRepr { va: rig.slot_va(3), rkey: rig.rx.rkey, dma_len: BASE_LEN as u32 });
    let dest = rig.slot_off(3)..rig.slot_off(3) + BASE_LEN;
    rig.accept(&emit(&w, &Rig::base_payload()), dest.clone(), Delivery::Written, "WRITE ONLY, receive queue empty");
    assert_eq!(rig.read(dest), Rig::base_payload());
    // Post one: the same WRITE_IMM is now accepted.
    rig.verbs.post_recv(1);
    let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
    let c = rig.accept(&f, dest.clone(), Delivery::Completed, "WRITE_IMM after one post").expect("a CQE");
    assert_eq!(c.cqe.byte_cnt, BASE_LEN as u32);
    assert_eq!(rig.read(dest), Rig::base_payload());
    // That consumed the only WQE.
    let f = rig.base_frame();
    rig.check_drop(&f, DropReason::RqEmpty, "WRITE_IMM after the posted WQE was used");
    rig.verbs.post_recv(1);
    rig.check_serves();
}

/// A multi-packet WRITE into `slot`: FIRST (with the RETH for the whole message), MIDDLEs,
/// LAST_IMM; `psns[i]` for packet `i`.
fn multi_packet(rig: &Rig, slot: u32, pieces: &[Vec<u8>], psns: &[u32], imm: u32) -> Vec<Vec<u8>> {
    let total: usize = pieces.iter().map(Vec::len).sum();
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let op = match i {
                0 => Opcode::UcWriteFirst,
                _ if i == n - 1 => Opcode::UcWriteLastImm,
                _ => Opcode::UcWriteMiddle,
            };
            let mut r = with_opcode(rig.write_imm_repr(rig.slot_va(slot), total as u32, imm, p.len()), op);
            r.bth.psn = psns[i];
            emit(&r, p)
        })
        .collect()
}

#[test]
fn multi_packet_write_is_reassembled() {
    let mut rig = Rig::new();
    let pieces = [pattern(256, 1), pattern(256, 2), pattern(100, 3)];
    let total = 612;
    let p = rig.psn;
    let frames = multi_packet(&rig, 2, &pieces, &[p, p + 1, p + 2], 0xabcd_0002);
    let start = rig.slot_off(2);
    rig.accept(&frames[0], start..start + 256, Delivery::Written, "FIRST");
    rig.accept(&frames[1], start + 256..start + 512, Delivery::Written, "MIDDLE");
    let c = rig.accept(&frames[2], start + 512..start + total, Delivery::Completed, "LAST_IMM").expect("a CQE");
    assert_eq!(u32::from(c.cqe.opcode), abi::RL_CQE_RESP_WR_IMM);
    assert_eq!(c.cqe.imm, 0xabcd_0002);
    assert_eq!(c.cqe.byte_cnt, total as u32, "the CQE counts the whole message");
    assert_eq!(rig.read(start..start + total), pieces.concat());
    assert_eq!(rig.counters.psn_gaps.load(Relaxed), 0);
    assert_eq!(rig.counters.rx_cqes.load(Relaxed), 1);
    rig.check_serves();
}

#[test]
fn psn_gap_inside_a_multi_packet_write_is_dropped() {
    let mut rig = Rig::new();
    let pieces = [pattern(256, 1), pattern(256, 2), pattern(100, 3)];
    let p = rig.psn;
    // MIDDLE skips a PSN; LAST_IMM follows the MIDDLE.
    let frames = multi_packet(&rig, 2, &pieces, &[p, p + 2, p + 3], 0xabcd_0002);
    let start = rig.slot_off(2);
    rig.accept(&frames[0], start..start + 256, Delivery::Written, "FIRST");
    rig.check_drop(&frames[1], DropReason::PsnError, "MIDDLE after a PSN gap");
    // UC abandons the message: its LAST completes nothing either.
    rig.check_drop(&frames[2], DropReason::PsnError, "LAST_IMM of the abandoned message");
    assert_eq!(rig.counters.rx_cqes.load(Relaxed), 0);
    rig.check_serves();
}

#[test]
fn only_packet_with_unexpected_psn_is_accepted_and_counted() {
    let mut rig = Rig::new();
    rig.check_good_write(0, 40, "first frame");
    assert_eq!(rig.counters.psn_gaps.load(Relaxed), 0);
    rig.psn += 5;
    rig.check_good_write(1, 40, "ONLY after a PSN gap");
    assert_eq!(rig.counters.psn_gaps.load(Relaxed), 1);
    rig.check_good_write(2, 40, "next in sequence");
    assert_eq!(rig.counters.psn_gaps.load(Relaxed), 1);
    assert_eq!(rig.counters.total_drops(), 0);
}

#[test]
fn bth_byte_4_all_ones_is_accepted_and_counted_unusual() {
    let mut rig = Rig::new();
    let f = rig.base_with(|x| {
        x.bth.fecn = true;
        x.bth.becn = true;
        x.bth.resv6 = 0x3f;
    });
    assert_eq!(f[BTH + 4], 0xff);
    let dest = rig.slot_off(BASE_SLOT)..rig.slot_off(BASE_SLOT) + BASE_LEN;
    let c = rig.accept(&f, dest.clone(), Delivery::Completed, "BTH byte 4 = 0xFF").expect("a CQE");
    assert_eq!(c.cqe.byte_cnt, BASE_LEN as u32);
    assert_eq!(rig.read(dest), Rig::base_payload());
    assert_eq!(rig.counters.unusual.load(Relaxed), 1);
    assert_eq!(rig.counters.total_drops(), 0);
    rig.check_serves();
    assert_eq!(rig.counters.unusual.load(Relaxed), 1);
}

// ---------------------------------------------------------------------------------------
// Send side.

#[test]
fn send_wqes_with_bad_gather_entries_fail_and_good_ones_go_out() {
    let mut rig = Rig::new();
    let mut wire = Wire::new(8);

    // Four gather SENDs of 100 bytes, each with its data segment (bytes 16..32 of the WQE:
    // byte_count, lkey, addr) spoiled after the data path wrote it.
    let spoil: [(&str, Spoil); 4] = [
        ("lkey of no region", |r, d| d[4..8].copy_from_slice(&(r.tx.lkey ^ 0x100).to_be_bytes())),
        ("address before the TX region", |r, d| d[8..16].copy_from_slice(&(r.tx.addr - 64).to_be_bytes())),
        ("address crossing the TX region's end", |r, d| {
            d[8..16].copy_from_slice(&(r.tx.addr + r.tx.len - 50).to_be_bytes())
        }),
        ("RX region address with the TX lkey", |r, d| d[8..16].copy_from_slice(&r.rx.addr.to_be_bytes())),
    ];
    for (i, (_, change)) in spoil.iter().enumerate() {
        let i = i as u32;
        assert_eq!(rig.verbs.next_send_index(), i);
        rig.q.mem.write(rig.verbs.tx_slot(i), &pattern(100, 40 + i as u8));
        rig.verbs.prepare_send_from_slot(100);
        let mut d = [0u8; 16];
        rig.q.mem.read(rig.sq_wqe(i) + 16, &mut d);
        change(&rig, &mut d);
        rig.q.mem.write(rig.sq_wqe(i) + 16, &d);
    }
    rig.verbs.ring_send_doorbell();
    let before = rig.snapshot();
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 4);
    assert_eq!(wire.sent(), Vec::<Vec<u8>>::new(), "a bad WQE put a frame on the link");
    let after = rig.snapshot();
    let scq = rig.q.layout.scq..rig.q.layout.scq + 4 * CQE;
    for i in changed(&before, &after) {
        assert!(scq.contains(&i), "executing bad WQEs changed byte {i} ({})", region_of(&rig.q.layout, i));
    }
    for (n, (what, _)) in spoil.iter().enumerate() {
        let c = rig.send_cqe(n as u32);
        assert_eq!(u32::from(c[abi::CQE_OP_OWN] >> 4), abi::RL_CQE_REQ_ERR, "{what}");
        assert_eq!(c[55], 0x04, "{what}: syndrome LOCAL_PROT_ERR");
        assert_eq!(u16::from_be_bytes([c[60], c[61]]), n as u16, "{what}: wqe_counter");
    }
    assert_eq!(rig.verbs.poll_send_completions(), 4);
    assert_eq!(rig.verbs.send_errors, 4);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 4);
    assert_eq!(rig.counters.tx_packets.load(Relaxed), 0);

    // Good SENDs: 20 bytes inline (unsignaled), then 300 bytes gathered from the TX slot,
    // signaled.
    let small = pattern(20, 1);
    let big = pattern(300, 2);
    rig.q.mem.write(rig.verbs.tx_slot(4), &small);
    rig.verbs.prepare_send_from_slot(small.len());
    rig.q.mem.write(rig.verbs.tx_slot(5), &big);
    rig.verbs.prepare_send_from_slot(big.len());
    rig.q.mem.atomic_u8(rig.sq_wqe(5) + 11).store(abi::RL_WQE_CTRL_CQ_UPDATE as u8, Relaxed);
    rig.verbs.ring_send_doorbell();
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 2);
    let sent = wire.sent();
    assert_eq!(sent.len(), 2, "two frames on the link");
    for (frame, (psn, payload)) in sent.iter().zip([(0, &small), (1, &big)]) {
        let f = roce::parse_frame(frame).expect("a valid RoCEv2 frame");
        assert_eq!(f.repr.bth.opcode, Opcode::UcSendOnly);
        assert_eq!(f.repr.bth.dest_qp, PEER_QPN);
        assert_eq!(f.repr.bth.psn, psn, "PSNs count successful sends only");
        assert_eq!(f.repr.bth.pkey, 0xffff);
        assert_eq!((f.repr.eth.src_addr, f.repr.eth.dst_addr), (HOST_MAC, PEER_MAC));
        assert_eq!((f.repr.ipv4.src_addr, f.repr.ipv4.dst_addr), (HOST_IP, PEER_IP));
        assert_eq!(f.repr.udp.dst_port, roce::UDP_PORT);
        assert_eq!(f.payload, &payload[..]);
    }
    // Only the signaled WQE wrote a CQE.
    let c = rig.send_cqe(4);
    assert_eq!(u32::from(c[abi::CQE_OP_OWN] >> 4), abi::RL_CQE_REQ);
    assert_eq!(u32::from_be_bytes([c[44], c[45], c[46], c[47]]), 300, "byte count");
    assert_eq!(u16::from_be_bytes([c[60], c[61]]), 5, "wqe_counter");
    let mut next = [0u8; CQE];
    rig.q.mem.read(rig.q.layout.scq + 5 * CQE, &mut next);
    assert!(!abi::cqe_valid(next[abi::CQE_OP_OWN], 5, sizes().sq_entries), "an unsignaled WQE wrote a CQE");
    assert_eq!(rig.verbs.poll_send_completions(), 1);
    assert_eq!(rig.verbs.send_errors, 4);
    assert_eq!(rig.counters.tx_packets.load(Relaxed), 2);
    assert_eq!(rig.counters.tx_bytes.load(Relaxed), 320);
    assert_eq!(rig.counters.tx_cqes.load(Relaxed), 5);
    // Sending touched nothing on the receive side.
    assert_eq!(rig.counters.total_drops(), 0);
    rig.check_serves();
}

// ---------------------------------------------------------------------------------------
// Properties: no input panics `receive` or writes outside the RX region and receive CQ.

/// Feeds `frame` to a fresh rig: a drop changes nothing and is counted once; an accepted
/// frame changes only the RX region and the receive CQ.
fn receive_is_contained(frame_of: impl FnOnce(&Rig) -> Vec<u8>) -> Result<(), TestCaseError> {
    let mut rig = Rig::new();
    let frame = frame_of(&rig);
    let before = rig.snapshot();
    let r = rig.nic.receive(&frame);
    let after = rig.snapshot();
    let l = rig.q.layout;
    let rx = l.rx_buffer..l.rx_buffer + l.rx_buffer_len();
    let rcq = l.rcq..l.rcq + l.sizes.rq_entries as usize * CQE;
    for i in changed(&before, &after) {
        prop_assert!(r.is_ok(), "{r:?}: a dropped frame changed byte {i} ({})", region_of(&l, i));
        prop_assert!(rx.contains(&i) || rcq.contains(&i), "{r:?}: byte {i} ({}) changed", region_of(&l, i));
    }
    match r {
        Err(reason) => {
            prop_assert_eq!(rig.counters.drops(reason), 1);
            prop_assert_eq!(rig.counters.total_drops(), 1);
            prop_assert!(rig.verbs.poll_recv().is_none());
        }
        Ok(d) => {
            prop_assert_eq!(rig.counters.total_drops(), 0);
            prop_assert_eq!(rig.verbs.poll_recv().is_some(), d == Delivery::Completed);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_or_write(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        receive_is_contained(|_| bytes)?;
    }

    /// The good frame's first `keep` bytes, then random bytes: gets past the outer headers.
    #[test]
    fn good_prefix_random_tail_never_panics_or_writes(keep in 0..BASE_FRAME_LEN, tail in proptest::collection::vec(any::<u8>(), 0..200)) {
        receive_is_contained(|r| {
            let mut f = r.base_frame();
            f.truncate(keep);
            f.extend(tail);
            f
        })?;
    }

    #[test]
    fn single_byte_mutations_never_panic_or_write(at in 0..BASE_FRAME_LEN, value in any::<u8>()) {
        receive_is_contained(|r| {
            let mut f = r.base_frame();
            f[at] = value;
            f
        })?;
    }
}

#[test]
fn a_checked_doorbell_runs_its_last_wqe_only_once_its_bytes_give_the_check() {
    // a deadline no scheduling delay of this test reaches, until the case that needs one
    let mut rig = Rig::with_options(NicOptions {
        wqe_check_deadline: std::time::Duration::from_secs(60),
        ..NicOptions::default()
    });
    rig.verbs.post_recv(POSTED);
    let mut wire = Wire::new(8);
    let fm = abi::RL_WQE_CTRL_CQ_UPDATE as u8;
    let a = abi::send_inline_wqe(0, QPN, fm, &pattern(40, 3)).unwrap();
    let b = abi::send_inline_wqe(1, QPN, fm, &pattern(40, 4)).unwrap();

    // Bytes that agree at once: both WQEs run (the one before the last is complete by
    // contract), nothing re-read.
    rig.q.mem.write(rig.sq_wqe(0), &a);
    rig.q.mem.write(rig.sq_wqe(1), &b);
    rig.ring_checked(2, &b, &[]);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 2);
    assert_eq!(wire.sent_payloads(), vec![pattern(40, 3), pattern(40, 4)]);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 0);

    // The last WQE still half the old one (its second half landed, its first not): the NIC
    // re-reads until the rest lands, and sends the new bytes only.
    let c = abi::send_inline_wqe(2, QPN, fm, &pattern(40, 6)).unwrap();
    let mut half = a;
    half[32..].copy_from_slice(&c[32..]);
    rig.q.mem.write(rig.sq_wqe(2), &half);
    rig.ring_checked(3, &c, &[]);
    let mem = rig.q.mem.clone();
    let counters = rig.counters.clone();
    let at = rig.sq_wqe(2);
    let lander = std::thread::spawn(move || {
        // lands once the NIC has read the half and is re-reading
        while counters.tx_wqe_rereads.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        mem.write(at, &c[..32]);
    });
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    lander.join().unwrap();
    assert_eq!(wire.sent_payloads(), vec![pattern(40, 6)]);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 1);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 0);
}

#[test]
fn the_send_trace_holds_when_each_answer_left_by_its_first_wqebb() {
    let mut rig = Rig::new();
    let trace = Arc::new(rocelink_operator::nic::SendTrace::new(64));
    rig.nic.set_send_trace(trace.clone());
    let mut wire = Wire::new(8);
    let fm = abi::RL_WQE_CTRL_CQ_UPDATE as u8;
    let w: Vec<_> = (0..3u16).map(|i| abi::send_inline_wqe(i, QPN, fm, &pattern(40, i as u8)).unwrap()).collect();
    for (i, x) in w.iter().enumerate() {
        rig.q.mem.write(rig.sq_wqe(i as u32), x);
    }
    let t0 = rocelink_link::clock::monotonic_ns();
    rig.ring_checked(3, &w[2], &[]);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 3);
    let t1 = rocelink_link::clock::monotonic_ns();
    let sent: Vec<u64> = (0..3).map(|i| trace.sent_ns(i).expect("every sent WQE is traced")).collect();
    assert!(t0 <= sent[0] && sent[0] <= sent[1] && sent[1] <= sent[2] && sent[2] <= t1, "{t0} {sent:?} {t1}");
    assert_eq!(trace.sent_ns(3), None, "nothing sent there yet");
    assert_eq!(wire.sent_payloads().len(), 3);
}

#[test]
fn a_checked_doorbell_whose_bytes_never_agree_completes_in_error_after_the_deadline() {
    let mut rig = Rig::new(); // the default deadline
    let mut wire = Wire::new(8);
    let fm = abi::RL_WQE_CTRL_CQ_UPDATE as u8;
    // a stale WQE the writer never replaced: nothing goes on the link, the WQE completes in
    // error, and the NIC waited no longer than the deadline (and not shorter)
    let stale = abi::send_inline_wqe(0, QPN, fm, &pattern(40, 5)).unwrap();
    rig.q.mem.write(rig.sq_wqe(0), &stale);
    let d = abi::send_inline_wqe(0, QPN, fm, &pattern(40, 7)).unwrap();
    rig.ring_checked(1, &d, &[]);
    let t0 = std::time::Instant::now();
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    let waited = t0.elapsed();
    assert!(waited >= rocelink_operator::nic::qp::WQE_CHECK_DEADLINE, "{waited:?}");
    assert_eq!(wire.sent_payloads(), Vec::<Vec<u8>>::new());
    assert_eq!(rig.counters.tx_wqe_check_failures.load(Relaxed), 1);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 1);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 1);
    let e = rig.send_cqe(0);
    assert_eq!(u32::from(e[abi::CQE_OP_OWN] >> 4), abi::RL_CQE_REQ_ERR);
    assert_eq!(rig.verbs.poll_send_completions(), 1);
    assert_eq!(rig.verbs.send_errors, 1);

    // The NIC goes on: an unchecked doorbell after it runs its WQE.
    let e1 = abi::send_inline_wqe(1, QPN, fm, &pattern(40, 8)).unwrap();
    rig.q.mem.write(rig.sq_wqe(1), &e1);
    rig.ring_unchecked(2);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), vec![pattern(40, 8)]);
}

#[test]
fn a_checked_doorbell_runs_a_gathering_wqe_only_once_the_gathered_bytes_give_the_check() {
    let mut rig = Rig::with_options(NicOptions {
        wqe_check_deadline: std::time::Duration::from_secs(60),
        ..NicOptions::default()
    });
    rig.verbs.post_recv(POSTED);
    let mut wire = Wire::new(8);
    let fm = abi::RL_WQE_CTRL_CQ_UPDATE as u8;
    // a SEND of 700 bytes from TX slot 0, whose WQE is whole but whose last 100 bytes still
    // hold the answer before (they land once the NIC is re-reading): the NIC sends the new
    // bytes only, after they land
    let slot = rig.q.layout.tx_buffer;
    let (old, new) = (pattern(700, 1), pattern(700, 2));
    let w = abi::send_gather_wqe(0, QPN, fm, rig.tx.addr, rig.tx.lkey, 700);
    rig.q.mem.write(rig.sq_wqe(0), &w);
    rig.q.mem.write(slot, &new[..600]);
    rig.q.mem.write(slot + 600, &old[600..]);
    rig.ring_checked(1, &w, &new);
    let (mem, counters, rest) = (rig.q.mem.clone(), rig.counters.clone(), new[600..].to_vec());
    let lander = std::thread::spawn(move || {
        while counters.tx_wqe_rereads.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        mem.write(slot + 600, &rest);
    });
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    lander.join().unwrap();
    assert_eq!(wire.sent_payloads(), vec![new.clone()]);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 1);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 0);

    // In the same range (no fence between), an inline SEND and another gather of 33 bytes
    // (a partial last chunk, garbage stored past it) from TX slot 2: only the new WQEs are
    // checked again, both go out at once.
    let a = abi::send_inline_wqe(1, QPN, 0, &pattern(40, 3)).unwrap();
    let short = pattern(33, 4);
    let mut stored = short.clone();
    stored.extend_from_slice(&[0xee; 15]);
    let g = abi::send_gather_wqe(
        2,
        QPN,
        fm,
        rig.tx.addr + 2 * u64::from(rig.q.layout.sizes.tx_slot_stride),
        rig.tx.lkey,
        33,
    );
    rig.q.mem.write(rig.sq_wqe(1), &a);
    rig.q.mem.write(rig.sq_wqe(2), &g);
    rig.q.mem.write(slot + 2 * rig.q.layout.sizes.tx_slot_stride as usize, &stored);
    let mut range = w.to_vec();
    range.extend_from_slice(&a);
    range.extend_from_slice(&g);
    let check = abi::range_check(&range, 0, |_, first| {
        Some(abi::gather_check(if first == abi::gather_first_chunk(0) { &new } else { &short }, first))
    })
    .unwrap();
    rig.q
        .mem
        .atomic_u64(rig.q.layout.proxy_doorbell)
        .store(abi::ProxyDoorbell::checked(3, 3, check), std::sync::atomic::Ordering::Release);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 2);
    assert_eq!(wire.sent_payloads(), vec![pattern(40, 3), short]);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 1);
}

#[test]
fn a_checked_gather_the_nic_cannot_resolve_completes_in_error_after_the_deadline() {
    let mut rig = Rig::new(); // the default deadline
    let mut wire = Wire::new(8);
    let fm = abi::RL_WQE_CTRL_CQ_UPDATE as u8;
    let bytes = pattern(300, 6);
    rig.q.mem.write(rig.q.layout.tx_buffer, &bytes);
    // a wrong lkey, then a region in memory the NIC does not reach: never sent, each
    // completes in error once the deadline passed, the NIC goes on
    let bad_key = abi::send_gather_wqe(0, QPN, fm, rig.tx.addr, rig.tx.lkey ^ 0x100, 300);
    let foreign = abi::send_gather_wqe(1, QPN, fm, rig.foreign.addr, rig.foreign.lkey, 300);
    for (i, w) in [bad_key, foreign].iter().enumerate() {
        rig.q.mem.write(rig.sq_wqe(i as u32), w);
        let t0 = std::time::Instant::now();
        rig.ring_checked(i as u32 + 1, w, &bytes);
        assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
        assert!(t0.elapsed() >= rocelink_operator::nic::qp::WQE_CHECK_DEADLINE);
        assert_eq!(rig.counters.tx_wqe_check_failures.load(Relaxed), i as u64 + 1);
    }
    assert_eq!(wire.sent_payloads(), Vec::<Vec<u8>>::new());
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 2);
    // the same gather with the right key goes out
    let ok = abi::send_gather_wqe(2, QPN, fm, rig.tx.addr, rig.tx.lkey, 300);
    rig.q.mem.write(rig.sq_wqe(2), &ok);
    rig.ring_checked(3, &ok, &bytes);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), vec![bytes]);
}

#[test]
fn a_wqe_running_past_the_doorbell_completes_in_error() {
    let mut rig = Rig::new();
    let mut wire = Wire::new(8);
    // ds 12: three WQEBBs, but the doorbell says one
    let mut w = abi::send_inline_wqe(0, QPN, abi::RL_WQE_CTRL_CQ_UPDATE as u8, &pattern(40, 3)).unwrap();
    w[7] = 12;
    rig.q.mem.write(rig.sq_wqe(0), &w);
    rig.ring_unchecked(1);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), Vec::<Vec<u8>>::new());
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 1);
    let e = rig.send_cqe(0);
    assert_eq!(u32::from(e[abi::CQE_OP_OWN] >> 4), abi::RL_CQE_REQ_ERR);
    // the next WQE, at index 1, runs
    let ok = abi::send_inline_wqe(1, QPN, 0, &pattern(20, 9)).unwrap();
    rig.q.mem.write(rig.sq_wqe(1), &ok);
    rig.ring_unchecked(2);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), vec![pattern(20, 9)]);
}

/// An inline SEND of `payload` (up to 5 WQEBBs, as the GPU data path writes them), signaled,
/// as its `ds` segments.
fn inline_send_bytes(index: u16, payload: &[u8]) -> Vec<u8> {
    abi::send_inline_segments(index, QPN, abi::RL_WQE_CTRL_CQ_UPDATE as u8, payload)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A checked doorbell over a torn WQE (the data path rang without a fence; any of its
    /// 8-byte words may still hold what was there before: another WQE of any size): the NIC
    /// never sends anything but the new WQE's payload. It sends that (when the old words it
    /// read equal the new ones) or nothing, completing the WQE in error after the deadline.
    #[test]
    fn a_torn_wqe_is_never_sent(
        new in proptest::collection::vec(any::<u8>(), 0..=236),
        old in proptest::collection::vec(any::<u8>(), 0..=236),
        old_index in any::<u16>(),
        torn in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let mut rig = Rig::with_options(NicOptions { wqe_check_deadline: std::time::Duration::from_micros(20), ..NicOptions::default() });
        rig.verbs.post_recv(POSTED);
        let mut wire = Wire::new(8);
        let w_new = inline_send_bytes(0, &new);
        let bbs = w_new.len().div_ceil(abi::WQEBB);
        let mut padded = w_new.clone();
        padded.resize(bbs * abi::WQEBB, 0);
        // what was in the ring before: another WQE, then the new one's words over it, except
        // the torn ones
        let mut ring = vec![0u8; bbs * abi::WQEBB];
        let w_old = inline_send_bytes(old_index, &old);
        let n = w_old.len().min(ring.len());
        ring[..n].copy_from_slice(&w_old[..n]);
        for (k, word) in w_new.chunks(8).enumerate() {
            if !torn[k] {
                ring[k * 8..k * 8 + word.len()].copy_from_slice(word);
            }
        }
        for b in 0..bbs {
            rig.q.mem.write(rig.sq_wqe(b as u32), &ring[b * abi::WQEBB..(b + 1) * abi::WQEBB]);
        }
        rig.q
            .mem
            .atomic_u64(rig.q.layout.proxy_doorbell)
            .store(abi::ProxyDoorbell::checked(bbs as u32, bbs as u32, abi::range_check(&padded, 0, |_, _| None).unwrap()), std::sync::atomic::Ordering::Release);
        prop_assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
        let sent = wire.sent_payloads();
        let whole = ring[..w_new.len()] == w_new[..];
        if whole {
            prop_assert_eq!(sent, vec![new.clone()]);
        } else {
            prop_assert_eq!(sent, Vec::<Vec<u8>>::new(), "a torn WQE went out");
            prop_assert_eq!(rig.counters.tx_wqe_check_failures.load(Relaxed), 1);
        }
    }
}

#[test]
fn a_checked_range_runs_each_wqe_once_and_checks_only_what_is_new() {
    let mut rig = Rig::with_options(NicOptions {
        wqe_check_deadline: std::time::Duration::from_secs(60),
        ..NicOptions::default()
    });
    rig.verbs.post_recv(POSTED);
    let mut wire = Wire::new(8);
    // WQE 0 (1 WQEBB), then WQE 1 (2 WQEBBs) with no fence between: one range from 0
    let w0 = inline_send_bytes(0, &pattern(30, 1));
    let mut w1 = inline_send_bytes(1, &pattern(90, 2));
    w1.resize(2 * abi::WQEBB, 0);
    let mut range = w0.clone();
    range.resize(abi::WQEBB, 0);
    range.extend_from_slice(&w1);
    rig.q.mem.write(rig.sq_wqe(0), &range[..abi::WQEBB]);
    rig.ring_checked(1, &range[..abi::WQEBB], &[]);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), vec![pattern(30, 1)]);
    // the range grows by WQE 1, half landed: its check covers WQE 0 too; the NIC waits for the
    // rest and sends WQE 1 only (WQE 0 once, not again)
    rig.q.mem.write(rig.sq_wqe(2), &range[2 * abi::WQEBB..]);
    rig.ring_checked(3, &range, &[]);
    let mem = rig.q.mem.clone();
    let counters = rig.counters.clone();
    let at = rig.sq_wqe(1);
    let head = range[abi::WQEBB..2 * abi::WQEBB].to_vec();
    let lander = std::thread::spawn(move || {
        while counters.tx_wqe_rereads.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        mem.write(at, &head);
    });
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    lander.join().unwrap();
    assert_eq!(wire.sent_payloads(), vec![pattern(90, 2)]);
    // a new range after a fence, and an unchecked doorbell before it: each WQE runs once
    let w3 = inline_send_bytes(3, &pattern(20, 3));
    let mut w3p = w3.clone();
    w3p.resize(abi::WQEBB, 0);
    rig.q.mem.write(rig.sq_wqe(3), &w3p);
    let w4 = inline_send_bytes(4, &pattern(20, 4));
    let mut w4p = w4.clone();
    w4p.resize(abi::WQEBB, 0);
    rig.q.mem.write(rig.sq_wqe(4), &w4p);
    // the range [4, 5): WQE 3 below it is complete (the writer fenced after it)
    rig.ring_checked(5, &w4p, &[]);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 2);
    assert_eq!(wire.sent_payloads(), vec![pattern(20, 3), pattern(20, 4)]);
    assert_eq!(rig.counters.tx_wqe_rereads.load(Relaxed), 1);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 0);

    // a range that starts below what the NIC already ran without a check of it (its first
    // WQE went out with an unchecked doorbell): the NIC reads it again for the check, runs
    // only the new one
    let w5 = inline_send_bytes(5, &pattern(20, 5));
    let mut w5p = w5.clone();
    w5p.resize(abi::WQEBB, 0);
    rig.q.mem.write(rig.sq_wqe(5), &w5p);
    rig.ring_unchecked(6);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    let w6 = inline_send_bytes(6, &pattern(20, 6));
    let mut w6p = w6.clone();
    w6p.resize(abi::WQEBB, 0);
    rig.q.mem.write(rig.sq_wqe(6), &w6p);
    let mut r56 = w5p.clone();
    r56.extend_from_slice(&w6p);
    rig.ring_checked(7, &r56, &[]);
    assert_eq!(rig.nic.poll_send(&mut wire.nic_end), 1);
    assert_eq!(wire.sent_payloads(), vec![pattern(20, 5), pattern(20, 6)]);
    assert_eq!(rig.counters.tx_errors.load(Relaxed), 0);
}

/// `NicOptions::prefetch_next_receive` (on by default) asks for the slot it predicts after
/// each WRITE (as far past the target as the target was past the last), wherever that falls
/// (another slot, the TX region: a hint touches nothing; never past the queue pair's memory,
/// whose accessors panic there). Targets that jump to the region's end, repeat, or go back
/// land exactly as without it, and only where they should.
#[test]
fn the_next_receive_prefetch_is_only_a_hint() {
    for prefetch in [true, false] {
        let mut rig = Rig::with_options(NicOptions { prefetch_next_receive: prefetch, ..NicOptions::default() });
        rig.verbs.post_recv(POSTED);
        for (k, slot) in [0, 1, SLOTS - 1, SLOTS - 1, 0, 2, SLOTS - 1, SLOTS - 2].into_iter().enumerate() {
            let len = 32 + 8 * k;
            rig.check_good_write(slot, len, &format!("prefetch {prefetch}: write {k} to slot {slot}"));
        }
    }
}
