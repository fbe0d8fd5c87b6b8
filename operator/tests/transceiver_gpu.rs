//! The persistent transceiver kernel (`kernels/transceiver.cu`) against the CPU's echo stage,
//! message by message, on a stream built to cross every branch of its receive: sizes that
//! change from one message to the next (the poll reads the slot it predicts from the last
//! message's size: a wrong guess, an inline request where a slot was read, a longer one, one the
//! warp or the block must load), a slot out of turn, request bytes that hold the poison the
//! kernel writes behind each message (`abi.h` `RL_SPEC_POISON`: a word of it, and the last
//! bytes of a message whose length is not a multiple of four), requests the stage refuses
//! (no RPC header, a bad magic: no answer, counted as dropped) or answers with an error
//! status (an argument length past the message), and bursts of messages that queue up (the
//! pre-poll). The common message takes the register fast path (`transceiver/poll.cuh`), the others the
//! general path; each answer must be exactly the CPU stage's answer to the same bytes.
//!
//! One thread plays the peer and the software NIC, as `nic_step_times` does: it builds each
//! RDMA WRITE with immediate, hands it to [`SoftNic::receive`], pumps [`SoftNic::poll_send`]
//! until the kernel's SEND comes out on the in-process wire, parses it (headers, ICRC) and
//! compares its payload with [`Echo`]'s.
//!
//! The same stream runs on the CPU backend in every test run (its answers are its own stage's:
//! that checks the stream's expectations and the rig); the GPU test is ignored here and run on
//! the GPU machine (`bash scripts/gpu-tests.sh run` runs it):
//! ```text
//! cargo test -p rocelink-operator --release --test transceiver_gpu -- --ignored
//! ```

use std::time::{Duration, Instant};

use rocelink_link::{SpinMode, MAX_FRAME};
use rocelink_operator::abi;
use rocelink_operator::backend::{resolve, spawn_backend, Backend, BackendKind, LoopConfig, RunningBackend};
use rocelink_operator::nic::{DoorbellMode, NicOptions};
use rocelink_operator::rings::{QpMemory, QpSizes};
use rocelink_operator::stage::{Echo, Outcome, Stage, StageSpec};
use rocelink_wire::bth::Opcode;
use rocelink_wire::roce;
use rocelink_wire::rpc;

#[path = "support/nic_rig.rs"]
mod nic_rig;
use nic_rig::{NicRig, Wire, PEER_QPN, QPN as HOST_QPN};
/// How long one answer may take before the test calls the kernel stuck.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the test waits to be sure that a refused request gets no answer.
const NO_ANSWER_WAIT: Duration = Duration::from_millis(20);

/// One request of the stream.
#[derive(Clone, Debug)]
struct Msg {
    bytes: Vec<u8>,
    /// The RX slot the peer writes (None: the next in turn).
    slot: Option<u32>,
}

/// An echo request of `size` bytes (the RPC header and `size - 24` argument bytes), argument
/// byte i = f(seed, i).
fn request(size: usize, id: u32, seed: u8) -> Vec<u8> {
    assert!(size >= rpc::HEADER_LEN);
    let args: Vec<u8> = (0..size - rpc::HEADER_LEN).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect();
    rpc::request(rpc::function_id::ECHO, id, 0, &args)
}

/// Writes the poison word at byte `at` (little-endian, as the kernel compares words), as far as
/// the message goes.
fn poison_at(m: &mut [u8], at: usize) {
    for (k, b) in abi::RL_SPEC_POISON.to_le_bytes().into_iter().enumerate() {
        if let Some(x) = m.get_mut(at + k) {
            *x = b;
        }
    }
}

