/*
 * kernels/transceiver.cu — the persistent transceiver kernel (DESIGN.md, "The data path").
 *
 * Launched once with one block; runs until the host sets rl_control.exit_flag. Warp 0 is the
 * data path: it polls, takes each message apart, runs the warp forms of the fused stage chain
 * (kernels/stages/stage.cuh) and answers, with warp barriers only; the other warps wait at a
 * block barrier and join only when a stage hands a request to the block (RL_STAGE_TO_BLOCK:
 * a QEC decode of many defects), a message longer than RL_WARP_LOAD bytes must be loaded
 * (RL_BLOCK_LOAD: the block's loads all in flight), or the kernel stops. Per message:
 *   1+2. warp 0 polls, from a wait after the last doorbell that it tunes itself
 *      (RL_PHASE_LOCK), with one load instruction per iteration: the whole receive CQE line
 *      (lanes 0..3) and, when the last message was 33..RL_SPEC_BYTES bytes, the first bytes of
 *      the slot the peer should write next (lanes 4..; peers cycle their slots in order); the
 *      exit flag is read by one more lane every RL_EXIT_POLL_EVERY polls (idle or not), in the
 *      same round, or on its own when warp 1's pre-poll read the message (PERF.md: every extra poller or dependent read of host memory costs ~1 us; reads
 *      by other multiprocessors also slow the doorbell's fence, latency-reports/history.md).
 *      Words of that read which may predate the
 *      NIC's write are trusted only when they no longer hold the poison written there after
 *      the message before was consumed (abi.h RL_SPEC_POISON); otherwise, and for a
 *      mispredicted slot or a longer message, one more round of loads, all in flight.
 *      While messages queue up, warp 1 issues the next message's polling read while warp 0
 *      processes this one (RL_PREPOLL), so back to back a poll costs no round trip of its own.
 *      The common message (the read holds it whole: the predicted slot's bytes or the CQE's
 *      inline bytes, no poison, a chain with register forms) is checked in the registers the
 *      read filled, one vote, and goes through step 3's register forms to step 4's doorbell
 *      without leaving the receive (RL_FAST_PATH); any other takes the general path, through
 *      shared memory.
 *   3. the warp forms of the stage chain (generated from the graph into rl_chain.cuh) turn the
 *      request into the answer in shared memory; or, when every stage has a register form and
 *      the poll's read holds the whole request (RL_REG_PATH), the register forms turn it into
 *      the answer in the same registers, 16 bytes a lane, and step 4 builds the WQE from them;
 *   4. answers up to RL_MAX_INLINE bytes go out as an inline SEND (one store per lane) rung
 *      with a checked doorbell: the proxy word carries a check of the WQE's bytes, so no fence
 *      goes in front of it (RL_CHECKED_DOORBELL); larger ones are copied to the TX slot and
 *      gathered, the check covering the slot's bytes too (no fence either); the poison stores
 *      (rl_poison) go out after a checked doorbell, before an unchecked one;
 *   5. consume the CQE, stamp the message; re-post the receives (doorbell record) after the
 *      release fence, which with checked doorbells comes every few messages (RL_FENCE_EVERY).
 *   6. unless messages queue, the chain's idle forms (RL_CHAIN_IDLE: a QEC decoder decodes the
 *      shot being assembled ahead of its last message), in the wait for the next message.
 * Every write to host memory after the poll is a posted write: no second read on the way out.
 * Measured variants and their figures: latency-reports/README.md.
 */
#include "abi.h"
#include "verbs.cuh"
#include "rl_chain.cuh" /* generated: includes the stages, defines rl_run_chain* */

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
/* RL_PREPOLL: warp 1 reads the next message while warp 0 answers this one, when messages
 * queue. Another warp's loads, so that they are not in front of warp 0's doorbell fence. A
 * block of one warp has none. */
#define RL_PREPOLL (RL_THREADS >= 64)
/* How long a send queue with no room may take to make some once the host asked to stop,
 * before the NIC counts as stopped (RL_ERR_SQ_FULL) */
#define RL_SQ_FULL_GRACE_NS 100000000ull

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

/* The poll's phase: warp 0 polls back to back from each doorbell on, one PCIe read after the
 * other. No wait after the doorbell, chosen or fixed, gave a lower round trip (decisions.md:
 * the poll phase lock). */

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
     * inline bytes (lane m); 3 (the fast path): `v` is the request itself, lane m bytes 16m.. */
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

/* RL_POLL_MODE 3: the chunks of the predicted slot to read with the CQE, from the size of
 * the last message: none when it came in the CQE (polling its slot too would only slow the
 * NIC's write of it, measured) or when it was longer than `spec` bytes (min(slot stride,
 * RL_SPEC_BYTES): it would be read again anyway). */
__device__ __forceinline__ uint32_t rl_spec_chunks(uint32_t spec, uint32_t last_len) {
    return last_len > RL_CQE_INLINE_MAX && last_len <= spec ? (last_len + 15) / 16 : 0;
}

/* The lane of warp 0 that reads the exit flag with a poll's loads (the lanes before it read
 * the CQE and the speculated slot bytes). */
#define RL_EXIT_LANE (4 + RL_SPEC_BYTES / 16)
#if RL_EXIT_LANE >= 32 || RL_SPEC_CQE_BYTES / 16 + RL_SPEC_BYTES / 16 > 32
#error "RL_SPEC_BYTES: warp 0 reads the CQE, the speculated bytes and the exit flag with one lane each per 16 bytes"
#endif

/* Loads `len` bytes at `src` (host memory) into `dst` (shared), thread `t` of `nt` loading
 * the 16-byte chunks t, t + nt, ..., every load issued before the first store that uses one.
 * Two loads a lane still take one PCIe round, four take two: so a message of up to
 * RL_WARP_LOAD bytes (two loads a lane) is loaded by warp 0, with no hand-over to the block,
 * a longer one by the block (RL_THREADS * 16 bytes a load, up to two a thread: 4 KiB still
 * takes one round; decisions.md: who loads a long request). */
