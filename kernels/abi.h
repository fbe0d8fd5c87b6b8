/*
 * kernels/abi.h — the single definition of every memory layout shared by device code
 * (CUDA kernels, compiled by NVRTC) and host code (Rust, through bindings that bindgen
 * generates from this file into operator/src/abi/bindings.rs; CI regenerates them and fails
 * on any difference).
 *
 * Layouts follow the mlx5 provider of rdma-core (mlx5dv.h, wqe.h) and PROTOCOLS.md section 4,
 * so that the same device code drives a ConnectX through mlx5dv and the software NIC.
 *
 * Byte order: fields marked BE are big-endian, as the NIC reads and writes them; everything
 * else is little-endian (host and GPU order).
 *
 * Ordering contracts: every word written by one side and polled by the other says
 *   writer  -- who stores it,
 *   poller  -- who reads it in a loop,
 *   fence   -- what orders it: the producer writes the data, then a release fence at the
 *              consumer's scope (system scope across PCIe: __threadfence_system() on the GPU,
 *              a Release store on the CPU), then the word; the consumer polls the word only,
 *              then an acquire fence, then reads the data.
 * Producer and consumer indices live on separate 128-byte lines.
 */
#ifndef ROCELINK_ABI_H
#define ROCELINK_ABI_H

#if defined(__CUDACC_RTC__)
/* NVRTC ships no <stdint.h> and no offsetof: sizes are checked here, offsets by the C
 * compilers and by Rust's bindgen layout tests. */
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
#define RL_STATIC_ASSERT(c, m) static_assert(c, m)
#define RL_OFFSET_ASSERT(t, f, v, m)
#elif defined(__cplusplus)
#include <cstdint>
#include <cstddef>
#define RL_STATIC_ASSERT(c, m) static_assert(c, m)
#define RL_OFFSET_ASSERT(t, f, v, m) static_assert(offsetof(t, f) == (v), m)
#else
#include <stdint.h>
#include <stddef.h>
#define RL_STATIC_ASSERT(c, m) _Static_assert(c, m)
#define RL_OFFSET_ASSERT(t, f, v, m) _Static_assert(offsetof(t, f) == (v), m)
#endif

/* ---------------------------------------------------------------------------------------
 * Sizes
 * ------------------------------------------------------------------------------------- */

/** A send WQE basic block (WQEBB). */
#define RL_WQEBB_SIZE 64u
/** A completion queue entry (CQE64). */
#define RL_CQE_SIZE 64u
/** A receive WQE with one scatter entry. */
#define RL_RECV_WQE_SIZE 16u
/** Lines that separate words written by different sides. */
#define RL_LINE_SIZE 128u
/** Largest inline payload of a one-WQEBB SEND: 64 - ctrl (16) - inline byte_count (4). */
#define RL_MAX_INLINE_1BB 44u
/** Bytes of a small receive the NIC may scatter into the CQE (CQE inline scatter). */
#define RL_CQE_INLINE_MAX 32u
/** Receives kept posted: the FPGA keeps at most this many slots in flight (PROTOCOLS.md 2.3). */
#define RL_MAX_IN_FLIGHT 64u
/**
 * Receive in one PCIe round (kernels/transceiver/poll.cuh): the poller reads the whole CQE and
 * the first RL_SPEC_BYTES of the slot the peer should write next in the same read. A read of
 * host memory is not one snapshot by contract, so the consumer writes RL_SPEC_POISON into
 * every 32-bit word it may read that way once it has consumed it (CQE bytes 0..47, the slot's
 * first RL_SPEC_BYTES, of which a message rewrites only its own; the host fills them before
 * the launch), ordered before the answer's
 * doorbell and the receive's re-post: a word still holding the poison was read before the
 * NIC wrote it, and the consumer reads it again after its acquire fence.
 */
/* 432: lanes 4..30 of the polling warp, 16 bytes each (lanes 0..3 read the CQE, lane 31 the
 * exit flag); the consumer poisons only the bytes a message filled (the rest still hold it) */
#define RL_SPEC_BYTES 432u
#define RL_SPEC_POISON 0xD1CE5EA5u
/** CQE bytes the consumer poisons (everything below the chunk that holds op_own). */
#define RL_SPEC_CQE_BYTES 48u

