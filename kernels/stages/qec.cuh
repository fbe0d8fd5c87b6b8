/*
 * kernels/stages/qec.cuh — the QEC decoder as a device stage (docs/qec.md, "The table decoder";
 * PROTOCOLS.md 3): CUQR `enqueue_syndromes` / `get_corrections` / `reset_decoder` in, CUQS
 * answers out, with exact minimum-weight matching: by subset DP for up to K defects, and
 * above K the shot's clusters, each exact (closed forms up to four defects, the blossom
 * matcher of blossom.cuh above), joined until their LP duals prove the whole shot optimal
 * (rl_qec_clusters, exact.rs clusters()).
 *
 * It is the device twin of the CPU reference, operator/src/qec/session.rs (protocol) and
 * operator/src/qec/exact.rs (decoder), and must give the same answer byte for byte except the
 * report's decode_ns (each side times with its own clock). Every status, counter, ack and
 * error path below names the line of session.rs it mirrors; read them side by side.
 *
 * Stage contract (kernels/stages/stage.cuh; blockDim.x a multiple of 32, up to 1024): the
 * full form rl_stage_qec (every thread), the warp form rl_stage_qec_warp (warp 0: every
 * request but a decode of more than RL_QEC_WARP_K defects) and the block continuation
 * rl_stage_qec_block (the DP layers or the fallback of a larger decode). `state` is the
 * device address of the state blob that operator/src/gpu/qec_state.rs builds and uploads
 * before the launch (layout below). Each decoder id is used by one block only (the
 * transceiver has one; kernels/qec_batch.cu gives each block its own ids): a block keeps its
 * decoder's state mirrored in shared memory.
 *
 * Memory safety on any input: every read of the request is bounded by `len` and `arg_len`,
 * every write of the answer by `cap`; decoder ids are checked against `decoders`;
 * `num_syndromes` against the bits the shot still has room for; the header's sizes against
 * the compile-time capacities of the shared arrays (a blob that breaks them drops every
 * request instead of touching memory it does not own). No dynamic allocation.
 *
 * Latency (the stage as close to echo as possible). After the transceiver's acquire fence,
 * which also empties L1, a global load costs an order of magnitude more than a shared one
 * and a block barrier little (qec_gpu_match's probe prints them); the stage's time is its
 * serial path length on lane 0 plus its global round trips, so:
 * - A per-block shared-memory copy of the blob's header (checked when filled) and a mirror of
 *   the last-used decoder's record and shot, kept across requests (`struct rl_qec_cache`).
 *   Every change is written through to the blob at once (posted stores), so the blob stays
 *   the authoritative copy the host reads after the kernel stopped; the mirror is read back
 *   from the blob only when another decoder id becomes the mirrored one. The copy is trusted
 *   only for the launch and blob that filled it: its key is the blob's address, the launch's
 *   %gridid (unique per launch in a context) and the header's `token` (nonzero, random per
 *   host build, read-only on the device). Every request loads the blob's token first and
 *   compares it before its first global access (a write-through, a table load, another
 *   decoder's record), running on the copy speculatively until then (shared memory only,
 *   every index bounded by the arrays' sizes); a mismatch refills the copy and runs the
 *   request again. Shared memory left by another kernel can therefore never be taken for
 *   this one's state, and the token's round trip overlaps the request's own work.
 * - The common request, an enqueue_syndromes in sequence for the mirrored decoder, takes a
 *   straight-line fast path on lane 0 (rl_qec_fast: every load issued together, the record
 *   changed and written through in 16-byte pieces, the bits ORed in as one word); every other
 *   request takes the general path (rl_qec_slow, out of line). The fast path also keeps the
 *   shot's defect list as its bits arrive, any length, so neither a decode nor a settle step
 *   lists the shot's bits again.
 * - A final message whose shot has at most RL_QEC_LANE_K (4) defects, most shots at low p, is
 *   decoded by lane 0 inside the fast path (rl_qec_lane_dp: the DP written out in registers,
 *   every table load in flight together) and answered there: no hand-over to the warp.
 * - The decode of a shot as it stands before its last message: up to RL_QEC_LANE_K defects,
 *   lane 0's DP between messages (the idle form, rl_stage_qec_idle: after a doorbell, while
 *   messages do not queue; rl_qec_speculate); above K, the sum of the clusters the settle step
 *   of the shot's last threshold left for all its defects (rl_qec_clusters). A last message
 *   that adds no defect, most at low p, takes that decode as its own, keyed by the record's
 *   message count, and is answered on the fast path with no decode and no hand-over to the
 *   block; its report's decode_ns is that decode's time (the DP's, or the settle step's).
 * - Otherwise warp 0 runs the decode, for up to RL_QEC_WARP_K defects all of it (one round of
 *   table loads; the DP over the masks reachable from the full set only, by layer of lowest
 *   defect, each mask's options loaded together and reduced by a tree, __syncwarp between
 *   layers): one block barrier per request. Larger shots hand the DP layers (or the
 *   clusters) to the whole block: the clusters' pairs spread over its threads, each small
 *   cluster solved by one thread and each larger one by one warp's matcher. Every path
 *   picks the same matching (same options, same order, ties to the earlier option) as the
 *   CPU's exact.rs.
 * `-DRL_QEC_PROFILE` records clock64 at phase marks in `rl_qec_prof` (thread 0) for the
 * replay test (operator/tests/qec_gpu_match.rs prints them).
 */
#ifndef ROCELINK_STAGE_QEC_CUH
#define ROCELINK_STAGE_QEC_CUH

#include "../abi.h"
#include "stage.cuh"

/* The phase timer's marks (-DRL_QEC_PROFILE, "Phase timer" below), defined before the matcher
 * so that its RL_PM_MARK hook can be one of them. */
#define RL_QEC_PROF_N 12
#ifdef RL_QEC_PROFILE
#define RL_QEC_PROFILE_MARKS 1
__shared__ long long rl_qec_prof[RL_QEC_PROF_N];
#define RL_QEC_MARK(i)                                    \
    do {                                                  \
        if (threadIdx.x == 0) rl_qec_prof[i] = clock64(); \
    } while (0)
#else
#define RL_QEC_MARK(i) \
    do {               \
    } while (0)
#endif
#if defined(RL_QEC_PROFILE) && defined(RL_QEC_PROFILE_PM)
#define RL_PM_MARK(i) RL_QEC_MARK(i)
#endif
#include "blossom.cuh"

/* The function ids and response status codes are abi.h's (RL_QEC_FN_*, RL_QEC_OK, ...). */

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
 * Capacities. The DP and a large shot's defect list share one 32 KiB shared-memory union; the
 * builder (qec_state.rs) refuses configurations above these with a clear error, and the stage
 * re-checks the header so that a bad blob cannot make it write past its arrays.
 * ------------------------------------------------------------------------------------- */
/** K, the largest defect cap: the DP holds 2^K costs and 2^K parities (32 KiB at 12). */
#define RL_QEC_MAX_K 12
/** Detectors: a shot's defect list (2 bytes each) in the same 32 KiB, with room to spare. */
#define RL_QEC_MAX_DETECTORS 3584
/** Observables: the parity table keeps 32-bit masks (DistanceTable::parities_u32). */
#define RL_QEC_MAX_OBSERVABLES 32
/** "No path" in the distance table (TableWeight for u32: UNREACHABLE = u32::MAX), and an
 * infinite DP entry (ACC_INF): the builder proves every finite sum of at most K entries is
 * below it, so 32-bit sums are the CPU's 64-bit sums exactly. */
#define RL_QEC_INF 0xFFFFFFFFu

/* The state blob's layout (struct rl_qec_header, struct rl_qec_decoder, RL_QEC_MAGIC) is in
 * abi.h, the one definition the host's Rust bindings are generated from. */

/* Everything above is plain C/C++ (a host compiler checks it against the Rust mirror:
 * operator/tests/qec_gpu_state.rs); the device code below only for CUDA. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

/* ---------------------------------------------------------------------------------------
 * Shared memory of the stage (static, ~37.8 KB; the transceiver's own is ~8.5 KB; ptxas caps the
 * sum at 48 KB, checked in CI by operator/tests/kernels_compile.rs), and dynamically the table.
 * ------------------------------------------------------------------------------------- */
/** Shot words of the largest shot (RL_QEC_MAX_DETECTORS bits). */
#define RL_QEC_MAX_WORDS ((RL_QEC_MAX_DETECTORS + 31) / 32)
/** Up to this many defects warp 0 decodes alone (at most 26 masks per layer up to 9: one per
 * lane); more go to the whole block (at most 99 per layer at 12). 0..12. */
#ifndef RL_QEC_WARP_K
#define RL_QEC_WARP_K 9
#endif

#define RL_QEC_PHASE_DONE 0u   /* the answer is written */
#define RL_QEC_PHASE_ACK 1u    /* the bits appended, answered OK with no result */
#define RL_QEC_PHASE_DECODE 2u /* the bits appended; decode, answer corrections + report */

#define RL_QEC_MODE_DONE 0u   /* after warp 0: the answer is complete */
#define RL_QEC_MODE_EXACT 1u  /* the block runs the DP layers of s->defs, then thread 0 finishes */
#define RL_QEC_MODE_CLUSTERS 2u /* the block runs the clusters of s->u.g.def, then thread 0 finishes */
#define RL_QEC_MODE_STREAM 3u   /* an acknowledged message: the block settles the shot so far (exact.rs "Streaming") */


/* The DP's schedule. dp[mask] needs the masks without its lowest defect a (and without one
 * partner): their lowest defects are all above a. So the masks are solved in layers by lowest
 * defect, a = k - 1 down to 0, one barrier per layer (k layers, whatever the popcounts). And
 * only the masks reachable from the full set are solved, as the CPU's top-down memo does
 * (exact.rs exact()): those with at most a defects above a removed, since every defect removed
 * above a went as the partner of one below it. The masks of one or two defects come straight
 * from the table and the gather solves them, so the layers start at a = k - 3: 40 masks in 6
 * layers at 8 defects (of the 255 masks), 349 in 10 layers at 12 (of 4095), at most 26 per
 * layer up to 9 defects (one per lane of a warp). The directory and the lists are built by
 * the compiler (constexpr), so neither the host nor the blob is involved. */
#define RL_QEC_SCHED_N 839 /* masks over k = 1..RL_QEC_MAX_K (static_assert below) */

/** The schedule (2192 bytes, a multiple of 16): off[k][i] is the first entry of layer i
 * (lowest defect a = k - 1 - i) of k defects in `m`, off[k][k] the end of the last. */
#define RL_QEC_SCHED_CAP 840 /* RL_QEC_SCHED_N rounded up: the struct is whole 16-byte words */
#define RL_QEC_PAIRS_CAP 80  /* RL_QEC_MAX_K (RL_QEC_MAX_K + 1) / 2 = 78, rounded up likewise */
struct rl_qec_sched {
    uint16_t off[RL_QEC_MAX_K + 1][RL_QEC_MAX_K + 1];
    uint16_t pad[7];
    uint16_t m[RL_QEC_SCHED_CAP];
    /* The gather's items: pair[e] = x | y << 8 for the e-th (x <= y) in the order (0,0), (0,1),
     * (1,1), (0,2), ...: the first k(k+1)/2 are those of k defects. */
    uint16_t pair[RL_QEC_PAIRS_CAP];
};

__host__ __device__ constexpr uint32_t rl_qec_popc_c(uint32_t v) {
    uint32_t c = 0;
    for (; v != 0; v >>= 1) c += v & 1u;
    return c;
}

/** The reachable masks of k defects whose lowest is a and of three defects or more,
 * increasing, written at `m` unless null; returns how many. */
__host__ __device__ constexpr uint32_t rl_qec_layer_c(uint32_t k, uint32_t a, uint16_t *m) {
    const uint32_t up = k - 1u - a; /* defects above a */
    uint32_t c = 0;
    for (uint32_t u = 0; u < (1u << up); u++) {
        if (up - rl_qec_popc_c(u) > a) continue; /* more removed above a than defects below it */
        if (rl_qec_popc_c(u) < 2u) continue;      /* one or two defects: the gather solves those */
        if (m != nullptr) m[c] = (uint16_t)((1u << a) | (u << (a + 1u)));
        c++;
    }
    return c;
}

__host__ __device__ constexpr struct rl_qec_sched rl_qec_make_sched() {
    struct rl_qec_sched d{};
    uint32_t at = 0;
    for (uint32_t k = 1; k <= RL_QEC_MAX_K; k++) {
        for (uint32_t i = 0; i < k; i++) {
            d.off[k][i] = (uint16_t)at;
            at += rl_qec_layer_c(k, k - 1u - i, &d.m[at]);
        }
        d.off[k][k] = (uint16_t)at;
    }
    uint32_t e = 0;
    for (uint32_t y = 0; y < RL_QEC_MAX_K; y++)
        for (uint32_t x = 0; x <= y; x++) d.pair[e++] = (uint16_t)(x | (y << 8));
    return d;
}

static_assert(sizeof(struct rl_qec_sched) % 16 == 0, "the schedule is copied in 16-byte words");
static_assert(rl_qec_make_sched().off[RL_QEC_MAX_K][RL_QEC_MAX_K] == RL_QEC_SCHED_N, "the schedule's size");
static_assert(RL_QEC_SCHED_N <= RL_QEC_SCHED_CAP, "the schedule's capacity");
static_assert(rl_qec_make_sched().off[8][8] - rl_qec_make_sched().off[8][0] == 40, "reachable masks of 3+ of 8 defects");
static_assert(rl_qec_make_sched().off[12][12] - rl_qec_make_sched().off[12][0] == 349, "reachable masks of 3+ of 12 defects");

/** Built by the compiler; rl_qec_fill copies it into the block's cache (shared memory), where
 * the DP reads it. */
__device__ const struct rl_qec_sched rl_qec_sched_g = rl_qec_make_sched();

/** The cache's first 128 bytes: what rl_qec_fast loads in one round (union rl_qec_fastblk). */
struct rl_qec_head {
    unsigned long long state; /* the blob's device address */
    unsigned long long grid;  /* %gridid of the launch that filled it */
    unsigned long long token; /* the header's token */
    long long hot;            /* the mirrored decoder id, -1: none */
    uint32_t n, words, need, rounds;       /* need: output bytes of a decoded shot's answer */
    uint32_t decoders, has_mapping, ok, K; /* ok: the header passed the checks */
    long long mapping_id;
    uint32_t ndef;            /* the hot shot's defects so far, listed in s->defs (at most K) or
                               * s->u.g.def (more); RL_QEC_NDEF_BAD: not listed */
    uint32_t num_obs;
    uint32_t tab;             /* the table: RL_QEC_TAB_GLOBAL, _WANTED or _SHARED */
    uint32_t spec_want;       /* the last message (acknowledged) left no more bits than it carried:
                               * the next one may end the shot (rl_qec_speculate) */
    uint32_t *hot_shot;       /* the blob's shot and record of `hot` */
    struct rl_qec_decoder *hot_rec;
    double scale;
    const uint32_t *dist, *par;
};
static_assert(sizeof(struct rl_qec_head) == 128, "rl_qec_head: eight 16-byte words");
static_assert(sizeof(struct rl_qec_header) % 16 == 0, "rl_qec_header: whole 16-byte words");

/** The decode of the hot shot's defects so far, made between messages (rl_stage_qec_idle):
 * the shot's last message then needs no decode of its own when it adds no defect. Valid for
 * the record's `messages` count it was made at (any later message moves it) and only while
 * `ok`, which every general-path request, fill and make_hot clears. Of at most K defects
 * (listed in s->defs) it is the DP's (rl_qec_speculate); of more, the sum of the clusters the
 * shot's last settle step left for all of them, which is what the final call of
 * rl_qec_clusters would answer. */
struct rl_qec_spec {
    unsigned long long msgs; /* the mirrored record's `messages` when it was made */
    uint32_t ok;             /* 1: made for the mirrored decoder since its last general-path request */
    uint32_t nd;             /* the defects it decoded */
    uint32_t status, obs;    /* the report's status (RL_QEC_REPORT_*) and observables */
    uint32_t weight;         /* the report's f32 weight (rl_qec_weight), bits */
    uint32_t ns;             /* its decode time (%globaltimer ns): the report's decode_ns */
};
static_assert(sizeof(struct rl_qec_spec) == 32, "rl_qec_spec: two 16-byte words");

/** What the clusters' work space holds between messages (exact.rs "Streaming"): the
 * clusters of the first `m` defects of decoder `dec`'s shot that started at its `start`-th
 * message (rl_qec_shot_start), settled at its thresholds before `j`, in work space `ws`
 * (0: shared memory, 1: the block's scratch), the first `ml` defects loaded there (`m` and
 * the young ones after them, some joined by older ones); `over`: a step overflowed; `nc`:
 * the clusters its last step listed (in the work space: the clusters of the `ml` defects,
 * those of the `m` proved).
 * `dec` -1: nothing (a fill, a decoded shot). Any other request finds it by that key or
 * replays the steps. */
struct rl_qec_strm {
    long long dec;
    unsigned long long start;
    uint32_t j, m, ml, over, ws, nc;
};

/** The per-block copy of the blob's header and the mirror of one decoder (module docs):
 * kept across requests, written by lane 0 of warp 0 only; trusted only once its `token` is
 * compared with the blob's in this request (rl_qec_refill). The head first (a base at
 * offset 0). */
struct rl_qec_cache : rl_qec_head {
    struct rl_qec_decoder *records;
    uint32_t *shots;
    uint8_t *scr;        /* this block's scratch (abi.h), 0: none */
    uint32_t scr_edges;  /* the edges its matcher holds */
    uint32_t fast_bytes; /* dynamic shared memory free for the clusters' work (the table is not there) */
    __align__(16) struct rl_qec_sched sched;        /* the DP's schedule (rl_qec_sched_g) */
    __align__(16) struct rl_qec_decoder rec;         /* records[hot] */
    __align__(16) struct rl_qec_spec spec;           /* rl_qec_speculate */
    __align__(16) struct rl_qec_strm strm;           /* the settled clusters in the work space */
    uint32_t stream_n;                               /* the header's stream thresholds */
    uint32_t stream[RL_QEC_MAX_STREAM];
    uint32_t shot[RL_QEC_MAX_WORDS];                 /* its shot (shot_words used) */
};

/** The cache's head as rl_qec_fast loads it: eight 16-byte loads, one round. */
union rl_qec_fastblk {
    uint4 v[8];
    struct rl_qec_head f;
};

