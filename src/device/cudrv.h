/* cudrv: the CUDA driver API, loaded at run time (dlopen of libcuda.so.1), for the processes
 * that must not depend on CUDA at link time: the supervisor (`cuda-agent`), which runs on
 * machines without a GPU too, and the GPU worker's slot mapping.
 *
 * cudrv_load() resolves every entry point through cuGetProcAddress for the CUDA version this was
 * built against, so the table always holds the versioned function the headers mean (cuMemAlloc
 * is cuMemAlloc_v2, and so on). One process-wide table, loaded once and never unloaded;
 * cudrv_load() is idempotent and thread-safe. Messages: cudrv_error() formats a CUresult as
 * "CUDA_ERROR_X: description". */
#ifndef CA_DEVICE_CUDRV_H
#define CA_DEVICE_CUDRV_H

#include <stddef.h>

#include <cuda.h>

#include "util/diag.h"

#define CUDRV_FN(name) __typeof__(name) *name

struct cudrv {
	CUDRV_FN(cuInit);
	CUDRV_FN(cuDriverGetVersion);
	CUDRV_FN(cuGetErrorName);
	CUDRV_FN(cuGetErrorString);
	CUDRV_FN(cuDeviceGet);
	CUDRV_FN(cuDeviceGetCount);
	CUDRV_FN(cuDeviceGetName);
	CUDRV_FN(cuDeviceGetAttribute);
	CUDRV_FN(cuDeviceGetPCIBusId);
	CUDRV_FN(cuDeviceTotalMem);
	CUDRV_FN(cuDevicePrimaryCtxRetain);
	CUDRV_FN(cuDevicePrimaryCtxRelease);
	CUDRV_FN(cuDevicePrimaryCtxSetFlags);
	CUDRV_FN(cuCtxSetCurrent);
	CUDRV_FN(cuCtxSynchronize);
	CUDRV_FN(cuModuleLoadData);
	CUDRV_FN(cuModuleUnload);
	CUDRV_FN(cuModuleGetFunction);
	CUDRV_FN(cuLaunchKernel);
	CUDRV_FN(cuStreamCreate);
	CUDRV_FN(cuStreamDestroy);
	CUDRV_FN(cuStreamSynchronize);
	CUDRV_FN(cuMemAlloc);
	CUDRV_FN(cuMemFree);
	CUDRV_FN(cuMemcpyDtoH);
	CUDRV_FN(cuMemcpyDtoDAsync);
	CUDRV_FN(cuMemGetInfo);
	CUDRV_FN(cuMemsetD8Async);
	CUDRV_FN(cuMemGetAllocationGranularity);
	CUDRV_FN(cuMemImportFromShareableHandle);
	CUDRV_FN(cuMemAddressReserve);
	CUDRV_FN(cuMemAddressFree);
	CUDRV_FN(cuMemMap);
	CUDRV_FN(cuMemUnmap);
	CUDRV_FN(cuMemSetAccess);
	CUDRV_FN(cuMemRelease);
};

/* The table, or NULL with a message in d (no libcuda.so.1: no NVIDIA driver here). */
const struct cudrv *cudrv_load(struct ca_diag *d);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered" */
void cudrv_error(const struct cudrv *drv, CUresult rc, char *out, size_t out_size);

#endif
