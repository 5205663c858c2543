// gemm (y = x W^T) in three row panels on three streams of the candidate's own, each with its own
// cuBLAS handle, forked from and joined back to the stream ca_forward receives: an event recorded
// on the harness stream is waited for by every side stream before its GEMM (the inputs are
// ready), and the harness stream waits for an event recorded on each side stream after its GEMM
// (the output is complete) before ca_forward returns. Everything is ordered inside the harness
// stream, so its events time all of it; multi_stream_join does the same with plain kernels on two
// streams, this adds library calls on several streams, which a supervisor that drains the GPU
// after each call must charge exactly once.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int PANELS = 3;

struct side_state {
	bool ready = false;
	cudaStream_t stream[PANELS] = {};
	cublasHandle_t blas[PANELS] = {};
	cudaEvent_t fork = nullptr;
	cudaEvent_t join[PANELS] = {};
} s;

bool f32_cuda(const DLTensor *t, int ndim)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim != ndim || !t->shape || !t->data)
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

bool fits_int(int64_t v)
{
	return v > 0 && v <= INT32_MAX;
}

bool make_state(void)
{
	if (s.ready)
		return true;
	if (cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) != cudaSuccess)
		return false;
	for (int i = 0; i < PANELS; ++i) {
		if (cudaStreamCreateWithFlags(&s.stream[i], cudaStreamNonBlocking) != cudaSuccess ||
		    cudaEventCreateWithFlags(&s.join[i], cudaEventDisableTiming) != cudaSuccess ||
		    cublasCreate(&s.blas[i]) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetMathMode(s.blas[i], CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
		    cublasSetStream(s.blas[i], s.stream[i]) != CUBLAS_STATUS_SUCCESS)
			return false;
	}
	s.ready = true;
	return true;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (num_params != 1 || !f32_cuda(&params[0], 2))
		return 1;
	return make_state() ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return 2;
	const int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || !fits_int(m) || !fits_int(n) ||
	    !fits_int(k) || !make_state())
		return 2;
	const float *xp = static_cast<const float *>(x->data), *wp = static_cast<const float *>(w->data);
	float *yp = static_cast<float *>(y->data);
	const float one = 1.0f, zero = 0.0f;
	if (cudaEventRecord(s.fork, stream) != cudaSuccess)
		return 3;
	const int64_t per = (m + PANELS - 1) / PANELS;
	for (int i = 0; i < PANELS; ++i) {
		const int64_t row0 = i * per, rows = row0 + per <= m ? per : m - row0;
		if (cudaStreamWaitEvent(s.stream[i], s.fork, 0) != cudaSuccess)
			return 4;
		// Rows [row0, row0 + rows) of the row-major y = x W^T: column-major y^T panel = W x^T panel.
		if (rows > 0 && cublasSgemm(s.blas[i], CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)rows, (int)k, &one, wp,
					    (int)k, xp + row0 * k, (int)k, &zero, yp + row0 * n,
					    (int)n) != CUBLAS_STATUS_SUCCESS)
			return 5;
		if (cudaEventRecord(s.join[i], s.stream[i]) != cudaSuccess ||
		    cudaStreamWaitEvent(stream, s.join[i], 0) != cudaSuccess)
			return 6;
	}
	return 0;
}

extern "C" void ca_teardown(void)
{
	if (!s.ready)
		return;
	for (int i = 0; i < PANELS; ++i) {
		cudaStreamSynchronize(s.stream[i]);
		cublasDestroy(s.blas[i]);
		cudaStreamDestroy(s.stream[i]);
		cudaEventDestroy(s.join[i]);
	}
	cudaEventDestroy(s.fork);
	s = side_state{};
}