/* The table in shared memory. Every table load of the gather is a scattered read (one
 * transaction per lane), and from global memory it costs the decode several times more than
 * from shared memory, whichever load path (decisions.md: the QEC table in shared memory). When the launch
 * gives the block dynamic shared memory for it ((n+1)^2 (distance, parity) pairs: 117 KiB at
 * d=5 with 6 rounds; qec_state.rs dynamic_shared), warp 0 copies the blob's two tables there
 * at the first decode after a fill, and the gather reads shared memory. Otherwise (too large,
 * or a launch without it, as the batch kernel's) the gather reads global memory. The copy is
 * keyed like the rest of the cache: a refill starts over. */
#define RL_QEC_TAB_GLOBAL 0u /* read the blob */
#define RL_QEC_TAB_WANTED 1u /* room for it: copy at the next decode */
#define RL_QEC_TAB_SHARED 2u /* copied: read rl_qec_tab_s */
extern __shared__ __align__(16) uint2 rl_qec_tab_s[];

/** rl_qec_cache.ndef when the hot shot's defects are not listed (above any count: a shot has
 * at most RL_QEC_MAX_DETECTORS). Only the hot shot's list is kept, and only by the fast path:
 * the general path, a fill and a change of the hot decoder set this. A list of more than K in
 * s->u.g.def shares its memory with the DP's costs, which run only on a shot of at most K. */
#define RL_QEC_NDEF_BAD 0xFFFFu
/** rl_qec_fast: the request needs the general path. */
#define RL_QEC_PHASE_SLOW 3u

/** What lane 0 decided for this request: written before a __syncwarp (and before the block
 * barrier for the other warps), then only read, except `ret`, which thread 0 writes again (a
 * decoded shot's answer) while the other threads wait at a barrier. */
struct rl_qec_ctl {
    int ret;
    uint32_t mode;                /* RL_QEC_MODE_*, for the whole block */
    uint32_t phase;
    uint32_t k;                   /* defects of the shot */
    uint32_t w0, w1;              /* shot words the append changed (written through) */
    uint32_t touched;             /* the record changed (written through) */
    uint32_t rlen;                /* get_corrections: the result's length */
    unsigned long long t0;        /* decode start (%globaltimer) */
};

/** The clusters' outcome, written by thread 0 (and the small clusters' atomics) between barriers. */
struct rl_qec_result {
    uint32_t status;          /* report status */
    uint32_t obs;             /* observables of the matching */
    uint32_t infinite;        /* the weight is infinite */
    uint32_t done;            /* rl_qec_clusters: the proof joined clusters this round */
    uint32_t left;            /* rl_qec_clusters: the clusters' count */
    uint32_t edges;           /* rl_qec_clusters: a cluster is not decoded (OVERFLOW) */
    uint32_t sj, sm, sml;     /* rl_qec_clusters: the next threshold, defects settled, defects loaded */
    uint32_t smj, smt;        /* rl_qec_clusters: the next step's defects to settle, present */
    uint32_t sover;           /* rl_qec_clusters: a step overflowed */
    uint32_t wait;            /* rl_qec_settle: a cluster of this pass waits for a matcher */
    uint32_t listed;          /* rl_qec_clusters: the clusters of the first sm defects are listed (left) and proved */
    unsigned long long cost;  /* matching weight in table units */
};

struct rl_qec_smem {
    union {
        struct {
            /* (cost in table units, observables) of dp[mask] (exact.rs dp_cost, dp_obs), at
             * rl_qec_sw(mask): one 8-byte load gives an option both */
            uint2 wo[1u << RL_QEC_MAX_K];
        } dp;
        struct {
            uint16_t def[RL_QEC_MAX_DETECTORS]; /* a shot of more than K defects: its defects, increasing */
        } g;
    } u;
    /* exact.rs gather(): the k x k sub-table of the shot's defects, (distance, parity): row x
     * holds the boundary option at [x][x] and the partners y > x at [x][y] */
    __align__(16) uint2 sub[RL_QEC_MAX_K * RL_QEC_MAX_K];
    __align__(16) uint16_t defs[16]; /* the first K defects, increasing (16: two 16-byte loads) */
    __align__(16) struct rl_qec_ctl c;
    __align__(16) struct rl_qec_result r;
    __align__(16) struct rl_qec_cache k; /* kept across requests */
};

/* ---------------------------------------------------------------------------------------
 * Phase timer (-DRL_QEC_PROFILE, for the replay test): clock64 at marks, thread 0. The
 * clock is read when the mark issues: a load still in flight is charged to the phase that
 * first uses it.
 *   0 entry, 1 protocol and append done (lane 0), 2 defects listed, 3 table gathered,
 *   4 DP / clusters done, 5 answer written (before the last barrier); 6 the fast path's
 *   checks passed, 7 the decoded shot's record updated in shared memory (in the answer);
 *   the request's last settle step (rl_qec_settle): 8 its first joins made, 9 its clusters
 *   listed, 10 solved (the last round of its proof), 11 proved.
 * ------------------------------------------------------------------------------------- */
/* RL_QEC_PROFILE_ACK (with RL_QEC_PROFILE; measurement only): marks 2..5, the decode's
 * otherwise, time the fast path's steps instead: 2 the shot and its defects appended, 3 the
 * record updated, 4 the answer's header written, 5 the token checked. */
/* RL_QEC_PROFILE_STEPS (with RL_QEC_PROFILE; measurement only): marks 8..11, the settle
 * step's otherwise, time rl_qec_clusters instead: 8 its work space and held state, 9 its
 * steps done (the thresholds passed and, in a final call, the final step), 10 the same in a
 * final call, 11 the sum. RL_QEC_PROFILE_HAND (likewise): marks 8..11 the hand-over instead: 8
 * the block's entry (rl_qec_block), 9 the clusters' work space and held state, 10 the last
 * settle step's new defects and pairs loaded, 11 its first joins' nearest partners.
 * RL_QEC_PROFILE_PM (likewise): marks 8..11 the request's last matcher run (blossom.cuh
 * RL_PM_MARK) instead: 8 its entry, 9 its edges written, 10 its setup and initial duals, 11
 * its stages done. */
#if defined(RL_QEC_PROFILE) && defined(RL_QEC_PROFILE_HAND)
#define RL_QEC_SMARK(i) do { } while (0)
#define RL_QEC_CMARK(i) do { } while (0)
#define RL_QEC_HMARK(i) RL_QEC_MARK(i)
#elif defined(RL_QEC_PROFILE) && defined(RL_QEC_PROFILE_PM)
#define RL_QEC_SMARK(i) do { } while (0)
#define RL_QEC_CMARK(i) do { } while (0)
#elif defined(RL_QEC_PROFILE) && defined(RL_QEC_PROFILE_STEPS)
#define RL_QEC_SMARK(i) do { } while (0)
#define RL_QEC_CMARK(i) RL_QEC_MARK(i)
#else
#define RL_QEC_SMARK(i) RL_QEC_MARK(i)
#define RL_QEC_CMARK(i) do { } while (0)
#endif
#ifndef RL_QEC_HMARK
#define RL_QEC_HMARK(i) do { } while (0)
#endif
#if defined(RL_QEC_PROFILE) && defined(RL_QEC_PROFILE_ACK)
#define RL_QEC_AMARK(i) RL_QEC_MARK(i)
#else
#define RL_QEC_AMARK(i) \
    do {                \
    } while (0)
#endif
/* ---------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------- */
__device__ __forceinline__ unsigned long long rl_qec_clock(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/** The launch's %gridid (constant for the launch: not volatile, the compiler may keep it). */
__device__ __forceinline__ unsigned long long rl_qec_gridid(void) {
    unsigned long long g;
    asm("mov.u64 %0, %%gridid;" : "=l"(g));
    return g;
}

/** The header's token: a load through the read-only path (ld.global.nc: the token is never
 * written on the device), issued first and compared before the request's first global
 * access (decisions.md: the token's load). */
__device__ __forceinline__ unsigned long long rl_qec_load_token(const uint8_t *base) {
    const unsigned long long *p = (const unsigned long long *)&((const struct rl_qec_header *)base)->token;
    return __ldg(p);
}

/* Little-endian i64 at an 8-byte aligned offset of a shared buffer. */
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
 * echoed) from the request's first 16 bytes `q` and its ptp_timestamp `ts`. `resp` is
 * 16-byte aligned. */
__device__ __forceinline__ void rl_qec_header_from(uint8_t *resp, uint4 q, unsigned long long ts, int status, uint32_t result_len) {
    ((uint4 *)resp)[0] = make_uint4(RL_RPC_RESPONSE_MAGIC, (uint32_t)status, result_len, q.w);
    ((unsigned long long *)resp)[2] = ts;
}

/** rl_qec_header_from with the request's first 16 bytes (q) and ptp_timestamp (ts) loaded
 * here; the fast path, which has them in registers, calls rl_qec_header_from. */
__device__ __forceinline__ void rl_qec_header_out(uint8_t *resp, const uint8_t *req, int status, uint32_t result_len) {
    rl_qec_header_from(resp, ((const uint4 *)req)[0], ((const unsigned long long *)req)[2], status, result_len);
}

/** The report's weight: the f64 weight sum / scale rounded to nearest f32, as the CPU's
 * `as f32`; +inf when unmatchable. */
__device__ __forceinline__ float rl_qec_weight(bool infinite, unsigned long long cost, double scale) {
    /* 0 / scale is +0 (scale > 0, the builder's): a zero dividend takes the division's slow
     * path, on every shot without defects */
    return infinite ? __int_as_float(0x7f800000) : cost == 0 && scale > 0.0 ? 0.0f : __double2float_rn((double)cost / scale);
}

/** A decoded shot's answer after the CUQS header: the corrections (`clen` bytes), then the
 * 16-byte DecodeReportRepr (8-byte aligned): status, reserved, defects (u16, saturating),
 * weight (f32, rl_qec_weight), decode_ns (saturating), shot index (wrapping). Returns the
 * result's length. */
__device__ __forceinline__ uint32_t rl_qec_decoded_body(uint8_t *body, uint32_t num_obs, float weight, uint32_t status, uint32_t obs, uint32_t kd,
                                                        unsigned long long ns, uint32_t shot_index) {
    /* rl_qec_emit_corrections for at most 32 observables (RL_QEC_MAX_OBSERVABLES, the fill
     * checks it): one 8-byte word or none, no loop */
    const uint32_t clen = num_obs == 0 ? 0u : 8u;
    if (clen != 0) *(unsigned long long *)body = (unsigned long long)(obs & (num_obs >= 32 ? ~0u : (1u << num_obs) - 1u));
    uint2 *rep = (uint2 *)(body + clen);
    rep[0] = make_uint2(status | ((kd < 0xFFFFu ? kd : 0xFFFFu) << 16), (uint32_t)__float_as_int(weight));
    rep[1] = make_uint2(ns < 0xFFFFFFFFull ? (uint32_t)ns : 0xFFFFFFFFu, shot_index);
    return clen + RL_QEC_REPORT_LEN;
}

/** The record's first 64 bytes (bits, in_shot, next_counter | corrections, messages | shots,
 * overflows | unmatchable, dropped_messages) after a decode (session.rs enqueue() from the
 * decode on): not in a shot, corrections ^= obs, shots + 1, overflows or unmatchable + 1. */
__device__ __forceinline__ void rl_qec_record_decoded(uint4 &r0, uint4 &r1, uint4 &r2, uint4 &r3, uint32_t obs, uint32_t status) {
    r0.x = 0;
    r0.y = 0;
    r1.x ^= obs;
    unsigned long long v = (((unsigned long long)r2.y << 32) | r2.x) + 1ull;
    r2.x = (uint32_t)v;
    r2.y = (uint32_t)(v >> 32);
    v = (((unsigned long long)r2.w << 32) | r2.z) + (status == RL_QEC_REPORT_OVERFLOW);
    r2.z = (uint32_t)v;
    r2.w = (uint32_t)(v >> 32);
    v = (((unsigned long long)r3.y << 32) | r3.x) + (status == RL_QEC_REPORT_UNMATCHABLE);
    r3.x = (uint32_t)v;
    r3.y = (uint32_t)(v >> 32);
}

/** Detection word `w` of the shot with the bits at or above n cleared (exact.rs decode_b8
 * ignores them). */
__device__ __forceinline__ uint32_t rl_qec_word(const uint32_t *shot, uint32_t w, uint32_t words, uint32_t n) {
    uint32_t v = shot[w];
    if (w + 1 == words && (n & 31u) != 0) v &= (1u << (n & 31u)) - 1u;
    return v;
}

/** Bits s0 .. s0 + 31 of the message's `nbits` detection bits at `src` (LSB first) as one
 * word, zero outside 0 .. nbits (session.rs append_bits masks the last byte the same way);
 * s0 may be negative (the word starts before the message's first bit). Reads only the
 * message's ceil(nbits / 8) bytes. */
__device__ __forceinline__ uint32_t rl_qec_src32(const uint8_t *src, uint32_t nbits, int s0) {
    if (s0 <= -32 || s0 >= (int)nbits) return 0u;
    uint32_t lift = 0;
    if (s0 < 0) {
        lift = (uint32_t)(-s0); /* 1..31: the message's bit 0 lands at bit `lift` */
        s0 = 0;
    }
    const uint32_t b0 = (uint32_t)s0 >> 3, sh = (uint32_t)s0 & 7u, nb = (nbits + 7u) >> 3;
    unsigned long long acc = 0;
#pragma unroll
    for (uint32_t i = 0; i < 5; i++)
        if (b0 + i < nb) acc |= (unsigned long long)src[b0 + i] << (8u * i);
    acc >>= sh;
    const uint32_t keep = nbits - (uint32_t)s0; /* >= 1 */
    if (keep < 32u) acc &= (1ull << keep) - 1ull;
    return (uint32_t)acc << lift;
}

/* ---------------------------------------------------------------------------------------
 * The cache (lane 0 of warp 0)
 * ------------------------------------------------------------------------------------- */

/** The scratch's defect arrays (abi.h RL_QEC_SCRATCH_DEFECT_BYTES per detector: two of
 * 64-bit entries, thirteen of 32-bit ones, cstart one longer), then the matchers' work
 * space (16-byte aligned). Indexed by defect (its index in the shot), by root (the lowest
 * defect of a cluster) or by cluster (its place in the list). */
struct rl_qec_scr {
    long long *y;             /* [n] per defect: its doubled LP dual (exact.rs duals) */
    unsigned long long *cost; /* [n] per root: its cluster's matching weight */
    uint32_t *def;            /* [n] per defect: its detector, increasing */
    uint32_t *bnd;            /* [n] per defect: its boundary distance */
    uint32_t *uf;             /* [n] union-find parents */
    uint32_t *rt;             /* [n] per defect: its root when the clusters were listed */
    uint32_t *list;           /* [n] the defects cluster after cluster, increasing within each */
    uint32_t *cstart;         /* [n + 1] where each cluster starts in `list` (then its end) */
    uint32_t *cnt;            /* [n] per root: members, then a fill cursor */
    uint32_t *size;           /* [n] per root: its cluster's size when last solved (0: never) */
    uint32_t *obs;            /* [n] per root: its matching's observables */
    uint32_t *stat;           /* [n] per root: RL_QEC_ST_* */
    uint32_t *at;             /* [n] per cluster: its matcher's place / 16, or RL_QEC_AT_* */
    uint32_t *owner;          /* [n] per cluster: the warp that runs its matcher */
    uint32_t *edges;          /* [n] per cluster: its matcher's edges, the linked pairs (all ones: over the cap) */
    uint8_t *pm;              /* the matchers' work space (rl_pm_carve) */
    uint32_t *pd;             /* the pairs' distances by defect, rows below pdn (rl_qec_pair); 0: none */
    uint32_t pdn;             /* rows pd holds: RL_QEC_PD_CAP with pd, else 0 */
};

/** Bytes of the defect arrays for `cap` defects (abi.h RL_QEC_SCRATCH_DEFECT_BYTES per
 * defect, and cstart's extra entry), rounded up to 16. */
__host__ __device__ __forceinline__ unsigned long long rl_qec_lists_bytes(uint32_t cap) {
    return (16ull * cap + 4ull * (13ull * cap + 1ull) + 15ull) & ~15ull;
}
static_assert(16u + 4u * 13u == RL_QEC_SCRATCH_DEFECT_BYTES, "abi.h RL_QEC_SCRATCH_DEFECT_BYTES: the scratch's defect arrays");

__device__ __forceinline__ struct rl_qec_scr rl_qec_scr_of(uint8_t *at, uint32_t cap) {
    struct rl_qec_scr r;
    r.y = (long long *)at;
    r.cost = (unsigned long long *)(r.y + cap);
    r.def = (uint32_t *)(r.cost + cap);
    r.bnd = r.def + cap;
    r.uf = r.bnd + cap;
    r.rt = r.uf + cap;
    r.list = r.rt + cap;
    r.cstart = r.list + cap;
    r.cnt = r.cstart + cap + 1u;
    r.size = r.cnt + cap;
    r.obs = r.size + cap;
    r.stat = r.obs + cap;
    r.at = r.stat + cap;
    r.owner = r.at + cap;
    r.edges = r.owner + cap;
    r.pm = at + rl_qec_lists_bytes(cap);
    r.pd = 0;
    r.pdn = 0;
    return r;
}

/* The host's scratch_stride (qec_state.rs) counts a matcher's arrays at RL_PM_VERTEX_BYTES a
 * vertex and RL_PM_EDGE_BYTES an edge, and the slack for the rest: the solver's struct at the
 * area's head and up to 15 bytes of alignment after each of its 36 arrays. */
static_assert(RL_PM_HEAD_BYTES + 36u * 15u <= RL_PM_SLACK_BYTES, "abi.h RL_PM_SLACK_BYTES: the matcher's struct and its arrays' alignment");

/** Bytes of scratch a block needs: the defect arrays and a matcher of n vertices and
 * `edges` edges. */
__device__ __forceinline__ unsigned long long rl_qec_scr_bytes(uint32_t n, uint32_t edges) {
    return rl_qec_lists_bytes(n) + rl_pm_bytes(n, edges);
}

/** Refills the cache from the blob's header (one round of loads) and checks the header: a
 * missing or inconsistent blob (never a host-built one) leaves `ok` 0, and every request is
 * dropped rather than read or written outside it. No decoder is mirrored afterwards. */
