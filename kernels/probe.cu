/*
 * kernels/probe.cu — the GPU floors and the launch-per-message path of the benchmark.
 *
 *   rl_probe_pingpong: the raw mapped-memory ping-pong (the GPU paths' floor, DESIGN.md
 *     "Measuring"). One thread polls one word of pinned host memory (`ping`) and writes each
 *     new value back to `pong`; the host measures the round trip. 0xffffffff ends it. The exit
 *     value is the only exit: the host always writes it.
 *   rl_probe_pingpong_fenced: the same with __threadfence_system() after the store. Polling
 *     again right after the store sends a read that reaches host memory before the host's
 *     next write, so a round trip waits for a second read; the fence holds the next read
 *     until the store is done, and the round trip costs one read. Which is cheaper depends on
 *     the host: the benchmark measures both and takes the better one as the floor
 *     (decisions.md: the fence in the floor probe).
 *   rl_echo_once: the CPU-driven approach the persistent kernel replaces: one launch per
 *     message runs the stage chain on a request in mapped memory and writes the answer and
 *     its length back to mapped memory; the host launches, synchronises, then sends.
 */
#include "abi.h"
#include "verbs.cuh"
#include "rl_chain.cuh"

#ifndef RL_THREADS
#define RL_THREADS 32
#endif
#ifndef RL_MAX_MSG
#define RL_MAX_MSG 4096
#endif

template <bool FENCE>
__device__ __forceinline__ void rl_probe_pingpong_loop(uint32_t *ping, uint32_t *pong) {
    if (threadIdx.x != 0) return;
    uint32_t last = 0;
    for (;;) {
        uint32_t v = rl_ld32_sys(ping);
        if (v != last) {
            if (v == 0xffffffffu) break;
            rl_st32_sys(pong, v);
            if (FENCE) __threadfence_system();
            last = v;
        }
    }
}

extern "C" __global__ void rl_probe_pingpong(uint32_t *ping, uint32_t *pong) { rl_probe_pingpong_loop<false>(ping, pong); }

extern "C" __global__ void rl_probe_pingpong_fenced(uint32_t *ping, uint32_t *pong) { rl_probe_pingpong_loop<true>(ping, pong); }

extern "C" __global__ void __launch_bounds__(RL_THREADS, 1) rl_echo_once(const uint8_t *req, uint32_t len, uint8_t *resp, uint32_t cap,
                                                                          int32_t *out_len) {
    __shared__ __align__(16) uint8_t buf_a[RL_MAX_MSG];
    __shared__ __align__(16) uint8_t buf_b[RL_MAX_MSG];
    if (len > RL_MAX_MSG) len = RL_MAX_MSG;
    for (uint32_t off = threadIdx.x * 16; off < len; off += RL_THREADS * 16) {
        /* requests sit in 128-byte-aligned slots: 16-byte loads are aligned */
        *(uint4 *)(buf_a + off) = rl_ld16_sys(req + off);
    }
    __syncthreads();
    const uint8_t *answer = 0;
    int n = rl_run_chain(buf_a, (int)len, buf_b, RL_MAX_MSG, &answer, (void *)0);
    if (n > (int)cap) n = -1;
    for (int off = threadIdx.x; off < n; off += RL_THREADS) resp[off] = answer[off];
    __syncthreads();
    if (threadIdx.x == 0) {
        rl_fence_release_sys();
        rl_st32_sys(out_len, (uint32_t)n);
    }
}
