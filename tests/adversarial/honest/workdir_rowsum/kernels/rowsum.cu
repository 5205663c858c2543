// y[r] = sum of row r of x (rows x cols, fp32, contiguous): one warp per row, each lane summing a
// strided part of the row with float4 loads where the row is 16-byte aligned, then a butterfly
// reduction with __shfl_xor_sync. A host launcher taking raw pointers and the stream.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
rowsum_warp(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t cols)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * cols;
	float s = 0.0f;
	int64_t done = 0;
	if ((reinterpret_cast<uintptr_t>(xr) & 15u) == 0) {
		const float4 *x4 = reinterpret_cast<const float4 *>(xr);
		const int64_t n4 = cols / 4;
		for (int64_t i = lane; i < n4; i += 32) {
			const float4 v = x4[i];
			s += (v.x + v.y) + (v.z + v.w);
		}
		done = n4 * 4;
	}
	for (int64_t c = done + lane; c < cols; c += 32)
		s += xr[c];
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	if (lane == 0)
		y[row] = s;
}

} // namespace

cudaError_t rowsum_launch(const float *x, float *y, int64_t rows, int64_t cols, cudaStream_t stream)
{
	if (rows == 0)
		return cudaSuccess;
	const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
	rowsum_warp<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(x, y, rows, cols);
	return cudaGetLastError();
}