__device__ __noinline__ void rl_qec_fill(struct rl_qec_cache *k, uint8_t *base, unsigned long long grid) {
    union {
        uint4 v[sizeof(struct rl_qec_header) / 16];
        struct rl_qec_header h;
    } u;
    const uint4 *src = (const uint4 *)base;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(struct rl_qec_header) / 16); i++) u.v[i] = src[i];
    const struct rl_qec_header *h = &u.h;
    const uint32_t n = h->num_detectors;
    k->ok = h->magic == RL_QEC_MAGIC && h->header_bytes == sizeof(struct rl_qec_header) && n <= RL_QEC_MAX_DETECTORS &&
            h->max_defects <= RL_QEC_MAX_K && h->num_observables <= RL_QEC_MAX_OBSERVABLES &&
            h->shot_words == (n + 31u) / 32u && h->rounds_per_message != 0 &&
            ((h->distances_off | h->parities_off | h->shots_off) & 3u) == 0 && (h->decoders_off & 15u) == 0 &&
            h->stream_count <= RL_QEC_MAX_STREAM;
    /* the thresholds as the host checked them (ascending, below n); re-checked: a step
     * reads them as bounds */
    uint32_t sn = 0;
    for (uint32_t i = 0; i < RL_QEC_MAX_STREAM && i < h->stream_count; i++) {
        if (h->stream[i] >= n || (sn > 0 && h->stream[i] <= k->stream[sn - 1])) break;
        k->stream[sn++] = h->stream[i];
    }
    k->stream_n = sn;
    k->strm.dec = -1;
    k->n = n;
    k->K = h->max_defects;
    k->words = h->shot_words;
    k->num_obs = h->num_observables;
    k->need = RL_RPC_HEADER_LEN + rl_qec_correction_len(h->num_observables) + RL_QEC_REPORT_LEN;
    k->ndef = RL_QEC_NDEF_BAD;
    k->spec.ok = k->spec_want = 0;
    uint32_t dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    k->tab = (uint64_t)(n + 1u) * (n + 1u) * sizeof(uint2) <= dyn ? RL_QEC_TAB_WANTED : RL_QEC_TAB_GLOBAL;
    k->fast_bytes = k->tab == RL_QEC_TAB_GLOBAL ? dyn : 0u;
    k->hot_shot = 0;
    k->hot_rec = 0;
    k->decoders = h->decoders;
    k->rounds = h->rounds_per_message;
    k->has_mapping = h->has_mapping;
    k->mapping_id = h->mapping_id;
    k->scale = h->scale;
    k->dist = (const uint32_t *)(base + h->distances_off);
    k->par = (const uint32_t *)(base + h->parities_off);
    k->records = (struct rl_qec_decoder *)(base + h->decoders_off);
    k->shots = (uint32_t *)(base + h->shots_off);
    /* the scratch only where the matcher's own count fits the host's stride */
    const bool scr = blockIdx.x < h->scratch_blocks && ((h->scratch_off | h->scratch_stride) & 15u) == 0 &&
                     rl_qec_scr_bytes(n, h->scratch_edges) <= h->scratch_stride;
    k->scr = scr ? base + h->scratch_off + (uint64_t)blockIdx.x * h->scratch_stride : 0;
    k->scr_edges = h->scratch_edges;
    k->hot = -1;
    /* the DP's schedule: 137 16-byte words, 8 loads in flight */
    const uint4 *const from = (const uint4 *)&rl_qec_sched_g;
    uint4 *const to = (uint4 *)&k->sched;
    const uint32_t words = sizeof(struct rl_qec_sched) / 16u;
    for (uint32_t i = 0; i < words; i += 8u) {
        uint4 t[8];
#pragma unroll
        for (uint32_t j = 0; j < 8u; j++)
            if (i + j < words) t[j] = from[i + j];
#pragma unroll
        for (uint32_t j = 0; j < 8u; j++)
            if (i + j < words) to[i + j] = t[j];
    }
    k->state = (unsigned long long)base;
    k->grid = grid;
    k->token = h->token;
}

/* The request's trust in the cache: the blob's token is loaded when the request starts and
 * compared with the cache's before the request's first global access (a table load, a
 * write-through, another decoder's record); until then the request runs on the cache
 * speculatively, touching only shared memory, every index bounded by the arrays' sizes
 * whatever the cache holds. A copy that fails the comparison (shared memory left by another
 * kernel) is refilled and the request runs again ("redo"). `trusted`: compared or refilled
 * in this request already. */

/** Whether the cache must be refilled before a global access (and was: the speculative work
 * so far is void). */
__device__ __forceinline__ bool rl_qec_refill(struct rl_qec_cache *k, uint8_t *base, unsigned long long grid, unsigned long long token,
                                              bool trusted) {
    if (trusted || k->token == token) return false;
    rl_qec_fill(k, base, grid);
    return true;
}

/** A protocol function's answer meaning "refilled: run the request again". */
#define RL_QEC_REDO (-2)

/** Makes decoder `id` (checked) the mirrored one: its record and shot from the blob, one
 * round of loads (the blob holds every change already: write-through). */
__device__ __noinline__ void rl_qec_make_hot(struct rl_qec_cache *k, long long id) {
    const uint4 *rec = (const uint4 *)(k->records + id);
    uint4 v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = rec[i];
    const uint32_t *shot = k->shots + (uint64_t)id * k->words;
    const uint32_t W = k->words;
    uint32_t w = 0;
    for (; w + 8u <= W; w += 8u) {
        uint32_t t[8];
#pragma unroll
        for (int i = 0; i < 8; i++) t[i] = shot[w + i];
#pragma unroll
        for (int i = 0; i < 8; i++) k->shot[w + i] = t[i];
    }
    for (; w < W; w++) k->shot[w] = shot[w];
#pragma unroll
    for (int i = 0; i < 8; i++) ((uint4 *)&k->rec)[i] = v[i];
    k->hot = id;
    k->hot_shot = (uint32_t *)shot;
    k->hot_rec = k->records + id;
    k->ndef = RL_QEC_NDEF_BAD;
    k->spec.ok = k->spec_want = 0;
}

/** Writes the mirrored record through to the blob (posted stores). */
__device__ __forceinline__ void rl_qec_flush(const struct rl_qec_cache *k) {
    uint4 *dst = (uint4 *)k->hot_rec;
#pragma unroll
    for (int i = 0; i < 8; i++) dst[i] = ((const uint4 *)&k->rec)[i];
}

/* ---------------------------------------------------------------------------------------
 * Protocol (lane 0 of warp 0): session.rs handle / enqueue / get_corrections / reset
 * ------------------------------------------------------------------------------------- */

/** session.rs slot_index() off the fast path: 0 when decoder `id` is now the mirrored one,
 * RL_QEC_INVALID_DECODER for an id out of range (counted in the blob with an atomic add:
 * blocks of a batch kernel may share the header), RL_QEC_REDO after a refill. */
__device__ __noinline__ int rl_qec_slot_slow(struct rl_qec_cache *k, uint8_t *base, unsigned long long grid, unsigned long long token,
                                             bool trusted, long long id) {
    if (rl_qec_refill(k, base, grid, token, trusted)) return RL_QEC_REDO;
    if (id < 0 || id >= (long long)k->decoders) {
        atomicAdd((unsigned long long *)&((struct rl_qec_header *)base)->invalid_decoder, 1ull);
        return RL_QEC_INVALID_DECODER;
    }
    if (k->hot != id) rl_qec_make_hot(k, id);
    return 0;
}

/** session.rs slot_index(): 0 when decoder `id`'s record is the mirrored one (k->rec), else
 * as rl_qec_slot_slow. */
__device__ __forceinline__ int rl_qec_slot(struct rl_qec_cache *k, uint8_t *base, unsigned long long grid, unsigned long long token,
                                           bool trusted, long long id) {
    if (id >= 0 && id < (long long)k->decoders && id == k->hot) return 0;
    return rl_qec_slot_slow(k, base, grid, token, trusted, id);
}

/** session.rs Slot::discard(). */
__device__ __forceinline__ void rl_qec_discard(struct rl_qec_decoder *s) {
    s->in_shot = 0;
    s->bits = 0;
}

/** session.rs enqueue(), up to the decode: the status of an answer without a result, or OK
 * with c->phase ACK or DECODE when the bits are accepted: the slot advanced and the bits
 * appended to the mirrored shot (session.rs append_bits(); with `zero`, the shot cleared
 * first: `slot.shot.fill(0)` at counter 0), c->w0 .. c->w1 the words changed. */
__device__ __forceinline__ int rl_qec_enqueue(const uint8_t *args, uint32_t arg_len, int cap, struct rl_qec_smem *sm, uint8_t *base,
                                              unsigned long long grid, unsigned long long token, bool trusted) {
    struct rl_qec_cache *k = &sm->k;
    struct rl_qec_ctl *c = &sm->c;
    /* EnqueueSyndromesRepr::parse: Truncated below 32 bytes; Malformed for a negative or too
     * large count; Truncated when the announced bytes are missing. No slot to charge. */
    if (arg_len < RL_QEC_ENQUEUE_FIXED) return RL_QEC_BAD_REQUEST;
    const long long id = rl_qec_i64(args), counter = rl_qec_i64(args + 8), mapping = rl_qec_i64(args + 16),
                    nsyn = rl_qec_i64(args + 24);
    if (nsyn < 0 || nsyn > RL_QEC_MAX_SYNDROMES) return RL_QEC_BAD_REQUEST;
    if ((uint64_t)(arg_len - RL_QEC_ENQUEUE_FIXED) < ((uint64_t)nsyn + 7u) / 8u) return RL_QEC_BAD_REQUEST;
    const int sl = rl_qec_slot(k, base, grid, token, trusted, id);
    if (sl != 0) return sl;
    struct rl_qec_decoder *s = &k->rec;
    /* The output must hold the final answer, checked before any state changes. */
    const uint32_t final_len = rl_qec_correction_len(k->num_obs) + RL_QEC_REPORT_LEN;
    if ((uint32_t)(cap - RL_RPC_HEADER_LEN) < final_len) return RL_QEC_INTERNAL_ERROR;
    c->touched = 1;
    if (k->has_mapping && mapping != k->mapping_id) {
        s->counters.bad_requests++;
        return RL_QEC_BAD_REQUEST;
    }
    uint32_t zero = 0;
    if (counter == 0) {
        /* A new shot; an unfinished one is abandoned (and counted). */
        if (s->in_shot) s->counters.abandoned_shots++;
        s->bits = 0;
        s->in_shot = 1;
        zero = 1;
    } else if (!s->in_shot || counter != s->next_counter) {
        /* A gap: the unfinished shot is discarded, this and later messages are dropped
         * until the next counter 0. */
        if (s->in_shot) s->counters.dropped_shots++;
        rl_qec_discard(s);
        s->counters.dropped_messages++;
        return RL_QEC_SYNDROMES_DROPPED;
    }
    const long long rounds = (long long)k->rounds;
    const uint32_t at = s->bits; /* <= n: every accepted message kept it so */
    if ((uint64_t)nsyn > (uint64_t)(k->n - at) || counter > 0x7fffffffffffffffLL - rounds) {
        /* More bits than the shot has room for, or a counter that cannot advance. */
        s->counters.bad_requests++;
        s->counters.dropped_shots++;
        rl_qec_discard(s);
        return RL_QEC_BAD_REQUEST;
    }
    const uint32_t nbits = (uint32_t)nsyn;
    s->bits = at + nbits;
    s->next_counter = counter + rounds;
    s->counters.messages++;
    /* The append, word by word (bounded by the mirror's size whatever the cache holds) */
    const uint32_t W = k->words < RL_QEC_MAX_WORDS ? k->words : RL_QEC_MAX_WORDS;
    uint32_t w0 = 0, w1 = W;
    if (!zero) {
        w0 = at >> 5;
        w1 = nbits == 0 ? w0 : ((at + nbits - 1u) >> 5) + 1u; /* at + nbits <= n: w1 <= W */
        w1 = w1 < W ? w1 : W;
    }
    const uint8_t *src = args + RL_QEC_ENQUEUE_FIXED;
    for (uint32_t w = w0; w < w1; w++) {
        uint32_t v = rl_qec_src32(src, nbits, (int)(w * 32u) - (int)at);
        if (!zero) v |= k->shot[w];
        k->shot[w] = v;
    }
    c->w0 = w0;
    c->w1 = w1;
    /* Not the last bits: answered OK with no result; the last: decoded, answered by
     * rl_qec_finish. */
    c->phase = s->bits < k->n ? RL_QEC_PHASE_ACK : RL_QEC_PHASE_DECODE;
    return RL_QEC_OK;
}

/** session.rs get_corrections() and reset() (off the fast path): the status (or
 * RL_QEC_REDO); a result is written at `body` (cap - 24 bytes), its length in c->rlen. */
__device__ __noinline__ int rl_qec_other(uint32_t fn, const uint8_t *args, uint32_t arg_len, uint8_t *body, int cap, struct rl_qec_smem *sm,
                                         uint8_t *base, unsigned long long grid, unsigned long long token, bool trusted) {
    struct rl_qec_cache *k = &sm->k;
    struct rl_qec_decoder *s = &k->rec;
    if (fn == RL_QEC_FN_GET) {
        if (arg_len < RL_QEC_GET_LEN) return RL_QEC_BAD_REQUEST;
        const long long id = rl_qec_i64(args), size = rl_qec_i64(args + 8);
        const uint8_t reset = args[16];
        const int sl = rl_qec_slot(k, base, grid, token, trusted, id);
        if (sl != 0) return sl;
        if (size < 0 || size > RL_QEC_MAX_RETURN_BITS) {
            s->counters.bad_requests++;
            sm->c.touched = 1;
            return RL_QEC_BAD_REQUEST;
        }
        if (s->in_shot) return RL_QEC_NOT_READY; /* its correction is not in yet */
        const uint32_t len = rl_qec_correction_len((uint32_t)size);
        if ((uint32_t)(cap - RL_RPC_HEADER_LEN) < len) return RL_QEC_INTERNAL_ERROR; /* before the reset */
        rl_qec_emit_corrections(body, s->corrections, (uint32_t)size, len);
        if (reset != 0) {
            s->corrections = 0;
            sm->c.touched = 1;
        }
        sm->c.rlen = len;
        return RL_QEC_OK;
    }
    /* reset_decoder: drop the unfinished shot and the corrections; counters survive */
    if (arg_len < RL_QEC_RESET_LEN) return RL_QEC_BAD_REQUEST;
    const int sl = rl_qec_slot(k, base, grid, token, trusted, rl_qec_i64(args));
    if (sl != 0) return sl;
    rl_qec_discard(s);
    s->corrections = 0;
    s->next_counter = 0;
    sm->c.touched = 1;
    return RL_QEC_OK;
}

/** Lane 0, one pass: session.rs handle() up to the decode, on the cache. Sets c->phase and,
 * unless a shot is to be decoded (DECODE), c->ret and the whole answer. Returns true when
 * the cache was refilled on the way (run it again). */
__device__ __forceinline__ bool rl_qec_protocol(const uint8_t *req, int len, uint8_t *resp, int cap, struct rl_qec_smem *sm, uint8_t *base,
                                                unsigned long long grid, unsigned long long token, bool trusted) {
    struct rl_qec_ctl *c = &sm->c;
    struct rl_qec_cache *k = &sm->k;
    c->phase = RL_QEC_PHASE_DONE;
    c->ret = -1;
    c->touched = 0;
    c->w0 = 0;
    c->w1 = 0;
    k->ndef = RL_QEC_NDEF_BAD; /* the general path does not keep the defect list */
    k->spec.ok = k->spec_want = 0;
    if (!k->ok) {
        /* A missing or inconsistent state blob (never a host-built one): not answered. */
        if (rl_qec_refill(k, base, grid, token, trusted)) return true;
        if (!k->ok) return false;
    }
    const uint32_t *rh = (const uint32_t *)req;
    const uint32_t fn = rh[1], arg_len = rh[2];
    const uint8_t *args = req + RL_RPC_HEADER_LEN;
    uint32_t rlen = 0;
    int st;
    if ((uint64_t)arg_len + RL_RPC_HEADER_LEN > (uint64_t)len) {
        st = RL_QEC_BAD_REQUEST; /* the arguments are not all there */
    } else if (fn == RL_QEC_FN_ENQUEUE) {
        st = rl_qec_enqueue(args, arg_len, cap, sm, base, grid, token, trusted);
    } else {
        c->rlen = 0;
        st = rl_qec_other(fn, args, arg_len, resp + RL_RPC_HEADER_LEN, cap, sm, base, grid, token, trusted);
        rlen = c->rlen;
    }
    if (st == RL_QEC_REDO) return true;
    if (c->phase != RL_QEC_PHASE_DECODE) {
        rl_qec_header_out(resp, req, st, rlen);
        c->ret = RL_RPC_HEADER_LEN + (int)rlen;
    }
    return false;
}

/** Lane 0, the general path: the request up to the decode (rl_qec_protocol on a trusted
 * cache), and its changes written through to the blob. Returns c->phase. */
__device__ __noinline__ uint32_t rl_qec_slow(const uint8_t *req, int len, uint8_t *resp, int cap, uint8_t *base, struct rl_qec_smem *sm,
                                            unsigned long long token, unsigned long long grid) {
    struct rl_qec_ctl *c = &sm->c;
    struct rl_qec_cache *k = &sm->k;
    bool trusted = false;
    if (!(k->state == (unsigned long long)base && k->grid == grid && k->token != 0)) {
        rl_qec_fill(k, base, grid);
        trusted = true;
    }
    for (;;) {
        const bool redo = rl_qec_protocol(req, len, resp, cap, sm, base, grid, token, trusted);
        if (!redo && !rl_qec_refill(k, base, grid, token, trusted)) break; /* the pass stands */
        trusted = true; /* refilled: again */
    }
    /* Write-through: the appended words and the record (rl_qec_finish writes the decoded
     * shot's first 64 bytes again). */
    if (c->w1 > c->w0) {
        uint32_t *g = k->hot_shot;
        for (uint32_t w = c->w0; w < c->w1; w++) g[w] = k->shot[w];
    }
    if (c->touched) rl_qec_flush(k);
    return c->phase;
}

/* ---------------------------------------------------------------------------------------
 * The decode of a few defects, in registers (exact.rs solve() written out for k <= 4)
 * ------------------------------------------------------------------------------------- */

/** dp[{x, y}] (x < y) from x's boundary entry `bx`, y's `by` and the pair's `e`, each (distance,
 * parity): both to the boundary first, the pair only when strictly cheaper (rl_qec_solve's
 * rule); infinite: observables 0. */
__device__ __forceinline__ uint2 rl_qec_pair_dp(uint2 bx, uint2 by, uint2 e) {
    const uint32_t sum = bx.x + by.x;
    const uint32_t c0 = sum >= bx.x ? sum : RL_QEC_INF; /* wraps when either is infinite */
    const bool pair = e.x < c0;
    const uint32_t c = pair ? e.x : c0;
    return make_uint2(c, c == RL_QEC_INF ? 0u : (pair ? e.y : bx.y ^ by.y));
}

