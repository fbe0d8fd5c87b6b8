/*
 * kernels/transceiver/poll.cuh — the transceiver's receive (steps 1+2 of transceiver.cu):
 * warp 0 polls the receive CQ and the predicted slot in one read, takes the message apart on
 * the fast path (in the read's registers) or the general path (through shared memory), and
 * loads what the read did not bring; warp 1's pre-poll; the request's loads.
 *
 * Included by transceiver.cu after the loop state and answer.cuh (the fast path answers
 * without leaving the receive).
 */

/* The chunks of the predicted slot to read with the CQE, from the size of the last message:
 * none when it came in the CQE (polling its slot too would only slow the NIC's write of it) or
 * when it was longer than `spec` bytes (min(slot stride, RL_SPEC_BYTES): it would be read
 * again anyway; decisions.md: how the CQE is polled). */
__device__ __forceinline__ uint32_t rl_spec_chunks(uint32_t spec, uint32_t last_len) {
    return last_len > RL_CQE_INLINE_MAX && last_len <= spec ? (last_len + 15) / 16 : 0;
}

/* Loads `len` bytes at `src` (host memory) into `dst` (shared), thread `t` of `nt` loading
 * the 16-byte chunks t, t + nt, ..., every load issued before the first store that uses one
 * (RL_WARP_LOAD: who loads a long request). */
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

/* The fast path, a message taken (uniform values): the loop's state the next poll and the
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

/* The fast path, the rest of the taken message's state: where its request is, and the CQE's
 * bytes 48..63 (the stamp's NIC time), from lane 3 of the poll's read. Warp scope. */
__device__ __forceinline__ void rl_fast_rest(struct rl_loop &L, uint4 v, uint32_t w3, uint32_t in_regs) {
    L.in_regs = in_regs;
    L.tail.x = __shfl_sync(0xffffffffu, v.x, 3);
    L.tail.y = __shfl_sync(0xffffffffu, v.y, 3);
    L.tail.z = __shfl_sync(0xffffffffu, v.z, 3);
    L.tail.w = w3;
}

/* rl_receive's outcomes */
#define RL_GOT_REQUEST 0u  /* the request in `req` or in registers (L.in_regs); L.valid: well-formed, else dropped */
#define RL_GOT_EXIT 1u     /* the host asked the kernel to stop */
#define RL_GOT_LONG 2u     /* the block is to load it: longer than RL_WARP_LOAD and not read with the poll (slot L.slot) */
#define RL_GOT_ANSWERED 3u /* the fast path answered it: steps 3-5 done */

/* What the poll's last read brought. */
struct rl_polled {
    uint4 v;               /* this lane's 16 bytes: the CQE line (lanes 0..3), then the predicted slot's */
    uint32_t w3;           /* CQE bytes 60..63 (lane 3's v.w: the owner byte's word) */
    uint32_t imm_be, bc_be; /* CQE bytes 36..39 and 44..47 (lane 2's v.y, v.w): immediate, byte count */
    uint32_t reads;        /* the poll's reads (1: the message was there at the first) */
};

/* Warp 0, step 1: polls until the CQE's owner byte says it is new (`parity`: this pass's
 * owner bit). One load instruction a poll (abi.h RL_SPEC_BYTES): the lanes with `loads` read
 * their 16 bytes at `src` (lanes 0..3 the whole CQE line, lanes 4.. the first chunks of the
 * predicted slot); once in RL_EXIT_POLL_EVERY polls lane RL_EXIT_LANE reads the exit flag in
 * the same round. Warp 1's pre-poll read, when there is one, stands for the first. Returns
 * RL_GOT_EXIT when the host asked to stop (or had: L.stop), else RL_GOT_REQUEST with the read
 * in `p`. */
__device__ __forceinline__ uint32_t rl_poll(struct rl_loop &L, struct rl_control *ctl, struct rl_prepoll *pp, uint32_t &have_pre, uint32_t lane,
                                            const uint8_t *src, uint32_t loads, uint32_t parity, struct rl_polled &p) {
    p.reads = 0;
    p.v = make_uint4(0, 0, 0, 0);
#if RL_PREPOLL
    if (have_pre) {
        /* warp 1's read of this CQE and slot: checked exactly like a poll's read below */
        while (pp->done != pp->req) {
        }
        __threadfence_block();
        if (loads) p.v = pp->data[lane];
    }
#endif
    RL_PROFILED(L.p_gap = RL_PCLOCK() - L.p_db); /* mark 8 */
    if (__builtin_expect(L.stop != 0, 0)) return RL_GOT_EXIT;
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
                p.v = rl_ld16_sys(src);
            else if (lane == RL_EXIT_LANE && check_exit)
                p.v.x = rl_ld32_sys(&ctl->exit_flag);
        } else if (lane == RL_EXIT_LANE && check_exit) {
            p.v.x = rl_ld32_sys(&ctl->exit_flag);
        }
        have_pre = 0;
        ++p.reads;
        p.w3 = __shfl_sync(0xffffffffu, p.v.w, 3);
        /* the fast path's next two words, moved with the owner byte's (the same wait) */
        p.imm_be = __shfl_sync(0xffffffffu, p.v.y, 2);
        p.bc_be = __shfl_sync(0xffffffffu, p.v.w, 2);
        const uint32_t own = p.w3 >> 24;
        if ((own >> 4) != RL_CQE_INVALID && (own & RL_CQE_OWNER_MASK) == parity) break;
        const uint32_t quit = __shfl_sync(0xffffffffu, p.v.x, RL_EXIT_LANE);
        ++L.idle;
        if (lane == 0 && (L.idle % RL_HEARTBEAT_EVERY) == 0) rl_st64_sys(&ctl->heartbeat, ++L.heartbeat);
        if (check_exit && quit != 0) return RL_GOT_EXIT;
    }
    /* a poll that found a message counts too, and the exit flag it read is looked at after
     * this message's doorbell (rl_answer_after): a stream that never leaves the data path
     * idle (a flood, an FPGA faster than the loop) still stops (decisions.md: the exit flag
     * under a flood). */
    ++L.idle;
    L.exit_v = p.v.x;
    L.exit_due = check_exit;
    return RL_GOT_REQUEST;
}