#define RL_WARP_LOAD (32 * 16 * 2)
#if RL_WARP_LOAD > RL_MAX_MSG
#error "RL_MAX_MSG: at least RL_WARP_LOAD bytes"
#endif
#define RL_BLOCK_CHUNKS ((RL_MAX_MSG + RL_THREADS * 16 - 1) / (RL_THREADS * 16))
template <int CHUNKS>
__device__ __forceinline__ void rl_load(uint8_t *dst, const uint8_t *src, uint32_t len, uint32_t t, uint32_t nt) {
    uint4 r[CHUNKS];
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const uint32_t off = (k * nt + t) * 16;
        if (off < len) r[k] = rl_ld16_data(src + off);
    }
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const uint32_t off = (k * nt + t) * 16;
        if (off < len) *(uint4 *)(dst + off) = r[k];
    }
}

/* Lane 0: reaps send completions; everything below the last multiple of signal_every that a
 * completed WQE crossed is done (a send CQE reports its WQE's first WQEBB). */
__device__ __forceinline__ void rl_reap_sends(struct rl_loop &L) {
    rl_dev_verbs_poll_send_cq(&L.sq, &L.scq, &L.send_errors);
    L.sq.done = L.sq.done == 0 ? 0 : (((L.sq.done - 1) >> L.sh) + 1) << L.sh;
    if (L.sq.done > L.sq.pi) L.sq.done = L.sq.pi;
}

/* Whether request word `wi` (of the `len` bytes at `buf`, read speculatively: at most
 * RL_SPEC_BYTES) still holds the poison in the bytes the message has. Reads only words the
 * message has (`buf` may be the 64-byte CQE copy). */
__device__ __forceinline__ uint32_t rl_poison_word(const uint8_t *buf, uint32_t len, uint32_t wi) {
    if (wi * 4 >= len || wi >= RL_SPEC_BYTES / 4) return 0;
    const uint32_t w = ((const uint32_t *)buf)[wi];
    const uint32_t left = len - wi * 4;
    const uint32_t keep = left >= 4 ? 0xffffffffu : (1u << (8 * left)) - 1u;
    return ((w ^ RL_SPEC_POISON) & keep) == 0;
}

/* rl_poison_word for a word of `req` (the request buffer: any of its first 512 bytes may be
 * read), without a branch: past the message's bytes it keeps none of the word. */
#if RL_MAX_MSG < 512
#error "RL_MAX_MSG: the poll's poison check reads the request buffer's first 512 bytes"
#endif
__device__ __forceinline__ uint32_t rl_poison_word_req(const uint8_t *req, uint32_t len, uint32_t wi) {
    const uint32_t w = ((const uint32_t *)req)[wi];
    const uint32_t at = wi * 4;
    const uint32_t left = at < len && wi < RL_SPEC_BYTES / 4 ? len - at : 0u;
    const uint32_t keep = left >= 4 ? 0xffffffffu : (1u << (8 * left)) - 1u;
    return keep != 0 && ((w ^ RL_SPEC_POISON) & keep) == 0;
}

/* What rl_answer_send did: the answer's first WQEBB, whether it rang a checked doorbell, and
 * (lane 0) when. */
struct rl_sent {
    uint32_t first, checked;
    uint64_t t_db;
};
__device__ __forceinline__ struct rl_sent rl_answer_send(struct rl_loop &L, const struct rl_transceiver_desc &d, int n, const uint8_t *answer,
                                                        uint32_t lane, uint32_t from_regs, uint4 regs);
__device__ __forceinline__ void rl_answer_after(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl, int n,
                                                struct rl_sent sent, uint32_t lane);
__device__ __forceinline__ void rl_consumed(struct rl_loop &L, const struct rl_transceiver_desc &d, uint32_t request_id,
                                            struct rl_prepoll *pp, uint32_t &have_pre, uint32_t lane);

/* Whether any word of the 16 request bytes in `v` (of which `left` belong to the message,
 * left >= 1) still holds the poison in the bytes the message has (rl_poison_word, four words
 * at once, from registers). */
__device__ __forceinline__ uint32_t rl_poison_chunk(uint4 v, uint32_t left) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t p = 0;
#pragma unroll
    for (uint32_t k = 0; k < 4; k++) {
        const uint32_t l = left > 4 * k ? left - 4 * k : 0u;
        const uint32_t keep = l >= 4 ? 0xffffffffu : (1u << (8 * l)) - 1u;
        p |= keep != 0 && ((w[k] ^ RL_SPEC_POISON) & keep) == 0;
    }
    return p;
}

/* RL_FAST_PATH, a message taken (uniform values): the loop's state the next poll and the
 * pre-poll need: this message's CQE, slot and length, and the next poll's CQE, slot and reads. */
__device__ __forceinline__ void rl_fast_taken(struct rl_loop &L, const struct rl_transceiver_desc &d, uint32_t ci, uint32_t reads,
                                              uint32_t slot, uint32_t len) {
    L.busy = reads == 1;
    L.ci = ci;
    L.valid = 1;
    L.slot = slot;
    L.len = len;
    L.next_slot = slot + 1 == d.rx_slots ? 0 : slot + 1;
    L.last_len = len;
    L.ci_next = ci + 1;
    L.predicted = L.next_slot;
    L.spec_chunks = rl_spec_chunks(L.spec, len);
}

/* RL_FAST_PATH, the rest of the taken message's state: its reads, where its request is, and the
 * CQE's bytes 48..63 (the stamp's NIC time), from lane 3 of the poll's read. Warp scope. */
