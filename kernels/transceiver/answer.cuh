/*
 * kernels/transceiver/answer.cuh — the transceiver's answer (steps 4+5 of transceiver.cu):
 * warp 0 writes the SEND WQE (inline, from shared memory or from registers, or gathering a TX
 * slot), rings the doorbell (checked, fenced or MMIO), and after it poisons what the next
 * speculative reads may see, fences when due, re-posts the receives, stamps the message and
 * makes room in the send queue.
 *
 * Included by transceiver.cu after the loop state, before poll.cuh and dispatch.cuh.
 */

/* What rl_answer_send did: the answer's first WQEBB, whether it rang a checked doorbell, and
 * (lane 0) when. */
struct rl_sent {
    uint32_t first, checked;
    uint64_t t_db;
};

/* Lane 0: reaps send completions; everything below the last multiple of signal_every that a
 * completed WQE crossed is done (a send CQE reports its WQE's first WQEBB). */
__device__ __forceinline__ void rl_reap_sends(struct rl_loop &L) {
    rl_dev_verbs_poll_send_cq(&L.sq, &L.scq, &L.send_errors);
    L.sq.done = L.sq.done == 0 ? 0 : (((L.sq.done - 1) >> L.sh) + 1) << L.sh;
    if (L.sq.done > L.sq.pi) L.sq.done = L.sq.pi;
}

/* Warp 0, the message in shared memory or in registers: poisons what the next speculative
 * reads of its CQE and slot may see (posted writes; rl_receive trusts a word of its read only
 * when it no longer holds the poison). They must land before the NIC may write there again, which it
 * does only with a posted receive, and the host posts at most one receive per slot
 * (rings.rs QpSizes::posted_receives), so the slot's next message needs the receive this
 * message frees, re-posted after them: the release fence in front of the re-post orders them (the doorbell's fence for an unchecked doorbell,
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
            /* from_regs: the answer is in `regs`, 16 bytes a lane (the register path, n <= 256) */
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
        RL_PROFILED(L.p_db = RL_PCLOCK());
        RL_PMARK(7);
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
        RL_PROFILED(L.p_db = RL_PCLOCK());
        RL_PMARK(7);
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
     * receives wait to be re-posted (fence_every messages at most). Waiting saves a fence,
     * which also waits for warp 1's read of the next message while they queue. */
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