/* ---------------------------------------------------------------------------------------
 * Send WQE segments (PROTOCOLS.md 4; rdma-core mlx5dv.h struct mlx5_wqe_*_seg)
 * ------------------------------------------------------------------------------------- */

/* Send opcodes (ctrl.opmod_idx_opcode bits 7:0). */
#define RL_OPCODE_NOP 0x00u
#define RL_OPCODE_RDMA_WRITE 0x08u
#define RL_OPCODE_RDMA_WRITE_IMM 0x09u
#define RL_OPCODE_SEND 0x0au
#define RL_OPCODE_SEND_IMM 0x0bu
#define RL_OPCODE_RDMA_READ 0x10u
#define RL_OPCODE_ATOMIC_CS 0x11u
#define RL_OPCODE_ATOMIC_FA 0x12u

/* ctrl.fm_ce_se */
#define RL_WQE_CTRL_CQ_UPDATE 0x08u /* write a CQE when this WQE completes */
#define RL_WQE_CTRL_SOLICITED 0x02u
/* data/inline byte_count bit 31: the data follows inline */
#define RL_INLINE_SEG 0x80000000u

/**
 * Control segment, first 16 bytes of every send WQE. All fields BE.
 * Written by the data path (GPU kernel or CPU backend) before the doorbell; read by the NIC
 * after it sees the doorbell (ordered by the doorbell's release fence).
 */
struct rl_wqe_ctrl_seg {
    uint32_t opmod_idx_opcode; /* BE: opmod << 24 | (wqe_index & 0xffff) << 8 | opcode */
    uint32_t qpn_ds;           /* BE: qpn << 8 | ds, ds = number of 16-byte segments of the WQE */
    uint8_t signature;
    uint8_t rsvd[2];
    uint8_t fm_ce_se;          /* RL_WQE_CTRL_CQ_UPDATE | RL_WQE_CTRL_SOLICITED | fence << 5 */
    uint32_t imm;              /* BE: immediate for *_IMM opcodes */
};

/** Remote address segment (RDMA WRITE/READ). All fields BE. */
struct rl_wqe_raddr_seg {
    uint64_t raddr;
    uint32_t rkey;
    uint32_t reserved;
};

/** Data (scatter/gather) segment, also one receive WQE entry. All fields BE. */
struct rl_wqe_data_seg {
    uint32_t byte_count; /* bit 31 must be 0 here */
    uint32_t lkey;
    uint64_t addr;
};

/** Inline data header: byte_count | RL_INLINE_SEG, then the bytes, padded to 16. BE. */
struct rl_wqe_inline_seg {
    uint32_t byte_count;
};

/** A receive WQE with one scatter entry (the RQ ring is an array of these). */
struct rl_recv_wqe {
    struct rl_wqe_data_seg data;
};

/* ---------------------------------------------------------------------------------------
 * Completion queue entry (PROTOCOLS.md 4; rdma-core mlx5dv.h struct mlx5_cqe64)
 * ------------------------------------------------------------------------------------- */

/* op_own bits 7:4 */
#define RL_CQE_REQ 0x0u
#define RL_CQE_RESP_WR_IMM 0x1u
#define RL_CQE_RESP_SEND 0x2u
#define RL_CQE_RESP_SEND_IMM 0x3u
#define RL_CQE_REQ_ERR 0xdu
#define RL_CQE_RESP_ERR 0xeu
#define RL_CQE_INVALID 0xfu
/* op_own bit 0: owner; bit 2: the first byte_cnt (<= 32) bytes are in inline_data */
#define RL_CQE_OWNER_MASK 0x01u
#define RL_CQE_INLINE_SCATTER_32 0x04u
/** What a CQ entry holds before the NIC first writes it: INVALID, owned by hardware. */
#define RL_CQE_INIT_OP_OWN 0xf1u

/**
 * A 64-byte CQE. Multi-byte fields BE.
 * writer: the NIC. poller: the data path, which reads op_own only, and when
 *   (op_own & 1) == ((ci / entries) & 1) and (op_own >> 4) != RL_CQE_INVALID, issues an
 *   acquire fence and then reads the rest. The NIC writes every other byte first, then a
 *   release fence, then op_own.
 */
