#include "device/device.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "device/cudrv.h"
#include "device/prep.h"
#include "util/clock.h"

/* The fatbin of kernels.cu, embedded by fatbin.S. */
extern const unsigned char ca_device_fatbin[];
extern const unsigned char ca_device_fatbin_end[];

#define THREADS 256u
#define MAX_BLOCKS 8192u
#define NVML_SUCCESS 0
#define NVML_CLOCK_SM 1
#define FLUSH_MIN_BYTES (2u << 20)

static int cu_fail(const struct device *dev, struct ca_diag *d, CUresult rc, const char *what)
{
	char text[256];
	cudrv_error(dev->drv, rc, text, sizeof text);
	return ca_fail(d, CA_ERR_IO, "the supervisor's GPU context: %s failed: %s", what, text);
}

static unsigned blocks_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;
	if (b > MAX_BLOCKS)
		b = MAX_BLOCKS;
	return b ? (unsigned)b : 1u;
}

/* ---- slots ------------------------------------------------------------------------------------- */

static int map_cuda(int ordinal, int fd, size_t bytes, struct device_slot *s, struct ca_diag *d)
{
	const struct cudrv *drv = cudrv_load(d);
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUmemGenericAllocationHandle handle = 0;
	CUdeviceptr ptr = 0;
	size_t gran = 0, size = 0;
	CUresult rc;
	char text[256];
	const char *what;

	if (!drv)
		return CA_ERR_UNSUPPORTED;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ordinal;
	what = "cuMemGetAllocationGranularity";
	if ((rc = drv->cuMemGetAllocationGranularity(&gran, &prop,
						      CU_MEM_ALLOC_GRANULARITY_MINIMUM)) ||
	    gran == 0)
		goto fail;
	size = (bytes + gran - 1) / gran * gran;
	what = "cuMemImportFromShareableHandle";
	if ((rc = drv->cuMemImportFromShareableHandle(&handle, (void *)(intptr_t)fd,
						       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)))
		goto fail;
	what = "cuMemAddressReserve";
	if ((rc = drv->cuMemAddressReserve(&ptr, size, 0, 0, 0)))
		goto fail;
	what = "cuMemMap";
	if ((rc = drv->cuMemMap(ptr, size, 0, handle, 0)))
		goto fail;
	memset(&access, 0, sizeof access);
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	what = "cuMemSetAccess";
	if ((rc = drv->cuMemSetAccess(ptr, size, &access, 1))) {
		drv->cuMemUnmap(ptr, size);
		goto fail;
	}
	s->dptr = ptr;
	s->mapped = size;
	s->handle = handle;
	return 0;
fail:
	if (ptr)
		drv->cuMemAddressFree(ptr, size);
	if (handle)
		drv->cuMemRelease(handle);
	cudrv_error(drv, rc, text, sizeof text);
	return ca_fail(d, CA_ERR_IO, "cannot map a %zu-byte slot: %s failed: %s", bytes, what,
		       text);
}

int device_slot_map(enum device_kind kind, int ordinal, int fd, size_t bytes,
		    struct device_slot *s, struct ca_diag *d)
{
	struct stat st;

	memset(s, 0, sizeof *s);
	s->kind = kind;
	s->bytes = bytes;
	if (bytes == 0)
		return ca_fail(d, CA_ERR_INVALID, "a slot needs a positive size");
	if (kind == DEVICE_CUDA)
		return map_cuda(ordinal, fd, bytes, s, d);
	if (kind != DEVICE_CPU)
		return ca_fail(d, CA_ERR_INVALID, "unknown slot kind");
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < bytes)
		return ca_fail(d, CA_ERR_INVALID, "slot descriptor %d is not a file of %zu bytes", fd,
			       bytes);
	s->host = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->host == MAP_FAILED) {
		s->host = NULL;
		return ca_fail(d, CA_ERR_IO, "cannot map a %zu-byte slot: %s", bytes,
			       strerror(errno));
	}
	s->mapped = bytes;
	return 0;
}

