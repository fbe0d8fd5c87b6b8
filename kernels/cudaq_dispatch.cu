/*
 * kernels/cudaq_dispatch.cu — a persistent CUDA-Q Realtime dispatcher of rocelink's own, in
 * DEVICE_CALL style: one warp polls the RING_BUFFER context's device views of the bridge
 * provider's ring (docs/PROTOCOLS.md 5, cudaq-bridge/src/ring.rs) and answers every request
 * in the slot it came in, without the CPU.
 *
 * The ring contract, as the provider states it: the provider writes a whole request into RX
 * slot i and then stores a nonzero value (the slot's host address) into rx_flags[i]; slots
 * come in FIFO order. The dispatcher reads the slot after the flag (acquire), writes the
 * response (a 24-byte CUQS header, then the result) into TX slot i, stores the TX slot's host
 * address into tx_flags[i] (release), and only then clears rx_flags[i]; the provider sends
 * the response and clears tx_flags[i]. A request of another function, or a malformed one
 * (no CUQR magic, arguments beyond the slot), is dropped: its RX flag cleared, no answer.
 *
 * Functions (ids from the host: rocelink_wire::rpc::function_id, FNV-1a of the name):
 * `echo` answers the arguments; `increment` answers each argument byte plus one.
 *
 * Control (`ctl`, mapped host memory): word 0 nonzero asks the kernel to stop (it returns
 * within one poll); words 1.. are counters the kernel writes: 1 answered, 2 dropped,
 * 3 polls that found the slot empty.
 *
 * Launch: one block of 32 threads.
 */
/* NVRTC has no libc headers */
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;

#define RL_CQD_REQUEST_MAGIC 0x43555152u  /* 'CUQR' */
#define RL_CQD_RESPONSE_MAGIC 0x43555153u /* 'CUQS' */
#define RL_CQD_HEADER 24u

__device__ __forceinline__ unsigned long long rl_cqd_load_acquire(const volatile unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void rl_cqd_store_release(volatile unsigned long long *p, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

extern "C" __global__ void __launch_bounds__(32, 1)
    rl_cudaq_dispatch(volatile unsigned long long *rx_flags, volatile unsigned long long *tx_flags, const uint8_t *rx_data, uint8_t *tx_data,
                      unsigned long long rx_stride, unsigned long long tx_stride, uint32_t slots, unsigned long long tx_host_base,
                      uint32_t fn_echo, uint32_t fn_increment, volatile unsigned long long *ctl) {
    const uint32_t lane = threadIdx.x;
    uint32_t i = 0;
    unsigned long long answered = 0, dropped = 0, empty = 0;
    for (;;) {
        unsigned long long flag = 0;
        if (lane == 0) {
            flag = rl_cqd_load_acquire(rx_flags + i);
            if (flag == 0 && ctl[0] != 0) flag = ~0ull; /* stop */
        }
        flag = __shfl_sync(0xffffffffu, flag, 0);
        if (flag == ~0ull) break;
        if (flag == 0) {
            empty++;
            continue;
        }
        const uint8_t *req = rx_data + (unsigned long long)i * rx_stride;
        uint8_t *resp = tx_data + (unsigned long long)i * tx_stride;
        /* the request in 8-byte words, the warp's first 32 in one load each (slots are 64-byte
         * aligned, so every word is aligned): one round trip over PCIe for up to 256 bytes */
        const volatile unsigned long long *src = (const volatile unsigned long long *)req;
        const unsigned long long first = (unsigned long long)lane * 8u < rx_stride ? src[lane] : 0ull;
        const unsigned long long h0 = __shfl_sync(0xffffffffu, first, 0), h1 = __shfl_sync(0xffffffffu, first, 1);
        const unsigned long long h2 = __shfl_sync(0xffffffffu, first, 2);
        const uint32_t magic = (uint32_t)h0, fn = (uint32_t)(h0 >> 32), arg_len = (uint32_t)h1;
        const bool known = fn == fn_echo || fn == fn_increment;
        const bool ok = magic == RL_CQD_REQUEST_MAGIC && known && (unsigned long long)arg_len + RL_CQD_HEADER <= rx_stride &&
                        (unsigned long long)arg_len + RL_CQD_HEADER <= tx_stride;
        if (ok) {
            /* word w of the slot (w >= 3: the arguments), each byte plus one for increment,
             * without carries between bytes; the header's three words replaced */
            const bool inc = fn == fn_increment;
            const uint32_t end = RL_CQD_HEADER + arg_len, words = (end + 7u) / 8u;
            volatile unsigned long long *dst = (volatile unsigned long long *)resp;
            for (uint32_t w = lane; w < words; w += 32u) {
                const unsigned long long x = w < 32u ? first : src[w];
                if (w < 3u) continue;
                dst[w] = inc ? (((x & 0x7f7f7f7f7f7f7f7full) + 0x0101010101010101ull) ^ (x & 0x8080808080808080ull)) : x;
            }
            if (lane == 0) {
                /* CUQS, status 0, result_len; request_id and the timestamp as they came */
                dst[0] = (unsigned long long)RL_CQD_RESPONSE_MAGIC;
                dst[1] = (unsigned long long)arg_len | (h1 & 0xFFFFFFFF00000000ull);
                dst[2] = h2;
            }
            __syncwarp();
            if (lane == 0) {
                __threadfence_system();
                rl_cqd_store_release(tx_flags + i, tx_host_base + (unsigned long long)i * tx_stride);
            }
            answered++;
        } else {
            dropped++;
        }
        if (lane == 0) rl_cqd_store_release(rx_flags + i, 0ull);
        i = i + 1u == slots ? 0u : i + 1u;
    }
    if (lane == 0) {
        ctl[1] = answered;
        ctl[2] = dropped;
        ctl[3] = empty;
        __threadfence_system();
    }
}
