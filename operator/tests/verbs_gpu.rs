//! The device verbs layer (`kernels/verbs.cuh`) end to end: WQEs built on the GPU with its
//! functions, executed by the software NIC, checked on the wire.
//!
//! A one-warp test kernel, compiled by NVRTC from the transceiver's own sources
//! (`kernels::FILES`), writes into the queue pair's send queue (pinned host memory mapped into
//! the GPU, as the transceiver's) a SEND gathering from a TX slot, an inline SEND from shared
//! memory spanning several WQEBBs, an RDMA WRITE and an RDMA WRITE with immediate, each through
//! the verbs function a data path would call, and rings the CPU-proxy doorbell with
//! `rl_dev_verbs_submit_proxy` (fenced). A second launch writes inline SENDs, the last one
//! wrapping the ring's end, and a SEND gathering a payload it wrote to a TX slot with
//! `rl_dev_verbs_put_gather_warp`, and rings with `rl_dev_verbs_submit_proxy_checked_warp` (no
//! fence: the NIC verifies the range's check, over the WQEs and the gathered bytes). The host runs the NIC's send side onto an in-process
//! wire and parses every frame that comes out: opcode, RETH (address, key, length), immediate,
//! PSN and payload bytes must be what the kernel asked for, and the NIC must report no WQE
//! check failure or send error.
//!
//! On the GPU machine (`bash scripts/gpu-tests.sh run` runs it):
//! ```text
//! cargo test -p rocelink-operator --release --test verbs_gpu -- --ignored
//! ```
//! Without a GPU the kernel still compiles to sm_90 (when NVRTC is here; CI provides it).

use std::time::{Duration, Instant};

use rocelink_operator::abi;
use rocelink_operator::gpu::driver::{Gpu, StreamState};
use rocelink_operator::gpu::{kernels, nvrtc};
use rocelink_operator::nic::NicOptions;
use rocelink_operator::rings::QpSizes;
use rocelink_wire::bth::Opcode;
use rocelink_wire::roce::{self, Endpoints};

#[path = "support/nic_rig.rs"]
mod nic_rig;
use nic_rig::{NicRig, Wire, PEER_QPN, QPN};

const KERNEL: &str = r#"
#include "abi.h"
#include "verbs.cuh"
/* byte i of test payload `s` */
__device__ __forceinline__ uint8_t pattern(uint32_t s, uint32_t i) { return (uint8_t)(i * 7u + 3u + 31u * s); }

/* Launch 1 (phase 0), from WQEBB `first`: SEND of 100 bytes gathered from TX slot 0; inline
 * SEND of 200 bytes (payload 1) from shared memory; RDMA WRITE of 64 bytes from TX slot 2 to
 * raddr; RDMA WRITE with immediate `imm` of 48 bytes from TX slot 3 to raddr + 64; fenced
 * doorbell. Launch 2 (phase 1), from `first`: inline SENDs of 60 and 150 bytes (payloads 4
 * and 5: 2 + 3 WQEBBs), either crossing the ring's end when `first` is near it, and a SEND of
 * 333 bytes (payload 6) gathered from the TX slot of its WQEBB, written there by the warp;
 * checked doorbell over the three WQEs and the gathered bytes.
 * Writes the producer index it rang to `out[0]`. One warp. */
