/* scripts/probes/ck.h — shared by the measurement probes: CK(call) ends the probe with the CUDA
 * runtime's message when a call fails (a probe has no recovery to offer). */
#ifndef ROCELINK_PROBES_CK_H
#define ROCELINK_PROBES_CK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                            \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
