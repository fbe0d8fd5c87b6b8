//! The GPU QEC decoder stage (`kernels/stages/qec.cuh`) against the CPU reference
//! (`qec::QecSession::with_table`, the table decoder the kernel runs), byte for byte: on the
//! GPU machine the GPU decoder equals its CPU model bit for bit.
//!
//! A small test kernel, built from the same sources as the transceiver (`kernels::FILES`),
//! runs `rl_stage_qec` on one request at a time from device memory, exactly as the fused
//! chain calls it (all threads of a 128-thread block, request and answer in shared memory);
//! the same requests go through a `QecSession` with the same table and settings. Every
//! answer must be equal: same length or both unanswered, same bytes, except the report's
//! decode_ns (the CPU session here does not time; the GPU's values are printed as the
//! in-kernel decode time). Afterwards every decoder's counters, read back from the device
//! state, must equal the session's. The kernel also checks that the stage never writes its
//! output past `cap`, never writes the request, and returns one value in every thread.
//!
//! Workloads: every committed fixture replayed round by round over two interleaved decoder
//! ids (and d=5 with 2 and 6 rounds per message); small K to drive the clusters (the DP and the matcher); a
//! long chain whose table needs the 32-bit-sum transform of `gpu::qec_state`; a DEM with
//! components that cannot reach the boundary (unmatchable shots, whole and in clusters); and a
//! random protocol stream (every status, truncations, bad ids, gaps, small output buffers).
//!
//! On the GPU machine:
//! ```text
//! cargo test -p rocelink-operator --release --test qec_gpu_match -- --ignored --nocapture
//! ```
//! (or the built binary `target/release/deps/qec_gpu_match-* --ignored --nocapture`). It needs
//! libcuda and libnvrtc; without a GPU it fails with the reason, since it was asked for.
//! `ROCELINK_QEC_GPU_MAX_REQUESTS=N` keeps the first N requests of each workload, e.g. under
//! `compute-sanitizer --tool memcheck` (or racecheck), which run the kernel far slower;
//! `ROCELINK_QEC_GPU_NVRTC_OPTIONS=-lineinfo` gives their reports source lines;
//! `ROCELINK_QEC_GPU_ONLY=TEXT` runs only the workloads whose name holds TEXT;
//! `ROCELINK_QEC_GPU_FIXTURES=DIR` adds fresh fixtures (`fresh_workloads`).
//! `ROCELINK_QEC_DUMP_CUBIN=DIR` makes the compile test (no GPU needed) write the replay
//! kernel's cubins there (with -lineinfo), for `nvdisasm -g` / `cuobjdump -res-usage`.
//!
//! Stage time: the replay kernel precedes every request with the transceiver's acquire fence
//! (`fence.acq_rel.sys`, as after its CQE poll) and times `rl_stage_qec` with clock64 in
//! thread 0; each workload's line gives the stage time of appended-only messages (ack), of
//! final messages (decode) and of the rest. `qec_gpu_stage_timing` (ignored too) compares
//! builds of the stage on the production workload (d=5, p=0.1%, one round per message, one
//! decoder), each also checked byte for byte: the stage as committed with its phase marks
//! (`-DRL_QEC_PROFILE`: cycles from entry to each mark; with `-DRL_QEC_PROFILE_ACK` the fast
//! path's steps instead of the decode's, with `-DRL_QEC_PROFILE_STEPS` the clusters' steps
//! instead of the last settle step's, with `-DRL_QEC_PROFILE_HAND` the hand-over to the block,
//! with `-DRL_QEC_PROFILE_PM` the last matcher run's phases), variants given as NVRTC options in
//! `ROCELINK_QEC_GPU_VARIANTS` (`;`-separated, e.g. `-DRL_QEC_WARP_K=0;-DRL_QEC_WARP_K=4`),
//! and other qec.cuh files given by path in `ROCELINK_QEC_GPU_BASELINE` (`,`-separated; e.g.
//! the previous commit's, to time before and after in one run; they must read the same blob
//! layout). It also prints latencies of loads, fences and barriers on the GPU (`PROBE_NAMES`).
//! With `ROCELINK_QEC_GPU_NVRTC_OPTIONS=-DRL_QEC_PROFILE` (and a mode beside it) the
//! comparison prints each workload's decodes by defect count with their phases, and the phases
//! of the acknowledged messages that ran a settle step (`Timing::stepped_acks`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[path = "support/tree.rs"]
mod tree;
use std::time::{Duration, Instant};

use rocelink_operator::gpu::driver::{self, DeviceBuffer, Gpu, StreamState};
use rocelink_operator::gpu::qec_state::{self, QecState};
use rocelink_operator::gpu::{kernels, nvrtc};
use rocelink_operator::qec::exact::stream_thresholds;
use rocelink_operator::qec::graph::{DistanceTable, GraphOptions, MatchingGraph};
use rocelink_operator::qec::{fine_table_from_file, load_dem, ExactDecoder, QecSession, SessionConfig};
use rocelink_wire::qec::{self as wq, EnqueueSyndromesRepr, GetCorrectionsRepr};
use rocelink_wire::rpc::{self, function_id, RequestRepr};

/// Bytes of each answer the test kernel copies out (answers are at most 24 + 64 bytes).
const OUT_STRIDE: usize = 128;
/// The transceiver's message buffers (RL_MAX_MSG).
const MAX_MSG: usize = 4096;

/// u32 per request of the replay's timing: stage cycles, then the cycles from entry to each
/// phase mark (0 when not reached, or the stage has no marks).
const TIMING: usize = 13;

const REPLAY_KERNEL: &str = r#"
#include "abi.h"
#include "stages/qec.cuh"
#define RL_TEST_MAX_MSG 4096
#define RL_TEST_OUT 128
#define RL_TEST_TIMING 13
/* One block; requests one at a time, as the transceiver's chain runs them (after its
 * acquire fence), with the stage's idle form between them (unless -DRL_TEST_NO_IDLE). violations: [0] output bytes written at or past cap, [1] request bytes
 * changed, [2] threads that returned another value than thread 0. timing: per request, the
 * stage's clock64 cycles in thread 0 and its phase marks (RL_QEC_PROFILE); clocks: globaltimer
 * and clock64 at the start and the end (the SM clock rate). */
extern "C" __global__ void rl_qec_replay(const uint8_t *reqs, const unsigned long long *offs, const uint32_t *lens,
                                         const int32_t *caps, uint32_t count, uint8_t *outs, int32_t *out_lens,
                                         uint32_t *violations, void *state, uint32_t *timing, unsigned long long *clocks) {
    __shared__ __align__(16) uint8_t in[RL_TEST_MAX_MSG];
    __shared__ __align__(16) uint8_t out[RL_TEST_MAX_MSG];
    __shared__ int n0;
    unsigned long long g;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        clocks[0] = g;
        clocks[1] = clock64();
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t len = lens[i] < RL_TEST_MAX_MSG ? lens[i] : RL_TEST_MAX_MSG;
        const int cap = caps[i] < RL_TEST_MAX_MSG ? caps[i] : RL_TEST_MAX_MSG;
        const uint8_t *src = reqs + offs[i];
        /* bytes past the request read as 0xA5, not as an older request */
        for (uint32_t b = threadIdx.x; b < RL_TEST_MAX_MSG; b += blockDim.x) {
            in[b] = b < len ? src[b] : 0xA5;
            out[b] = 0x5A;
        }
        if (threadIdx.x == 0) {
            asm volatile("fence.acq_rel.sys;" ::: "memory");
#ifdef RL_QEC_PROFILE_MARKS
            for (int j = 0; j < RL_QEC_PROF_N; j++) rl_qec_prof[j] = 0;
#endif
        }
        __syncthreads();
        const long long t0 = clock64();
        int n = rl_stage_qec(in, (int)len, out, cap, state);
        const long long t1 = clock64();
        if (threadIdx.x == 0) {
            n0 = n;
            uint32_t *t = timing + (size_t)i * RL_TEST_TIMING;
            t[0] = (uint32_t)(t1 - t0);
#ifdef RL_QEC_PROFILE_MARKS
            for (int j = 0; j < RL_QEC_PROF_N && j + 1 < RL_TEST_TIMING; j++) t[j + 1] = rl_qec_prof[j] ? (uint32_t)(rl_qec_prof[j] - t0) : 0u;
#endif
        }
        __syncthreads();
        if (n != n0) atomicAdd(&violations[2], 1u);
        for (int b = threadIdx.x; b < n && b < RL_TEST_OUT; b += blockDim.x) outs[(size_t)i * RL_TEST_OUT + b] = out[b];
        for (int b = (cap > 0 ? cap : 0) + (int)threadIdx.x; b < RL_TEST_MAX_MSG; b += blockDim.x)
            if (out[b] != 0x5A) atomicAdd(&violations[0], 1u);
        for (uint32_t b = threadIdx.x; b < len; b += blockDim.x)
            if (in[b] != src[b]) atomicAdd(&violations[1], 1u);
        if (threadIdx.x == 0) out_lens[i] = n;
        __syncthreads();
#ifndef RL_TEST_NO_IDLE
        /* between messages, as the transceiver's closed loop runs the idle form (not timed) */
        if (threadIdx.x < 32) rl_stage_qec_idle(state);
        __syncthreads();
#endif
    }
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        clocks[2] = g;
        clocks[3] = clock64();
    }
}
"#;

