// softmax (dim -1) with a persistent grid: ca_setup sizes the grid from the occupancy API
// (blocks per SM times SMs) and the kernel's warps take rows grid-stride until none are left.
// Each warp makes an online pass over its row (running max and rescaled running sum, merged
// across lanes with shuffles), then a second pass writes exp(x - max) / sum.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 256, WARPS = TPB / 32;
int grid_blocks;

bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 1 || !t->shape || !t->data)
		return false;
	if (t->strides) {
		int64_t expect = 1;
		for (int i = t->ndim - 1; i >= 0; --i) {
			if (t->shape[i] != 1 && t->strides[i] != expect)
				return false;
			expect *= t->shape[i];
		}
	}
	return true;
}

// Merges (m, s) with (om, os): the sums are rescaled to the larger maximum.
__device__ __forceinline__ void merge(float &m, float &s, float om, float os)
{
	if (om == -INFINITY)
		return;
	if (m == -INFINITY) {
		m = om;
		s = os;
		return;
	}
	const float nm = fmaxf(m, om);
	s = s * expf(m - nm) + os * expf(om - nm);
	m = nm;
}

__global__ void __launch_bounds__(TPB) softmax_rows(const float *__restrict__ x, float *__restrict__ y,
						    int64_t rows, int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t first = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	const int64_t stride = (int64_t)gridDim.x * WARPS;
	for (int64_t row = first; row < rows; row += stride) { // uniform per warp
		const float *xr = x + row * d;
		float *yr = y + row * d;
		float m = -INFINITY, s = 0.0f;
		for (int64_t i = lane; i < d; i += 32)
			merge(m, s, xr[i], 1.0f);
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float om = __shfl_xor_sync(0xffffffffu, m, o);
			const float os = __shfl_xor_sync(0xffffffffu, s, o);
			merge(m, s, om, os);
		}
		const float inv = 1.0f / s;
		for (int64_t i = lane; i < d; i += 32)
			yr[i] = expf(xr[i] - m) * inv;
	}
}

int plan_grid(void)
{
	if (grid_blocks > 0)
		return 0;
	int dev = 0, sms = 0, per_sm = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
	    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, softmax_rows, TPB, 0) != cudaSuccess || sms <= 0 ||
	    per_sm <= 0)
		return 1;
	grid_blocks = sms * per_sm;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	return plan_grid();
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim != y->ndim)
		return 2;
	int64_t total = 1;
	for (int i = 0; i < x->ndim; ++i) {
		if (x->shape[i] != y->shape[i])
			return 2;
		total *= x->shape[i];
	}
	const int64_t d = x->shape[x->ndim - 1];
	if (total == 0 || d == 0)
		return 0;
	if (plan_grid() != 0)
		return 3;
	const int64_t rows = total / d;
	int64_t blocks = (rows + WARPS - 1) / WARPS;
	if (blocks > grid_blocks)
		blocks = grid_blocks;
	softmax_rows<<<(unsigned)blocks, TPB, 0, stream>>>(static_cast<const float *>(x->data),
							   static_cast<float *>(y->data), rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 4;
}
