/*
 * A CUDA-Q Realtime style dispatcher in C, for the provider's tests (tests/c_dispatcher.rs
 * compiles and runs it): it loads the provider as a dispatcher does (dlopen, then
 * cudaq_realtime_get_bridge_interface), checks the interface, and serves requests with a
 * handler table keyed by FNV-1a 32 (echo, increment) through the CPU data plane (rx_poll /
 * tx_publish) or the RING_BUFFER context's host views.
 *
 *   dispatcher LIB layout
 *   dispatcher LIB serve [--plane cpu|ring] [--pause-first-run] [--run SPEC]... -- PROVIDER ARGS
 *   dispatcher LIB bad-args
 *   dispatcher LIB no-peer -- PROVIDER ARGS
 *   dispatcher LIB disconnect-under-load -- PROVIDER ARGS
 *
 * Each scenario checks every status it gets and exits 1 at the first unexpected one (saying
 * which); what it measured it prints as "key: key=value ..." lines for the test to check.
 */
#define _GNU_SOURCE
#include "rocelink_cudaq_bridge.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond, ...)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "dispatcher: FAILED at line %d: %s: ", __LINE__, #cond);     \
      fprintf(stderr, __VA_ARGS__);                                                \
      fputc('\n', stderr);                                                         \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static cudaq_realtime_bridge_interface_t *api;
static rocelink_cudaq_bridge_run_peer_fn run_peer;
static rocelink_cudaq_bridge_counters_fn counters;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t fnv1a32(const char *s) {
  uint32_t h = 0x811C9DC5u;
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 0x01000193u;
  }
  return h;
}

/* The handlers: a response with status 0 whose result is the args (echo) or the args each
 * plus one (increment); request_id and ptp_timestamp echoed. */
static void answer(const void *rx, void *tx, size_t slot_size, int increment) {
  rocelink_rpc_header_t h;
  memcpy(&h, rx, sizeof h);
  rocelink_rpc_response_t r = {CUDAQ_RPC_MAGIC_RESPONSE, 0, h.arg_len, h.request_id, h.ptp_timestamp};
  if (sizeof r + (size_t)h.arg_len > slot_size) {
    r.status = 2; /* BAD_REQUEST: no room for the result */
    r.result_len = 0;
  }
  memcpy(tx, &r, sizeof r);
  const uint8_t *a = (const uint8_t *)rx + sizeof h;
  uint8_t *b = (uint8_t *)tx + sizeof r;
  for (uint32_t i = 0; i < r.result_len; i++) b[i] = (uint8_t)(a[i] + (increment ? 1 : 0));
}
static void echo_fn(const void *rx, void *tx, size_t n) { answer(rx, tx, n, 0); }
static void increment_fn(const void *rx, void *tx, size_t n) { answer(rx, tx, n, 1); }

static cudaq_function_entry_t entries[2];
static cudaq_function_table_t table = {entries, 2};

static void make_table(void) {
  memset(entries, 0, sizeof entries);
  entries[0].handler.host_fn = echo_fn;
  entries[0].function_id = fnv1a32("echo");
  entries[0].dispatch_mode = CUDAQ_DISPATCH_HOST_CALL;
  entries[1].handler.host_fn = increment_fn;
  entries[1].function_id = fnv1a32("increment");
  entries[1].dispatch_mode = CUDAQ_DISPATCH_HOST_CALL;
}

static const cudaq_function_entry_t *lookup(uint32_t id) {
  for (uint32_t i = 0; i < table.count; i++)
    if (table.entries[i].function_id == id) return &table.entries[i];
  return NULL;
}

static void load(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL, "dlopen %s: %s", lib, dlerror());
  cudaq_realtime_bridge_interface_t *(*get)(void) =
      (cudaq_realtime_bridge_interface_t * (*)(void))(uintptr_t)dlsym(h, "cudaq_realtime_get_bridge_interface");
  CHECK(get != NULL, "dlsym cudaq_realtime_get_bridge_interface: %s", dlerror());
  api = get();
  CHECK(api != NULL, "the interface is NULL");
  CHECK(api == get(), "the interface is one static instance");
  CHECK(api->version == CUDAQ_REALTIME_BRIDGE_INTERFACE_VERSION, "version %d", api->version);
  CHECK(api->create && api->destroy && api->get_transport_context && api->connect && api->launch &&
            api->disconnect && api->get_cpu_dataplane && api->get_endpoint_info && api->get_ring_geometry &&
            api->set_function_table,
        "an entry is NULL");
  run_peer = (rocelink_cudaq_bridge_run_peer_fn)(uintptr_t)dlsym(h, "rocelink_cudaq_bridge_run_peer");
  counters = (rocelink_cudaq_bridge_counters_fn)(uintptr_t)dlsym(h, "rocelink_cudaq_bridge_counters");
  CHECK(run_peer && counters, "an extension is missing");
}

