/*
 * kernels/transceiver.cu — the persistent transceiver kernel (DESIGN.md, "The data path").
 *
 * Launched once with one block; runs until the host sets rl_control.exit_flag. Per message:
 *   1+2. (RL_POLL_MODE 3, the default) warp 0 polls with one load instruction per iteration
 *      the whole receive CQE line and, when the last message was 33..RL_SPEC_BYTES bytes, the
 *      first bytes of the slot the peer should write next (peers cycle their slots in order);
 *      the exit flag is read every RL_EXIT_POLL_EVERY idle polls (PERF.md: every extra poller
 *      or dependent read of host memory costs ~1 us). Words of that read which may predate
 *      the NIC's write are trusted only when they no longer hold the poison the kernel wrote
 *      there after consuming the message before (abi.h RL_SPEC_POISON); otherwise, and for a
 *      mispredicted slot or a longer message, one more round of loads, all in flight.
 *      (RL_POLL_MODE 0: thread 0 polls the owner byte alone; after the acquire fence one
 *      round loads the CQE and the predicted slot: two PCIe rounds per message.)
 *      While messages queue up, the poller warp issues the next message's read while this
 *      one is processed (RL_PREPOLL), so back to back a poll costs no round trip of its own.
 *   3. the fused stage chain (generated from the graph into rl_chain.cuh) turns the request
 *      into the answer in shared memory;
 *   4. answers up to RL_MAX_INLINE bytes go out as an inline SEND written by warp 0 (one store
 *      per lane, warp barriers only), larger ones are copied to the TX slot and gathered;
 *      release fence, doorbell record, CPU-proxy doorbell;
 *   5. re-post the receive (doorbell record), consume the CQE, stamp the message.
 * Every write to host memory after the poll is a posted write: no second read on the way out.
 * Measured variants and their figures: latency-reports/README.md.
 */
#include "abi.h"
#include "verbs.cuh"
#include "rl_chain.cuh" /* generated: includes the stages, defines rl_run_chain */

/* RL_PROFILE: the timestamp record's two profile words are the data path's clock at marks
 * RL_PROFILE_A and RL_PROFILE_B (default 3 and 6: request loaded, answer written) less the
 * CQE-seen time. Marks, in thread 0: 1 the block past the poll's barrier, 2 warp 0 done
 * taking the message apart, 3 request loaded, 4 the stage chain returned, 5 send slots
 * reserved, 6 answer written (before the doorbell's fence). Measurement only. */
#ifndef RL_PROFILE_A
#define RL_PROFILE_A 3
#endif
#ifndef RL_PROFILE_B
#define RL_PROFILE_B 6
#endif
#ifdef RL_PROFILE
#define RL_PMARK(i)                                                    \
    do {                                                               \
        if ((i) == RL_PROFILE_A) t_loaded = rl_globaltimer();          \
        if ((i) == RL_PROFILE_B) t_written = rl_globaltimer();         \
    } while (0)
#else
#define RL_PMARK(i) \
    do {            \
    } while (0)
#endif

#ifndef RL_THREADS
#define RL_THREADS 128
#endif
#ifndef RL_MAX_MSG
#define RL_MAX_MSG 4096
#endif
#ifndef RL_MAX_INLINE
#define RL_MAX_INLINE 256
#endif
/* RL_POLL_MODE 3: the warp that polls, and whether it issues the next message's polling read
 * while the current one is processed (RL_PREPOLL): then, back to back (the next CQE already
 * written), the poll costs no PCIe round trip of its own. Warp 1, so that the loads it leaves
 * in flight are not in front of thread 0's fences. */
#ifndef RL_POLL_WARP
#define RL_POLL_WARP (RL_THREADS >= 64 ? 1 : 0)
#endif
#ifndef RL_PREPOLL
#define RL_PREPOLL (RL_POLL_WARP == 1)
#endif

/* 16-byte chunks each thread loads for one message */
#define RL_CHUNKS ((RL_MAX_MSG + RL_THREADS * 16 - 1) / (RL_THREADS * 16))