/** dp[{x}] from x's boundary entry: infinite: observables 0. */
__device__ __forceinline__ uint2 rl_qec_dp1(uint2 b) { return make_uint2(b.x, b.x == RL_QEC_INF ? 0u : b.y); }

/** One option of rl_qec_solve: entry `e` plus the solved sub-mask `v` (a wrapping sum is an
 * infinite option, as there). */
__device__ __forceinline__ uint2 rl_qec_opt(uint2 e, uint2 v) {
    const uint32_t sum = e.x + v.x;
    return make_uint2(sum >= e.x ? sum : RL_QEC_INF, e.y ^ v.y);
}

/** The earlier option `a` unless `b` is strictly cheaper (rl_qec_solve's tie rule). */
__device__ __forceinline__ uint2 rl_qec_first_min(uint2 a, uint2 b) { return b.x < a.x ? b : a; }

/** Up to this many defects lane 0 decodes a shot itself, in registers, inside the fast path:
 * no hand-over to the warp, no sub-table, no DP layers (most shots at p = 0.1%). */
#define RL_QEC_LANE_K 4

/** Lane 0: dp[full] (cost, observables) of the nd <= RL_QEC_LANE_K defects listed in
 * sm->defs, from the shared copy of the table: the same options in the same order as
 * rl_qec_gather + rl_qec_dp (ties to the earlier option), so the same matching. Every table
 * load is issued before the first is used; a defect index is clamped to the table's rows. */
__device__ __forceinline__ uint2 rl_qec_lane_dp(const uint16_t *defs, uint32_t nd, uint32_t n) {
    const uint2 dl = *(const uint2 *)defs;
    const uint32_t stride = n + 1u;
    uint32_t d[4] = {dl.x & 0xFFFFu, dl.x >> 16, dl.y & 0xFFFFu, dl.y >> 16};
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) d[i] = d[i] < n ? d[i] : n;
    const uint2 inf = make_uint2(RL_QEC_INF, 0u);
    uint2 b[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) b[i] = i < nd ? rl_qec_tab_s[d[i] * stride + n] : inf;
    /* the pairs x < y: 01 02 03 12 13 23 */
    const uint2 e01 = 1u < nd ? rl_qec_tab_s[d[0] * stride + d[1]] : inf, e02 = 2u < nd ? rl_qec_tab_s[d[0] * stride + d[2]] : inf,
                e03 = 3u < nd ? rl_qec_tab_s[d[0] * stride + d[3]] : inf, e12 = 2u < nd ? rl_qec_tab_s[d[1] * stride + d[2]] : inf,
                e13 = 3u < nd ? rl_qec_tab_s[d[1] * stride + d[3]] : inf, e23 = 3u < nd ? rl_qec_tab_s[d[2] * stride + d[3]] : inf;
    switch (nd) {
    case 0: return make_uint2(0u, 0u);
    case 1: return rl_qec_dp1(b[0]);
    case 2: return rl_qec_pair_dp(b[0], b[1], e01);
    case 3: {
        /* {0,1,2}: 0 to the boundary + {1,2}; 0 with 1 + {2}; 0 with 2 + {1} */
        uint2 r = rl_qec_opt(b[0], rl_qec_pair_dp(b[1], b[2], e12));
        r = rl_qec_first_min(r, rl_qec_opt(e01, rl_qec_dp1(b[2])));
        r = rl_qec_first_min(r, rl_qec_opt(e02, rl_qec_dp1(b[1])));
        return rl_qec_dp1(r);
    }
    default: {
        const uint2 p23 = rl_qec_pair_dp(b[2], b[3], e23), p13 = rl_qec_pair_dp(b[1], b[3], e13), p12 = rl_qec_pair_dp(b[1], b[2], e12);
        /* {1,2,3} (lowest defect 1): 1 to the boundary + {2,3}; 1 with 2 + {3}; 1 with 3 + {2} */
        uint2 t = rl_qec_opt(b[1], p23);
        t = rl_qec_first_min(t, rl_qec_opt(e12, rl_qec_dp1(b[3])));
        t = rl_qec_first_min(t, rl_qec_opt(e13, rl_qec_dp1(b[2])));
        t = rl_qec_dp1(t);
        /* {0,1,2,3}: 0 to the boundary + {1,2,3}; 0 with 1 + {2,3}; with 2 + {1,3}; with 3 + {1,2} */
        uint2 r = rl_qec_opt(b[0], t);
        r = rl_qec_first_min(r, rl_qec_opt(e01, p23));
        r = rl_qec_first_min(r, rl_qec_opt(e02, p13));
        r = rl_qec_first_min(r, rl_qec_opt(e03, p12));
        return rl_qec_dp1(r);
    }
    }
}

/** Lane 0: appends the set bits of `fresh` (word `w`'s new detection events, all above the
 * listed ones) to the hot shot's defect list of `nd` entries: s->defs while the count stays at
 * most K, s->u.g.def beyond (the first K copied there once, as the count passes K). Returns the
 * new count; RL_QEC_NDEF_BAD (not listed) stays so. The count never passes the shot's bits
 * (at most n <= RL_QEC_MAX_DETECTORS, the list's room). */
__device__ __forceinline__ uint32_t rl_qec_list_add(struct rl_qec_smem *sm, uint32_t nd, uint32_t K, uint32_t w, uint32_t fresh) {
    if (nd == RL_QEC_NDEF_BAD || fresh == 0u) return nd;
    const uint32_t to = nd + (uint32_t)__popc(fresh);
    if (to > RL_QEC_MAX_DETECTORS) return RL_QEC_NDEF_BAD;
    if (nd <= K && to > K)
        for (uint32_t i = 0; i < nd; i++) sm->u.g.def[i] = sm->defs[i];
    uint16_t *const list = to > K ? sm->u.g.def : sm->defs;
    for (; fresh != 0; fresh &= fresh - 1u) list[nd++] = (uint16_t)(w * 32u + (uint32_t)__ffs(fresh) - 1u);
    return nd;
}

/** Lane 0, the fast path of the common request: an enqueue_syndromes in sequence (counter 0
 * of a new shot, or the next counter of the shot being assembled) for the mirrored decoder,
 * on a cache whose key matches, which passes every check of the general path
 * (rl_qec_enqueue) and so changes the decoder as it would: bits, in_shot, next_counter,
 * messages, the shot (session.rs append_bits, with `slot.shot.fill(0)` at counter 0). It also
 * keeps the shot's defect list (k->ndef: the new set bits in order, as exact.rs decode_b8
 * lists them; rl_qec_list_add) so that neither a decode nor a settle step extracts it.
 * Straight-line: every load issued together, the cache trusted (its token compared) only
 * before the first global store. Returns the phase (ACK: answered; DECODE), or
 * RL_QEC_PHASE_SLOW for the general path, having changed nothing, or only a cache that then
 * proved stale. */
__device__ __forceinline__ uint32_t rl_qec_fast(const uint8_t *req, int len, uint8_t *resp, int cap, uint8_t *base, struct rl_qec_smem *sm,
                                                unsigned long long token, unsigned long long grid) {
    struct rl_qec_cache *k = &sm->k;
    struct rl_qec_ctl *c = &sm->c;
    if (len < RL_RPC_HEADER_LEN + RL_QEC_ENQUEUE_FIXED) return RL_QEC_PHASE_SLOW;
    union rl_qec_fastblk b;
#pragma unroll
    for (int i = 0; i < 8; i++) b.v[i] = ((const uint4 *)k)[i];
    const uint4 r0 = ((const uint4 *)&k->rec)[0]; /* bits, in_shot, next_counter */
    const uint4 r1 = ((const uint4 *)&k->rec)[1]; /* corrections, messages */
    const uint4 r2 = ((const uint4 *)&k->rec)[2]; /* shots, overflows (a decode in the fast path) */
    const uint4 r3 = ((const uint4 *)&k->rec)[3]; /* unmatchable, dropped_messages */
    const uint4 sp0 = ((const uint4 *)&k->spec)[0]; /* msgs, ok, nd (rl_qec_speculate) */
    const uint4 sp1 = ((const uint4 *)&k->spec)[1]; /* status, obs, weight, ns */
    const uint4 q = ((const uint4 *)req)[0];       /* magic, function, arg_len, request_id */
    const unsigned long long ts = ((const unsigned long long *)req)[2];
    const long long id = rl_qec_i64(req + 24), counter = rl_qec_i64(req + 32), mapping = rl_qec_i64(req + 40),
                    nsyn = rl_qec_i64(req + 48);
    const uint32_t arg_len = q.z, in_shot = r0.y;
    const long long next = (long long)(((unsigned long long)r0.w << 32) | r0.z);
    const bool zero = counter == 0;
    const uint32_t at = zero ? 0u : r0.x; /* a new shot starts at bit 0 */
    const long long rounds = (long long)b.f.rounds;
    /* Every check evaluated (`&`, not `&&`: no branch per check, the compares overlap);
     * a wrapping difference only where the check beside it already fails. */
    const bool key = (q.y == RL_QEC_FN_ENQUEUE) & (b.f.state == (unsigned long long)base) & (b.f.grid == grid) & (b.f.token != 0) & (b.f.ok != 0);
    const bool sizes = (arg_len >= RL_QEC_ENQUEUE_FIXED) & ((uint64_t)arg_len + RL_RPC_HEADER_LEN <= (uint64_t)len) & ((long long)cap >= (long long)b.f.need);
    const bool decoder = (id == b.f.hot) & (id >= 0) & (id < (long long)b.f.decoders) & (!b.f.has_mapping | (mapping == b.f.mapping_id));
    const bool bits = (nsyn >= 0) & ((uint64_t)nsyn <= (uint64_t)(b.f.n - at)) & (((uint64_t)nsyn + 7u) / 8u <= (uint64_t)(arg_len - RL_QEC_ENQUEUE_FIXED));
    const bool order = (zero ? in_shot == 0 : ((in_shot != 0) & (counter == next))) & (counter <= 0x7fffffffffffffffLL - rounds);
    if (!(key & sizes & decoder & bits & order)) return RL_QEC_PHASE_SLOW;
    RL_QEC_MARK(6);
    uint32_t *const gshot = k->hot_shot;
    uint4 *const grec = (uint4 *)k->hot_rec;
    const uint32_t nb = (uint32_t)nsyn, end = at + nb;
    /* bounded by the mirror's size and the list's whatever the cache holds */
    const uint32_t W = b.f.words < RL_QEC_MAX_WORDS ? b.f.words : RL_QEC_MAX_WORDS;
    const uint32_t K = b.f.K < RL_QEC_MAX_K ? b.f.K : RL_QEC_MAX_K;
    uint32_t nd = zero ? 0u : b.f.ndef;
    if (nd > RL_QEC_MAX_DETECTORS) nd = RL_QEC_NDEF_BAD;
    const uint8_t *src = req + RL_RPC_HEADER_LEN + RL_QEC_ENQUEUE_FIXED;
    uint32_t w0, w1, nv0 = 0, nv1 = 0;
    bool from_regs = false;
    if (nb <= 32u) {
        /* The message as one word: its ceil(nb / 8) bytes, bits past nb cleared. */
        uint32_t msg = 0;
        const uint32_t nbytes = (nb + 7u) >> 3;
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            if (i < nbytes) msg |= (uint32_t)src[i] << (8u * i);
        if (nb < 32u) msg &= (1u << nb) - 1u;
        const uint32_t w = at >> 5;
        const unsigned long long v = (unsigned long long)msg << (at & 31u);
        if (zero) {
            for (uint32_t i = 1; i < W; i++) k->shot[i] = 0;
            if (W > 0) k->shot[0] = msg; /* at 0 */
            w0 = 0;
            w1 = W;
        } else {
            /* the (at most two) words changed, kept for the write-through */
            w0 = w < W ? w : W;
            w1 = w + 2u < W ? w + 2u : W;
            if (w0 < w1) k->shot[w0] = nv0 = k->shot[w0] | (uint32_t)v;
            if (w0 + 1u < w1) k->shot[w0 + 1u] = nv1 = k->shot[w0 + 1u] | (uint32_t)(v >> 32);
            from_regs = true;
        }
        /* the message's events in the (at most two) words it touches, the lower first */
        nd = rl_qec_list_add(sm, nd, K, w, (uint32_t)v);
        nd = rl_qec_list_add(sm, nd, K, w + 1u, (uint32_t)(v >> 32));
    } else if (((unsigned long long)src & 3ull) == 0) {
        /* A longer message, a 32-bit word of it at a time (one aligned load each: requests are
         * staged in 16-byte aligned buffers of whole 16-byte words, so a word that holds one
         * of the message's bytes lies in the buffer; the last one masked to the message's
         * bits), shifted to the shot's bit `at`: shot word w0 + i takes its word i's low bits
         * and word i - 1's high ones. In the shot being assembled, its bits at or above `at`
         * are zero until now, so each word's new bits are the message's; a new shot (counter
         * 0, at 0) writes every word of the shot, zero past the message. */
        const uint32_t s = at & 31u, nw = (nb + 31u) >> 5;
        w0 = zero ? 0u : (at >> 5 < W ? at >> 5 : W);
        w1 = zero ? W : (((end - 1u) >> 5) + 1u < W ? ((end - 1u) >> 5) + 1u : W);
        const uint32_t *const m = (const uint32_t *)src;
        uint32_t prev = 0;
        for (uint32_t i = 0; w0 + i < w1; i++) {
            uint32_t cur = i < nw ? m[i] : 0u;
            if (i + 1u == nw && (nb & 31u) != 0) cur &= (1u << (nb & 31u)) - 1u;
            const uint32_t v = s == 0 ? cur : (cur << s) | (prev >> (32u - s));
            prev = cur;
            if (zero) {
                k->shot[w0 + i] = v;
                nd = rl_qec_list_add(sm, nd, K, w0 + i, v);
                continue;
            }
            if (v == 0) continue;
            const uint32_t w = w0 + i, old = k->shot[w];
            k->shot[w] = old | v;
            nd = rl_qec_list_add(sm, nd, K, w, v & ~old);
        }
    } else {
        /* (A source not 4-aligned: never from the transceiver's or the batch's buffers.)
         * Longer messages word by word; the new bits of each word are its set bits at or
         * above `at` (those below were there, those above are zero until now). */
        w0 = zero ? 0u : (at >> 5 < W ? at >> 5 : W);
        w1 = zero ? W : (((end - 1u) >> 5) + 1u < W ? ((end - 1u) >> 5) + 1u : W);
        for (uint32_t w = w0; w < w1; w++) {
            const uint32_t old = zero ? 0u : k->shot[w];
            const uint32_t v = rl_qec_src32(src, nb, (int)(w * 32u) - (int)at) | old;
            k->shot[w] = v;
            nd = rl_qec_list_add(sm, nd, K, w, v & ~old);
        }
    }
    k->ndef = nd;
    RL_QEC_AMARK(2);
    /* The record: bits, in_shot, next_counter (counter + rounds), messages + 1. */
    const unsigned long long nc = (unsigned long long)(counter + rounds);
    const unsigned long long msgs = (((unsigned long long)r1.w << 32) | r1.z) + 1ull;
    const uint4 n0 = make_uint4(end, 1u, (uint32_t)nc, (uint32_t)(nc >> 32));
    const uint4 n1 = make_uint4(r1.x, r1.y, (uint32_t)msgs, (uint32_t)(msgs >> 32));
    ((uint4 *)&k->rec)[0] = n0;
    ((uint4 *)&k->rec)[1] = n1;
    RL_QEC_AMARK(3);
    uint32_t phase = end < b.f.n ? RL_QEC_PHASE_ACK : RL_QEC_PHASE_DECODE;
    k->spec_want = (phase == RL_QEC_PHASE_ACK) & (b.f.n - end <= nb);
    uint4 f0 = n0, f1 = n1, f2 = r2, f3 = r3;
    bool decoded = false, streamed = false;
    const unsigned long long msgs0 = ((unsigned long long)r1.w << 32) | r1.z;
    const bool spec = (sp0.z != 0) & (sp0.w == nd) & ((((unsigned long long)sp0.y << 32) | sp0.x) == msgs0);
    if (phase == RL_QEC_PHASE_ACK) {
        rl_qec_header_from(resp, q, ts, RL_QEC_OK, 0u);
        c->ret = RL_RPC_HEADER_LEN;
        RL_QEC_AMARK(4);
    } else if (spec | ((nd <= RL_QEC_LANE_K) & (nd <= K) & (b.f.tab == RL_QEC_TAB_SHARED))) {
        /* A decode made ahead (rl_qec_speculate between messages, or the last settle step's
         * sum, rl_qec_clusters: made at the `messages` count this message found, with as
         * many defects, so this message added none) is the answer's: the same defects, the
         * same matching. Otherwise a few defects (the DP's shots, listed in s->defs): decoded
         * here (rl_qec_lane_dp). Either is answered as rl_qec_finish would, the record
         * changed once (append and decode together) and written through once. */
        uint32_t status, obs;
        unsigned long long ns, cost = 0;
        if (spec) {
            status = sp1.x;
            obs = sp1.y;
            ns = sp1.w;
        } else {
            const unsigned long long t0 = rl_qec_clock();
            const uint2 dp = rl_qec_lane_dp(sm->defs, nd, b.f.n);
            const unsigned long long t1 = rl_qec_clock();
            ns = t1 - t0;
            status = dp.x == RL_QEC_INF ? RL_QEC_REPORT_UNMATCHABLE : RL_QEC_REPORT_OK;
            obs = dp.y;
            cost = dp.x;
        }
        const bool infinite = status != RL_QEC_REPORT_OK;
        rl_qec_record_decoded(f0, f1, f2, f3, obs, status);
        ((uint4 *)&k->rec)[0] = f0;
        ((uint4 *)&k->rec)[1] = f1;
        ((uint4 *)&k->rec)[2] = f2;
        ((uint4 *)&k->rec)[3] = f3;
        /* (the division after the record's stores, as it was before there was a speculation) */
        const float weight = spec ? __int_as_float((int)sp1.z) : rl_qec_weight(infinite, cost, b.f.scale);
        const uint32_t rlen = rl_qec_decoded_body(resp + RL_RPC_HEADER_LEN, b.f.num_obs, weight, status, obs, nd, ns, r2.x);
        rl_qec_header_from(resp, q, ts, RL_QEC_OK, rlen);
        c->ret = RL_RPC_HEADER_LEN + (int)rlen;
        phase = RL_QEC_PHASE_DONE;
        decoded = true;
        streamed = nd > K; /* the settled clusters' shot ends (rl_qec_clusters' final call) */
    }
    c->phase = phase;
    if (token != b.f.token) return RL_QEC_PHASE_SLOW; /* a stale copy: the general path refills it */
    RL_QEC_AMARK(5);
    /* Write-through (a shot decoded by the warp: its record again in rl_qec_finish). */
    grec[0] = f0;
    grec[1] = f1;
    if (decoded) {
        grec[2] = f2;
        grec[3] = f3;
    }
    if (streamed) k->strm.dec = -1;
    if (from_regs) {
        if (w0 < w1) gshot[w0] = nv0;
        if (w0 + 1u < w1) gshot[w0 + 1u] = nv1;
    } else {
        for (uint32_t w = w0; w < w1; w++) gshot[w] = k->shot[w];
    }
    return phase;
}