static cudaq_realtime_bridge_handle_t create(int argc, char **argv) {
  cudaq_realtime_bridge_handle_t b = NULL;
  cudaq_status_t s = api->create(&b, argc, argv);
  CHECK(s == CUDAQ_OK && b != NULL, "create: status %d", s);
  return b;
}

static void print_counters(cudaq_realtime_bridge_handle_t b) {
  char line[4096];
  CHECK(counters(b, line, sizeof line) == CUDAQ_OK, "counters");
  printf("counters: %s\n", line);
}

/* --- the dispatcher thread ------------------------------------------------------------- */

struct dispatcher {
  int ring_plane; /* 0: rx_poll / tx_publish; 1: the RING_BUFFER host views */
  cudaq_cpu_dataplane_t dp;
  cudaq_ringbuffer_t ring;
  uint32_t slots;
  atomic_int stop;
  atomic_int paused;
  atomic_ulong served;     /* answered */
  atomic_ulong unknown;    /* no CUQR header or no handler: dropped */
  atomic_ulong refused;    /* tx_publish said no */
  atomic_ulong bad_flags;  /* an rx flag that is not its slot's host address */
};

static void *dispatch(void *arg) {
  struct dispatcher *d = arg;
  const cudaq_ringbuffer_t *r = d->ring_plane ? &d->ring : &d->dp.ring;
  size_t slot_size = r->rx_stride_sz < r->tx_stride_sz ? r->rx_stride_sz : r->tx_stride_sz;
  uint32_t cursor = 0;
  while (!atomic_load_explicit(&d->stop, memory_order_relaxed)) {
    if (atomic_load_explicit(&d->paused, memory_order_relaxed)) {
      sched_yield();
      continue;
    }
    uint32_t slot;
    const uint8_t *rx;
    _Atomic uint64_t *rx_flag = NULL;
    if (!d->ring_plane) {
      if (d->dp.rx_poll(d->dp.ctx, &slot) != CUDAQ_RX_READY) {
        sched_yield();
        continue;
      }
      CHECK(slot < d->slots, "rx_poll gave slot %u of %u", slot, d->slots);
      rx = r->rx_data_host + (size_t)slot * r->rx_stride_sz;
    } else {
      rx_flag = (_Atomic uint64_t *)(uintptr_t)&r->rx_flags_host[cursor];
      uint64_t v = atomic_load_explicit(rx_flag, memory_order_acquire);
      if (v == 0) {
        sched_yield();
        continue;
      }
      slot = cursor;
      cursor = (cursor + 1) % d->slots;
      rx = (const uint8_t *)(uintptr_t)v;
      if (rx != r->rx_data_host + (size_t)slot * r->rx_stride_sz) {
        atomic_fetch_add(&d->bad_flags, 1);
        rx = r->rx_data_host + (size_t)slot * r->rx_stride_sz;
      }
    }
    rocelink_rpc_header_t h;
    memcpy(&h, rx, sizeof h);
    const cudaq_function_entry_t *e = h.magic == CUDAQ_RPC_MAGIC_REQUEST ? lookup(h.function_id) : NULL;
    if (!e) {
      atomic_fetch_add(&d->unknown, 1);
      if (rx_flag) atomic_store_explicit(rx_flag, 0, memory_order_release);
      continue;
    }
    uint8_t *tx = r->tx_data_host + (size_t)slot * r->tx_stride_sz;
    e->handler.host_fn(rx, tx, slot_size);
    if (!d->ring_plane) {
      if (d->dp.tx_publish(d->dp.ctx, slot) == CUDAQ_OK)
        atomic_fetch_add(&d->served, 1);
      else
        atomic_fetch_add(&d->refused, 1);
    } else {
      /* the response first, then the request released (the ring contract) */
      _Atomic uint64_t *tx_flag = (_Atomic uint64_t *)(uintptr_t)&r->tx_flags_host[slot];
      atomic_store_explicit(tx_flag, (uint64_t)(uintptr_t)tx, memory_order_release);
      atomic_store_explicit(rx_flag, 0, memory_order_release);
      atomic_fetch_add(&d->served, 1);
    }
  }
  return NULL;
}