void device_slot_unmap(struct device_slot *s)
{
	struct ca_diag d;
	const struct cudrv *drv;

	if (s->kind == DEVICE_CPU && s->host)
		munmap(s->host, s->mapped);
	if (s->kind == DEVICE_CUDA && (drv = cudrv_load(&d)) != NULL) {
		if (s->dptr) {
			drv->cuMemUnmap(s->dptr, s->mapped);
			drv->cuMemAddressFree(s->dptr, s->mapped);
		}
		if (s->handle)
			drv->cuMemRelease(s->handle);
	}
	memset(s, 0, sizeof *s);
}

/* ---- NVML (optional: absent library or failures give unknown values) ---------------------------- */

static void nvml_open(struct device_nvml *n, const char *pci_bus_id)
{
	int (*init)(void);
	int (*by_bus)(const char *, void **);
	int (*driver)(char *, unsigned int);

	memset(n, 0, sizeof *n);
	n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!n->lib)
		return;
	*(void **)&init = dlsym(n->lib, "nvmlInit_v2");
	*(void **)&n->shutdown = dlsym(n->lib, "nvmlShutdown");
	*(void **)&by_bus = dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
	*(void **)&driver = dlsym(n->lib, "nvmlSystemGetDriverVersion");
	*(void **)&n->get_clock = dlsym(n->lib, "nvmlDeviceGetClockInfo");
	if (!init || !n->shutdown || init() != NVML_SUCCESS) {
		dlclose(n->lib);
		memset(n, 0, sizeof *n);
		return;
	}
	if (driver && driver(n->driver, (unsigned int)sizeof n->driver) != NVML_SUCCESS)
		n->driver[0] = '\0';
	n->driver[sizeof n->driver - 1] = '\0';
	if (by_bus && n->get_clock && pci_bus_id && pci_bus_id[0] &&
	    by_bus(pci_bus_id, &n->device) == NVML_SUCCESS)
		n->ok = true;
}

static void nvml_close(struct device_nvml *n)
{
	if (n->lib) {
		if (n->shutdown)
			n->shutdown();
		dlclose(n->lib);
	}
	memset(n, 0, sizeof *n);
}

int device_sm_clock(const struct device *dev)
{
	unsigned int mhz = 0;
	if (!dev->nvml.ok || dev->nvml.get_clock(dev->nvml.device, NVML_CLOCK_SM, &mhz) !=
				     NVML_SUCCESS)
		return -1;
	return (int)mhz;
}

/* ---- open and close ---------------------------------------------------------------------------- */

static int attribute(const struct device *dev, CUdevice cu, CUdevice_attribute a, int *out,
		     struct ca_diag *d)
{
	CUresult rc = dev->drv->cuDeviceGetAttribute(out, a, cu);
	return rc ? cu_fail(dev, d, rc, "cuDeviceGetAttribute") : 0;
}

