/*
 * rocelink as a CUDA-Q Realtime transport: the bridge provider interface, version 3, as
 * librocelink_cudaq_bridge.so implements it (docs/PROTOCOLS.md 5), and rocelink's two
 * extensions.
 *
 * A dispatcher loads the library (dlopen, or CUDAQ_REALTIME_BRIDGE_LIB) and calls
 * cudaq_realtime_get_bridge_interface(). The layouts are the ones CUDA-Q Realtime's dispatcher
 * uses; declare them from this header or from NVIDIA's, not from both in one file.
 *
 * Rust: cudaq-bridge/src/abi.rs holds the same layouts; a test compiles a C program against
 * this header and compares every size and offset.
 */
#ifndef ROCELINK_CUDAQ_BRIDGE_H
#define ROCELINK_CUDAQ_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every entry returns one of these. */
typedef enum {
  CUDAQ_OK = 0,
  CUDAQ_ERR_INVALID_ARG = 1, /* a bad argument, a NULL pointer, a dead handle, a step out of order */
  CUDAQ_ERR_INTERNAL = 2,    /* failed here or at the peer; the reason is logged on stderr */
  CUDAQ_ERR_CUDA = 3,
  CUDAQ_ERR_UNSUPPORTED = 4
} cudaq_status_t;

typedef enum {
  RING_BUFFER = 0, /* get_transport_context fills a cudaq_ringbuffer_t */
  UNIFIED = 1      /* ... a cudaq_unified_dispatch_ctx_t (launch_fn NULL: use get_cpu_dataplane) */
} cudaq_realtime_transport_context_t;

typedef enum {
  CUDAQ_RX_READY = 0, /* a whole request is in *out_slot */
  CUDAQ_RX_EMPTY = 1
} cudaq_rx_status_t;

typedef enum {
  CUDAQ_DISPATCH_DEVICE_CALL = 0,
  CUDAQ_DISPATCH_GRAPH_LAUNCH = 1,
  CUDAQ_DISPATCH_HOST_CALL = 2
} cudaq_dispatch_mode_t;

#define CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION 3

/* RPC messages in a slot (docs/PROTOCOLS.md 3), little-endian. */
#define CUDAQ_RPC_MAGIC_REQUEST 0x43555152u  /* 'CUQR' */
#define CUDAQ_RPC_MAGIC_RESPONSE 0x43555153u /* 'CUQS' */
#define CUDAQ_RPC_HEADER_SIZE 24u

/* tx_flags values that are no slot address: a response still being computed, and one that
 * failed (tag in the top 16 bits, the error below). The provider sends neither. */
#define CUDAQ_TX_FLAG_IN_FLIGHT 0xEEEEEEEEEEEEEEEEull
#define CUDAQ_TX_FLAG_ERROR_TAG 0xDEADull

/* A request: this header, then arg_len argument bytes. */
typedef struct {
  uint32_t magic;       /* CUDAQ_RPC_MAGIC_REQUEST */
  uint32_t function_id; /* FNV-1a 32 of the function's name */
  uint32_t arg_len;
  uint32_t request_id;
  uint64_t ptp_timestamp; /* the sender's send time */
} rocelink_rpc_header_t;

/* A response: this header, then result_len bytes; request_id and ptp_timestamp echoed. */
typedef struct {
  uint32_t magic; /* CUDAQ_RPC_MAGIC_RESPONSE */
  int32_t status; /* 0 ok, > 0 handler error, < 0 protocol error */
  uint32_t result_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} rocelink_rpc_response_t;

typedef void *cudaq_realtime_bridge_handle_t;

/*
 * The ring. Flag i is 0 while slot i is empty, else the address of slot i's data:
 * - rx_flags[i]: the provider writes a whole request into RX slot i, then stores the slot's
 *   host address with release ordering; the dispatcher loads it with acquire ordering and
 *   stores 0 when done. Slots fill in FIFO order.
 * - tx_flags[i]: the dispatcher writes the response into TX slot i, then stores that slot's
 *   address with release ordering (before it clears rx_flags[i]); the provider sends it and
 *   stores 0.
 * - Slot i takes the next request when both flags are 0; a request that finds its slot in use
 *   (after a short grace), a request longer than a slot and a frame that is no CUQR request are
 *   counted and dropped before the ring.
 * The device views point into pinned host memory mapped into the GPU; on a machine without
 * CUDA the ring is plain host memory and the device views equal the host views.
 */
typedef struct {
  volatile uint64_t *rx_flags; /* device views */
  volatile uint64_t *tx_flags;
  uint8_t *rx_data;
  uint8_t *tx_data;
  size_t rx_stride_sz; /* bytes per RX slot */
  size_t tx_stride_sz; /* bytes per TX slot */
  volatile uint64_t *rx_flags_host; /* host views of the same four arrays */
  volatile uint64_t *tx_flags_host;
  uint8_t *rx_data_host;
  uint8_t *tx_data_host;
} cudaq_ringbuffer_t;

/* Non-blocking: CUDAQ_RX_READY with the next slot (FIFO) holding a whole request, else
 * CUDAQ_RX_EMPTY. The slot stays the caller's until tx_publish(slot), or, when the request is
 * answered with nothing, until the next rx_poll. One dispatcher thread. */
typedef cudaq_rx_status_t (*cudaq_cpu_rx_poll_fn_t)(void *ctx, uint32_t *out_slot);
/* Sends the response in TX slot `slot` (slot-addressed: any order). CUDAQ_ERR_INVALID_ARG for
 * a slot outside the ring or one whose last response is not sent yet; CUDAQ_ERR_INTERNAL when
 * the provider is not launched. */
