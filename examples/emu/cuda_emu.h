// cuda_emu.h: runs the example solutions' CUDA kernels on the CPU, to catch indexing bugs on a
// machine without a GPU. Not a CUDA implementation: just enough of the kernel language and the
// runtime for examples/solutions/*/kernels/*.cu after check_solutions.py has rewritten their
// `k<<<grid, block, shmem, stream>>>(args)` launches into emu_launch(...) calls.
//
// Model: blocks run one after another; the threads of a block are OS threads, so __syncthreads()
// is a block barrier and __shfl_xor_sync() a warp barrier plus an exchange buffer. __shared__
// becomes `static` (one block at a time, so one copy suffices). Launch configurations are checked
// as the hardware would (block size, grid limits, zero sizes) and a bad one makes
// cudaGetLastError() fail. "Device" memory is host memory: cudaMalloc is malloc.
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <dlpack/dlpack.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

#ifndef EMU_MAX_BLOCKS
#define EMU_MAX_BLOCKS 3 // replaces the solutions' grid caps, so grid-stride loops really loop
#endif

struct emu_idx {
	unsigned x, y, z;
};
inline thread_local emu_idx threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

struct emu_block {
	explicit emu_block(unsigned n) : nthreads(n), block_bar((std::ptrdiff_t)n), xch(n)
	{
		for (unsigned w = 0; w * 32 < n; ++w) {
			const unsigned lanes = n - w * 32 < 32 ? n - w * 32 : 32;
			warp_bar.emplace_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)lanes));
		}
	}
	unsigned nthreads;
	std::barrier<> block_bar;
	std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
	std::vector<float> xch;
};
inline thread_local emu_block *emu_cur;
inline cudaError_t emu_last_error = cudaSuccess;

inline void __syncthreads()
{
	emu_cur->block_bar.arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
	if (mask != 0xffffffffu)
		abort(); // the examples only use full-warp shuffles
	const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
	emu_cur->warp_bar[w]->arrive_and_wait(); // the previous exchange has been read
	emu_cur->xch[t] = v;
	emu_cur->warp_bar[w]->arrive_and_wait();
	const unsigned src = w * 32 + (lane ^ (unsigned)lane_mask);
	if (src >= emu_cur->nthreads)
		abort();
	return emu_cur->xch[src];
}

template <typename T> inline T __ldcs(const T *p)
{
	return *p;
}
template <typename T> inline T __ldg(const T *p)
{
	return *p;
}
template <typename T> inline void __stcs(T *p, T v)
{
	*p = v;
}
inline float __expf(float x)
{
	return expf(x);
}
inline float __logf(float x)
{
	return logf(x);
}
inline float rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

struct emu_cfg {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
};
inline emu_cfg emu_config(dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = nullptr)
{
	return emu_cfg{grid, block, shmem, stream};
}

void emu_check_launch_stream(cudaStream_t s); // lib_stubs.cpp: the launch is on ca_forward's stream

inline void emu_launch(emu_cfg c, const std::function<void()> &body)
{
	emu_check_launch_stream(c.stream);
	const uint64_t nt = (uint64_t)c.block.x * c.block.y * c.block.z;
	if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
	    c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535 || c.shmem > 48 * 1024) {
		fprintf(stderr, "emu: bad launch grid (%u,%u,%u) block (%u,%u,%u) shmem %zu\n", c.grid.x, c.grid.y,
			c.grid.z, c.block.x, c.block.y, c.block.z, c.shmem);
		emu_last_error = cudaErrorInvalidConfiguration;
		return;
	}
	for (unsigned bz = 0; bz < c.grid.z; ++bz)
		for (unsigned by = 0; by < c.grid.y; ++by)
			for (unsigned bx = 0; bx < c.grid.x; ++bx) {
				emu_block blk((unsigned)nt);
				std::vector<std::thread> threads;
				threads.reserve(nt);
				for (unsigned t = 0; t < nt; ++t)
					threads.emplace_back([&, t] {
						emu_cur = &blk;
						threadIdx = emu_idx{t % c.block.x, (t / c.block.x) % c.block.y,
								    t / (c.block.x * c.block.y)};
						blockIdx = emu_idx{bx, by, bz};
						blockDim = c.block;
						gridDim = c.grid;
						body();
						// An exited thread no longer takes part in barriers (as on the GPU).
						blk.warp_bar[t / 32]->arrive_and_drop();
						blk.block_bar.arrive_and_drop();
					});
				for (auto &th : threads)
					th.join();
			}
}

#include <cuda_agent/abi.h>

#endif
