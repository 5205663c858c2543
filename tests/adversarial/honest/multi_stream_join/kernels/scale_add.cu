// scale_add (y = 2x + 1) split over two side streams, done right: the side streams wait for an
// event recorded on the harness stream (fork), each computes half of the elements, and the
// harness stream waits for an event recorded on each side stream (join) before ca_forward
// returns. All work is ordered inside the harness stream, so its events time all of it.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;
constexpr int NSIDE = 2;

struct state {
	bool ready;
	cudaStream_t side[NSIDE];
	cudaEvent_t fork;
	cudaEvent_t join[NSIDE];
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

int64_t numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}

__global__ void scale_add(const float *__restrict__ x, float *__restrict__ y, int64_t begin, int64_t end)
{
	for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = 2.0f * x[i] + 1.0f;
}

void destroy(void)
{
	for (int i = 0; i < NSIDE; ++i) {
		if (g.side[i])
			cudaStreamDestroy(g.side[i]);
		if (g.join[i])
			cudaEventDestroy(g.join[i]);
	}
	if (g.fork)
		cudaEventDestroy(g.fork);
	g = state{};
}

int ensure_ready(void)
{
	if (g.ready)
		return 0;
	bool ok = cudaEventCreateWithFlags(&g.fork, cudaEventDisableTiming) == cudaSuccess;
	for (int i = 0; ok && i < NSIDE; ++i)
		ok = cudaStreamCreateWithFlags(&g.side[i], cudaStreamNonBlocking) == cudaSuccess &&
		     cudaEventCreateWithFlags(&g.join[i], cudaEventDisableTiming) == cudaSuccess;
	if (!ok) {
		destroy();
		return 1;
	}
	g.ready = true;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	return ensure_ready();
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || numel(x) != numel(y))
		return 2;
	if (ensure_ready() != 0)
		return 3;
	const int64_t n = numel(x);
	if (n == 0)
		return 0;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	const int64_t half = n / 2;
	const int64_t bounds[NSIDE + 1] = {0, half, n};

	if (cudaEventRecord(g.fork, stream) != cudaSuccess)
		return 4;
	for (int i = 0; i < NSIDE; ++i) {
		const int64_t len = bounds[i + 1] - bounds[i];
		if (cudaStreamWaitEvent(g.side[i], g.fork, 0) != cudaSuccess)
			return 4;
		if (len > 0) {
			int64_t blocks = (len + TPB - 1) / TPB;
			if (blocks > 65536)
				blocks = 65536;
			scale_add<<<(unsigned)blocks, TPB, 0, g.side[i]>>>(xp, yp, bounds[i], bounds[i + 1]);
		}
		if (cudaEventRecord(g.join[i], g.side[i]) != cudaSuccess ||
		    cudaStreamWaitEvent(stream, g.join[i], 0) != cudaSuccess)
			return 4;
	}
	return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

extern "C" void ca_teardown(void)
{
	destroy();
}