/* create .. launch, with every query checked on the way; starts the dispatcher thread. */
static cudaq_realtime_bridge_handle_t bring_up(int argc, char **argv, int ring_plane, int no_launch,
                                               struct dispatcher *d, pthread_t *t) {
  cudaq_realtime_bridge_handle_t b = create(argc, argv);
  char info[4096];
  CHECK(api->get_endpoint_info(b, info, sizeof info) == CUDAQ_OK, "get_endpoint_info after create");
  CHECK(strstr(info, "qp=0x") && strstr(info, "rkey=0x") && strstr(info, "state=created"), "endpoint %s", info);
  printf("endpoint: %s\n", info);
  char tiny[8];
  CHECK(api->get_endpoint_info(b, tiny, sizeof tiny) == CUDAQ_ERR_INVALID_ARG, "a line cut short is refused");
  CHECK(strlen(tiny) == sizeof tiny - 1, "... and still NUL-terminated");
  CHECK(api->get_endpoint_info(b, NULL, 10) == CUDAQ_ERR_INVALID_ARG, "NULL buffer");

  uint32_t slots = 0, slot_size = 0;
  CHECK(api->get_ring_geometry(b, &slots, &slot_size) == CUDAQ_OK && slots > 0 && slot_size >= 64, "geometry");
  CHECK(api->get_ring_geometry(b, NULL, &slot_size) == CUDAQ_ERR_INVALID_ARG, "geometry NULL");
  CHECK(api->set_function_table(b, &table) == CUDAQ_OK, "set_function_table");
  CHECK(api->set_function_table(b, NULL) == CUDAQ_ERR_INVALID_ARG, "set_function_table NULL");

  cudaq_ringbuffer_t ring;
  memset(&ring, 0, sizeof ring);
  CHECK(api->get_transport_context(b, RING_BUFFER, &ring) == CUDAQ_OK, "RING_BUFFER");
  CHECK(ring.rx_flags && ring.tx_flags && ring.rx_data && ring.tx_data && ring.rx_flags_host &&
            ring.tx_flags_host && ring.rx_data_host && ring.tx_data_host,
        "a ring view is NULL");
  CHECK(ring.rx_stride_sz == slot_size && ring.tx_stride_sz == slot_size, "strides %zu %zu", ring.rx_stride_sz,
        ring.tx_stride_sz);
  printf("views: device_is_host=%d rx_flags=%p rx_flags_host=%p tx_data=%p tx_data_host=%p\n",
         (void *)ring.rx_flags == (void *)ring.rx_flags_host && ring.tx_data == ring.tx_data_host,
         (void *)ring.rx_flags, (void *)ring.rx_flags_host, (void *)ring.tx_data, (void *)ring.tx_data_host);
  cudaq_unified_dispatch_ctx_t unified = {(void *)1, NULL};
  CHECK(api->get_transport_context(b, UNIFIED, &unified) == CUDAQ_OK && unified.launch_fn == NULL, "UNIFIED");
  CHECK(api->get_transport_context(b, (cudaq_realtime_transport_context_t)7, &ring) == CUDAQ_ERR_INVALID_ARG,
        "unknown context");
  CHECK(api->get_transport_context(b, RING_BUFFER, NULL) == CUDAQ_ERR_INVALID_ARG, "NULL context");

  memset(d, 0, sizeof *d);
  d->ring_plane = ring_plane;
  d->ring = ring;
  d->slots = slots;
  CHECK(api->get_cpu_dataplane(b, &d->dp) == CUDAQ_OK, "get_cpu_dataplane");
  CHECK(d->dp.ctx && d->dp.rx_poll && d->dp.tx_publish, "a CPU data plane hook is NULL");
  CHECK(memcmp(&d->dp.ring, &ring, sizeof ring) == 0, "the CPU data plane's ring is the RING_BUFFER one");
  CHECK(api->get_cpu_dataplane(b, NULL) == CUDAQ_ERR_INVALID_ARG, "NULL data plane");

  CHECK(api->launch(b) == CUDAQ_ERR_INVALID_ARG, "launch before connect is refused");
  double t0 = now_s();
  cudaq_status_t s = api->connect(b);
  CHECK(s == CUDAQ_OK, "connect: status %d", s);
  printf("connect: seconds=%.3f\n", now_s() - t0);
  CHECK(api->connect(b) == CUDAQ_OK, "connect again");
  /* NVIDIA's unified consumers take the CPU data plane and never call launch: the provider
   * launches itself once connected (--no-launch checks that) */
  if (!no_launch) {
    CHECK(api->launch(b) == CUDAQ_OK, "launch");
    CHECK(api->launch(b) == CUDAQ_OK, "launch again");
  }
  CHECK(api->get_endpoint_info(b, info, sizeof info) == CUDAQ_OK && strstr(info, "state=launched"), "%s", info);
  CHECK(pthread_create(t, NULL, dispatch, d) == 0, "pthread_create");
  return b;
}