/// Latencies in cycles (qec_gpu_stage_timing prints them): what the stage's loads and
/// barriers cost after the transceiver's acquire fence. Each figure is a chain of 16
/// dependent steps divided by 16 (pointer chasing for loads).
const PROBE_NAMES: [&str; 14] = [
    "ld.global (L1 hit)",
    "fence.acq_rel.sys alone",
    "fence.acq_rel.sys + ld.global",
    "ld.global.nc (L1 hit)",
    "fence.acq_rel.sys + ld.global.nc",
    "ld.global.cg (L2)",
    "ld.shared",
    "__syncthreads (128 threads)",
    "st.global (thread 0) + __syncthreads",
    "8 x st.global.v4 (thread 0) + __syncthreads",
    "__syncwarp (warp 0)",
    "st.global (lane 0) + __syncwarp",
    "__shfl_sync from lane 0 (warp 0)",
    "fence.acq_rel.sys + ld.global.nc, 1 us apart",
];
const PROBE_KERNEL: &str = r#"
#define CHAIN 16
__device__ __forceinline__ unsigned long long *ld_ca(unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return (unsigned long long *)v;
}
__device__ __forceinline__ unsigned long long *ld_nc(unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return (unsigned long long *)v;
}
__device__ __forceinline__ unsigned long long *ld_cg(unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return (unsigned long long *)v;
}
__device__ __forceinline__ void fence_sys(void) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ long long clk(void) {
    long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
    return t;
}
__device__ __forceinline__ void spin_ns(unsigned long long ns) {
    unsigned long long a, b;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(a));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(b)); } while (b - a < ns);
}
/* out[m * 8 + r]: measurement m, repetition r; out[14 * 8 + r]: %gridid. buf: 1 MiB. */
extern "C" __global__ void rl_probe(unsigned long long *buf, unsigned long long *out) {
    __shared__ unsigned long long sp[64];
    __shared__ volatile unsigned long long sink;
    const unsigned tid = threadIdx.x;
    if (tid == 0) {
        /* self-pointing lines: line L at buf + L * 32 (256 bytes apart) */
        for (int L = 0; L < 2048; L++) buf[L * 32] = (unsigned long long)(buf + L * 32);
        /* a chain through 16 distinct lines for the L2 figure */
        for (int L = 0; L < 16; L++) buf[(4096 + L * 64) * 2] = (unsigned long long)(buf + (4096 + ((L + 1) % 16) * 64) * 2);
        sp[0] = (unsigned long long)&sp[0];
        fence_sys();
    }
    __syncthreads();
    for (int r = 0; r < 8; r++) {
        long long a, b;
        if (tid == 0) {
            unsigned long long *p = buf + (r * 16) * 32, *q;
            q = ld_ca(p); /* warm */
            a = clk();
            for (int i = 0; i < CHAIN; i++) q = ld_ca(q);
            sink = (unsigned long long)q;
            b = clk();
            out[0 * 8 + r] = (b - a) / CHAIN;
            a = clk();
            for (int i = 0; i < CHAIN; i++) fence_sys();
            b = clk();
            out[1 * 8 + r] = (b - a) / CHAIN;
            q = buf + (r * 16 + 1) * 32;
            q = ld_ca(q);
            a = clk();
            for (int i = 0; i < CHAIN; i++) {
                fence_sys();
                q = ld_ca(q);
            }
            sink = (unsigned long long)q;
            b = clk();
            out[2 * 8 + r] = (b - a) / CHAIN;
            q = buf + (r * 16 + 2) * 32;
            q = ld_nc(q);
            a = clk();
            for (int i = 0; i < CHAIN; i++) q = ld_nc(q);
            sink = (unsigned long long)q;
            b = clk();
            out[3 * 8 + r] = (b - a) / CHAIN;
            q = buf + (r * 16 + 3) * 32;
            q = ld_nc(q);
            a = clk();
            for (int i = 0; i < CHAIN; i++) {
                fence_sys();
                q = ld_nc(q);
            }
            sink = (unsigned long long)q;
            b = clk();
            out[4 * 8 + r] = (b - a) / CHAIN;
            q = buf + 4096 * 2;
            for (int i = 0; i < 16; i++) q = ld_cg(q);
            a = clk();
            for (int i = 0; i < CHAIN; i++) q = ld_cg(q);
            sink = (unsigned long long)q;
            b = clk();
            out[5 * 8 + r] = (b - a) / CHAIN;
            unsigned long long *s = (unsigned long long *)sp[0];
            a = clk();
            for (int i = 0; i < CHAIN; i++) s = (unsigned long long *)*(volatile unsigned long long *)s;
            sink = (unsigned long long)s;
            b = clk();
            out[6 * 8 + r] = (b - a) / CHAIN;
            q = buf + (r * 16 + 4) * 32;
            q = ld_nc(q);
            long long tot = 0;
            for (int i = 0; i < CHAIN; i++) {
                spin_ns(1000);
                fence_sys();
                a = clk();
                q = ld_nc(q);
                sink = (unsigned long long)q;
                b = clk();
                tot += b - a;
            }
            out[13 * 8 + r] = tot / CHAIN;
            unsigned long long g;
            asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
            out[14 * 8 + r] = g;
        }
        __syncthreads();
        unsigned long long *st = buf + 8192 * 2 + r * 64;
        a = clk();
        for (int i = 0; i < CHAIN; i++) __syncthreads();
        b = clk();
        if (tid == 0) out[7 * 8 + r] = (b - a) / CHAIN;
        __syncthreads();
        a = clk();
        for (int i = 0; i < CHAIN; i++) {
            if (tid == 0) *(volatile unsigned long long *)st = i;
            __syncthreads();
        }
        b = clk();
        if (tid == 0) out[8 * 8 + r] = (b - a) / CHAIN;
        __syncthreads();
        a = clk();
        for (int i = 0; i < CHAIN; i++) {
            if (tid == 0)
                for (int j = 0; j < 8; j++) asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(st + 2 * j), "r"(i), "r"(j), "r"(0), "r"(0) : "memory");
            __syncthreads();
        }
        b = clk();
        if (tid == 0) out[9 * 8 + r] = (b - a) / CHAIN;
        __syncthreads();
        if (tid < 32) {
            a = clk();
            for (int i = 0; i < CHAIN; i++) __syncwarp();
            b = clk();
            if (tid == 0) out[10 * 8 + r] = (b - a) / CHAIN;
            a = clk();
            for (int i = 0; i < CHAIN; i++) {
                if (tid == 0) *(volatile unsigned long long *)st = i;
                __syncwarp();
            }
            b = clk();
            if (tid == 0) out[11 * 8 + r] = (b - a) / CHAIN;
            unsigned v = tid;
            a = clk();
            for (int i = 0; i < CHAIN; i++) v = __shfl_sync(0xffffffffu, v + 1, 0);
            sink = v;
            b = clk();
            if (tid == 0) out[12 * 8 + r] = (b - a) / CHAIN;
        }
        __syncthreads();
    }
}
"#;