/** Lane 0, between messages (rl_stage_qec_idle): after a message that may be the shot's last
 * but one (k->spec_want: it left no more bits than it carried; once), decodes the hot shot's
 * defects so far into k->spec, when a shot is being assembled, its defects are listed in
 * s->defs (at most RL_QEC_LANE_K, and at most K: a DP's shot) and the table is in shared
 * memory, unless that decode was made at this `messages` count already. The shot's last
 * message then takes it as its own when it adds no defect (rl_qec_fast). Trusts the cache
 * only under this launch's key and the blob's token, as a request does; writes k->spec and
 * k->spec_want only. (A shot of more than K defects gets its k->spec from its last settle
 * step: rl_qec_clusters.) */
__device__ __noinline__ void rl_qec_speculate(struct rl_qec_smem *sm, uint8_t *base) {
    struct rl_qec_cache *k = &sm->k;
    if (k->spec_want == 0 || base == 0) return; /* (an untrusted copy: the key is checked next) */
    k->spec_want = 0;
    const unsigned long long token = rl_qec_load_token(base);
    if (k->state != (unsigned long long)base || k->grid != rl_qec_gridid() || k->token == 0 || k->ok == 0) return;
    if (k->token != token) return;
    const uint32_t nd = k->ndef;
    if (k->tab != RL_QEC_TAB_SHARED || k->hot < 0 || k->rec.in_shot == 0 || nd > RL_QEC_LANE_K || nd > k->K) return;
    const unsigned long long msgs = k->rec.counters.messages;
    if (k->spec.ok != 0 && k->spec.msgs == msgs && k->spec.nd == nd) return;
    const unsigned long long t0 = rl_qec_clock();
    const uint2 dp = rl_qec_lane_dp(sm->defs, nd, k->n);
    const unsigned long long t1 = rl_qec_clock();
    k->spec.msgs = msgs;
    k->spec.nd = nd;
    k->spec.status = dp.x == RL_QEC_INF ? RL_QEC_REPORT_UNMATCHABLE : RL_QEC_REPORT_OK;
    k->spec.obs = dp.y;
    k->spec.weight = (uint32_t)__float_as_int(rl_qec_weight(dp.x == RL_QEC_INF, dp.x, k->scale));
    k->spec.ns = t1 - t0 < 0xFFFFFFFFull ? (uint32_t)(t1 - t0) : 0xFFFFFFFFu;
    k->spec.ok = 1;
}

/** Lane 0: the request up to the decode; its changes written through to the blob. Returns
 * c->phase; k->ndef tells whether (and where) the shot's defects are listed. */
__device__ __forceinline__ uint32_t rl_qec_lane0(const uint8_t *req, int len, uint8_t *resp, int cap, uint8_t *base, struct rl_qec_smem *sm) {
    struct rl_qec_ctl *c = &sm->c;
    c->mode = RL_QEC_MODE_DONE;
    c->ret = -1;
    if (base == 0) {
        c->phase = RL_QEC_PHASE_DONE;
        return RL_QEC_PHASE_DONE;
    }
    const unsigned long long token = rl_qec_load_token(base); /* in flight while the request runs */
    const unsigned long long grid = rl_qec_gridid();
    const uint32_t phase = rl_qec_fast(req, len, resp, cap, base, sm, token, grid);
    if (phase != RL_QEC_PHASE_SLOW) return phase;
    return rl_qec_slow(req, len, resp, cap, base, sm, token, grid);
}

/* ---------------------------------------------------------------------------------------
 * Decoder: exact.rs decode_b8 -> exact() or clusters()
 * ------------------------------------------------------------------------------------- */

/** Where dp[mask] lives in s->u.dp.wo: the mask with its low four bits XORed with the next two
 * nibbles (a bijection on 12 bits). The masks of one layer share their low bits and differ
 * above them, so unswizzled their 8-byte entries fell into the same banks (an 8-way conflict
 * per load at 8 defects); folded, they spread over all 16 bank pairs. */
__device__ __forceinline__ uint32_t rl_qec_sw(uint32_t m) { return m ^ ((m >> 4) & 15u) ^ ((m >> 8) & 15u); }

/** exact.rs solve() for `mask` (lowest defect a; every sub-mask solved): the boundary option,
 * then the partners j > a by increasing index, the first of the smallest finite cost chosen
 * (exact.rs: replaced only when strictly smaller; infinite options never chosen). All J
 * options are loaded together (those not in the mask made infinite) and a tree of pairwise
 * minima that keeps the left, earlier option on ties picks the one the CPU's sequential scan
 * picks. A finite entry plus an infinite one wraps (the builder proves that finite sums stay
 * below RL_QEC_INF), which `sum >= e` catches; an infinite dp[mask] has observables 0. */
template <uint32_t J>
__device__ __forceinline__ void rl_qec_solve(struct rl_qec_smem *s, uint32_t mask, uint32_t a) {
    uint2 *const wo = s->u.dp.wo;
    const uint2 *const row = s->sub + a * RL_QEC_MAX_K;
    const uint32_t rest = mask & ~(1u << a) & ((1u << J) - 1u);
    const uint32_t srest = rl_qec_sw(rest); /* rl_qec_sw is XOR-linear: sw(rest ^ b) = srest ^ sw(b) */
    uint32_t c[J], o[J];
#pragma unroll
    for (uint32_t j = 0; j < J; j++) {
        /* option 0: a to the boundary; option j >= 1: a with partner j (j > a when in rest) */
        const uint2 e = row[j == 0 ? a : j];
        const uint2 v = wo[j == 0 ? srest : (srest ^ rl_qec_sw(1u << j))];
        const uint32_t sum = e.x + v.x;
        const bool live = (j == 0 || ((rest >> j) & 1u) != 0) && sum >= e.x;
        c[j] = live ? sum : RL_QEC_INF;
        o[j] = e.y ^ v.y;
    }
#pragma unroll
    for (uint32_t st = 1; st < J; st <<= 1) {
#pragma unroll
        for (uint32_t i = 0; i + st < J; i += 2u * st) {
            const bool right = c[i + st] < c[i];
            c[i] = right ? c[i + st] : c[i];
            o[i] = right ? o[i + st] : o[i];
        }
    }
    wo[rl_qec_sw(mask & ((1u << J) - 1u))] = make_uint2(c[0], c[0] == RL_QEC_INF ? 0u : o[0]);
}

/** The DP over k <= J defects gathered in s->sub (and dp of every mask of at most two defects
 * set by the gather), by the T threads `t` of warp 0
 * (`block` false: __syncwarp between layers) or of the block (__syncthreads): dp[full] in
 * s->u.dp.wo afterwards, visible to them. The layers are a loop, not unrolled: the same
 * instructions every layer stay in the instruction cache (unrolled, each layer's were fetched
 * anew, and the decode took twice as long). */
template <uint32_t J>
__device__ __forceinline__ void rl_qec_dp(struct rl_qec_smem *s, uint32_t k, uint32_t t, uint32_t T, bool block) {
    k = k < J ? k : J;
    if (k < 3u) return; /* the gather solved every mask */
    const uint16_t *const off = s->k.sched.off[k];
    const uint16_t *const ms = s->k.sched.m;
    /* layers 0 and 1 (a = k - 1, k - 2) are empty; each layer's first mask is loaded during
     * the one before */
    uint32_t x = off[2] + t, end = off[3] < RL_QEC_SCHED_CAP ? off[3] : RL_QEC_SCHED_CAP;
    uint32_t m = x < end ? ms[x] : 0u;
#pragma unroll 1
    for (uint32_t i = 2; i < k; i++) {
        const uint32_t a = k - 1u - i;
        const uint32_t nx = end + t, nend = i + 1u < k ? (off[i + 2u] < RL_QEC_SCHED_CAP ? off[i + 2u] : RL_QEC_SCHED_CAP) : 0u;
        const uint32_t nm = nx < nend ? ms[nx] : 0u;
        if (x < end) {
            rl_qec_solve<J>(s, m, a);
            for (x += T; x < end; x += T) rl_qec_solve<J>(s, ms[x], a);
        }
        x = nx;
        end = nend;
        m = nm;
        if (block)
            __syncthreads();
        else
            __syncwarp();
    }
}

/** Warp 0: the defects of the mirrored shot in increasing order (exact.rs decode_b8), into
 * s->defs when k <= K (the DP's list) or s->u.g.def (the clusters', k <= n <= its capacity):
 * each lane a contiguous run of words, a warp scan for its first slot. Returns k. */
__device__ __forceinline__ uint32_t rl_qec_defects(struct rl_qec_smem *s, uint32_t lane) {
    const struct rl_qec_cache *k = &s->k;
    const uint32_t W = k->words, n = k->n;
    const uint32_t per = (W + 31u) >> 5;
    const uint32_t w0 = lane * per < W ? lane * per : W, w1 = w0 + per < W ? w0 + per : W;
    uint32_t count = 0;
    for (uint32_t w = w0; w < w1; w++) count += (uint32_t)__popc(rl_qec_word(k->shot, w, W, n));
    uint32_t x = count;
#pragma unroll
    for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    const uint32_t total = __shfl_sync(0xffffffffu, x, 31);
    uint32_t at = x - count;
    uint16_t *list = total <= k->K ? s->defs : s->u.g.def;
    for (uint32_t w = w0; w < w1; w++) {
        uint32_t v = rl_qec_word(k->shot, w, W, n);
        while (v != 0) {
            list[at++] = (uint16_t)(w * 32u + (uint32_t)__ffs(v) - 1u);
            v &= v - 1u;
        }
    }
    return total;
}

/** An 8-byte shared-memory load the compiler keeps where it is, unconditional. */
__device__ __forceinline__ uint2 rl_qec_lds2(const uint2 *p) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"((uint32_t)__cvta_generic_to_shared(p)));
    return v;
}

/** One gather item of the shared-table path: x == y, {x} to the boundary (sub[x][x] = bx,
 * dp[{x}]); else the pair {x, y} (sub[x][y] = e, dp[{x, y}]). The diagonal is the pair rule
 * with `by` infinite and `e` = bx (pair_dp then gives dp1(bx)), so both are one computation
 * with selects, no branch. */
__device__ __forceinline__ void rl_qec_gather_item(struct rl_qec_smem *s, uint32_t ix, uint32_t iy, uint2 bx, uint2 by, uint2 e) {
    const bool diag = ix == iy;
    const uint2 ee = diag ? bx : e;
    const uint2 yy = diag ? make_uint2(RL_QEC_INF, 0u) : by;
    s->sub[ix * RL_QEC_MAX_K + iy] = ee;
    s->u.dp.wo[rl_qec_sw((1u << ix) | (1u << iy))] = rl_qec_pair_dp(bx, yy, ee);
}

/** Warp 0, kd <= J defects listed in s->defs (visible to the warp): exact.rs gather(), and the
 * DP of every mask of one or two defects, which needs nothing but table entries. From the
 * shared copy of the table: a row or one item (x <= y) per lane, below. From global memory: lane x
 * loads row x of the sub-table, the boundary and the partners y > x, all in flight (one round
 * of global loads; each entry once); then,
 * from the sub-table in shared memory, solves {x} and each {x, y}: the boundary option (both
 * to the boundary) first, the pair only when strictly cheaper, as rl_qec_solve. dp[0] too.
 * Ends with a __syncwarp: the DP's first layer reads these. */
template <uint32_t J>
__device__ __forceinline__ void rl_qec_gather(struct rl_qec_smem *s, uint32_t kd, uint32_t lane) {
    const struct rl_qec_cache *kc = &s->k;
    const uint32_t n = kc->n;
    const uint64_t stride = (uint64_t)n + 1u;
    /* every defect in every lane: 16-byte broadcast loads of the list */
    uint32_t d[J];
#pragma unroll
    for (uint32_t q = 0; q < (J + 7u) / 8u; q++) {
        const uint4 v = ((const uint4 *)s->defs)[q];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (uint32_t h = 0; h < 8u; h++)
            if (q * 8u + h < J) d[q * 8u + h] = (w[h >> 1] >> (16u * (h & 1u))) & 0xFFFFu;
    }
    uint2 *const wo = s->u.dp.wo;
    const uint32_t x = lane;
    if (lane == 0) wo[rl_qec_sw(0u)] = make_uint2(0u, 0u);
    if (kc->tab == RL_QEC_TAB_SHARED && J <= 4) {
        /* Up to 4 defects a row per lane: lane x reads the boundary entries of every y > x
         * too and solves {x} and {x, y} in the same pass (the item list below costs one more
         * dependent load; decisions.md: the QEC gather). */
        if (x < kd) {
            const uint2 *const Tr = rl_qec_tab_s + (uint64_t)s->defs[x] * stride;
            const uint2 b = Tr[n];
            uint2 e[J], by[J];
#pragma unroll
            for (uint32_t y = 0; y < J; y++) {
                e[y] = make_uint2(RL_QEC_INF, 0u);
                by[y] = make_uint2(RL_QEC_INF, 0u);
                if (y > x && y < kd) {
                    e[y] = Tr[d[y]];
                    by[y] = rl_qec_tab_s[(uint64_t)d[y] * stride + n];
                }
            }
            s->sub[x * (RL_QEC_MAX_K + 1u)] = b;
            wo[rl_qec_sw(1u << x)] = make_uint2(b.x, b.x == RL_QEC_INF ? 0u : b.y);
#pragma unroll
            for (uint32_t y = 0; y < J; y++) {
                if (y > x && y < kd) {
                    s->sub[x * RL_QEC_MAX_K + y] = e[y];
                    wo[rl_qec_sw((1u << x) | (1u << y))] = rl_qec_pair_dp(b, by[y], e[y]);
                }
            }
        }
        __syncwarp();
        return;
    }
    if (kc->tab == RL_QEC_TAB_SHARED) {
        /* More defects: one item (x <= y) per lane (the schedule's pair list: 36 at 8), two
         * rounds' items in flight together, each item's loads in three dependent steps (its
         * pair, both defects, its three entries) and no branch: {x} to the boundary (x == y:
         * the sub-table's [x][x] and dp[{x}]), or the pair {x, y} solved at once. Spread over
         * the warp, the gather's serial path is one item's, not a row's (decisions.md: the
         * QEC gather). */
        const uint32_t items = kd * (kd + 1u) / 2u;
        for (uint32_t e0 = lane; e0 < items; e0 += 64u) {
            const uint32_t e1 = e0 + 32u;
            const bool two = e1 < items;
            const uint32_t xy0 = kc->sched.pair[e0], xy1 = kc->sched.pair[two ? e1 : e0];
            const uint32_t ix0 = xy0 & 0xFFu, iy0 = xy0 >> 8, ix1 = xy1 & 0xFFu, iy1 = xy1 >> 8;
            const uint32_t dx0 = s->defs[ix0], dy0 = s->defs[iy0], dx1 = s->defs[ix1], dy1 = s->defs[iy1];
            /* asm volatile: all six loads issued here, unconditionally (the compiler otherwise
             * turns the selects of rl_qec_gather_item into a divergent branch that loads `by`
             * and `e` only off the diagonal, one dependent step later) */
            const uint2 bx0 = rl_qec_lds2(rl_qec_tab_s + dx0 * stride + n), by0 = rl_qec_lds2(rl_qec_tab_s + dy0 * stride + n),
                        ex0 = rl_qec_lds2(rl_qec_tab_s + dx0 * stride + dy0);
            const uint2 bx1 = rl_qec_lds2(rl_qec_tab_s + dx1 * stride + n), by1 = rl_qec_lds2(rl_qec_tab_s + dy1 * stride + n),
                        ex1 = rl_qec_lds2(rl_qec_tab_s + dx1 * stride + dy1);
            rl_qec_gather_item(s, ix0, iy0, bx0, by0, ex0);
            if (two) rl_qec_gather_item(s, ix1, iy1, bx1, by1, ex1);
        }
        __syncwarp();
        return;
    }
    /* From global memory: one round of loads, each entry once; the pairs in a second pass
     * over the sub-table. */
    uint2 b = make_uint2(RL_QEC_INF, 0u);
    if (x < kd) {
        const uint64_t at = (uint64_t)s->defs[x] * stride;
        const uint32_t *const Dr = kc->dist + at, *const Pr = kc->par + at;
        b = make_uint2(__ldg(Dr + n), __ldg(Pr + n));
        uint32_t dv[J], pv[J];
#pragma unroll
        for (uint32_t y = 0; y < J; y++) {
            dv[y] = RL_QEC_INF;
            pv[y] = 0;
            if (y > x && y < kd) {
                dv[y] = __ldg(Dr + d[y]);
                pv[y] = __ldg(Pr + d[y]);
            }
        }
        s->sub[x * (RL_QEC_MAX_K + 1u)] = b;
        wo[rl_qec_sw(1u << x)] = make_uint2(b.x, b.x == RL_QEC_INF ? 0u : b.y);
#pragma unroll
        for (uint32_t y = 0; y < J; y++)
            if (y > x && y < kd) s->sub[x * RL_QEC_MAX_K + y] = make_uint2(dv[y], pv[y]);
    }
    __syncwarp();
    if (x < kd) {
        const uint2 *const row = s->sub + x * RL_QEC_MAX_K;
#pragma unroll
        for (uint32_t y = 0; y < J; y++)
            if (y > x && y < kd) wo[rl_qec_sw((1u << x) | (1u << y))] = rl_qec_pair_dp(b, s->sub[y * (RL_QEC_MAX_K + 1u)], row[y]);
    }
    __syncwarp();
}

/** Thread 0, after the decode: session.rs enqueue() from the decode on: the decoder's state
 * (written through), then the final answer (corrections, then the 16-byte decode report).
 * The matching is the DP's (mode EXACT) or the clusters' (CLUSTERS). */