extern "C" __global__ void rl_verbs_probe(struct rl_transceiver_desc d, uint32_t phase, uint32_t first, uint64_t raddr,
                                          uint32_t rkey, uint32_t imm, uint32_t *out) {
    __shared__ __align__(16) uint8_t msg[2][256];
    __shared__ __align__(16) uint8_t big[512];
    const uint32_t lane = threadIdx.x & 31u;
    struct rl_dev_sq sq = {(uint8_t *)d.sq.ring, (uint32_t *)d.sq.dbrec, (uint64_t *)d.proxy_doorbell, 0, d.sq.entries, d.qpn, first, first};
    uint8_t *tx = (uint8_t *)d.tx_buffer;
    for (uint32_t i = lane; i < 256; i += 32) {
        msg[0][i] = pattern(phase == 0 ? 1u : 4u, i);
        msg[1][i] = pattern(5u, i);
        /* launch 1's gathered payloads (launch 2 writes its own TX slot, which may be one of these) */
        if (phase == 0)
            for (uint32_t s = 0; s < 4; s++) tx[(size_t)s * d.tx_slot_stride + i] = pattern(s, i);
    }
    for (uint32_t i = lane; i < 512; i += 32) big[i] = pattern(6u, i);
    __syncwarp();
    if (phase == 0) {
        long long at = 0;
        if (lane == 0) {
            at = rl_dev_verbs_reserve_wq_slots(&sq, 1);
            if (at >= 0) rl_dev_verbs_wqe_prepare_send(&sq, (uint32_t)at, RL_WQE_CTRL_CQ_UPDATE, d.tx_buffer_iova, d.tx_lkey, 100);
        }
        sq.pi = __shfl_sync(0xffffffffu, sq.pi, 0);
        const uint32_t n = rl_dev_verbs_inline_wqebbs(200);
        const uint32_t at2 = sq.pi;
        sq.pi += n;
        (void)rl_dev_verbs_wqe_prepare_send_inline_warp(&sq, at2, 0, msg[0], 200, 0);
        if (lane == 0) {
            at = rl_dev_verbs_reserve_wq_slots(&sq, 1);
            if (at >= 0) rl_dev_verbs_wqe_prepare_write(&sq, (uint32_t)at, 0, 0, 0, raddr, rkey, d.tx_buffer_iova + 2ull * d.tx_slot_stride, d.tx_lkey, 64);
            at = rl_dev_verbs_reserve_wq_slots(&sq, 1);
            if (at >= 0) rl_dev_verbs_wqe_prepare_write(&sq, (uint32_t)at, RL_WQE_CTRL_CQ_UPDATE, 1, imm, raddr + 64, rkey, d.tx_buffer_iova + 3ull * d.tx_slot_stride, d.tx_lkey, 48);
        }
        __syncwarp(); /* every lane's WQE stores before lane 0's fence */
        if (lane == 0) {
            rl_dev_verbs_submit_proxy(&sq);
            out[0] = sq.pi;
        }
    } else {
        /* a checked range: the WQEs' checks numbered from the range's first WQEBB (4 chunks
         * per WQEBB), XORed over the warp by the submit */
        uint64_t range_check = 0, check = 0;
        const uint32_t a = sq.pi, na = rl_dev_verbs_inline_wqebbs(60);
        check ^= rl_dev_verbs_wqe_prepare_send_inline_warp(&sq, a, 0, msg[0], 60, 0);
        const uint32_t b = a + na, nb = rl_dev_verbs_inline_wqebbs(150);
        check ^= rl_dev_verbs_wqe_prepare_send_inline_warp(&sq, b, RL_WQE_CTRL_CQ_UPDATE, msg[1], 150, (b - a) * 4);
        /* the gathered payload in the TX slot of WQEBB c, its check numbered by c's place */
        const uint32_t c = b + nb, slot = c & (d.sq.entries - 1);
        check ^= rl_dev_verbs_put_gather_warp(tx + (size_t)slot * d.tx_slot_stride, big, 333, RL_DB_GATHER_CHUNK(c - a));
        if (lane == 0) check ^= rl_dev_verbs_wqe_prepare_send(&sq, c, 0, d.tx_buffer_iova + (uint64_t)slot * d.tx_slot_stride, d.tx_lkey, 333, (c - a) * 4);
        sq.pi = c + 1;
        rl_dev_verbs_submit_proxy_checked_warp(&sq, a, range_check, check);
        if (lane == 0) out[0] = sq.pi;
    }
}
"#;

fn sources() -> (nvrtc::Source, Vec<nvrtc::Source>) {
    let headers = kernels::FILES.iter().map(|(n, t)| nvrtc::Source { name: (*n).into(), text: (*t).into() }).collect();
    (nvrtc::Source { name: "verbs_probe.cu".into(), text: KERNEL.into() }, headers)
}

/// Byte `i` of test payload `s` (the kernel's `pattern`).
fn pattern(s: u32, i: u32) -> u8 {
    (i.wrapping_mul(7).wrapping_add(3).wrapping_add(31 * s)) as u8
}

fn payload(s: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| pattern(s, i)).collect()
}

/// What one frame on the wire must be.
struct Expect {
    opcode: Opcode,
    reth: Option<(u64, u32)>,
    imm: Option<u32>,
    payload: Vec<u8>,
}