/// The stream: see the module docs. Sizes are bytes of the RDMA payload (the request).
fn stream() -> Vec<Msg> {
    let mut out = Vec::new();
    let mut id = 1u32;
    let push = |bytes: Vec<u8>, slot: Option<u32>, out: &mut Vec<Msg>| out.push(Msg { bytes, slot });
    let mut next = |size: usize| {
        id += 1;
        request(size, id, (id as u8).wrapping_mul(7))
    };
    // Sizes around every boundary the receive cares about: inline in the CQE (<= 32), the
    // register forms (<= 256), the poll's speculative read (<= 432), the warp's own load
    // (<= 1 KiB), the block's; each followed by other sizes, so that the next poll guesses wrong.
    let sizes = [
        64, 64, 64, 32, 32, 24, 64, 33, 48, 100, 128, 129, 255, 256, 257, 64, 300, 432, 433, 64, 1000, 1024, 1025, 32,
        4096, 64, 200, 31, 200, 25, 250, 64, 64,
    ];
    for _round in 0..3 {
        for &s in &sizes {
            let m = next(s);
            push(m, None, &mut out);
        }
    }
    // The poison in the request's own bytes: a whole word in the arguments (slot path and
    // inline path), the last two and three bytes of messages whose length is not a multiple of
    // four, a message that is all poison after the header.
    for (size, at) in
        [(64usize, 28usize), (64, 60), (32, 24), (32, 28), (66, 64), (67, 64), (29, 25), (200, 196), (256, 100)]
    {
        let mut m = next(size);
        poison_at(&mut m, at);
        push(m.clone(), None, &mut out);
        // the same again, now predicted (the same size as the last)
        let mut m2 = next(size);
        poison_at(&mut m2, at);
        push(m2, None, &mut out);
    }
    let mut all = next(96);
    for at in (rpc::HEADER_LEN..96).step_by(4) {
        poison_at(&mut all, at);
    }
    push(all, None, &mut out);
    // A slot out of turn (the peer skips one), then back in turn.
    let m = next(64);
    push(m, Some(u32::MAX), &mut out);
    for _ in 0..4 {
        let m = next(64);
        push(m, None, &mut out);
    }
    // Requests the stage refuses: too short for an RPC header, a bad magic (no answer); and
    // one it answers with an error status: an argument length past the message's end.
    push(vec![0x5a; 16], None, &mut out);
    let mut bad = next(64);
    bad[0] ^= 0xff;
    push(bad, None, &mut out);
    let mut long_args = next(64);
    long_args[8..12].copy_from_slice(&1000u32.to_le_bytes());
    push(long_args, None, &mut out);
    let m = next(64);
    push(m, None, &mut out);
    out
}

/// The expected answer: the CPU echo stage's, or None when it drops the request.
fn cpu_answer(req: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0u8; MAX_FRAME];
    match Echo.process(req, &mut out) {
        Outcome::Answer(n) => Some(out[..n].to_vec()),
        Outcome::Drop => None,
    }
}

/// The NIC rig and its wire, and the peer's next PSN and slot.
struct Rig {
    base: NicRig,
    wire: Wire,
    psn: u32,
    next_slot: u32,
}

impl Rig {
    /// Hands the request to the NIC as the peer's RDMA WRITE with immediate into its slot.
    fn send(&mut self, m: &Msg) {
        self.try_send(m)
            .unwrap_or_else(|e| panic!("the NIC refused request {:?}: {e:?}", &m.bytes[..m.bytes.len().min(16)]));
    }

    /// As `send`, but a request the NIC refuses (no receive posted: the loop is behind) is
    /// left out (the slot and the PSN are not used up) and said.
    fn try_send(&mut self, m: &Msg) -> Result<(), rocelink_operator::nic::DropReason> {
        let (next_slot, psn) = (self.next_slot, self.psn);
        let r = self.try_send_inner(m);
        if r.is_err() {
            (self.next_slot, self.psn) = (next_slot, psn);
        }
        r
    }

    fn try_send_inner(&mut self, m: &Msg) -> Result<(), rocelink_operator::nic::DropReason> {
        let slots = self.base.q.layout.sizes.rx_slots;
        let slot = match m.slot {
            Some(u32::MAX) => (self.next_slot + 1) % slots, // one out of turn
            Some(s) => s,
            None => self.next_slot,
        };
        self.next_slot = (slot + 1) % slots;
        let frame = self.base.write_imm_to_slot(self.psn, slot, &m.bytes);
        self.psn = self.psn.wrapping_add(1) & 0xff_ffff;
        self.base.nic.receive(&frame).map(|_| ())
    }