__device__ __forceinline__ void rl_fast_rest(struct rl_loop &L, uint4 v, uint32_t w3, uint32_t in_regs) {
    L.in_regs = in_regs;
    L.tail.x = __shfl_sync(0xffffffffu, v.x, 3);
    L.tail.y = __shfl_sync(0xffffffffu, v.y, 3);
    L.tail.z = __shfl_sync(0xffffffffu, v.z, 3);
    L.tail.w = w3;
}

/* Warp 0: polls for the next message and takes it apart (steps 1+2). Returns 0 with the
 * request in `req` (L.valid: a well-formed receive; else it is dropped) or in registers
 * (L.in_regs), 2 when the block is to load it (longer than RL_WARP_LOAD and not read with the
 * poll; its slot is L.slot), 1 when the host asked the kernel to stop, or 3 when the fast path
 * (RL_FAST_PATH 2) has answered it (steps 3-5 done). After 0, rl_consumed, once the request is
 * in `req` or in registers. */
__device__ __forceinline__ uint32_t rl_receive(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl,
                                               uint8_t *req, uint8_t *cqe_sh, struct rl_prepoll *pp, uint32_t &have_pre, uint32_t lane) {
    /* 1+2 in one PCIe round (abi.h RL_SPEC_BYTES): lanes 0..3 read the whole CQE line, lanes
     * 4.. the first bytes of the predicted slot, straight into the request buffer. When the
     * owner byte says the CQE is new, its 16-byte chunk (bytes 48..63: owner, timestamp, wqe
     * counter) is this CQE's, since the NIC writes op_own last; every other word may predate
     * the NIC's write and is trusted only when it no longer holds the poison. */
    const uint32_t ci = L.ci_next, pslot = L.predicted, spec_chunks = L.spec_chunks;
    const uint8_t *cqe = L.rcq.ring + (size_t)(ci & (L.rcq.entries - 1)) * RL_CQE_SIZE;
    const uint8_t *slot_base = (const uint8_t *)d.rx_buffer;
    const uint8_t *src = lane < 4 ? cqe + lane * 16 : slot_base + (size_t)pslot * d.rx_slot_stride + (lane - 4) * 16;
    const uint32_t loads = lane < 4 + spec_chunks;
    const uint32_t parity = (ci / L.rcq.entries) & 1;
    uint32_t reads = 0;
    uint4 v = make_uint4(0, 0, 0, 0);
    uint32_t w3; /* CQE bytes 60..63 (lane 3's v.w: the owner byte's word) */
    uint32_t imm_be, bc_be; /* CQE bytes 36..39 and 44..47 (lane 2's v.y, v.w): immediate, byte count */
    /* the fast path is tried when a message like the last would take it (uniform: L.last_len
     * and spec_chunks are alike in every lane): a stream of long messages pays nothing for it */
    const uint32_t fast = spec_chunks != 0 ? spec_chunks * 16u <= RL_FAST_MAX : L.last_len <= RL_CQE_INLINE_MAX;
#if RL_PREPOLL
    if (have_pre) {
        /* warp 1's read of this CQE and slot: checked exactly like a poll's read below */
        while (pp->done != pp->req) {
        }
        __threadfence_block();
        if (loads) v = pp->data[lane];
    }
#endif
#ifdef RL_PROFILE
    L.p_gap = RL_PCLOCK() - L.p_db; /* mark 8 */
#endif
    if (__builtin_expect(L.stop != 0, 0)) return 1;
    uint32_t check_exit;
    for (;;) {
        /* every RL_EXIT_POLL_EVERY polls, lane RL_EXIT_LANE reads the exit flag with the same
         * round of loads: no PCIe round trip of its own (L.idle, the polls so far, idle or not,
         * is alike in every lane) */
        check_exit = (L.idle % RL_EXIT_POLL_EVERY) == RL_EXIT_POLL_EVERY - 1;
        /* (a pre-poll's read has no exit lane: under a flood every message is found by one,
         * so the exit lane reads the flag on its own then, a round of its own once in
         * RL_EXIT_POLL_EVERY polls) */
        if (!have_pre) {
            if (loads)
                v = rl_ld16_sys(src);
            else if (lane == RL_EXIT_LANE && check_exit)
                v.x = rl_ld32_sys(&ctl->exit_flag);
        } else if (lane == RL_EXIT_LANE && check_exit) {
            v.x = rl_ld32_sys(&ctl->exit_flag);
        }
        have_pre = 0;
        ++reads;
        w3 = __shfl_sync(0xffffffffu, v.w, 3);
        /* the fast path's next two words, moved with the owner byte's (the same wait) */
        imm_be = __shfl_sync(0xffffffffu, v.y, 2);
        bc_be = __shfl_sync(0xffffffffu, v.w, 2);
        const uint32_t own = w3 >> 24;
        if ((own >> 4) != RL_CQE_INVALID && (own & RL_CQE_OWNER_MASK) == parity) break;
        const uint32_t quit = __shfl_sync(0xffffffffu, v.x, RL_EXIT_LANE);
        ++L.idle;
        if (lane == 0 && (L.idle % RL_HEARTBEAT_EVERY) == 0) rl_st64_sys(&ctl->heartbeat, ++L.heartbeat);
        if (check_exit && quit != 0) return 1;
    }
    /* a poll that found a message counts too, and the exit flag it read is looked at after
     * this message's doorbell (rl_answer_after): a stream that never leaves the data path
     * idle (a flood, an FPGA faster than the loop) still stops (decisions.md: the exit flag
     * under a flood). */
    ++L.idle;
    L.exit_v = v.x;
    L.exit_due = check_exit;
    /* the CQE seen: stamped here, before either path's checks (the turnaround the report
     * splits out is from this point to the doorbell, whichever path the message takes) */
    if (lane == 0) L.t_seen = rl_globaltimer();
#ifdef RL_PROFILE
    L.p_seen = RL_PCLOCK();
#endif
    if (fast) {
        /* the fast path: the general path's checks below, made on the registers the poll
         * filled (the CQE's immediate and byte count shuffled from lane 2 in the poll loop).
         * `base`: the lane holding the request's first 16 bytes (4 when the poll read
         * the predicted slot, else 0: the CQE's inline bytes). */
        const uint32_t own = w3 >> 24;
        const uint32_t base = spec_chunks != 0 ? 4u : 0u;
        const uint32_t flen = rl_bswap32(bc_be);
        const uint32_t fslot = rl_bswap32(imm_be) & 0xfffu;
        const uint32_t finl = (own & RL_CQE_INLINE_SCATTER_32) != 0 && flen <= RL_CQE_INLINE_MAX;
        uint32_t bad = imm_be == RL_SPEC_POISON || bc_be == RL_SPEC_POISON || (own >> 4) != RL_CQE_RESP_WR_IMM || fslot >= d.rx_slots ||
                       flen > d.rx_slot_stride || flen > RL_MAX_MSG || flen > RL_FAST_MAX ||
                       (base != 0 ? (finl || fslot != pslot || flen > spec_chunks * 16u || flen < 4u) : !finl);
        const uint32_t at = (lane - base) * 16u; /* the request's bytes in this lane's read (wraps below base) */
        if (lane >= base && at < flen) bad |= rl_poison_chunk(v, flen - at);
#if RL_CHAIN_REGS
        /* lane m's 16 request bytes 16m.. for the register forms, moved while the checks run
         * (wasted when they fail: the general path starts again from `v`) */
        const uint32_t src = (base + lane) & 31u;
        uint4 c;
        c.x = __shfl_sync(0xffffffffu, v.x, src);
        c.y = __shfl_sync(0xffffffffu, v.y, src);
        c.z = __shfl_sync(0xffffffffu, v.z, src);
        c.w = __shfl_sync(0xffffffffu, v.w, src);
        if (!__any_sync(0xffffffffu, bad)) {
            /* from here straight to the doorbell, the loop's state set around it: what the next
             * poll and the pre-poll need first, the rest after the doorbell */
            rl_fast_taken(L, d, ci, reads, fslot, flen);
            rl_consumed(L, d, c.w, pp, have_pre, lane);
            RL_PMARK(1);
            RL_PMARK(2);
            const int rn = rl_run_chain_regs(c, (int)flen);
            RL_PMARK(4);
#if RL_MAX_INLINE >= 256
            const struct rl_sent sent = rl_answer_send(L, d, rn, 0, lane, 1, c);
            rl_fast_rest(L, v, w3, 3);
            rl_answer_after(L, d, ctl, rn, sent, lane);
#else
            /* too long to go inline in this build: through shared memory and a TX slot (one
             * longer than a slot is dropped and counted, as rl_answer does) */
            const int an = rn > RL_MAX_INLINE && rn > (int)d.tx_slot_stride ? -1 : rn;
            if (an > RL_MAX_INLINE && lane < 16) *(uint4 *)(req + RL_MAX_MSG - 256 + lane * 16) = c;
            __syncwarp();
            const struct rl_sent sent = an <= RL_MAX_INLINE ? rl_answer_send(L, d, an, 0, lane, 1, c) : rl_answer_send(L, d, an, req + RL_MAX_MSG - 256, lane, 0, c);
            rl_fast_rest(L, v, w3, 3);
            rl_answer_after(L, d, ctl, an, sent, lane);
#endif
            return 3;
        }
#else
        if (!__any_sync(0xffffffffu, bad)) {
            /* a chain without register forms: each lane stores its request bytes to `req`
             * straight from the read (for the inline case lanes 0 and 1, the CQE's bytes) */
            if (lane >= base && at < flen) *(uint4 *)(req + at) = v;
            rl_fast_taken(L, d, ci, reads, fslot, flen);
            rl_fast_rest(L, v, w3, 0);
            RL_PMARK(1);
            __syncwarp(); /* every lane's request bytes are in `req` */
            RL_PMARK(2);
            return 0;
        }
#endif
    }
    if (lane < 4)
        *(uint4 *)(cqe_sh + lane * 16) = v;
    else if (loads)
        *(uint4 *)(req + (lane - 4) * 16) = v;
    L.v = v;
    /* No acquire fence yet: the bytes this read brought are checked by value (the owner byte,
     * the poison), and nothing is read from host memory again unless a check fails; every
     * such re-read below comes after an acquire fence (warp-uniform), so that it sees what the
     * NIC wrote before the owner byte. The common message costs no fence. */
    /* the message was already there at the first read: messages are queueing */
    L.busy = reads == 1;
    L.ci = ci;
    __syncwarp();

    /* the immediate and the byte count: this CQE's unless poisoned; then bytes 0..47 are read
     * again (after the acquire fence) */
    const uint4 mid0 = *(const uint4 *)(cqe_sh + 32);
    const uint32_t recqe = mid0.y == RL_SPEC_POISON || mid0.w == RL_SPEC_POISON;
    if (recqe) {
        rl_fence_acquire_sys(); /* the re-read after the owner byte */
        __syncwarp(); /* every lane read mid0 before lane 2 rewrites it */
        if (lane < 3) *(uint4 *)(cqe_sh + lane * 16) = rl_ld16_sys(cqe + lane * 16);
        __syncwarp();
    }
    const uint4 t4 = *(const uint4 *)(cqe_sh + 48);
    const uint4 mid = *(const uint4 *)(cqe_sh + 32);
    const uint32_t op_own = t4.w >> 24;
    const uint32_t imm = rl_bswap32(mid.y);
    const uint32_t len = rl_bswap32(mid.w);
    const uint32_t slot = imm & 0xfff;
    const uint32_t inl = (op_own & RL_CQE_INLINE_SCATTER_32) != 0 && len <= RL_CQE_INLINE_MAX;
    const uint32_t valid = (op_own >> 4) == RL_CQE_RESP_WR_IMM && slot < d.rx_slots && len <= d.rx_slot_stride && len <= RL_MAX_MSG;
    /* words lane, lane + 32, ..: the inline bytes (<= 32) or the speculated slot bytes
     * (<= RL_SPEC_BYTES) */
    uint32_t poisoned = rl_poison_word(inl ? cqe_sh : req, len, lane);
#pragma unroll
    for (uint32_t k = 1; k < (RL_SPEC_BYTES / 4 + 31) / 32; k++) {
        if (len <= 128 * k) break; /* uniform: only the rounds of words the message has */
        poisoned |= rl_poison_word_req(req, len, lane + 32 * k);
    }
    const uint32_t stale = __any_sync(0xffffffffu, poisoned);
    RL_PMARK(1);
    L.tail = t4;
    L.valid = valid;
    L.slot = slot;
    L.len = len;
    if (valid && inl) {
        /* the bytes from the CQE; read again (after the fence) when still poisoned */
        uint4 c = make_uint4(0, 0, 0, 0);
        if (!recqe && stale) rl_fence_acquire_sys(); /* the re-read after the owner byte */
        if (lane < 2) c = (!recqe && stale) ? rl_ld16_sys(cqe + lane * 16) : *(const uint4 *)(cqe_sh + lane * 16);
        if (lane < 2) *(uint4 *)(req + lane * 16) = c;
    }
    const uint32_t reload = valid && !inl && !(slot == pslot && len <= spec_chunks * 16 && len >= 4 && !stale);
    /* the slot's bytes are read again (by this warp, or by the block after the barrier that
     * hands it the message) after the owner byte */
    if (reload && !recqe) rl_fence_acquire_sys();
    if (reload && len <= RL_WARP_LOAD) {
        /* the speculated bytes are the message's when the slot and the size fit and no word in
         * it still holds the poison; else one more round (up to two loads a lane) */
        __syncwarp(); /* the poison check read `req` */
        rl_load<RL_WARP_LOAD / 512>(req, slot_base + (size_t)slot * d.rx_slot_stride, len, lane, 32);
    }
    /* the request is whole in this read's registers: from the CQE unless poisoned (then it
     * was read again), or from the predicted slot when it needs no reload */
    L.in_regs = !valid ? 0 : inl ? (!recqe && !stale ? 2 : 0) : (!reload && len <= RL_REG_MAX ? 1 : 0);
    if (valid) {
        L.next_slot = slot + 1 == d.rx_slots ? 0 : slot + 1;
        L.last_len = len;
    }
    /* what the next poll reads (the prediction above used the old values) */
    L.ci_next = ci + 1;
    L.predicted = L.next_slot;
    L.spec_chunks = rl_spec_chunks(L.spec, L.last_len);
    __syncwarp();
    RL_PMARK(2);
    return reload && len > RL_WARP_LOAD ? 2 : 0;
}

