// rowsum (y = x.sum(-1)) with CUB: cub::DeviceSegmentedReduce::Sum, one segment per row. The
// row offsets (0, d, 2d, ...) and CUB's temporary storage are allocated in ca_setup for the
// task's shape (8192 x 1024) and grown in ca_forward if another shape arrives. (The build
// compiles with CCCL_DISABLE_NVTX, so CUB's headers pull in no NVTX injection code.)
#include <cub/device/device_segmented_reduce.cuh>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int64_t DEFAULT_ROWS = 8192, DEFAULT_D = 1024;

struct state {
	int64_t *offsets; // rows + 1 entries: i * d
	int64_t offsets_rows, offsets_d;
	int64_t offsets_cap;
	void *temp;
	size_t temp_bytes;
} g;

bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape) || !t->data)
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

__global__ void fill_offsets(int64_t *offsets, int64_t count, int64_t d)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
	     i += (int64_t)gridDim.x * blockDim.x)
		offsets[i] = i * d;
}

// Offsets and temporary storage for rows x d; x and y may be null (sizes only).
int prepare(int64_t rows, int64_t d, const float *x, float *y, cudaStream_t stream)
{
	if (rows + 1 > g.offsets_cap) {
		if (g.offsets) {
			cudaDeviceSynchronize();
			cudaFree(g.offsets);
		}
		g.offsets = nullptr;
		g.offsets_cap = 0;
		if (cudaMalloc(&g.offsets, (size_t)(rows + 1) * sizeof(int64_t)) != cudaSuccess) {
			g.offsets = nullptr;
			return 1;
		}
		g.offsets_cap = rows + 1;
		g.offsets_rows = -1;
	}
	if (g.offsets_rows != rows || g.offsets_d != d) {
		const int64_t blocks = (rows + 1 + 255) / 256;
		fill_offsets<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(g.offsets, rows + 1, d);
		if (cudaGetLastError() != cudaSuccess)
			return 1;
		g.offsets_rows = rows;
		g.offsets_d = d;
	}
	size_t need = 0;
	if (cub::DeviceSegmentedReduce::Sum(nullptr, need, x, y, rows, g.offsets, g.offsets + 1, stream) !=
	    cudaSuccess)
		return 1;
	if (need > g.temp_bytes) {
		if (g.temp) {
			cudaDeviceSynchronize();
			cudaFree(g.temp);
		}
		g.temp = nullptr;
		g.temp_bytes = 0;
		if (cudaMalloc(&g.temp, need) != cudaSuccess) {
			g.temp = nullptr;
			return 1;
		}
		g.temp_bytes = need;
	}
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	if (num_params != 0)
		return 1;
	return prepare(DEFAULT_ROWS, DEFAULT_D, nullptr, nullptr, stream) == 0 ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return 2;
	int64_t rows = 1;
	for (int i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return 2;
		rows *= x->shape[i];
	}
	const int64_t d = x->shape[x->ndim - 1];
	if (rows == 0)
		return 0;
	if (rows > INT32_MAX)
		return 2;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	if (prepare(rows, d, xp, yp, stream) != 0)
		return 3;
	size_t bytes = g.temp_bytes;
	if (cub::DeviceSegmentedReduce::Sum(g.temp, bytes, xp, yp, rows, g.offsets, g.offsets + 1, stream) !=
	    cudaSuccess)
		return 4;
	return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

extern "C" void ca_teardown(void)
{
	if (g.offsets)
		cudaFree(g.offsets);
	if (g.temp)
		cudaFree(g.temp);
	g = state{};
}
