/*
 * kernels/host/warp_lanes.h — the warp-level CUDA a device function of kernels/stages uses,
 * on the host: 32 threads stand for a warp's 32 lanes, and every warp intrinsic is a meeting
 * of all 32 at a barrier (each lane posts its value, then reads the others'). So warp code
 * written for lanes running in step runs unchanged on a CPU, with the same results as on
 * the GPU wherever it is free of data races between its __syncwarp()s, which is what it
 * must be on the GPU too. A test harness, not a simulator: no timing, no memory model
 * beyond "every intrinsic is a full barrier" (stronger than the GPU's), one warp at a time.
 *
 * Use: include this, then the .cuh; run the device function on 32 threads made by
 * rl_lanes_run(), each of which sees its lane in rl_lane.
 */
#ifndef ROCELINK_HOST_WARP_LANES_H
#define ROCELINK_HOST_WARP_LANES_H

#include <barrier>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#define __CUDACC__ 1
/* The sm_90 paths (the H200's), as NVRTC compiles them. */
#define __CUDA_ARCH__ 900
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict

struct uint2 {
    unsigned x, y;
};
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }

static std::barrier<> *rl_lanes_barrier;
static thread_local unsigned rl_lane;
static unsigned long long rl_lanes_posted[32];

static inline void rl_lanes_meet() { rl_lanes_barrier->arrive_and_wait(); }
/* Every lane posts `v`; after the call, rl_lanes_posted holds all 32 until rl_lanes_meet(). */
static inline void rl_lanes_post(unsigned long long v) {
    rl_lanes_meet();
    rl_lanes_posted[rl_lane] = v;
    rl_lanes_meet();
}
template <class T> static inline unsigned long long rl_lanes_bits(T v) {
    static_assert(sizeof(T) <= 8, "a warp shuffle moves at most 8 bytes");
    unsigned long long u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <class T> static inline T rl_lanes_value(unsigned long long u) {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
}

static inline void __syncwarp(unsigned = 0xFFFFFFFFu) { rl_lanes_meet(); }
template <class T> static inline T __shfl_sync(unsigned, T v, int src) {
    rl_lanes_post(rl_lanes_bits(v));
    const T r = rl_lanes_value<T>(rl_lanes_posted[src & 31]);
    rl_lanes_meet();
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask) {
    rl_lanes_post(rl_lanes_bits(v));
    const T r = rl_lanes_value<T>(rl_lanes_posted[(rl_lane ^ (unsigned)mask) & 31]);
    rl_lanes_meet();
    return r;
}
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned delta) {
    rl_lanes_post(rl_lanes_bits(v));
    const T r = rl_lane >= delta ? rl_lanes_value<T>(rl_lanes_posted[rl_lane - delta]) : v;
    rl_lanes_meet();
    return r;
}
static inline unsigned __ballot_sync(unsigned, bool p) {
    rl_lanes_post(p ? 1 : 0);
    unsigned r = 0;
    for (unsigned i = 0; i < 32; i++) r |= (rl_lanes_posted[i] ? 1u : 0u) << i;
    rl_lanes_meet();
    return r;
}
static inline bool __any_sync(unsigned m, bool p) { return __ballot_sync(m, p) != 0; }
static inline unsigned __match_any_sync(unsigned, unsigned v) {
    rl_lanes_post(v);
    unsigned r = 0;
    for (unsigned i = 0; i < 32; i++) r |= (rl_lanes_posted[i] == v ? 1u : 0u) << i;
    rl_lanes_meet();
    return r;
}
static inline unsigned __reduce_min_sync(unsigned, unsigned v) {
    rl_lanes_post(v);
    unsigned r = v;
    for (unsigned i = 0; i < 32; i++) r = (unsigned)rl_lanes_posted[i] < r ? (unsigned)rl_lanes_posted[i] : r;
    rl_lanes_meet();
    return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

/* Runs f(lane) on 32 threads, one a lane, and waits for them. */
template <class F> static void rl_lanes_run(F f) {
    std::barrier<> bar(32);
    rl_lanes_barrier = &bar;
    std::vector<std::thread> lanes;
    for (unsigned l = 0; l < 32; l++) lanes.emplace_back([&f, l] {
        rl_lane = l;
        f(l);
    });
    for (auto &t : lanes) t.join();
}

#endif /* ROCELINK_HOST_WARP_LANES_H */
