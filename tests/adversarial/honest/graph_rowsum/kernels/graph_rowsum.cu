// rowsum (y[r] = sum_c x[r][c]) as a two-node CUDA graph launched on the stream ca_forward gets:
// node 1 sums each row in CHUNKS column chunks (a warp per chunk, __shfl_xor_sync) into a scratch
// array, node 2 adds each row's CHUNKS partials in a fixed order. The graph is built from explicit
// kernel nodes and instantiated once per shape; every call updates both nodes' arguments in the
// executable graph (cudaGraphExecKernelNodeSetParams: x and y move between calls) and launches it
// with cudaGraphLaunch on the harness stream, so the harness's events bracket all of it.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int CHUNKS = 4;         // column chunks per row (a warp each)
constexpr int WARPS_PER_BLOCK = 8;

struct graph_state {
	int64_t rows = 0, cols = 0; // the shape the graph was made for
	float *partial = nullptr;   // rows * CHUNKS partial sums
	cudaGraph_t graph = nullptr;
	cudaGraphExec_t exec = nullptr;
	cudaGraphNode_t sum_node = nullptr, add_node = nullptr;
} g;

bool f32_cuda(const DLTensor *t, int ndim)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim != ndim || (ndim > 0 && !t->shape) || !t->data)
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

// One warp per (row, chunk): the chunk's columns, strided by 32 lanes, then a warp reduction.
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
chunk_sums(const float *__restrict__ x, float *__restrict__ partial, int64_t rows, int64_t cols)
{
	const int lane = threadIdx.x & 31;
	const int64_t task = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5); // row * CHUNKS + chunk
	if (task >= rows * CHUNKS)
		return;
	const int64_t row = task / CHUNKS, chunk = task % CHUNKS;
	const int64_t per = (cols + CHUNKS - 1) / CHUNKS;
	const int64_t begin = chunk * per, end = begin + per < cols ? begin + per : cols;
	const float *xr = x + row * cols;
	float s = 0.0f;
	for (int64_t c = begin + lane; c < end; c += 32)
		s += xr[c];
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	if (lane == 0)
		partial[task] = s;
}

__global__ void add_chunks(const float *__restrict__ partial, float *__restrict__ y, int64_t rows)
{
	const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (row >= rows)
		return;
	float s = 0.0f;
#pragma unroll
	for (int c = 0; c < CHUNKS; ++c)
		s += partial[row * CHUNKS + c];
	y[row] = s;
}

unsigned grid_for(int64_t work, int64_t per_block)
{
	return (unsigned)((work + per_block - 1) / per_block);
}

void release(void)
{
	if (g.exec)
		cudaGraphExecDestroy(g.exec);
	if (g.graph)
		cudaGraphDestroy(g.graph);
	cudaFree(g.partial);
	g = graph_state{};
}

// The node parameters for this call's pointers (kernelParams is read when they are set). It
// points into itself: built in place, never copied.
struct call_args {
	const float *x;
	float *y;
	float *partial;
	int64_t rows, cols;
	void *sum_args[4];
	void *add_args[3];
	cudaKernelNodeParams sum, add;

	call_args(const float *x_, float *y_, const graph_state &s)
		: x(x_), y(y_), partial(s.partial), rows(s.rows), cols(s.cols)
	{
		sum_args[0] = &x;
		sum_args[1] = &partial;
		sum_args[2] = &rows;
		sum_args[3] = &cols;
		add_args[0] = &partial;
		add_args[1] = &y;
		add_args[2] = &rows;
		sum = cudaKernelNodeParams{};
		sum.func = reinterpret_cast<void *>(chunk_sums);
		sum.gridDim = dim3(grid_for(rows * CHUNKS, WARPS_PER_BLOCK));
		sum.blockDim = dim3(WARPS_PER_BLOCK * 32);
		sum.kernelParams = sum_args;
		add = cudaKernelNodeParams{};
		add.func = reinterpret_cast<void *>(add_chunks);
		add.gridDim = dim3(grid_for(rows, 256));
		add.blockDim = dim3(256);
		add.kernelParams = add_args;
	}
};

// The graph for rows x cols, built and instantiated once (again if the shape changes).
bool ensure_graph(int64_t rows, int64_t cols, const float *x, float *y)
{
	if (g.exec && g.rows == rows && g.cols == cols)
		return true;
	release();
	g.rows = rows;
	g.cols = cols;
	if (cudaMalloc(&g.partial, (size_t)(rows * CHUNKS) * sizeof(float)) != cudaSuccess)
		return false;
	call_args a(x, y, g);
	return cudaGraphCreate(&g.graph, 0) == cudaSuccess &&
	       cudaGraphAddKernelNode(&g.sum_node, g.graph, nullptr, 0, &a.sum) == cudaSuccess &&
	       cudaGraphAddKernelNode(&g.add_node, g.graph, &g.sum_node, 1, &a.add) == cudaSuccess &&
	       cudaGraphInstantiate(&g.exec, g.graph, 0) == cudaSuccess;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(y, 1) || y->shape[0] != x->shape[0] || x->shape[0] <= 0 || x->shape[1] <= 0 ||
	    x->shape[0] * CHUNKS / WARPS_PER_BLOCK >= INT32_MAX)
		return 2;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	if (!ensure_graph(x->shape[0], x->shape[1], xp, yp))
		return 3;
	call_args a(xp, yp, g);
	if (cudaGraphExecKernelNodeSetParams(g.exec, g.sum_node, &a.sum) != cudaSuccess ||
	    cudaGraphExecKernelNodeSetParams(g.exec, g.add_node, &a.add) != cudaSuccess)
		return 4;
	return cudaGraphLaunch(g.exec, stream) == cudaSuccess ? 0 : 5;
}

extern "C" void ca_teardown(void)
{
	release();
}