static int open_cuda(struct device *dev, int ordinal, struct ca_diag *d)
{
	static const char *const kernels[] = {"ca_dev_perturb_f64", "ca_dev_perturb_f32",
					      "ca_dev_perturb_f16", "ca_dev_perturb_bf16"};
	CUdevice cu;
	CUcontext ctx = NULL;
	CUmodule module = NULL;
	CUstream stream = NULL;
	CUdeviceptr sum = 0;
	int count = 0, l2 = 0, rc;
	CUresult r;

	if (!(dev->drv = cudrv_load(d)))
		return CA_ERR_UNSUPPORTED;
	if (ca_device_fatbin_end - ca_device_fatbin < 16)
		return ca_fail(d, CA_ERR_UNSUPPORTED,
			       "this cuda-agent was built without its GPU kernels (no nvcc at build "
			       "time): rebuild where nvcc is installed");
	if ((r = dev->drv->cuDeviceGetCount(&count)) || count <= ordinal)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "no CUDA device %d (%d visible)", ordinal,
			       r ? 0 : count);
	if ((r = dev->drv->cuDeviceGet(&cu, ordinal)))
		return cu_fail(dev, d, r, "cuDeviceGet");
	if ((r = dev->drv->cuDeviceGetName(dev->name, (int)sizeof dev->name, cu)) ||
	    (r = dev->drv->cuDeviceGetPCIBusId(dev->pci_bus_id, (int)sizeof dev->pci_bus_id, cu)) ||
	    (r = dev->drv->cuDeviceTotalMem(&dev->total_mem, cu)) ||
	    (r = dev->drv->cuDriverGetVersion(&dev->driver_version)))
		return cu_fail(dev, d, r, "reading the device's properties");
	if ((rc = attribute(dev, cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &dev->cc_major,
			    d)) ||
	    (rc = attribute(dev, cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &dev->cc_minor,
			    d)) ||
	    (rc = attribute(dev, cu, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &dev->sm_count, d)) ||
	    (rc = attribute(dev, cu, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &l2, d)))
		return rc;
	dev->l2_bytes = l2 > 0 ? (size_t)l2 : 0;
	/* Spin while waiting: a probe's end is seen at once rather than after a wake-up. Fails
	 * harmlessly when the primary context is already active in this process. */
	dev->drv->cuDevicePrimaryCtxSetFlags(cu, CU_CTX_SCHED_SPIN);
	if ((r = dev->drv->cuDevicePrimaryCtxRetain(&ctx, cu)))
		return cu_fail(dev, d, r, "cuDevicePrimaryCtxRetain");
	dev->ctx = ctx;
	if ((r = dev->drv->cuCtxSetCurrent(ctx)))
		return cu_fail(dev, d, r, "cuCtxSetCurrent");
	if ((r = dev->drv->cuModuleLoadData(&module, ca_device_fatbin)))
		return cu_fail(dev, d, r, "loading the supervisor's kernels (cuModuleLoadData)");
	dev->module = module;
	if ((r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_empty, module,
					       "ca_dev_empty")) ||
	    (r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_hold, module,
					       "ca_dev_hold")) ||
	    (r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_stamp, module,
					       "ca_dev_stamp")) ||
	    (r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_checksum, module,
					       "ca_dev_checksum")) ||
	    (r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_flush, module,
					       "ca_dev_l2_flush")))
		return cu_fail(dev, d, r, "cuModuleGetFunction");
	for (int i = 0; i < 4; i++)
		if ((r = dev->drv->cuModuleGetFunction((CUfunction *)&dev->fn_perturb[i], module,
						       kernels[i])))
			return cu_fail(dev, d, r, "cuModuleGetFunction");
	if ((r = dev->drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)))
		return cu_fail(dev, d, r, "cuStreamCreate");
	dev->stream = stream;
	if ((r = dev->drv->cuMemAlloc(&sum, 8)))
		return cu_fail(dev, d, r, "cuMemAlloc");
	dev->sum_buf = sum;
	if ((r = dev->drv->cuMemAlloc(&sum, (DEVICE_STAMPS + 1) * sizeof(uint64_t))))
		return cu_fail(dev, d, r, "cuMemAlloc");
	dev->stamp_buf = sum;
	nvml_open(&dev->nvml, dev->pci_bus_id);
	return 0;
}

int device_open(struct device *dev, enum device_kind kind, int ordinal, struct ca_diag *d)
{
	int rc = 0;

	memset(dev, 0, sizeof *dev);
	dev->kind = kind;
	dev->ordinal = ordinal;
	if (kind == DEVICE_CPU) {
		snprintf(dev->name, sizeof dev->name, "cpu");
		return 0;
	}
	if (kind != DEVICE_CUDA)
		return ca_fail(d, CA_ERR_INVALID, "device_open: unknown kind");
	rc = open_cuda(dev, ordinal, d);
	if (rc)
		device_close(dev);
	return rc;
}

