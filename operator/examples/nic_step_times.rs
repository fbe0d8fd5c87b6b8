//! CPU time of each software step of one echo round trip over the `inproc` wire, and of the
//! whole round trip.
//!
//! One thread plays every part in turn, closed loop (one message in flight), with the code
//! the real threads run: the peer (`fpga-sim`'s [`Player`], as its data-plane thread drives
//! it), the in-process wire, the software NIC ([`SoftNic::receive`] and
//! [`SoftNic::poll_send`], as the NIC engine drives them) and the data path (the CPU
//! backend's work for one message: poll the receive CQ, the echo stage, post the SEND, ring
//! the doorbell, re-post the receive). Because it is single-threaded, every cache line is
//! already in this core's cache: the figures are the instructions' cost only, with **no
//! cross-core cost** (no cache-line transfers between the peer, NIC and data-path cores,
//! which dominate a real run), and they say nothing about the GPU.
//!
//! Printed: per step, the p50 and the mean over all measured iterations, each with the
//! cost of one `Instant::now()` (measured first, printed) subtracted; and the whole round
//! trip timed with no per-step timers (mean per round trip over a batch, best of several
//! batches, so that another process on the machine inflates it as little as possible).
//!
//! `cargo build --release --example nic_step_times -p rocelink-operator &&
//! ./target/release/examples/nic_step_times [payload_bytes (default 64)] [iterations (default 200000)]`

use std::sync::Arc;
use std::time::Instant;

use rocelink_fpga_sim::capture::CaptureRam;
use rocelink_fpga_sim::player::{Player, RunConfig, Transmit};
use rocelink_fpga_sim::stats::Stats;
use rocelink_link::clock::monotonic_ns;
use rocelink_link::{inproc, InprocLink, Link, MAX_FRAME};
use rocelink_operator::abi;
use rocelink_operator::mem::SharedMem;
use rocelink_operator::nic::{MrTable, NicCounters, NicOptions, QpAttrs, QpRegions, SoftNic};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_operator::stage::{Echo, Outcome, Stage};
use rocelink_operator::verbs::HostVerbs;
use rocelink_wire::roce::{self, Endpoints};

const HOST_QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_HOST_QP;
const PEER_QPN: u32 = rocelink_wire::hsb::ext::DEFAULT_FPGA_QP;

/// The steps of one round trip, in order.
const STEPS: [&str; 9] = [
    "peer stamp (expire + poll_transmit)",
    "peer link send",
    "nic link recv",
    "nic receive",
    "data path (poll CQ, echo, SEND, doorbell)",
    "nic poll_send (+ link send)",
    "peer link recv",
    "peer on_frame",
    "peer build ahead (prepare, off the path)",
];

/// Everything one round trip touches.
struct Rig {
    player: Player,
    stats: Stats,
    peer_link: InprocLink,
    nic_link: InprocLink,
    nic: SoftNic,
    verbs: HostVerbs,
    echo: Echo,
    q: QpMemory,
    peer_tx: Vec<u8>,
    peer_rx: Vec<u8>,
    nic_rx: Vec<u8>,
}

