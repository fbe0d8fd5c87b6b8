/*
 * kernels/stages/qec.cuh — the QEC decoder as a device stage (QEC.md "Decoder v1"; issue 5;
 * PROTOCOLS.md 3): CUQR `enqueue_syndromes` / `get_corrections` / `reset_decoder` in, CUQS
 * answers out, with exact minimum-weight matching by subset DP for up to K defects and the
 * greedy fallback above K.
 *
 * It is the device twin of the CPU reference, operator/src/qec/session.rs (protocol) and
 * operator/src/qec/exact.rs (decoder), and must give the same answer byte for byte except the
 * report's decode_ns (each side times with its own clock). Every status, counter, ack and
 * error path below names the line of session.rs it mirrors; read them side by side.
 *
 * Stage contract (kernels/stages/echo.cuh): called by every thread of the block (blockDim.x a
 * multiple of 32, up to 1024) with the request in shared memory (`req`, `len` bytes, 16-byte
 * aligned) and the output buffer (`resp`, `cap` bytes, 16-byte aligned, shared); returns the
 * answer length or -1 (not answered), the same value in every thread, with the answer
 * complete and visible to the block. `state` is the device address of the state blob that
 * operator/src/gpu/qec_state.rs builds and uploads before the launch (layout below).
 *
 * Memory safety on any input: every read of the request is bounded by `len` and `arg_len`,
 * every write of the answer by `cap`; decoder ids are checked against `decoders`;
 * `num_syndromes` against the bits the shot still has room for; the header's sizes against
 * the compile-time capacities of the shared arrays (a blob that breaks them drops every
 * request instead of touching memory it does not own). No dynamic allocation.
 */
#ifndef ROCELINK_STAGE_QEC_CUH
#define ROCELINK_STAGE_QEC_CUH

#include "../abi.h"

#ifndef RL_RPC_REQUEST_MAGIC
#define RL_RPC_REQUEST_MAGIC 0x43555152u /* 'CUQR' */
#endif
#ifndef RL_RPC_RESPONSE_MAGIC
#define RL_RPC_RESPONSE_MAGIC 0x43555153u /* 'CUQS' */
#endif
#ifndef RL_RPC_HEADER_LEN
#define RL_RPC_HEADER_LEN 24
#endif

/* Function ids (FNV-1a of the names; PROTOCOLS.md 3, pinned in rocelink-wire). */
#define RL_QEC_FN_ENQUEUE 0x7ED8BE82u
#define RL_QEC_FN_GET 0x882D5BA1u
#define RL_QEC_FN_RESET 0x977A59CFu

/* Response status codes (PROTOCOLS.md 3). */
#define RL_QEC_OK 0
#define RL_QEC_INVALID_DECODER 1
#define RL_QEC_BAD_REQUEST 2
#define RL_QEC_INTERNAL_ERROR 3
#define RL_QEC_NOT_READY 4
#define RL_QEC_SYNDROMES_DROPPED 6

/* Decode report status (rocelink_wire::qec::REPORT_*). */
#define RL_QEC_REPORT_OK 0u
#define RL_QEC_REPORT_OVERFLOW 1u
#define RL_QEC_REPORT_UNMATCHABLE 2u

/* Argument layouts (rocelink_wire::qec). */
#define RL_QEC_ENQUEUE_FIXED 32
#define RL_QEC_GET_LEN 17
#define RL_QEC_RESET_LEN 8
/* rocelink_wire::qec::MAX_SYNDROMES: u32::MAX * 8 */
#define RL_QEC_MAX_SYNDROMES 34359738360LL
/* session.rs MAX_RETURN_BITS */
#define RL_QEC_MAX_RETURN_BITS 512
#define RL_QEC_REPORT_LEN 16

/* ---------------------------------------------------------------------------------------
 * Capacities. The DP and the greedy fallback share one 32 KiB shared-memory union; the
 * builder (qec_state.rs) refuses configurations above these with a clear error, and the stage
 * re-checks the header so that a bad blob cannot make it write past its arrays.
 * ------------------------------------------------------------------------------------- */
/** K, the largest defect cap: the DP holds 2^K costs and 2^K parities (32 KiB at 12). */
#define RL_QEC_MAX_K 12
/** Detectors: the greedy fallback keeps 9 bytes per defect in the same 32 KiB. */
#define RL_QEC_MAX_DETECTORS 3584
/** Observables: the parity table keeps 32-bit masks (DistanceTable::parities_u32). */
#define RL_QEC_MAX_OBSERVABLES 32
/** "No path" in the distance table (TableWeight for u32: UNREACHABLE = u32::MAX), and an
 * infinite DP entry (ACC_INF): the builder proves every finite sum of at most K entries is
 * below it, so 32-bit sums are the CPU's 64-bit sums exactly. */
#define RL_QEC_INF 0xFFFFFFFFu