struct rl_msg_state {
    uint64_t t_seen;
    uint32_t exit;
    uint32_t ci;
    uint32_t predicted;  /* slot loaded speculatively */
    uint32_t loaded;     /* bytes of it loaded */
    uint32_t slot;
    uint32_t len;
    uint32_t valid;
    uint32_t reload;
    uint32_t sq_index;   /* first WQEBB of the answer */
    uint32_t fm_ce_se;
    uint32_t ci_next;    /* RL_POLL_MODE 3: the CQE index to poll next (thread 0 keeps rcq.ci) */
    uint32_t spec;       /* RL_POLL_MODE 3: slots are long enough to speculate on */
    uint32_t spec_chunks; /* RL_POLL_MODE 3: 16-byte chunks of the predicted slot this poll reads */
    uint32_t busy;       /* RL_POLL_MODE 3: the last message was there at its poll's first read */
    __align__(16) uint8_t cqe[64]; /* the receive CQE, read after its owner byte */
};

/* RL_POLL_MODE 3: the chunks of the predicted slot to read with the CQE, from the size of
 * the last message: none when it came in the CQE (polling its slot too would only slow the
 * NIC's write of it, measured) or when it was longer than RL_SPEC_BYTES (it would be read
 * again anyway). */
__device__ __forceinline__ uint32_t rl_spec_chunks(uint32_t spec, uint32_t last_len) {
    return spec && last_len > RL_CQE_INLINE_MAX && last_len <= RL_SPEC_BYTES ? (last_len + 15) / 16 : 0;
}

/* RL_POLL_MODE 3: a word of the speculated bytes is fresh when it no longer holds the poison
 * (abi.h RL_SPEC_POISON; in the last word only the bytes below the length count). The NIC
 * writes each aligned word of a message with one store and a read of host memory returns
 * each aligned word whole, so a word is either the NIC's or the poison; a message word that
 * equals the poison by chance only costs a second read. Warp 0 checks one word per lane. */

/* Loads `len` bytes at `src` (host memory) into `dst` (shared) with every thread, and, in the
 * last four threads, the 64-byte CQE at `cqe` into `cqe_dst` (shared). Every load is issued
 * before the first store that uses one, so they are all in flight together: a warp that stored
 * a loaded value before issuing its next load would wait a PCIe round trip per load. */
__device__ __forceinline__ void rl_load_round(uint8_t *dst, const uint8_t *src, uint32_t len, uint8_t *cqe_dst, const uint8_t *cqe) {
    uint4 r[RL_CHUNKS];
    uint4 c = make_uint4(0, 0, 0, 0);
    const uint32_t cq_lane = threadIdx.x - (RL_THREADS - 4); /* 0..3 in the last four threads */
    if (cqe != 0 && cq_lane < 4) c = rl_ld16_data(cqe + cq_lane * 16);
#pragma unroll
    for (int k = 0; k < RL_CHUNKS; k++) {
        uint32_t off = (k * RL_THREADS + threadIdx.x) * 16;
        if (off < len) r[k] = rl_ld16_data(src + off);
    }
    if (cqe != 0 && cq_lane < 4) *(uint4 *)(cqe_dst + cq_lane * 16) = c;
#pragma unroll
    for (int k = 0; k < RL_CHUNKS; k++) {
        uint32_t off = (k * RL_THREADS + threadIdx.x) * 16;
        if (off < len) *(uint4 *)(dst + off) = r[k];
    }
}

