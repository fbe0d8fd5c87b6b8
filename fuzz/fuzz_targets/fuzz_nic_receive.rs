//! The software NIC's receive path (`SoftNic::receive`): frames into one UC queue pair's
//! state, built as `operator/tests/nic_bad_input.rs` builds it (queue pair memory, a receive
//! region, a send region, a region in other memory), fed a sequence of frames (records, see
//! the crate docs).
//!
//! The receive region is the RX buffer less [`GUARD`] bytes at each end, so that guard bytes
//! lie right around it in the same memory. Record tag, applied in this order: bits 3-4 set
//! the RETH's R_Key (kept, the receive region's, the send region's, the other memory's);
//! bit 2 makes the RETH's VA relative to the receive region (the VA the harness cannot know
//! in advance); bit 0 rewrites the IPv4 and UDP lengths to the frame's and the IPv4
//! checksum; bit 1 rewrites the ICRC; bits 5-7 post that many receive WQEs first (SEND
//! buffers inside the region, every fourth one running past its end). The first byte of the
//! input picks the NIC's options (path MTU, CQE inline scatter, prefetch).
//!
//! Checked: no panic; every refusal is counted; completions come out of the CQ as the NIC
//! produced them; after the whole input, no byte outside the receive region, the receive
//! CQ, the receive queue and the doorbell records has changed (the guard bytes, the send
//! region, the send rings, the control block), nor any byte of the other memory.
#![no_main]

use std::sync::atomic::Ordering::Release;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use rocelink_fuzz::records;
use rocelink_operator::abi::{self, CQE, RECV_WQE};
use rocelink_operator::mem::SharedMem;
use rocelink_operator::nic::qp::Delivery;
use rocelink_operator::nic::{Access, DoorbellMode, MrTable, NicCounters, NicOptions, QpAttrs, SoftNic};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_operator::verbs::HostVerbs;
use rocelink_wire::bth::Opcode;
use rocelink_wire::roce::{self, Endpoints};
use rocelink_wire::{icrc, ipv4};

const QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_HOST_QP;
const GUARD: usize = 64;
const SLOTS: u32 = 8;
const STRIDE: u32 = 1024;
/// Frame offsets (no IPv4 options): IPv4 14, UDP 34, BTH 42, RETH 54.
const IP: usize = 14;
const UDP: usize = 34;
const BTH: usize = 42;
const RETH: usize = 54;

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

