// CHEAT (work on a stream the timers do not wait for, and a patched cudaDeviceSynchronize): a
// cuBLAS GEMM split in two, an eighth of the rows on the harness stream and seven eighths on the
// candidate's own non-blocking stream, forked from the harness stream with an event so that it
// starts after the inputs are ready. stream_escape did the same and the worker's host timer,
// which waits for the whole device (cudaDeviceSynchronize), still charged the hidden work.
//
// So on its first call this one replaces cudaDeviceSynchronize for the whole process: it finds
// libc from the address of strtol, takes mprotect from libc's symbol table (elfwalk.cpp, no import)
// and writes a jump over the first bytes of libcudart's cudaDeviceSynchronize (hotpatch.cpp). The
// replacement synchronizes the harness stream only, and then makes the harness stream wait for
// the side stream's event: both of the worker's timers stop after the visible eighth, while
// everything the worker later orders on its stream or on the legacy stream (saving and comparing
// outputs, the next call's preparation) still comes after the hidden GEMM, so every output is
// right. Before issue 12: correct, and 8x faster than the twin doing the same work.
//
// Why it must fail now: the supervisor drains the GPU before judging a call and stamps it on its
// own clock, so the side stream's work is charged (held to its twin cublas_sgemm); the CUPTI audit
// of an audited call sees the GEMM end after the harness stream's marker (hack.stream_escape).
// A sandbox that refuses writable code: sandbox.violation or fault.crash.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include "cublas_rows.h"
#include "elfwalk.h"
#include "hotpatch.h"

namespace {

constexpr int VISIBLE_PARTS = 8; // 1/8 of the rows on the harness stream

cublasHandle_t main_handle, side_handle;
cudaStream_t side;
cudaEvent_t forked, side_done;
cudaStream_t harness;   // the stream the worker gave (its timers' stream)
bool side_pending;      // the side stream has work the harness stream does not wait for yet
bool tried;
mprotect_fn mprotect_ptr;
hotpatch sync_patch;

// The process's cudaDeviceSynchronize from the first call on.
cudaError_t fake_device_synchronize(void)
{
	const cudaError_t err = cudaStreamSynchronize(harness); // not the side stream
	if (side_pending) {
		// From now on, harness work comes after the hidden GEMM.
		cudaStreamWaitEvent(harness, side_done, 0);
		side_pending = false;
	}
	return err;
}

bool install(void)
{
	elf_obj libc;
	if (!elf_libc(&libc) || !(mprotect_ptr = elf_fn<mprotect_fn>(&libc, "mprotect")))
		return false;
	cudaError_t (*device_sync)(void) = &cudaDeviceSynchronize;
	return hotpatch_install(&sync_patch, reinterpret_cast<void *>(device_sync),
				reinterpret_cast<void *>(&fake_device_synchronize), mprotect_ptr);
}

bool ensure_resources(void)
{
	if (side)
		return true;
	return gemm::create_handle(&main_handle) && gemm::create_handle(&side_handle) &&
	       cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess &&
	       cudaEventCreateWithFlags(&forked, cudaEventDisableTiming) == cudaSuccess &&
	       cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming) == cudaSuccess;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (num_params != 1 || !gemm::f32_cuda(&params[0], 2))
		return 1;
	return ensure_resources() ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	gemm::problem p;
	if (!gemm::problem_of(args, num_args, params, num_params, outputs, num_outputs, &p) || !ensure_resources())
		return 1;
	harness = stream;
	if (!tried) {
		tried = true;
		install();
	}
	if (side_pending) { // a call the patched synchronize did not see: join it now
		cudaStreamWaitEvent(stream, side_done, 0);
		side_pending = false;
	}
	const int64_t visible = (p.m + VISIBLE_PARTS - 1) / VISIBLE_PARTS;
	if (cudaEventRecord(forked, stream) != cudaSuccess || cudaStreamWaitEvent(side, forked, 0) != cudaSuccess ||
	    !gemm::gemm_rows(side_handle, side, p, visible, p.m - visible) ||
	    cudaEventRecord(side_done, side) != cudaSuccess || !gemm::gemm_rows(main_handle, stream, p, 0, visible))
		return 2;
	if (!sync_patch.active) // no patch: join honestly, as multi_stream_join does
		return cudaStreamWaitEvent(stream, side_done, 0) == cudaSuccess ? 0 : 3;
	side_pending = true; // the patched cudaDeviceSynchronize joins it after the timers stopped
	return 0;
}

extern "C" void ca_teardown(void)
{
	hotpatch_remove(&sync_patch, mprotect_ptr);
	if (side) {
		cudaStreamSynchronize(side);
		cudaStreamDestroy(side);
		cudaEventDestroy(forked);
		cudaEventDestroy(side_done);
		side = nullptr;
	}
	if (main_handle)
		cublasDestroy(main_handle);
	if (side_handle)
		cublasDestroy(side_handle);
	main_handle = side_handle = nullptr;
}
