/*
 * kernels/host/blossom_lanes.cpp — the GPU stage's warp matcher (kernels/stages/blossom.cuh)
 * run on the host, a thread a lane (warp_lanes.h), for operator/tests/blossom_lanes.rs to
 * hold it equal to the CPU matcher (qec/src/matching.rs) on any number of instances without
 * a GPU.
 *
 * stdin, one instance after another: a line "n m", then m lines "u v w" (an edge of weight
 * w >= 0, u != v, no two on one pair), then n boundary costs (-1: none). stdout, a line an
 * instance: "none" when it has no perfect matching, else "total | partner of each vertex
 * (B: the boundary) | doubled dual of each vertex".
 */
#include "warp_lanes.h"

#include <cstdio>
#include <iostream>
#include <string>

#include "../stages/blossom.cuh"

int main() {
    unsigned n, m;
    std::vector<unsigned char> scratch;
    while (std::cin >> n >> m) {
        std::vector<unsigned> u(m), v(m);
        std::vector<long long> w(m);
        std::vector<long long> c(n);
        for (unsigned e = 0; e < m; e++) std::cin >> u[e] >> v[e] >> w[e];
        for (unsigned x = 0; x < n; x++) std::cin >> c[x];
        if (!std::cin) {
            std::fprintf(stderr, "blossom_lanes: an instance cut short\n");
            return 2;
        }
        // The scratch area as the stage carves it: the struct at its head, 16-byte aligned.
        struct rl_pm pm;
        scratch.assign(rl_pm_bytes(n, m) + 32, 0xA5);
        uint8_t *mem = (uint8_t *)(((uintptr_t)scratch.data() + 15) & ~(uintptr_t)15);
        rl_pm_carve(&pm, mem, n, m);
        for (unsigned e = 0; e < m; e++) {
            pm.ends[2 * e] = u[e];
            pm.ends[2 * e + 1] = v[e];
            pm.wt[e] = 2 * w[e];
        }
        for (unsigned x = 0; x < n; x++) pm.cap[x] = c[x] < 0 ? RL_PM_NO_CAP : 2 * c[x];
        pm.n = n;
        pm.m = m;
        bool ok = false;
        struct rl_pm *placed = nullptr;
        rl_lanes_run([&](unsigned lane) {
            struct rl_pm *at = rl_pm_place(pm, mem, lane);
            __syncwarp();
            const bool r = rl_pm_solve(at, lane);
            if (lane == 0) {
                ok = r;
                placed = at;
            }
        });
        if (!ok) {
            std::printf("none\n");
            continue;
        }
        long long total = 0;
        std::string mates, duals;
        for (unsigned x = 0; x < n; x++) {
            const unsigned d = placed->mate[x];
            if (d == RL_PM_BOUNDARY) {
                total += c[x];
                mates += " B";
            } else {
                const unsigned y = rl_pm_head(placed, d);
                if (x < y) total += w[d >> 1];
                mates += " " + std::to_string(y);
            }
            duals += " " + std::to_string(placed->y[x]);
        }
        std::printf("%lld |%s |%s\n", total, mates.c_str(), duals.c_str());
    }
    return 0;
}