/// Runs the NIC's send side until `want` frames came out (or 10 s), returning them and any
/// more already on the wire.
fn frames_out(nic: &mut rocelink_operator::nic::SoftNic, wire: &mut Wire, want: usize) -> Vec<Vec<u8>> {
    let mut frames = wire.frames_out(nic, want, Duration::from_secs(10));
    frames.extend(wire.sent());
    frames
}

fn check_frames(frames: &[Vec<u8>], expect: &[Expect], first_psn: u32, ep: &Endpoints, peer_qpn: u32) {
    assert_eq!(frames.len(), expect.len(), "frames on the wire");
    for (k, (f, e)) in frames.iter().zip(expect).enumerate() {
        let p = roce::parse_frame(f).unwrap_or_else(|err| panic!("frame {k}: {err:?}"));
        let r = p.repr;
        assert_eq!(r.bth.opcode, e.opcode, "frame {k}: opcode");
        assert_eq!(r.bth.dest_qp, peer_qpn, "frame {k}: DestQP");
        assert_eq!(r.bth.psn, first_psn + k as u32, "frame {k}: PSN");
        assert_eq!((r.udp.src_port, r.udp.dst_port), (ep.src_port, ep.dst_port), "frame {k}: ports");
        assert_eq!(
            r.reth.map(|x| (x.va, x.rkey, x.dma_len)),
            e.reth.map(|(va, rkey)| (va, rkey, e.payload.len() as u32)),
            "frame {k}: RETH"
        );
        assert_eq!(r.immdt, e.imm, "frame {k}: immediate");
        assert_eq!(p.payload, &e.payload[..], "frame {k}: payload");
    }
}