struct rl_cqe64 {
    uint8_t inline_data[32];  /* CQE inline scatter: payload bytes when op_own & RL_CQE_INLINE_SCATTER_32 */
    uint32_t srqn_uidx;
    uint32_t imm_inval_pkey;  /* BE: the immediate of a *_WITH_IMMEDIATE */
    uint8_t app;
    uint8_t app_op;
    uint16_t app_info;
    uint32_t byte_cnt;        /* BE: bytes received (responder) */
    uint64_t timestamp;       /* BE: NIC clock when the CQE was written (software NIC: CLOCK_MONOTONIC ns) */
    uint32_t sop_drop_qpn;    /* BE: qpn in bits 23:0 */
    uint16_t wqe_counter;     /* BE: index of the WQE this CQE completes */
    uint8_t signature;
    uint8_t op_own;           /* opcode << 4 | flags | owner */
};

/* ---------------------------------------------------------------------------------------
 * Doorbells
 * ------------------------------------------------------------------------------------- */

/**
 * Queue-pair doorbell record (mlx5: dbrec[0] receive, dbrec[1] send). BE, counters & 0xffff.
 * rq_counter -- writer: the data path after it re-posts receive WQEs; poller: the NIC,
 *   which may consume WQEs below it; fence: release after writing the receive WQEs.
 * sq_counter -- writer: the data path after writing send WQEs; read by the NIC (a real
 *   ConnectX also needs the MMIO doorbell; the software NIC polls the proxy word instead).
 */
struct rl_qp_dbrec {
    uint32_t rq_counter;
    uint32_t sq_counter;
};

/**
 * Completion-queue doorbell record (mlx5 cq dbrec[0]): the consumer index, BE & 0xffffff.
 * writer: the data path after consuming CQEs; reader: the NIC (overrun detection).
 */
struct rl_cq_dbrec {
    uint32_t set_ci;
    uint32_t arm_sn;
};

/**
 * The CPU-proxy doorbell (GPUNetIO's CPU-assisted mode, for machines without a GPU->NIC
 * MMIO path), one 128-byte line.
 * sq_db -- writer: the data path, one 8-byte store (single-copy atomic), after the WQE and
 *   dbrec writes; poller: the NIC engine (software NIC) or a proxy thread that rings a real
 *   NIC's MMIO doorbell, which then reads the WQEs after an acquire fence.
 *   Bits 0..15 (RL_DB_PI_MASK): the send producer index in WQEBBs, mod 2^16.
 *   Unchecked (bit RL_DB_CHECKED_BIT clear): the writer fenced (system-scope release) after its WQE
 *   writes and before this store: every WQE below the index is complete when it is seen.
 *   Checked (bit RL_DB_CHECKED_BIT set): no fence before the store, which is what it saves
 *   (a release fence across PCIe is ~0.55 us, latency-reports/history.md). Its range, the
 *   last (bits 16..19) + 1 WQEBBs below the index, holds the WQEs written since the writer's
 *   last fence: only they may still be landing; every WQE below the range is complete. Bits
 *   21..63 are the top 43 bits of the range's check: the XOR of a mix of every 16-byte chunk
 *   of its WQEs' ds segments, numbered 4 x the WQE's first WQEBB in the range plus the
 *   chunk's in the WQE, and, for each of its WQEs with a data (gather) segment, of the
 *   gathered bytes' chunks (the last one zero-padded past the length; at most
 *   RL_DB_GATHER_MAX bytes), numbered from RL_DB_GATHER_CHUNK(the WQE's first WQEBB in the
 *   range). A chunk's mix (rl_check_chunk; Rust: abi::wqe_check, abi::gather_check): its two
 *   8-byte halves (little-endian), each XORed with (its number + 1) times one of the constants
 *   below, multiplied as 128 bits, the product's two halves XORed: one multiply a chunk (the
 *   NIC hashes every checked byte in the answer's path; Rust: abi::range_check). The poller executes the range's WQEs it has not yet executed only
 *   once the range's bytes and the bytes they gather give the same check, re-reading them
 *   until they do (NCCL's "LL" idea, with a hash for the flag): a gathered payload needs no
 *   fence in front of the doorbell either. The writer fences before a range would pass 16
 *   WQEBBs, and then starts a new one at the index; a range is never longer than the ring.
 *   A gather the poller cannot resolve (lkey, bounds) gives no bytes: the check disagrees and
 *   the range completes in error at the poller's deadline.
 */
