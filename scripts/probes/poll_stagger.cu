/*
 * scripts/probes/poll_stagger.cu — a measurement probe (not part of the data path): can one GPU
 * thread sample a word of mapped host memory more often than once per PCIe read by keeping
 * several reads in flight, staggered in time? And what do the answer's fence and the host's
 * store flavour cost in the mapped ping-pong?
 *
 * Build and run on the GPU machine:
 *   nvcc -O3 -arch=sm_90 -o /tmp/poll_stagger scripts/probes/poll_stagger.cu -lpthread
 *   /tmp/poll_stagger [host_core] [count]
 * Prints one line per variant: min / p50 / p90 / p99 of the host-measured round trip (ns).
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>
#include <algorithm>
#include <vector>

#include "ck.h"

#define LINE_WORDS 32 /* 128-byte lines */
#define MAXL 16

__device__ __forceinline__ uint32_t ldv(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void stv(uint32_t *p, uint32_t v) {
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void delay(long long c) {
    long long t = clock64();
    while (clock64() - t < c) {
    }
}

/* answer: optionally a 64-byte data line, then a fence of some kind, then the flag */
__device__ __forceinline__ void answer(uint32_t *pong, uint32_t *data, uint32_t v, int fence) {
    if (fence >= 0) {
        for (int i = 0; i < 16; i++) stv(data + i, v);
        if (fence == 1) asm volatile("fence.acq_rel.sys;" ::: "memory");
        if (fence == 2) asm volatile("fence.sc.sys;" ::: "memory");
        if (fence == 3) {
            asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(pong), "r"(v) : "memory");
            return;
        }
    }
    stv(pong, v);
}

/* D reads in flight, issued `stag` cycles apart, read i going to line (i % lines). */
template <int D>
__global__ void k_stagger(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag, int fence) {
    if (threadIdx.x != 0) return;
    const uint32_t *p[D];
#pragma unroll
    for (int i = 0; i < D; i++) p[i] = flags + (i % lines) * LINE_WORDS;
    uint32_t r[D];
    uint32_t last = 0;
#pragma unroll
    for (int i = 0; i < D; i++) {
        r[i] = ldv(p[i]);
        if (i + 1 < D) delay(stag);
    }
    for (;;) {
#pragma unroll
        for (int i = 0; i < D; i++) {
            uint32_t v = r[i];
            r[i] = ldv(p[i]);
            if (v != last && v != 0) {
                if (v == 0xffffffffu) return;
                if ((int32_t)(v - last) > 0) {
                    answer(pong, data, v, fence);
                    last = v;
                }
            }
        }
    }
}

/* one warp, lanes 0..lines-1 each read their own line in one instruction */
__global__ void k_wide(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines) {
    if (threadIdx.x >= 32) return;
    uint32_t last = 0;
    int lane = threadIdx.x;
    for (;;) {
        uint32_t v = lane < lines ? ldv(flags + lane * LINE_WORDS) : 0;
        uint32_t m = __reduce_max_sync(0xffffffffu, v);
        if (m == 0xffffffffu) return;
        if (m != last) {
            if (lane == 0) stv(pong, m);
            last = m;
        }
    }
}

/* Polls *p back to back; answers each newer value (an answer of kind `fence`), then waits
   until `wait_ns` (globaltimer) after the answer before its next read; returns at 0xffffffff.
   Read, check, answer, read again: the project's floor order. */
__device__ void serve(const uint32_t *p, uint32_t *pong, uint32_t *data, int fence, uint64_t wait_ns) {
    uint32_t last = 0;
    for (;;) {
        const uint32_t v = ldv(p);
        if (v == last || v == 0) continue;
        if (v == 0xffffffffu) return;
        if ((int32_t)(v - last) > 0) {
            answer(pong, data, v, fence);
            last = v;
            if (wait_ns) {
                uint64_t t0, t;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
                do {
                    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                } while (t - t0 < wait_ns);
            }
        }
    }
}

/* W warps, warp w polls line (w % lines) back to back, started w * stag cycles apart */
__global__ void k_warps(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag) {
    if ((threadIdx.x & 31) != 0) return;
    const int w = threadIdx.x >> 5;
    delay(stag * w);
    serve(flags + (w % lines) * LINE_WORDS, pong, data, -1, 0);
}

/* B blocks (one SM each), thread 0 of block b polls line (b % lines), started b * stag cycles
   apart */
__global__ void k_blocks(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag, int fence) {
    if (threadIdx.x != 0) return;
    const int b = blockIdx.x;
    delay(stag * b);
    serve(flags + (b % lines) * LINE_WORDS, pong, data, fence, 0);
}

/* block 0: the floor with an answer of kind `fence`; blocks 1..: read their own line of
   host memory (not the flag's) back to back until block 0 ends them */
__global__ void k_noise(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag, int fence) {
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) {
        serve(flags, pong, data, fence, 0);
        for (int l = 8; l < MAXL; l++) stv(flags + l * LINE_WORDS, 1);
        return;
    }
    const uint32_t *p = flags + (8 + (blockIdx.x & 7)) * LINE_WORDS;
    for (;;) {
        if (ldv(p) != 0) return;
    }
}