impl Rig {
    fn new(payload: usize, frames: u32) -> Rig {
        let sizes = QpSizes {
            sq_entries: 64,
            rq_entries: 64,
            rx_slots: 8,
            rx_slot_stride: 4096,
            tx_slot_stride: 4096,
            timestamp_entries: 0,
            signal_every: 8,
        };
        let q = QpMemory::new(sizes, SharedMem::new).expect("queue pair memory");
        let QpRegions { table: mrs, rx, tx } = MrTable::for_queue_pair(&q);
        let host = Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [10, 0, 0, 1],
            dst_ip: [10, 0, 0, 2],
            src_port: 49152,
            dst_port: roce::UDP_PORT,
        };
        let peer = Endpoints { src_port: 12288, dst_port: roce::UDP_PORT, ..host.reversed() };
        let attrs = QpAttrs { qpn: HOST_QPN, pkey: 0xffff, endpoints: host, peer_qpn: PEER_QPN };
        let nic = SoftNic::new(attrs, NicOptions::default(), mrs, q.clone(), Arc::new(NicCounters::default()));
        let mut verbs = HostVerbs::new(q.clone(), HOST_QPN, tx.lkey);
        verbs.post_recv(sizes.rq_entries);
        let cfg = RunConfig {
            generation: 1,
            endpoints: peer,
            dest_qp: HOST_QPN,
            rkey: rx.rkey,
            buffer_va: rx.addr,
            page_stride: u64::from(sizes.rx_slot_stride),
            slots: sizes.rx_slots,
            max_in_flight: 1,
            template: rocelink_operator::stage::echo_template(payload),
            arg_len: payload - rocelink_wire::rpc::HEADER_LEN,
            stamp_ptp: true,
            scramble: true,
            interval_ns: 0,
            frames,
            fpga_qp: PEER_QPN,
            first_request_id: 1,
            response_timeout_ns: u64::MAX / 4,
            capture: Some(Arc::new(CaptureRam::with_capacity(frames as usize))),
            qec: None,
        };
        let (peer_link, nic_link) = inproc::pair(256);
        Rig {
            player: Player::new(cfg, 0, monotonic_ns()),
            stats: Stats::default(),
            peer_link,
            nic_link,
            nic,
            verbs,
            echo: Echo,
            q,
            peer_tx: vec![0; MAX_FRAME],
            peer_rx: vec![0; MAX_FRAME],
            nic_rx: vec![0; MAX_FRAME],
        }
    }

    /// One round trip; `mark(k)` is called after step `k`. Panics if a step fails: every
    /// frame of this probe is valid.
    #[inline(always)]
    fn round_trip(&mut self, mut mark: impl FnMut(usize)) {
        // The peer's data-plane loop turn (fpga-sim dataplane.rs): the frame was built ahead
        // (after the last send), so the time from here is the stamp, the ICRC and the send.
        self.player.prepare();
        mark(8);
        let now = monotonic_ns();
        self.player.expire(now, &self.stats);
        let Transmit::Frame(n) = self.player.poll_transmit(now, &self.stats, &mut self.peer_tx) else {
            panic!("the player has a frame due")
        };
        mark(0);
        self.peer_link.send(&self.peer_tx[..n]).expect("send");
        Stats::bump_in_run(&self.stats.sent);
        mark(1);
        // The NIC engine (operator nic/engine.rs).
        let m = self.nic_link.try_recv(&mut self.nic_rx).expect("recv").expect("a frame");
        mark(2);
        self.nic.receive(&self.nic_rx[..m]).expect("accepted");
        mark(3);
        // The data path (the CPU backend's turn for one message, backend/cpu.rs).
        let rc = self.verbs.poll_recv().expect("a CQE");
        let slot = rc.cqe.imm & 0xfff;
        let len = rc.cqe.byte_cnt as usize;
        while self.verbs.sq_free() == 0 {
            self.verbs.poll_send_completions();
        }
        let i = self.verbs.next_send_index();
        let tx = self.verbs.tx_slot(i);
        let l = self.q.layout;
        // SAFETY: one thread plays every part, so nothing else touches the queue pair's
        // memory while these slices live; the request (CQE or RX slot) and the TX slot are
        // disjoint ranges of it, inside it (the layout's offsets, lengths below the strides).
        let (request, out) = unsafe {
            let request = if rc.cqe.inline_scatter && len <= abi::RL_CQE_INLINE_MAX as usize {
                self.q.mem.slice(rc.cqe_offset, len)
            } else {
                self.q.mem.slice(l.rx_slot(slot), len)
            };
            (request, self.q.mem.slice_mut(tx, l.sizes.tx_slot_stride as usize))
        };
        let Outcome::Answer(a) = self.echo.process(request, out) else { panic!("echo answers") };
        self.verbs.prepare_send_from_slot(a);
        self.verbs.ring_send_doorbell();
        self.verbs.post_recv(1);
        mark(4);
        assert_eq!(self.nic.poll_send(&mut self.nic_link), 1);
        mark(5);
        // The peer again.
        let m = self.peer_link.try_recv(&mut self.peer_rx).expect("recv").expect("a frame");
        mark(6);
        self.player.on_frame(&self.peer_rx[..m], monotonic_ns(), &self.stats);
        mark(7);
    }

    /// Checks the run did what the probe claims: every frame answered correctly.
    fn check(&self, frames: u32) {
        let s = self.stats.snapshot();
        assert_eq!(
            (s.sent, s.received, s.malformed, s.unexpected, s.icrc_failures),
            (frames, frames, 0, 0, 0),
            "{s:?}"
        );
        let cap = self.player.config().capture.as_ref().expect("capture");
        let ok = rocelink_wire::hsb::capture_flags::HEADER_OK | rocelink_wire::hsb::capture_flags::PAYLOAD_OK;
        for k in [0, frames / 2, frames - 1] {
            let r = cap.record(k as usize).expect("record");
            assert_eq!(r.flags, ok, "record {k}: {r:?}");
        }
        assert_eq!(self.nic.counters().total_drops(), 0);
    }
}