    /// The next answer on the wire, or None when none comes within `wait`.
    fn answer(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let frame = self.wire.frames_out(&mut self.base.nic, 1, wait).pop()?;
        let f = roce::parse_frame(&frame).unwrap_or_else(|e| panic!("an answer that does not parse: {e:?}"));
        assert_eq!(f.repr.bth.opcode, Opcode::UcSendOnly, "answers are SEND Only");
        assert_eq!(f.repr.bth.dest_qp, PEER_QPN, "answers go to the peer's QP");
        Some(f.payload.to_vec())
    }
}

/// The queue pair, the NIC (answering to `doorbell`) and the wire; the backend is spawned on
/// `q` with `tx_lkey`.
fn rig_with(doorbell: DoorbellMode) -> (Rig, QpMemory, u32) {
    let base =
        NicRig::new(QpSizes { rx_slots: 16, ..QpSizes::default() }, NicOptions { doorbell, ..NicOptions::default() });
    let (q, tx_lkey) = (base.q.clone(), base.tx.lkey);
    (Rig { base, wire: Wire::new(256), psn: 0, next_slot: 0 }, q, tx_lkey)
}

/// The rig with the CPU-proxy doorbell.
fn rig() -> (Rig, QpMemory, u32) {
    rig_with(DoorbellMode::Proxy)
}

fn backend_config(tx_lkey: u32) -> LoopConfig {
    LoopConfig {
        qpn: HOST_QPN,
        tx_lkey,
        core: None,
        spin: SpinMode::Shared,
        doorbell: DoorbellMode::Proxy,
        kernel: Default::default(),
    }
}

/// Plays the stream through `backend` (closed loop, then in bursts) and checks every answer
/// against the CPU echo stage's, and the counters.
/// GPU 0, as `rocelink` resolves `--backend gpu`.
fn gpu0() -> Backend {
    resolve(BackendKind::Gpu(0), &[StageSpec::Echo]).backend.expect("GPU 0")
}