/* the floor, but after each answer the next read waits until `stag` ns (globaltimer) after it */
__global__ void k_delay(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag, int fence) {
    if (threadIdx.x != 0) return;
    serve(flags, pong, data, fence, (uint64_t)stag);
}

/* a cluster: ranks 1..n-1 poll the flag line (staggered) and forward what they see into rank
   0's shared memory (DSMEM); rank 0's thread 0 spins on its own shared memory and answers */
__device__ uint32_t g_smid[16];
__global__ void k_cluster(uint32_t *flags, uint32_t *pong, uint32_t *data, int lines, long long stag, int fence) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ uint32_t seen;
    unsigned rank = cluster.block_rank();
    if (threadIdx.x == 0) {
        seen = 0;
        uint32_t sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        g_smid[rank] = sm;
    }
    cluster.sync();
    if (threadIdx.x == 0) {
        if (rank == 0) {
            uint32_t last = 0;
            for (;;) {
                uint32_t v;
                asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(&seen)) : "memory");
                if (v != last) {
                    if (v == 0xffffffffu) break;
                    if ((int32_t)(v - last) > 0) {
                        answer(pong, data, v, fence);
                        last = v;
                    }
                }
            }
        } else {
            uint32_t *s0 = cluster.map_shared_rank(&seen, 0);
            const uint32_t *p = flags + ((rank - 1) % lines) * LINE_WORDS;
            delay(stag * (rank - 1));
            uint32_t last = 0;
            for (;;) {
                uint32_t v = ldv(p);
                if (v != last && v != 0) {
                    if (v == 0xffffffffu || (int32_t)(v - last) > 0) {
                        *(volatile uint32_t *)s0 = v;
                        last = v;
                    }
                    if (v == 0xffffffffu) break;
                }
            }
        }
    }
    cluster.sync();
}

static inline uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

struct Mem {
    uint32_t *flags_h, *flags_d, *pong_h, *pong_d, *data_h, *data_d;
};

/* host store flavours: 0 plain, 1 plain + clflush, 2 movnti + sfence */
static void host_write(uint32_t *flags, int lines, uint32_t v, int mode) {
    for (int l = 0; l < lines; l++) {
        volatile uint32_t *w = flags + l * LINE_WORDS;
        if (mode == 2)
            _mm_stream_si32((int *)w, (int)v);
        else
            *w = v;
    }
    if (mode == 1)
        for (int l = 0; l < lines; l++) _mm_clflush((void *)(flags + l * LINE_WORDS));
    if (mode >= 1) _mm_sfence();
}

static uint32_t g_seq = 0;
static uint64_t g_think = 0; /* ns the host waits after an answer before the next request */

static void run(const char *name, Mem &m, int lines, int count, int hmode, int check_data, void (*launch)(Mem &, int)) {
    /* reset */
    for (int l = 0; l < MAXL; l++) m.flags_h[l * LINE_WORDS] = 0;
    *(volatile uint32_t *)m.pong_h = 0;
    g_seq = 0;
    launch(m, lines);
    std::vector<uint32_t> ns;
    ns.reserve(count);
    int bad = 0;
    usleep(20000);
    for (int i = 0; i < count + 2000; i++) {
        uint32_t v = ++g_seq;
        uint64_t t0 = now_ns();
        host_write(m.flags_h, lines, v, hmode);
        while (*(volatile uint32_t *)m.pong_h != v) _mm_pause();
        uint64_t t1 = now_ns();
        if (g_think) while (now_ns() - t1 < g_think) _mm_pause();
        if (check_data)
            for (int j = 0; j < 16; j++)
                if (((volatile uint32_t *)m.data_h)[j] != v) { bad++; break; }
        if (i >= 2000) ns.push_back((uint32_t)(t1 - t0));
    }
    host_write(m.flags_h, lines, 0xffffffffu, 0);
    CK(cudaDeviceSynchronize());
    std::sort(ns.begin(), ns.end());
    auto q = [&](double f) { return ns[(size_t)(f * (ns.size() - 1))]; };
    printf("%-48s lines %2d host %d  min %5u p50 %5u p90 %5u p99 %5u  torn %d\n", name, lines, hmode, q(0), q(0.5), q(0.9), q(0.99), bad);
    fflush(stdout);
}

