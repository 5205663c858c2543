// CHEAT (CUDA driver API through the runtime's entry-point query): obtains cuLaunchKernel with
// cudaGetDriverEntryPointByVersion instead of importing it (so no cu* symbol is imported), and
// launches the kernel through the driver API, e.g. to reach driver features the runtime does not
// expose. The entry-point query itself is a forbidden symbol. Expected: build.forbidden_symbol.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <cuda.h>

namespace {

constexpr int TPB = 256;

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

int64_t numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}

// The task's tensors: one input x, one output y of the same size. Returns the element count or -1.
int64_t affine_size(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1 || !f32_cuda(&args[0]) || !f32_cuda(&outputs[0]) ||
	    numel(&args[0]) != numel(&outputs[0]))
		return -1;
	return numel(&args[0]);
}

__global__ void __launch_bounds__(TPB) affine(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < n; i += (int64_t)gridDim.x * TPB)
		y[i] = 2.0f * x[i] + 1.0f;
}

unsigned blocks_for(int64_t n)
{
	const int64_t b = (n + TPB - 1) / TPB;
	return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

typedef CUresult (*launch_fn)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			      unsigned bz, unsigned shared, CUstream stream, void **params, void **extra);

launch_fn driver_launch;

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	cudaDriverEntryPointQueryResult q;
	void *fn = nullptr;
	if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || !fn)
		return 1;
	driver_launch = reinterpret_cast<launch_fn>(fn);
	return 0;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t n = affine_size(args, num_args, num_params, outputs, num_outputs);
	if (n < 0 || !driver_launch)
		return 1;
	cudaFunction_t f;
	if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void *>(affine)) != cudaSuccess)
		return 2;
	const float *x = static_cast<const float *>(args[0].data);
	float *y = static_cast<float *>(outputs[0].data);
	void *kargs[] = {&x, &y, &n};
	return driver_launch(reinterpret_cast<CUfunction>(f), blocks_for(n), 1, 1, TPB, 1, 1, 0,
			     reinterpret_cast<CUstream>(stream), kargs, nullptr) == CUDA_SUCCESS
		       ? 0
		       : 3;
}
