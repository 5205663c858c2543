/* rowsum_launch.h: the interface between the C host code (api.c) and the CUDA kernels
 * (kernels.cu) of this candidate, shared by both files. */
#ifndef ROWSUM_LAUNCH_H
#define ROWSUM_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[r] = sum of x[r][0..d) for r < rows, enqueued on stream; returns 0 or a CUDA error code. */
int rowsum_launch(const float *x, float *y, int64_t rows, int64_t d, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