/* Warp 0, the message in shared memory: poisons what the next speculative reads of its CQE and
 * slot may see (posted writes). They must land before the NIC may write there again, which it
 * does only after the receive is re-posted (entries and slots messages later): the release
 * fence in front of the re-post orders them (the doorbell's fence for an unchecked doorbell,
 * the one after a checked doorbell or in front of a re-post without an answer). Issued after a
 * checked doorbell, they are not in front of the answer's stores. */
__device__ __forceinline__ void rl_poison(const struct rl_loop &L, const struct rl_transceiver_desc &d, uint32_t lane) {
    const uint4 poison = make_uint4(RL_SPEC_POISON, RL_SPEC_POISON, RL_SPEC_POISON, RL_SPEC_POISON);
    const uint8_t *cqe = L.rcq.ring + (size_t)(L.ci & (L.rcq.entries - 1)) * RL_CQE_SIZE;
    /* the last lanes: the first ones write the answer's WQE */
    const uint32_t k = lane - (32 - RL_SPEC_CQE_BYTES / 16 - RL_SPEC_BYTES / 16);
    if (k < RL_SPEC_CQE_BYTES / 16)
        rl_st16_sys((uint8_t *)cqe + k * 16, poison);
    else if (L.valid && k < RL_SPEC_CQE_BYTES / 16 + (L.len < L.spec ? (L.len + 15) / 16 : L.spec / 16))
        /* every slot: any may be speculated on later; only the bytes this message filled (its
         * other speculated bytes still hold the poison: the NIC writes a message's bytes only) */
        rl_st16_sys((uint8_t *)d.rx_buffer + (size_t)L.slot * d.rx_slot_stride + (k - RL_SPEC_CQE_BYTES / 16) * 16, poison);
}

