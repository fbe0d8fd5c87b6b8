/*
 * kernels/qec_batch.cu — offline batch decoding on the GPU (`rocelink decode --backend gpu`;
 * host half: operator/src/gpu/qec_batch.rs).
 *
 * Each shot is one CUQR `enqueue_syndromes` request built on the host (every detection bit of
 * the shot in one message, counter 0), decoded by `rl_stage_qec` (kernels/stages/qec.cuh) —
 * the very stage the persistent transceiver kernel runs — so the predictions equal the CPU
 * decoder's bit for bit.
 *
 * Launch: `gridDim.x` blocks of `blockDim.x` threads (a multiple of 32). Block b handles
 * requests b, b + gridDim.x, b + 2 gridDim.x, ... in order; the host names decoder id
 * `i % decoders` in request i, with `gridDim.x == decoders` or `count <= gridDim.x`, so each
 * decoder id (its shot assembly and counters in the state blob) is used by one block only.
 *
 * Per request, as the transceiver's chain calls a stage (the stage contract at the top of
 * qec.cuh): the request is staged in 16-byte aligned shared memory, every thread calls the
 * stage, and the answer (CUQS header, correction bits, 16-byte decode report; 48 bytes for
 * up to 64 observables) is copied to `outs[i * RL_BATCH_OUT ..]` with its length (or -1, not
 * answered) in `out_lens[i]`. A request longer than RL_BATCH_MAX_REQ is not decoded
 * (out_lens = -2): the host never builds one (at most 56 + 3584 / 8 = 504 bytes).
 */
#include "abi.h"
#include "stages/qec.cuh"

/* The longest request: 24-byte header + 32 fixed argument bytes + RL_QEC_MAX_DETECTORS / 8. */
#define RL_BATCH_MAX_REQ 512
/* Bytes of answer buffer and of each answer's slot in `outs`. */
#define RL_BATCH_OUT 64

extern "C" __global__ void rl_qec_batch(const uint8_t *reqs, uint32_t stride, uint32_t len, uint32_t count,
                                        uint8_t *outs, int32_t *out_lens, void *state) {
    __shared__ __align__(16) uint8_t in[RL_BATCH_MAX_REQ];
    __shared__ __align__(16) uint8_t out[RL_BATCH_OUT];
    if (len > RL_BATCH_MAX_REQ || len > stride) {
        for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) out_lens[i] = -2;
        return;
    }
    for (uint32_t i = blockIdx.x; i < count; i += gridDim.x) {
        const uint8_t *src = reqs + (size_t)i * stride;
        for (uint32_t b = threadIdx.x; b < len; b += blockDim.x) in[b] = src[b];
        __syncthreads();
        const int n = rl_stage_qec(in, (int)len, out, RL_BATCH_OUT, state);
        for (int b = (int)threadIdx.x; b < n && b < RL_BATCH_OUT; b += (int)blockDim.x) outs[(size_t)i * RL_BATCH_OUT + b] = out[b];
        if (threadIdx.x == 0) out_lens[i] = n;
        /* `in` and `out` are rewritten for the next request only after every thread is done */
        __syncthreads();
    }
}