extern "C" __global__ void __launch_bounds__(RL_THREADS, 1) rl_transceiver(struct rl_transceiver_desc d) {
    __shared__ __align__(16) uint8_t buf_a[RL_MAX_MSG];
    __shared__ __align__(16) uint8_t buf_b[RL_MAX_MSG];
    __shared__ struct rl_msg_state m;
    const uint32_t tid = threadIdx.x;
    struct rl_control *ctl = (struct rl_control *)d.control;

    /* Queue state lives in thread 0's registers. */
    struct rl_dev_cq rcq = {(uint8_t *)d.rcq.ring, (uint32_t *)d.rcq.dbrec, d.rcq.entries, 0};
    struct rl_dev_cq scq = {(uint8_t *)d.scq.ring, (uint32_t *)d.scq.dbrec, d.scq.entries, 0};
    struct rl_dev_sq sq = {(uint8_t *)d.sq.ring, (uint32_t *)d.sq.dbrec, (uint32_t *)d.proxy_doorbell, 0, d.sq.entries, d.qpn, 0, 0};
    struct rl_dev_rq rq = {(uint8_t *)d.rq.ring, (uint32_t *)d.rq.dbrec, d.rq.entries, 0};
    uint64_t idle = 0, heartbeat = 0, processed = 0;
    uint32_t dropped = 0, send_errors = 0, next_slot = 0, last_len = 64;
    /* signal_every (S below) is a power of two (rings.rs checks it): shifts, not two runtime
     * integer divisions in front of every doorbell (profile mark 5: 0.77 -> 0.70 us) */
    const uint32_t SH = 31u - (uint32_t)__clz(d.signal_every | 1u);
    uint4 tail = make_uint4(0, 0, 0, 0);
    uint4 pre = make_uint4(0, 0, 0, 0); /* RL_PREPOLL: the poller lane's read of the next message */
    uint32_t have_pre = 0;

    if (tid == 0) {
        /* the host posted the receive queue before the launch */
        rq.pi = rl_bswap32(rl_ld32_sys(rq.dbrec)) & 0xffff;
        rl_st32_sys(&ctl->state, RL_STATE_RUNNING);
        m.ci_next = 0;
        m.predicted = 0;
        m.busy = 0;
        /* one slot only: the next message's slot is the one being consumed */
        m.spec = d.rx_slot_stride >= RL_SPEC_BYTES && d.rx_slots >= 2;
        m.spec_chunks = rl_spec_chunks(m.spec, last_len);
    }
    __syncthreads();
    for (;;) {
#ifdef RL_PROFILE
        uint64_t t_loaded = 0, t_written = 0;
#endif
#if RL_POLL_MODE == 3
        /* 1+2 in one PCIe round (abi.h RL_SPEC_BYTES): warp 0 polls with one instruction the
         * whole CQE line (lanes 0..3) and the first RL_SPEC_BYTES of the slot the peer should
         * write next (lanes 4..), straight into the request buffer. When the owner byte says
         * the CQE is new, its 16-byte chunk (bytes 48..63: owner, timestamp, wqe counter) is
         * this CQE's, since the NIC writes op_own last; every other word may predate the NIC's
         * write and is trusted only when it no longer holds the poison. */
        if (tid / 32 == RL_POLL_WARP) {
            const uint32_t lane = tid % 32;
            const uint32_t ci = m.ci_next, pslot = m.predicted;
            const uint8_t *src = lane < 4 ? rcq.ring + (size_t)(ci & (rcq.entries - 1)) * RL_CQE_SIZE + lane * 16
                                          : (const uint8_t *)d.rx_buffer + (size_t)pslot * d.rx_slot_stride + (lane - 4) * 16;
            const uint32_t loads = lane < 4 + m.spec_chunks;
            const uint32_t parity = (ci / rcq.entries) & 1;
            uint32_t quit = 0, reads = 0;
            uint4 v = pre;
            for (;;) {
                if (loads && !have_pre) v = rl_ld16_sys(src);
                have_pre = 0;
                ++reads;
                const uint32_t own = __shfl_sync(0xffffffffu, v.w, 3) >> 24;
                if ((own >> 4) != RL_CQE_INVALID && (own & RL_CQE_OWNER_MASK) == parity) break;
                if (lane == 0) {
                    ++idle;
                    if ((idle % RL_EXIT_POLL_EVERY) == 0 && rl_ld32_sys(&ctl->exit_flag) != 0) quit = 1;
                    if ((idle % RL_HEARTBEAT_EVERY) == 0) rl_st64_sys(&ctl->heartbeat, ++heartbeat);
                }
                if (__shfl_sync(0xffffffffu, quit, 0)) break;
            }
            if (lane < 4)
                *(uint4 *)(m.cqe + lane * 16) = v;
            else if (loads)
                *(uint4 *)(buf_a + (lane - 4) * 16) = v;
            if (lane == 0) {
                rl_fence_acquire_sys();
                m.t_seen = rl_globaltimer();
                m.exit = quit;
                m.ci = ci;
                /* the message was already there at the first read: messages are queueing */
                m.busy = reads == 1;
            }
        }
        __syncthreads();
        if (m.exit) break;
        RL_PMARK(1);
        const uint8_t *cqe = rcq.ring + (size_t)(m.ci & (rcq.entries - 1)) * RL_CQE_SIZE;
        if (tid < 32) {
            /* Warp 0 takes the message apart (warp-synchronous: no block barrier), each lane
             * checking one word of the speculated bytes against the poison. */
            const uint32_t lane = tid;
            /* the immediate and the byte count: this CQE's unless poisoned; then bytes 0..47
             * are read again (after the poller's acquire fence: the barrier above) */
            const uint4 mid0 = *(const uint4 *)(m.cqe + 32);
            const uint32_t recqe = mid0.y == RL_SPEC_POISON || mid0.w == RL_SPEC_POISON;
            if (recqe && lane < 3) *(uint4 *)(m.cqe + lane * 16) = rl_ld16_sys(cqe + lane * 16);
            __syncwarp();
            const uint4 t4 = *(const uint4 *)(m.cqe + 48);
            const uint4 mid = *(const uint4 *)(m.cqe + 32);
            const uint32_t op_own = t4.w >> 24;
            const uint32_t imm = rl_bswap32(mid.y);
            const uint32_t len = rl_bswap32(mid.w);
            const uint32_t slot = imm & 0xfff;
            const uint32_t inl = (op_own & RL_CQE_INLINE_SCATTER_32) != 0 && len <= RL_CQE_INLINE_MAX;
            const uint32_t valid = (op_own >> 4) == RL_CQE_RESP_WR_IMM && slot < d.rx_slots && len <= d.rx_slot_stride && len <= RL_MAX_MSG;
            /* one word per lane: the inline bytes (<= 32) or the speculated slot bytes
             * (<= RL_SPEC_BYTES = 32 words) */
            uint32_t poisoned = 0;
            if (lane * 4 < len && lane < RL_SPEC_BYTES / 4) {
                const uint32_t w = ((const uint32_t *)(inl ? m.cqe : buf_a))[lane];
                const uint32_t left = len - lane * 4;
                const uint32_t keep = left >= 4 ? 0xffffffffu : (1u << (8 * left)) - 1u;
                poisoned = ((w ^ RL_SPEC_POISON) & keep) == 0;
            }
            const uint32_t stale = __any_sync(0xffffffffu, poisoned);
            if (lane == 0) {
                tail = t4;
                m.valid = valid;
                m.slot = slot;
                m.len = len;
                m.reload = 0;
                if (valid && inl) {
                    /* the bytes from the CQE; read again (after the fence) when still poisoned */
                    if (!recqe && stale) {
                        *(uint4 *)(m.cqe) = rl_ld16_sys(cqe);
                        *(uint4 *)(m.cqe + 16) = rl_ld16_sys(cqe + 16);
                    }
                    *(uint4 *)buf_a = *(uint4 *)m.cqe;
                    *(uint4 *)(buf_a + 16) = *(uint4 *)(m.cqe + 16);
                } else if (valid) {
                    /* the speculated bytes are the message's when the slot and the size fit
                     * and no word in it still holds the poison; else one more round */
                    m.reload = !(slot == m.predicted && len <= m.spec_chunks * 16 && len >= 4 && !stale);
                }
                if (valid) {
                    next_slot = slot + 1 == d.rx_slots ? 0 : slot + 1;
                    last_len = len;
                }
                /* what the next poll reads (the prediction above used the old values) */
                m.ci_next = m.ci + 1;
                m.predicted = next_slot;
                m.spec_chunks = rl_spec_chunks(m.spec, last_len);
            }
            RL_PMARK(2);
        }
        __syncthreads();
        if (m.reload) {
            rl_load_round(buf_a, (const uint8_t *)d.rx_buffer + (size_t)m.slot * d.rx_slot_stride, m.len, 0, 0);
            __syncthreads();
        }
#if RL_PREPOLL
        /* While messages queue up (this one was there at the first read), the next message's
         * polling read, left in flight through this one (nothing here uses `pre` before the
         * next poll): back to back, the poll then costs no PCIe round trip of its own (open
         * loop at 400k messages/s: +44% throughput). Not in a closed loop, where it would
         * find nothing and cost ~0.2 us (measured). Its CQE and slot were poisoned when last
         * consumed (entries and slots messages ago), so it is checked exactly like a poll's
         * read. */
        if (m.busy && tid / 32 == RL_POLL_WARP) {
            const uint32_t lane = tid % 32;
            const uint8_t *src = lane < 4 ? rcq.ring + (size_t)(m.ci_next & (rcq.entries - 1)) * RL_CQE_SIZE + lane * 16
                                          : (const uint8_t *)d.rx_buffer + (size_t)m.predicted * d.rx_slot_stride + (lane - 4) * 16;
            if (lane < 4 + m.spec_chunks) pre = rl_ld16_sys(src);
            have_pre = 1;
        }
#endif
        RL_PMARK(3);
        /* Everything read from the CQE and the slot is in shared memory now: poison what the
         * next speculative read of them may see (posted writes, ordered before the answer's
         * doorbell by its release fence, or before the re-post by the fence in step 5). */
#ifndef RL_EXPERIMENT_NO_POISON /* measurement only (unsafe): what the poison stores cost the doorbell's fence */
        {
            /* the block's last threads: lanes of warp 0 may be writing the answer soon */
            const uint4 poison = make_uint4(RL_SPEC_POISON, RL_SPEC_POISON, RL_SPEC_POISON, RL_SPEC_POISON);
            const uint32_t k = tid - (RL_THREADS - RL_SPEC_CQE_BYTES / 16 - RL_SPEC_BYTES / 16);
            if (k < RL_SPEC_CQE_BYTES / 16)
                rl_st16_sys((uint8_t *)cqe + k * 16, poison);
            else if (m.spec && m.valid && k < RL_SPEC_CQE_BYTES / 16 + RL_SPEC_BYTES / 16) /* every slot: any may be speculated on later */
                rl_st16_sys((uint8_t *)d.rx_buffer + (size_t)m.slot * d.rx_slot_stride + (k - RL_SPEC_CQE_BYTES / 16) * 16, poison);
        }
#endif
#else
        /* 1. poll */
        if (tid == 0) {
            m.exit = 0;
            for (;;) {
                if (rl_dev_verbs_poll_cq_at(&rcq, rcq.ci, &tail)) break;
                ++idle;
                if ((idle % RL_EXIT_POLL_EVERY) == 0 && rl_ld32_sys(&ctl->exit_flag) != 0) {
                    m.exit = 1;
                    break;
                }
                if ((idle % RL_HEARTBEAT_EVERY) == 0) rl_st64_sys(&ctl->heartbeat, ++heartbeat);
            }
            m.t_seen = rl_globaltimer();
            m.ci = rcq.ci;
            m.predicted = next_slot;
            uint32_t want = (last_len + 15) & ~15u;
            m.loaded = want < d.rx_slot_stride ? want : d.rx_slot_stride;
            if (m.loaded > RL_MAX_MSG) m.loaded = RL_MAX_MSG;
        }
        __syncthreads();
        if (m.exit) break;

        /* 2. the CQE (its immediate, byte count, inline bytes, NIC timestamp) and the predicted
         * slot, all in flight in one round */
        const uint8_t *cqe = rcq.ring + (size_t)(m.ci & (rcq.entries - 1)) * RL_CQE_SIZE;
        rl_load_round(buf_a, (const uint8_t *)d.rx_buffer + (size_t)m.predicted * d.rx_slot_stride, m.loaded, m.cqe, cqe);
        __syncthreads();
        RL_PMARK(3);
        if (tid == 0) {
            tail = *(uint4 *)(m.cqe + 48);
            uint4 mid = *(uint4 *)(m.cqe + 32);
            uint32_t op_own = tail.w >> 24;
            uint32_t imm = rl_bswap32(mid.y);
            uint32_t len = rl_bswap32(mid.w);
            uint32_t slot = imm & 0xfff;
            uint32_t inl = (op_own & RL_CQE_INLINE_SCATTER_32) != 0 && len <= RL_CQE_INLINE_MAX;
            m.valid = (op_own >> 4) == RL_CQE_RESP_WR_IMM && slot < d.rx_slots && len <= d.rx_slot_stride && len <= RL_MAX_MSG;
            m.slot = slot;
            m.len = len;
            m.reload = m.valid && !inl && (slot != m.predicted || len > m.loaded);
            if (m.valid) {
                next_slot = slot + 1 == d.rx_slots ? 0 : slot + 1;
                last_len = len;
            }
            if (m.valid && inl) {
                /* take the bytes from the CQE: they came with the same read round */
                *(uint4 *)buf_a = *(uint4 *)m.cqe;
                *(uint4 *)(buf_a + 16) = *(uint4 *)(m.cqe + 16);
            }
        }
        __syncthreads();
        if (m.reload) {
            rl_load_round(buf_a, (const uint8_t *)d.rx_buffer + (size_t)m.slot * d.rx_slot_stride, m.len, 0, 0);
            __syncthreads();
        }

#endif
#ifdef RL_TEST_STALL
        /* test hook (ROCELINK_TEST_STALL_KERNEL): hang without a heartbeat */
        if (tid == 0) {
            for (;;) {
                if (rl_globaltimer() == 0) break;
            }
        }
        __syncthreads();
#endif
        /* 3. the fused stage chain */
        const uint8_t *answer = 0;
        int n = m.valid ? rl_run_chain(buf_a, (int)m.len, buf_b, RL_MAX_MSG, &answer, (void *)d.stage_state) : -1;

        RL_PMARK(4);
        /* 4. answer */
        if (n >= 0) {
            uint32_t nbb = n <= RL_MAX_INLINE ? rl_dev_verbs_inline_wqebbs((uint32_t)n) : 1;
            if (tid == 0) {
                long long first;
                while ((first = rl_dev_verbs_reserve_wq_slots(&sq, nbb)) < 0) {
                    rl_dev_verbs_poll_send_cq(&sq, &scq, &send_errors);
                    /* a send CQE reports its WQE's first WQEBB; the WQE crossed a multiple of S,
                     * so everything below that multiple is done */
                    sq.done = sq.done == 0 ? 0 : (((sq.done - 1) >> SH) + 1) << SH;
                    if (sq.done > sq.pi) sq.done = sq.pi;
                }
                m.sq_index = (uint32_t)first;
                uint32_t end = (uint32_t)first + nbb;
                m.fm_ce_se = (end >> SH != (uint32_t)first >> SH) ? RL_WQE_CTRL_CQ_UPDATE : 0;
            }
            RL_PMARK(5);
            if (n <= RL_MAX_INLINE) {
                /* Warp 0 alone writes an inline answer: warp barriers, not block barriers (the
                 * stage's closing barrier already ordered the other warps' poison stores before
                 * this, and so before the doorbell's release fence). */
                if (tid < 32) {
                    __syncwarp(); /* thread 0's m.sq_index and m.fm_ce_se */
                    rl_dev_verbs_wqe_prepare_send_inline_warp(&sq, m.sq_index, m.fm_ce_se, answer, (uint32_t)n);
                    __syncwarp(); /* every lane's WQE stores precede the doorbell */
                }
            } else {
                __syncthreads();
                uint8_t *txs = (uint8_t *)d.tx_buffer + (size_t)(m.sq_index & (d.sq.entries - 1)) * d.tx_slot_stride;
                for (uint32_t off = tid * 16; off < (uint32_t)n; off += RL_THREADS * 16) rl_st16_sys(txs + off, *(const uint4 *)(answer + off));
                if (tid == 0) {
                    uint64_t iova = d.tx_buffer_iova + (uint64_t)(m.sq_index & (d.sq.entries - 1)) * d.tx_slot_stride;
                    rl_dev_verbs_wqe_prepare_send(&sq, m.sq_index, m.fm_ce_se, iova, d.tx_lkey, (uint32_t)n);
                }
                __syncthreads(); /* every thread's WQE and payload stores precede the doorbell */
            }
            RL_PMARK(6);
            if (tid == 0) rl_dev_verbs_submit_proxy(&sq);
        }

#if RL_POLL_MODE == 3
        if (n < 0) __syncthreads(); /* (n is the same in every thread) the poison stores precede the fence in step 5 */
#endif
        /* 5. re-post, consume, stamp (all posted writes, off the answer's path) */
        if (tid == 0) {
            uint64_t t_db = rl_globaltimer();
#if RL_POLL_MODE == 3
            /* no answer, so no doorbell fence: order the poison before the re-post here */
            if (n < 0) rl_fence_release_sys();
#endif
            rl_dev_verbs_post_recv(&rq, 1);
            rcq.ci++;
            rl_dev_verbs_cq_update_ci(&rcq);
            if (n >= 0) {
                if (d.timestamps != 0 && d.timestamp_entries != 0) {
                    struct rl_msg_timestamp *ts = (struct rl_msg_timestamp *)d.timestamps + (processed & (d.timestamp_entries - 1));
                    uint4 a, b, c;
                    a.x = (uint32_t)m.t_seen;
                    a.y = (uint32_t)(m.t_seen >> 32);
                    a.z = (uint32_t)t_db;
                    a.w = (uint32_t)(t_db >> 32);
                    /* the CQE's timestamp (bytes 48..55, BE): the NIC's clock */
                    b.x = rl_bswap32(tail.y);
                    b.y = rl_bswap32(tail.x);
                    b.z = ((const uint32_t *)buf_a)[3]; /* request_id */
                    b.w = m.slot;
                    c.x = m.len;
                    c.y = m.sq_index;
#ifdef RL_PROFILE
                    c.z = (uint32_t)(t_loaded - m.t_seen);
                    c.w = (uint32_t)(t_written - m.t_seen);
#else
                    c.z = 0;
                    c.w = 0;
#endif
                    rl_st16_sys(ts, a);
                    rl_st16_sys((uint8_t *)ts + 16, b);
                    rl_st16_sys((uint8_t *)ts + 32, c);
                }
                processed++;
                rl_st64_sys(&ctl->processed, processed);
            } else {
                dropped++;
                rl_st32_sys(&ctl->dropped, dropped);
                rl_st32_sys(&ctl->error, m.valid ? RL_ERR_NONE : RL_ERR_BAD_SLOT);
            }
            /* reclaim send-queue space between messages, not while one waits */
            if (sq.pi - sq.done > sq.entries / 2) {
                rl_dev_verbs_poll_send_cq(&sq, &scq, &send_errors);
                sq.done = sq.done == 0 ? 0 : (((sq.done - 1) >> SH) + 1) << SH;
                if (sq.done > sq.pi) sq.done = sq.pi;
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        rl_fence_release_sys();
        rl_st32_sys(&ctl->state, send_errors ? RL_STATE_FAILED : RL_STATE_EXITED);
        if (send_errors) rl_st32_sys(&ctl->error, RL_ERR_CQE_ERROR);
    }
}
