/*
 * scripts/probes/sm_placement.cu — a measurement probe (not part of the data path): does the
 * multiprocessor a persistent kernel lands on, or where its host buffer lies, set the mapped
 * ping-pong's round trip? The floor and the data path both measure in one of two modes ~0.3 us
 * apart from one launch (or allocation) to the next (latency-reports/history.md).
 *
 * One block per multiprocessor takes its turn (blocks find their SM with %smid; the first on
 * each SM plays, the rest leave): one thread makes `n` dependent reads of a host line (ns per
 * read), then `n` ping-pongs with a host thread through mapped pinned memory (GPU writes ping,
 * host answers pong, GPU polls pong back to back: the floor's loop with the roles swapped).
 * Repeated over `allocs` fresh allocations, so SM and address effects can be told apart.
 *
 *   nvcc -O3 -arch=sm_90 -o /tmp/sm_placement scripts/probes/sm_placement.cu -lpthread
 *   /tmp/sm_placement [host_core 2] [n 200] [allocs 3]
 * Prints per allocation and SM: smid, read ns, ping-pong p50 / p90 (ns, GPU clock).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "ck.h"

__device__ __forceinline__ uint32_t ldv(const volatile uint32_t *p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void stv(volatile uint32_t *p, uint32_t v) { asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ uint64_t gt() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct Shared { /* mapped pinned host memory */
    alignas(128) volatile uint32_t ping;
    alignas(128) volatile uint32_t pong;
    alignas(128) volatile uint32_t chain[64];
};

__global__ void k_probe(Shared *h, int n, unsigned *claimed, unsigned *ticket, volatile unsigned *turn, unsigned *smids,
                        unsigned long long *reads, unsigned long long *rtt, int nsm) {
    if (threadIdx.x != 0) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (sm >= 1024 || atomicCAS(&claimed[sm], 0u, 1u) != 0u) return;
    const unsigned me = atomicAdd(ticket, 1u);
    while (*turn != me) {
    }
    smids[me] = sm;
    uint32_t v = 0;
    const uint64_t t0 = gt();
    for (int i = 0; i < n; i++) v = ldv(&h->chain[v & 32u]);
    reads[me] = (gt() - t0) / (uint64_t)n + (v == 12345 ? 1 : 0);
    for (int i = 0; i < n; i++) {
        const uint32_t want = (me << 16) | (uint32_t)(i + 1);
        const uint64_t a = gt();
        stv(&h->ping, want);
        while (ldv(&h->pong) != want) {
        }
        rtt[(size_t)me * n + i] = gt() - a;
    }
    __threadfence_system();
    *turn = me + 1;
}

struct Host { Shared *h; int core; };
static void *responder(void *arg) {
    Host *p = (Host *)arg;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(p->core, &s);
    sched_setaffinity(0, sizeof s, &s);
    uint32_t last = 0;
    for (;;) {
        const uint32_t v = p->h->ping;
        if (v != last) {
            if (v == 0xffffffffu) return nullptr;
            p->h->pong = v;
            last = v;
        }
    }
}

int main(int argc, char **argv) {
    const int core = argc > 1 ? atoi(argv[1]) : 2, n = argc > 2 ? atoi(argv[2]) : 200, allocs = argc > 3 ? atoi(argv[3]) : 3;
    int nsm = 0;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    unsigned *claimed, *ticket, *turn, *smids;
    unsigned long long *reads, *rtt;
    CK(cudaMalloc(&claimed, 1024 * 4));
    CK(cudaMalloc(&ticket, 4));
    CK(cudaMalloc(&turn, 4));
    CK(cudaMallocHost(&smids, nsm * 4));
    CK(cudaMallocHost(&reads, nsm * 8));
    CK(cudaMallocHost(&rtt, (size_t)nsm * n * 8));
    for (int a = 0; a < allocs; a++) {
        Shared *h;
        CK(cudaHostAlloc(&h, sizeof(Shared) * (a + 1), cudaHostAllocMapped)); /* a different address each time */
        h += a;
        h->ping = 0;
        h->pong = 0;
        for (int i = 0; i < 64; i++) h->chain[i] = 0;
        Shared *dh;
        CK(cudaHostGetDevicePointer((void **)&dh, h, 0));
        CK(cudaMemset(claimed, 0, 1024 * 4));
        CK(cudaMemset(ticket, 0, 4));
        CK(cudaMemset(turn, 0, 4));
        Host host{h, core};
        pthread_t th;
        pthread_create(&th, nullptr, responder, &host);
        k_probe<<<nsm * 2, 32>>>(dh, n, claimed, ticket, turn, smids, reads, rtt, nsm);
        CK(cudaDeviceSynchronize());
        h->ping = 0xffffffffu;
        pthread_join(th, nullptr);
        unsigned played = 0;
        CK(cudaMemcpy(&played, ticket, 4, cudaMemcpyDeviceToHost));
        printf("alloc %d host %p: %u SMs\n", a, (void *)h, played);
        std::vector<std::pair<unsigned long long, unsigned>> by;
        for (unsigned k = 0; k < played; k++) {
            std::vector<unsigned long long> v(rtt + (size_t)k * n + n / 10, rtt + (size_t)k * n + n);
            std::sort(v.begin(), v.end());
            printf("  sm %3u read %4llu ns  pingpong p50 %5llu p90 %5llu\n", smids[k], reads[k], v[v.size() / 2], v[v.size() * 9 / 10]);
        }
        CK(cudaFreeHost(h - a));
    }
    return 0;
}