void device_close(struct device *dev)
{
	if (dev->kind == DEVICE_CUDA && dev->drv) {
		if (dev->ctx)
			dev->drv->cuCtxSetCurrent((CUcontext)dev->ctx);
		if (dev->stream)
			dev->drv->cuStreamSynchronize((CUstream)dev->stream);
		if (dev->flush_buf)
			dev->drv->cuMemFree(dev->flush_buf);
		if (dev->sum_buf)
			dev->drv->cuMemFree(dev->sum_buf);
		if (dev->stamp_buf)
			dev->drv->cuMemFree(dev->stamp_buf);
		if (dev->stream)
			dev->drv->cuStreamDestroy((CUstream)dev->stream);
		if (dev->module)
			dev->drv->cuModuleUnload((CUmodule)dev->module);
		if (dev->ctx) {
			CUdevice cu;
			if (dev->drv->cuDeviceGet(&cu, dev->ordinal) == CUDA_SUCCESS)
				dev->drv->cuDevicePrimaryCtxRelease(cu);
		}
	}
	nvml_close(&dev->nvml);
	memset(dev, 0, sizeof *dev);
}

static int make_current(struct device *dev, struct ca_diag *d)
{
	CUresult r = dev->drv->cuCtxSetCurrent((CUcontext)dev->ctx);
	return r ? cu_fail(dev, d, r, "cuCtxSetCurrent") : 0;
}

int device_slot_import(struct device *dev, int fd, size_t bytes, struct device_slot *s,
		       struct ca_diag *d)
{
	int rc;
	if (dev->kind == DEVICE_CUDA && (rc = make_current(dev, d)))
		return rc;
	return device_slot_map(dev->kind, dev->ordinal, fd, bytes, s, d);
}

/* ---- preparation ------------------------------------------------------------------------------- */

static int launch(struct device *dev, void *fn, unsigned blocks, void **params, const char *what,
		  struct ca_diag *d)
{
	CUresult r = dev->drv->cuLaunchKernel((CUfunction)fn, blocks, 1, 1, THREADS, 1, 1, 0,
					      (CUstream)dev->stream, params, NULL);
	return r ? cu_fail(dev, d, r, what) : 0;
}

static int check_range(const struct device_slot *s, size_t off, size_t nbytes, struct ca_diag *d)
{
	if (off > s->bytes || nbytes > s->bytes - off)
		return ca_fail(d, CA_ERR_INVALID, "a range [%zu, +%zu) outside a %zu-byte slot", off,
			       nbytes, s->bytes);
	return 0;
}

int device_flush_alloc(struct device *dev, double factor, size_t *bytes, struct ca_diag *d)
{
	size_t want;
	CUdeviceptr buf = 0;
	CUresult r;
	int rc;

	*bytes = dev->flush_bytes;
	if (dev->kind != DEVICE_CUDA || !(factor > 0))
		return 0;
	want = (size_t)(factor * (double)dev->l2_bytes);
	if (want < FLUSH_MIN_BYTES)
		want = FLUSH_MIN_BYTES;
	want = want / 16 * 16;
	if (dev->flush_buf && dev->flush_bytes == want) /* a kept device's, the same size */
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	if (dev->flush_buf) {
		dev->drv->cuMemFree(dev->flush_buf);
		dev->flush_buf = 0;
		dev->flush_bytes = 0;
	}
	if ((r = dev->drv->cuMemAlloc(&buf, want)))
		return cu_fail(dev, d, r, "allocating the L2 flush buffer (cuMemAlloc)");
	if ((r = dev->drv->cuMemsetD8Async(buf, 0x5a, want, (CUstream)dev->stream)) ||
	    (r = dev->drv->cuStreamSynchronize((CUstream)dev->stream))) {
		dev->drv->cuMemFree(buf);
		return cu_fail(dev, d, r, "writing the L2 flush buffer");
	}
	dev->flush_buf = buf;
	dev->flush_bytes = want;
	*bytes = want;
	return 0;
}

int device_buffer_alloc(struct device *dev, size_t bytes, size_t reserve, struct device_buffer *b,
			struct ca_diag *d)
{
	size_t free_b = 0, total = 0;
	CUdeviceptr ptr = 0;
	CUresult r;
	int rc;

