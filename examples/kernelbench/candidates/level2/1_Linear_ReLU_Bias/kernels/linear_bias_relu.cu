// The epilogue of relu(x W^T + b1 + b2): y[r, c] = max((y[r, c] + b1[c]) + b2[c], 0) in place
// over the GEMM's output y (rows x cols, row-major). One pass over y: a grid-stride loop over
// float4s when cols % 4 == 0 and every pointer is 16-byte aligned, else element by element.
// The additions are rounded in the reference's order ((gemm + b1) + b2, no FMA); NaN
// propagates as in torch.relu.
#include <cstdint>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

__device__ __forceinline__ float bias2_relu(float v, float b1, float b2)
{
	const float t = __fadd_rn(__fadd_rn(v, b1), b2);
	return (t > 0.0f || t != t) ? t : 0.0f;
}

__global__ void __launch_bounds__(kThreads)
bias2_relu_vec4(float4 *__restrict__ y, const float4 *__restrict__ b1,
		const float4 *__restrict__ b2, int64_t n4, int64_t cols4)
{
	const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
	for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
	     i += stride) {
		const int64_t c = i % cols4;
		float4 v = y[i];
		const float4 p = __ldg(b1 + c), q = __ldg(b2 + c);
		v.x = bias2_relu(v.x, p.x, q.x);
		v.y = bias2_relu(v.y, p.y, q.y);
		v.z = bias2_relu(v.z, p.z, q.z);
		v.w = bias2_relu(v.w, p.w, q.w);
		y[i] = v;
	}
}

__global__ void __launch_bounds__(kThreads)
bias2_relu_scalar(float *__restrict__ y, const float *__restrict__ b1,
		  const float *__restrict__ b2, int64_t n, int64_t cols)
{
	const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
	for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		const int64_t c = i % cols;
		y[i] = bias2_relu(y[i], __ldg(b1 + c), __ldg(b2 + c));
	}
}

bool aligned16(const void *p)
{
	return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

unsigned grid_for(int64_t work)
{
	int dev = 0, sms = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
	    sms <= 0)
		sms = 132;
	const int64_t wave = static_cast<int64_t>(sms) * kBlocksPerSm;
	const int64_t need = (work + kThreads - 1) / kThreads;
	return static_cast<unsigned>(need < wave ? (need > 0 ? need : 1) : wave);
}

} // namespace

// Enqueues the epilogue on `stream`; returns cudaGetLastError() after the launch.
cudaError_t bias2_relu_launch(float *y, const float *b1, const float *b2, int64_t rows,
			      int64_t cols, cudaStream_t stream)
{
	const int64_t n = rows * cols;
	if (n <= 0)
		return cudaSuccess;
	if (cols % 4 == 0 && aligned16(y) && aligned16(b1) && aligned16(b2))
		bias2_relu_vec4<<<grid_for(n / 4), kThreads, 0, stream>>>(
			reinterpret_cast<float4 *>(y), reinterpret_cast<const float4 *>(b1),
			reinterpret_cast<const float4 *>(b2), n / 4, cols / 4);
	else
		bias2_relu_scalar<<<grid_for(n), kThreads, 0, stream>>>(y, b1, b2, n, cols);
	return cudaGetLastError();
}
