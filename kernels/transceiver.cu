/*
 * kernels/transceiver.cu — the persistent transceiver kernel (DESIGN.md, "Execution backends";
 * docs/data-path.md).
 *
 * Launched once with one block; runs until the host sets rl_control.exit_flag. Warp 0 is the
 * data path: it polls, takes each message apart, runs the warp forms of the fused stage chain
 * (kernels/stages/stage.cuh) and answers, with warp barriers only; the other warps wait at a
 * block barrier and join only when a stage hands a request to the block (RL_STAGE_TO_BLOCK: a
 * QEC decode of many defects), a message longer than RL_WARP_LOAD bytes must be loaded
 * (RL_BLOCK_LOAD: the block's loads all in flight), or the kernel stops. Warp 1 reads the next
 * message ahead while messages queue (the pre-poll). Per message:
 *   1+2. receive (transceiver/poll.cuh): warp 0 polls back to back from the last doorbell, one
 *      load instruction a poll: the whole receive CQE line and, when the last message was
 *      33..RL_SPEC_BYTES bytes, the first bytes of the slot the peer should write next (peers
 *      cycle their slots in order); the exit flag in the same round once in
 *      RL_EXIT_POLL_EVERY polls. Every extra poller or dependent read of host memory costs a
 *      PCIe round trip and slows the doorbell's fence (decisions.md: poller blocks). Words of
 *      the read that may predate the NIC's write are trusted only when they no longer hold
 *      the poison written there after the message before was consumed (abi.h
 *      RL_SPEC_POISON); otherwise, and for a mispredicted slot or a longer message, one more
 *      round of loads, all in flight. The common message (whole in the read, no poison) is
 *      checked in the registers the read filled, one vote, and goes through the chain's
 *      register forms to the doorbell without leaving the receive (the fast path); any other
 *      takes the general path, through shared memory.
 *   3. stage dispatch (transceiver/dispatch.cuh): the chain (generated from the graph into
 *      rl_chain.cuh) turns the request into the answer: its register forms in registers, 16
 *      bytes a lane, or its warp forms in shared memory, or the block's forms after a
 *      hand-over.
 *   4+5. answer (transceiver/answer.cuh): answers up to RL_MAX_INLINE bytes go out as an
 *      inline SEND (one store per lane) rung with a checked doorbell (RL_CHECKED_DOORBELL: no
 *      fence in front of it); larger ones are copied to the TX slot and gathered, the check
 *      covering the slot's bytes too; the poison stores go out after a checked doorbell,
 *      before an unchecked one. Then the CQE is consumed and the message stamped; the
 *      receives are re-posted (doorbell record) after the release fence, which with checked
 *      doorbells comes every few messages (RL_FENCE_EVERY).
 *   6. unless messages queue, the chain's idle forms (RL_CHAIN_IDLE: a QEC decoder decodes the
 *      shot being assembled ahead of its last message), in the wait for the next message.
 * Every write to host memory after the poll is a posted write: no second read on the way out.
 *
 * Compile-time switches (-D, the host's kernel options): RL_THREADS (the block), RL_MAX_MSG
 * (the message buffers), RL_MAX_INLINE (the longest inline answer), RL_CHECKED_DOORBELL and
 * RL_DOORBELL_MMIO (how answers are rung), RL_PROFILE with RL_PROFILE_A, RL_PROFILE_B and
 * RL_PROFILE_CLK (the profile words), RL_TEST_STALL (the watchdog's test). The chain header
 * defines RL_CHAIN_REGS and RL_CHAIN_IDLE. Every other choice is fixed, its reason a row of
 * latency-reports/decisions.md.
 */
#include "abi.h"
#include "verbs.cuh"
#include "rl_chain.cuh" /* generated: includes the stages, defines rl_run_chain* */

/* ---- compile-time options ------------------------------------------------------------ */

#ifndef RL_THREADS
#define RL_THREADS 128
#endif
#ifndef RL_MAX_MSG
#define RL_MAX_MSG 4096
#endif
#ifndef RL_MAX_INLINE
#define RL_MAX_INLINE 256
#endif