struct rl_proxy_doorbell {
    uint64_t sq_db;
    uint32_t rsvd[30];
};
#define RL_DB_PI_MASK 0xffffu
#define RL_DB_LAST_SHIFT 16
#define RL_DB_LAST_MASK 0xfu
#define RL_DB_CHECKED_BIT 20
#define RL_DB_CHECK_SHIFT 21
/* The first chunk number of the bytes gathered by the WQE at WQEBB `pos` (0..15) of a checked
 * range: past the range's WQE chunks (4 x 16), RL_DB_GATHER_MAX / 16 numbers per WQEBB. */
#define RL_DB_GATHER_MAX 4096u
#define RL_DB_GATHER_CHUNK(pos) (64u + (RL_DB_GATHER_MAX / 16u) * (uint32_t)(pos))
/* rl_check_chunk's constants: two odd multipliers of the chunk number (the golden ratio and
 * xxHash64's second prime) */
#define RL_WQE_CHECK_K0 0x9E3779B97F4A7C15ull
#define RL_WQE_CHECK_K1 0xC2B2AE3D27D4EB4Full

/* ---------------------------------------------------------------------------------------
 * Queue and transceiver descriptors (written by the host before launch, read-only after)
 * ------------------------------------------------------------------------------------- */

/**
 * One queue of the QP as the data path sees it. Addresses are as the data path
 * dereferences them: device pointers for the GPU backend, host pointers for the CPU
 * backend (the same memory: pinned host memory mapped into the GPU).
 */
struct rl_queue_desc {
    uint64_t ring;       /* entry 0 */
    uint64_t dbrec;      /* the doorbell record word of this queue (BE u32) */
    uint32_t entries;    /* a power of two */
    uint32_t entry_size; /* RL_WQEBB_SIZE, RL_CQE_SIZE or RL_RECV_WQE_SIZE */
};

/** A 128-byte line holding one index, so indices of different writers never share a line. */
struct rl_index_line {
    uint32_t value;
    uint32_t rsvd[31];
};

/* rl_control.state */
#define RL_STATE_LAUNCHED 0u
#define RL_STATE_RUNNING 1u
#define RL_STATE_EXITED 2u
#define RL_STATE_FAILED 3u

/* rl_control.error */
#define RL_ERR_NONE 0u
#define RL_ERR_BAD_SLOT 1u   /* an immediate named a slot outside the RX buffer (message dropped) */
#define RL_ERR_CQE_ERROR 2u  /* the NIC wrote an error CQE */
#define RL_ERR_SQ_FULL 3u    /* no send completion came back in time */

/**
 * Run control, in host-mapped memory.
 * exit_flag -- writer: host (1 = stop); poller: the data path, every RL_EXIT_POLL_EVERY polls
 *   only, idle or not (each read of host memory costs a PCIe round trip), and in a wait for
 *   send-queue room.
 * heartbeat, processed, state, error -- writer: the data path (plain stores; heartbeat on an
 *   idle poll whose count, idle or not, is a multiple of RL_HEARTBEAT_EVERY); reader: the host
 *   watchdog, which declares the data path stuck when neither heartbeat nor processed moves.
 */
#define RL_EXIT_POLL_EVERY 1024u
#define RL_HEARTBEAT_EVERY 4096u
struct rl_control {
    uint32_t exit_flag;
    uint32_t rsvd0[31];
    uint64_t heartbeat;
    uint64_t processed;
    uint32_t state;
    uint32_t error;
    uint32_t dropped;    /* messages the data path refused (bad slot, bad header) */
    uint32_t rsvd1[25];
};

/**
 * Per-message timestamps written by the data path into a ring of `timestamp_entries`
 * records indexed by message count; read by the host after the run, or behind the
 * `processed` counter by a tap (no polling by the data path). Data-path clock: GPU
 * %globaltimer ns; CPU backend CLOCK_MONOTONIC ns. With nic_cqe_ns (NIC clock) and the peer's
 * send and arrival times (the peer's clock, the same CLOCK_MONOTONIC for fpga-sim on this
 * host), a round trip splits into: wire + NIC in (nic_cqe - sent), data-path turnaround
 * (doorbell - cqe_seen, one clock), and the rest (CQE to data path, doorbell to NIC, NIC +
 * wire out).
 */
