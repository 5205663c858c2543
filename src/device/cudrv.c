#include "device/cudrv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct cudrv table;
static const struct cudrv *loaded;
static char load_error[CA_DIAG_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

typedef CUresult (*get_proc_fn)(const char *symbol, void **pfn, int cuda_version,
				cuuint64_t flags, CUdriverProcAddressQueryResult *status);

static void load_once(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	get_proc_fn get_proc;
	CUresult rc;
	const struct {
		const char *name;
		void **slot;
	} names[] = {
#define ENTRY(fn) {#fn, (void **)&table.fn}
		ENTRY(cuInit),
		ENTRY(cuDriverGetVersion),
		ENTRY(cuGetErrorName),
		ENTRY(cuGetErrorString),
		ENTRY(cuDeviceGet),
		ENTRY(cuDeviceGetCount),
		ENTRY(cuDeviceGetName),
		ENTRY(cuDeviceGetAttribute),
		ENTRY(cuDeviceGetPCIBusId),
		{"cuDeviceTotalMem", (void **)&table.cuDeviceTotalMem},
		ENTRY(cuDevicePrimaryCtxRetain),
		{"cuDevicePrimaryCtxRelease", (void **)&table.cuDevicePrimaryCtxRelease},
		{"cuDevicePrimaryCtxSetFlags", (void **)&table.cuDevicePrimaryCtxSetFlags},
		ENTRY(cuCtxSetCurrent),
		ENTRY(cuCtxSynchronize),
		ENTRY(cuModuleLoadData),
		ENTRY(cuModuleUnload),
		ENTRY(cuModuleGetFunction),
		ENTRY(cuLaunchKernel),
		ENTRY(cuStreamCreate),
		{"cuStreamDestroy", (void **)&table.cuStreamDestroy},
		ENTRY(cuStreamSynchronize),
		{"cuMemAlloc", (void **)&table.cuMemAlloc},
		{"cuMemFree", (void **)&table.cuMemFree},
		{"cuMemcpyDtoH", (void **)&table.cuMemcpyDtoH},
		{"cuMemcpyDtoDAsync", (void **)&table.cuMemcpyDtoDAsync},
		{"cuMemGetInfo", (void **)&table.cuMemGetInfo},
		ENTRY(cuMemsetD8Async),
		ENTRY(cuMemGetAllocationGranularity),
		ENTRY(cuMemImportFromShareableHandle),
		ENTRY(cuMemAddressReserve),
		ENTRY(cuMemAddressFree),
		ENTRY(cuMemMap),
		ENTRY(cuMemUnmap),
		ENTRY(cuMemSetAccess),
		ENTRY(cuMemRelease),
#undef ENTRY
	};

	if (!lib) {
		snprintf(load_error, sizeof load_error,
			 "cannot load libcuda.so.1 (no NVIDIA driver on this machine): %s",
			 dlerror());
		return;
	}
	*(void **)&get_proc = dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		snprintf(load_error, sizeof load_error,
			 "libcuda.so.1 has no cuGetProcAddress_v2 (the driver is older than CUDA 12)");
		return;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		rc = get_proc(names[i].name, names[i].slot, CUDA_VERSION,
			      CU_GET_PROC_ADDRESS_DEFAULT, &status);
		if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*names[i].slot) {
			snprintf(load_error, sizeof load_error,
				 "the NVIDIA driver lacks %s for CUDA %d.%d (driver too old?)",
				 names[i].name, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
			return;
		}
	}
	rc = table.cuInit(0);
	if (rc != CUDA_SUCCESS) {
		const char *name = NULL;
		table.cuGetErrorName(rc, &name);
		snprintf(load_error, sizeof load_error, "cuInit failed: %s",
			 name ? name : "unknown error");
		return;
	}
	loaded = &table;
}

const struct cudrv *cudrv_load(struct ca_diag *d)
{
	pthread_once(&once, load_once);
	if (!loaded)
		ca_fail(d, CA_ERR_UNSUPPORTED, "%s", load_error);
	return loaded;
}

void cudrv_error(const struct cudrv *drv, CUresult rc, char *out, size_t out_size)
{
	const char *name = NULL, *text = NULL;
	if (drv) {
		drv->cuGetErrorName(rc, &name);
		drv->cuGetErrorString(rc, &text);
	}
	snprintf(out, out_size, "%s: %s", name ? name : "CUDA error", text ? text : "unknown");
}