/* ---------------------------------------------------------------------------------------
 * The state blob (device memory, one per chain; mirrored in operator/src/gpu/qec_state.rs
 * with size and offset assertions, and checked against this file by NVRTC in
 * operator/tests/qec_gpu_state.rs):
 *
 *   0                 struct rl_qec_header (128 bytes)
 *   distances_off     uint32_t D[(n+1)*(n+1)]  row-major, boundary = row/column n,
 *                                               RL_QEC_INF = no path (fine_table, u32)
 *   parities_off      uint32_t P[(n+1)*(n+1)]  observables flipped along that path
 *   decoders_off      struct rl_qec_decoder[decoders]  (128 bytes each)
 *   shots_off         uint32_t shot[decoders][shot_words]  detection bits, LSB first
 *
 * Sections start on 128-byte boundaries. Written by the host before the launch; after it,
 * the tables are read-only and the decoder records, shots and `invalid_decoder` are written
 * by this stage only (one block, one request at a time).
 * ------------------------------------------------------------------------------------- */
#define RL_QEC_MAGIC 0x31434551u /* 'QEC1' */

struct rl_qec_header {
    uint32_t magic;              /*   0: RL_QEC_MAGIC */
    uint32_t header_bytes;       /*   4: sizeof(struct rl_qec_header) */
    uint32_t num_detectors;      /*   8: n; the boundary is node n */
    uint32_t num_observables;    /*  12: <= RL_QEC_MAX_OBSERVABLES */
    uint32_t max_defects;        /*  16: K <= RL_QEC_MAX_K */
    uint32_t decoders;           /*  20: decoder ids 0..decoders */
    uint32_t rounds_per_message; /*  24: the counter advances by this much per message */
    uint32_t shot_words;         /*  28: ceil(n / 32) */
    uint32_t has_mapping;        /*  32: 1 when syndrome_mapping_id must equal mapping_id */
    uint32_t rsvd0;              /*  36 */
    long long mapping_id;        /*  40 */
    double scale;                /*  48: table units per ln((1-p)/p) unit (weight = sum / scale) */
    uint64_t distances_off;      /*  56: byte offsets from the start of the blob */
    uint64_t parities_off;       /*  64 */
    uint64_t decoders_off;       /*  72 */
    uint64_t shots_off;          /*  80 */
    uint64_t total_bytes;        /*  88 */
    uint64_t invalid_decoder;    /*  96: requests naming a decoder that does not exist (device-written) */
    uint64_t rsvd1[3];           /* 104 */
};

/** One decoder id's state: session.rs `Slot` (shot assembly) and `SessionCounters`. */
struct rl_qec_decoder {
    uint32_t bits;             /*   0: detection bits of the shot assembled so far */
    uint32_t in_shot;          /*   4: a shot is being assembled */
    long long next_counter;    /*   8: the counter the next message must carry */
    uint64_t corrections;      /*  16: XOR of every decoded shot's observables */
    uint64_t messages;         /*  24: SessionCounters, in its field order */
    uint64_t shots;            /*  32 */
    uint64_t overflows;        /*  40 */
    uint64_t unmatchable;      /*  48 */
    uint64_t dropped_messages; /*  56 */
    uint64_t dropped_shots;    /*  64 */
    uint64_t abandoned_shots;  /*  72 */
    uint64_t bad_requests;     /*  80 */
    uint64_t rsvd[5];          /*  88 */
};

RL_STATIC_ASSERT(sizeof(struct rl_qec_header) == 128, "qec header");
RL_STATIC_ASSERT(sizeof(struct rl_qec_decoder) == 128, "qec decoder record");
RL_OFFSET_ASSERT(struct rl_qec_header, mapping_id, 40, "qec header: mapping_id");
RL_OFFSET_ASSERT(struct rl_qec_header, scale, 48, "qec header: scale");
RL_OFFSET_ASSERT(struct rl_qec_header, invalid_decoder, 96, "qec header: invalid_decoder");
RL_OFFSET_ASSERT(struct rl_qec_decoder, next_counter, 8, "qec decoder: next_counter");
RL_OFFSET_ASSERT(struct rl_qec_decoder, bad_requests, 80, "qec decoder: bad_requests");

/* Everything above is plain C/C++ (a host compiler checks it against the Rust mirror:
 * operator/tests/qec_gpu_state.rs); the device code below only for CUDA. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

/* ---------------------------------------------------------------------------------------
 * Shared memory of the stage (static, ~34.8 KB; the transceiver's own is ~8.5 KB).
 * ------------------------------------------------------------------------------------- */
#define RL_QEC_NO_PARTNER 0xFFFFu  /* exact.rs NO_PARTNER */
#define RL_QEC_TO_BOUNDARY 0xFFFEu /* exact.rs TO_BOUNDARY */
#define RL_QEC_BINOM_N (RL_QEC_MAX_K + 1)

#define RL_QEC_PHASE_DONE 0u   /* the answer is written */
#define RL_QEC_PHASE_ACK 1u    /* append the bits, answer OK with no result */
#define RL_QEC_PHASE_DECODE 2u /* append the bits, decode, answer corrections + report */

/** What thread 0 decided in rl_qec_begin, for every thread: written before the stage's
 * first __syncthreads and then only read, except `ret`, which thread 0 writes again (a
 * decoded shot's answer) only while every other thread waits at the last barrier. */
struct rl_qec_ctl {
    int ret;
    uint32_t phase;
    uint32_t n, K, words, num_obs;
    uint32_t app_at, app_n, zero; /* append: bit offset, bits, start a fresh shot */
    uint32_t rsvd;
    double scale;                 /* the header's, loaded with the rest of it */
    uint8_t *shot;
    const uint32_t *dist, *par;
    struct rl_qec_decoder *slot;
    struct rl_qec_header *hdr;
};