__device__ __forceinline__ void rl_qec_finish(const uint8_t *req, uint8_t *resp, struct rl_qec_smem *sm, uint32_t mode) {
    const unsigned long long t1 = rl_qec_clock();
    struct rl_qec_ctl *c = &sm->c;
    struct rl_qec_cache *k = &sm->k;
    const uint32_t kd = c->k;
    uint32_t status, obs, infinite;
    unsigned long long cost;
    if (mode == RL_QEC_MODE_EXACT) {
        const uint2 wo = sm->u.dp.wo[rl_qec_sw((1u << kd) - 1u)];
        infinite = wo.x == RL_QEC_INF;
        status = infinite ? RL_QEC_REPORT_UNMATCHABLE : RL_QEC_REPORT_OK;
        cost = infinite ? 0ull : wo.x;
        obs = infinite ? 0u : wo.y;
    } else {
        status = sm->r.status;
        obs = sm->r.obs;
        infinite = sm->r.infinite;
        cost = sm->r.cost;
    }
    /* the record, written through */
    uint4 *const m = (uint4 *)&k->rec;
    uint4 r0 = m[0], r1 = m[1], r2 = m[2], r3 = m[3];
    const uint32_t shot_index = r2.x;
    rl_qec_record_decoded(r0, r1, r2, r3, obs, status);
    m[0] = r0;
    m[1] = r1;
    m[2] = r2;
    m[3] = r3;
    RL_QEC_MARK(7);
    uint4 *const g = (uint4 *)k->hot_rec;
    g[0] = r0;
    g[1] = r1;
    g[2] = r2;
    g[3] = r3;
    const uint32_t rlen =
        rl_qec_decoded_body(resp + RL_RPC_HEADER_LEN, k->num_obs, rl_qec_weight(infinite, cost, k->scale), status, obs, kd, t1 - c->t0, shot_index);
    rl_qec_header_out(resp, req, RL_QEC_OK, rlen);
    c->ret = RL_RPC_HEADER_LEN + (int)rlen;
}

/** Warp 0, once per fill (k->tab WANTED): the blob's distance and parity tables into
 * rl_qec_tab_s as (distance, parity) pairs, 8 loads per lane in flight (the first decode's
 * cost); then k->tab SHARED. Out of line: it runs once. */
__device__ __noinline__ void rl_qec_tab_load(struct rl_qec_smem *s, uint32_t lane) {
    const struct rl_qec_cache *kc = &s->k;
    const uint32_t N = (kc->n + 1u) * (kc->n + 1u); /* the fill checked it fits */
    const uint32_t *const D = kc->dist, *const P = kc->par;
    for (uint32_t e0 = lane; e0 < N; e0 += 32u * 8u) {
        uint32_t dv[8], pv[8];
#pragma unroll
        for (uint32_t j = 0; j < 8u; j++) {
            const uint32_t e = e0 + 32u * j;
            dv[j] = e < N ? __ldg(D + e) : 0u;
            pv[j] = e < N ? __ldg(P + e) : 0u;
        }
#pragma unroll
        for (uint32_t j = 0; j < 8u; j++)
            if (e0 + 32u * j < N) rl_qec_tab_s[e0 + 32u * j] = make_uint2(dv[j], pv[j]);
    }
    __syncwarp();
    if (lane == 0) s->k.tab = RL_QEC_TAB_SHARED;
    __syncwarp();
}

/** Warp 0, a shot to decode (lane 0's work visible to the warp): the defects (listed by the
 * fast path when nd <= K, else extracted here), and for k <= RL_QEC_WARP_K the whole exact
 * decode and the answer; else c->mode hands the DP layers (or the clusters) to the
 * block. The gather and the DP are instantiated for 4, 8 and 12 defects (J: the options each
 * mask evaluates and the layers unrolled). */
__device__ __forceinline__ void rl_qec_warp_decode(const uint8_t *req, uint8_t *resp, struct rl_qec_smem *s, uint32_t lane, uint32_t nd) {
    if (lane == 0) s->c.t0 = rl_qec_clock(); /* lane 0's is the one reported */
    const uint32_t K = s->k.K, tab = s->k.tab; /* loaded together, not one after the other */
    uint32_t kd = nd;
    if (nd == RL_QEC_NDEF_BAD) { /* not listed */
        kd = rl_qec_defects(s, lane);
        __syncwarp();
    }
    RL_QEC_MARK(2);
    if (tab == RL_QEC_TAB_WANTED) rl_qec_tab_load(s, lane);
    if (kd > K) {
        if (lane == 0) {
            s->c.k = kd;
            s->c.mode = RL_QEC_MODE_CLUSTERS;
        }
        return;
    }
    if (kd > RL_QEC_WARP_K) {
        rl_qec_gather<RL_QEC_MAX_K>(s, kd, lane);
        if (lane == 0) {
            s->c.k = kd;
            s->c.mode = RL_QEC_MODE_EXACT;
        }
        RL_QEC_MARK(3);
        return; /* the block barrier publishes the sub-table */
    }
    if (kd <= 4) {
        rl_qec_gather<4>(s, kd, lane);
        RL_QEC_MARK(3);
        rl_qec_dp<4>(s, kd, lane, 32u, false);
    } else if (kd <= 8) {
        rl_qec_gather<8>(s, kd, lane);
        RL_QEC_MARK(3);
        rl_qec_dp<8>(s, kd, lane, 32u, false);
    } else {
        rl_qec_gather<RL_QEC_MAX_K>(s, kd, lane);
        RL_QEC_MARK(3);
        rl_qec_dp<RL_QEC_MAX_K>(s, kd, lane, 32u, false);
    }
    RL_QEC_MARK(4);
    if (lane == 0) {
        s->c.k = kd;
        rl_qec_finish(req, resp, s, RL_QEC_MODE_EXACT);
    }
    RL_QEC_MARK(5);
}
/* ---------------------------------------------------------------------------------------
 * The block's part (all threads; more than RL_QEC_WARP_K defects, or above K): off the fast
 * path, out of line.
 * ------------------------------------------------------------------------------------- */

/** Table entry `at` (row * (n + 1) + column): distance and parity, from the shared copy
 * when `sh` (k->tab SHARED), else from the blob. The clusters' table reads go where the
 * table is. */
__device__ __forceinline__ uint32_t rl_qec_dist(bool sh, const uint32_t *D, uint64_t at) { return sh ? rl_qec_tab_s[at].x : __ldg(D + at); }
__device__ __forceinline__ uint32_t rl_qec_par(bool sh, const uint32_t *P, uint64_t at) { return sh ? rl_qec_tab_s[at].y : __ldg(P + at); }

/** exact.rs linked(): whether an optimal matching may pair x and y (distance e, boundary
 * distances bx, by): e finite and below bx + by, or either without a boundary path. */
__device__ __forceinline__ bool rl_qec_linked(uint32_t e, uint32_t bx, uint32_t by) {
    return e != RL_QEC_INF && (bx == RL_QEC_INF || by == RL_QEC_INF || (unsigned long long)e < (unsigned long long)bx + by);
}

/** Defects the work space in shared memory caches the pairs' distances of: a triangle of
 * rows, row x holding x's distances to the defects below it (exact.rs's `near`, read from
 * the table once when x joins, not at every pass of a settle step). 128: 32 KiB. */
#define RL_QEC_PD_CAP 128u
__host__ __device__ __forceinline__ uint32_t rl_qec_pd_at(uint32_t hi, uint32_t lo) { return hi * (hi - 1u) / 2u + lo; }
__host__ __device__ __forceinline__ unsigned long long rl_qec_pd_bytes(void) {
    return ((unsigned long long)rl_qec_pd_at(RL_QEC_PD_CAP, 0) * 4ull + 15ull) & ~15ull;
}

/** The row of triangle entry q: the x with rl_qec_pd_at(x, 0) <= q < rl_qec_pd_at(x + 1, 0). */
__device__ __forceinline__ uint32_t rl_qec_tri_row(uint32_t q) {
    uint32_t x = (uint32_t)((1.0f + sqrtf(1.0f + 8.0f * (float)q)) * 0.5f);
    while (x > 1u && rl_qec_pd_at(x, 0) > q) x--;
    while (rl_qec_pd_at(x + 1u, 0) <= q) x++;
    return x;
}

/** The distance of defects x != y (the table's entry of the lower detector's row and the
 * higher's column): from the work space's cache when both are below its rows, else the
 * table. */
__device__ __forceinline__ uint32_t rl_qec_pair(const struct rl_qec_scr &w, bool sh, const uint32_t *D, uint64_t stride, uint32_t x,
                                                uint32_t y) {
    const uint32_t lo = x < y ? x : y, hi = x < y ? y : x;
    if (hi < w.pdn) return w.pd[rl_qec_pd_at(hi, lo)];
    return rl_qec_dist(sh, D, (uint64_t)w.def[lo] * stride + w.def[hi]);
}

__device__ __forceinline__ uint32_t rl_qec_uf_find(volatile uint32_t *uf, uint32_t x) {
    uint32_t p = uf[x];
    while (p != x) {
        x = p;
        p = uf[x];
    }
    return x;
}

/** Joins the clusters of a and b: the higher root points at the lower, so a cluster's root
 * is its lowest index whatever order the links come in. */
__device__ __forceinline__ void rl_qec_uf_union(uint32_t *uf, uint32_t a, uint32_t b) {
    for (;;) {
        a = rl_qec_uf_find(uf, a);
        b = rl_qec_uf_find(uf, b);
        if (a == b) return;
        if (a < b) {
            const uint32_t t = a;
            a = b;
            b = t;
        }
        if (atomicCAS(uf + a, a, b) == a) return;
    }
}

/** The doubled dual of a defect whose cluster has no perfect matching (exact.rs BIG). */
#define RL_QEC_BIG (1ll << 60)
/** rl_qec_scr.at: a cluster solved already (or in closed form this round), one whose
 * matcher did not fit beside the others (solved alone after them), one waiting for its
 * place. */
#define RL_QEC_AT_DONE 0xFFFFFFFFu
#define RL_QEC_AT_ALONE 0xFFFFFFFEu
#define RL_QEC_AT_WAIT 0xFFFFFFFDu
/** rl_qec_scr.stat: a cluster's outcome (exact.rs DecodeStatus). */
#define RL_QEC_ST_OK 0u
#define RL_QEC_ST_UNMATCHABLE 1u

/** exact.rs SMALL_MATCHINGS: partner lists (a defect's own index: the boundary), of three
 * defects (the first 4) and of four (the last 10), in the order the first of equal weight is
 * kept. */
__device__ const uint8_t rl_qec_small_m[14][4] = {
    {0, 1, 2, 3}, {1, 0, 2, 3}, {2, 1, 0, 3}, {0, 2, 1, 3},
    {0, 1, 2, 3}, {1, 0, 2, 3}, {2, 1, 0, 3}, {3, 1, 2, 0}, {0, 2, 1, 3}, {0, 3, 2, 1}, {0, 1, 3, 2}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0},
};

/** floor(r / 2), and the ceiling. */
__device__ __forceinline__ long long rl_qec_half_down(long long r) { return r >= 0 ? r / 2 : -((1 - r) / 2); }
__device__ __forceinline__ long long rl_qec_half_up(long long r) { return -rl_qec_half_down(-r); }
__device__ __forceinline__ long long rl_qec_max3(long long a, long long b, long long c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }
__device__ __forceinline__ long long rl_qec_min3(long long a, long long b, long long c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }
__device__ __forceinline__ long long rl_qec_clamp(long long v, long long lo, long long hi) { return v < lo ? lo : v > hi ? hi : v; }

/** exact.rs solve_small, for C = 3 or 4 defects (w.list[start..start+C]), in registers: the
 * cheapest matching by enumeration, then duals from its pairs' free variables (the bounds
 * l1..h2, the sums' s_lo..s_hi and the differences' d_lo..d_hi, as exact.rs names them);
 * false when they do not exist (the matcher decides then), else its weight, observables and
 * outcome by its root, and its defects' duals, written. */
template <uint32_t C>
__device__ __noinline__ bool rl_qec_solve_small(const struct rl_qec_cache *kc, const struct rl_qec_scr w, uint32_t start) {
    const uint32_t n = kc->n;
    const uint64_t stride = (uint64_t)n + 1u;
    const bool sh = kc->tab == RL_QEC_TAB_SHARED;
    const uint32_t *const D = kc->dist, *const P = kc->par;
    uint32_t x[C], dx[C];
    long long cb[C];
#pragma unroll
    for (uint32_t i = 0; i < C; i++) {
        x[i] = w.list[start + i];
        dx[i] = w.def[x[i]];
    }
#pragma unroll
    for (uint32_t i = 0; i < C; i++) {
        const uint32_t b = w.bnd[x[i]];
        cb[i] = b == RL_QEC_INF ? -1ll : (long long)b; /* -1: no path */
    }
    long long d[C][C];
    bool lk[C][C];
#pragma unroll
    for (uint32_t i = 0; i < C; i++)
#pragma unroll
        for (uint32_t j = i + 1u; j < C; j++) d[i][j] = (long long)rl_qec_pair(w, sh, D, stride, x[i], x[j]);
#pragma unroll
    for (uint32_t i = 0; i < C; i++)
#pragma unroll
        for (uint32_t j = i + 1u; j < C; j++) lk[i][j] = rl_qec_linked((uint32_t)d[i][j], w.bnd[x[i]], w.bnd[x[j]]);
    /* the cheapest matching (partners; a defect's own index: the boundary) */
    const uint32_t first = C == 3u ? 0u : 4u, last = C == 3u ? 4u : 14u;
    long long best = -1;
    uint32_t bm = 0;
#pragma unroll
    for (uint32_t q = first; q < last; q++) {
        long long cost = 0;
        bool ok = true;
#pragma unroll
        for (uint32_t i = 0; i < C; i++) {
            const uint32_t j = rl_qec_small_m[q][i];
            if (j == i) {
                ok = ok && cb[i] >= 0;
                cost += cb[i];
            }
#pragma unroll
            for (uint32_t jj = i + 1u; jj < C; jj++)
                if (j == jj) {
                    ok = ok && lk[i][jj];
                    cost += d[i][jj];
                }
        }
        if (ok && (best < 0 || cost < best)) {
            best = cost;
            bm = q;
        }
    }
    if (best < 0) return false;
    uint32_t m[C];
#pragma unroll
    for (uint32_t i = 0; i < C; i++) m[i] = rl_qec_small_m[bm][i];
    /* Y_i = base[i] + ca[i] t1 + cv[i] t2, the pairs in order of their lower defect */
    long long base[C], ca[C], cv[C], split[2] = {0, 0};
    uint32_t pairs = 0;
#pragma unroll
    for (uint32_t i = 0; i < C; i++) {
        base[i] = m[i] == i ? 2ll * cb[i] : 0ll;
        ca[i] = cv[i] = 0;
    }
#pragma unroll
    for (uint32_t i = 0; i < C; i++)
#pragma unroll
        for (uint32_t j = i + 1u; j < C; j++)
            if (m[i] == j) {
                if (pairs == 0) {
                    ca[i] = 1;
                    ca[j] = -1;
                } else {
                    cv[i] = 1;
                    cv[j] = -1;
                }
                base[j] = 2ll * d[i][j];
                split[pairs == 0 ? 0 : 1] = d[i][j];
                pairs++;
            }
    /* the constraints a t1 + b t2 <= r, each kind kept as its tightest bound: the joins,
     * then the linked pairs not matched */
    long long l1 = -RL_QEC_BIG, h1 = RL_QEC_BIG, l2 = -RL_QEC_BIG, h2 = RL_QEC_BIG;
    long long s_lo = -RL_QEC_BIG, s_hi = RL_QEC_BIG, d_lo = -RL_QEC_BIG, d_hi = RL_QEC_BIG;
    bool ok = true;
#define RL_QEC_CONSTRAIN(a, b, r)                                       \
    do {                                                                \
        const long long a_ = (a), b_ = (b), r_ = (r);                   \
        if (a_ == 0 && b_ == 0) ok = ok && r_ >= 0;                     \
        else if (b_ == 0) {                                             \
            if (a_ > 0) h1 = h1 < r_ ? h1 : r_;                         \
            else l1 = l1 > -r_ ? l1 : -r_;                              \
        } else if (a_ == 0) {                                           \
            if (b_ > 0) h2 = h2 < r_ ? h2 : r_;                         \
            else l2 = l2 > -r_ ? l2 : -r_;                              \
        } else if (a_ == b_) {                                          \
            if (a_ > 0) s_hi = s_hi < r_ ? s_hi : r_;                   \
            else s_lo = s_lo > -r_ ? s_lo : -r_;                        \
        } else {                                                        \
            if (a_ > 0) d_hi = d_hi < r_ ? d_hi : r_;                   \
            else d_lo = d_lo > -r_ ? d_lo : -r_;                        \
        }                                                               \
    } while (0)
#pragma unroll
    for (uint32_t i = 0; i < C; i++)
        if (m[i] != i && cb[i] >= 0) RL_QEC_CONSTRAIN(ca[i], cv[i], 2ll * cb[i] - base[i]);
#pragma unroll
    for (uint32_t i = 0; i < C; i++)
#pragma unroll
        for (uint32_t j = i + 1u; j < C; j++)
            if (m[i] != j && lk[i][j]) RL_QEC_CONSTRAIN(ca[i] + ca[j], cv[i] + cv[j], 2ll * d[i][j] - base[i] - base[j]);
#undef RL_QEC_CONSTRAIN
    /* t1's range with t2 eliminated (Fourier-Motzkin), then t2's given t1 */
    const long long lo1 = rl_qec_max3(l1, s_lo - h2, rl_qec_max3(d_lo + l2, rl_qec_half_up(s_lo + d_lo), -RL_QEC_BIG));
    const long long hi1 = rl_qec_min3(h1, s_hi - l2, rl_qec_min3(d_hi + h2, rl_qec_half_down(s_hi + d_hi), RL_QEC_BIG));
    if (!ok || l2 > h2 || s_lo > s_hi || d_lo > d_hi || lo1 > hi1) return false;
    const long long t1 = pairs > 0 ? rl_qec_clamp(split[0], lo1, hi1) : 0;
    const long long lo2 = rl_qec_max3(l2, s_lo - t1, t1 - d_hi), hi2 = rl_qec_min3(h2, s_hi - t1, t1 - d_lo);
    if (lo2 > hi2) return false;
    const long long t2 = pairs > 1 ? rl_qec_clamp(split[1], lo2, hi2) : 0;
    unsigned long long cost = 0;
    uint32_t obs = 0;
#pragma unroll
    for (uint32_t i = 0; i < C; i++) {
        const long long y = base[i] + ca[i] * t1 + cv[i] * t2;
        w.y[x[i]] = y;
        const uint64_t ai = (uint64_t)dx[i] * stride;
        if (m[i] == i) {
            cost += (unsigned long long)cb[i];
            obs ^= rl_qec_par(sh, P, ai + n);
        }
#pragma unroll
        for (uint32_t j = i + 1u; j < C; j++)
            if (m[i] == j) {
                cost += (unsigned long long)d[i][j];
                obs ^= rl_qec_par(sh, P, ai + dx[j]);
            }
    }
    const uint32_t root = x[0];
    w.size[root] = C;
    w.cost[root] = cost;
    w.obs[root] = obs;
    w.stat[root] = RL_QEC_ST_OK;
    return true;
}