fn p50(v: &mut [u32]) -> u32 {
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

fn main() {
    let mut args = std::env::args().skip(1);
    let payload: usize = args.next().map_or(64, |s| s.parse().expect("payload bytes"));
    let iters: u32 = args.next().map_or(200_000, |s| s.parse().expect("iterations"));
    assert!((rocelink_wire::rpc::HEADER_LEN..=roce::PMTU).contains(&payload), "payload 24..=4096 bytes");
    let warmup = iters / 10;

    // The cost of one Instant::now(): p50 of the gap between two back-to-back calls.
    let mut gaps: Vec<u32> = (0..200_000)
        .map(|_| {
            let a = Instant::now();
            let b = Instant::now();
            (b - a).as_nanos() as u32
        })
        .collect();
    let timer = p50(&mut gaps);

    // Per-step times.
    let mut rig = Rig::new(payload, warmup + iters);
    for _ in 0..warmup {
        rig.round_trip(|_| {});
    }
    let mut samples: Vec<Vec<u32>> = (0..STEPS.len()).map(|_| Vec::with_capacity(iters as usize)).collect();
    for _ in 0..iters {
        let mut last = Instant::now();
        rig.round_trip(|k| {
            let t = Instant::now();
            samples[k].push((t - last).as_nanos() as u32);
            last = t;
        });
    }
    rig.check(warmup + iters);

    // Whole round trips, no per-step timers: best mean of several batches.
    const BATCHES: u32 = 5;
    let batch = iters.div_ceil(BATCHES);
    let mut rig = Rig::new(payload, warmup + BATCHES * batch);
    for _ in 0..warmup {
        rig.round_trip(|_| {});
    }
    let best = (0..BATCHES)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..batch {
                rig.round_trip(|_| {});
            }
            t0.elapsed().as_nanos() as f64 / f64::from(batch)
        })
        .fold(f64::INFINITY, f64::min);
    rig.check(warmup + BATCHES * batch);

    println!("nic_step_times: {payload} B request/answer, {iters} round trips (+{warmup} warm-up), one thread, no cross-core cost");
    println!("Instant::now() costs {timer} ns (p50), subtracted from every step below");
    println!("{:44} {:>8} {:>8}", "step", "p50 ns", "mean ns");
    let (mut sum_p50, mut sum_mean) = (0i64, 0f64);
    for (k, name) in STEPS.iter().enumerate() {
        let mean = samples[k].iter().map(|&x| f64::from(x)).sum::<f64>() / samples[k].len() as f64 - f64::from(timer);
        let med = i64::from(p50(&mut samples[k])) - i64::from(timer);
        sum_p50 += med;
        sum_mean += mean;
        println!("{name:44} {med:>8} {mean:>8.1}");
    }
    println!("{:44} {sum_p50:>8} {sum_mean:>8.1}", "sum of steps");
    println!("{:44} {:>8} {best:>8.1}", "round trip, no step timers (best of 5 means)", "");
}