/** The decode's outcome, written by thread 0 only between barriers (kept apart from the
 * control block so that no wide shared load of one overlaps writes to the other). */
struct rl_qec_result {
    uint32_t status;          /* report status */
    uint32_t obs;             /* observables of the matching */
    uint32_t infinite;        /* the weight is infinite (exact, unmatchable) */
    uint32_t done;            /* greedy loop: finished */
    uint32_t left;            /* greedy loop: live defects */
    uint32_t rsvd[3];
    unsigned long long cost;  /* matching weight in table units */
};

struct rl_qec_smem {
    union {
        struct {
            uint32_t w[1u << RL_QEC_MAX_K]; /* dp cost, table units (exact.rs dp_cost) */
            uint32_t o[1u << RL_QEC_MAX_K]; /* dp observables (exact.rs dp_obs) */
        } dp;
        struct {
            uint32_t cost[RL_QEC_MAX_DETECTORS];    /* exact.rs best_cost */
            uint16_t def[RL_QEC_MAX_DETECTORS];     /* the defects, increasing */
            uint16_t partner[RL_QEC_MAX_DETECTORS]; /* exact.rs best_partner */
            uint8_t alive[RL_QEC_MAX_DETECTORS];
        } g;
    } u;
    /* exact.rs gather(): the k x k sub-table of the shot's defects */
    uint32_t pair[RL_QEC_MAX_K * RL_QEC_MAX_K];
    uint32_t ppar[RL_QEC_MAX_K * RL_QEC_MAX_K];
    uint32_t tob[RL_QEC_MAX_K];
    uint32_t bpar[RL_QEC_MAX_K];
    uint16_t defs[RL_QEC_MAX_K];
    uint16_t binom[RL_QEC_BINOM_N * RL_QEC_BINOM_N]; /* C(r, q) at r * 13 + q */
    uint32_t ws[33];                                 /* scan: per-warp sums, [32] the total */
    unsigned long long wk[32];                       /* greedy: per-warp minimum keys */
    __align__(16) struct rl_qec_ctl c;
    __align__(16) struct rl_qec_result r;
};

/** C(r, q) for r, q <= 12 at r * 13 + q (0 for q > r): the number of masks of q defects
 * among r, for the DP's layers and the colex unranking of their masks. */
__device__ const uint16_t rl_qec_binomials[RL_QEC_BINOM_N * RL_QEC_BINOM_N] = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 3, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 4, 6, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 5, 10, 10, 5, 1, 0, 0, 0, 0, 0, 0, 0,
    1, 6, 15, 20, 15, 6, 1, 0, 0, 0, 0, 0, 0,
    1, 7, 21, 35, 35, 21, 7, 1, 0, 0, 0, 0, 0,
    1, 8, 28, 56, 70, 56, 28, 8, 1, 0, 0, 0, 0,
    1, 9, 36, 84, 126, 126, 84, 36, 9, 1, 0, 0, 0,
    1, 10, 45, 120, 210, 252, 210, 120, 45, 10, 1, 0, 0,
    1, 11, 55, 165, 330, 462, 462, 330, 165, 55, 11, 1, 0,
    1, 12, 66, 220, 495, 792, 924, 792, 495, 220, 66, 12, 1,
};

/* ---------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------- */
__device__ __forceinline__ unsigned long long rl_qec_clock(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Little-endian i64 / u32 at an 8- / 4-byte aligned offset of a shared buffer. */
__device__ __forceinline__ long long rl_qec_i64(const uint8_t *p) { return *(const long long *)p; }

/** wire::qec::correction_len: ceil(bits / 8) bytes, padded to a multiple of 8. */
__device__ __forceinline__ uint32_t rl_qec_correction_len(uint32_t bits) { return ((bits + 7u) / 8u + 7u) / 8u * 8u; }

/** wire::qec::emit_corrections: `len` bytes (a multiple of 8) at an 8-byte aligned `out`:
 * the low min(bits, 64) bits of `mask`, LSB first, zero padding. */
__device__ __forceinline__ void rl_qec_emit_corrections(uint8_t *out, uint64_t mask, uint32_t bits, uint32_t len) {
    uint64_t keep = bits >= 64 ? ~0ull : ((1ull << bits) - 1ull);
    for (uint32_t i = 0; i < len / 8u; i++) ((uint64_t *)out)[i] = i == 0 ? (mask & keep) : 0ull;
}

/** The CUQS header (session.rs handle(): status, result_len, request_id and ptp_timestamp
 * echoed). `resp` and `req` are 16-byte aligned and distinct. */
__device__ __forceinline__ void rl_qec_header_out(uint8_t *resp, const uint8_t *req, int status, uint32_t result_len) {
    uint32_t *r = (uint32_t *)resp;
    r[0] = RL_RPC_RESPONSE_MAGIC;
    r[1] = (uint32_t)status;
    r[2] = result_len;
    r[3] = ((const uint32_t *)req)[3];
    ((uint64_t *)resp)[2] = ((const uint64_t *)req)[2];
}

/** Detection word `w` of the shot with the bits at or above n cleared (exact.rs decode_b8
 * ignores them). */
__device__ __forceinline__ uint32_t rl_qec_word(const uint32_t *shot, uint32_t w, uint32_t words, uint32_t n) {
    uint32_t v = shot[w];
    if (w + 1 == words && (n & 31u) != 0) v &= (1u << (n & 31u)) - 1u;
    return v;
}

/** Exclusive block scan of `v` (blockDim.x a multiple of 32); `*total` is the sum. Two
 * __syncthreads; `ws` is free again after the caller's next __syncthreads. */
__device__ __forceinline__ uint32_t rl_qec_scan(uint32_t v, uint32_t *total, uint32_t *ws) {
    const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = (blockDim.x + 31u) >> 5;
    uint32_t x = v;
#pragma unroll
    for (uint32_t o = 1; o < 32; o <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < nw ? ws[lane] : 0u;
        uint32_t z = w;
#pragma unroll
        for (uint32_t o = 1; o < 32; o <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, z, o);
            if (lane >= o) z += y;
        }
        if (lane < nw) ws[lane] = z - w;
        if (lane == 31) ws[32] = z;
    }
    __syncthreads();
    *total = ws[32];
    return ws[warp] + x - v;
}