struct rl_msg_timestamp {
    uint64_t cqe_seen_ns; /* the data path saw the receive CQE (data-path clock) */
    uint64_t doorbell_ns; /* the data path rang the send doorbell (data-path clock) */
    uint64_t nic_cqe_ns;  /* the NIC wrote the CQE: the CQE's timestamp (NIC clock: CLOCK_MONOTONIC for the software NIC) */
    uint32_t request_id;  /* from the RPC header */
    uint32_t slot;        /* RX slot (imm & 0xfff) */
    uint32_t byte_count;  /* bytes received */
    uint32_t sq_index;    /* send WQE index used for the answer */
    uint32_t profile[2];  /* kernels built with RL_PROFILE: ns from cqe_seen to [0] request loaded, [1] answer written (before the doorbell); else 0 */
};

/**
 * Everything the transceiver loop needs, one struct passed to the kernel by value (or to the
 * CPU backend): the four queues, the RX/TX buffers, the doorbells, control and timestamps.
 */
struct rl_transceiver_desc {
    struct rl_queue_desc sq;  /* send queue (WQEBBs) */
    struct rl_queue_desc rq;  /* receive queue (rl_recv_wqe) */
    struct rl_queue_desc scq; /* send completion queue (rl_cqe64) */
    struct rl_queue_desc rcq; /* receive completion queue (rl_cqe64) */
    uint64_t rx_buffer;       /* RX slots: the FPGA writes slot k at rx_buffer + k * rx_slot_stride */
    uint64_t tx_buffer;       /* TX slots: answers too large to go inline */
    uint64_t proxy_doorbell;  /* struct rl_proxy_doorbell * */
    uint64_t control;         /* struct rl_control * */
    uint64_t timestamps;      /* struct rl_msg_timestamp *, or 0 for none */
    uint64_t tx_buffer_iova;  /* tx_buffer as the NIC addresses it (the TX region's virtual address) */
    uint64_t stage_state;     /* device address of the stages' state (tables, per-decoder buffers), or 0 */
    uint32_t rx_slot_stride;
    uint32_t rx_slots;
    uint32_t tx_slot_stride;
    uint32_t tx_lkey;
    uint32_t qpn;             /* our QP number (ctrl.qpn_ds) */
    uint32_t timestamp_entries; /* a power of two, or 0 */
    uint32_t signal_every;    /* request a send CQE every this many WQEs (a power of two) */
    uint32_t rsvd;
    uint64_t uar;             /* the 8-byte MMIO doorbell register (a ConnectX's UAR, or the
                               * software NIC's emulation of one), for RL_DOORBELL_MMIO builds */
};

/* ---------------------------------------------------------------------------------------
 * Layout assertions (the Rust side asserts the same numbers)
 * ------------------------------------------------------------------------------------- */
RL_STATIC_ASSERT(sizeof(struct rl_wqe_ctrl_seg) == 16, "ctrl seg");
RL_STATIC_ASSERT(sizeof(struct rl_wqe_raddr_seg) == 16, "raddr seg");
RL_STATIC_ASSERT(sizeof(struct rl_wqe_data_seg) == 16, "data seg");
RL_STATIC_ASSERT(sizeof(struct rl_recv_wqe) == RL_RECV_WQE_SIZE, "recv wqe");
RL_STATIC_ASSERT(sizeof(struct rl_cqe64) == RL_CQE_SIZE, "cqe64");
RL_OFFSET_ASSERT(struct rl_cqe64, imm_inval_pkey, 36, "cqe imm");
RL_OFFSET_ASSERT(struct rl_cqe64, byte_cnt, 44, "cqe byte_cnt");
RL_OFFSET_ASSERT(struct rl_cqe64, timestamp, 48, "cqe timestamp");
RL_OFFSET_ASSERT(struct rl_cqe64, sop_drop_qpn, 56, "cqe qpn");
RL_OFFSET_ASSERT(struct rl_cqe64, wqe_counter, 60, "cqe wqe_counter");
RL_OFFSET_ASSERT(struct rl_cqe64, op_own, 63, "cqe op_own");
RL_STATIC_ASSERT(sizeof(struct rl_proxy_doorbell) == RL_LINE_SIZE, "proxy doorbell line");
RL_STATIC_ASSERT(sizeof(struct rl_index_line) == RL_LINE_SIZE, "index line");
RL_STATIC_ASSERT(sizeof(struct rl_control) == 2 * RL_LINE_SIZE, "control lines");
RL_OFFSET_ASSERT(struct rl_control, heartbeat, RL_LINE_SIZE, "control: host line / device line");
RL_STATIC_ASSERT(sizeof(struct rl_msg_timestamp) == 48, "timestamp record");
RL_STATIC_ASSERT(sizeof(struct rl_queue_desc) == 24, "queue desc");
RL_STATIC_ASSERT(sizeof(struct rl_transceiver_desc) == 4 * 24 + 7 * 8 + 8 * 4 + 8, "transceiver desc");