/* RL_PROFILE: the timestamp record's two profile words are the data path's clock at marks
 * RL_PROFILE_A and RL_PROFILE_B (default 3 and 6: request loaded, answer written) less the
 * CQE-seen time. Marks, in lane 0 of warp 0: 1 the CQE checked, 2 the request's bytes in
 * shared memory (before the block loads a long one), 3 request loaded (consumed), 4 the stage
 * chain returned, 5 send slots reserved, 6 answer written (before the doorbell's check or
 * fence), 7 the doorbell rung; and 8, not from the CQE seen: the time from the last
 * doorbell to this message's poll's first read (the work between them delays every read of
 * the poll that follows). The clock is %globaltimer in ns (32 ns ticks), or with
 * RL_PROFILE_CLK the multiprocessor's cycle counter (clock64: cycles). Measurement only. */
#ifndef RL_PROFILE_A
#define RL_PROFILE_A 3
#endif
#ifndef RL_PROFILE_B
#define RL_PROFILE_B 6
#endif
#ifdef RL_PROFILE
#ifdef RL_PROFILE_CLK
#define RL_PCLOCK() ((uint64_t)clock64())
#else
#define RL_PCLOCK() rl_globaltimer()
#endif
#define RL_PMARK(i)                                                      \
    do {                                                                 \
        if ((i) == RL_PROFILE_A) L.t_loaded = RL_PCLOCK();               \
        if ((i) == RL_PROFILE_B) L.t_written = RL_PCLOCK();              \
    } while (0)
/* a statement of the profile's only */
#define RL_PROFILED(stmt) \
    do {                  \
        stmt;             \
    } while (0)
#else
#define RL_PMARK(i) \
    do {            \
    } while (0)
#define RL_PROFILED(stmt) \
    do {                  \
    } while (0)
#endif

/* RL_CHECKED_DOORBELL: answers are rung with a checked doorbell (abi.h rl_proxy_doorbell:
 * the proxy word carries a check of the WQE's bytes and of the TX slot bytes it gathers, and
 * the NIC executes the WQE once what it reads agrees), with the release fence after the
 * doorbell instead of in front of it: the fence, which waits for the WQE's and the poison's
 * stores to land, leaves the round trip (decisions.md: the checked doorbell). It still orders
 * this message's stores before the re-post and the next WQE. 0: fence, then doorbell (as a
 * real NIC's MMIO doorbell needs). */
/* RL_DOORBELL_MMIO: answers are rung the way a ConnectX's doorbell is (PROTOCOLS.md 4,
 * rl_dev_verbs_ring_db_mmio): release fence, the doorbell record, fence, the first 8 bytes of
 * the WQE's control segment into the UAR register (desc.uar), fence. No checked doorbell then
 * (a ConnectX does not re-read a WQE until a check holds). The software NIC emulates the UAR
 * with NicOptions::doorbell = Mmio (a word it watches where a ConnectX has a register). */
#ifndef RL_DOORBELL_MMIO
#define RL_DOORBELL_MMIO 0
#endif
#ifndef RL_CHECKED_DOORBELL
#define RL_CHECKED_DOORBELL (!RL_DOORBELL_MMIO)
#endif
#if RL_DOORBELL_MMIO && RL_CHECKED_DOORBELL
#error "RL_DOORBELL_MMIO needs RL_CHECKED_DOORBELL=0: a ConnectX executes what the doorbell record says, at once"
#endif
/* With checked doorbells, the release fence is due at least every RL_FENCE_EVERY messages
 * (sooner with few slots or CQEs, or when the checked range would pass 16 WQEBBs): the
 * doorbell's range and check cover every WQE since the last one (abi.h rl_proxy_doorbell),
 * and receives are re-posted (after it) in one go (decisions.md: checked ranges). */
#define RL_FENCE_EVERY 8u
#if RL_MAX_MSG > RL_DB_GATHER_MAX
#error "RL_MAX_MSG: a checked doorbell's check covers at most RL_DB_GATHER_MAX gathered bytes"
#endif
/* WQEBBs of the largest inline answer (rl_dev_verbs_inline_wqebbs(RL_MAX_INLINE)) */
#define RL_MAX_INLINE_BBS ((16u + ((4u + RL_MAX_INLINE + 15u) & ~15u) + RL_WQEBB_SIZE - 1u) / RL_WQEBB_SIZE)
#if RL_MAX_INLINE_BBS > 16
#error "RL_MAX_INLINE: an inline answer's WQEBBs must fit a checked range (16)"
#endif