/* Warp 0: polls for the next message and takes it apart (steps 1+2): an RL_GOT_* outcome.
 * After RL_GOT_REQUEST, rl_consumed, once the request is in `req` or in registers. (One
 * function: the fast and the general path as functions of their own compile to other code.) */
__device__ __forceinline__ uint32_t rl_receive(struct rl_loop &L, const struct rl_transceiver_desc &d, struct rl_control *ctl,
                                               uint8_t *req, uint8_t *cqe_sh, struct rl_prepoll *pp, uint32_t &have_pre, uint32_t lane) {
    /* When the owner byte says the CQE is new, its 16-byte chunk (bytes 48..63: owner,
     * timestamp, wqe counter) is this CQE's, since the NIC writes op_own last; every other
     * word of the read may predate the NIC's write and is trusted only when it no longer holds
     * the poison. */
    const uint32_t ci = L.ci_next, pslot = L.predicted, spec_chunks = L.spec_chunks;
    const uint8_t *cqe = L.rcq.ring + (size_t)(ci & (L.rcq.entries - 1)) * RL_CQE_SIZE;
    const uint8_t *slot_base = (const uint8_t *)d.rx_buffer;
    const uint8_t *src = lane < 4 ? cqe + lane * 16 : slot_base + (size_t)pslot * d.rx_slot_stride + (lane - 4) * 16;
    const uint32_t loads = lane < 4 + spec_chunks;
    const uint32_t parity = (ci / L.rcq.entries) & 1;
    /* the fast path is tried when a message like the last would take it (uniform: L.last_len
     * and spec_chunks are alike in every lane): a stream of long messages pays nothing for it */
    const uint32_t fast = spec_chunks != 0 ? spec_chunks * 16u <= RL_FAST_MAX : L.last_len <= RL_CQE_INLINE_MAX;
    struct rl_polled p;
    if (rl_poll(L, ctl, pp, have_pre, lane, src, loads, parity, p) == RL_GOT_EXIT) return RL_GOT_EXIT;
    /* the CQE seen: stamped here, before either path's checks (the turnaround the report
     * splits out is from this point to the doorbell, whichever path the message takes) */
    if (lane == 0) L.t_seen = rl_globaltimer();
    RL_PROFILED(L.p_seen = RL_PCLOCK());

    /* ---- 2a. the fast path: the general path's checks, made on the registers the poll
     * filled (the CQE's immediate and byte count shuffled from lane 2 in the poll loop), one
     * vote. A message that passes is answered from here, straight to the doorbell, or, for a
     * chain without register forms, stored to `req` for its warp forms; any other goes on to
     * the general path, which checks it again from the start. */
    if (fast) {
        const uint4 v = p.v;
        const uint32_t w3 = p.w3, imm_be = p.imm_be, bc_be = p.bc_be, reads = p.reads;
        /* `base`: the lane holding the request's first 16 bytes (4 when the poll read the
         * predicted slot, else 0: the CQE's inline bytes) */
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
        const uint32_t from = (base + lane) & 31u;
        uint4 c;
        c.x = __shfl_sync(0xffffffffu, v.x, from);
        c.y = __shfl_sync(0xffffffffu, v.y, from);
        c.z = __shfl_sync(0xffffffffu, v.z, from);
        c.w = __shfl_sync(0xffffffffu, v.w, from);
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
            return RL_GOT_ANSWERED;
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
            return RL_GOT_REQUEST;
        }
#endif
    }

    /* ---- 2b. the general path: the poll's read through shared memory (the CQE to `cqe_sh`,
     * the slot's bytes to `req`), checked word by word; what may predate the NIC's write is
     * read again, and a request the read did not hold whole is loaded (up to RL_WARP_LOAD
     * bytes by this warp; a longer one is left to the block: RL_GOT_LONG). */
    const uint4 v = p.v;
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
    L.busy = p.reads == 1;
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
    return reload && len > RL_WARP_LOAD ? RL_GOT_LONG : RL_GOT_REQUEST;
}

/* Warp 1: serves warp 0's pre-poll requests until warp 0 clears `run`. */
__device__ __forceinline__ void rl_prepoller(struct rl_prepoll *pp, const struct rl_dev_cq &rcq, const struct rl_transceiver_desc &d,
                                             uint32_t lane) {
    uint32_t seen = pp->done; /* a request warp 0 made while this warp was at the barrier is served */
    for (;;) {
        uint32_t r;
        while ((r = pp->req) == seen) {
            if (!pp->run) return;
            __nanosleep(32); /* the read it serves takes a PCIe round trip */
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