/* ---------------------------------------------------------------------------------------
 * Protocol (thread 0): session.rs handle / enqueue / get_corrections / reset
 * ------------------------------------------------------------------------------------- */

/** session.rs slot_index(): the decoder record, or 0 (counted) for an id out of range. */
__device__ __forceinline__ struct rl_qec_decoder *rl_qec_slot(uint8_t *base, struct rl_qec_header *h, long long id) {
    if (id < 0 || id >= (long long)h->decoders) {
        h->invalid_decoder++;
        return 0;
    }
    return (struct rl_qec_decoder *)(base + h->decoders_off) + id;
}

/** session.rs Slot::discard(). */
__device__ __forceinline__ void rl_qec_discard(struct rl_qec_decoder *s) {
    s->in_shot = 0;
    s->bits = 0;
}

/** session.rs enqueue(), up to the append: the status of an answer without a result, or OK
 * with c->phase ACK or DECODE when the bits are accepted (the slot already advanced). */
__device__ __forceinline__ int rl_qec_enqueue(const uint8_t *args, uint32_t arg_len, int cap, uint8_t *base, struct rl_qec_ctl *c) {
    struct rl_qec_header *h = c->hdr;
    /* EnqueueSyndromesRepr::parse: Truncated below 32 bytes; Malformed for a negative or too
     * large count; Truncated when the announced bytes are missing. No slot to charge. */
    if (arg_len < RL_QEC_ENQUEUE_FIXED) return RL_QEC_BAD_REQUEST;
    const long long id = rl_qec_i64(args), counter = rl_qec_i64(args + 8), mapping = rl_qec_i64(args + 16),
                    nsyn = rl_qec_i64(args + 24);
    if (nsyn < 0 || nsyn > RL_QEC_MAX_SYNDROMES) return RL_QEC_BAD_REQUEST;
    if ((uint64_t)(arg_len - RL_QEC_ENQUEUE_FIXED) < ((uint64_t)nsyn + 7u) / 8u) return RL_QEC_BAD_REQUEST;
    struct rl_qec_decoder *s = rl_qec_slot(base, h, id);
    if (s == 0) return RL_QEC_INVALID_DECODER;
    /* The output must hold the final answer, checked before any state changes. */
    const uint32_t final_len = rl_qec_correction_len(c->num_obs) + RL_QEC_REPORT_LEN;
    if ((uint32_t)(cap - RL_RPC_HEADER_LEN) < final_len) return RL_QEC_INTERNAL_ERROR;
    if (h->has_mapping && mapping != h->mapping_id) {
        s->bad_requests++;
        return RL_QEC_BAD_REQUEST;
    }
    uint32_t zero = 0;
    if (counter == 0) {
        /* A new shot; an unfinished one is abandoned (and counted). The shot's bits are
         * cleared by the append below (`zero`), which every accepted message runs. */
        if (s->in_shot) s->abandoned_shots++;
        s->bits = 0;
        s->in_shot = 1;
        zero = 1;
    } else if (!s->in_shot || counter != s->next_counter) {
        /* A gap: the unfinished shot is discarded, this and later messages are dropped
         * until the next counter 0. */
        if (s->in_shot) s->dropped_shots++;
        rl_qec_discard(s);
        s->dropped_messages++;
        return RL_QEC_SYNDROMES_DROPPED;
    }
    const long long rounds = (long long)h->rounds_per_message;
    const uint32_t bits = s->bits; /* <= n: every accepted message kept it so */
    if ((uint64_t)nsyn > (uint64_t)(c->n - bits) || counter > 0x7fffffffffffffffLL - rounds) {
        /* More bits than the shot has room for, or a counter that cannot advance. */
        s->bad_requests++;
        s->dropped_shots++;
        rl_qec_discard(s);
        return RL_QEC_BAD_REQUEST;
    }
    c->app_at = bits;
    c->app_n = (uint32_t)nsyn;
    c->zero = zero;
    c->slot = s;
    c->shot = base + h->shots_off + (uint64_t)id * h->shot_words * 4u;
    s->bits = bits + (uint32_t)nsyn;
    s->next_counter = counter + rounds;
    s->messages++;
    /* Not the last bits: answered OK with no result (rl_qec_begin writes it now, before the
     * append); the last: decoded, answered by rl_qec_finish. */
    c->phase = s->bits < c->n ? RL_QEC_PHASE_ACK : RL_QEC_PHASE_DECODE;
    return RL_QEC_OK;
}