#[test]
#[ignore = "needs a GPU: bash scripts/gpu-tests.sh run on the GPU machine"]
fn verbs_wqes_built_on_the_gpu_go_out_as_the_frames_they_describe() {
    let gpu = Gpu::open(0).expect("a GPU (this test is run on the GPU machine)");
    let (main, headers) = sources();
    let compiled = nvrtc::compile(&main, &headers, &gpu.info.arch(), &[], false).unwrap_or_else(|e| panic!("{e}"));
    let module = gpu.load(&compiled.cubin, &["rl_verbs_probe"]).unwrap();

    let sizes = QpSizes::default();
    let NicRig { mut nic, q, counters, tx: tx_mr, host: ep, .. } = NicRig::new(sizes, NicOptions::default());
    let peer_qpn = PEER_QPN;
    let mut wire = Wire::new(64);

    // SAFETY: the queue pair's memory is page-aligned, lives in `q` until the end of the test,
    // and is unregistered below after the last kernel finished.
    let dbase = unsafe { gpu.register(q.mem.base(), q.mem.len()) }.unwrap();
    let mut desc = q.transceiver_desc_at(dbase, QPN, tx_mr.lkey);
    let out = gpu.alloc(16).unwrap();
    let stream = gpu.stream().unwrap();
    let launch =
        |desc: &mut abi::rl_transceiver_desc, phase: u32, first: u32, raddr: u64, rkey: u32, imm: u32| -> u32 {
            let (mut phase, mut first, mut raddr, mut rkey, mut imm, mut p_out) =
                (phase, first, raddr, rkey, imm, out.device_ptr());
            let mut params = [
                desc as *mut abi::rl_transceiver_desc as *mut std::ffi::c_void,
                &mut phase as *mut u32 as *mut std::ffi::c_void,
                &mut first as *mut u32 as *mut std::ffi::c_void,
                &mut raddr as *mut u64 as *mut std::ffi::c_void,
                &mut rkey as *mut u32 as *mut std::ffi::c_void,
                &mut imm as *mut u32 as *mut std::ffi::c_void,
                &mut p_out as *mut u64 as *mut std::ffi::c_void,
            ];
            // SAFETY: rl_verbs_probe takes the descriptor by value, four u32/u64 scalars as above
            // and one device pointer (`out`, 16 bytes); every address in the descriptor points into
            // the registered queue-pair memory, which outlives the launch.
            unsafe { stream.launch(module.function(0), 32, &mut params) }.unwrap();
            let t0 = Instant::now();
            loop {
                match stream.query() {
                    StreamState::Idle => break,
                    StreamState::Failed(e) => panic!("the verbs probe kernel failed: {e}"),
                    StreamState::Running if t0.elapsed() > Duration::from_secs(10) => {
                        panic!("the verbs probe kernel did not finish in 10 s")
                    }
                    StreamState::Running => std::thread::sleep(Duration::from_micros(100)),
                }
            }
            let mut pi = [0u8; 4];
            gpu.download(&out, 0, &mut pi).unwrap();
            u32::from_le_bytes(pi)
        };

    // Launch 1: SEND (gather), inline SEND, RDMA WRITE, RDMA WRITE with immediate; fenced.
    let (raddr, rkey, imm) = (0x0000_7f12_3456_7000u64, 0x1234_5678u32, 0xabcd_ef01u32);
    let pi = launch(&mut desc, 0, 0, raddr, rkey, imm);
    assert_eq!(pi, 1 + 4 + 1 + 1, "WQEBBs written: 1 + inline 200 B (4) + 1 + 1");
    let frames = frames_out(&mut nic, &mut wire, 4);
    let expect = [
        Expect { opcode: Opcode::UcSendOnly, reth: None, imm: None, payload: payload(0, 100) },
        Expect { opcode: Opcode::UcSendOnly, reth: None, imm: None, payload: payload(1, 200) },
        Expect { opcode: Opcode::UcWriteOnly, reth: Some((raddr, rkey)), imm: None, payload: payload(2, 64) },
        Expect {
            opcode: Opcode::UcWriteOnlyImm,
            reth: Some((raddr + 64, rkey)),
            imm: Some(imm),
            payload: payload(3, 48),
        },
    ];
    check_frames(&frames, &expect, 0, &ep, peer_qpn);

    // Launch 2, again and again: two inline SENDs (2 + 3 WQEBBs) and a gathering SEND (1)
    // under a checked doorbell, until an inline one crosses the ring's end (from WQEBB 7, in
    // steps of 6, the 20th launch's first WQE starts at the ring's last WQEBB).
    let entries = sizes.sq_entries;
    let per_launch = abi_inline_wqebbs(60) + abi_inline_wqebbs(150) + 1;
    assert_eq!(per_launch, 6);
    let (mut at, mut psn, mut crossed, mut launches) = (pi, 4u32, false, 0u64);
    for _ in 0..2 * entries / per_launch {
        let a = at % entries;
        let crosses = a + abi_inline_wqebbs(60) > entries
            || (a + abi_inline_wqebbs(60)) % entries + abi_inline_wqebbs(150) > entries;
        let next = launch(&mut desc, 1, at, 0, 0, 0);
        assert_eq!(next, at + per_launch);
        let frames = frames_out(&mut nic, &mut wire, 3);
        let expect = [
            Expect { opcode: Opcode::UcSendOnly, reth: None, imm: None, payload: payload(4, 60) },
            Expect { opcode: Opcode::UcSendOnly, reth: None, imm: None, payload: payload(5, 150) },
            Expect { opcode: Opcode::UcSendOnly, reth: None, imm: None, payload: payload(6, 333) },
        ];
        check_frames(&frames, &expect, psn, &ep, peer_qpn);
        psn += 3;
        launches += 1;
        at = next;
        crossed |= crosses;
    }
    assert!(crossed, "a WQE crossed the ring's end");

    let stats = counters.snapshot();
    assert_eq!(stats.tx_wqe_check_failures, 0, "no checked range failed its check");
    assert_eq!(stats.tx_errors, 0, "no send completed in error");
    assert_eq!(stats.tx_packets, u64::from(psn));
    assert_eq!(stats.tx_cqes, 2 + launches, "a send CQE for each WQE that asked for one");
    // SAFETY: every launch finished (the stream is idle); nothing uses `out` or the mapping.
    unsafe {
        gpu.unregister(q.mem.base()).unwrap();
        gpu.free(out).unwrap();
    }
}

/// WQEBBs of an inline SEND of `len` bytes (rl_dev_verbs_inline_wqebbs).
fn abi_inline_wqebbs(len: u32) -> u32 {
    abi::wqebbs(abi::inline_send_ds(len as usize) as u8)
}

/// Without a GPU: the probe kernel compiles to sm_90 (when NVRTC is here).
#[test]
fn the_verbs_probe_kernel_compiles_to_sm90() {
    if !nvrtc::present_or_skip("the verbs probe compile") {
        return;
    }
    let (main, headers) = sources();
    let c = nvrtc::compile(&main, &headers, "sm_90", &[], false).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.cubin.len() > 1000);
}