static long long g_stag;
static int g_fence;
template <int D>
static void launch_stagger(Mem &m, int lines) {
    k_stagger<D><<<1, 32>>>(m.flags_d, m.pong_d, m.data_d, lines, g_stag, g_fence);
    CK(cudaGetLastError());
}
static void launch_wide(Mem &m, int lines) {
    k_wide<<<1, 32>>>(m.flags_d, m.pong_d, m.data_d, lines);
    CK(cudaGetLastError());
}
static int g_warps;
static void launch_warps(Mem &m, int lines) {
    k_warps<<<1, 32 * g_warps>>>(m.flags_d, m.pong_d, m.data_d, lines, g_stag);
    CK(cudaGetLastError());
}

static int g_blocks;
static void launch_blocks(Mem &m, int lines) {
    k_blocks<<<g_blocks, 32>>>(m.flags_d, m.pong_d, m.data_d, lines, g_stag, g_fence);
    CK(cudaGetLastError());
}

static void launch_noise(Mem &m, int lines) {
    for (int l = 8; l < MAXL; l++) m.flags_h[l * LINE_WORDS] = 0;
    k_noise<<<g_blocks, 32>>>(m.flags_d, m.pong_d, m.data_d, lines, g_stag, g_fence);
    CK(cudaGetLastError());
}
static void launch_delay(Mem &m, int lines) {
    k_delay<<<1, 32>>>(m.flags_d, m.pong_d, m.data_d, lines, g_stag, g_fence);
    CK(cudaGetLastError());
}
static int g_pad;
static void launch_cluster(Mem &m, int lines) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(g_blocks);
    cfg.blockDim = dim3(32);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = g_blocks;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cfg.dynamicSmemBytes = g_pad;
    CK(cudaFuncSetAttribute(k_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CK(cudaFuncSetAttribute(k_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaLaunchKernelEx(&cfg, k_cluster, m.flags_d, m.pong_d, m.data_d, lines, g_stag, g_fence));
}

int main(int argc, char **argv) {
    int core = argc > 1 ? atoi(argv[1]) : 2;
    int count = argc > 2 ? atoi(argv[2]) : 20000;
    long long period = argc > 3 ? atoll(argv[3]) : 2300; /* cycles of one PCIe read, about */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    Mem m;
    CK(cudaHostAlloc((void **)&m.flags_h, MAXL * 128, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&m.pong_h, 128, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&m.data_h, 128, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&m.flags_d, m.flags_h, 0));
    CK(cudaHostGetDevicePointer((void **)&m.pong_d, m.pong_h, 0));
    CK(cudaHostGetDevicePointer((void **)&m.data_d, m.data_h, 0));
    char name[128];

    for (int rep = 0; rep < 2; rep++) {
        g_fence = -1;
        for (int b = 1; b <= 8; b *= 2) {
            g_blocks = b;
            g_stag = period / b;
            snprintf(name, sizeof name, "%d blocks, own line each, staggered", b);
            run(name, m, b, count, 0, 0, launch_blocks);
        }
        g_blocks = 4;
        g_stag = period / 4;
        run("4 blocks, one line, staggered", m, 1, count, 0, 0, launch_blocks);
        g_stag = 0;
        run("4 blocks, own line each, not staggered", m, 4, count, 0, 0, launch_blocks);
        for (int b = 8; b <= 16; b *= 2) {
            g_blocks = b;
            g_stag = period / b;
            snprintf(name, sizeof name, "%d blocks, one line, staggered", b);
            run(name, m, 1, count, 0, 0, launch_blocks);
        }
        for (int n = 2; n <= 16; n *= 2) {
            g_blocks = n;
            g_stag = n > 2 ? period / (n - 1) : 0;
            snprintf(name, sizeof name, "cluster of %d: %d pollers, one line, DSMEM", n, n - 1);
            run(name, m, 1, count, 0, 0, launch_cluster);
        }
        g_warps = 1;
        run("1 warp (k_warps), floor order", m, 1, count, 0, 0, launch_warps);
        if (getenv("ONLY_BLOCKS")) continue;
        if (getenv("ONLY_DELAY")) {
            g_fence = -1;
            for (int think = 0; think <= 1500; think += 500) {
                g_think = think;
                for (int d = 0; d <= 1200; d += 100) {
                    g_stag = d;
                    snprintf(name, sizeof name, "host think %d ns, GPU waits %d ns after answer", think, d);
                    run(name, m, 1, count / 4, 0, 0, launch_delay);
                }
            }
            g_think = 0;
            continue;
        }
        if (getenv("ONLY_NOISE")) {
            for (int f = -1; f <= 1; f += 2) {
                g_fence = f;
                for (int b = 1; b <= 4; b++) {
                    g_blocks = b;
                    g_stag = period / b;
                    snprintf(name, sizeof name, "%d blocks one line staggered (no cluster), fence %d", b, f);
                    run(name, m, 1, count, 0, f >= 0, launch_blocks);
                }
                for (int b = 1; b <= 8; b *= 2) {
                    g_blocks = b + 1;
                    snprintf(name, sizeof name, "floor + %d blocks reading other lines, fence %d", b, f);
                    run(name, m, 1, count, 0, f >= 0, launch_noise);
                }
            }
            continue;
        }
        if (getenv("ONLY_FENCE")) {
            for (int f = -1; f <= 1; f += 2)
                for (int n = 1; n <= 4; n++)
                    for (int pad = 0; pad <= 120 * 1024; pad += 120 * 1024) {
                        if (n == 1 && pad) continue;
                        g_fence = f;
                        g_pad = pad;
                        if (n == 1) {
                            g_stag = 0;
                            g_blocks = 1;
                            snprintf(name, sizeof name, "1 poller (no cluster), fence %d", f);
                            run(name, m, 1, count, 0, f >= 0, launch_blocks);
                            continue;
                        }
                        g_blocks = n;
                        g_stag = n > 2 ? period / (n - 1) : 0;
                        snprintf(name, sizeof name, "cluster %d, fence %d, pad %d", n, f, pad);
                        run(name, m, 1, count, 0, f >= 0, launch_cluster);
                        uint32_t sm[16];
                        CK(cudaMemcpyFromSymbol(sm, g_smid, sizeof sm));
                        printf("   smids:");
                        for (int i = 0; i < n; i++) printf(" %u", sm[i]);
                        printf("\n");
                    }
            continue;
        }
        g_fence = -1;
        g_stag = 0;
        run("floor: 1 read in flight", m, 1, count, 0, 0, launch_stagger<1>);
        for (int hm = 1; hm <= 2; hm++) run("floor, host store flavour", m, 1, count, hm, 0, launch_stagger<1>);
        for (int lines = 1; lines <= 4; lines *= 4) {
            g_stag = period / 2;
            run("2 reads in flight, staggered", m, lines == 1 ? 1 : 2, count, 0, 0, launch_stagger<2>);
            g_stag = period / 4;
            run("4 reads in flight, staggered", m, lines, count, 0, 0, launch_stagger<4>);
            g_stag = period / 8;
            run("8 reads in flight, staggered", m, lines == 1 ? 1 : 8, count, 0, 0, launch_stagger<8>);
            g_stag = 0;
            run("4 reads in flight, not staggered", m, lines, count, 0, 0, launch_stagger<4>);
        }
        run("one warp, a line per lane (4)", m, 4, count, 0, 0, launch_wide);
        for (int w = 2; w <= 4; w *= 2) {
            g_warps = w;
            g_stag = period / w;
            snprintf(name, sizeof name, "%d warps, own line each, staggered", w);
            run(name, m, w, count, 0, 0, launch_warps);
        }
        g_stag = 0;
        const char *fn[] = {"answer: 64 B data then flag, no fence", "answer: data, fence.acq_rel.sys, flag",
                            "answer: data, fence.sc.sys, flag", "answer: data, st.release.sys flag"};
        for (int f = 0; f < 4; f++) {
            g_fence = f;
            run(fn[f], m, 1, count, 0, 1, launch_stagger<1>);
        }
        g_fence = 1;
        g_stag = period / 4;
        run("answer acq_rel + 4 reads staggered (1 line)", m, 1, count, 0, 1, launch_stagger<4>);
        run("answer acq_rel + 4 reads staggered (4 lines)", m, 4, count, 0, 1, launch_stagger<4>);
    }
    return 0;
}
