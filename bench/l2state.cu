// l2state: how the cache state before a timed call changes one memory-bound kernel's time.
//
// Times y = f(x) (8192 x 8192 fp32: 256 MiB in, 256 MiB out) with CUDA events after each of
// several preparations of L2, for four access-hint variants of the same kernel (plain loads and
// stores, __ldcs loads, __stcs stores, both). Run alone it prints our view; run under
// `ncu --cache-control none|all` (bench/l2state.sh does both) every (preparation, hint) pair is
// its own kernel instantiation K<P, H>, so ncu's per-kernel durations can be matched to it.
// Used to attribute the gap between our timing protocol and ncu's default cache invalidation
// (bench/RESULTS.md). Usage: l2state [reps]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                           \
	do {                                                                               \
		cudaError_t err_ = (x);                                                    \
		if (err_ != cudaSuccess) {                                                 \
			std::fprintf(stderr, "l2state: %s:%d %s: %s\n", __FILE__, __LINE__, \
				     #x, cudaGetErrorString(err_));                        \
			std::exit(1);                                                      \
		}                                                                          \
	} while (0)

namespace {

enum Hint { PLAIN, LOAD_CS, STORE_CS, BOTH_CS, NUM_HINTS };
const char *const kHintNames[NUM_HINTS] = {"plain", "__ldcs", "__stcs", "__ldcs+__stcs"};

// Preparations before each timed call. Every one but STEADY first writes the output (the
// worker's poison), which leaves dirty lines in L2, as the worker's protocol does.
enum Prep { STEADY, READ_FLUSH, WRITE_FLUSH, DISCARD, EVICT_FIRST, PERSIST_TOGGLE, NUM_PREPS };
const char *const kPrepNames[NUM_PREPS] = {
	"back to back (no poison, no flush)",
	"poison, read 2x L2 (the worker's flush)",
	"poison, write 2x L2",
	"poison, read 2x L2, discard.global.L2 on it",
	"poison, read 2x L2, re-read last 1x L2 evict_first",
	"poison, read 2x L2, persisting-L2 limit max then 0",
};

__device__ __forceinline__ float chain(float x)
{
	return tanhf(x) * (1.f / (1.f + __expf(-(x + 1.f)))) + x * x;
}

template <int P, int H>
__global__ void K(const float4 *__restrict__ x, float4 *__restrict__ y, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 v = (H == LOAD_CS || H == BOTH_CS) ? __ldcs(x + i) : x[i];
		v = make_float4(chain(v.x), chain(v.y), chain(v.z), chain(v.w));
		if (H == STORE_CS || H == BOTH_CS)
			__stcs(y + i, v);
		else
			y[i] = v;
	}
}

__global__ void empty_kernel() {}

// Reads n uint4; with evict_first the loads carry an L2 evict-first policy.
template <bool EVICT_FIRST_POLICY>
__global__ void read_buffer(const uint4 *__restrict__ b, size_t n, unsigned *sink)
{
	unsigned acc = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v;
		if (EVICT_FIRST_POLICY)
			asm volatile("{\n\t.reg .b64 pol;\n\t"
				     "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
				     "ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n\t}"
				     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
				     : "l"(b + i));
		else
			v = b[i];
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == 0x12345678u)
		*sink = acc;
}

__global__ void discard_lines(char *b, size_t lines)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
	     i += (size_t)gridDim.x * blockDim.x)
		asm volatile("discard.global.L2 [%0], 128;" ::"l"(b + i * 128) : "memory");
}

struct Bench {
	float4 *x = nullptr, *y = nullptr;
	size_t n = 0; // float4 elements
	char *flush = nullptr;
	size_t flush_bytes = 0;
	unsigned *sink = nullptr;
	int blocks = 0;
	size_t persist_max = 0;
};