static void tear_down(cudaq_realtime_bridge_handle_t b, struct dispatcher *d, pthread_t t) {
  CHECK(api->disconnect(b) == CUDAQ_OK, "disconnect");
  CHECK(api->disconnect(b) == CUDAQ_OK, "disconnect again");
  if (!d->ring_plane) CHECK(d->dp.tx_publish(d->dp.ctx, 0) == CUDAQ_ERR_INTERNAL, "tx_publish after disconnect");
  atomic_store(&d->stop, 1);
  pthread_join(t, NULL);
  printf("dispatcher: served=%lu unknown=%lu refused=%lu bad_flags=%lu\n", atomic_load(&d->served),
         atomic_load(&d->unknown), atomic_load(&d->refused), atomic_load(&d->bad_flags));
  print_counters(b);
  CHECK(api->destroy(b) == CUDAQ_OK, "destroy");
  CHECK(api->destroy(b) == CUDAQ_OK, "destroy twice");
  CHECK(api->destroy(NULL) == CUDAQ_OK, "destroy NULL");
  CHECK(api->connect(b) == CUDAQ_ERR_INVALID_ARG, "a destroyed handle is refused");
  CHECK(counters(b, (char[64]){0}, 64) == CUDAQ_ERR_INVALID_ARG, "a destroyed handle is refused");
}

/* The value of key in a key=value line, or -1. */
static long field(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "%s=", key);
  for (const char *p = strstr(line, k); p; p = strstr(p + 1, k))
    if (p == line || p[-1] == ' ') return strtol(p + strlen(k), NULL, 10);
  return -1;
}

/* Waits until the provider has sent an answer for every request it put in the ring. */
static void wait_drained(cudaq_realtime_bridge_handle_t b) {
  double until = now_s() + 5;
  char line[4096];
  while (now_s() < until) {
    CHECK(counters(b, line, sizeof line) == CUDAQ_OK, "counters");
    long in = field(line, "rx_requests"), out = field(line, "tx_responses"), drop = field(line, "cpu_unanswered");
    if (in >= 0 && out + drop >= in) return;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  CHECK(0, "the ring did not drain: %s", line);
}

static int serve(int argc, char **argv, int pargc, char **pargv) {
  int ring_plane = 0, pause_first = 0, no_launch = 0;
  const char *runs[16];
  int nruns = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--plane") && i + 1 < argc) {
      ring_plane = !strcmp(argv[++i], "ring");
    } else if (!strcmp(argv[i], "--pause-first-run")) {
      pause_first = 1;
    } else if (!strcmp(argv[i], "--no-launch")) {
      no_launch = 1;
    } else if (!strcmp(argv[i], "--run") && i + 1 < argc && nruns < 16) {
      runs[nruns++] = argv[++i];
    } else {
      CHECK(0, "unknown serve option %s", argv[i]);
    }
  }
  struct dispatcher d;
  pthread_t t;
  cudaq_realtime_bridge_handle_t b = bring_up(pargc, pargv, ring_plane, no_launch, &d, &t);
  for (int i = 0; i < nruns; i++) {
    atomic_store(&d.paused, pause_first && i == 0);
    char report[1024];
    double t0 = now_s();
    cudaq_status_t s = run_peer(b, runs[i], report, sizeof report);
    CHECK(s == CUDAQ_OK, "run_peer %s: status %d", runs[i], s);
    printf("run: %s => %s seconds=%.2f\n", runs[i], report, now_s() - t0);
    atomic_store(&d.paused, 0);
    /* answers to this run's requests leave before the next run starts */
    wait_drained(b);
    struct timespec settle = {0, 20000000};
    nanosleep(&settle, NULL);
  }
  tear_down(b, &d, t);
  return 0;
}

