/*
 * kernels/verbs.cuh — the device verbs layer: what a CUDA kernel needs to drive one mlx5
 * queue pair (abi.h layouts), shaped after DOCA GPUNetIO's device verbs API so that a build
 * against GPUNetIO could swap it in:
 *
 *   rl_dev_verbs_poll_cq_at          poll a CQ at an index (owner-bit parity, acquire)
 *   rl_dev_verbs_reserve_wq_slots    reserve send WQEBBs
 *   rl_dev_verbs_get_wqe_ptr         address of a reserved WQEBB
 *   rl_dev_verbs_wqe_prepare_send    SEND with one gather entry
 *   rl_dev_verbs_wqe_prepare_send_inline   SEND with the data inline (may span WQEBBs), from
 *                                    memory or from registers (_regs_warp; _regs_warp_keyed with
 *                                    the check's keys computed ahead, rl_check_keys_of)
 *   rl_dev_verbs_wqe_prepare_write   RDMA WRITE / WRITE with immediate
 *   rl_dev_verbs_put_gather_warp     write the bytes a WQE gathers (a TX slot), with their check
 *   rl_dev_verbs_submit_proxy        doorbell record + CPU-proxy doorbell (software NIC, or a
 *                                    CPU thread that rings a real NIC)
 *   rl_dev_verbs_submit_proxy_checked_warp   the same without the fence in front: the
 *                                    doorbell carries a check of the WQEs since the last fence
 *   rl_dev_verbs_ring_db_mmio        doorbell record + MMIO doorbell (a real ConnectX whose UAR
 *                                    is mapped into the GPU); _ctrl: the WQE's first 8 bytes
 *                                    given, not read back from the ring
 *   rl_dev_verbs_post_recv           re-post receive WQEs through the doorbell record
 *
 * Scope: every function is called by one thread (thread scope) unless its name ends in
 * _warp, where all 32 lanes of the warp call it together.
 *
 * Memory: the rings live in pinned host memory mapped into the GPU (software NIC) or in GPU
 * memory (real NIC with GPUDirect). Every load of a word the NIC writes is a volatile
 * (relaxed, system-scope) load, every fence is system scope, because the other side is across
 * PCIe. Each dependent read of host memory costs a PCIe round trip (about a microsecond):
 * functions here issue independent loads together.
 */
#ifndef ROCELINK_VERBS_CUH
#define ROCELINK_VERBS_CUH

#include "abi.h"

/* ---- byte order and PTX helpers ---------------------------------------------------- */

__device__ __forceinline__ uint32_t rl_bswap32(uint32_t x) { return __byte_perm(x, 0, 0x0123); }
__device__ __forceinline__ uint16_t rl_bswap16(uint16_t x) { return (uint16_t)((x >> 8) | (x << 8)); }
__device__ __forceinline__ uint64_t rl_bswap64(uint64_t x) {
    return ((uint64_t)rl_bswap32((uint32_t)x) << 32) | rl_bswap32((uint32_t)(x >> 32));
}