/// One request and the output capacity the stage gets.
#[derive(Debug, Clone)]
pub struct Req {
    pub bytes: Vec<u8>,
    pub cap: usize,
}

/// A workload: a table, the stage settings, and the requests.
pub struct Workload {
    pub name: String,
    pub table: Arc<DistanceTable<u32>>,
    pub config: SessionConfig,
    /// Stream thresholds of the model and the blob alike (exact.rs "Streaming").
    pub stream: Vec<u32>,
    pub reqs: Vec<Req>,
}

/// A committed fixture of the tree this runs in (not of the one it was built in: the GPU
/// machine runs a copy of the tree elsewhere).
fn fixture(name: &str) -> PathBuf {
    tree::qec_fixtures().join(name)
}

fn lcg(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *state >> 33
}

fn request(function: u32, id: u32, args: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; rpc::HEADER_LEN + args.len()];
    RequestRepr {
        function_id: function,
        arg_len: args.len() as u32,
        request_id: id,
        ptp_timestamp: u64::from(id) * 0x1_0001,
    }
    .emit(&mut b)
    .unwrap();
    b[rpc::HEADER_LEN..].copy_from_slice(args);
    b
}

fn enqueue(id: u32, decoder: i64, counter: i64, mapping: i64, bits: &[bool]) -> Vec<u8> {
    let mut packed = vec![0u8; wq::packed_len(bits.len())];
    for (i, &b) in bits.iter().enumerate() {
        wq::set_bit(&mut packed, i, b);
    }
    let e = EnqueueSyndromesRepr {
        decoder_id: decoder,
        counter,
        syndrome_mapping_id: mapping,
        num_syndromes: bits.len() as i64,
    };
    let mut a = vec![0u8; e.buffer_len()];
    e.emit_with(&packed, &mut a).unwrap();
    request(function_id::ENQUEUE_SYNDROMES, id, &a)
}

fn get_corrections(id: u32, decoder: i64, size: i64, reset: u8) -> Vec<u8> {
    let mut a = [0u8; wq::GET_CORRECTIONS_LEN];
    GetCorrectionsRepr { decoder_id: decoder, return_size: size, reset }.emit(&mut a).unwrap();
    request(function_id::GET_CORRECTIONS, id, &a)
}

fn reset_decoder(id: u32, decoder: i64) -> Vec<u8> {
    request(function_id::RESET_DECODER, id, &decoder.to_le_bytes())
}

/// Shots replayed message by message: shots go to decoder ids in turn, the decoders'
/// messages interleaved; message boundaries are groups of `rounds_per_message` time slices
/// (`rounds`, bits per slice); every 64 shots a get_corrections per decoder (alternately
/// resetting).
fn replay(shots: &[Vec<bool>], rounds: &[usize], rounds_per_message: usize, decoders: usize) -> Vec<Req> {
    let mut cuts = vec![0usize];
    for g in rounds.chunks(rounds_per_message) {
        cuts.push(cuts.last().unwrap() + g.iter().sum::<usize>());
    }
    let mut reqs = Vec::new();
    let mut id = 0u32;
    for (c, group) in shots.chunks(decoders).enumerate() {
        for (m, w) in cuts.windows(2).enumerate() {
            for (d, shot) in group.iter().enumerate() {
                id += 1;
                let counter = (m * rounds_per_message) as i64;
                reqs.push(Req { bytes: enqueue(id, d as i64, counter, 0, &shot[w[0]..w[1]]), cap: MAX_MSG });
            }
        }
        if c % 64 == 63 {
            for d in 0..decoders {
                id += 1;
                reqs.push(Req { bytes: get_corrections(id, d as i64, 64, (c / 64 % 2) as u8), cap: MAX_MSG });
            }
        }
    }
    for d in 0..decoders {
        reqs.push(Req { bytes: get_corrections(id + 1 + d as u32, d as i64, 1, 0), cap: MAX_MSG });
    }
    reqs
}

fn fixture_shots(dir: &Path, n: usize) -> Vec<Vec<bool>> {
    let per = n.div_ceil(8);
    std::fs::read(dir.join("dets.b8")).unwrap().chunks(per).map(|s| (0..n).map(|i| wq::bit(s, i)).collect()).collect()
}

fn fixture_workload(name: &str, k: usize, rounds_per_message: usize, decoders: usize, max_shots: usize) -> Workload {
    fixture_workload_in(&fixture(name), name, k, rounds_per_message, decoders, max_shots)
}

/// As [`fixture_workload`], from the fixture folder `dir` (scripts/qec_fixtures.py's layout).
fn fixture_workload_in(
    dir: &Path,
    name: &str,
    k: usize,
    rounds_per_message: usize,
    decoders: usize,
    max_shots: usize,
) -> Workload {
    let dem = load_dem(&dir.join("model.dem")).unwrap();
    let rounds = dem.detectors_per_round().unwrap();
    let table = Arc::new(MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap().fine_table().unwrap());
    assert_eq!(*table, *fine_table_from_file(&dir.join("model.dem")).unwrap());
    let mut shots = fixture_shots(dir, dem.num_detectors);
    shots.truncate(max_shots);
    let config = SessionConfig {
        decoders,
        rounds_per_message: rounds_per_message as u32,
        max_defects: k,
        syndrome_mapping_id: None,
        measure_time: false,
    };
    Workload {
        name: format!("{name} K={k} rounds/msg={rounds_per_message} decoders={decoders}"),
        table,
        config,
        stream: stream_thresholds(&rounds, rounds_per_message as u32),
        reqs: replay(&shots, &rounds, rounds_per_message, decoders),
    }
}

/// Random shots of 0..max_defects defects over n detectors, each sent whole.
fn random_shot_workload(name: &str, dem_text: &str, k: usize, count: usize, max_defects: u64, seed: u64) -> Workload {
    let table = Arc::new(MatchingGraph::from_dem_text(dem_text).unwrap().fine_table().unwrap());
    let n = table.num_detectors;
    let mut rng = seed;
    let shots: Vec<Vec<bool>> = (0..count)
        .map(|_| {
            let mut s = vec![false; n];
            for _ in 0..lcg(&mut rng) % (max_defects + 1) {
                s[(lcg(&mut rng) as usize) % n] = true;
            }
            s
        })
        .collect();
    let config = SessionConfig {
        decoders: 1,
        rounds_per_message: 1,
        max_defects: k,
        syndrome_mapping_id: None,
        measure_time: false,
    };
    Workload { name: format!("{name} K={k}"), table, config, stream: Vec::new(), reqs: replay(&shots, &[n], 1, 1) }
}

/// A chain of `n` detectors, each with its own boundary edge: far pairs are never matched,
/// and at n = 200 the verbatim table's sums of 12 entries pass 32 bits.
pub fn long_chain(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        text += &format!("error(0.01) D{i}{}\n", if i % 7 == 0 { " L0" } else { "" });
        if i + 1 < n {
            text += &format!("error(0.01) D{i} D{}\n", i + 1);
        }
    }
    text
}

/// Components without a boundary (D0-D1-D2 and D5-D6), one with (D3-D4), an isolated
/// detector (D7), and parallel weights that tie.
const UNMATCHABLE_DEM: &str = "error(0.1) D0 D1 L0\nerror(0.1) D1 D2 L1\nerror(0.2) D0 D2\nerror(0.1) D3 D4\nerror(0.1) D3 L1\nerror(0.1) D4\nerror(0.05) D5 D6 L0\ndetector D7\n";

