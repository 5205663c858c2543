// The CUDA half of the multi_file_c_host candidate: one warp per row with a shuffle reduction,
// behind the C interface declared in rowsum_launch.h.
#include <cuda_runtime.h>

#include "rowsum_launch.h"

namespace {

constexpr int TPB = 256, ROWS_PER_BLOCK = TPB / 32;

__global__ void __launch_bounds__(TPB) rowsum(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
					      int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * d;
	float s = 0.0f;
	for (int64_t i = lane; i < d; i += 32)
		s += xr[i];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (lane == 0)
		y[row] = s;
}

} // namespace

extern "C" int rowsum_launch(const float *x, float *y, int64_t rows, int64_t d, cudaStream_t stream)
{
	const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
	if (rows <= 0 || blocks > INT32_MAX)
		return (int)cudaErrorInvalidValue;
	rowsum<<<(unsigned)blocks, TPB, 0, stream>>>(x, y, rows, d);
	return (int)cudaGetLastError();
}