/** session.rs get_corrections(): status; the result is written at `body` (cap - 24 bytes). */
__device__ __forceinline__ int rl_qec_get(const uint8_t *args, uint32_t arg_len, uint8_t *body, int cap, uint8_t *base,
                                          struct rl_qec_ctl *c, uint32_t *rlen) {
    if (arg_len < RL_QEC_GET_LEN) return RL_QEC_BAD_REQUEST;
    const long long id = rl_qec_i64(args), size = rl_qec_i64(args + 8);
    const uint8_t reset = args[16];
    struct rl_qec_decoder *s = rl_qec_slot(base, c->hdr, id);
    if (s == 0) return RL_QEC_INVALID_DECODER;
    if (size < 0 || size > RL_QEC_MAX_RETURN_BITS) {
        s->bad_requests++;
        return RL_QEC_BAD_REQUEST;
    }
    if (s->in_shot) return RL_QEC_NOT_READY; /* its correction is not in yet */
    const uint32_t len = rl_qec_correction_len((uint32_t)size);
    if ((uint32_t)(cap - RL_RPC_HEADER_LEN) < len) return RL_QEC_INTERNAL_ERROR; /* before the reset */
    rl_qec_emit_corrections(body, s->corrections, (uint32_t)size, len);
    if (reset != 0) s->corrections = 0;
    *rlen = len;
    return RL_QEC_OK;
}

/** session.rs reset(): drop the unfinished shot and the corrections; counters survive. */
__device__ __forceinline__ int rl_qec_reset(const uint8_t *args, uint32_t arg_len, uint8_t *base, struct rl_qec_ctl *c) {
    if (arg_len < RL_QEC_RESET_LEN) return RL_QEC_BAD_REQUEST;
    struct rl_qec_decoder *s = rl_qec_slot(base, c->hdr, rl_qec_i64(args));
    if (s == 0) return RL_QEC_INVALID_DECODER;
    rl_qec_discard(s);
    s->corrections = 0;
    s->next_counter = 0;
    return RL_QEC_OK;
}

/** Thread 0: session.rs handle() up to the decode. Sets c->phase and, unless a shot is to be
 * decoded (DECODE), c->ret and the whole answer. */
__device__ __forceinline__ void rl_qec_begin(const uint8_t *req, int len, uint8_t *resp, int cap, uint8_t *base, struct rl_qec_ctl *c) {
    c->phase = RL_QEC_PHASE_DONE;
    c->ret = -1;
    /* Not answered (None in session.rs): no CUQR header, another function, or an output that
     * cannot hold a header. Also a missing or inconsistent state blob (never on a host-built
     * one): drop rather than read or write outside it. */
    if (len < RL_RPC_HEADER_LEN || cap < RL_RPC_HEADER_LEN) return;
    const uint32_t *rh = (const uint32_t *)req;
    if (rh[0] != RL_RPC_REQUEST_MAGIC) return;
    const uint32_t fn = rh[1];
    if (fn != RL_QEC_FN_ENQUEUE && fn != RL_QEC_FN_GET && fn != RL_QEC_FN_RESET) return;
    struct rl_qec_header *h = (struct rl_qec_header *)base;
    if (base == 0 || h->magic != RL_QEC_MAGIC || h->header_bytes != sizeof(struct rl_qec_header)) return;
    const uint32_t n = h->num_detectors;
    if (n > RL_QEC_MAX_DETECTORS || h->max_defects > RL_QEC_MAX_K || h->num_observables > RL_QEC_MAX_OBSERVABLES ||
        h->shot_words != (n + 31u) / 32u || h->rounds_per_message == 0)
        return;
    c->hdr = h;
    c->n = n;
    c->K = h->max_defects;
    c->words = h->shot_words;
    c->num_obs = h->num_observables;
    c->scale = h->scale;
    c->dist = (const uint32_t *)(base + h->distances_off);
    c->par = (const uint32_t *)(base + h->parities_off);

    const uint32_t arg_len = rh[2];
    const uint8_t *args = req + RL_RPC_HEADER_LEN;
    uint8_t *body = resp + RL_RPC_HEADER_LEN;
    uint32_t rlen = 0;
    int st;
    if ((uint64_t)arg_len + RL_RPC_HEADER_LEN > (uint64_t)len) {
        st = RL_QEC_BAD_REQUEST; /* the arguments are not all there */
    } else if (fn == RL_QEC_FN_ENQUEUE) {
        st = rl_qec_enqueue(args, arg_len, cap, base, c);
    } else if (fn == RL_QEC_FN_GET) {
        st = rl_qec_get(args, arg_len, body, cap, base, c, &rlen);
    } else {
        st = rl_qec_reset(args, arg_len, base, c);
    }
    if (c->phase != RL_QEC_PHASE_DECODE) {
        rl_qec_header_out(resp, req, st, rlen);
        c->ret = RL_RPC_HEADER_LEN + (int)rlen;
    }
}

/** All threads: session.rs append_bits() of the accepted message into the decoder's shot,
 * each thread owning whole destination bytes (no two threads write one byte). With
 * c->zero the shot is cleared first (session.rs `slot.shot.fill(0)` at counter 0). */
