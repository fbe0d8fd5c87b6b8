/*
 * kernels/stages/echo.cuh — the echo stage (PROTOCOLS.md 3): answers a CUQR request with a
 * CUQS response echoing request_id and ptp_timestamp, status 0, result = the request's
 * argument bytes. A request whose arg_len runs past what arrived is answered with status -1
 * (protocol error) and no result; one without the CUQR magic is dropped.
 *
 * Contract of every device stage: called by all threads of the block with the request in
 * shared memory (`req`, `len` bytes, 16-byte aligned) and an output buffer (`resp`, `cap`
 * bytes, 16-byte aligned, shared memory); returns the answer length, or -1 to drop, the same
 * value in every thread; it ends with the answer complete and visible to the whole block.
 */
#ifndef ROCELINK_STAGE_ECHO_CUH
#define ROCELINK_STAGE_ECHO_CUH

#include "../abi.h"

#define RL_RPC_REQUEST_MAGIC 0x43555152u
#define RL_RPC_RESPONSE_MAGIC 0x43555153u
#define RL_RPC_HEADER_LEN 24

__device__ __forceinline__ int rl_stage_echo(const uint8_t *req, int len, uint8_t *resp, int cap) {
    if (len < RL_RPC_HEADER_LEN) return -1;
    const uint32_t *h = (const uint32_t *)req;   /* little-endian, 16-byte aligned */
    if (h[0] != RL_RPC_REQUEST_MAGIC) return -1;
    uint32_t arg_len = h[2];
    int status = 0;
    if ((uint64_t)arg_len + RL_RPC_HEADER_LEN > (uint64_t)len || (int)arg_len + RL_RPC_HEADER_LEN > cap) {
        status = -1;
        arg_len = 0;
    }
    /* args: 8-byte words from offset 24 (both buffers 16-byte aligned, so 8-byte aligned here) */
    const uint64_t *src = (const uint64_t *)(req + RL_RPC_HEADER_LEN);
    uint64_t *dst = (uint64_t *)(resp + RL_RPC_HEADER_LEN);
    uint32_t words = (arg_len + 7) / 8;
    for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
    if (threadIdx.x == 0) {
        uint32_t *r = (uint32_t *)resp;
        r[0] = RL_RPC_RESPONSE_MAGIC;
        r[1] = (uint32_t)status;
        r[2] = arg_len;
        r[3] = h[3];                         /* request_id */
        ((uint64_t *)resp)[2] = ((const uint64_t *)req)[2]; /* ptp_timestamp, bytes 16..23 */
    }
    __syncthreads();
    return RL_RPC_HEADER_LEN + (int)arg_len;
}

#endif /* ROCELINK_STAGE_ECHO_CUH */