/* ---------------------------------------------------------------------------------------
 * The CUDA-Q Realtime RPC header the stages read and write (rocelink_wire::rpc, whose
 * constants a test holds equal to these): magic, function id, arg_len (or status and
 * result_len in a response), request_id, ptp_timestamp; little-endian.
 * ------------------------------------------------------------------------------------- */
#define RL_RPC_REQUEST_MAGIC 0x43555152u  /* 'CUQR' */
#define RL_RPC_RESPONSE_MAGIC 0x43555153u /* 'CUQS' */
#define RL_RPC_HEADER_LEN 24

/* The QEC functions' ids (FNV-1a of their names) and response status codes. */
#define RL_QEC_FN_ENQUEUE 0x7ED8BE82u /* enqueue_syndromes */
#define RL_QEC_FN_GET 0x882D5BA1u     /* get_corrections */
#define RL_QEC_FN_RESET 0x977A59CFu   /* reset_decoder */
#define RL_QEC_OK 0
#define RL_QEC_INVALID_DECODER 1
#define RL_QEC_BAD_REQUEST 2
#define RL_QEC_INTERNAL_ERROR 3
#define RL_QEC_NOT_READY 4
#define RL_QEC_SYNDROMES_DROPPED 6

/* ---------------------------------------------------------------------------------------
 * The state blob of the QEC decoder stage (stages/qec.cuh; device memory, one per
 * chain; built by operator/src/gpu/qec_state.rs on the bindings generated from here):
 *
 *   0                 struct rl_qec_header (256 bytes)
 *   distances_off     uint32_t D[(n+1)*(n+1)]  row-major, boundary = row/column n,
 *                                               RL_QEC_INF = no path (fine_table, u32)
 *   parities_off      uint32_t P[(n+1)*(n+1)]  observables flipped along that path
 *   decoders_off      struct rl_qec_decoder[decoders]  (128 bytes each)
 *   shots_off         uint32_t shot[decoders][shot_words]  detection bits, LSB first
 *   scratch_off       scratch_blocks x scratch_stride bytes: each block's work space for
 *                     shots above K (device memory only: allocated, never uploaded)
 *
 * Sections start on 128-byte boundaries. Written by the host before the launch; after it,
 * the tables and the rest of the header are read-only, and the decoder records, shots and
 * `invalid_decoder` are written by this stage only (each record and shot by one block, one
 * request at a time; `invalid_decoder` with an atomic add).
 * ------------------------------------------------------------------------------------- */
#define RL_QEC_MAGIC 0x31434551u /* 'QEC1' */
/** Stream thresholds the header holds. */
#define RL_QEC_MAX_STREAM 28

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
    uint32_t scratch_edges;      /*  36: edges of the largest cluster matching a block's scratch takes */
    long long mapping_id;        /*  40 */
    double scale;                /*  48: table units per ln((1-p)/p) unit (weight = sum / scale) */
    uint64_t distances_off;      /*  56: byte offsets from the start of the blob */
    uint64_t parities_off;       /*  64 */
    uint64_t decoders_off;       /*  72 */
    uint64_t shots_off;          /*  80 */
    uint64_t total_bytes;        /*  88 */
    uint64_t invalid_decoder;    /*  96: requests naming a decoder that does not exist (device-written) */
    uint64_t token;              /* 104: nonzero, random per build: keys the stage's shared-memory copy */
    uint64_t scratch_off;        /* 112: the blocks' scratch (device-only, not uploaded) */
    uint32_t scratch_stride;     /* 120: bytes of one block's scratch */
    uint32_t scratch_blocks;     /* 124: blocks with a scratch area (block b uses the b-th) */
    uint32_t stream_count;       /* 128: thresholds in `stream` (0: shots are decoded whole) */
    uint32_t rsvd[3];            /* 132 */
    /** 144: strictly ascending bit counts below n, the ends of a shot's messages but the last
     * (exact.rs stream_thresholds): the stage settles the clusters of the defects below each
     * as the shot passes it (exact.rs "Streaming"); the answer depends on them, not on when
     * the messages came. */
    uint32_t stream[RL_QEC_MAX_STREAM];
};