/// A random protocol stream: valid shots mixed with every kind of bad request.
fn fuzz_workload(name: &str, dem_text: &str, config: SessionConfig, count: usize, seed: u64) -> Workload {
    let table = Arc::new(MatchingGraph::from_dem_text(dem_text).unwrap().fine_table().unwrap());
    let n = table.num_detectors as u64;
    let (decoders, rounds_per_message, mapping) =
        (config.decoders, config.rounds_per_message, config.syndrome_mapping_id);
    let mut rng = seed;
    let mut next = vec![0i64; decoders];
    let mut reqs = Vec::with_capacity(count);
    let functions = [
        function_id::ENQUEUE_SYNDROMES,
        function_id::GET_CORRECTIONS,
        function_id::RESET_DECODER,
        function_id::ECHO,
        0x1234_5678,
    ];
    for i in 0..count {
        let id = i as u32;
        let r = lcg(&mut rng) % 16;
        let decoder = if lcg(&mut rng).is_multiple_of(16) {
            (lcg(&mut rng) % 5) as i64 - 1 + decoders as i64 * (lcg(&mut rng) % 2) as i64
        } else {
            (lcg(&mut rng) % decoders as u64) as i64
        };
        let slot = (decoder.max(0) as usize).min(decoders - 1);
        let mut bytes = match r {
            0..=7 => {
                // an enqueue: usually in sequence with a share of the shot's bits
                let counter = match lcg(&mut rng) % 10 {
                    0..=1 => 0,
                    2 => (lcg(&mut rng) % 8) as i64,
                    3 => i64::MAX - (lcg(&mut rng) % 3) as i64,
                    _ => next[slot],
                };
                let bits = match lcg(&mut rng) % 8 {
                    0 => lcg(&mut rng) % (n + 3),
                    1 => n,
                    _ => (n / 3).max(1),
                };
                let shot: Vec<bool> = (0..bits).map(|_| lcg(&mut rng).is_multiple_of(4)).collect();
                let map = match (mapping, lcg(&mut rng) % 6) {
                    (Some(m), 0) => m + 1,
                    (Some(m), _) => m,
                    (None, _) => (lcg(&mut rng) % 3) as i64,
                };
                next[slot] = if counter == 0 {
                    i64::from(rounds_per_message)
                } else {
                    counter.saturating_add(i64::from(rounds_per_message))
                };
                let mut b = enqueue(id, decoder, counter, map, &shot);
                if lcg(&mut rng).is_multiple_of(12) {
                    // num_syndromes negative, huge, or more than the bytes carried
                    let v: i64 = match lcg(&mut rng) % 3 {
                        0 => -1 - (lcg(&mut rng) % 5) as i64,
                        1 => i64::MAX,
                        _ => bits as i64 + 9 + (lcg(&mut rng) % 20) as i64,
                    };
                    b[rpc::HEADER_LEN + 24..rpc::HEADER_LEN + 32].copy_from_slice(&v.to_le_bytes());
                }
                b
            }
            8..=10 => {
                let size = match lcg(&mut rng) % 8 {
                    0 => -1,
                    1 => 513,
                    2 => 512,
                    3 => 0,
                    4 => 65,
                    _ => (lcg(&mut rng) % 66) as i64,
                };
                get_corrections(id, decoder, size, (lcg(&mut rng) % 3) as u8 * 0x7f)
            }
            11..=12 => reset_decoder(id, decoder),
            _ => {
                // junk: any function, random argument bytes
                let len = (lcg(&mut rng) % 70) as usize;
                let mut args: Vec<u8> = (0..len).map(|_| (lcg(&mut rng) % 4) as u8).collect();
                if len >= 32 && lcg(&mut rng).is_multiple_of(2) {
                    args[24..32].copy_from_slice(&((lcg(&mut rng) % 12) as i64).to_le_bytes());
                }
                if len >= 8 && lcg(&mut rng).is_multiple_of(2) {
                    args[0..8].copy_from_slice(&decoder.to_le_bytes());
                }
                request(functions[(lcg(&mut rng) % 5) as usize], id, &args)
            }
        };
        match lcg(&mut rng) % 24 {
            0 => {
                let cut = (lcg(&mut rng) as usize) % (bytes.len() + 1);
                bytes.truncate(cut); // short message (arg_len past the end, or no header)
            }
            1 => bytes[0] ^= 1, // bad magic
            2 => {
                let al = (lcg(&mut rng) % 5000) as u32; // arg_len past what arrived
                bytes[8..12].copy_from_slice(&al.to_le_bytes());
            }
            _ => {}
        }
        let cap = match lcg(&mut rng) % 10 {
            0 => (lcg(&mut rng) % 100) as usize,
            1 => 24 + (lcg(&mut rng) % 48) as usize,
            _ => MAX_MSG,
        };
        reqs.push(Req { bytes, cap });
    }
    // Thresholds at quarters of the shot: the random messages pass them anywhere.
    let stream = (1..4).map(|q| (q * n / 4) as u32).collect();
    Workload { name: name.into(), table, config, stream, reqs }
}

fn fuzz_config(
    decoders: usize,
    rounds_per_message: u32,
    syndrome_mapping_id: Option<i64>,
    max_defects: usize,
) -> SessionConfig {
    SessionConfig { decoders, rounds_per_message, max_defects, syndrome_mapping_id, measure_time: false }
}

/// Every workload of the GPU comparison.
pub fn workloads() -> Vec<Workload> {
    let rep6 = {
        let mut s = String::from("error(0.1) D0 L0\n");
        for i in 0..5 {
            s += &format!("error(0.1) D{} D{}\n", i, i + 1);
        }
        s + "error(0.1) D5\n"
    };
    let mut w = vec![
        fixture_workload("d3_p0.001", 12, 1, 2, usize::MAX),
        fixture_workload("d3_p0.003", 12, 1, 2, usize::MAX),
        fixture_workload("d3_r8_p0.001_repeat", 12, 1, 2, usize::MAX),
        fixture_workload("d5_p0.001", 12, 1, 2, usize::MAX),
        fixture_workload("d5_p0.003", 12, 1, 2, usize::MAX),
        fixture_workload("d5_p0.003", 12, 2, 1, 2000),
        fixture_workload("d5_p0.001", 12, 6, 3, 2000),
        fixture_workload("d5_p0.003", 4, 1, 1, 2000),
        fixture_workload("d3_p0.003", 0, 1, 1, 2000),
        // streamed above a small K: settled at (nearly) every message, from what the work
        // space holds (one decoder) or replayed (two, interleaved message by message)
        fixture_workload("d5_p0.003", 2, 1, 1, 2000),
        fixture_workload("d5_p0.003", 2, 1, 2, 2000),
        random_shot_workload("long chain (32-bit transform)", &long_chain(200), 12, 1500, 30, 11),
        random_shot_workload("long chain (32-bit transform)", &long_chain(200), 3, 500, 30, 12),
        random_shot_workload("unmatchable components", UNMATCHABLE_DEM, 12, 2000, 6, 13),
        random_shot_workload("unmatchable components", UNMATCHABLE_DEM, 2, 2000, 6, 14),
        fuzz_workload("protocol fuzz, repetition code, 2 decoders", &rep6, fuzz_config(2, 1, None, 12), 20_000, 15),
        fuzz_workload(
            "protocol fuzz, mapping id 7, 2 rounds/msg, K=2",
            &rep6,
            fuzz_config(2, 2, Some(7), 2),
            10_000,
            16,
        ),
        fuzz_workload(
            "protocol fuzz, 40-detector chain, 3 decoders",
            &long_chain(40),
            fuzz_config(3, 1, None, 12),
            10_000,
            17,
        ),
    ];
    // The DEM with 33+ observables is refused; one with exactly 32 is the widest allowed.
    let mut wide = String::new();
    for i in 0..32 {
        wide += &format!("error(0.1) D{i} L{i}\nerror(0.1) D{i} D{}\n", i + 1);
    }
    wide += "error(0.1) D32\n";
    w.push(fuzz_workload("protocol fuzz, 32 observables", &wide, fuzz_config(2, 1, None, 12), 5000, 18));
    w.extend(fresh_workloads());
    w
}