/* The register path: when every stage of the chain has a register form (RL_CHAIN_REGS) and
 * the poll brought the whole request into warp 0's registers (the CQE's inline bytes, or the
 * predicted slot's first RL_REG_MAX bytes, no poison), the chain runs on those registers and
 * the answer's WQE is built from them (rl_dev_verbs_wqe_prepare_send_inline_regs_warp): no
 * shared-memory round trip between the poll and the doorbell (decisions.md: the register
 * path). The register forms' request and answer: lanes 0..15, 16 bytes each (stage.cuh); a
 * longer request the poll brought whole (up to RL_SPEC_BYTES) goes through shared memory. */
#define RL_REG_MAX 256u

/* The fast path: the common message decided (and answered) in registers. The poll's read is
 * checked where it landed: the CQE's immediate and byte count shuffled from lane 2, each lane
 * testing its own 16 bytes of the request for the poison, one vote. A well-formed message that
 * is whole in the read (the predicted slot's bytes, or the CQE's inline bytes when the poll
 * read no slot) goes on from the vote to the register forms and straight to the doorbell,
 * inside rl_receive, which sets the loop's state around it (what the next poll and the
 * pre-poll need before, the rest after the doorbell): none of the general path's shared-memory
 * round trips (the CQE and the request stored, a warp barrier, read back, checked word by
 * word) and no return to the main loop first (decisions.md: the fast path). Any other message
 * (poisoned, mispredicted, longer, malformed) takes the general path, which checks it again
 * from the start: the decisions are the general path's (same message, same answer), only where
 * they are made differs. A chain without register forms (a QEC decoder) gets the checks too: a
 * message that passes is stored to shared memory from the registers for the chain's warp forms
 * (the general path's parse and barriers skipped). */
/* the longest message the fast path takes: what the register forms hold, or the poll's read */
#define RL_FAST_MAX (RL_CHAIN_REGS ? RL_REG_MAX : RL_SPEC_BYTES)

/* ---- fixed choices -------------------------------------------------------------------- */

/* The pre-poll: warp 1 reads the next message while warp 0 answers this one, when messages
 * queue. Another warp's loads, so that they are not in front of warp 0's doorbell fence
 * (decisions.md: the pre-poll). A block of one warp has none. */
#define RL_PREPOLL (RL_THREADS >= 64)
/* How long a send queue with no room may take to make some once the host asked to stop,
 * before the NIC counts as stopped (RL_ERR_SQ_FULL) */
#define RL_SQ_FULL_GRACE_NS 100000000ull
/* Two 16-byte loads a lane still take one PCIe round, four take two: a message of up to
 * RL_WARP_LOAD bytes (two loads a lane) is loaded by warp 0, with no hand-over to the block,
 * a longer one by the block (RL_THREADS * 16 bytes a load, up to two a thread: 4 KiB still
 * takes one round; decisions.md: who loads a long request). */
#define RL_WARP_LOAD (32 * 16 * 2)
#if RL_WARP_LOAD > RL_MAX_MSG
#error "RL_MAX_MSG: at least RL_WARP_LOAD bytes"
#endif
#define RL_BLOCK_CHUNKS ((RL_MAX_MSG + RL_THREADS * 16 - 1) / (RL_THREADS * 16))
/* The lane of warp 0 that reads the exit flag with a poll's loads (the lanes before it read
 * the CQE and the speculated slot bytes). */
#define RL_EXIT_LANE (4 + RL_SPEC_BYTES / 16)
#if RL_EXIT_LANE >= 32 || RL_SPEC_CQE_BYTES / 16 + RL_SPEC_BYTES / 16 > 32
#error "RL_SPEC_BYTES: warp 0 reads the CQE, the speculated bytes and the exit flag with one lane each per 16 bytes"
#endif
/* The poll's phase: warp 0 polls back to back from each doorbell on, one PCIe read after the
 * other; no wait after the doorbell, chosen or fixed, gave a lower round trip (decisions.md:
 * the poll's phase lock). */

/* ---- the loop's state ---------------------------------------------------------------- */

/* The pre-poll (RL_PREPOLL): warp 0 asks (req, with the CQE index and slot to read), warp 1
 * reads and publishes (done == req, then `data` holds each lane's 16 bytes of that read). */
struct rl_prepoll {
    volatile uint32_t req, done;
    volatile uint32_t run; /* 0: warp 1 leaves its loop for the block barrier */
    uint32_t ci, slot, chunks;
    __align__(16) uint4 data[4 + RL_SPEC_BYTES / 16];
};

/* Warp 0's loop state. Every lane keeps the fields above `rcq` alike (uniform: computed from
 * shuffled or shared values), `idle` and the send queue's producer index (`sq.pi`) too; the
 * rest of the queues, the other counters and the message's stamps are lane 0's. */
