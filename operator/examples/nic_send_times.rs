//! CPU time of the software NIC's send side for a checked CPU-proxy doorbell (abi.h
//! `rl_proxy_doorbell`), as the GPU data path rings it: one inline SEND of `payload` bytes per
//! doorbell, the range growing over `fence_every` messages and starting again after a "fence",
//! [`SoftNic::poll_send`] executing it onto an in-process wire, the frame taken off the other
//! end. One thread, every line in this core's cache: the instructions' cost only (the GPU
//! machine's doorbell-seen-to-frame-sent figures: latency-reports/poll-probes/nic-send-path.txt).
//!
//! `cargo run --release -p rocelink-operator --example nic_send_times [payload (64)] [iterations (1000000)]`

use std::sync::atomic::Ordering::Release;
use std::sync::Arc;
use std::time::Instant;

use rocelink_link::{inproc, Link, MAX_FRAME};
use rocelink_operator::abi;
use rocelink_operator::mem::SharedMem;
use rocelink_operator::nic::{MrTable, NicCounters, NicOptions, QpAttrs, SoftNic};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_wire::roce::{self, Endpoints};

const QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_HOST_QP;

fn main() {
    let mut args = std::env::args().skip(1);
    let payload: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let iters: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let sizes = QpSizes {
        sq_entries: 128,
        rq_entries: 64,
        rx_slots: 8,
        rx_slot_stride: 256,
        tx_slot_stride: 256,
        timestamp_entries: 0,
        signal_every: 16,
    };
    let q = QpMemory::new(sizes, SharedMem::new).expect("valid sizes");
    let ep = Endpoints {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: roce::UDP_PORT,
        dst_port: roce::UDP_PORT,
    };
    let attrs = QpAttrs { qpn: QPN, pkey: 0xffff, endpoints: ep, peer_qpn: 2 };
    let mut nic =
        SoftNic::new(attrs, NicOptions::default(), MrTable::default(), q.clone(), Arc::new(NicCounters::default()));
    let (mut nic_end, mut peer_end) = inproc::pair(64);
    let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let mut buf = vec![0u8; MAX_FRAME];
    // the WQE's bytes: only the control segment's index changes from message to message
    let ds = (16 + 4 + payload).div_ceil(16);
    let mut w = vec![0u8; ds.div_ceil(4) * abi::WQEBB];
    w[16..20].copy_from_slice(&(payload as u32 | abi::RL_INLINE_SEG).to_be_bytes());
    w[20..20 + payload].copy_from_slice(&data);
    let bbs = (w.len() / abi::WQEBB) as u32;
    let (mut pi, mut range_first, mut range_check, mut in_range) = (0u32, 0u32, 0u64, 0u32);
    let mut best = f64::MAX;
    let mut total_ns = 0u128;
    for batch in 0..10 {
        let t0 = Instant::now();
        for _ in 0..iters / 10 {
            // the WQE as the data path writes it, its check numbered from the range's start
            w[..16].copy_from_slice(&abi::ctrl_seg(abi::RL_OPCODE_SEND as u8, pi as u16, QPN, ds as u8, 0, 0));
            for k in 0..bbs {
                q.mem.write(
                    q.layout.sq + ((pi + k) % sizes.sq_entries) as usize * abi::WQEBB,
                    &w[k as usize * abi::WQEBB..(k as usize + 1) * abi::WQEBB],
                );
            }
            range_check ^= abi::range_check(&w, pi - range_first, |_, _| None).expect("a whole WQE");
            pi += bbs;
            q.mem
                .atomic_u64(q.layout.proxy_doorbell)
                .store(abi::ProxyDoorbell::checked(pi, pi - range_first, range_check), Release);
            nic.poll_send(&mut nic_end);
            let n = peer_end.try_recv(&mut buf).expect("link").expect("a frame");
            std::hint::black_box(&buf[..n]);
            in_range += 1;
            if in_range == 8 || pi - range_first + 4 > 16 {
                range_first = pi;
                range_check = 0;
                in_range = 0;
            }
        }
        let per = t0.elapsed().as_nanos() as f64 / f64::from(iters / 10);
        if batch > 0 {
            best = best.min(per);
            total_ns += t0.elapsed().as_nanos();
        }
    }
    println!("nic_send_times: {payload} B inline SEND, checked doorbell: best batch {best:.0} ns per message (incl. the writer's WQE and check, the peer's recv), mean {:.0}", total_ns as f64 / f64::from(iters / 10 * 9));
}