/** %globaltimer: nanoseconds, the GPU's global clock. */
__device__ __forceinline__ uint64_t rl_globaltimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/** One 16-byte volatile (relaxed, system-scope) load: one PCIe read for host memory. */
__device__ __forceinline__ uint4 rl_ld16_sys(const void *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/*
 * A load of data published by the NIC, issued after the acquire: a weak load (ld.global). The
 * acquire fence already orders it after the flag (PTX's flag/data pattern; it also empties
 * L1), and one thread's weak loads are in flight together, where strong system-scope loads
 * (volatile, .cv) go one after the other (decisions.md: data loads after the acquire).
 */
__device__ __forceinline__ uint4 rl_ld16_data(const void *p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint32_t rl_ld32_sys(const void *p) {
    uint32_t v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void rl_st16_sys(void *p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ void rl_st32_sys(void *p, uint32_t v) {
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void rl_st64_sys(void *p, uint64_t v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * Fences across PCIe, one-directional (PTX 8.6, sm_90): fence.acquire.sys after seeing a flag,
 * fence.release.sys before publishing one; cheaper than fence.acq_rel.sys on both sides
 * (decisions.md: one-way fences).
 */
/** Acquire side of a flag/data handoff across PCIe: after seeing the flag, before the data. */
__device__ __forceinline__ void rl_fence_acquire_sys(void) { asm volatile("fence.acquire.sys;" ::: "memory"); }
/** Release side: after writing the data, before publishing the flag. */
__device__ __forceinline__ void rl_fence_release_sys(void) { asm volatile("fence.release.sys;" ::: "memory"); }

/* ---- completion queues ------------------------------------------------------------- */

/** A CQ as the data path tracks it. */
struct rl_dev_cq {
    uint8_t *ring;        /* entry 0 */
    uint32_t *dbrec;      /* rl_cq_dbrec.set_ci (BE) */
    uint32_t entries;     /* power of two */
    uint32_t ci;          /* next entry to consume */
};

/** What a CQE says, decoded. */
struct rl_dev_cqe {
    uint32_t imm;
    uint32_t byte_cnt;
    uint16_t wqe_counter;
    uint8_t opcode;
    uint8_t inline_scatter;
};

/**
 * Polls the CQE at `cq->ci` once: one 16-byte volatile load of bytes 48..63 (op_own is byte
 * 63). Returns 1 when the entry is valid for this pass (owner bit == (ci / entries) & 1 and
 * the opcode is not INVALID) and issues the acquire fence, so the caller may then read the
 * rest of the entry and the data it describes. Returns 0 otherwise. Thread scope. (The
 * transceiver polls without it: the whole entry and the predicted slot's first bytes in one
 * read, checked against the poison, abi.h RL_SPEC_BYTES; decisions.md: how the CQE is polled.)
 */
__device__ __forceinline__ int rl_dev_verbs_poll_cq_at(const struct rl_dev_cq *cq, uint32_t ci, uint4 *tail) {
    const uint8_t *cqe = cq->ring + (size_t)(ci & (cq->entries - 1)) * RL_CQE_SIZE;
    uint4 t = rl_ld16_sys(cqe + 48);
    uint8_t op_own = (uint8_t)(t.w >> 24);
    if ((op_own >> 4) == RL_CQE_INVALID || (op_own & RL_CQE_OWNER_MASK) != ((ci / cq->entries) & 1)) return 0;
    rl_fence_acquire_sys();
    *tail = t;
    return 1;
}

/** Reads bytes 32..47 of a CQE the caller saw valid (after the acquire) and decodes it. */
__device__ __forceinline__ struct rl_dev_cqe rl_dev_verbs_read_cqe(const struct rl_dev_cq *cq, uint32_t ci, uint4 tail) {
    const uint8_t *cqe = cq->ring + (size_t)(ci & (cq->entries - 1)) * RL_CQE_SIZE;
    uint4 mid = rl_ld16_sys(cqe + 32);
    struct rl_dev_cqe c;
    c.imm = rl_bswap32(mid.y);       /* bytes 36..39 */
    c.byte_cnt = rl_bswap32(mid.w);  /* bytes 44..47 */
    uint32_t w = tail.w;             /* bytes 60..63: wqe_counter (BE16), signature, op_own */
    c.wqe_counter = rl_bswap16((uint16_t)(w & 0xffff));
    c.opcode = (uint8_t)(w >> 28);
    c.inline_scatter = (uint8_t)(((w >> 24) & RL_CQE_INLINE_SCATTER_32) != 0);
    return c;
}

/** Tells the NIC how far the CQ is consumed (posted write; no read). */
__device__ __forceinline__ void rl_dev_verbs_cq_update_ci(struct rl_dev_cq *cq) {
    rl_st32_sys(cq->dbrec, rl_bswap32(cq->ci & 0xffffff));
}

/* ---- the WQE check (abi.h rl_proxy_doorbell) ---------------------------------------- */

/** The check of 16-byte chunk number `i` (abi.h rl_proxy_doorbell: of a WQE, numbered from
 * 4 x its first WQEBB in the checked range, or of the bytes it gathers, from
 * RL_DB_GATHER_CHUNK): its two halves, each XORed with (i + 1) times a constant, multiplied
 * (128 bits), the product's halves XORed; a range's check is the XOR of its chunks'. One
 * multiply: the NIC hashes every checked byte in the answer's path. The same function as the
 * NIC's (Rust: abi::wqe_check, abi::gather_check). */
struct rl_check_keys {
    uint64_t x, y; /* (i + 1) times each constant */
};
/** Chunk i's two keys, for rl_check_chunk_keyed: a caller that knows i ahead (the next WQE's
 * position) computes them off its critical path. */
__device__ __forceinline__ struct rl_check_keys rl_check_keys_of(uint32_t i) {
    struct rl_check_keys k = {(uint64_t)(i + 1) * RL_WQE_CHECK_K0, (uint64_t)(i + 1) * RL_WQE_CHECK_K1};
    return k;
}
__device__ __forceinline__ uint64_t rl_check_chunk_keyed(struct rl_check_keys k, uint4 v) {
    const uint64_t x = (((uint64_t)v.y << 32) | v.x) ^ k.x; /* bytes 0..7, little-endian */
    const uint64_t y = (((uint64_t)v.w << 32) | v.z) ^ k.y; /* bytes 8..15 */
    return (x * y) ^ __umul64hi(x, y);
}
__device__ __forceinline__ uint64_t rl_check_chunk(uint32_t i, uint4 v) { return rl_check_chunk_keyed(rl_check_keys_of(i), v); }

/** XOR of `v` over the whole warp (redux.sync, sm_80+: one instruction; no memory ordering). */
__device__ __forceinline__ uint32_t rl_reduce_xor_warp(uint32_t v) {
    uint32_t r;
    asm volatile("redux.sync.xor.b32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
}

/* ---- send queue -------------------------------------------------------------------- */

struct rl_dev_sq {
    uint8_t *ring;             /* WQEBB 0 */
    uint32_t *dbrec;           /* rl_qp_dbrec.sq_counter (BE) */
    uint64_t *proxy;           /* rl_proxy_doorbell.sq_db, or 0 */
    volatile uint64_t *uar;    /* MMIO doorbell register (real NIC), or 0 */
    uint32_t entries;          /* WQEBBs, power of two */
    uint32_t qpn;
    uint32_t pi;               /* next WQEBB to write */
    uint32_t done;             /* WQEBBs known executed */
};

/** Reserves `n` WQEBBs; returns the index of the first, or -1 when the SQ is too full. */
__device__ __forceinline__ long long rl_dev_verbs_reserve_wq_slots(struct rl_dev_sq *sq, uint32_t n) {
    if (sq->pi - sq->done + n > sq->entries) return -1;
    uint32_t first = sq->pi;
    sq->pi += n;
    return first;
}

/** Address of WQEBB `index` (wrapping). */
__device__ __forceinline__ uint8_t *rl_dev_verbs_get_wqe_ptr(const struct rl_dev_sq *sq, uint32_t index) {
    return sq->ring + (size_t)(index & (sq->entries - 1)) * RL_WQEBB_SIZE;
}

/** Control segment words (16 bytes) for a WQE at `index` of `ds` segments. */
__device__ __forceinline__ uint4 rl_dev_verbs_ctrl(const struct rl_dev_sq *sq, uint32_t index, uint32_t opcode, uint32_t ds,
                                                  uint32_t fm_ce_se, uint32_t imm_be) {
    uint4 c;
    c.x = rl_bswap32(((index & 0xffff) << 8) | opcode);
    c.y = rl_bswap32(((sq->qpn & 0xffffff) << 8) | ds);
    c.z = fm_ce_se << 24; /* signature, rsvd[2], fm_ce_se: byte 11 */
    c.w = imm_be;
    return c;
}

/** A data (gather) segment: `len` bytes at `addr` (lkey). */
__device__ __forceinline__ uint4 rl_dev_verbs_dseg(uint64_t addr, uint32_t lkey, uint32_t len) {
    uint4 d;
    d.x = rl_bswap32(len & ~RL_INLINE_SEG);
    d.y = rl_bswap32(lkey);
    d.z = rl_bswap32((uint32_t)(addr >> 32));
    d.w = rl_bswap32((uint32_t)addr);
    return d;
}

/** SEND of `len` bytes at `addr` (lkey) in one WQEBB. Returns the WQE's check (its chunks
 * numbered from `check_base`, as rl_dev_verbs_wqe_prepare_send_inline_warp's) for a checked
 * doorbell, which must also cover the gathered bytes (rl_dev_verbs_put_gather_warp). Thread
 * scope. */
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_prepare_send(const struct rl_dev_sq *sq, uint32_t index, uint32_t fm_ce_se,
                                                                uint64_t addr, uint32_t lkey, uint32_t len, uint32_t check_base = 0) {
    uint8_t *w = rl_dev_verbs_get_wqe_ptr(sq, index);
    const uint4 c = rl_dev_verbs_ctrl(sq, index, RL_OPCODE_SEND, 2, fm_ce_se, 0);
    const uint4 d = rl_dev_verbs_dseg(addr, lkey, len);
    rl_st16_sys(w, c);
    rl_st16_sys(w + 16, d);
    return rl_check_chunk(check_base, c) ^ rl_check_chunk(check_base + 1, d);
}

/**
 * Writes the `len` bytes at `src` (16-byte aligned, shared or global memory, readable up to
 * the next 16-byte boundary) to `dst` (16-byte aligned: a TX slot a WQE will gather), lane k
 * the 16-byte chunks k, k + 32, ... Returns the lane's part of those bytes' check for a checked
 * doorbell (abi.h rl_proxy_doorbell): each chunk's rl_check_chunk, numbered from
 * `check_base` (RL_DB_GATHER_CHUNK of the gathering WQE's first WQEBB less the range's
 * first), the last chunk's bytes past `len` taken as zeros (what the NIC hashes; the bytes
 * stored there are padding it never sends). `len` <= RL_DB_GATHER_MAX. Warp scope.
 */
__device__ __forceinline__ uint64_t rl_dev_verbs_put_gather_warp(uint8_t *dst, const uint8_t *src, uint32_t len, uint32_t check_base) {
    uint64_t check = 0;
    for (uint32_t off = (threadIdx.x & 31) * 16; off < len; off += 32 * 16) {
        uint4 v = *(const uint4 *)(src + off);
        rl_st16_sys(dst + off, v);
        if (len - off < 16) {
            /* the bytes past len count as zeros: mask each word by the bytes of it left */
            const uint32_t left = len - off;
            const uint32_t m0 = left >= 4 ? 0xffffffffu : (1u << (8 * left)) - 1u;
            const uint32_t m1 = left >= 8 ? 0xffffffffu : left <= 4 ? 0u : (1u << (8 * (left - 4))) - 1u;
            const uint32_t m2 = left >= 12 ? 0xffffffffu : left <= 8 ? 0u : (1u << (8 * (left - 8))) - 1u;
            const uint32_t m3 = left <= 12 ? 0u : (1u << (8 * (left - 12))) - 1u;
            v.x &= m0;
            v.y &= m1;
            v.z &= m2;
            v.w &= m3;
        }
        check ^= rl_check_chunk(check_base + off / 16, v);
    }
    return check;
}

/** Bytes an inline SEND of `len` bytes occupies: the control segment, then the 4-byte count
 * and the data, in 16-byte segments (its `ds` is this / 16). */
__device__ __forceinline__ uint32_t rl_dev_verbs_inline_bytes(uint32_t len) {
    return 16 + ((4 + len + 15) & ~15u);
}
/** WQEBBs an inline SEND of `len` bytes occupies. */
__device__ __forceinline__ uint32_t rl_dev_verbs_inline_wqebbs(uint32_t len) {
    return (rl_dev_verbs_inline_bytes(len) + RL_WQEBB_SIZE - 1) / RL_WQEBB_SIZE;
}

/** Lane's part of writing a WQE chunk: stores `v` as bytes [off, off+16) of the WQE at WQEBB
 * `index` (a WQE may wrap around the end of the ring: each 64-byte WQEBB maps separately) and
 * returns its check with the chunk's keys given (rl_check_chunk_keyed); rl_dev_verbs_wqe_put_chunk
 * numbers the chunk check_base + off / 16. */
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_put_chunk_keyed(const struct rl_dev_sq *sq, uint32_t index, uint32_t off, uint4 v,
                                                                     struct rl_check_keys keys) {
    rl_st16_sys(rl_dev_verbs_get_wqe_ptr(sq, index + off / RL_WQEBB_SIZE) + off % RL_WQEBB_SIZE, v);
    return rl_check_chunk_keyed(keys, v);
}
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_put_chunk(const struct rl_dev_sq *sq, uint32_t index, uint32_t off, uint4 v,
                                                               uint32_t check_base) {
    return rl_dev_verbs_wqe_put_chunk_keyed(sq, index, off, v, rl_check_keys_of(check_base + off / 16));
}

/**
 * SEND with `len` bytes inline starting at WQEBB `index`, written by the whole warp: lane k
 * writes the k-th 16-byte chunk of the WQE (control segment, then byte_count, then the data),
 * so a WQE of up to 512 bytes is one store instruction. `src` is 16-byte aligned (shared or
 * global memory) and readable up to the next 16-byte boundary past `len`. Warp scope.
 *
 * The inline data starts at WQE byte 20, so WQE chunk [off, off+16) holds data bytes
 * [off-20, off-4): four aligned words, no byte shuffling. Bytes past `len` are padding the
 * NIC ignores. Returns the lane's part of the check (rl_check_chunk of the chunks it
 * wrote, numbered from `check_base`: 4 x the WQE's first WQEBB less the checked range's
 * first; 0 for none) for rl_dev_verbs_submit_proxy_checked_warp.
 */
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_prepare_send_inline_warp(const struct rl_dev_sq *sq, uint32_t index,
                                                                             uint32_t fm_ce_se, const uint8_t *src, uint32_t len,
                                                                             uint32_t check_base) {
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t total = rl_dev_verbs_inline_bytes(len);
    const uint32_t ds = total / 16;
    const uint32_t *d32 = (const uint32_t *)src;
    uint64_t check = 0;
    for (uint32_t off = lane * 16; off < total; off += 32 * 16) {
        uint4 v;
        if (off == 0) {
            v = rl_dev_verbs_ctrl(sq, index, RL_OPCODE_SEND, ds, fm_ce_se, 0);
        } else {
            int w = ((int)off - 20) / 4; /* data word at WQE byte off (-1 for the byte_count) */
            v.x = off == 16 ? rl_bswap32(len | RL_INLINE_SEG) : d32[w];
            v.y = d32[w + 1];
            v.z = d32[w + 2];
            v.w = d32[w + 3];
        }
        check ^= rl_dev_verbs_wqe_put_chunk(sq, index, off, v, check_base);
    }
    return check;
}

/**
 * The same SEND with the data in registers: lane m holds data bytes [16m, 16m+16) in `data`
 * (bytes past `len` are padding the NIC ignores), `len` <= 492 (the WQE's last chunk is lane
 * 31's). Lane k writes WQE chunk k: data chunk k-1's first twelve bytes behind the last four
 * of chunk k-2 (three shuffles up by one lane, one by two), so an answer built in registers
 * goes out with no shared-memory round trip. Returns the lane's part of the check, as above.
 * Warp scope.
 */
/* The same with the lane's check keys given (rl_check_keys_of(check_base + lane), computed ahead
 * by a caller that knows where its next WQE goes). */
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_prepare_send_inline_regs_warp_keyed(const struct rl_dev_sq *sq, uint32_t index,
                                                                                        uint32_t fm_ce_se, uint4 data, uint32_t len,
                                                                                        struct rl_check_keys keys) {
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t total = rl_dev_verbs_inline_bytes(len);
    uint4 v;
    v.x = __shfl_up_sync(0xffffffffu, data.w, 2);
    v.y = __shfl_up_sync(0xffffffffu, data.x, 1);
    v.z = __shfl_up_sync(0xffffffffu, data.y, 1);
    v.w = __shfl_up_sync(0xffffffffu, data.z, 1);
    if (lane == 1) v.x = rl_bswap32(len | RL_INLINE_SEG);
    if (lane == 0) v = rl_dev_verbs_ctrl(sq, index, RL_OPCODE_SEND, total / 16, fm_ce_se, 0);
    return lane * 16 < total ? rl_dev_verbs_wqe_put_chunk_keyed(sq, index, lane * 16, v, keys) : 0;
}
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_prepare_send_inline_regs_warp(const struct rl_dev_sq *sq, uint32_t index,
                                                                                  uint32_t fm_ce_se, uint4 data, uint32_t len,
                                                                                  uint32_t check_base) {
    return rl_dev_verbs_wqe_prepare_send_inline_regs_warp_keyed(sq, index, fm_ce_se, data, len, rl_check_keys_of(check_base + (threadIdx.x & 31)));
}

/** RDMA WRITE (or WRITE with immediate when `with_imm`) of `len` bytes at `addr` to the peer.
 * Returns the WQE's check, as rl_dev_verbs_wqe_prepare_send's. Thread scope. */
__device__ __forceinline__ uint64_t rl_dev_verbs_wqe_prepare_write(const struct rl_dev_sq *sq, uint32_t index, uint32_t fm_ce_se,
                                                                 int with_imm, uint32_t imm, uint64_t raddr, uint32_t rkey,
                                                                 uint64_t addr, uint32_t lkey, uint32_t len, uint32_t check_base = 0) {
    uint8_t *w = rl_dev_verbs_get_wqe_ptr(sq, index);
    uint32_t op = with_imm ? RL_OPCODE_RDMA_WRITE_IMM : RL_OPCODE_RDMA_WRITE;
    const uint4 c = rl_dev_verbs_ctrl(sq, index, op, 3, fm_ce_se, with_imm ? rl_bswap32(imm) : 0);
    uint4 r;
    r.x = rl_bswap32((uint32_t)(raddr >> 32));
    r.y = rl_bswap32((uint32_t)raddr);
    r.z = rl_bswap32(rkey);
    r.w = 0;
    const uint4 d = rl_dev_verbs_dseg(addr, lkey, len);
    rl_st16_sys(w, c);
    rl_st16_sys(w + 16, r);
    rl_st16_sys(w + 32, d);
    return rl_check_chunk(check_base, c) ^ rl_check_chunk(check_base + 1, r) ^ rl_check_chunk(check_base + 2, d);
}

/**
 * Submits every WQEBB below `sq->pi` in CPU-proxy mode: release fence (the WQEs and any data
 * they gather are visible system-wide first), doorbell record, then the proxy word the NIC
 * engine polls (abi.h rl_proxy_doorbell). Thread scope; all writes are posted (no read).
 */
__device__ __forceinline__ void rl_dev_verbs_submit_proxy(struct rl_dev_sq *sq) {
    rl_fence_release_sys();
    rl_st32_sys(sq->dbrec, rl_bswap32(sq->pi & 0xffff));
    rl_st64_sys(sq->proxy, sq->pi & RL_DB_PI_MASK);
}

/**
 * Submits in CPU-proxy mode without a fence in front (abi.h rl_proxy_doorbell, checked): the
 * doorbell record, then the proxy word naming the checked range [range_first, sq->pi), the
 * WQEs written since the caller's last system-scope release fence, with their check:
 * `range_check` (lane 0's running XOR over the range, which this adds the warp's `check`
 * to: every lane's part from rl_dev_verbs_wqe_prepare_send_inline_warp). The NIC executes
 * them once their bytes give that check, so the doorbell need not wait for a fence, which
 * waits for the WQE stores to land (decisions.md: the checked doorbell). The range is at most
 * 16 WQEBBs (the caller fences, after a warp barrier, before it would grow past that, and then
 * starts a new range at sq->pi). A WQE that gathers has the gathered bytes' check in `check`
 * too (rl_dev_verbs_put_gather_warp, written since the last fence as well). Warp scope: every
 * lane calls it; lane 0 stores.
 */
__device__ __forceinline__ void rl_dev_verbs_submit_proxy_checked_warp(struct rl_dev_sq *sq, uint32_t range_first, uint64_t &range_check,
                                                                      uint64_t check) {
    const uint32_t lo = rl_reduce_xor_warp((uint32_t)check);
    const uint32_t hi = rl_reduce_xor_warp((uint32_t)(check >> 32));
    if ((threadIdx.x & 31) == 0) {
        range_check ^= ((uint64_t)hi << 32) | lo;
        rl_st32_sys(sq->dbrec, rl_bswap32(sq->pi & 0xffff));
        rl_st64_sys(sq->proxy, (uint64_t)(sq->pi & RL_DB_PI_MASK) | ((uint64_t)((sq->pi - range_first - 1) & RL_DB_LAST_MASK) << RL_DB_LAST_SHIFT) |
                                   (1ull << RL_DB_CHECKED_BIT) | (range_check >> RL_DB_CHECK_SHIFT << RL_DB_CHECK_SHIFT));
    }
}

/**
 * Submits with the MMIO doorbell of a real ConnectX (UAR mapped into the GPU): release fence
 * (the WQEs and what they gather are visible first), doorbell record, release fence (the
 * record before the doorbell: they go to different places, host memory and the device's
 * BAR), then `ctrl8`, the last WQE's first 8 control-segment bytes as they lie in memory
 * (rl_dev_verbs_ctrl's .x then .y), into the UAR (PROTOCOLS.md 4). No fence after it: nothing
 * the NIC reads for this doorbell is written later, and the next doorbell's first fence
 * orders this one before anything after (a GPU has no write-combining buffer to flush, which
 * is what rdma-core's CPU path flushes there; decisions.md: a fence after the doorbell).
 * Thread scope.
 */
__device__ __forceinline__ void rl_dev_verbs_ring_db_mmio_ctrl(struct rl_dev_sq *sq, uint64_t ctrl8) {
    rl_fence_release_sys();
    rl_st32_sys(sq->dbrec, rl_bswap32(sq->pi & 0xffff));
    rl_fence_release_sys();
    rl_st64_sys((uint64_t *)sq->uar, ctrl8);
}

/**
 * The same, the 8 bytes read back from the last WQE (`last`: its first WQEBB's index). Where
 * the ring is host memory, that read is a PCIe round trip of its own: a caller that has the
 * control segment in registers uses rl_dev_verbs_ring_db_mmio_ctrl. Thread scope.
 */
__device__ __forceinline__ void rl_dev_verbs_ring_db_mmio(struct rl_dev_sq *sq, uint32_t last) {
    rl_dev_verbs_ring_db_mmio_ctrl(sq, *(const uint64_t *)rl_dev_verbs_get_wqe_ptr(sq, last));
}

/** Send CQ entries read per reap, all in one PCIe round (decisions.md: send completions
 * reaped in one round). */
#define RL_SCQ_BATCH 8

/** Reaps send completions: reads the owner chunks (bytes 48..63) of the next RL_SCQ_BATCH
 * send CQ entries with every load in flight (one PCIe round, not one dependent read per
 * entry, which put a stall in front of every ~30th message), then consumes them in order up
 * to the first one the NIC has not written. Everything used (op_own, wqe_counter) is in the chunk that carries
 * the owner byte, which the NIC writes last. Returns CQEs consumed. Thread scope. */
__device__ __forceinline__ uint32_t rl_dev_verbs_poll_send_cq(struct rl_dev_sq *sq, struct rl_dev_cq *scq, uint32_t *errors) {
    uint4 t[RL_SCQ_BATCH];
#pragma unroll
    for (uint32_t i = 0; i < RL_SCQ_BATCH; i++) {
        const uint32_t ci = scq->ci + i;
        t[i] = rl_ld16_sys(scq->ring + (size_t)(ci & (scq->entries - 1)) * RL_CQE_SIZE + 48);
    }
    uint32_t n = 0, written = 1;
#pragma unroll
    for (uint32_t i = 0; i < RL_SCQ_BATCH; i++) {
        const uint32_t ci = scq->ci + i;
        const uint8_t op_own = (uint8_t)(t[i].w >> 24);
        /* a prefix only: stop at the first entry not written yet */
        written = written && (op_own >> 4) != RL_CQE_INVALID && (op_own & RL_CQE_OWNER_MASK) == ((ci / scq->entries) & 1);
        if (!written) continue;
        if ((op_own >> 4) != RL_CQE_REQ) (*errors)++;
        const uint16_t wqe_counter = rl_bswap16((uint16_t)(t[i].w & 0xffff));
        const uint32_t behind = (uint16_t)((uint16_t)sq->pi - wqe_counter);
        sq->done = sq->pi - behind + 1;
        n = i + 1;
    }
    if (n) {
        rl_fence_acquire_sys();
        scq->ci += n;
        rl_dev_verbs_cq_update_ci(scq);
    }
    return n;
}

/* ---- receive queue ----------------------------------------------------------------- */

struct rl_dev_rq {
    uint8_t *ring;     /* rl_recv_wqe 0 */
    uint32_t *dbrec;   /* rl_qp_dbrec.rq_counter (BE) */
    uint32_t entries;
    uint32_t pi;       /* receive WQEs posted */
};

/**
 * Re-posts `n` receive WQEs. RDMA WRITE with immediate lands where its RETH points, so the
 * WQEs are all the same (no buffer) and were written once at start-up: re-posting is one
 * posted write of the doorbell record. Thread scope.
 */
__device__ __forceinline__ void rl_dev_verbs_post_recv(struct rl_dev_rq *rq, uint32_t n) {
    rq->pi += n;
    /* No fence: the WQEs themselves do not change, and this thread's earlier writes to host
     * memory (the answer, the doorbell) reach it in order over PCIe anyway. */
    rl_st32_sys(rq->dbrec, rl_bswap32(rq->pi & 0xffff));
}

#endif /* ROCELINK_VERBS_CUH */
