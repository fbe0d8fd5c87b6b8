/*
 * kernels/stages/echo.cuh — the echo stage (PROTOCOLS.md 3): answers a CUQR request with a
 * CUQS response echoing request_id and ptp_timestamp, status 0, result = the request's
 * argument bytes. A request whose arg_len runs past what arrived is answered with status -1
 * (protocol error) and no result; one without the CUQR magic is dropped.
 *
 * The stage contract (full, warp, block and register forms) is in stage.cuh. The warp form
 * answers every request itself, so the block continuation is never called.
 */
#ifndef ROCELINK_STAGE_ECHO_CUH
#define ROCELINK_STAGE_ECHO_CUH

#include "../abi.h"
#include "stage.cuh"

/** What the answer is: its arg_len and status, from the request's header (every thread alike). */
__device__ __forceinline__ int rl_stage_echo_check(const uint8_t *req, int len, int cap, uint32_t *arg_len, int *status) {
    if (len < RL_RPC_HEADER_LEN) return -1;
    const uint32_t *h = (const uint32_t *)req; /* little-endian, 16-byte aligned */
    if (h[0] != RL_RPC_REQUEST_MAGIC) return -1;
    *arg_len = h[2];
    *status = 0;
    if ((uint64_t)*arg_len + RL_RPC_HEADER_LEN > (uint64_t)len || (int)*arg_len + RL_RPC_HEADER_LEN > cap) {
        *status = -1;
        *arg_len = 0;
    }
    return 0;
}

/** The answer's args (8-byte words from offset 24: both buffers 16-byte aligned), thread `t` of
 * `nt`, and its header by thread 0. */
__device__ __forceinline__ void rl_stage_echo_write(const uint8_t *req, uint8_t *resp, uint32_t arg_len, int status, uint32_t t, uint32_t nt) {
    const uint64_t *src = (const uint64_t *)(req + RL_RPC_HEADER_LEN);
    uint64_t *dst = (uint64_t *)(resp + RL_RPC_HEADER_LEN);
    const uint32_t words = (arg_len + 7) / 8;
    for (uint32_t i = t; i < words; i += nt) dst[i] = src[i];
    if (t == 0) {
        uint32_t *r = (uint32_t *)resp;
        r[0] = RL_RPC_RESPONSE_MAGIC;
        r[1] = (uint32_t)status;
        r[2] = arg_len;
        r[3] = ((const uint32_t *)req)[3];                     /* request_id */
        ((uint64_t *)resp)[2] = ((const uint64_t *)req)[2]; /* ptp_timestamp, bytes 16..23 */
    }
}

__device__ __forceinline__ int rl_stage_echo(const uint8_t *req, int len, uint8_t *resp, int cap) {
    uint32_t arg_len;
    int status;
    if (rl_stage_echo_check(req, len, cap, &arg_len, &status) < 0) return -1;
    rl_stage_echo_write(req, resp, arg_len, status, threadIdx.x, blockDim.x);
    __syncthreads();
    return RL_RPC_HEADER_LEN + (int)arg_len;
}

__device__ __forceinline__ int rl_stage_echo_warp(const uint8_t *req, int len, uint8_t *resp, int cap) {
    uint32_t arg_len;
    int status;
    if (rl_stage_echo_check(req, len, cap, &arg_len, &status) < 0) return -1;
    rl_stage_echo_write(req, resp, arg_len, status, threadIdx.x & 31u, 32u);
    __syncwarp();
    return RL_RPC_HEADER_LEN + (int)arg_len;
}

/** The register form: lane m holds request bytes [16m, 16m+16), `len` <= 256; on return the
 * answer in the same layout (lane 0 rewrites the header's first three words; the request id,
 * the timestamp and the args stay where they are). */
__device__ __forceinline__ int rl_stage_echo_regs(uint4 &c, int len) {
    const uint32_t magic = __shfl_sync(0xffffffffu, c.x, 0);
    uint32_t arg_len = __shfl_sync(0xffffffffu, c.z, 0);
    if (len < RL_RPC_HEADER_LEN || magic != RL_RPC_REQUEST_MAGIC) return -1;
    int status = 0;
    if ((uint64_t)arg_len + RL_RPC_HEADER_LEN > (uint64_t)len) {
        status = -1;
        arg_len = 0;
    }
    if ((threadIdx.x & 31u) == 0) {
        c.x = RL_RPC_RESPONSE_MAGIC;
        c.y = (uint32_t)status;
        c.z = arg_len;
    }
    return RL_RPC_HEADER_LEN + (int)arg_len;
}

/** Never called (the warp form answers every request); the full form, to keep the contract. */
__device__ __forceinline__ int rl_stage_echo_block(const uint8_t *req, int len, uint8_t *resp, int cap) {
    return rl_stage_echo(req, len, resp, cap);
}

#endif /* ROCELINK_STAGE_ECHO_CUH */
