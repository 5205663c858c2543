// gemm (y = x @ W^T) with a shared-memory tiled kernel replayed from a CUDA graph: 64x64 output
// tiles, K in steps of 16 through shared memory, 256 threads each computing a 4x4 block of
// outputs in registers. The kernel launch is captured once per (x, W, y, shape) on a stream of
// the library's own (cudaStreamBeginCapture, thread-local mode: nothing else of the process is
// disturbed), instantiated, and from then on each call is one cudaGraphLaunch on the stream
// ca_forward receives, so the work is ordered on the harness stream like a plain launch. The
// harness rotates inputs between a few slots, so up to 16 executable graphs are kept, keyed by
// the pointers and sizes; a key not seen before is captured (the least recently used graph
// goes). Every call runs the kernel on the current contents of x and W: nothing is cached but
// the launch itself.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int BM = 64, BN = 64, BK = 16, TX = 16, TY = 16, NT = TX * TY, CACHE = 16;

// y[m][n] = sum_k x[m][k] * w[n][k]; x [M, K], w [N, K], y [M, N], all row-major.
__global__ void __launch_bounds__(NT) gemm_nt_tiled(const float *__restrict__ x, const float *__restrict__ w,
						    float *__restrict__ y, int M, int N, int K)
{
	__shared__ float xs[BK][BM + 1], ws[BK][BN + 1];
	const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
	const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	float acc[4][4] = {};
	for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
		for (int l = 0; l < (BM * BK) / NT; ++l) {
			const int idx = tid + l * NT, r = idx / BK, c = idx % BK;
			const int gm = m0 + r, gn = n0 + r, gk = k0 + c;
			xs[c][r] = (gm < M && gk < K) ? x[(int64_t)gm * K + gk] : 0.0f;
			ws[c][r] = (gn < N && gk < K) ? w[(int64_t)gn * K + gk] : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; ++kk) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; ++i) {
				a[i] = xs[kk][ty + TY * i];
				b[i] = ws[kk][tx + TX * i];
			}
#pragma unroll
			for (int i = 0; i < 4; ++i)
#pragma unroll
				for (int j = 0; j < 4; ++j)
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; ++i) {
		const int m = m0 + ty + TY * i;
		if (m >= M)
			continue;
#pragma unroll
		for (int j = 0; j < 4; ++j) {
			const int n = n0 + tx + TX * j;
			if (n < N)
				y[(int64_t)m * N + n] = acc[i][j];
		}
	}
}

struct entry {
	const void *x, *w;
	void *y;
	int m, n, k;
	cudaGraphExec_t exec;
	unsigned long used;
};

entry cache[CACHE];
cudaStream_t capture_stream;
unsigned long tick;

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

void drop_all(void)
{
	for (entry &e : cache) {
		if (e.exec)
			cudaGraphExecDestroy(e.exec);
		e = entry{};
	}
}

// The executable graph of one launch on these buffers: found, or captured into the LRU slot.
cudaGraphExec_t graph_for(const float *x, const float *w, float *y, int m, int n, int k)
{
	entry *slot = &cache[0];
	for (entry &e : cache) {
		if (e.exec && e.x == x && e.w == w && e.y == y && e.m == m && e.n == n && e.k == k) {
			e.used = ++tick;
			return e.exec;
		}
		if (!e.exec || e.used < slot->used)
			slot = &e;
		if (!slot->exec)
			break;
	}
	if (!capture_stream && cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking) != cudaSuccess) {
		capture_stream = nullptr;
		return nullptr;
	}
	cudaGraph_t graph = nullptr;
	if (cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
		return nullptr;
	const dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM)), block(TX, TY);
	gemm_nt_tiled<<<grid, block, 0, capture_stream>>>(x, w, y, m, n, k);
	const cudaError_t launched = cudaGetLastError();
	if (cudaStreamEndCapture(capture_stream, &graph) != cudaSuccess || launched != cudaSuccess || !graph) {
		if (graph)
			cudaGraphDestroy(graph);
		return nullptr;
	}
	cudaGraphExec_t exec = nullptr;
	const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
	cudaGraphDestroy(graph); // the executable graph keeps what it needs
	if (inst != cudaSuccess)
		return nullptr;
	if (slot->exec)
		cudaGraphExecDestroy(slot->exec);
	*slot = entry{x, w, y, m, n, k, exec, ++tick};
	return exec;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (num_params != 1 || !f32_cuda(&params[0], 2))
		return 1;
	drop_all(); // new parameters (each verification trial has its own): start the cache afresh
	return 0;
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
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || m > INT32_MAX || n > INT32_MAX ||
	    k > INT32_MAX)
		return 2;
	if (m == 0 || n == 0)
		return 0;
	cudaGraphExec_t exec = graph_for(static_cast<const float *>(x->data), static_cast<const float *>(w->data),
					 static_cast<float *>(y->data), (int)m, (int)n, (int)k);
	if (!exec)
		return 3;
	return cudaGraphLaunch(exec, stream) == cudaSuccess ? 0 : 4;
}

extern "C" void ca_teardown(void)
{
	drop_all();
	if (capture_stream)
		cudaStreamDestroy(capture_stream);
	capture_stream = nullptr;
}