	memset(b, 0, sizeof *b);
	if (bytes == 0)
		return ca_fail(d, CA_ERR_INVALID, "a device buffer of 0 bytes");
	if (dev->kind == DEVICE_CPU) {
		if (!(b->host = malloc(bytes)))
			return CA_ERR_NOMEM;
		b->bytes = bytes;
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	if ((r = dev->drv->cuMemGetInfo(&free_b, &total)))
		return cu_fail(dev, d, r, "cuMemGetInfo");
	if (free_b < reserve || free_b - reserve < bytes)
		return CA_ERR_NOMEM;
	if (dev->drv->cuMemAlloc(&ptr, bytes))
		return CA_ERR_NOMEM;
	b->dptr = ptr;
	b->bytes = bytes;
	return 0;
}

void device_buffer_free(struct device *dev, struct device_buffer *b)
{
	if (b->host)
		free(b->host);
	else if (b->dptr && dev->drv && make_current(dev, &(struct ca_diag){{0}}) == 0)
		dev->drv->cuMemFree(b->dptr);
	memset(b, 0, sizeof *b);
}

int device_buffer_copy(struct device *dev, struct device_slot *s, size_t off,
		       struct device_buffer *b, size_t boff, size_t nbytes, bool to_buffer,
		       struct ca_diag *d)
{
	CUresult r;
	int rc;

	if ((rc = check_range(s, off, nbytes, d)))
		return rc;
	if (boff > b->bytes || nbytes > b->bytes - boff)
		return ca_fail(d, CA_ERR_INVALID, "a range [%zu, +%zu) outside a %zu-byte buffer",
			       boff, nbytes, b->bytes);
	if (nbytes == 0)
		return 0;
	if (dev->kind == DEVICE_CPU) {
		unsigned char *slot = (unsigned char *)s->host + off, *buf = (unsigned char *)b->host + boff;
		memcpy(to_buffer ? buf : slot, to_buffer ? slot : buf, nbytes);
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	r = dev->drv->cuMemcpyDtoDAsync(to_buffer ? b->dptr + boff : s->dptr + off,
					to_buffer ? s->dptr + off : b->dptr + boff, nbytes,
					(CUstream)dev->stream);
	return r ? cu_fail(dev, d, r, "copying a slot (cuMemcpyDtoDAsync)") : 0;
}

int device_poison(struct device *dev, struct device_slot *s, size_t off, size_t nbytes,
		  struct ca_diag *d)
{
	CUresult r;
	int rc;

	if ((rc = check_range(s, off, nbytes, d)) || nbytes == 0)
		return rc;
	if (dev->kind == DEVICE_CPU) {
		memset((unsigned char *)s->host + off, 0xff, nbytes);
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	r = dev->drv->cuMemsetD8Async(s->dptr + off, 0xff, nbytes, (CUstream)dev->stream);
	return r ? cu_fail(dev, d, r, "poisoning the outputs (cuMemsetD8Async)") : 0;
}

static void perturb_cpu(void *p, size_t n, enum ca_dtype t, uint64_t from, uint64_t to,
			uint64_t thr, uint64_t layout)
{
	for (size_t i = 0; i < n; i++) {
		float f = ca_prep_toggle(from, to, ca_prep_key(i, layout), thr);
		if (f == 1.0f)
			continue;
		switch (t) {
		case CA_DTYPE_F64: ((double *)p)[i] *= (double)f; break;
		case CA_DTYPE_F32: ((float *)p)[i] *= f; break;
		case CA_DTYPE_F16: ((uint16_t *)p)[i] = ca_prep_scale_f16(((uint16_t *)p)[i], f); break;
		case CA_DTYPE_BF16:
			((uint16_t *)p)[i] = ca_prep_scale_bf16(((uint16_t *)p)[i], f);
			break;
		default: return;
		}
	}
}

int device_perturb(struct device *dev, struct device_slot *s, size_t off, size_t numel,
		   enum ca_dtype t, uint64_t layout, uint64_t from, uint64_t to, double fraction,
		   struct ca_diag *d)
{
	int idx = t == CA_DTYPE_F64 ? 0 : t == CA_DTYPE_F32 ? 1 : t == CA_DTYPE_F16 ? 2
		: t == CA_DTYPE_BF16 ? 3 : -1;
	size_t size = ca_dtype_size(t);
	uint64_t thr = ca_prep_threshold(fraction);
	CUdeviceptr p;
	int rc;

