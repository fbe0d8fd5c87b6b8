/*
 * scripts/probes/host_mem_kinds.cu — a measurement probe (not part of the data path): does the
 * kind of host memory the GPU polls, or what the host does with the line after its store,
 * change how soon the GPU sees the store? The data path's receive side is a CPU store (the
 * software NIC's CQE) that one GPU thread finds with a PCIe read of mapped host memory; its
 * floor is this ping-pong with cacheable memory and a plain store.
 *
 * Build and run on the GPU machine:
 *   nvcc -O3 -arch=sm_90 -o /tmp/host_mem_kinds scripts/probes/host_mem_kinds.cu -lpthread
 *   /tmp/host_mem_kinds [host_core] [count]
 * Prints one line per variant: min / p50 / p90 / p99 (ns). "read chain": one GPU thread's
 * dependent reads of a host line nobody writes (ns per read); "ping-pong": the host stores a
 * sequence number into the flag line, the GPU (thread 0, polling back to back) answers it
 * into a cacheable pong line, the host spins on the pong (the round trip, host clock).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>
#include <algorithm>
#include <vector>

#include "ck.h"

__device__ __forceinline__ uint32_t ldv(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void stv(uint32_t *p, uint32_t v) { asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }

/* n dependent reads of `p` (the address depends on the last value); the time per read */
__global__ void k_chain(const uint32_t *p, int n, unsigned long long *out) {
    if (threadIdx.x != 0) return;
    uint32_t v = 0;
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < n; i++) v = ldv(p + (v & 0x10000u));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out[0] = (t1 - t0) / (unsigned long long)n;
    out[1] = v;
}

/* the floor's kernel: read, check, answer, read again; ends at 0xffffffff */
__global__ void k_serve(const uint32_t *flag, uint32_t *pong) {
    if (threadIdx.x != 0) return;
    uint32_t last = 0;
    for (;;) {
        const uint32_t v = ldv(flag);
        if (v == last || v == 0) continue;
        if (v == 0xffffffffu) return;
        stv(pong, v);
        last = v;
    }
}

static uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void print(const char *name, std::vector<uint64_t> &v) {
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[(size_t)(f * (v.size() - 1))]; };
    printf("%-72s min %5llu p50 %5llu p90 %5llu p99 %5llu ns\n", name, (unsigned long long)v[0], (unsigned long long)q(0.5),
           (unsigned long long)q(0.9), (unsigned long long)q(0.99));
    fflush(stdout);
}

enum After { PLAIN, SFENCE, CLDEMOTE, CLFLUSHOPT };

/* host side of the ping-pong: store i into the flag, do `after`, spin on the pong */
static void pingpong(const char *name, volatile uint32_t *flag_h, uint32_t *flag_d, volatile uint32_t *pong_h, uint32_t *pong_d, int count,
                     After after) {
    *flag_h = 0;
    *pong_h = 0;
    _mm_mfence();
    k_serve<<<1, 32>>>(flag_d, pong_d);
    CK(cudaGetLastError());
    std::vector<uint64_t> v;
    v.reserve(count);
    const int warm = 1000;
    for (int i = 1; i <= count + warm; i++) {
        const uint64_t t0 = now_ns();
        *flag_h = (uint32_t)i;
        switch (after) {
        case PLAIN: break;
        case SFENCE: _mm_sfence(); break;
        case CLDEMOTE: asm volatile("cldemote (%0)" ::"r"(flag_h) : "memory"); break;
        case CLFLUSHOPT: asm volatile("clflushopt (%0)" ::"r"(flag_h) : "memory"); break;
        }
        while (*pong_h != (uint32_t)i) _mm_pause();
        const uint64_t t1 = now_ns();
        if (i > warm) v.push_back(t1 - t0);
    }
    *flag_h = 0xffffffffu;
    _mm_sfence();
    CK(cudaDeviceSynchronize());
    print(name, v);
}

static void chain(const char *name, uint32_t *p_d, unsigned long long *out_d, unsigned long long *out_h) {
    std::vector<uint64_t> v;
    for (int r = 0; r < 9; r++) {
        k_chain<<<1, 32>>>(p_d, 2000, out_d);
        CK(cudaDeviceSynchronize());
        v.push_back(out_h[0]);
    }
    print(name, v);
}

int main(int argc, char **argv) {
    int core = argc > 1 ? atoi(argv[1]) : 2;
    int count = argc > 2 ? atoi(argv[2]) : 20000;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    const size_t SZ = 1 << 20;
    /* the flag in three kinds of host memory; the pong always cacheable (the host polls it) */
    uint32_t *cach_h, *wc_h, *reg_h, *pong_h, *cach_d, *wc_d, *reg_d, *pong_d;
    unsigned long long *out_h, *out_d;
    CK(cudaHostAlloc((void **)&cach_h, SZ, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&wc_h, SZ, cudaHostAllocMapped | cudaHostAllocWriteCombined));
    reg_h = (uint32_t *)aligned_alloc(4096, SZ);
    CK(cudaHostRegister(reg_h, SZ, cudaHostRegisterMapped | cudaHostRegisterPortable));
    CK(cudaHostAlloc((void **)&pong_h, 4096, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&out_h, 4096, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&cach_d, cach_h, 0));
    CK(cudaHostGetDevicePointer((void **)&wc_d, wc_h, 0));
    CK(cudaHostGetDevicePointer((void **)&reg_d, reg_h, 0));
    CK(cudaHostGetDevicePointer((void **)&pong_d, pong_h, 0));
    CK(cudaHostGetDevicePointer((void **)&out_d, out_h, 0));
    memset(cach_h, 0, SZ);
    memset(wc_h, 0, SZ);
    memset(reg_h, 0, SZ);
    for (int rep = 0; rep < 2; rep++) {
        chain("read chain: cudaHostAlloc mapped (cacheable)", cach_d, out_d, out_h);
        chain("read chain: cudaHostAlloc mapped, write-combined", wc_d, out_d, out_h);
        chain("read chain: malloc + cudaHostRegister mapped (the data path's)", reg_d, out_d, out_h);
        pingpong("ping-pong: cacheable flag, plain store (the floor)", cach_h, cach_d, pong_h, pong_d, count, PLAIN);
        pingpong("ping-pong: cacheable flag, store + cldemote", cach_h, cach_d, pong_h, pong_d, count, CLDEMOTE);
        pingpong("ping-pong: cacheable flag, store + clflushopt", cach_h, cach_d, pong_h, pong_d, count, CLFLUSHOPT);
        pingpong("ping-pong: registered flag, plain store", reg_h, reg_d, pong_h, pong_d, count, PLAIN);
        pingpong("ping-pong: write-combined flag, store + sfence", wc_h, wc_d, pong_h, pong_d, count, SFENCE);
        pingpong("ping-pong: write-combined flag, plain store", wc_h, wc_d, pong_h, pong_d, count, PLAIN);
    }
    return 0;
}