/* A block's scratch, for a shot of more than K defects: the defects, their clusters and
 * duals, and the exact matchers of its clusters of three defects or more
 * (kernels/stages/blossom.cuh: c vertices for c defects, the boundary a cost per vertex; up
 * to `scratch_edges` edges in all). The host sizes
 * scratch_stride as RL_QEC_SCRATCH_DEFECT_BYTES * n + RL_PM_VERTEX_BYTES * n +
 * RL_PM_EDGE_BYTES * scratch_edges + RL_PM_SLACK_BYTES, rounded up to 128; the stage checks
 * the matcher's own count (rl_pm_bytes) against it and, where it does not fit, answers such
 * a shot OVERFLOW rather than write past it. */
#define RL_QEC_SCRATCH_DEFECT_BYTES 68
#define RL_PM_VERTEX_BYTES 246
#define RL_PM_EDGE_BYTES 40
#define RL_PM_SLACK_BYTES 1024

/** A decoder id's counters, monotonic: the CPU stage's (`SessionCounters` in session.rs is
 * this struct) and the GPU stage's, one definition. */
struct rl_qec_counters {
    /** `enqueue_syndromes` messages accepted into a shot. */
    uint64_t messages;
    /** Shots decoded. */
    uint64_t shots;
    /** Shots not decoded (the GPU stage: a cluster over its scratch; never on the CPU). */
    uint64_t overflows;
    /** Shots without a perfect matching. */
    uint64_t unmatchable;
    /** Messages answered `SYNDROMES_DROPPED`. */
    uint64_t dropped_messages;
    /** Unfinished shots discarded by a gap or a bad message. */
    uint64_t dropped_shots;
    /** Unfinished shots abandoned by a new `counter == 0`. */
    uint64_t abandoned_shots;
    /** Requests answered `BAD_REQUEST`. */
    uint64_t bad_requests;
};

/** One decoder id's state: session.rs `Slot` (shot assembly) and its counters. */
struct rl_qec_decoder {
    uint32_t bits;                   /*   0: detection bits of the shot assembled so far */
    uint32_t in_shot;                /*   4: a shot is being assembled */
    long long next_counter;          /*   8: the counter the next message must carry */
    uint64_t corrections;            /*  16: XOR of every decoded shot's observables */
    struct rl_qec_counters counters; /*  24: messages .. bad_requests (80) */
    uint64_t rsvd[5];                /*  88 */
};

RL_STATIC_ASSERT(sizeof(struct rl_qec_header) == 256, "qec header");
RL_STATIC_ASSERT(sizeof(struct rl_qec_decoder) == 128, "qec decoder record");
RL_OFFSET_ASSERT(struct rl_qec_header, mapping_id, 40, "qec header: mapping_id");
RL_OFFSET_ASSERT(struct rl_qec_header, scale, 48, "qec header: scale");
RL_OFFSET_ASSERT(struct rl_qec_header, invalid_decoder, 96, "qec header: invalid_decoder");
RL_OFFSET_ASSERT(struct rl_qec_header, token, 104, "qec header: token");
RL_OFFSET_ASSERT(struct rl_qec_header, scratch_off, 112, "qec header: scratch_off");
RL_OFFSET_ASSERT(struct rl_qec_header, scratch_blocks, 124, "qec header: scratch_blocks");
RL_OFFSET_ASSERT(struct rl_qec_header, stream, 144, "qec header: stream");
RL_OFFSET_ASSERT(struct rl_qec_decoder, next_counter, 8, "qec decoder: next_counter");
RL_STATIC_ASSERT(sizeof(struct rl_qec_counters) == 64, "qec counters");
RL_OFFSET_ASSERT(struct rl_qec_decoder, counters, 24, "qec decoder: counters");
RL_OFFSET_ASSERT(struct rl_qec_counters, bad_requests, 56, "qec counters: bad_requests");

#endif /* ROCELINK_ABI_H */