struct load_run {
  cudaq_realtime_bridge_handle_t b;
  char report[1024];
  cudaq_status_t status;
};

static void *run_in_thread(void *arg) {
  struct load_run *l = arg;
  l->status = run_peer(l->b, "function=echo count=2000000 size=64 rate=2000000 timeout_s=60", l->report,
                       sizeof l->report);
  return NULL;
}

static int disconnect_under_load(int pargc, char **pargv) {
  struct dispatcher d;
  pthread_t t, runner;
  cudaq_realtime_bridge_handle_t b = bring_up(pargc, pargv, 0, 0, &d, &t);
  struct load_run l = {b, {0}, CUDAQ_ERR_INTERNAL};
  CHECK(pthread_create(&runner, NULL, run_in_thread, &l) == 0, "pthread_create");
  double until = now_s() + 30;
  while (atomic_load(&d.served) < 5000 && now_s() < until) sched_yield();
  CHECK(atomic_load(&d.served) >= 5000, "no load: %lu served", atomic_load(&d.served));
  double t0 = now_s();
  cudaq_status_t s = api->disconnect(b);
  double took = now_s() - t0;
  CHECK(s == CUDAQ_OK, "disconnect under load: status %d", s);
  t0 = now_s();
  pthread_join(runner, NULL);
  CHECK(l.status == CUDAQ_OK, "the run under load: status %d", l.status);
  printf("disconnect: seconds=%.3f run_ended_after=%.3f\n", took, now_s() - t0);
  printf("run: load => %s\n", l.report);
  CHECK(run_peer(b, "count=1", l.report, sizeof l.report) == CUDAQ_ERR_INVALID_ARG, "no run once disconnected");
  tear_down(b, &d, t);
  return 0;
}

static int bad_args(void) {
  static char *bad[][6] = {
      {"--wire", "tcp"},
      {"--slots", "0"},
      {"--slots"},
      {"--slot-size", "100"},
      {"--slot-size=8192"},
      {"--peer", "nowhere"},
      {"--wire", "inproc", "--peer", "127.0.0.1:9"},
      {"--host-ip", "999.1.1.1"},
      {"--cores", "x"},
      {"--ring-memory", "disk"},
      {"--graph", "/nonexistent/graph.ron"},
  };
  int n = (int)(sizeof bad / sizeof bad[0]);
  for (int i = 0; i < n; i++) {
    int argc = 0;
    while (argc < 6 && bad[i][argc]) argc++;
    cudaq_realtime_bridge_handle_t b = (void *)1;
    cudaq_status_t s = api->create(&b, argc, bad[i]);
    CHECK(s == CUDAQ_ERR_INVALID_ARG && b == NULL, "create %s %s: status %d", bad[i][0], argc > 1 ? bad[i][1] : "",
          s);
  }
  CHECK(api->create(NULL, 0, NULL) == CUDAQ_ERR_INVALID_ARG, "create without a handle pointer");
  cudaq_realtime_bridge_handle_t b = NULL;
  CHECK(api->create(&b, -1, NULL) == CUDAQ_ERR_INVALID_ARG, "argc -1");
  CHECK(api->create(&b, 2, NULL) == CUDAQ_ERR_INVALID_ARG, "argv NULL");
  /* arguments of others, and a program name, are ignored */
  char *others[] = {"decoding_server", "--unified", "--port=0", "--num-slots=8", "--slot-size", "256", "--wire=inproc"};
  b = create(7, others);
  uint32_t slots = 0, size = 0;
  CHECK(api->get_ring_geometry(b, &slots, &size) == CUDAQ_OK && slots == 8 && size == 256, "%u x %u", slots, size);
  CHECK(api->destroy(b) == CUDAQ_OK, "destroy");
  CHECK(api->connect((void *)0x1234) == CUDAQ_ERR_INVALID_ARG, "a handle that never was");
  printf("bad-args: refused=%d\n", n + 3);
  return 0;
}