fn play(mut rig: Rig, backend: Box<dyn RunningBackend>) {
    let msgs = stream();
    let (mut answered, mut refused) = (0u64, 0u32);
    // Closed loop: each answer before the next request.
    for (k, m) in msgs.iter().enumerate() {
        rig.send(m);
        let want = cpu_answer(&m.bytes);
        let wait = if want.is_some() { ANSWER_TIMEOUT } else { NO_ANSWER_WAIT };
        let got = rig.answer(wait);
        assert!(
            got == want,
            "message {k} ({} bytes, slot {:?}): {} answered {:?}, the CPU stage {:?}",
            m.bytes.len(),
            m.slot,
            backend.name(),
            got.as_ref().map(|g| &g[..g.len().min(48)]),
            want.as_ref().map(|w| &w[..w.len().min(48)])
        );
        if want.is_some() {
            answered += 1;
        } else {
            refused += 1;
        }
        if let Some(e) = backend.failure() {
            panic!("{} failed at message {k}: {e}", backend.name());
        }
    }
    // Bursts: messages that queue up (the kernel's poll finds the next one at its first read,
    // and warp 1 reads ahead), sizes changing within the burst; answers come in order.
    let answerable: Vec<&Msg> = msgs.iter().filter(|m| cpu_answer(&m.bytes).is_some()).collect();
    for burst in answerable.chunks(6) {
        for m in burst {
            rig.send(m);
        }
        for (k, m) in burst.iter().enumerate() {
            let want = cpu_answer(&m.bytes);
            let got = rig.answer(ANSWER_TIMEOUT);
            assert!(
                got == want,
                "burst message {k} ({} bytes): {} answered {:?}",
                m.bytes.len(),
                backend.name(),
                got.as_ref().map(|g| &g[..g.len().min(48)])
            );
            answered += 1;
        }
    }
    assert!(rig.answer(NO_ANSWER_WAIT).is_none(), "no answer beyond the requests");

    // The loop's own counters agree; the NIC saw no malformed WQE or failed send.
    let t0 = Instant::now();
    while backend.processed() < answered && t0.elapsed() < ANSWER_TIMEOUT {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(backend.processed(), answered, "messages answered");
    assert_eq!(backend.dropped(), refused, "messages refused");
    let s = rig.base.counters.snapshot();
    assert_eq!(s.tx_errors, 0, "no send completed in error");
    assert_eq!(s.tx_wqe_check_failures, 0, "no checked range failed for good");
    assert!(s.drops.values().all(|&n| n == 0), "the NIC dropped nothing: {:?}", s.drops);
    backend.stop(Duration::from_secs(5)).expect("the loop stops");
}

/// The harness and the stream on the CPU backend (no GPU needed): its answers are its own
/// stage's, so this checks the stream's expectations (what is answered, what is refused) and
/// the rig, which the GPU test below relies on.
#[test]
fn the_cpu_backend_answers_the_stream_as_its_stage_does() {
    let (rig, q, tx_lkey) = rig();
    let backend =
        spawn_backend(&Backend::Cpu, q, &[StageSpec::Echo], backend_config(tx_lkey)).expect("the CPU backend");
    play(rig, backend);
}

/// The same stream with a ConnectX's doorbell (the doorbell record, then the last WQE's first
/// 8 bytes to the UAR, which the software NIC watches: `DoorbellMode::Mmio`), rung by the CPU
/// loop: the NIC's side of the MMIO doorbell, in every test run.
#[test]
fn the_cpu_backend_answers_the_stream_through_an_mmio_doorbell() {
    let (rig, q, tx_lkey) = rig_with(DoorbellMode::Mmio);
    let backend = spawn_backend(
        &Backend::Cpu,
        q,
        &[StageSpec::Echo],
        LoopConfig { doorbell: DoorbellMode::Mmio, ..backend_config(tx_lkey) },
    )
    .expect("the CPU backend");
    play(rig, backend);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn the_kernel_answers_a_stream_of_changing_sizes_as_the_cpu_stage_does() {
    if let Some(why) = rocelink_operator::backend::gpu::unavailable_reason() {
        panic!("this test needs a GPU: {why}");
    }
    // The kernel as built by default (the common message answered on the fast path, straight to
    // the doorbell, the stream's others on the general path), and a build whose inline answers
    // stop at 44 bytes (`RL_MAX_INLINE=44`: longer register-path answers go out through a TX
    // slot): each must answer as the CPU stage does. The defines reach the kernel's compile
    // through the loop's kernel options, as `ROCELINK_KERNEL_DEFINES` does for `rocelink echo`.
    // And the kernel ringing a ConnectX's doorbell (`RL_DOORBELL_MMIO`: fence, the doorbell
    // record, the WQE's first 8 bytes to the UAR; `rl_dev_verbs_ring_db_mmio`), which the
    // software NIC watches (`DoorbellMode::Mmio`), with inline answers up to 256 and 44 bytes.
    let proxy = DoorbellMode::Proxy;
    let mmio = DoorbellMode::Mmio;
    for (defines, doorbell) in [("", proxy), ("-DRL_MAX_INLINE=44", proxy), ("", mmio), ("-DRL_MAX_INLINE=44", mmio)] {
        let kernel = rocelink_operator::gpu::kernels::KernelOptions {
            defines: defines.split_whitespace().map(String::from).collect(),
            ..Default::default()
        };
        let (rig, q, tx_lkey) = rig_with(doorbell);
        let backend =
            spawn_backend(&gpu0(), q, &[StageSpec::Echo], LoopConfig { doorbell, kernel, ..backend_config(tx_lkey) })
                .unwrap_or_else(|e| panic!("{defines} {doorbell:?}: {e}"));
        play(rig, backend);
    }
}

/// Messages keep coming faster than the loop answers them (the NIC refuses those with no
/// receive posted), and the loop is stopped in the middle: it must stop (read its exit flag
/// though it is never idle), and every answer it made must be the stage's.
/// `flood`: the loop is slower than the pump (the GPU's round trips), so the NIC must have had
/// to refuse requests; the CPU loop may keep up on a loaded machine, and is only stopped.
fn stop_under_a_flood(mut rig: Rig, backend: Box<dyn RunningBackend>, flood: bool) {
    let msg = Msg { bytes: request(64, 7, 3), slot: None };
    let want = cpu_answer(&msg.bytes).expect("an echo request is answered");
    let pumping = std::sync::atomic::AtomicBool::new(true);
    let name = backend.name();
    let (stopped, answered) = std::thread::scope(|s| {
        let rig = &mut rig;
        let pump = s.spawn(|| {
            let mut answered = 0u64;
            while pumping.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..8 {
                    let _ = rig.try_send(&msg);
                }
                while let Some(a) = rig.answer(Duration::ZERO) {
                    assert!(a == want, "an answer under the flood is not the stage's: {:?}", &a[..a.len().min(32)]);
                    answered += 1;
                }
            }
            answered
        });
        std::thread::sleep(Duration::from_millis(300));
        let stopped = backend.stop(Duration::from_secs(2));
        pumping.store(false, std::sync::atomic::Ordering::Relaxed);
        (stopped, pump.join().expect("the pump"))
    });
    stopped.unwrap_or_else(|e| panic!("{name} did not stop under a flood: {e}"));
    assert!(answered > 0, "{name} answered nothing under the flood");
    if flood {
        assert!(
            rig.base.counters.snapshot().drops.values().sum::<u64>() > 0,
            "not a flood: the NIC never had to refuse a request"
        );
    }
}

/// The NIC takes requests but never executes the loop's sends: no send completion comes
/// back, the loop fills its send queue and waits for room. Stopped then, it must stop, with
/// the error that says why (not hang, not be abandoned).
fn stop_with_a_stalled_nic(mut rig: Rig, backend: Box<dyn RunningBackend>) {
    let msg = Msg { bytes: request(64, 7, 3), slot: None };
    let name = backend.name();
    let sq_entries = u64::from(rig.base.q.layout.sizes.sq_entries);
    // More requests than the send queue has room for answers (each takes a WQEBB or more);
    // no `poll_send`: the answers stay in the send queue.
    // Until the loop takes no more (its send queue full, it re-posts no receive), well within
    // the GPU backend's 2 s watchdog: the stop, not the watchdog, must end it.
    let mut taken = 0u64;
    let mut last_taken = Instant::now();
    while taken < 2 * sq_entries && last_taken.elapsed() < Duration::from_millis(100) {
        if rig.try_send(&msg).is_ok() {
            taken += 1;
            last_taken = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let processed = backend.processed();
    assert!(
        processed < taken,
        "{name} answered {processed} of {taken} with no send completing: where did the answers go?"
    );
    let e = backend.stop(Duration::from_secs(2)).expect_err("a loop stopped with its send queue full reports it");
    assert!(e.contains("send queue full"), "{name}: {e}");
    assert!(!e.contains("did not stop"), "{name} had to be abandoned: {e}");
    assert!(!e.contains("watchdog"), "{name}: the watchdog, not the stop, ended it: {e}");
}

#[test]
fn the_cpu_backend_stops_under_a_flood_and_with_a_stalled_nic() {
    let (r, q, tx_lkey) = rig();
    stop_under_a_flood(
        r,
        spawn_backend(&Backend::Cpu, q, &[StageSpec::Echo], backend_config(tx_lkey)).expect("the CPU backend"),
        false,
    );
    let (r, q, tx_lkey) = rig();
    stop_with_a_stalled_nic(
        r,
        spawn_backend(&Backend::Cpu, q, &[StageSpec::Echo], backend_config(tx_lkey)).expect("the CPU backend"),
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run on the GPU machine with `bash scripts/gpu-tests.sh run`"]
fn the_kernel_stops_under_a_flood_and_with_a_stalled_nic() {
    if let Some(why) = rocelink_operator::backend::gpu::unavailable_reason() {
        panic!("this test needs a GPU: {why}");
    }
    let (r, q, tx_lkey) = rig();
    stop_under_a_flood(
        r,
        spawn_backend(&gpu0(), q, &[StageSpec::Echo], backend_config(tx_lkey)).expect("the GPU backend"),
        true,
    );
    let (r, q, tx_lkey) = rig();
    stop_with_a_stalled_nic(
        r,
        spawn_backend(&gpu0(), q, &[StageSpec::Echo], backend_config(tx_lkey)).expect("the GPU backend"),
    );
}