struct rl_loop {
    uint32_t ci_next;     /* the CQE index to poll next */
    uint32_t predicted;   /* the slot the next message should be in */
    uint32_t spec_chunks; /* 16-byte chunks of the predicted slot the next poll reads */
    uint32_t spec;        /* bytes of a slot a poll may read speculatively: min(stride, RL_SPEC_BYTES), 0 for none */
    uint32_t next_slot, last_len;
    /* this message */
    uint32_t ci, slot, len, valid, busy, request_id;
    uint64_t t_seen;
#ifdef RL_PROFILE
    uint64_t t_loaded, t_written;
    uint64_t p_seen, p_db, p_gap; /* the profile clock at the CQE seen and the doorbell; mark 8 */
#endif
    uint4 tail; /* CQE bytes 48..63 */
    /* the poll's last read (each lane's 16 bytes: the CQE line, then the predicted slot's
     * bytes) and whether it holds the whole request, valid and unpoisoned (the register
     * path): in_regs 1 from the slot's bytes (lane 4 + m holds bytes 16m..), 2 from the CQE's
     * inline bytes (lane m); 3: the fast path took the message (rl_receive sets 0..2 again
     * before any other message is dispatched) */
    uint4 v;
    uint32_t in_regs;
    /* lane 0 */
    struct rl_dev_cq rcq, scq;
    struct rl_dev_sq sq;
    struct rl_dev_rq rq;
    uint64_t idle, heartbeat, processed;
    uint32_t dropped, send_errors, sh;
    /* the host asked to stop (1) and the poll that found a message read it, or it asked
     * while the send queue had no room (2: the NIC stopped completing sends): set by lane 0,
     * alike in every lane after each answer; the next receive returns "exit" */
    uint32_t stop;
    /* the exit flag as the message's poll read it (lane RL_EXIT_LANE's; exit_due: it did),
     * looked at after the message's doorbell: a flood still stops, its message answered */
    uint32_t exit_v, exit_due;
    /* the checked range (RL_CHECKED_DOORBELL): WQEs since the last fence start at range_first
     * (alike in every lane); their check, the messages answered and the receives consumed
     * since it, and how many messages may go between fences */
    uint32_t range_first, unfenced, unposted, fence_every, range_max;
    uint64_t range_check;
    /* the check keys of this lane's chunk of the next inline WQE (at sq.pi, in the range from
     * range_first): rl_check_keys_of((sq.pi - range_first) * 4 + lane), computed after each
     * answer, off the next one's path (each lane its own) */
    struct rl_check_keys ck;
};

/* The three parts, in the order their calls need (the fast path answers from the receive). */
#include "transceiver/answer.cuh"
#include "transceiver/poll.cuh"
#include "transceiver/dispatch.cuh"

/* ---- the kernel ------------------------------------------------------------------------ */