/** One cluster of three defects or more (exact.rs solve_cluster), by one warp (all 32 lanes
 * call it): w.list[start..start+c], root `root`, matched with the boundary (its `E` linked
 * pairs, each defect's boundary distance as its cap) by the matcher in `mem`: its weight,
 * observables and outcome by its root, its defects' duals. The edges go in exact.rs's order
 * (the pairs by (i, j)): 32 pairs at a time, each after the linked ones before it. */
__device__ __noinline__ void rl_qec_solve_cluster(const struct rl_qec_cache *kc, const struct rl_qec_scr w, uint32_t start, uint32_t c,
                                                  uint32_t E, uint8_t *mem, uint32_t lane) {
    const uint32_t n = kc->n;
    const uint64_t stride = (uint64_t)n + 1u;
    const bool sh = kc->tab == RL_QEC_TAB_SHARED;
    const uint32_t *const D = kc->dist, *const P = kc->par;
    const uint32_t *const m = w.list + start;
    const uint32_t root = m[0];
    const uint32_t below = rl_pm_below(lane);
    RL_PM_MARK(8);
    struct rl_pm pm;
    rl_pm_carve(&pm, mem, c, E);
    uint32_t L = 0;
    for (uint32_t i = 0; i + 1u < c; i++) {
        const uint32_t xi = m[i], bi = w.bnd[xi];
        for (uint32_t j0 = i + 1u; j0 < c; j0 += 32u) {
            const uint32_t j = j0 + lane;
            uint32_t e = 0;
            bool lk = false;
            if (j < c) {
                e = rl_qec_pair(w, sh, D, stride, xi, m[j]);
                lk = rl_qec_linked(e, bi, w.bnd[m[j]]);
            }
            const uint32_t bal = __ballot_sync(RL_PM_WARP, lk);
            if (lk) {
                const uint32_t o = L + (uint32_t)__popc(bal & below);
                pm.ends[2u * o] = i;
                pm.ends[2u * o + 1u] = j;
                pm.wt[o] = 2ll * e;
            }
            L += (uint32_t)__popc(bal);
        }
    }
    for (uint32_t i = lane; i < c; i += 32u) {
        const uint32_t b = w.bnd[m[i]];
        pm.cap[i] = b != RL_QEC_INF ? 2ll * b : RL_PM_NO_CAP;
    }
    pm.n = c;
    pm.m = L;
    struct rl_pm *const placed = rl_pm_place(pm, mem, lane);
    if (lane == 0) w.size[root] = c;
    __syncwarp();
    RL_PM_MARK(9);
    const bool solved = rl_pm_solve(placed, lane);
    RL_PM_MARK(11);
    if (!solved) {
        for (uint32_t i = lane; i < c; i += 32u) w.y[m[i]] = RL_QEC_BIG;
        if (lane == 0) w.stat[root] = RL_QEC_ST_UNMATCHABLE;
        __syncwarp();
        return;
    }
    unsigned long long cost = 0;
    uint32_t obs = 0;
    for (uint32_t i = lane; i < c; i += 32u) {
        const uint32_t x = m[i];
        w.y[x] = pm.y[i];
        const uint32_t mi = pm.mate[i];
        const uint32_t u = mi == RL_PM_BOUNDARY ? RL_PM_BOUNDARY : rl_pm_head(&pm, mi);
        const uint64_t ax = (uint64_t)w.def[x] * stride;
        if (u == RL_PM_BOUNDARY) {
            cost += w.bnd[x];
            obs ^= rl_qec_par(sh, P, ax + n);
        } else if (i < u) {
            cost += rl_qec_pair(w, sh, D, stride, x, m[u]);
            obs ^= rl_qec_par(sh, P, ax + w.def[m[u]]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        cost += __shfl_xor_sync(RL_PM_WARP, cost, o);
        obs ^= __shfl_xor_sync(RL_PM_WARP, obs, o);
    }
    if (lane == 0) {
        w.cost[root] = cost;
        w.obs[root] = obs;
        w.stat[root] = RL_QEC_ST_OK;
    }
    __syncwarp();
}

/** A cluster of one or two defects in closed form (exact.rs solve_cluster), by this thread. */
__device__ __forceinline__ void rl_qec_solve_two(const struct rl_qec_cache *kc, const struct rl_qec_scr &w, uint32_t start, uint32_t c) {
    const uint32_t n = kc->n;
    const uint64_t stride = (uint64_t)n + 1u;
    const bool sh = kc->tab == RL_QEC_TAB_SHARED;
    const uint32_t x = w.list[start], bx = w.bnd[x];
    const uint64_t ax = (uint64_t)w.def[x] * stride;
    w.size[x] = c;
    if (c == 1u) {
        if (bx == RL_QEC_INF) {
            w.y[x] = RL_QEC_BIG;
            w.stat[x] = RL_QEC_ST_UNMATCHABLE;
            return;
        }
        w.y[x] = 2ll * bx;
        w.cost[x] = bx;
        w.obs[x] = rl_qec_par(sh, kc->par, ax + n);
        w.stat[x] = RL_QEC_ST_OK;
        return;
    }
    /* linked, so the pair beats both to the boundary; duals y_x + y_y = e,
     * y_x <= c_x and y_y <= c_y (the boundary edges), as even as those allow */
    const uint32_t y = w.list[start + 1u], by = w.bnd[y];
    const long long e = rl_qec_pair(w, sh, kc->dist, stride, x, y);
    const long long lo = by == RL_QEC_INF ? -RL_QEC_BIG : 2ll * e - 2ll * by;
    const long long hi = bx == RL_QEC_INF ? RL_QEC_BIG : 2ll * bx;
    const long long yx = e < lo ? lo : e > hi ? hi : e;
    w.y[x] = yx;
    w.y[y] = 2ll * e - yx;
    w.cost[x] = (unsigned long long)e;
    w.obs[x] = rl_qec_par(sh, kc->par, ax + w.def[y]);
    w.stat[x] = RL_QEC_ST_OK;
}

/** Defects the clusters' work space in shared memory takes at most (its arrays are laid out
 * for that many, whatever the shot's count, so that they stay where they are from one
 * message to the next); a shot with more works in the block's scratch. */
#define RL_QEC_FAST_CAP 1024u

/** The defects of the k listed (increasing) below bit t: the first at or above it. */
__device__ __forceinline__ uint32_t rl_qec_below(const uint16_t *def, uint32_t k, uint32_t t) {
    uint32_t lo = 0, hi = k;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) >> 1;
        if (def[mid] < t) lo = mid + 1u;
        else hi = mid;
    }
    return lo;
}

/** The work space of rl_qec_clusters: the arrays, the matchers' arena after them and its
 * room, the scratch's matcher (for one that fits nowhere else), and which it is. */
struct rl_qec_ws {
    struct rl_qec_scr w;
    uint8_t *arena;
    unsigned long long room;
    uint8_t *global_pm;
    bool in_fast;
};

/** All threads: exact.rs settle(): the clusters of the first m defects (settled in `ws`,
 * the first ml loaded there) extended to the first mj of s->u.g.def, among the first mt
 * present (m <= mj <= mt, ml <= mt; those from mj on are young), and proved for them.
 * Defects x < y are linked when an optimal matching may pair them (rl_qec_linked, on
 * D[lower][higher]). Each new defect below mj first joins its nearest linked partner among
 * all mt (the lowest index among equals); then, until the proof holds: the clusters are
 * listed by their root (the lowest defect of
 * a union-find whose higher roots go under lower ones, so the clusters do not depend on the
 * order the threads join them in); a cluster with a young defect is deferred (neither solved
 * nor checked: w.cnt 2 at its root); every other cluster not solved at its present size is solved,
 * one or two defects in closed form, three or four by enumeration (each by one thread), more
 * by the matcher (blossom.cuh) with its boundary, each by one warp; the duals then prove the sum of
 * the clusters' matchings optimal for the mt defects, or the pairs across clusters whose
 * reduced cost is negative join their clusters. Matchers run side by side in the arena
 * (each in its own part, in the order of the clusters, the j-th to warp j % W) and those
 * that do not fit beside the others after them, one at a time on warp 0. s->r.edges nonzero after it: a cluster
 * has more linked pairs than the scratch's matcher takes (exact.rs edge_cap) or fits nowhere. */
__device__ __forceinline__ void rl_qec_settle(struct rl_qec_smem *s, const struct rl_qec_ws &ws, uint32_t m, uint32_t ml, uint32_t mj,
                                              uint32_t mt) {
    const struct rl_qec_cache *kc = &s->k;
    /* the work space's pointers by value, and to the solvers by value: a copy whose address
     * never escapes stays in registers, where a reference is reloaded from the stack after
     * every store through a generic pointer */
    const struct rl_qec_scr w = ws.w;
    uint8_t *const arena = ws.arena, *const global_pm = ws.global_pm;
    const unsigned long long room = ws.room;
    const bool in_fast = ws.in_fast;
    const uint32_t tid = threadIdx.x, T = blockDim.x;
    const uint32_t n = kc->n;
    const uint64_t stride = (uint64_t)n + 1u;
    const bool sh = kc->tab == RL_QEC_TAB_SHARED;
    const uint32_t *const D = kc->dist;
    /* the defects not loaded yet, then the new rows of the pairs' cache (from the shot's list:
     * w.def's new entries are not all written yet), as one run of items, so that their table
     * loads are in flight together. A young defect loaded at an earlier step keeps its entries
     * (an older one may have joined it); its w.cost is still the first joins' ~0: no cluster
     * with it has been solved. */
    {
        const uint32_t nb = mt - ml, pc = mt < w.pdn ? mt : w.pdn, p0 = ml < pc ? ml : pc;
        const uint32_t q0 = rl_qec_pd_at(p0, 0), items = nb + (rl_qec_pd_at(pc, 0) - q0);
        for (uint32_t i = tid; i < items; i += T) {
            if (i < nb) {
                const uint32_t x = ml + i, d = s->u.g.def[x];
                w.def[x] = d;
                w.uf[x] = x;
                w.size[x] = 0;
                w.cost[x] = ~0ull; /* the nearest partner, (distance << 32 | index), until the first joins */
                w.bnd[x] = rl_qec_dist(sh, D, (uint64_t)d * stride + n);
            } else {
                const uint32_t q = q0 + (i - nb), x = rl_qec_tri_row(q), y = q - rl_qec_pd_at(x, 0);
                w.pd[q] = rl_qec_dist(sh, D, (uint64_t)s->u.g.def[y] * stride + s->u.g.def[x]);
            }
        }
    }
    if (tid == 0) s->r.edges = 0; /* the first OVERFLOW seen */
    __syncthreads();
    RL_QEC_HMARK(10);
    /* the first joins: each new defect x below mj with its nearest linked partner y among
     * the mt (the lowest index among equals: the least of distance << 32 | index); the pairs
     * (x, y), x new, spread over the block */
    const uint32_t fresh = (mj - m) * mt;
    for (uint32_t q = tid; q < fresh; q += T) {
        const uint32_t x = m + q / mt, y = q % mt;
        if (y == x) continue;
        const uint32_t e = rl_qec_pair(w, sh, D, stride, x, y);
        if (!rl_qec_linked(e, w.bnd[x], w.bnd[y])) continue;
        atomicMin(w.cost + x, (unsigned long long)e << 32 | y);
    }
    __syncthreads();
    RL_QEC_HMARK(11);
    for (uint32_t x = m + tid; x < mj; x += T) {
        const unsigned long long b = w.cost[x];
        if (b != ~0ull) rl_qec_uf_union(w.uf, x, (uint32_t)b);
    }
    __syncthreads();
    RL_QEC_SMARK(8);
    /* the pairs y < x, spread over the block: the triangle's entries (rl_qec_pd_at) */
    const uint32_t kk = rl_qec_pd_at(mt, 0);
    for (;;) {
        /* the clusters by their root (their lowest defect), members in increasing order:
         * roots, then members per root, then (warp 0, 32 at a time) the clusters' starts in
         * root order and each defect's place after its cluster's members below it (a root
         * is its cluster's lowest defect, so its start is known when its members come) */
        for (uint32_t x = tid; x < mt; x += T) {
            w.rt[x] = rl_qec_uf_find(w.uf, x);
            w.cnt[x] = 0;
        }
        __syncthreads();
        for (uint32_t x = tid; x < mt; x += T) {
            const uint32_t r = w.rt[x];
            w.uf[x] = r; /* paths compressed after every find, so that no read meets the write */
            atomicAdd(w.cnt + r, 1u);
        }
        __syncthreads();
        if (tid < 32u) {
            uint32_t pos = 0, nc = 0;
            for (uint32_t r0 = 0; r0 < mt; r0 += 32u) {
                const uint32_t r = r0 + tid;
                const uint32_t c = r < mt ? w.cnt[r] : 0u;
                uint32_t sum = c, roots = c != 0u;
#pragma unroll
                for (uint32_t o = 1; o < 32u; o <<= 1) {
                    const uint32_t a = __shfl_up_sync(0xffffffffu, sum, o), b = __shfl_up_sync(0xffffffffu, roots, o);
                    if (tid >= o) {
                        sum += a;
                        roots += b;
                    }
                }
                if (c != 0u) {
                    w.cstart[nc + roots - 1u] = pos + sum - c;
                    w.cnt[r] = pos + sum - c; /* the fill cursor */
                }
                pos += __shfl_sync(0xffffffffu, sum, 31);
                nc += __shfl_sync(0xffffffffu, roots, 31);
                __syncwarp();
                /* defect x = r: its place, after the lanes below it of its cluster */
                const uint32_t rx = r < mt ? w.rt[r] : 0xFFFFFFFFu;
                const uint32_t same = __match_any_sync(0xffffffffu, rx), lead = (uint32_t)__ffs(same) - 1u;
                const uint32_t base = r < mt ? w.cnt[rx] : 0u;
                if (r < mt) w.list[base + (uint32_t)__popc(same & ((1u << tid) - 1u))] = r;
                __syncwarp();
                if (r < mt && tid == lead) w.cnt[rx] = base + (uint32_t)__popc(same);
                __syncwarp();
            }
            if (tid == 0) {
                w.cstart[nc] = pos;
                s->r.left = nc;
                s->r.done = 0; /* the proof joined clusters */
                s->r.wait = 0;
            }
        }
        __syncthreads();
        RL_QEC_SMARK(9);
        const uint32_t nc = s->r.left;
        /* up to four defects now where their duals allow; more: their matcher's edge count.
         * Neighbouring clusters go to different warps (cluster lane * W + warp), so that the
         * few to solve run side by side, not as one warp's divergent lanes. */
        for (uint32_t ci = (tid & 31u) * (T / 32u) + (tid >> 5); ci < nc; ci += T) {
            const uint32_t start = w.cstart[ci], c = w.cstart[ci + 1u] - start, root = w.list[start];
            w.at[ci] = RL_QEC_AT_DONE;
            /* deferred: its last member (the youngest) is young */
            if (w.list[start + c - 1u] >= mj) {
                w.cnt[root] = 2u;
                continue;
            }
            /* whether the cluster is solved in this pass: the proof's pairs are those that
             * touch one and no deferred one (w.cnt, by root, is free once the clusters are
             * listed) */
            const bool fresh_solve = w.size[root] != c;
            w.cnt[root] = fresh_solve;
            if (!fresh_solve) continue;
            if (c <= 2u) {
                rl_qec_solve_two(kc, w, start, c);
                continue;
            }
            if (c == 3u ? rl_qec_solve_small<3>(kc, w, start) : c == 4u && rl_qec_solve_small<4>(kc, w, start)) continue;
            uint32_t L = 0;
            for (uint32_t i = 0; i < c; i++) {
                const uint32_t xi = w.list[start + i];
                for (uint32_t j = i + 1u; j < c; j++) {
                    const uint32_t xj = w.list[start + j];
                    L += rl_qec_linked(rl_qec_pair(w, sh, D, stride, xi, xj), w.bnd[xi], w.bnd[xj]);
                }
            }
            w.edges[ci] = L > kc->scr_edges ? 0xFFFFFFFFu : L;
            w.at[ci] = RL_QEC_AT_WAIT;
            s->r.wait = 1;
        }
        __syncthreads();
        /* the matchers' places, runs and lone runs: only when a cluster waits for one (most
         * passes solve every cluster in closed form); block-uniform */
        if (s->r.wait != 0) {
            if (tid == 0) {
                /* places in the arena, cluster after cluster, while they fit; the matcher of
                 * cluster j goes to warp j % W, so the matchers spread over the warps */
                unsigned long long off = 0;
                uint32_t rank = 0;
                for (uint32_t ci = 0; ci < nc; ci++) {
                    if (w.at[ci] != RL_QEC_AT_WAIT) continue;
                    const uint32_t c = w.cstart[ci + 1u] - w.cstart[ci];
                    if (w.edges[ci] == 0xFFFFFFFFu) {
                        s->r.edges = 1;
                        w.at[ci] = RL_QEC_AT_DONE;
                        continue;
                    }
                    const unsigned long long b = rl_pm_bytes(c, w.edges[ci]);
                    if (rank < T && off + b <= room) {
                        w.at[ci] = (uint32_t)(off >> 4);
                        w.owner[ci] = rank % (T / 32u);
                        off += b;
                        rank++;
                    } else {
                        w.at[ci] = RL_QEC_AT_ALONE;
                    }
                }
            }
            __syncthreads();
            if (s->r.edges != 0) break; /* block-uniform */
            /* each warp its matchers (warp-uniform: the lanes read the same entries) */
            for (uint32_t ci = 0; ci < nc; ci++) {
                const uint32_t at = w.at[ci];
                if (at >= RL_QEC_AT_WAIT || w.owner[ci] != (tid >> 5)) continue;
                const uint32_t start = w.cstart[ci];
                rl_qec_solve_cluster(kc, w, start, w.cstart[ci + 1u] - start, w.edges[ci], arena + ((unsigned long long)at << 4), tid & 31u);
            }
            __syncthreads();
            if (tid < 32u) {
                for (uint32_t ci = 0; ci < nc; ci++) {
                    if (w.at[ci] != RL_QEC_AT_ALONE) continue;
                    const uint32_t start = w.cstart[ci], c = w.cstart[ci + 1u] - start;
                    const unsigned long long b = rl_pm_bytes(c, w.edges[ci]);
                    uint8_t *const mem = b <= room ? arena : in_fast && global_pm != 0 ? global_pm : 0;
                    if (mem == 0) {
                        if (tid == 0) s->r.edges = 1;
                        break;
                    }
                    rl_qec_solve_cluster(kc, w, start, c, w.edges[ci], mem, tid);
                }
            }
            __syncthreads();
        }
        RL_QEC_SMARK(10);
        if (s->r.edges != 0) break; /* block-uniform */
        /* the proof: a pair across clusters that an optimal matching may use, with a
         * negative reduced cost, joins its clusters. Only pairs that touch a
         * cluster solved in this pass: the duals of the others are those of the pass that
         * last checked them (or, before this step's first pass, of the last step's proof,
         * which held), and the pair's distance and links never change. */
        for (uint32_t q = tid; q < kk; q += T) {
            const uint32_t x = rl_qec_tri_row(q), y = q - rl_qec_pd_at(x, 0);
            const uint32_t rx = w.rt[x], ry = w.rt[y];
            if (rx == ry || (w.cnt[rx] | w.cnt[ry]) != 1u) continue; /* 0: none solved now; 2, 3: one deferred */
            const uint32_t e = rl_qec_pair(w, sh, D, stride, x, y);
            if (!rl_qec_linked(e, w.bnd[x], w.bnd[y])) continue;
            if (w.y[x] + w.y[y] > 2ll * e) {
                rl_qec_uf_union(w.uf, x, y);
                s->r.done = 1;
            }
        }
        __syncthreads();
        const bool again = s->r.done != 0;
        __syncthreads(); /* everyone has read it before thread 0 clears it */
        if (!again) break;
    }
    RL_QEC_SMARK(11);
}