void prepare(const Bench &b, int prep)
{
	if (prep == STEADY)
		return;
	CHECK(cudaMemset(b.y, 0xff, b.n * sizeof(float4)));
	if (prep == WRITE_FLUSH) {
		CHECK(cudaMemset(b.flush, 0x5a, b.flush_bytes));
	} else {
		read_buffer<false><<<b.blocks, 256>>>((const uint4 *)b.flush, b.flush_bytes / 16,
						      b.sink);
		CHECK(cudaGetLastError());
	}
	if (prep == DISCARD) {
		discard_lines<<<b.blocks, 256>>>(b.flush, b.flush_bytes / 128);
		CHECK(cudaGetLastError());
	} else if (prep == EVICT_FIRST) {
		size_t tail = b.flush_bytes / 2;
		read_buffer<true><<<b.blocks, 256>>>(
			(const uint4 *)(b.flush + b.flush_bytes - tail), tail / 16, b.sink);
		CHECK(cudaGetLastError());
	} else if (prep == PERSIST_TOGGLE) {
		CHECK(cudaDeviceSynchronize());
		CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, b.persist_max));
		CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
	}
	CHECK(cudaDeviceSynchronize());
}

using Launch = void (*)(const Bench &);
template <int P, int H> void launch(const Bench &b)
{
	K<P, H><<<b.blocks, 256>>>(b.x, b.y, b.n);
}
template <int P> constexpr Launch row[NUM_HINTS] = {launch<P, PLAIN>, launch<P, LOAD_CS>,
						    launch<P, STORE_CS>, launch<P, BOTH_CS>};
const Launch *const kLaunch[NUM_PREPS] = {row<STEADY>,	row<READ_FLUSH>,  row<WRITE_FLUSH>,
					  row<DISCARD>, row<EVICT_FIRST>, row<PERSIST_TOGGLE>};

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv)
{
	const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
	if (reps < 1 || reps > 100000) {
		std::fprintf(stderr, "usage: l2state [reps 1..100000]\n");
		return 2;
	}
	cudaDeviceProp prop;
	CHECK(cudaGetDeviceProperties(&prop, 0));
	Bench b;
	b.n = (size_t)8192 * 8192 / 4;
	b.flush_bytes = 2 * (size_t)prop.l2CacheSize;
	b.blocks = prop.multiProcessorCount * 8;
	b.persist_max = (size_t)prop.persistingL2CacheMaxSize;
	CHECK(cudaMalloc(&b.x, b.n * sizeof(float4)));
	CHECK(cudaMalloc(&b.y, b.n * sizeof(float4)));
	CHECK(cudaMalloc(&b.flush, b.flush_bytes));
	CHECK(cudaMalloc(&b.sink, 64));
	CHECK(cudaMemset(b.x, 0x3c, b.n * sizeof(float4)));
	CHECK(cudaMemset(b.flush, 0x5a, b.flush_bytes));
	std::printf("# %s, L2 %d bytes, %d SMs, %d reps per cell\n", prop.name, prop.l2CacheSize,
		    prop.multiProcessorCount, reps);

	cudaEvent_t start, end;
	CHECK(cudaEventCreate(&start));
	CHECK(cudaEventCreate(&end));
	std::vector<double> empty;
	for (int i = 0; i < 50; i++) {
		float ms;
		CHECK(cudaEventRecord(start));
		empty_kernel<<<1, 1>>>();
		CHECK(cudaEventRecord(end));
		CHECK(cudaEventSynchronize(end));
		CHECK(cudaEventElapsedTime(&ms, start, end));
		empty.push_back(ms);
	}
	const double overhead = median(empty);
	std::printf("# event time of an empty launch %.4f ms (subtracted)\n", overhead);
	std::printf("prep\thint\tmedian_ms\tmin_ms\tdescription\n");
	for (int p = 0; p < NUM_PREPS; p++) {
		for (int h = 0; h < NUM_HINTS; h++) {
			std::vector<double> t;
			prepare(b, p);
			kLaunch[p][h](b); // untimed: loads the module (lazy loading) and warms up
			CHECK(cudaDeviceSynchronize());
			for (int r = 0; r < reps; r++) {
				float ms;
				prepare(b, p);
				CHECK(cudaEventRecord(start));
				kLaunch[p][h](b);
				CHECK(cudaEventRecord(end));
				CHECK(cudaEventSynchronize(end));
				CHECK(cudaEventElapsedTime(&ms, start, end));
				t.push_back(ms - overhead);
			}
			std::printf("%d\t%s\t%.4f\t%.4f\t%s\n", p, kHintNames[h], median(t),
				    *std::min_element(t.begin(), t.end()), kPrepNames[p]);
			std::fflush(stdout);
		}
	}
	return 0;
}