/// Fresh fixtures at the distances experiments run (`ROCELINK_QEC_GPU_FIXTURES=DIR`: the
/// d*_p* folders of `scripts/qec_fixtures.py --out-dir DIR`), `ROCELINK_QEC_GPU_FRESH_SHOTS`
/// shots each (default 1,000): streamed a round per message, and whole shots in one message.
fn fresh_workloads() -> Vec<Workload> {
    let Some(dir) = std::env::var_os("ROCELINK_QEC_GPU_FIXTURES").map(PathBuf::from) else { return Vec::new() };
    let shots = std::env::var("ROCELINK_QEC_GPU_FRESH_SHOTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("ROCELINK_QEC_GPU_FIXTURES={}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with('d') && n.contains("_p") && !n.ends_with("_repeat"))
        .collect();
    names.sort_by_key(|n| (n[1..].split('_').next().and_then(|d| d.parse::<u32>().ok()).unwrap_or(0), n.clone()));
    let mut w = Vec::new();
    for n in names {
        let label = format!("fresh {n}");
        w.push(fixture_workload_in(&dir.join(&n), &label, 12, 1, 1, shots));
        w.push(fixture_workload_in(&dir.join(&n), &label, 12, 1000, 1, shots));
    }
    w
}

/// The CPU answers: (return value, answer bytes).
fn cpu_answers(wl: &Workload) -> (Vec<Option<Vec<u8>>>, QecSession<ExactDecoder>) {
    let mut s = QecSession::with_table_streamed(Arc::clone(&wl.table), wl.config, &wl.stream).unwrap();
    let mut out = vec![0u8; MAX_MSG];
    let answers = wl.reqs.iter().map(|r| s.handle(&r.bytes, &mut out[..r.cap]).map(|n| out[..n].to_vec())).collect();
    (answers, s)
}

/// Whether `answer` to `req` is a final enqueue answer (corrections + report); the offset
/// of its decode_ns then.
fn decode_ns_offset(req: &[u8], answer: &[u8], num_observables: usize) -> Option<usize> {
    let r = RequestRepr::parse(req).ok()?;
    let clen = wq::correction_len(num_observables);
    let status = i32::from_le_bytes(answer.get(4..8)?.try_into().ok()?);
    let rlen = u32::from_le_bytes(answer.get(8..12)?.try_into().ok()?) as usize;
    (r.function_id == function_id::ENQUEUE_SYNDROMES && status == 0 && rlen == clen + wq::DECODE_REPORT_LEN)
        .then_some(rpc::HEADER_LEN + clen + 8)
}

fn headers() -> Vec<nvrtc::Source> {
    kernels::FILES.iter().map(|(n, t)| nvrtc::Source { name: (*n).into(), text: (*t).into() }).collect()
}

fn replay_source() -> nvrtc::Source {
    nvrtc::Source { name: "qec_replay.cu".into(), text: REPLAY_KERNEL.into() }
}

/// What one GPU run gave back.
struct GpuRun {
    lens: Vec<i32>,
    outs: Vec<u8>,
    violations: [u32; 3],
    state: Vec<u8>,
    millis: f64,
    /// [`TIMING`] u32 per request.
    timing: Vec<u32>,
    /// SM cycles per microsecond, from the kernel's globaltimer and clock64.
    mhz: f64,
}