/** The message count at which the mirrored decoder's shot started: its messages so far less
 * those of this shot (next_counter / rounds: each message moves the counter by `rounds`
 * from 0). A key of the shot: no two of a decoder's shots have the same. */
__device__ __forceinline__ unsigned long long rl_qec_shot_start(const struct rl_qec_cache *k) {
    /* one round a message, the common case, without the 64-bit division (a software routine) */
    const unsigned long long c = (unsigned long long)k->rec.next_counter;
    const unsigned long long in_shot = k->rounds <= 1u ? c : c / (unsigned long long)k->rounds;
    return k->rec.counters.messages - in_shot;
}

/** The clusters' outcome: status, observables and weight in table units. */
struct rl_qec_sum {
    uint32_t status, obs;
    unsigned long long cost;
};

/** Warp 0 (every lane gets it): the sum of the `nc` clusters listed in `w` (status OK,
 * UNMATCHABLE when one has no perfect matching, OVERFLOW when `over`; observables and cost 0
 * unless OK). */
__device__ __forceinline__ struct rl_qec_sum rl_qec_sum_clusters(const struct rl_qec_scr &w, uint32_t nc, bool over, uint32_t lane) {
    unsigned long long cost = 0;
    uint32_t obs = 0, bad = 0;
    if (!over) {
        for (uint32_t ci = lane; ci < nc; ci += 32u) {
            const uint32_t root = w.list[w.cstart[ci]];
            bad |= w.stat[root] != RL_QEC_ST_OK;
            cost += w.cost[root];
            obs ^= w.obs[root];
        }
    }
#pragma unroll
    for (uint32_t o = 16; o != 0; o >>= 1) {
        cost += __shfl_xor_sync(0xffffffffu, cost, o);
        obs ^= __shfl_xor_sync(0xffffffffu, obs, o);
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    struct rl_qec_sum r;
    r.status = over ? RL_QEC_REPORT_OVERFLOW : bad != 0 ? RL_QEC_REPORT_UNMATCHABLE : RL_QEC_REPORT_OK;
    r.obs = r.status != RL_QEC_REPORT_OK ? 0u : obs;
    r.cost = r.status != RL_QEC_REPORT_OK ? 0ull : cost;
    return r;
}

/** All threads, k defects of the mirrored shot in s->u.g.def (more than K when `final`):
 * exact.rs proved_clusters(), the same clusters, the same matchings. The shot is settled at
 * every stream threshold it has passed (its bits so far: k->rec.bits) with more than K
 * defects below (rl_qec_settle; the defects below the threshold before it, the latest
 * message's waiting a step but at the last), starting from what the work space holds of it (k->strm),
 * or from nothing; then, when `final`, for the whole shot (a step of its own unless the last
 * settled every defect: a last message that added none is answered from the clusters
 * settled before it), and the result goes to s->r:
 * status OK, UNMATCHABLE (infinite weight) when a cluster has no perfect matching and
 * nothing left to join, or OVERFLOW (no decode, infinite weight) when a step overflowed or
 * there is no work space. Otherwise (an acknowledged message) k->strm keeps the key of what
 * was settled. Work space: the launch's dynamic shared memory when the table is not there
 * (k->fast_bytes) and it takes the arrays for RL_QEC_FAST_CAP defects (n if fewer) and the
 * shot has no more, else this block's global scratch; the defects are copied there. */
__device__ __forceinline__ void rl_qec_clusters(struct rl_qec_smem *s, uint32_t k, bool final) {
    struct rl_qec_cache *kc = &s->k;
    const uint32_t tid = threadIdx.x;
    const uint32_t n = kc->n;
    const uint32_t cap = n < RL_QEC_FAST_CAP ? n : RL_QEC_FAST_CAP;
    struct rl_qec_ws ws;
    ws.in_fast = k <= cap && rl_qec_lists_bytes(cap) <= kc->fast_bytes;
    if (!ws.in_fast && kc->scr == 0) { /* block-uniform */
        if (tid == 0) {
            s->r.status = RL_QEC_REPORT_OVERFLOW;
            s->r.infinite = 1;
            s->r.obs = 0;
            s->r.cost = 0;
            kc->strm.dec = -1;
        }
        return;
    }
    ws.w = ws.in_fast ? rl_qec_scr_of((uint8_t *)rl_qec_tab_s, cap) : rl_qec_scr_of(kc->scr, n);
    /* the matchers' arena: after the arrays; the global scratch's matcher beside it */
    ws.arena = ws.w.pm;
    ws.room = ws.in_fast ? kc->fast_bytes - rl_qec_lists_bytes(cap) : rl_pm_bytes(n, kc->scr_edges);
    /* the pairs' cache, in shared memory only (where a matcher's arena keeps at least as
     * much room again): a global one would be another table to load */
    if (ws.in_fast && ws.room >= 2ull * rl_qec_pd_bytes()) {
        ws.w.pd = (uint32_t *)ws.arena;
        ws.w.pdn = RL_QEC_PD_CAP;
        ws.arena += rl_qec_pd_bytes();
        ws.room -= rl_qec_pd_bytes();
    }
    ws.global_pm = kc->scr != 0 ? rl_qec_scr_of(kc->scr, n).pm : 0;
    const unsigned long long start = rl_qec_shot_start(kc);
    unsigned long long t0 = 0; /* thread 0's: the call's start (a k->spec's decode_ns) */
    if (tid == 0) {
        t0 = final ? 0ull : rl_qec_clock();
        /* what the work space holds of this shot, if anything */
        const bool held = kc->strm.dec == kc->hot && kc->hot >= 0 && kc->strm.start == start && kc->strm.ws == (ws.in_fast ? 0u : 1u) &&
                          kc->strm.m <= kc->strm.ml && kc->strm.ml <= k && kc->strm.j <= kc->stream_n;
        s->r.sj = held ? kc->strm.j : 0u;
        s->r.sm = held ? kc->strm.m : 0u;
        s->r.sml = held ? kc->strm.ml : 0u;
        s->r.sover = held ? kc->strm.over : 0u;
        s->r.listed = held && kc->strm.m != 0u;
        s->r.left = kc->strm.nc;
        s->r.edges = 0; /* no step of this call overflowed yet */
    }
    RL_QEC_CMARK(8);
    RL_QEC_HMARK(9);
    const uint32_t bits = final ? n : kc->rec.bits, K = kc->K;
    for (;;) {
        if (tid == 0) {
            /* the next threshold passed with more than K defects below it and more defects
             * below the threshold before it (all, at the last) than settled: exact.rs
             * proved_clusters()'s loop */
            uint32_t j = s->r.sj, mj = 0, mt = 0xFFFFFFFFu;
            while (s->r.sover == 0 && j < kc->stream_n && kc->stream[j] <= bits) {
                const uint32_t lo = rl_qec_below(s->u.g.def, k, kc->stream[j]);
                j++;
                if (lo <= K) continue;
                mj = j == kc->stream_n ? lo : j == 1u ? 0u : rl_qec_below(s->u.g.def, k, kc->stream[j - 2u]);
                if (mj > s->r.sm) {
                    mt = lo;
                    break;
                }
            }
            /* then, when `final`, the final step: the whole shot, unless the last step
             * settled every defect (the last message added none: its clusters, listed and
             * proved, are the shot's) or a step overflowed. One call site: the step's code
             * is inlined once. */
            if (mt == 0xFFFFFFFFu && final && s->r.sover == 0 && !(s->r.sm == k && s->r.listed != 0)) mj = mt = k;
            s->r.sj = j;
            s->r.smj = mj;
            s->r.smt = mt;
        }
        __syncthreads();
        const uint32_t m = s->r.sm, ml = s->r.sml, mj = s->r.smj, mt = s->r.smt;
        if (mt == 0xFFFFFFFFu) break; /* block-uniform */
        rl_qec_settle(s, ws, m, ml, mj, mt);
        if (tid == 0) {
            s->r.sover = s->r.edges != 0;
            s->r.sm = mj;
            s->r.sml = mt;
            s->r.listed = 1;
        }
        __syncthreads();
    }
    RL_QEC_CMARK(9);
    if (!final) {
        if (tid == 0) {
            kc->strm.dec = kc->hot;
            kc->strm.start = start;
            kc->strm.ws = ws.in_fast ? 0u : 1u;
            kc->strm.j = s->r.sj;
            kc->strm.m = s->r.sm;
            kc->strm.ml = s->r.sml;
            kc->strm.over = s->r.sover;
            kc->strm.nc = s->r.left;
        }
        /* Every threshold passed (only the last message is left) and every defect settled
         * (block-uniform: written before the loop's last barrier): the final call, for a last
         * message that adds no defect, would settle nothing more and answer these clusters'
         * sum, so it goes to k->spec now, and that message is answered on the fast path with
         * no hand-over (rl_qec_fast). Its decode_ns is this call's time. */
        if (tid < 32u && s->r.sj == kc->stream_n && s->r.sm == k && s->r.listed != 0) {
            const struct rl_qec_sum r = rl_qec_sum_clusters(ws.w, s->r.left, s->r.sover != 0, tid);
            if (tid == 0) {
                const bool infinite = r.status != RL_QEC_REPORT_OK;
                kc->spec.msgs = kc->rec.counters.messages;
                kc->spec.nd = k;
                kc->spec.status = r.status;
                kc->spec.obs = r.obs;
                kc->spec.weight = (uint32_t)__float_as_int(rl_qec_weight(infinite, r.cost, kc->scale));
                const unsigned long long ns = rl_qec_clock() - t0;
                kc->spec.ns = ns < 0xFFFFFFFFull ? (uint32_t)ns : 0xFFFFFFFFu;
                kc->spec.ok = 1;
            }
        }
        return;
    }
    RL_QEC_CMARK(10);
    if (tid < 32u) {
        const struct rl_qec_sum r = rl_qec_sum_clusters(ws.w, s->r.left, s->r.sover != 0 || s->r.edges != 0, tid);
        if (tid == 0) {
            s->r.status = r.status;
            s->r.infinite = r.status != RL_QEC_REPORT_OK;
            s->r.obs = r.obs;
            s->r.cost = r.cost;
            kc->strm.dec = -1; /* the shot ends */
        }
    }
    RL_QEC_CMARK(11);
}

/** All threads, c->mode EXACT or CLUSTERS: the block's decode, then thread 0's answer;
 * STREAM: the shot so far listed (warp 0) and settled, the acknowledgement lane 0 wrote
 * kept as the answer. */
__device__ __noinline__ void rl_qec_block(const uint8_t *req, uint8_t *resp, struct rl_qec_smem *s, uint32_t mode) {
    RL_QEC_HMARK(8);
    /* rl_qec_clusters and rl_qec_settle are inlined, once for a stream step and once for a
     * final decode (each copy folded for its `final`): as calls, their register saves and the
     * work space's pointers went through the stack (decisions.md: the clusters' steps inlined) */
    if (mode == RL_QEC_MODE_STREAM) {
        if (s->c.k == RL_QEC_NDEF_BAD) { /* block-uniform: the shot not listed (rl_qec_want_stream) */
            if (threadIdx.x < 32u) {
                const uint32_t kd = rl_qec_defects(s, threadIdx.x);
                if (threadIdx.x == 0) {
                    s->c.k = kd;
                    s->k.ndef = kd; /* listed: the fast path goes on from there */
                }
            }
            __syncthreads();
        }
        if (s->c.k > s->k.K) rl_qec_clusters(s, s->c.k, false); /* block-uniform */
        __syncthreads();
        return;
    }
    if (mode == RL_QEC_MODE_EXACT)
        rl_qec_dp<RL_QEC_MAX_K>(s, s->c.k, threadIdx.x, blockDim.x, true);
    else
        rl_qec_clusters(s, s->c.k, true);
    RL_QEC_MARK(4);
    if (threadIdx.x == 0) rl_qec_finish(req, resp, s, mode);
    RL_QEC_MARK(5);
    __syncthreads();
}

/** Every thread: whether the request is for this stage at all (session.rs handle() answers
 * None otherwise: no CUQR header, another function, or an output that cannot hold a
 * header). Read from the request alone, so every thread decides it without a barrier. */
__device__ __forceinline__ bool rl_qec_ours(const uint8_t *req, int len, int cap) {
    if (len < RL_RPC_HEADER_LEN || cap < RL_RPC_HEADER_LEN) return false;
    const uint2 h = *(const uint2 *)req;
    return h.x == RL_RPC_REQUEST_MAGIC && (h.y == RL_QEC_FN_ENQUEUE || h.y == RL_QEC_FN_GET || h.y == RL_QEC_FN_RESET);
}

/** The stage's shared memory (one per block: the cache and the decoder's work space), at
 * namespace scope so that the stage's three forms share it. */
__shared__ __align__(16) struct rl_qec_smem rl_qec_s;

/** Lane 0, an acknowledged message (the cache trusted): whether the block settles the shot
 * so far before the answer goes (c->mode STREAM, with c->k its defects, or RL_QEC_NDEF_BAD
 * when they are not listed): the DEM has stream thresholds, the shot has passed the first,
 * and its defects are more than K or not listed. Settling is optional (rl_qec_clusters
 * replays what was not): skipping it changes no answer. */
__device__ __forceinline__ void rl_qec_want_stream(struct rl_qec_smem *s) {
    const struct rl_qec_cache *k = &s->k;
    if (k->stream_n != 0 && k->ndef > k->K && k->hot >= 0 && k->rec.in_shot != 0 && k->rec.bits >= k->stream[0]) {
        s->c.mode = RL_QEC_MODE_STREAM;
        s->c.k = k->ndef;
    }
}

/** Warp 0 (stage.cuh): lane 0 runs the protocol and the append, warp 0 the decode of up to
 * RL_QEC_WARP_K defects, and the answer; a larger decode hands the DP layers (or the fallback)
 * to the block: RL_STAGE_TO_BLOCK. */
__device__ __forceinline__ int rl_stage_qec_warp(const uint8_t *req, int len, uint8_t *resp, int cap, void *state) {
    struct rl_qec_smem *s = &rl_qec_s;
    if (!rl_qec_ours(req, len, cap)) return -1; /* every lane alike, nothing written */
    RL_QEC_MARK(0);
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t phase = 0;
    if (lane == 0) {
        phase = rl_qec_lane0(req, len, resp, cap, (uint8_t *)state, s);
        if (phase == RL_QEC_PHASE_ACK) rl_qec_want_stream(s);
    }
    RL_QEC_MARK(1);
    /* volatile: a plain load was hoisted out of the condition and run by every lane of
     * warp 0 (its value then dropped), a read racecheck rightly flags against lane 0's
     * writes of the cache */
    if (lane == 0 && phase == RL_QEC_PHASE_DECODE) phase |= *(volatile const uint32_t *)&s->k.ndef << 2;
    phase = __shfl_sync(0xffffffffu, phase, 0);
    if ((phase & 3u) == RL_QEC_PHASE_DECODE) {
        __syncwarp(); /* lane 0's shared writes (the shot, the defect list, the control block) */
        rl_qec_warp_decode(req, resp, s, lane, phase >> 2);
    }
    __syncwarp(); /* the answer, c->ret and c->mode */
    return s->c.mode == RL_QEC_MODE_DONE ? s->c.ret : RL_STAGE_TO_BLOCK;
}

/** The block's continuation (stage.cuh), after rl_stage_qec_warp's RL_STAGE_TO_BLOCK: the DP
 * layers (a barrier each) or the fallback, thread 0's answer, a last barrier. */
__device__ __forceinline__ int rl_stage_qec_block(const uint8_t *req, int len, uint8_t *resp, int cap, void *state) {
    (void)len;
    (void)cap;
    (void)state;
    struct rl_qec_smem *s = &rl_qec_s;
    rl_qec_block(req, resp, s, s->c.mode);
    return s->c.ret;
}

/** The stage, every thread (stage.cuh): the warp form, one block barrier (which publishes the
 * answer, c->ret and c->mode), and the block continuation when the warp handed over. */
__device__ __forceinline__ int rl_stage_qec(const uint8_t *req, int len, uint8_t *resp, int cap, void *state) {
    struct rl_qec_smem *s = &rl_qec_s;
    if (!rl_qec_ours(req, len, cap)) return -1; /* every thread alike, nothing written */
    if (threadIdx.x < 32) (void)rl_stage_qec_warp(req, len, resp, cap, state);
    __syncthreads();
    if (s->c.mode != RL_QEC_MODE_DONE) rl_qec_block(req, resp, s, s->c.mode);
    return s->c.ret;
}

/** Warp 0, between messages (stage.cuh's idle form): lane 0 decodes the shot being assembled
 * ahead of its last message (rl_qec_speculate), so that a last message that adds no defect
 * (most, at low p) is answered without a decode of its own. */
__device__ __forceinline__ void rl_stage_qec_idle(void *state) {
    if ((threadIdx.x & 31u) == 0) rl_qec_speculate(&rl_qec_s, (uint8_t *)state);
    __syncwarp();
}

#endif /* __CUDACC__ || __CUDACC_RTC__ */

#endif /* ROCELINK_STAGE_QEC_CUH */
