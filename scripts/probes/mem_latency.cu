/*
 * scripts/probes/mem_latency.cu — a measurement probe (not part of the data path): what one
 * dependent load costs a thread of a block launched as the transceiver launches its QEC stage
 * (nearly all the multiprocessor's shared memory taken, so its L1 is small), by the memory it
 * reads: shared memory through ld.shared, shared memory through a generic pointer (as the
 * clusters' work space is read), and local memory (a spilled register or a struct on the
 * stack), each with and without a fence.acq_rel.sys before it (the loop's acquire after a CQE
 * poll); and whether straight-line code run for the first time costs more than warm code
 * (instruction fetch). Chains of 64 dependent loads divided by 64; three repeats each.
 *
 *   nvcc -O3 -arch=sm_90 -o /tmp/mem_latency scripts/probes/mem_latency.cu && /tmp/mem_latency
 * Prints cycles per load (LDS, generic to static shared, generic to dynamic shared, LDL) for
 * 1 KiB and 200 KiB of dynamic shared memory, without and with the fence; then cycles per
 * 4 KiB of straight-line code, first run and two repeats, for 32, 96 and 256 KiB of code.
 */
#include <cstdint>
#include <cstdio>

#include "ck.h"

#define CHAIN 64
extern __shared__ uint32_t dyn_s[];

/** A chase through a generic pointer whose address space the compiler cannot see. */
__device__ __noinline__ uint32_t chase_generic(const uint32_t *p0, uint32_t i) {
    const uint32_t *p;
    asm volatile("mov.b64 %0, %1;" : "=l"(p) : "l"(p0));
#pragma unroll 1
    for (int k = 0; k < CHAIN; k++) i = p[i];
    return i;
}

__device__ __forceinline__ void fence_if(int fence) {
    if (fence) asm volatile("fence.acq_rel.sys;" ::: "memory");
}

__global__ void loads(long long *out, uint32_t *sink, int fence) {
    __shared__ uint32_t sh[256];
    volatile uint32_t loc[256]; /* every thread's: 128 KiB of stack for the block */
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        sh[i] = (i * 37 + 11) & 255;
        dyn_s[i] = (i * 53 + 7) & 255;
    }
    for (int i = 0; i < 256; i++) loc[i] = (i * 29 + 5) & 255;
    __syncthreads();
    if (threadIdx.x != 0) return;
    uint32_t i = 0;
    for (int rep = 0; rep < 3; rep++) {
        long long t0, t1;
        fence_if(fence);
        t0 = clock64();
#pragma unroll 1
        for (int k = 0; k < CHAIN; k++) i = ((volatile uint32_t *)sh)[i];
        t1 = clock64();
        out[rep * 4 + 0] = t1 - t0;
        fence_if(fence);
        t0 = clock64();
        i = chase_generic(sh, i & 255u);
        t1 = clock64();
        out[rep * 4 + 1] = t1 - t0;
        fence_if(fence);
        t0 = clock64();
        i = chase_generic(dyn_s, i & 255u);
        t1 = clock64();
        out[rep * 4 + 2] = t1 - t0;
        fence_if(fence);
        t0 = clock64();
#pragma unroll 1
        for (int k = 0; k < CHAIN; k++) i = loc[i & 255u];
        t1 = clock64();
        out[rep * 4 + 3] = t1 - t0;
    }
    sink[0] = i;
}

/* Straight-line code: chunks of 256 independent-free instructions (4 KiB), clock64 between. */
#define CODE_CHUNK 256
template <int I>
__device__ __forceinline__ void code_chunk(uint32_t &a) {
#pragma unroll
    for (int j = 0; j < CODE_CHUNK; j++) asm volatile("xor.b32 %0, %0, %1;" : "+r"(a) : "r"((uint32_t)(I * CODE_CHUNK + j + 1)));
}
template <int I, int N>
__device__ __forceinline__ void code_run(uint32_t &a, long long *t) {
    if constexpr (I < N) {
        t[I] = clock64();
        code_chunk<I>(a);
        code_run<I + 1, N>(a, t);
    } else {
        t[I] = clock64();
    }
}
template <int N>
__global__ void code(uint32_t *sink, long long *ts) {
    uint32_t a = threadIdx.x;
    long long t[N + 1];
    for (int r = 0; r < 3; r++) {
        code_run<0, N>(a, t);
        if (threadIdx.x == 0)
            for (int i = 0; i < N; i++) ts[r * N + i] = t[i + 1] - t[i];
    }
    sink[threadIdx.x] = a;
}
template <int N>
static void code_probe(uint32_t *sink, long long *ts) {
    code<N><<<1, 128>>>(sink, ts);
    CK(cudaDeviceSynchronize());
    printf("%3d KiB of code, cycles per 4 KiB chunk, median of the chunks:", N * 4);
    for (int r = 0; r < 3; r++) {
        long long v[N];
        for (int i = 0; i < N; i++) v[i] = ts[r * N + i];
        for (int i = 1; i < N; i++)
            for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                const long long x = v[j];
                v[j] = v[j - 1];
                v[j - 1] = x;
            }
        printf("  %s %lld (max %lld)", r == 0 ? "first run" : "repeat", v[N / 2], v[N - 1]);
    }
    printf("\n");
}

int main() {
    long long *o;
    uint32_t *g;
    CK(cudaMallocManaged(&o, 8 * 3 * 64));
    CK(cudaMalloc(&g, 4096));
    const int big = 200 * 1024;
    CK(cudaFuncSetAttribute(loads, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
    for (int fence = 0; fence < 2; fence++)
        for (int b = 0; b < 2; b++) {
            loads<<<1, 128, b ? big : 1024>>>(o, g, fence);
            CK(cudaDeviceSynchronize());
            printf("fence %d, dynamic shared %s: cycles a load (LDS, generic to static shared, generic to dynamic shared, LDL):", fence,
                   b ? "200 KiB" : "1 KiB");
            for (int r = 0; r < 3; r++)
                printf("  [%.0f %.0f %.0f %.0f]", o[r * 4] / (double)CHAIN, o[r * 4 + 1] / (double)CHAIN, o[r * 4 + 2] / (double)CHAIN,
                       o[r * 4 + 3] / (double)CHAIN);
            printf("\n");
        }
    code_probe<8>(g, o);
    code_probe<24>(g, o);
    code_probe<64>(g, o);
    return 0;
}