fn snapshot(m: &SharedMem) -> Vec<u8> {
    let mut v = vec![0u8; m.len()];
    m.read(0, &mut v);
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, data)) = data.split_first() else {
        return;
    };
    let q = QpMemory::new(sizes(), SharedMem::new).expect("valid sizes");
    let l = q.layout;
    let mut mrs = MrTable::default();
    let rx = mrs.register(
        q.mem.clone(),
        l.rx_buffer + GUARD,
        l.rx_buffer_len() - 2 * GUARD,
        Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    );
    let tx = mrs.register(q.mem.clone(), l.tx_buffer, l.tx_buffer_len(), Access::LOCAL_READ);
    let other = Arc::new(SharedMem::new(8192));
    let foreign = mrs.register(other.clone(), 0, 8192, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    // Guard bytes and the other memory hold a pattern, so that a stray write of zeros shows.
    q.mem.write(l.rx_buffer, &[0xA5; GUARD]);
    q.mem.write(l.rx_buffer + l.rx_buffer_len() - GUARD, &[0xA5; GUARD]);
    other.write(0, &[0x5A; 8192]);

    let opts = NicOptions {
        pmtu: [roce::PMTU, 1024, 256, 4096][usize::from(cfg & 3)],
        cqe_inline_scatter: cfg & 4 != 0,
        prefetch_next_receive: cfg & 8 != 0,
        doorbell: DoorbellMode::Proxy,
        ..NicOptions::default()
    };
    let attrs = QpAttrs {
        qpn: QPN,
        pkey: 0xffff,
        endpoints: Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [192, 168, 0, 101],
            dst_ip: [192, 168, 0, 2],
            src_port: roce::UDP_PORT,
            dst_port: roce::UDP_PORT,
        },
        peer_qpn: 2,
    };
    let counters = Arc::new(NicCounters::default());
    let mut nic = SoftNic::new(attrs, opts, mrs, q.clone(), counters.clone());
    let mut verbs = HostVerbs::new(q.clone(), QPN, tx.lkey);

    let before = snapshot(&q.mem);
    let (mut posted, mut completed, mut drops) = (0u32, 0u32, 0u64);
    let mut frame = Vec::with_capacity(roce::MAX_FRAME_LEN + 64);
    for r in records(data) {
        // Post receive WQEs (the ring holds 16; never more outstanding).
        for _ in 0..r.tag >> 5 {
            if posted.wrapping_sub(completed) >= l.sizes.rq_entries {
                break;
            }
            let k = u64::from(posted % SLOTS);
            let (addr, len) = if posted % 4 == 3 { (rx.addr + rx.len - 512, 1024) } else { (rx.addr + k * 1000, 1064) };
            let at = l.rq + (posted & (l.sizes.rq_entries - 1)) as usize * RECV_WQE;
            q.mem.write(at, &abi::recv_wqe(len, rx.lkey, addr));
            posted = posted.wrapping_add(1);
            q.mem.atomic_u32(l.rq_dbrec_counter()).store((posted & 0xffff).to_be(), Release);
        }

        frame.clear();
        frame.extend_from_slice(r.bytes);
        let long = frame.len() >= RETH + 16 && Opcode::from(frame[BTH]).has_reth();
        if long {
            let rkey = match r.tag >> 3 & 3 {
                0 => None,
                1 => Some(rx.rkey),
                2 => Some(tx.rkey),
                _ => Some(foreign.rkey),
            };
            if let Some(k) = rkey {
                frame[RETH + 8..RETH + 12].copy_from_slice(&k.to_be_bytes());
            }
            if r.tag & 4 != 0 {
                let va = u64::from_be_bytes(frame[RETH..RETH + 8].try_into().expect("8 bytes"));
                frame[RETH..RETH + 8].copy_from_slice(&rx.addr.wrapping_add(va).to_be_bytes());
            }
        }
        if r.tag & 1 != 0 && frame.len() >= UDP + 8 {
            let ip_len = u16::try_from(frame.len() - IP).unwrap_or(u16::MAX);
            let udp_len = u16::try_from(frame.len() - UDP).unwrap_or(u16::MAX);
            frame[IP + 2..IP + 4].copy_from_slice(&ip_len.to_be_bytes());
            frame[UDP + 4..UDP + 6].copy_from_slice(&udp_len.to_be_bytes());
            if ipv4::Packet::new_checked(&frame[IP..]).is_ok() {
                ipv4::Packet::new_unchecked(&mut frame[IP..]).fill_checksum();
            }
        }
        if r.tag & 2 != 0 && frame.len() > IP {
            let _ = icrc::fill(&mut frame[IP..]);
        }

        match nic.receive(&frame) {
            Ok(Delivery::Completed) => {
                completed = completed.wrapping_add(1);
                let c = verbs.poll_recv().expect("a completion the NIC produced is in the CQ");
                assert!(u64::from(c.cqe.byte_cnt) <= rx.len, "a completion longer than the region");
            }
            Ok(Delivery::Written) => {}
            Err(_) => drops += 1,
        }
        assert!(verbs.poll_recv().is_none(), "one completion per completed frame");
    }
    assert_eq!(counters.total_drops(), drops, "every refusal is counted");
    assert_eq!(counters.rx_cqes.load(std::sync::atomic::Ordering::Relaxed), u64::from(completed));

    // Nothing outside what a receive may write has changed.
    let after = snapshot(&q.mem);
    let rx_at = l.rx_buffer + GUARD..l.rx_buffer + l.rx_buffer_len() - GUARD;
    let mut allowed = [
        rx_at,
        l.rcq..l.rcq + l.sizes.rq_entries as usize * CQE,
        l.rq..l.rq + l.sizes.rq_entries as usize * RECV_WQE,
        l.qp_dbrec..l.qp_dbrec + 8,
        l.rcq_dbrec..l.rcq_dbrec + 8,
    ];
    allowed.sort_by_key(|r| r.start);
    let mut from = 0;
    for r in allowed.iter().chain(std::iter::once(&(after.len()..after.len()))) {
        let to = r.start.max(from);
        if before[from..to] != after[from..to] {
            let i = from + (from..to).position(|i| before[i] != after[i]).unwrap_or(0);
            panic!(
                "byte {i:#x} of the queue pair's memory changed ({:#x} -> {:#x}); layout {l:?}",
                before[i], after[i]
            );
        }
        from = from.max(r.end);
    }
    assert!(snapshot(&other).iter().all(|&b| b == 0x5A), "the other memory was written");
});
