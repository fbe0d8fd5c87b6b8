/*
 * kernels/transceiver/dispatch.cuh — the transceiver's stage dispatch (step 3 of
 * transceiver.cu): the generated chain (rl_chain.cuh, the forms of kernels/stages/stage.cuh)
 * run on a received request, in registers or by warp 0 in shared memory; the hand-over to the
 * block and the block's part; the idle forms between messages.
 *
 * Included by transceiver.cu after poll.cuh and answer.cuh.
 */

/* What warp 0 tells the block at a hand-over (RL_STAGE_TO_BLOCK) or at exit. */
struct rl_handover {
    uint32_t exit;
    int resume; /* the chain stage the block continues, or RL_BLOCK_LOAD */
    int rlen;   /* its input length (the message's, for RL_BLOCK_LOAD) */
    const uint8_t *src; /* RL_BLOCK_LOAD: the message in its slot */
};
/* rl_handover.resume: the block loads the message (longer than RL_WARP_LOAD) and runs the
 * whole chain */
#define RL_BLOCK_LOAD (-1)

/* Test hook (RL_TEST_STALL, the host's stall test): after a message, hang without a
 * heartbeat, so that the host's watchdog must end the run. */
__device__ __forceinline__ void rl_test_stall(void) {
#ifdef RL_TEST_STALL
    for (;;) {
        if (rl_globaltimer() == 0) break;
    }
#endif
}

/* Warp 0, after a message's answer: the chain's idle forms (kernels/stages/stage.cuh), unless
 * messages queue (this one was there at its poll's first read): their time then comes out of
 * the wait for the next message, not out of a waiting message's. */
__device__ __forceinline__ void rl_idle(const struct rl_loop &L, const struct rl_transceiver_desc &d) {
#if RL_CHAIN_IDLE
    if (!L.busy) rl_run_chain_idle((void *)d.stage_state);
#else
    (void)L;
    (void)d;
#endif
}

/* Warp 0, a request rl_receive returned (RL_GOT_REQUEST): the chain on it, then its answer
 * (rl_answer) and the idle forms. In registers when every stage has a register form and the
 * poll's read holds the whole request (L.in_regs); else the warp forms on `req` (into `resp`).
 * Returns 1 when a stage hands the request to the block (`h` says where it resumes), 0 when
 * it was answered or dropped. */
__device__ __forceinline__ uint32_t rl_dispatch_warp(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl,
                                                     uint8_t *req, uint8_t *resp, struct rl_handover &h, struct rl_prepoll *pp,
                                                     uint32_t &have_pre, uint32_t lane) {
#if RL_CHAIN_REGS
    if (L.in_regs) {
        /* 3+4 in registers: lane m takes the request's bytes 16m.. from the lane of the poll's
         * read that holds them (lanes 0..15 matter: <= 256 bytes). (in_regs is never 3 here; the
         * test stays: without it the compiler schedules the whole loop otherwise, unmeasured.) */
        uint4 c = L.v;
        if (L.in_regs != 3) {
            const uint32_t src = ((L.in_regs == 1 ? 4u : 0u) + lane) & 31u;
            c.x = __shfl_sync(0xffffffffu, L.v.x, src);
            c.y = __shfl_sync(0xffffffffu, L.v.y, src);
            c.z = __shfl_sync(0xffffffffu, L.v.z, src);
            c.w = __shfl_sync(0xffffffffu, L.v.w, src);
        }
        rl_consumed(L, d, c.w, pp, have_pre, lane);
        const int rn = rl_run_chain_regs(c, (int)L.len);
        RL_PMARK(4);
#if RL_MAX_INLINE >= 256
        /* a register form's answer is at most 256 bytes (stage.cuh): it goes inline */
        rl_answer(L, d, ctl, rn, 0, lane, 1, c);
#else
        if (rn <= RL_MAX_INLINE) {
            rl_answer(L, d, ctl, rn, 0, lane, 1, c);
        } else {
            /* too long to go inline in this build: the answer goes to shared memory and out
             * through a TX slot */
            if (lane < 16) *(uint4 *)(resp + lane * 16) = c;
            __syncwarp();
            rl_answer(L, d, ctl, rn, resp, lane);
        }
#endif
        rl_idle(L, d);
        return 0;
    }
#endif
    rl_consumed(L, d, ((const uint32_t *)req)[3], pp, have_pre, lane);
    const uint8_t *answer = 0;
    int resume = 0, rlen = 0;
    const int n = L.valid ? rl_run_chain_warp(req, (int)L.len, resp, RL_MAX_MSG, &answer, (void *)d.stage_state, &resume, &rlen) : -1;
    if (n == RL_STAGE_TO_BLOCK) {
        if (lane == 0) {
            h.exit = 0;
            h.resume = resume;
            h.rlen = rlen;
        }
        return 1;
    }
    RL_PMARK(4);
    rl_answer(L, d, ctl, n, answer, lane);
    rl_idle(L, d);
    return 0;
}

/* Every thread of the block, after warp 0's hand-over `h` and a block barrier: loads a long
 * message (RL_BLOCK_LOAD; warp 0 then takes it as consumed) and runs the whole chain, or runs
 * a stage's block continuation and the rest of the chain; warp 0 answers. The chain's stages
 * end with a block barrier: the answer is the block's, and nothing of the block's is left in
 * `req` or `resp` when warp 0 goes back to polling. */
__device__ __forceinline__ void rl_dispatch_block(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl, uint8_t *req,
                                                  uint8_t *resp, const struct rl_handover &h, struct rl_prepoll *pp, uint32_t &have_pre,
                                                  uint32_t tid, uint32_t lane) {
    const uint8_t *answer = 0;
    int n;
    if (h.resume == RL_BLOCK_LOAD) {
        /* 2, the block's part: every thread loads its chunks of a long message, all in flight */
        rl_load<RL_BLOCK_CHUNKS>(req, h.src, (uint32_t)h.rlen, tid, RL_THREADS);
        __syncthreads();
        if (tid < 32) rl_consumed(L, d, ((const uint32_t *)req)[3], pp, have_pre, lane);
        n = rl_run_chain(req, h.rlen, resp, RL_MAX_MSG, &answer, (void *)d.stage_state);
    } else {
        /* 3, the block's part: a stage's continuation, then the rest of the chain */
        n = rl_run_chain_block(req, resp, RL_MAX_MSG, &answer, (void *)d.stage_state, h.resume, h.rlen);
    }
    RL_PMARK(4);
    if (tid < 32) {
        rl_answer(L, d, ctl, n, answer, lane);
        rl_idle(L, d);
    }
}