typedef cudaq_status_t (*cudaq_cpu_tx_publish_fn_t)(void *ctx, uint32_t slot);

typedef struct {
  void *ctx; /* passed to both hooks; valid until the bridge is destroyed */
  cudaq_ringbuffer_t ring;
  cudaq_cpu_rx_poll_fn_t rx_poll;
  cudaq_cpu_tx_publish_fn_t tx_publish;
} cudaq_cpu_dataplane_t;

typedef struct {
  void *launch_fn; /* NULL: this provider has no launch function of its own */
  void *transport_ctx;
} cudaq_unified_dispatch_ctx_t;

typedef struct {
  uint8_t type_id;
  uint8_t reserved[3];
  uint32_t size_bytes;
  uint32_t num_elements;
} cudaq_type_desc_t;

typedef struct {
  uint8_t num_args;
  uint8_t num_results;
  uint16_t reserved;
  cudaq_type_desc_t args[8];
  cudaq_type_desc_t results[4];
} cudaq_handler_schema_t;

/* A HOST_CALL handler: the request at rx, the response to write at tx, slot_size bytes each. */
typedef void (*cudaq_host_rpc_fn_t)(const void *rx, void *tx, size_t slot_size);

typedef struct {
  union {
    void *device_fn_ptr;         /* CUDAQ_DISPATCH_DEVICE_CALL */
    void *graph_exec;            /* CUDAQ_DISPATCH_GRAPH_LAUNCH (a cudaGraphExec_t) */
    cudaq_host_rpc_fn_t host_fn; /* CUDAQ_DISPATCH_HOST_CALL */
  } handler;
  uint32_t function_id; /* FNV-1a 32 of the function's name */
  uint8_t dispatch_mode; /* cudaq_dispatch_mode_t */
  uint8_t reserved[3];
  cudaq_handler_schema_t schema;
  uint64_t routing_key;
} cudaq_function_entry_t;

typedef struct {
  cudaq_function_entry_t *entries;
  uint32_t count;
} cudaq_function_table_t;

/* The interface, in this order. Every entry of this provider is filled. */
typedef struct {
  int version; /* CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION */
  cudaq_status_t (*create)(cudaq_realtime_bridge_handle_t *out, int argc, char **argv);
  cudaq_status_t (*destroy)(cudaq_realtime_bridge_handle_t);
  cudaq_status_t (*get_transport_context)(cudaq_realtime_bridge_handle_t, cudaq_realtime_transport_context_t,
                                          void *out);
  cudaq_status_t (*connect)(cudaq_realtime_bridge_handle_t);
  cudaq_status_t (*launch)(cudaq_realtime_bridge_handle_t);
  cudaq_status_t (*disconnect)(cudaq_realtime_bridge_handle_t);
  /* version 2 */
  cudaq_status_t (*get_cpu_dataplane)(cudaq_realtime_bridge_handle_t, cudaq_cpu_dataplane_t *out);
  cudaq_status_t (*get_endpoint_info)(cudaq_realtime_bridge_handle_t, char *buf, size_t buf_len);
  cudaq_status_t (*get_ring_geometry)(cudaq_realtime_bridge_handle_t, uint32_t *out_num_slots,
                                      uint32_t *out_slot_size);
  /* version 3 */
  cudaq_status_t (*set_function_table)(cudaq_realtime_bridge_handle_t, const cudaq_function_table_t *table);
} cudaq_realtime_bridge_interface_t;

/* The static interface (never written, never freed). */
cudaq_realtime_bridge_interface_t *cudaq_realtime_get_bridge_interface(void);

/* rocelink extension: what the provider counted, one line of key=value pairs (rx_requests,
 * rx_ring_full, rx_too_long, rx_not_rpc, rx_bad_completion, tx_responses, tx_bad_responses,
 * tx_dispatch_errors, cpu_unanswered, then the NIC's nic_*). Also at the end of
 * get_endpoint_info's line. */
cudaq_status_t rocelink_cudaq_bridge_counters(cudaq_realtime_bridge_handle_t, char *buf, size_t buf_len);
typedef cudaq_status_t (*rocelink_cudaq_bridge_counters_fn)(cudaq_realtime_bridge_handle_t, char *, size_t);

/* rocelink extension, for testing against a peer with a traffic player (fpga-sim): runs it
 * through one run of spec "function=NAME count=N size=BYTES [rate=PER_SECOND] [timeout_s=S]"
 * (closed loop without a rate) and writes what the peer captured into report as key=value
 * pairs: sent, answered, ok (answers the peer found right: echo = the args, increment = the
 * args each plus one), lost, duplicated, corrupted, reordered, uncaptured, stopped_by,
 * elapsed_ms, rtt_p50_ns, rtt_p99_ns, rtt_max_ns. Blocks until the run ends; only while
 * launched; disconnect (from another thread) ends it. */
cudaq_status_t rocelink_cudaq_bridge_run_peer(cudaq_realtime_bridge_handle_t, const char *spec, char *report,
                                              size_t report_len);
typedef cudaq_status_t (*rocelink_cudaq_bridge_run_peer_fn)(cudaq_realtime_bridge_handle_t, const char *, char *,
                                                            size_t);

#ifdef __cplusplus
}
#endif

#endif /* ROCELINK_CUDAQ_BRIDGE_H */