__device__ __forceinline__ void rl_qec_append(const uint8_t *req, const struct rl_qec_ctl *c) {
    const uint8_t *src = req + RL_RPC_HEADER_LEN + RL_QEC_ENQUEUE_FIXED;
    uint8_t *dst = c->shot;
    const uint32_t at = c->app_at, nbits = c->app_n, zero = c->zero;
    const uint32_t base = at >> 3, sh = at & 7u, nb = (nbits + 7u) >> 3, bytes = c->words * 4u;
    for (uint32_t d = threadIdx.x; d < bytes; d += blockDim.x) {
        uint32_t v = 0;
        if (d >= base) {
            const uint32_t k = d - base;
            /* source byte k (its bits past nbits masked) lands at base + k shifted by sh, and
             * its high bits spill into base + k + 1 */
            if (k < nb) {
                uint32_t left = nbits - 8u * k, b = src[k];
                if (left < 8u) b &= (1u << left) - 1u;
                v |= (b << sh) & 0xFFu;
            }
            if (sh != 0 && k >= 1 && k - 1 < nb) {
                uint32_t left = nbits - 8u * (k - 1), b = src[k - 1];
                if (left < 8u) b &= (1u << left) - 1u;
                v |= b >> (8u - sh);
            }
        }
        if (zero)
            dst[d] = (uint8_t)v;
        else if (v != 0)
            dst[d] |= (uint8_t)v;
    }
}

/* ---------------------------------------------------------------------------------------
 * Decoder (all threads): exact.rs decode_b8 -> exact() or greedy()
 * ------------------------------------------------------------------------------------- */

/** exact.rs nearest(): the closest live option of defect x, boundary first, then partners
 * by increasing index, replaced only when strictly smaller. */
__device__ __forceinline__ void rl_qec_nearest(struct rl_qec_smem *s, uint32_t x, uint32_t k, uint32_t stride, uint32_t n,
                                               const uint32_t *D) {
    const uint32_t *row = D + (uint64_t)s->u.g.def[x] * stride;
    uint32_t best = RL_QEC_INF, partner = RL_QEC_NO_PARTNER;
    const uint32_t tb = row[n];
    if (tb != RL_QEC_INF) {
        best = tb;
        partner = RL_QEC_TO_BOUNDARY;
    }
    for (uint32_t y = 0; y < k; y++) {
        if (y == x || !s->u.g.alive[y]) continue;
        const uint32_t e = row[s->u.g.def[y]];
        if (e != RL_QEC_INF && e < best) {
            best = e;
            partner = y;
        }
    }
    s->u.g.cost[x] = best;
    s->u.g.partner[x] = (uint16_t)partner;
}

/** exact.rs solve() for one mask whose sub-masks are all done (module docs of exact.rs:
 * a = lowest defect; the boundary option first, then partners by increasing index,
 * replacing the best only when strictly smaller; infinite options never chosen). */
__device__ __forceinline__ void rl_qec_dp_mask(struct rl_qec_smem *s, uint32_t mask) {
    uint32_t *w = s->u.dp.w, *o = s->u.dp.o;
    const uint32_t a = (uint32_t)__ffs(mask) - 1u;
    const uint32_t rest = mask & (mask - 1u);
    uint32_t best = RL_QEC_INF, obs = 0;
    const uint32_t tb = s->tob[a];
    if (tb != RL_QEC_INF) {
        const uint32_t r = w[rest];
        if (r != RL_QEC_INF) {
            best = r + tb;
            obs = o[rest] ^ s->bpar[a];
        }
    }
    uint32_t m = rest;
    while (m != 0) {
        const uint32_t j = (uint32_t)__ffs(m) - 1u;
        m &= m - 1u;
        const uint32_t e = s->pair[a * RL_QEC_MAX_K + j];
        if (e == RL_QEC_INF) continue;
        const uint32_t sub = rest & ~(1u << j);
        const uint32_t r = w[sub];
        if (r == RL_QEC_INF) continue;
        const uint32_t cand = r + e;
        if (cand < best) {
            best = cand;
            obs = o[sub] ^ s->ppar[a * RL_QEC_MAX_K + j];
        }
    }
    w[mask] = best;
    o[mask] = obs;
}

/** The subset DP over the k <= K defects in s->defs (exact.rs exact(), bottom-up by popcount
 * layer as exact_bottom_up(); dp[mask] is a function of its sub-masks only, so this order
 * gives the top-down CPU values, tie-breaking included). */