extern "C" __global__ void __launch_bounds__(RL_THREADS, 1) rl_transceiver(struct rl_transceiver_desc d) {
    __shared__ __align__(16) uint8_t buf_a[RL_MAX_MSG];
    __shared__ __align__(16) uint8_t buf_b[RL_MAX_MSG];
    __shared__ __align__(16) uint8_t cqe_sh[64]; /* the receive CQE */
    __shared__ struct rl_handover h;
    __shared__ struct rl_prepoll pp;
    const uint32_t tid = threadIdx.x, lane = tid & 31;
    struct rl_control *ctl = (struct rl_control *)d.control;

    struct rl_loop L;
    L.rcq = {(uint8_t *)d.rcq.ring, (uint32_t *)d.rcq.dbrec, d.rcq.entries, 0};
    L.scq = {(uint8_t *)d.scq.ring, (uint32_t *)d.scq.dbrec, d.scq.entries, 0};
    L.sq = {(uint8_t *)d.sq.ring, (uint32_t *)d.sq.dbrec, (uint64_t *)d.proxy_doorbell, (volatile uint64_t *)d.uar, d.sq.entries, d.qpn, 0, 0};
    L.rq = {(uint8_t *)d.rq.ring, (uint32_t *)d.rq.dbrec, d.rq.entries, 0};
    L.idle = L.heartbeat = L.processed = 0;
    L.dropped = L.send_errors = L.stop = L.exit_due = 0;
    L.sh = 31u - (uint32_t)__clz(d.signal_every | 1u);
    L.range_first = L.unfenced = L.unposted = 0;
    L.range_check = 0;
    L.ck = rl_check_keys_of(lane);
    /* a fence at least every fence_every messages, and before a slot or a CQE poisoned since
     * the last could be written again: with fewer than fence_every + 2 of either, sooner */
    L.fence_every = RL_FENCE_EVERY;
    if (d.rx_slots < L.fence_every + 2) L.fence_every = d.rx_slots > 3 ? d.rx_slots - 2 : 1;
    if (d.rcq.entries < L.fence_every + 2) L.fence_every = d.rcq.entries > 3 ? d.rcq.entries - 2 : 1;
    /* a range's WQEBBs: at most 16 (abi.h), and half the ring, so that none is written again
     * while its range is open */
    L.range_max = d.sq.entries / 2 < 16 ? d.sq.entries / 2 : 16;
    L.ci_next = L.predicted = L.next_slot = 0;
    L.last_len = 64;
    /* one slot only: the next message's slot is the one being consumed; the host poisoned
     * min(stride, RL_SPEC_BYTES) bytes of each slot (rings.rs) */
    L.spec = d.rx_slots >= 2 ? (d.rx_slot_stride < RL_SPEC_BYTES ? d.rx_slot_stride : RL_SPEC_BYTES) & ~15u : 0;
    L.spec_chunks = rl_spec_chunks(L.spec, L.last_len);
    L.valid = 0;
    RL_PROFILED(L.t_loaded = L.t_written = 0; L.p_seen = L.p_db = L.p_gap = 0);
    uint32_t have_pre = 0; /* warp 1 was asked to read the next message (the pre-poll) */
    L.busy = 0;

    if (tid == 0) {
        /* the host posted the receive queue before the launch */
        L.rq.pi = rl_bswap32(rl_ld32_sys(L.rq.dbrec)) & 0xffff;
        rl_st32_sys(&ctl->state, RL_STATE_RUNNING);
        pp.req = pp.done = 0;
        pp.run = 1;
    }
    __syncthreads();
    for (;;) {
        if (tid < 32) {
            /* Warp 0 serves messages until one needs the block, or the host says stop. */
            for (;;) {
                const uint32_t got = rl_receive(L, d, ctl, buf_a, cqe_sh, &pp, have_pre, lane);
#if RL_CHAIN_REGS
                /* the common message, answered on the fast path */
                if (__builtin_expect(got == RL_GOT_ANSWERED, 1)) {
                    rl_test_stall();
                    rl_idle(L, d);
                    continue;
                }
#endif
                /* the common request (RL_GOT_REQUEST) falls through: a branch, not a jump table */
                if (__builtin_expect(got != RL_GOT_REQUEST, 0)) {
                    if (got == RL_GOT_EXIT) {
                        if (lane == 0) h.exit = 1;
                        break;
                    }
                    rl_test_stall();
                    /* RL_GOT_LONG: a long message the poll did not read: the block loads it */
                    if (lane == 0) {
                        h.exit = 0;
                        h.resume = RL_BLOCK_LOAD;
                        h.rlen = (int)L.len;
                        h.src = (const uint8_t *)d.rx_buffer + (size_t)L.slot * d.rx_slot_stride;
                    }
                    break;
                }
                rl_test_stall();
                if (rl_dispatch_warp(L, d, ctl, buf_a, buf_b, h, &pp, have_pre, lane)) break;
            }
#if RL_PREPOLL
            /* warp 1 to the barrier, its read (if any) done: it stays in pp.data for the next poll */
            while (pp.done != pp.req) {
            }
            if (lane == 0) pp.run = 0;
#endif
        }
#if RL_PREPOLL
        else if (tid < 64) {
            rl_prepoller(&pp, L.rcq, d, lane);
        }
#endif
        __syncthreads(); /* the other warps wait here while warp 0 serves */
        if (h.exit) break;
#if RL_PREPOLL
        if (tid == 0) pp.run = 1;
        __syncthreads(); /* warp 1 sees `run` before it loops again */
#endif
        rl_dispatch_block(L, d, ctl, buf_a, buf_b, h, &pp, have_pre, tid, lane);
    }
    if (tid == 0) {
        rl_fence_release_sys();
        rl_st32_sys(&ctl->state, (L.send_errors || L.stop == 2) ? RL_STATE_FAILED : RL_STATE_EXITED);
        if (L.send_errors && L.stop != 2) rl_st32_sys(&ctl->error, RL_ERR_CQE_ERROR);
    }
}