	if (idx < 0 || numel == 0 || from == to)
		return 0;
	if (numel > SIZE_MAX / size)
		return ca_fail(d, CA_ERR_LIMIT, "perturb: size overflow");
	if ((rc = check_range(s, off, numel * size, d)))
		return rc;
	if (dev->kind == DEVICE_CPU) {
		perturb_cpu((unsigned char *)s->host + off, numel, t, from, to, thr, layout);
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	p = s->dptr + off;
	void *args[] = {&p, &numel, &from, &to, &thr, &layout};
	return launch(dev, dev->fn_perturb[idx], blocks_for(numel), args,
		      "perturbing an input (cuLaunchKernel)", d);
}

int device_checksum_reset(struct device *dev, struct ca_diag *d)
{
	CUresult r;
	int rc;
	dev->cpu_sum = 0;
	if (dev->kind != DEVICE_CUDA)
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	r = dev->drv->cuMemsetD8Async(dev->sum_buf, 0, 8, (CUstream)dev->stream);
	return r ? cu_fail(dev, d, r, "checksum (cuMemsetD8Async)") : 0;
}

int device_checksum_add(struct device *dev, struct device_slot *s, size_t off, size_t nbytes,
			uint64_t salt, struct ca_diag *d)
{
	size_t nwords = nbytes / 8;
	unsigned ntail = (unsigned)(nbytes % 8);
	CUdeviceptr words, tail;
	int rc;

	if ((rc = check_range(s, off, nbytes, d)))
		return rc;
	if (off % 8)
		return ca_fail(d, CA_ERR_INVALID, "checksum: offset %zu is not 8-byte aligned", off);
	if (nbytes == 0)
		return 0;
	if (dev->kind == DEVICE_CPU) {
		const unsigned char *p = (const unsigned char *)s->host + off;
		uint64_t acc = 0, w;
		for (size_t i = 0; i < nwords; i++) {
			memcpy(&w, p + 8 * i, 8);
			acc += ca_prep_checksum_word(w, i, salt);
		}
		if (ntail) {
			w = 0;
			for (unsigned k = 0; k < ntail; k++)
				w |= (uint64_t)p[8 * nwords + k] << (8 * k);
			acc += ca_prep_checksum_word(w, nwords, salt);
		}
		dev->cpu_sum += acc;
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	words = s->dptr + off;
	tail = words + nwords * 8;
	void *args[] = {&words, &nwords, &tail, &ntail, &salt, &dev->sum_buf};
	return launch(dev, dev->fn_checksum, blocks_for(nwords ? nwords : 1), args,
		      "checksum (cuLaunchKernel)", d);
}

int device_checksum_read(struct device *dev, uint64_t *sum, struct ca_diag *d)
{
	unsigned long long got = 0;
	CUresult r;
	int rc;

	*sum = dev->cpu_sum;
	if (dev->kind != DEVICE_CUDA)
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	if ((r = dev->drv->cuStreamSynchronize((CUstream)dev->stream)) ||
	    (r = dev->drv->cuMemcpyDtoH(&got, dev->sum_buf, 8)))
		return cu_fail(dev, d, r, "checksum (reading the sum)");
	*sum = got;
	return 0;
}

int device_flush_l2(struct device *dev, struct ca_diag *d)
{
	size_t n;
	CUdeviceptr buf, sink;
	int rc;

	if (dev->kind != DEVICE_CUDA || !dev->flush_buf)
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	n = dev->flush_bytes / 16 - 1; /* the last 16 bytes are the sink */
	buf = dev->flush_buf;
	sink = dev->flush_buf + n * 16;
	dev->flush_value++;
	void *args[] = {&buf, &n, &dev->flush_value, &sink};
	return launch(dev, dev->fn_flush, blocks_for(n), args, "flushing L2 (cuLaunchKernel)", d);
}

int device_hold(struct device *dev, double seconds, struct ca_diag *d)
{
	unsigned long long ns;
	CUresult r;
	int rc;
	if (dev->kind != DEVICE_CUDA || !(seconds > 0))
		return 0;
	if (seconds > 0.1)
		return ca_fail(d, CA_ERR_INVALID, "a hold of %.3f s (at most 0.1 s)", seconds);
	if ((rc = make_current(dev, d)))
		return rc;
	ns = (unsigned long long)(seconds * 1e9);
	CUdeviceptr at = dev->stamp_buf;
	void *args[] = {&ns, &at};
	dev->held = false;
	dev->hold_at = ca_now();
	r = dev->drv->cuLaunchKernel((CUfunction)dev->fn_hold, 1, 1, 1, 1, 1, 1, 0,
				     (CUstream)dev->stream, args, NULL);
	if (r)
		return cu_fail(dev, d, r, "holding the GPU (cuLaunchKernel)");
	dev->held = true;
	return 0;
}

int device_probe_start(struct device *dev, int k, struct ca_diag *d)
{
	CUresult r;
	int rc;

	dev->probe_t0 = ca_now();
	if (dev->kind != DEVICE_CUDA) {
		if (k >= 0 && k < DEVICE_STAMPS)
			dev->probe_at[k] = dev->probe_t0;
		return 0;
	}
	if ((rc = make_current(dev, d)))
		return rc;
	dev->probe_t0 = ca_now();
	if (k >= 0 && k < DEVICE_STAMPS) {
		CUdeviceptr at = dev->stamp_buf + (CUdeviceptr)(1 + k) * sizeof(uint64_t);
		void *args[] = {&at};
		r = dev->drv->cuLaunchKernel((CUfunction)dev->fn_stamp, 1, 1, 1, 1, 1, 1, 0,
					     (CUstream)dev->stream, args, NULL);
		dev->probe_at[k] = ca_now(); /* after the launch: a late stamp only lowers a wait */
	} else {
		r = dev->drv->cuLaunchKernel((CUfunction)dev->fn_empty, 1, 1, 1, 1, 1, 1, 0,
					     (CUstream)dev->stream, NULL, NULL);
	}
	return r ? cu_fail(dev, d, r, "probing the GPU") : 0;
}

int device_probe_finish(struct device *dev, double *seconds, struct ca_diag *d)
{
	int rc = device_sync(dev, d);
	*seconds = dev->kind == DEVICE_CUDA ? ca_now() - dev->probe_t0 : 0;
	return rc;
}

int device_probe_waits(struct device *dev, int n, double *wait_s, struct ca_diag *d)
{
	uint64_t g[DEVICE_STAMPS + 1];
	bool held = dev->held;
	CUresult r;
	int rc;

	if (n > DEVICE_STAMPS)
		n = DEVICE_STAMPS;
	for (int k = 0; k < n; k++)
		wait_s[k] = NAN;
	dev->held = false;
	if (dev->kind != DEVICE_CUDA || !held || n <= 0)
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	if ((r = dev->drv->cuMemcpyDtoH(g, dev->stamp_buf, (size_t)(n + 1) * sizeof g[0])))
		return cu_fail(dev, d, r, "reading the probes' stamps (cuMemcpyDtoH)");
	for (int k = 0; k < n; k++)
		wait_s[k] = (double)(int64_t)(g[1 + k] - g[0]) * 1e-9 - (dev->probe_at[k] - dev->hold_at);
	return 0;
}

int device_sync(struct device *dev, struct ca_diag *d)
{
	CUresult r;
	int rc;
	if (dev->kind != DEVICE_CUDA)
		return 0;
	if ((rc = make_current(dev, d)))
		return rc;
	r = dev->drv->cuStreamSynchronize((CUstream)dev->stream);
	return r ? cu_fail(dev, d, r, "cuStreamSynchronize") : 0;
}

int device_probe(struct device *dev, double *seconds, struct ca_diag *d)
{
	int rc = device_probe_start(dev, -1, d);
	if (rc) {
		*seconds = 0;
		return rc;
	}
	return device_probe_finish(dev, seconds, d);
}