__device__ __forceinline__ void rl_qec_exact(struct rl_qec_smem *s, uint32_t k) {
    const struct rl_qec_ctl *c = &s->c;
    const uint32_t tid = threadIdx.x, T = blockDim.x, n = c->n, stride = n + 1u;
    const uint32_t *D = c->dist, *P = c->par;
    for (uint32_t i = tid; i < RL_QEC_BINOM_N * RL_QEC_BINOM_N; i += T) s->binom[i] = rl_qec_binomials[i];
    /* exact.rs gather(): one round of table loads */
    for (uint32_t i = tid; i < k * k; i += T) {
        const uint32_t x = i / k, y = i % k;
        const uint64_t dx = s->defs[x];
        if (x == y) {
            s->tob[x] = D[dx * stride + n];
            s->bpar[x] = P[dx * stride + n];
        } else if (x < y) {
            const uint64_t at = dx * stride + s->defs[y];
            s->pair[x * RL_QEC_MAX_K + y] = D[at];
            s->ppar[x * RL_QEC_MAX_K + y] = P[at];
        }
    }
    if (tid == 0) {
        s->u.dp.w[0] = 0;
        s->u.dp.o[0] = 0;
    }
    __syncthreads();
    /* Layer p: the C(k, p) masks of p defects in colex order (increasing value), each thread
     * a contiguous run of ranks: its first mask by unranking (the combinatorial number
     * system), the next ones by Gosper's next-combination step. */
    for (uint32_t p = 1; p <= k; p++) {
        const uint32_t count = s->binom[k * RL_QEC_BINOM_N + p];
        const uint32_t per = (count + T - 1u) / T, r0 = tid * per, r1 = r0 + per < count ? r0 + per : count;
        if (r0 < r1) {
            uint32_t mask = 0, rr = r0, q = p;
            for (int e = (int)k - 1; e >= 0 && q > 0; e--) {
                const uint32_t b = s->binom[(uint32_t)e * RL_QEC_BINOM_N + q];
                if (rr >= b) {
                    mask |= 1u << e;
                    rr -= b;
                    q--;
                }
            }
            rl_qec_dp_mask(s, mask);
            for (uint32_t r = r0 + 1u; r < r1; r++) {
                const uint32_t low = mask & (0u - mask), up = mask + low;
                mask = (((up ^ mask) >> 2) >> ((uint32_t)__ffs(low) - 1u)) | up;
                rl_qec_dp_mask(s, mask);
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        const uint32_t full = (1u << k) - 1u, cost = s->u.dp.w[full];
        s->r.status = cost == RL_QEC_INF ? RL_QEC_REPORT_UNMATCHABLE : RL_QEC_REPORT_OK;
        s->r.infinite = cost == RL_QEC_INF;
        s->r.cost = cost == RL_QEC_INF ? 0ull : cost;
        s->r.obs = cost == RL_QEC_INF ? 0u : s->u.dp.o[full];
    }
}

/** exact.rs greedy() over the k > K defects in s->u.g.def: repeatedly the globally closest
 * option (lowest cost, then lowest defect index: the minimum of (cost << 32 | index)). */
__device__ __forceinline__ void rl_qec_greedy(struct rl_qec_smem *s, uint32_t k) {
    const struct rl_qec_ctl *c = &s->c;
    struct rl_qec_result *res = &s->r;
    const uint32_t tid = threadIdx.x, T = blockDim.x, lane = tid & 31u, warp = tid >> 5, nw = (T + 31u) >> 5;
    const uint32_t n = c->n, stride = n + 1u;
    const uint32_t *D = c->dist, *P = c->par;
    for (uint32_t x = tid; x < k; x += T) s->u.g.alive[x] = 1;
    __syncthreads();
    for (uint32_t x = tid; x < k; x += T) rl_qec_nearest(s, x, k, stride, n, D);
    if (tid == 0) {
        res->left = k;
        res->cost = 0;
        res->obs = 0;
        res->infinite = 0;
        res->status = RL_QEC_REPORT_OVERFLOW;
        res->done = 0;
    }
    __syncthreads();
    for (;;) {
        unsigned long long key = ~0ull;
        for (uint32_t x = tid; x < k; x += T) {
            if (s->u.g.alive[x] && s->u.g.partner[x] != RL_QEC_NO_PARTNER) {
                const unsigned long long kk = ((unsigned long long)s->u.g.cost[x] << 32) | x;
                key = kk < key ? kk : key;
            }
        }
#pragma unroll
        for (uint32_t o = 16; o > 0; o >>= 1) {
            const unsigned long long y = __shfl_down_sync(0xffffffffu, key, o);
            key = y < key ? y : key;
        }
        if (lane == 0) s->wk[warp] = key;
        __syncthreads();
        if (tid == 0) {
            unsigned long long best = ~0ull;
            for (uint32_t i = 0; i < nw; i++) best = s->wk[i] < best ? s->wk[i] : best;
            if (best == ~0ull) {
                /* live defects with nowhere to go: the rest cannot be matched */
                res->status = RL_QEC_REPORT_UNMATCHABLE;
                res->done = 1;
            } else {
                const uint32_t pick = (uint32_t)best, partner = s->u.g.partner[pick];
                const uint64_t dp = s->u.g.def[pick];
                res->cost += s->u.g.cost[pick];
                s->u.g.alive[pick] = 0;
                res->left--;
                if (partner == RL_QEC_TO_BOUNDARY) {
                    res->obs ^= P[dp * stride + n];
                } else {
                    res->obs ^= P[dp * stride + s->u.g.def[partner]];
                    s->u.g.alive[partner] = 0;
                    res->left--;
                }
                res->done = res->left == 0;
            }
        }
        __syncthreads();
        if (res->done) break;
        /* whoever had a now-matched defect as nearest looks again */
        for (uint32_t x = tid; x < k; x += T) {
            if (s->u.g.alive[x]) {
                const uint32_t p = s->u.g.partner[x];
                if (p != RL_QEC_TO_BOUNDARY && p != RL_QEC_NO_PARTNER && !s->u.g.alive[p]) rl_qec_nearest(s, x, k, stride, n, D);
            }
        }
        __syncthreads();
    }
}

/** All threads: decode the decoder's completed shot into s->r; returns the number of
 * defects (in every thread). */
__device__ __forceinline__ uint32_t rl_qec_decode(struct rl_qec_smem *s) {
    const struct rl_qec_ctl *c = &s->c;
    const uint32_t tid = threadIdx.x, T = blockDim.x, n = c->n, K = c->K, W = c->words;
    const uint32_t *shot = (const uint32_t *)c->shot; /* written by this block: plain loads */
    /* Defects in increasing order (exact.rs decode_b8): popcount per word, a block scan for
     * each thread's first slot, then each thread lists its words' bits. */
    const uint32_t per = (W + T - 1u) / T;
    const uint32_t w0 = tid * per < W ? tid * per : W, w1 = w0 + per < W ? w0 + per : W;
    uint32_t count = 0;
    for (uint32_t w = w0; w < w1; w++) count += (uint32_t)__popc(rl_qec_word(shot, w, W, n));
    uint32_t k;
    uint32_t at = rl_qec_scan(count, &k, s->ws);
    /* k <= K: the DP's list (<= 12 entries); else the greedy's (k <= n <= its capacity) */
    uint16_t *list = k <= K ? s->defs : s->u.g.def;
    for (uint32_t w = w0; w < w1; w++) {
        uint32_t v = rl_qec_word(shot, w, W, n);
        while (v != 0) {
            list[at++] = (uint16_t)(w * 32u + (uint32_t)__ffs(v) - 1u);
            v &= v - 1u;
        }
    }
    __syncthreads();
    if (k <= K)
        rl_qec_exact(s, k);
    else
        rl_qec_greedy(s, k);
    return k;
}

/** Thread 0, after the decode: session.rs enqueue() from the decode on: the decoder's
 * state, then the final answer (corrections, then the 16-byte decode report). */
__device__ __forceinline__ void rl_qec_finish(const uint8_t *req, uint8_t *resp, struct rl_qec_smem *sm, uint32_t k,
                                              unsigned long long t0) {
    const unsigned long long t1 = rl_qec_clock();
    struct rl_qec_ctl *c = &sm->c;
    const struct rl_qec_result *r = &sm->r;
    struct rl_qec_decoder *s = c->slot;
    s->in_shot = 0;
    s->bits = 0;
    s->corrections ^= r->obs;
    const uint32_t shot_index = (uint32_t)s->shots;
    s->shots++;
    if (r->status == RL_QEC_REPORT_OVERFLOW) s->overflows++;
    if (r->status == RL_QEC_REPORT_UNMATCHABLE) s->unmatchable++;
    uint8_t *body = resp + RL_RPC_HEADER_LEN;
    const uint32_t clen = rl_qec_correction_len(c->num_obs);
    rl_qec_emit_corrections(body, r->obs, c->num_obs, clen);
    /* DecodeReportRepr at body + clen (8-byte aligned): status, reserved, defects (u16,
     * saturating), weight (f32: the f64 weight sum / scale rounded to nearest, as the CPU's
     * `as f32`), decode_ns (saturating), shot index (wrapping) */
    const float weight = r->infinite ? __int_as_float(0x7f800000) : __double2float_rn((double)r->cost / c->scale);
    const unsigned long long ns = t1 - t0;
    uint32_t *rep = (uint32_t *)(body + clen);
    rep[0] = r->status | ((k < 0xFFFFu ? k : 0xFFFFu) << 16);
    rep[1] = (uint32_t)__float_as_int(weight);
    rep[2] = ns < 0xFFFFFFFFull ? (uint32_t)ns : 0xFFFFFFFFu;
    rep[3] = shot_index;
    rl_qec_header_out(resp, req, RL_QEC_OK, clen + RL_QEC_REPORT_LEN);
    c->ret = RL_RPC_HEADER_LEN + (int)(clen + RL_QEC_REPORT_LEN);
}

/** The stage (contract at the top of the file). Barriers: after rl_qec_begin (the control
 * block and any answer), after the append (the shot's global stores), inside the decode, and
 * after rl_qec_finish (the decoded shot's answer). */
__device__ __forceinline__ int rl_stage_qec(const uint8_t *req, int len, uint8_t *resp, int cap, void *state) {
    __shared__ __align__(16) struct rl_qec_smem rl_qec_s;
    struct rl_qec_smem *s = &rl_qec_s;
    if (threadIdx.x == 0) rl_qec_begin(req, len, resp, cap, (uint8_t *)state, &s->c);
    __syncthreads();
    const uint32_t phase = s->c.phase;
    if (phase != RL_QEC_PHASE_DONE) {
        rl_qec_append(req, &s->c);
        __syncthreads();
        if (phase == RL_QEC_PHASE_DECODE) {
            const unsigned long long t0 = rl_qec_clock(); /* thread 0's is the one reported */
            const uint32_t k = rl_qec_decode(s);
            if (threadIdx.x == 0) rl_qec_finish(req, resp, s, k, t0);
            __syncthreads();
        }
    }
    return s->c.ret;
}

#endif /* __CUDACC__ || __CUDACC_RTC__ */

#endif /* ROCELINK_STAGE_QEC_CUH */