static int no_peer(int pargc, char **pargv) {
  cudaq_realtime_bridge_handle_t b = create(pargc, pargv);
  CHECK(api->launch(b) == CUDAQ_ERR_INVALID_ARG, "launch before connect");
  double t0 = now_s();
  cudaq_status_t s = api->connect(b);
  double took = now_s() - t0;
  CHECK(s != CUDAQ_OK, "connect to a peer that is not there succeeded");
  printf("no-peer: connect_status=%d seconds=%.3f\n", s, took);
  CHECK(api->launch(b) == CUDAQ_ERR_INVALID_ARG, "launch without a peer");
  char report[256];
  CHECK(run_peer(b, "count=1", report, sizeof report) == CUDAQ_ERR_INVALID_ARG, "run_peer before launch");
  CHECK(api->disconnect(b) == CUDAQ_OK, "disconnect");
  CHECK(api->destroy(b) == CUDAQ_OK, "destroy");
  return 0;
}

static int layout(void) {
  printf("layout: version=%d ringbuffer=%zu rb_rx_stride_sz=%zu rb_rx_flags_host=%zu rb_tx_data_host=%zu "
         "dataplane=%zu dp_ring=%zu dp_rx_poll=%zu dp_tx_publish=%zu unified=%zu type_desc=%zu schema=%zu "
         "entry=%zu entry_function_id=%zu entry_dispatch_mode=%zu entry_schema=%zu entry_routing_key=%zu "
         "table=%zu table_count=%zu interface=%zu if_create=%zu if_disconnect=%zu if_get_cpu_dataplane=%zu "
         "if_get_endpoint_info=%zu if_get_ring_geometry=%zu if_set_function_table=%zu rpc_header=%zu rpc_response=%zu\n",
         api->version, sizeof(cudaq_ringbuffer_t), offsetof(cudaq_ringbuffer_t, rx_stride_sz),
         offsetof(cudaq_ringbuffer_t, rx_flags_host), offsetof(cudaq_ringbuffer_t, tx_data_host),
         sizeof(cudaq_cpu_dataplane_t), offsetof(cudaq_cpu_dataplane_t, ring),
         offsetof(cudaq_cpu_dataplane_t, rx_poll), offsetof(cudaq_cpu_dataplane_t, tx_publish),
         sizeof(cudaq_unified_dispatch_ctx_t), sizeof(cudaq_type_desc_t), sizeof(cudaq_handler_schema_t),
         sizeof(cudaq_function_entry_t), offsetof(cudaq_function_entry_t, function_id),
         offsetof(cudaq_function_entry_t, dispatch_mode), offsetof(cudaq_function_entry_t, schema),
         offsetof(cudaq_function_entry_t, routing_key), sizeof(cudaq_function_table_t),
         offsetof(cudaq_function_table_t, count), sizeof(cudaq_realtime_bridge_interface_t),
         offsetof(cudaq_realtime_bridge_interface_t, create), offsetof(cudaq_realtime_bridge_interface_t, disconnect),
         offsetof(cudaq_realtime_bridge_interface_t, get_cpu_dataplane),
         offsetof(cudaq_realtime_bridge_interface_t, get_endpoint_info),
         offsetof(cudaq_realtime_bridge_interface_t, get_ring_geometry),
         offsetof(cudaq_realtime_bridge_interface_t, set_function_table), sizeof(rocelink_rpc_header_t),
         sizeof(rocelink_rpc_response_t));
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(argc >= 3, "usage: dispatcher LIB SCENARIO [OPTIONS] [-- PROVIDER ARGS]");
  load(argv[1]);
  make_table();
  const char *scenario = argv[2];
  int opts = 3, sep = argc;
  for (int i = 3; i < argc; i++)
    if (!strcmp(argv[i], "--")) {
      sep = i;
      break;
    }
  int pargc = sep < argc ? argc - sep - 1 : 0;
  char **pargv = argv + sep + (sep < argc ? 1 : 0);
  if (!strcmp(scenario, "layout")) return layout();
  if (!strcmp(scenario, "serve")) return serve(sep - opts, argv + opts, pargc, pargv);
  if (!strcmp(scenario, "bad-args")) return bad_args();
  if (!strcmp(scenario, "no-peer")) return no_peer(pargc, pargv);
  if (!strcmp(scenario, "disconnect-under-load")) return disconnect_under_load(pargc, pargv);
  CHECK(0, "unknown scenario %s", scenario);
  return 1;
}