fn run_on_gpu(gpu: &Gpu, module: &driver::Module, wl: &Workload, state: &QecState, shared_cap: usize) -> GpuRun {
    let mut blob = Vec::new();
    let mut offs = Vec::new();
    for r in &wl.reqs {
        offs.push(blob.len() as u64);
        blob.extend_from_slice(&r.bytes);
        blob.resize(blob.len().div_ceil(16) * 16, 0);
    }
    let lens: Vec<u32> = wl.reqs.iter().map(|r| r.bytes.len() as u32).collect();
    let caps: Vec<i32> = wl.reqs.iter().map(|r| r.cap as i32).collect();
    let count = wl.reqs.len();
    let le = |v: &[u8]| v.to_vec();
    let bytes_u64 = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bytes_u32 = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bytes_i32 = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let up = |data: Vec<u8>| -> DeviceBuffer {
        let b = gpu.alloc(data.len()).unwrap();
        gpu.upload(&b, 0, &data).unwrap();
        b
    };
    let d_reqs = up(le(&blob));
    let d_offs = up(bytes_u64(&offs));
    let d_lens = up(bytes_u32(&lens));
    let d_caps = up(bytes_i32(&caps));
    let d_outs = up(vec![0u8; count * OUT_STRIDE]);
    let d_out_lens = up(vec![0u8; count * 4]);
    let d_viol = up(vec![0u8; 12]);
    // The blob's device memory takes its scratch too (past the uploaded bytes), as the
    // transceiver allocates it: the stage keeps a shot's clusters there between messages.
    let d_state = gpu.alloc(state.device_bytes()).unwrap();
    gpu.upload(&d_state, 0, state.bytes()).unwrap();
    let d_timing = up(vec![0u8; count * TIMING * 4]);
    let d_clocks = up(vec![0u8; 32]);
    let stream = gpu.stream().unwrap();
    let (mut p_reqs, mut p_offs, mut p_lens, mut p_caps) =
        (d_reqs.device_ptr(), d_offs.device_ptr(), d_lens.device_ptr(), d_caps.device_ptr());
    let mut p_count = count as u32;
    let (mut p_outs, mut p_out_lens, mut p_viol, mut p_state) =
        (d_outs.device_ptr(), d_out_lens.device_ptr(), d_viol.device_ptr(), d_state.device_ptr());
    let (mut p_timing, mut p_clocks) = (d_timing.device_ptr(), d_clocks.device_ptr());
    let mut params = [
        &mut p_reqs as *mut u64 as *mut std::ffi::c_void,
        &mut p_offs as *mut u64 as *mut std::ffi::c_void,
        &mut p_lens as *mut u64 as *mut std::ffi::c_void,
        &mut p_caps as *mut u64 as *mut std::ffi::c_void,
        &mut p_count as *mut u32 as *mut std::ffi::c_void,
        &mut p_outs as *mut u64 as *mut std::ffi::c_void,
        &mut p_out_lens as *mut u64 as *mut std::ffi::c_void,
        &mut p_viol as *mut u64 as *mut std::ffi::c_void,
        &mut p_state as *mut u64 as *mut std::ffi::c_void,
        &mut p_timing as *mut u64 as *mut std::ffi::c_void,
        &mut p_clocks as *mut u64 as *mut std::ffi::c_void,
    ];
    let t0 = Instant::now();
    // SAFETY: rl_qec_replay's parameters are four device pointers, a u32 and six device
    // pointers in this order;
    // every buffer lives until after the stream is idle below.
    // With dynamic shared memory up to `shared_cap` (the table there where it fits, as the
    // transceiver launches the stage, else the clusters' work) or none: the stage must
    // answer alike.
    let shared = if shared_cap == 0 { 0 } else { state.dynamic_shared(gpu, module, 0, shared_cap).unwrap() };
    assert!(shared_cap == 0 || shared > 0, "{}: no dynamic shared memory", wl.name);
    unsafe { stream.launch_shared(module.function(0), kernels::TRANSCEIVER_THREADS, shared, &mut params) }.unwrap();
    loop {
        match stream.query() {
            StreamState::Idle => break,
            StreamState::Failed(e) => panic!("{}: the replay kernel failed: {e}", wl.name),
            StreamState::Running if t0.elapsed() > Duration::from_secs(120) => {
                panic!("{}: the replay kernel did not finish in 120 s", wl.name)
            }
            StreamState::Running => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    let millis = t0.elapsed().as_secs_f64() * 1e3;
    let down = |b: &DeviceBuffer| {
        let mut v = vec![0u8; b.len()];
        gpu.download(b, 0, &mut v).unwrap();
        v
    };
    let lens_raw = down(&d_out_lens);
    let viol = down(&d_viol);
    let clocks: Vec<u64> = down(&d_clocks).chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let run = GpuRun {
        lens: lens_raw.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect(),
        outs: down(&d_outs),
        violations: [0, 1, 2].map(|i| u32::from_le_bytes(viol[4 * i..4 * i + 4].try_into().unwrap())),
        state: down(&d_state)[..state.bytes().len()].to_vec(),
        millis,
        timing: down(&d_timing).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect(),
        mhz: clocks[3].wrapping_sub(clocks[1]) as f64 * 1e3 / clocks[2].wrapping_sub(clocks[0]).max(1) as f64,
    };
    for b in [d_reqs, d_offs, d_lens, d_caps, d_outs, d_out_lens, d_viol, d_state, d_timing, d_clocks] {
        // SAFETY: the stream is idle: the kernel is done with every buffer.
        unsafe { gpu.free(b) }.unwrap();
    }
    run
}

fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Which kind of request an answer is, for the stage times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// An enqueue whose bits were appended, answered OK with no result.
    Ack,
    /// An enqueue that completed a shot: decoded.
    Decode,
    /// Everything else (errors, get_corrections, reset, unanswered).
    Other,
}

/// Stage times of one run: per class, the requests' [`TIMING`] rows; for decodes also the
/// defects, the in-kernel decode_ns and the request's index in `rows`.
struct Timing {
    mhz: f64,
    rows: Vec<(Class, [u32; TIMING])>,
    decodes: Vec<(u32, u32, u32, usize)>,
}

impl Timing {
    fn of(&self, class: Class, col: usize) -> Vec<u32> {
        let mut v: Vec<u32> = self.rows.iter().filter(|r| r.0 == class).map(|r| r.1[col]).collect();
        v.sort_unstable();
        v
    }

    fn ns(&self, cycles: u32) -> f64 {
        f64::from(cycles) * 1e3 / self.mhz
    }

    /// "ack p50 .. p99 .. ns, decode ..., other ...".
    fn line(&self) -> String {
        let mut out = Vec::new();
        for (class, name) in [(Class::Ack, "ack"), (Class::Decode, "decode"), (Class::Other, "other")] {
            let v = self.of(class, 0);
            if !v.is_empty() {
                out.push(format!(
                    "{name} p50 {:.0} p99 {:.0} max {:.0} ns",
                    self.ns(percentile(&v, 0.5)),
                    self.ns(percentile(&v, 0.99)),
                    self.ns(v.last().copied().unwrap_or(0))
                ));
            }
        }
        format!("stage time ({:.0} MHz): {}", self.mhz, out.join(", "))
    }

    /// The phases of the decodes `picks` (indices into `decodes`): per phase mark, the median
    /// cycles from the mark reached before it (in time order; the entry for the first) to it,
    /// and from the last mark to the stage's end; the marks in the order of their median
    /// time. Reads the phases where the p50s of cumulative marks, each over other decodes,
    /// do not.
    fn phases(&self, picks: &[usize]) -> String {
        let rows: Vec<usize> = picks.iter().map(|&i| self.decodes[i].3).collect();
        self.phases_of_rows(&rows)
    }

    /// [`phases`](Self::phases) of the requests `rows` (indices into `rows`).
    fn phases_of_rows(&self, rows: &[usize]) -> String {
        let mut delta: Vec<Vec<u32>> = vec![Vec::new(); TIMING];
        let mut at: Vec<Vec<u32>> = vec![Vec::new(); TIMING];
        let mut end = Vec::new();
        for &i in rows {
            let row = &self.rows[i].1;
            let mut reached: Vec<(u32, usize)> = (1..TIMING).filter(|&c| row[c] != 0).map(|c| (row[c], c)).collect();
            reached.sort_unstable();
            let mut prev = 0;
            for &(t, c) in &reached {
                delta[c].push(t.saturating_sub(prev));
                at[c].push(t);
                prev = t;
            }
            end.push(row[0].saturating_sub(prev));
        }
        for v in at.iter_mut() {
            v.sort_unstable();
        }
        let mut order: Vec<(u32, usize)> =
            (1..TIMING).filter(|&c| !at[c].is_empty()).map(|c| (percentile(&at[c], 0.5), c)).collect();
        order.sort_unstable();
        let mut out: Vec<String> = order
            .iter()
            .map(|&(_, c)| {
                delta[c].sort_unstable();
                format!("m{} +{}", c - 1, percentile(&delta[c], 0.5))
            })
            .collect();
        end.sort_unstable();
        out.push(format!("end +{}", percentile(&end, 0.5)));
        out.join(" ")
    }

    /// Decodes by defect count: count, median stage time and decode_ns (ns), p99 of both. With
    /// the settle step's marks, the decodes whose final step ran (mark 8 reached) and those
    /// that skipped it (the last message added no defect) apart.
    fn by_defects(&self) -> String {
        let mut out = Vec::new();
        let stepped = |i: usize| self.rows[self.decodes[i].3].1[9] != 0;
        let bins = [(0, 0), (1, 1), (2, 2), (3, 4), (5, 6), (7, 8), (9, 12), (13, 24), (25, 48), (49, u32::MAX)];
        for (lo, hi, part) in
            bins.iter().flat_map(|&(lo, hi)| [(lo, hi, Some(true)), (lo, hi, Some(false)), (lo, hi, None)])
        {
            // the decodes of lo..=hi defects (indices into `decodes`)
            let all: Vec<usize> = (0..self.decodes.len()).filter(|&i| (lo..=hi).contains(&self.decodes[i].0)).collect();
            let split = all.iter().any(|&i| stepped(i)) && all.iter().any(|&i| !stepped(i));
            let picks: Vec<usize> = match part {
                Some(want) if split => all.into_iter().filter(|&i| stepped(i) == want).collect(),
                None if !split => all,
                _ => continue,
            };
            if picks.is_empty() {
                continue;
            }
            let tag = match part {
                Some(true) => " (final step ran)",
                Some(false) => " (final step skipped)",
                None => "",
            };
            let mut st: Vec<u32> = picks.iter().map(|&i| self.decodes[i].1).collect();
            let mut dn: Vec<u32> = picks.iter().map(|&i| self.decodes[i].2).collect();
            st.sort_unstable();
            dn.sort_unstable();
            // Median cycles to each phase mark (with -DRL_QEC_PROFILE).
            let marks: Vec<String> = (1..TIMING)
                .map(|c| {
                    let mut v: Vec<u32> =
                        picks.iter().map(|&i| self.rows[self.decodes[i].3].1[c]).filter(|&x| x != 0).collect();
                    v.sort_unstable();
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        percentile(&v, 0.5).to_string()
                    }
                })
                .collect();
            let marks = if marks.iter().all(|m| m == "-") {
                String::new()
            } else {
                // and the phases of them all and of the slowest 1% (stage time at its p99 or
                // above), cycles
                let p99 = percentile(&st, 0.99);
                let slow: Vec<usize> = picks.iter().copied().filter(|&i| self.decodes[i].1 >= p99).collect();
                format!(
                    " marks {} | phases {} | slowest {}: {}",
                    marks.join(" "),
                    self.phases(&picks),
                    slow.len(),
                    self.phases(&slow)
                )
            };
            out.push(format!(
                "k {lo}..{}{tag}: {} x stage {:.0}/{:.0} decode_ns {}/{}{marks}",
                if hi == u32::MAX { "".to_string() } else { hi.to_string() },
                st.len(),
                self.ns(percentile(&st, 0.5)),
                self.ns(percentile(&st, 0.99)),
                percentile(&dn, 0.5),
                percentile(&dn, 0.99)
            ));
        }
        format!("decodes by defects (p50/p99 ns): {}", out.join("; "))
    }

    /// With the settle step's marks: the acknowledged messages that ran a settle step (mark 9
    /// reached: their clusters listed), then the others; of each and of its slowest 1%, the
    /// count, stage time p50 / p99 (ns) and phases (cycles).
    fn stepped_acks(&self) -> String {
        let mut out = Vec::new();
        for (stepped, name) in [(true, "acks with a settle step"), (false, "acks without")] {
            let rows: Vec<usize> = (0..self.rows.len())
                .filter(|&i| self.rows[i].0 == Class::Ack && (self.rows[i].1[9] != 0) == stepped)
                .collect();
            if rows.is_empty() {
                out.push(format!("{name}: none"));
                continue;
            }
            let mut st: Vec<u32> = rows.iter().map(|&i| self.rows[i].1[0]).collect();
            st.sort_unstable();
            let p99 = percentile(&st, 0.99);
            let slow: Vec<usize> = rows.iter().copied().filter(|&i| self.rows[i].1[0] >= p99).collect();
            out.push(format!(
                "{name}: {} x stage {:.0}/{:.0} | phases {} | slowest {}: {}",
                rows.len(),
                self.ns(percentile(&st, 0.5)),
                self.ns(p99),
                self.phases_of_rows(&rows),
                slow.len(),
                self.phases_of_rows(&slow)
            ));
        }
        out.join("\n  ")
    }

    /// Median cycles from the stage's entry to each phase mark, for one class.
    fn marks(&self, class: Class) -> String {
        (1..TIMING)
            .map(|c| {
                let v: Vec<u32> = self.of(class, c).into_iter().filter(|&x| x != 0).collect();
                if v.is_empty() {
                    "-".to_string()
                } else {
                    format!("{}", percentile(&v, 0.5))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Compares one workload; returns a summary line.
fn compare(gpu: &Gpu, module: &driver::Module, wl: &Workload, shared_cap: usize) -> String {
    compare_timed(gpu, module, wl, shared_cap).0
}

/// [`compare`], and the stage times.
fn compare_timed(gpu: &Gpu, module: &driver::Module, wl: &Workload, shared_cap: usize) -> (String, Timing) {
    let state =
        QecState::build_streamed(&wl.table, &wl.config, &wl.stream).unwrap_or_else(|e| panic!("{}: {e}", wl.name));
    let (cpu, session) = cpu_answers(wl);
    let run = run_on_gpu(gpu, module, wl, &state, shared_cap);
    let mut timing = Timing { mhz: run.mhz, rows: Vec::with_capacity(wl.reqs.len()), decodes: Vec::new() };
    assert_eq!(run.violations, [0, 0, 0], "{}: [writes past cap, request bytes changed, threads disagreeing]", wl.name);
    let nobs = wl.table.num_observables;
    let mut ns = Vec::new();
    let (mut answered, mut finals) = (0usize, 0usize);
    for (i, (req, want)) in wl.reqs.iter().zip(&cpu).enumerate() {
        let got_len = run.lens[i];
        let want_len = want.as_ref().map_or(-1, |a| a.len() as i32);
        let class = match want {
            Some(a) if decode_ns_offset(&req.bytes, a, wl.table.num_observables).is_some() => Class::Decode,
            Some(a)
                if a.len() == rpc::HEADER_LEN
                    && a[4..8] == [0; 4]
                    && RequestRepr::parse(&req.bytes)
                        .is_ok_and(|r| r.function_id == function_id::ENQUEUE_SYNDROMES) =>
            {
                Class::Ack
            }
            _ => Class::Other,
        };
        timing.rows.push((class, run.timing[i * TIMING..(i + 1) * TIMING].try_into().unwrap()));
        assert_eq!(
            got_len, want_len,
            "{}: request {i} ({:02x?}, cap {}): GPU returned {got_len}, CPU {want_len}",
            wl.name, req.bytes, req.cap
        );
        let Some(want) = want else { continue };
        answered += 1;
        assert!(want.len() <= OUT_STRIDE, "{}: answer {i} longer than the test copies", wl.name);
        let mut got = run.outs[i * OUT_STRIDE..i * OUT_STRIDE + want.len()].to_vec();
        if let Some(at) = decode_ns_offset(&req.bytes, want, nobs) {
            finals += 1;
            assert_eq!(&want[at..at + 4], &[0; 4], "the CPU session here does not time");
            let dns = u32::from_le_bytes(got[at..at + 4].try_into().unwrap());
            ns.push(dns);
            timing.decodes.push((
                u32::from(u16::from_le_bytes(want[at - 6..at - 4].try_into().unwrap())),
                run.timing[i * TIMING],
                dns,
                timing.rows.len() - 1,
            ));
            got[at..at + 4].fill(0);
        }
        assert_eq!(
            &got, want,
            "{}: request {i} ({:02x?}, cap {}): answers differ (GPU first)",
            wl.name, req.bytes, req.cap
        );
    }
    for d in 0..wl.config.decoders {
        let rec = qec_state::decoder_record(&run.state, d).expect("decoder record");
        assert_eq!(Some(rec.counters()), session.counters(d), "{}: decoder {d} counters (GPU first)", wl.name);
    }
    assert_eq!(
        qec_state::invalid_decoder_requests(&run.state),
        Some(session.invalid_decoder_requests()),
        "{}: invalid-decoder count",
        wl.name
    );
    ns.sort_unstable();
    let c0 = session.counters(0).unwrap_or_default();
    let line = format!(
        "{}: {} requests ({} answered, {} decoded; decoder 0: {} overflows, {} unmatchable) equal; GPU decode_ns p50 {} p99 {} max {}; {:.1} ms; {}",
        wl.name,
        wl.reqs.len(),
        answered,
        finals,
        c0.overflows,
        c0.unmatchable,
        percentile(&ns, 0.5),
        percentile(&ns, 0.99),
        ns.last().copied().unwrap_or(0),
        run.millis,
        timing.line()
    );
    (line, timing)
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p rocelink-operator --release --test qec_gpu_match -- --ignored --nocapture"]
fn qec_gpu_matches_cpu() {
    let count = driver::device_count().unwrap_or_else(|e| panic!("no GPU for the GPU decoder comparison: {e}"));
    assert!(count > 0, "the CUDA driver reports no device");
    let gpu = Gpu::open(0).unwrap();
    println!("{}", gpu.info.describe());
    // Extra NVRTC options, e.g. `-lineinfo` for compute-sanitizer reports with source lines.
    let opts: Vec<String> = std::env::var("ROCELINK_QEC_GPU_NVRTC_OPTIONS")
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let c =
        nvrtc::compile(&replay_source(), &headers(), &gpu.info.arch(), &opts, true).unwrap_or_else(|e| panic!("{e}"));
    let module = gpu.load(&c.cubin, &["rl_qec_replay"]).unwrap();
    // A prefix of each workload only (for slow tools such as compute-sanitizer).
    let max = std::env::var("ROCELINK_QEC_GPU_MAX_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(usize::MAX);
    let profiled = opts.iter().any(|o| o == "-DRL_QEC_PROFILE");
    // Only the workloads whose name holds this text (to study one).
    let only = std::env::var("ROCELINK_QEC_GPU_ONLY").unwrap_or_default();
    for mut wl in workloads() {
        if !wl.name.contains(only.as_str()) {
            continue;
        }
        wl.reqs.truncate(max);
        // As the transceiver launches the stage (all the shared room: the table there where it
        // fits, else the clusters' work); the table in global memory with the clusters' work
        // in 48 KiB of shared memory (their arrays there only for small DEMs); and with no
        // shared memory at all (the clusters' work in the block's global scratch).
        let table = QecState::build_streamed(&wl.table, &wl.config, &wl.stream)
            .map(|s| s.shared_table_bytes())
            .unwrap_or(usize::MAX);
        let full = if table <= module.dynamic_shared_room(&gpu, 0) {
            "table in shared memory"
        } else {
            "table in global memory, the clusters' work in all the shared room"
        };
        if profiled {
            // the phase marks by defect count, as the transceiver launches the stage
            let (line, timing) = compare_timed(&gpu, &module, &wl, usize::MAX);
            println!("[profiled, {full}] {line}\n  {}\n  {}", timing.by_defects(), timing.stepped_acks());
            continue;
        }
        println!("[{full}] {}", compare(&gpu, &module, &wl, usize::MAX));
        if table > 48 * 1024 {
            println!(
                "[table in global memory, the clusters' work in 48 KiB of shared] {}",
                compare(&gpu, &module, &wl, 48 * 1024)
            );
        }
        println!("[table in global memory] {}", compare(&gpu, &module, &wl, 0));
    }
    module.unload();
}

/// The production workload of graphs/qec_d5.ron: d=5 at p=0.1%, one round per message, one
/// decoder, K = 12.
fn production_workload() -> Workload {
    fixture_workload("d5_p0.001", 12, 1, 1, usize::MAX)
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p rocelink-operator --release --test qec_gpu_match -- --ignored --nocapture qec_gpu_stage_timing"]
fn qec_gpu_stage_timing() {
    let gpu = Gpu::open(0).unwrap_or_else(|e| panic!("no GPU for the stage timing: {e}"));
    println!("{}", gpu.info.describe());
    // Latencies (cycles per step; min and median of 8 repetitions).
    {
        let c = nvrtc::compile(
            &nvrtc::Source { name: "probe.cu".into(), text: PROBE_KERNEL.into() },
            &[],
            &gpu.info.arch(),
            &[],
            true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let module = gpu.load(&c.cubin, &["rl_probe"]).unwrap();
        let buf = gpu.alloc(1 << 20).unwrap();
        let out = gpu.alloc(15 * 8 * 8).unwrap();
        let stream = gpu.stream().unwrap();
        let (mut pb, mut po) = (buf.device_ptr(), out.device_ptr());
        let mut params = [&mut pb as *mut u64 as *mut std::ffi::c_void, &mut po as *mut u64 as *mut std::ffi::c_void];
        // SAFETY: rl_probe takes two device pointers; both buffers outlive the kernel.
        unsafe { stream.launch(module.function(0), kernels::TRANSCEIVER_THREADS, &mut params) }.unwrap();
        let t0 = Instant::now();
        loop {
            match stream.query() {
                StreamState::Idle => break,
                StreamState::Failed(e) => panic!("the probe kernel failed: {e}"),
                StreamState::Running => {
                    assert!(t0.elapsed() < Duration::from_secs(20), "the probe kernel did not finish");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let mut raw = vec![0u8; 15 * 8 * 8];
        gpu.download(&out, 0, &mut raw).unwrap();
        let v: Vec<u64> = raw.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        for (m, name) in PROBE_NAMES.iter().enumerate() {
            let mut r: Vec<u64> = v[m * 8..m * 8 + 8].to_vec();
            r.sort_unstable();
            println!("probe: {name}: min {} median {} max {} cycles", r[0], r[4], r[7]);
        }
        println!("probe: %gridid {:?}", &v[112..120]);
        module.unload();
        // SAFETY: the stream is idle.
        unsafe {
            gpu.free(buf).unwrap();
            gpu.free(out).unwrap();
        }
    }
    let mut builds: Vec<(String, Vec<nvrtc::Source>, Vec<String>)> = vec![
        ("committed stage, -DRL_QEC_PROFILE".into(), headers(), vec!["-DRL_QEC_PROFILE".into()]),
        // the fast path's steps in the ack marks' columns 3..6 (qec.cuh RL_QEC_PROFILE_ACK)
        (
            "committed stage, -DRL_QEC_PROFILE -DRL_QEC_PROFILE_ACK".into(),
            headers(),
            vec!["-DRL_QEC_PROFILE".into(), "-DRL_QEC_PROFILE_ACK".into()],
        ),
        ("committed stage".into(), headers(), vec![]),
    ];
    if let Ok(v) = std::env::var("ROCELINK_QEC_GPU_VARIANTS") {
        for opts in v.split(';').map(str::trim).filter(|o| !o.is_empty()) {
            builds.push((
                format!("committed stage, {opts}"),
                headers(),
                opts.split_whitespace().map(String::from).collect(),
            ));
        }
    }
    for path in std::env::var("ROCELINK_QEC_GPU_BASELINE")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let hs = headers()
            .into_iter()
            .map(|h| if h.name == "stages/qec.cuh" { nvrtc::Source { name: h.name, text: text.clone() } } else { h })
            .collect();
        builds.push((format!("baseline {path}"), hs, vec![]));
    }
    let wls = [production_workload(), fixture_workload("d3_p0.001", 12, 1, 1, usize::MAX)];
    for (name, hs, opts) in &builds {
        let c = nvrtc::compile(&replay_source(), hs, &gpu.info.arch(), opts, true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let module = gpu.load(&c.cubin, &["rl_qec_replay"]).unwrap();
        for wl in &wls {
            let (line, t) = compare_timed(&gpu, &module, wl, usize::MAX);
            println!("[{name}] {line}");
            if opts.iter().any(|o| o == "-DRL_QEC_PROFILE") {
                println!(
                    "[{name}] {}: phase marks (median cycles from entry to marks 1..8): ack {} | decode {} | other {}",
                    wl.name,
                    t.marks(Class::Ack),
                    t.marks(Class::Decode),
                    t.marks(Class::Other)
                );
            }
            println!("[{name}] {}: {}", wl.name, t.by_defects());
        }
        module.unload();
    }
}

/// Without a GPU: the workloads build, cover what they are meant to (on the CPU), and the
/// replay kernel compiles (when NVRTC is here).
#[test]
fn workloads_cover_every_path_and_the_replay_kernel_compiles() {
    let mut statuses = std::collections::BTreeSet::new();
    let (mut overflows, mut unmatchable, mut dropped, mut never_pairs) = (0u64, 0u64, 0u64, 0usize);
    for wl in workloads() {
        let state =
            QecState::build_streamed(&wl.table, &wl.config, &wl.stream).unwrap_or_else(|e| panic!("{}: {e}", wl.name));
        never_pairs += state.never_pairs();
        assert!(wl.reqs.iter().all(|r| r.bytes.len() <= MAX_MSG && r.cap <= MAX_MSG));
        let (answers, session) = cpu_answers(&wl);
        for a in answers.iter().flatten() {
            assert!(a.len() <= OUT_STRIDE);
            statuses.insert(i32::from_le_bytes(a[4..8].try_into().unwrap()));
        }
        for d in 0..wl.config.decoders {
            let c = session.counters(d).unwrap();
            overflows += c.overflows;
            unmatchable += c.unmatchable;
            dropped += c.dropped_messages + c.dropped_shots + c.abandoned_shots;
        }
    }
    assert_eq!(statuses.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 6], "every status but BUSY");
    // Small K (0, 2, 3, 4) drives the clusters, by the DP and the matcher: every shot decoded.
    assert_eq!(overflows, 0, "the table decoder is exact above K");
    assert!(unmatchable > 100 && dropped > 100, "{unmatchable} {dropped}");
    assert!(never_pairs > 0, "one workload exercises the 32-bit transform");
    if !nvrtc::present_or_skip("the replay kernel compile") {
        return;
    }
    let ack_marks = ["-DRL_QEC_PROFILE".to_string(), "-DRL_QEC_PROFILE_ACK".to_string()];
    let step_marks = ["-DRL_QEC_PROFILE".to_string(), "-DRL_QEC_PROFILE_STEPS".to_string()];
    let matcher_marks = ["-DRL_QEC_PROFILE".to_string(), "-DRL_QEC_PROFILE_PM".to_string()];
    for opts in [&[][..], &["-DRL_QEC_PROFILE".to_string()][..], &ack_marks[..], &step_marks[..], &matcher_marks[..]] {
        let c = nvrtc::compile(&replay_source(), &headers(), "sm_90", opts, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&c.cubin[..4], b"\x7fELF");
        // For reading the stage's SASS without a GPU.
        if let Some(dir) = std::env::var_os("ROCELINK_QEC_DUMP_CUBIN") {
            let mut with_lines = opts.to_vec();
            with_lines.push("-lineinfo".into());
            let c = nvrtc::compile(&replay_source(), &headers(), "sm_90", &with_lines, false)
                .unwrap_or_else(|e| panic!("{e}"));
            let path = PathBuf::from(dir).join(match opts.last().map(String::as_str) {
                None => "qec_replay.cubin",
                Some("-DRL_QEC_PROFILE") => "qec_replay_profile.cubin",
                Some("-DRL_QEC_PROFILE_ACK") => "qec_replay_profile_ack.cubin",
                Some("-DRL_QEC_PROFILE_PM") => "qec_replay_profile_pm.cubin",
                _ => "qec_replay_profile_steps.cubin",
            });
            std::fs::write(&path, &c.cubin).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    let c =
        nvrtc::compile(&nvrtc::Source { name: "probe.cu".into(), text: PROBE_KERNEL.into() }, &[], "sm_90", &[], false)
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&c.cubin[..4], b"\x7fELF");
}