/* Warp 0, the request loaded (in `req`, or in registers): its id for the stamp, and the
 * pre-poll request. */
__device__ __forceinline__ void rl_consumed(struct rl_loop &L, const struct rl_transceiver_desc &d, uint32_t request_id,
                                            struct rl_prepoll *pp, uint32_t &have_pre, uint32_t lane) {
    L.request_id = request_id; /* lane 0's: the request's bytes 12..15 */
    /* (the CQE and the slot are poisoned when the message is answered: rl_poison) */
#if RL_PREPOLL
    /* While messages queue up (this one was there at the first read), warp 1 reads the next
     * message while this one is answered (nothing uses it before the next poll): back to back,
     * the poll then costs no PCIe round trip of its own. Not in a closed loop, where it would
     * find nothing. Its CQE and slot were poisoned when last consumed (entries and slots
     * messages ago, fenced since: the slot is not this message's, rx_slots >= 2), so it is
     * checked exactly like a poll's read. */
    if (L.busy) {
        if (lane == 0) {
            pp->ci = L.ci_next;
            pp->slot = L.predicted;
            pp->chunks = L.spec_chunks;
            __threadfence_block();
            pp->req = pp->req + 1;
        }
        have_pre = 1;
    }
#endif
    RL_PMARK(3);
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

/* Warp 0, step 4: answers `n` bytes at `answer` (or from `regs`), or none when n < 0, up to and
 * including the doorbell; rl_answer_after does the rest. */
__device__ __forceinline__ struct rl_sent rl_answer_send(struct rl_loop &L, const struct rl_transceiver_desc &d, int n, const uint8_t *answer,
                                                        uint32_t lane, uint32_t from_regs, uint4 regs) {
    uint32_t first = 0;   /* the answer's first WQEBB */
    uint32_t checked = 0; /* rung with a checked doorbell (no fence in front) */
    uint64_t t_db = 0;    /* lane 0: when the doorbell was rung */
    if (n >= 0) {
        /* inline: a register form's answer is at most RL_REG_MAX bytes (stage.cuh), so with
         * from_regs (a constant where it is called) the gathered branch is not even compiled */
        const uint32_t inl = n <= RL_MAX_INLINE || (RL_MAX_INLINE >= RL_REG_MAX && from_regs);
        const uint32_t nbb = inl ? rl_dev_verbs_inline_wqebbs((uint32_t)n) : 1;
        /* The send slots: room for the largest answer was made after the last message (lane 0,
         * below), so the reservation is the producer index, which every lane keeps alike: no
         * lane 0 step and no shuffle on the way to the doorbell. signal_every is a power of two
         * (rings.rs): shifts, not divisions. */
        first = L.sq.pi;
        L.sq.pi += nbb;
        const uint32_t fm_ce_se = ((first + nbb) >> L.sh != first >> L.sh) ? RL_WQE_CTRL_CQ_UPDATE : 0;
        RL_PMARK(5);
        uint64_t check; /* the lane's part of the WQE's check (and of the bytes it gathers) */
        if (inl) {
            /* from_regs: the answer is in `regs`, 16 bytes a lane (RL_REG_PATH, n <= 256) */
            check = from_regs ? rl_dev_verbs_wqe_prepare_send_inline_regs_warp_keyed(&L.sq, first, fm_ce_se, regs, (uint32_t)n, L.ck)
                              : rl_dev_verbs_wqe_prepare_send_inline_warp(&L.sq, first, fm_ce_se, answer, (uint32_t)n, (first - L.range_first) * 4);
        } else {
            /* the answer to its TX slot and a SEND that gathers it; with a checked doorbell the
             * check covers the slot's bytes too (abi.h rl_proxy_doorbell), so no fence goes in
             * front of this doorbell either */
            uint8_t *txs = (uint8_t *)d.tx_buffer + (size_t)(first & (d.sq.entries - 1)) * d.tx_slot_stride;
            check = rl_dev_verbs_put_gather_warp(txs, answer, (uint32_t)n, RL_DB_GATHER_CHUNK(first - L.range_first));
            if (lane == 0) {
                const uint64_t iova = d.tx_buffer_iova + (uint64_t)(first & (d.sq.entries - 1)) * d.tx_slot_stride;
                check ^= rl_dev_verbs_wqe_prepare_send(&L.sq, first, fm_ce_se, iova, d.tx_lkey, (uint32_t)n, (first - L.range_first) * 4);
            }
        }
#if RL_CHECKED_DOORBELL
        RL_PMARK(6);
        rl_dev_verbs_submit_proxy_checked_warp(&L.sq, L.range_first, L.range_check, check);
        if (lane == 0) t_db = rl_globaltimer();
#ifdef RL_PROFILE
        L.p_db = RL_PCLOCK();
        RL_PMARK(7);
#endif
        checked = 1;
#else
        (void)check;
        rl_poison(L, d, lane);
        __syncwarp(); /* every lane's WQE, payload and poison stores precede the doorbell's fence */
        RL_PMARK(6);
        if (lane == 0) {
#if RL_DOORBELL_MMIO
            /* the WQE's first 8 bytes from registers, not read back from the ring */
            const uint4 c0 = rl_dev_verbs_ctrl(&L.sq, first, RL_OPCODE_SEND, inl ? rl_dev_verbs_inline_bytes((uint32_t)n) / 16u : 2u, fm_ce_se, 0);
            rl_dev_verbs_ring_db_mmio_ctrl(&L.sq, ((uint64_t)c0.y << 32) | c0.x);
#else
            rl_dev_verbs_submit_proxy(&L.sq);
#endif
            t_db = rl_globaltimer();
        }
#ifdef RL_PROFILE
        L.p_db = RL_PCLOCK();
        RL_PMARK(7);
#endif
#endif
    }
    struct rl_sent sent = {first, checked, t_db};
    return sent;
}

/* Warp 0, step 5 after rl_answer_send: the poison, the release fence when due, the re-posts, the
 * message consumed and stamped, the send queue's room for the next answer. */
__device__ __forceinline__ void rl_answer_after(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl, int n,
                                                struct rl_sent sent, uint32_t lane) {
    const uint32_t first = sent.first, checked = sent.checked;
    uint64_t t_db = sent.t_db; /* lane 0: when the doorbell was rung (or the message dropped) */
    if (n < 0 || checked) rl_poison(L, d, lane);
    /* The release fence: 2 when one already went in front of an unchecked doorbell; 1 when it
     * is due now (no fence in front of a checked doorbell or a dropped message, so this one
     * orders this and the earlier unfenced messages' WQEs and poison before the re-posts and
     * the next range); 0 while it can wait: the range grows (to range_max WQEBBs) and the
     * receives wait to be re-posted (fence_every messages at most). Waiting saves the fence's
     * ~0.55 us, which also waits for warp 1's read of the next message while they queue. */
    uint32_t fence = 2;
    if (lane == 0 && (n < 0 || checked))
        fence = (++L.unfenced >= L.fence_every || L.sq.pi - L.range_first + RL_MAX_INLINE_BBS > L.range_max) ? 1 : 0;
    fence = __shfl_sync(0xffffffffu, fence, 0);
    if (fence == 1) __syncwarp(); /* every lane's stores (WQE, poison) precede lane 0's fence */
    if (lane == 0) {
        if (n < 0) t_db = rl_globaltimer();
        L.unposted++;
        L.rcq.ci++;
        if (fence == 1) rl_fence_release_sys();
        if (fence != 0) {
            rl_dev_verbs_post_recv(&L.rq, L.unposted);
            rl_dev_verbs_cq_update_ci(&L.rcq);
            L.unposted = L.unfenced = 0;
            L.range_first = L.sq.pi;
            L.range_check = 0;
        }
        if (n >= 0) {
            if (d.timestamps != 0 && d.timestamp_entries != 0) {
                struct rl_msg_timestamp *ts = (struct rl_msg_timestamp *)d.timestamps + (L.processed & (d.timestamp_entries - 1));
                uint4 a, b, c;
                a.x = (uint32_t)L.t_seen;
                a.y = (uint32_t)(L.t_seen >> 32);
                a.z = (uint32_t)t_db;
                a.w = (uint32_t)(t_db >> 32);
                /* the CQE's timestamp (bytes 48..55, BE): the NIC's clock */
                b.x = rl_bswap32(L.tail.y);
                b.y = rl_bswap32(L.tail.x);
                b.z = L.request_id;
                b.w = L.slot;
                c.x = L.len;
                c.y = first;
#ifdef RL_PROFILE
                c.z = RL_PROFILE_A == 8 ? (uint32_t)L.p_gap : (uint32_t)(L.t_loaded - L.p_seen);
                c.w = RL_PROFILE_B == 8 ? (uint32_t)L.p_gap : (uint32_t)(L.t_written - L.p_seen);
#else
                c.z = 0;
                c.w = 0;
#endif
                rl_st16_sys(ts, a);
                rl_st16_sys((uint8_t *)ts + 16, b);
                rl_st16_sys((uint8_t *)ts + 32, c);
            }
            L.processed++;
            rl_st64_sys(&ctl->processed, L.processed);
        } else {
            L.dropped++;
            rl_st32_sys(&ctl->dropped, L.dropped);
            rl_st32_sys(&ctl->error, L.valid ? RL_ERR_NONE : RL_ERR_BAD_SLOT);
        }
        /* reclaim send-queue space between messages, not while one waits, and make room for
         * the next answer, whatever its size (its reservation above does not look) */
        if (L.sq.pi - L.sq.done > L.sq.entries / 2) rl_reap_sends(L);
        uint64_t give_up = 0; /* once the host asked to stop: when a NIC that still
                               * completes nothing counts as stopped */
        while (L.sq.pi - L.sq.done + RL_MAX_INLINE_BBS > L.sq.entries) {
            rl_reap_sends(L);
            /* a NIC that stopped completing sends must not hold the kernel here for ever: the
             * host's stop ends the wait (each turn is a PCIe round already). A NIC that is only
             * slow gets RL_SQ_FULL_GRACE_NS to make room; the loop then stops as asked (no
             * WQE is written after: the next receive returns "exit"); one that made none by
             * then is reported (RL_ERR_SQ_FULL) */
            if (L.sq.pi - L.sq.done + RL_MAX_INLINE_BBS <= L.sq.entries) break;
            if (give_up == 0) {
                if (rl_ld32_sys(&ctl->exit_flag) != 0) give_up = rl_globaltimer() + RL_SQ_FULL_GRACE_NS;
            } else if (rl_globaltimer() > give_up) {
                rl_st32_sys(&ctl->error, RL_ERR_SQ_FULL);
                L.stop = 2;
                break;
            }
        }
        if (give_up != 0 && L.stop == 0) L.stop = 1;
    }
    L.range_first = __shfl_sync(0xffffffffu, L.range_first, 0);
    L.stop = __shfl_sync(0xffffffffu, L.stop, 0);
    if (__builtin_expect(L.exit_due, 0)) {
        L.exit_due = 0;
        if (__shfl_sync(0xffffffffu, L.exit_v, RL_EXIT_LANE) != 0 && L.stop == 0) L.stop = 1;
    }
    L.ck = rl_check_keys_of((L.sq.pi - L.range_first) * 4 + lane);
}

/* Warp 0: answers (step 4), then re-posts, consumes and stamps (step 5). */
__device__ __forceinline__ void rl_answer(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl, int n,
                                          const uint8_t *answer, uint32_t lane, uint32_t from_regs = 0, uint4 regs = uint4()) {
    /* an answer that neither goes inline nor fits a TX slot (the host makes the slots as long
     * as the requests', so only a stage that answers longer than its request could make one)
     * is dropped and counted, never written past its slot (from_regs: a constant, <= 256) */
    if (!from_regs && n > RL_MAX_INLINE && n > (int)d.tx_slot_stride) n = -1;
    const struct rl_sent sent = rl_answer_send(L, d, n, answer, lane, from_regs, regs);
    rl_answer_after(L, d, ctl, n, sent, lane);
}

#if RL_PREPOLL
/* Warp 1 (RL_PREPOLL): serves warp 0's pre-poll requests until warp 0 clears `run`. */
__device__ __forceinline__ void rl_prepoller(struct rl_prepoll *pp, const struct rl_dev_cq &rcq, const struct rl_transceiver_desc &d,
                                             uint32_t lane) {
    uint32_t seen = pp->done; /* a request warp 0 made while this warp was at the barrier is served */
    for (;;) {
        uint32_t r;
        while ((r = pp->req) == seen) {
            if (!pp->run) return;
            __nanosleep(32); /* the read it serves takes a PCIe round trip (~1 us) */
        }
        __threadfence_block();
        seen = r;
        const uint32_t ci = pp->ci, slot = pp->slot, chunks = pp->chunks;
        const uint8_t *src = lane < 4 ? rcq.ring + (size_t)(ci & (rcq.entries - 1)) * RL_CQE_SIZE + lane * 16
                                      : (const uint8_t *)d.rx_buffer + (size_t)slot * d.rx_slot_stride + (lane - 4) * 16;
        if (lane < 4 + chunks) pp->data[lane] = rl_ld16_sys(src);
        __syncwarp();
        if (lane == 0) {
            __threadfence_block();
            pp->done = r;
        }
    }
}
#endif

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
#ifdef RL_PROFILE
    L.t_loaded = L.t_written = 0;
    L.p_seen = L.p_db = L.p_gap = 0;
#endif
    uint32_t have_pre = 0; /* RL_PREPOLL: warp 1 was asked to read the next message */
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
                if (__builtin_expect(got == 3, 1)) {
#ifdef RL_TEST_STALL
                    /* test hook (ROCELINK_TEST_STALL_KERNEL): hang without a heartbeat */
                    for (;;) {
                        if (rl_globaltimer() == 0) break;
                    }
#endif
                    rl_idle(L, d);
                    continue;
                }
#endif
                /* the common message (got 0) falls through: a branch, not a jump table */
                if (__builtin_expect(got != 0, 0)) {
                    if (got == 1) {
                        if (lane == 0) h.exit = 1;
                        break;
                    }
#ifdef RL_TEST_STALL
                    for (;;) {
                        if (rl_globaltimer() == 0) break;
                    }
#endif
                    /* got 2: a long message the poll did not read: the block loads it */
                    if (lane == 0) {
                        h.exit = 0;
                        h.resume = RL_BLOCK_LOAD;
                        h.rlen = (int)L.len;
                        h.src = (const uint8_t *)d.rx_buffer + (size_t)L.slot * d.rx_slot_stride;
                    }
                    break;
                }
#ifdef RL_TEST_STALL
                /* test hook (ROCELINK_TEST_STALL_KERNEL): hang without a heartbeat */
                for (;;) {
                    if (rl_globaltimer() == 0) break;
                }
#endif
#if RL_CHAIN_REGS
                if (L.in_regs) {
                    /* 3+4 in registers: lane m takes the request's bytes 16m.. from the lane of the
                     * poll's read that holds them (lanes 0..15 matter: <= 256 bytes) */
                    uint4 c = L.v;
                    if (L.in_regs != 3) {
                        const uint32_t src = ((L.in_regs == 1 ? 4u : 0u) + lane) & 31u;
                        c.x = __shfl_sync(0xffffffffu, L.v.x, src);
                        c.y = __shfl_sync(0xffffffffu, L.v.y, src);
                        c.z = __shfl_sync(0xffffffffu, L.v.z, src);
                        c.w = __shfl_sync(0xffffffffu, L.v.w, src);
                    }
                    rl_consumed(L, d, c.w, &pp, have_pre, lane);
                    const int rn = rl_run_chain_regs(c, (int)L.len);
                    RL_PMARK(4);
#if RL_MAX_INLINE >= 256
                    /* a register form's answer is at most 256 bytes (stage.cuh): it goes inline */
                    rl_answer(L, d, ctl, rn, 0, lane, 1, c);
#else
                    if (rn <= RL_MAX_INLINE) {
                        rl_answer(L, d, ctl, rn, 0, lane, 1, c);
                    } else {
                        /* too long to go inline in this build: the answer goes to shared
                         * memory and out through a TX slot */
                        if (lane < 16) *(uint4 *)(buf_b + lane * 16) = c;
                        __syncwarp();
                        rl_answer(L, d, ctl, rn, buf_b, lane);
                    }
#endif
                    rl_idle(L, d);
                    continue;
                }
#endif
                rl_consumed(L, d, ((const uint32_t *)buf_a)[3], &pp, have_pre, lane);
                const uint8_t *answer = 0;
                int resume = 0, rlen = 0;
                const int n = L.valid ? rl_run_chain_warp(buf_a, (int)L.len, buf_b, RL_MAX_MSG, &answer, (void *)d.stage_state, &resume, &rlen) : -1;
                if (n == RL_STAGE_TO_BLOCK) {
                    if (lane == 0) {
                        h.exit = 0;
                        h.resume = resume;
                        h.rlen = rlen;
                    }
                    break;
                }
                RL_PMARK(4);
                rl_answer(L, d, ctl, n, answer, lane);
                rl_idle(L, d);
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
        const uint8_t *answer = 0;
        int n;
        if (h.resume == RL_BLOCK_LOAD) {
            /* 2, the block's part: every thread loads its chunks of a long message, all in
             * flight; then warp 0 takes it as consumed and the block runs the whole chain */
            rl_load<RL_BLOCK_CHUNKS>(buf_a, h.src, (uint32_t)h.rlen, tid, RL_THREADS);
            __syncthreads();
            if (tid < 32) rl_consumed(L, d, ((const uint32_t *)buf_a)[3], &pp, have_pre, lane);
            n = rl_run_chain(buf_a, h.rlen, buf_b, RL_MAX_MSG, &answer, (void *)d.stage_state);
        } else {
            /* 3, the block's part: a stage's continuation, then the rest of the chain */
            n = rl_run_chain_block(buf_a, buf_b, RL_MAX_MSG, &answer, (void *)d.stage_state, h.resume, h.rlen);
        }
        RL_PMARK(4);
        /* the chain's stages end with a block barrier: the answer is the block's; warp 0 sends it
         * and goes back to polling, while the other warps return to the barrier above (nothing
         * of the block's is in buf_a or buf_b any more) */
        if (tid < 32) {
            rl_answer(L, d, ctl, n, answer, lane);
            rl_idle(L, d);
        }
    }
    if (tid == 0) {
        rl_fence_release_sys();
        rl_st32_sys(&ctl->state, (L.send_errors || L.stop == 2) ? RL_STATE_FAILED : RL_STATE_EXITED);
        if (L.send_errors && L.stop != 2) rl_st32_sys(&ctl->error, RL_ERR_CQE_ERROR);
    }
}
