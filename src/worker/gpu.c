#include "worker/gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/hash.h"
#include "worker/kernels.h"

/* ---- failures ----------------------------------------------------------------------------------- */

int werr(struct worker_error *e, const char *code, bool fatal, int rc, const char *fmt, ...)
{
	va_list ap;
	e->code = code;
	e->fatal = fatal;
	va_start(ap, fmt);
	vsnprintf(e->diag.msg, sizeof e->diag.msg, fmt, ap);
	va_end(ap);
	return rc;
}

const char *gpu_fault_code(cudaError_t err)
{
	switch (err) {
	case cudaErrorIllegalAddress: return "fault.illegal_address";
	case cudaErrorMisalignedAddress: return "fault.misaligned_address";
	case cudaErrorIllegalInstruction: return "fault.illegal_instruction";
	case cudaErrorLaunchFailure: return "fault.launch_failure";
	default: return "fault.cuda_error";
	}
}

static int werr_cuda_v(struct worker_error *e, cudaError_t err, const char *oom_code,
		       const char *fmt, va_list ap)
{
	char what[1024];
	vsnprintf(what, sizeof what, fmt, ap);
	e->code = err == cudaErrorMemoryAllocation ? oom_code : gpu_fault_code(err);
	e->fatal = true;
	snprintf(e->diag.msg, sizeof e->diag.msg, "%s: %s: %s", what, cudaGetErrorName(err),
		 cudaGetErrorString(err));
	return err == cudaErrorMemoryAllocation ? CA_ERR_NOMEM : CA_ERR_CHILD;
}

int werr_cuda(struct worker_error *e, cudaError_t err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = werr_cuda_v(e, err, "worker.oom", fmt, ap);
	va_end(ap);
	return rc;
}

int werr_cuda_call(struct worker_error *e, cudaError_t err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = werr_cuda_v(e, err, "fault.device_oom", fmt, ap);
	va_end(ap);
	return rc;
}

bool worker_error_is_call_failure(const struct worker_error *e)
{
	return e->code && (strncmp(e->code, "abi.forward", 11) == 0 ||
			   strncmp(e->code, "abi.setup", 9) == 0 ||
			   strncmp(e->code, "verify.", 7) == 0 || strncmp(e->code, "fault.", 6) == 0 ||
			   strncmp(e->code, "hack.", 5) == 0);
}

/* ---- device and harness resources --------------------------------------------------------------- */

void gpu_format_version(int v, char *out, size_t out_size)
{
	snprintf(out, out_size, "%d.%d", v / 1000, (v % 1000) / 10);
}

static int attr(int *out, enum cudaDeviceAttr a, int device, const char *name,
		struct worker_error *e)
{
	cudaError_t err = cudaDeviceGetAttribute(out, a, device);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaDeviceGetAttribute(%s) on device %d", name, device);
	return 0;
}

int gpu_ctx_open(struct gpu_ctx *g, int device, struct worker_error *e)
{
	struct cudaDeviceProp prop;
	cudaError_t err;
	int count = 0, l2 = 0, rc;

	memset(g, 0, sizeof *g);
	g->device = device;
	err = cudaGetDeviceCount(&count);
	if (err != cudaSuccess)
		return werr(e, "worker.no_gpu", true, CA_ERR_UNSUPPORTED,
			    "no usable CUDA device: cudaGetDeviceCount: %s: %s",
			    cudaGetErrorName(err), cudaGetErrorString(err));
	if (count == 0)
		return werr(e, "worker.no_gpu", true, CA_ERR_UNSUPPORTED,
			    "no CUDA device is visible to the worker");
	if (device >= count)
		return werr(e, "worker.no_gpu", true, CA_ERR_UNSUPPORTED,
			    "the plan asks for device %d but only %d CUDA device%s visible", device,
			    count, count == 1 ? " is" : "s are");
	err = cudaSetDevice(device);
	if (err == cudaSuccess)
		err = cudaFree(NULL); /* creates the primary context */
	if (err != cudaSuccess)
		return werr(e, "worker.no_gpu", true, CA_ERR_UNSUPPORTED,
			    "cannot create a CUDA context on device %d: %s: %s", device,
			    cudaGetErrorName(err), cudaGetErrorString(err));

	err = cudaGetDeviceProperties(&prop, device);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaGetDeviceProperties(%d)", device);
	snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof prop.name, prop.name);
	g->total_mem = prop.totalGlobalMem;
	if ((rc = attr(&g->cc_major, cudaDevAttrComputeCapabilityMajor, device,
		       "compute capability major", e)) ||
	    (rc = attr(&g->cc_minor, cudaDevAttrComputeCapabilityMinor, device,
		       "compute capability minor", e)) ||
	    (rc = attr(&g->sm_count, cudaDevAttrMultiProcessorCount, device, "SM count", e)) ||
	    (rc = attr(&l2, cudaDevAttrL2CacheSize, device, "L2 size", e)))
		return rc;
	g->l2_bytes = l2 > 0 ? (size_t)l2 : 0;
	err = cudaDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof g->pci_bus_id, device);
	if (err != cudaSuccess)
		g->pci_bus_id[0] = '\0'; /* only used to find the device in NVML */
	if ((err = cudaDriverGetVersion(&g->driver_version)) != cudaSuccess)
		return werr_cuda(e, err, "cudaDriverGetVersion");
	if ((err = cudaRuntimeGetVersion(&g->runtime_version)) != cudaSuccess)
		return werr_cuda(e, err, "cudaRuntimeGetVersion");

	if ((err = cudaStreamCreate(&g->stream)) != cudaSuccess)
		return werr_cuda(e, err, "cudaStreamCreate (harness stream)");
	if ((err = cudaEventCreate(&g->ev_start)) != cudaSuccess)
		return werr_cuda(e, err, "cudaEventCreate (start event)");
	if ((err = cudaEventCreate(&g->ev_end)) != cudaSuccess)
		return werr_cuda(e, err, "cudaEventCreate (end event)");

	if (getrandom(&g->salt, sizeof g->salt, 0) != (ssize_t)sizeof g->salt)
		g->salt = (uint64_t)(ca_now() * 1e9) ^ ((uint64_t)getpid() << 32);
	return 0;
}

int gpu_ctx_alloc_flush(struct gpu_ctx *g, size_t bytes, struct worker_error *e)
{
	cudaError_t err;
	if (g->flush_buf || bytes == 0)
		return 0;
	err = cudaMalloc(&g->flush_buf, bytes);
	if (err != cudaSuccess) {
		g->flush_buf = NULL;
		return werr(e, "worker.oom", true, CA_ERR_NOMEM,
			    "cannot allocate the L2 flush buffer (%zu bytes): %s: %s", bytes,
			    cudaGetErrorName(err), cudaGetErrorString(err));
	}
	/* Initialized once; each flush only reads it (see ca_launch_l2_flush). */
	err = cudaMemset(g->flush_buf, 0x5a, bytes);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "initializing the L2 flush buffer");
	g->flush_bytes = bytes;
	return 0;
}

int gpu_ctx_alloc_checksums(struct gpu_ctx *g, size_t n, struct worker_error *e)
{
	cudaError_t err;
	if (n <= g->csum_cap)
		return 0;
	if (g->csum_dev)
		cudaFree(g->csum_dev);
	g->csum_dev = NULL;
	g->csum_cap = 0;
	err = cudaMalloc((void **)&g->csum_dev, n * sizeof *g->csum_dev);
	if (err != cudaSuccess) {
		g->csum_dev = NULL;
		return werr_cuda(e, err, "cudaMalloc (checksum scratch, %zu words)", n);
	}
	g->csum_cap = n;
	return 0;
}

void gpu_ctx_close(struct gpu_ctx *g)
{
	if (g->flush_buf)
		cudaFree(g->flush_buf);
	if (g->csum_dev)
		cudaFree(g->csum_dev);
	if (g->ev_start)
		cudaEventDestroy(g->ev_start);
	if (g->ev_end)
		cudaEventDestroy(g->ev_end);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	g->flush_buf = NULL;
	g->csum_dev = NULL;
	g->ev_start = g->ev_end = NULL;
	g->stream = NULL;
}

int gpu_ctx_free_bytes(struct gpu_ctx *g, size_t *free_bytes, struct worker_error *e)
{
	size_t total = 0;
	cudaError_t err = cudaMemGetInfo(free_bytes, &total);
	(void)g;
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaMemGetInfo");
	return 0;
}

static cudaError_t sync_device(struct gpu_ctx *g)
{
	cudaError_t err = cudaSetDevice(g->device);
	cudaError_t sync = cudaDeviceSynchronize();
	cudaError_t last = cudaGetLastError();
	if (err == cudaSuccess)
		err = sync;
	if (err == cudaSuccess)
		err = last;
	return err;
}

int gpu_sync(struct gpu_ctx *g, const char *what, struct worker_error *e)
{
	cudaError_t err = sync_device(g);
	return err != cudaSuccess ? werr_cuda(e, err, "%s", what) : 0;
}

int gpu_sync_after_call(struct gpu_ctx *g, const char *what, struct worker_error *e)
{
	cudaError_t err = sync_device(g);
	return err != cudaSuccess ? werr_cuda_call(e, err, "%s", what) : 0;
}

/* ---- NVML --------------------------------------------------------------------------------------- */

#define NVML_SUCCESS 0
#define NVML_CLOCK_SM 1

void gpu_nvml_open(struct gpu_nvml *n, const char *pci_bus_id)
{
	int (*init)(void);
	int (*by_bus)(const char *, void **);
	int (*driver)(char *, unsigned int);

	memset(n, 0, sizeof *n);
	n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!n->lib)
		return;
	init = (int (*)(void))dlsym(n->lib, "nvmlInit_v2");
	n->shutdown = (int (*)(void))dlsym(n->lib, "nvmlShutdown");
	by_bus = (int (*)(const char *, void **))dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
	driver = (int (*)(char *, unsigned int))dlsym(n->lib, "nvmlSystemGetDriverVersion");
	n->get_clock = (int (*)(void *, int, unsigned int *))dlsym(n->lib, "nvmlDeviceGetClockInfo");
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

int gpu_nvml_sm_clock(const struct gpu_nvml *n)
{
	unsigned int mhz = 0;
	if (!n->ok || n->get_clock(n->device, NVML_CLOCK_SM, &mhz) != NVML_SUCCESS)
		return -1;
	return (int)mhz;
}

void gpu_nvml_close(struct gpu_nvml *n)
{
	if (n->lib) {
		if (n->shutdown)
			n->shutdown();
		dlclose(n->lib);
	}
	memset(n, 0, sizeof *n);
}

/* ---- tensor sets --------------------------------------------------------------------------------- */

static int spec_size(const struct tensor_spec *t, size_t *numel, size_t *nbytes)
{
	uint64_t n = 1, b;
	size_t esize = ca_dtype_size(t->dtype);
	if (esize == 0 || t->ndim < 0 || t->ndim > CA_MAX_DIMS)
		return -1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0 ||
		    __builtin_mul_overflow(n, (uint64_t)t->shape[i], &n))
			return -1;
	}
	if (__builtin_mul_overflow(n, (uint64_t)esize, &b) || b > GPU_MAX_TENSOR_BYTES)
		return -1;
	*numel = (size_t)n;
	*nbytes = (size_t)b;
	return 0;
}

int tensor_specs_bytes(const struct tensor_spec *specs, int n, const char *prefix,
		       size_t *device_bytes, size_t *host_bytes, struct worker_error *e)
{
	*device_bytes = 0;
	*host_bytes = 0;
	for (int i = 0; i < n; i++) {
		size_t numel, nbytes;
		char desc[256];
		if (spec_size(&specs[i], &numel, &nbytes) != 0) {
			tensor_spec_format(&specs[i], desc, sizeof desc);
			return werr(e, "worker.bad_plan", true, CA_ERR_LIMIT,
				    "plan: %s.%d (%s) %s is too large (over %llu bytes)", prefix, i,
				    specs[i].name, desc, (unsigned long long)GPU_MAX_TENSOR_BYTES);
		}
		if (nbytes == 0)
			nbytes = 1;
		nbytes = (nbytes + 255) & ~(size_t)255; /* cudaMalloc granularity */
		if (specs[i].on_cpu)
			*host_bytes += nbytes;
		else
			*device_bytes += nbytes;
	}
	return 0;
}

size_t tensor_set_bytes(const struct tensor_set *s)
{
	size_t n = 0;
	for (int i = 0; i < s->n; i++)
		n += s->t[i].nbytes;
	return n;
}

int tensor_set_alloc(struct tensor_set *s, const char *prefix, const struct tensor_spec *specs,
		     int n, int device, struct worker_error *e)
{
	int rc = 0;

	memset(s, 0, sizeof *s);
	s->prefix = prefix;
	s->device = device;
	if (n <= 0)
		return 0;
	s->t = calloc((size_t)n, sizeof *s->t);
	s->dl = calloc((size_t)n, sizeof *s->dl);
	if (!s->t || !s->dl) {
		rc = werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory for %d tensors",
			  n);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct gpu_tensor *t = &s->t[i];
		size_t alloc;
		t->spec = &specs[i];
		t->on_cpu = specs[i].on_cpu;
		if (spec_size(&specs[i], &t->numel, &t->nbytes) != 0) {
			rc = werr(e, "worker.bad_plan", true, CA_ERR_LIMIT,
				  "plan: %s.%d (%s) is too large", prefix, i, specs[i].name);
			goto out;
		}
		alloc = t->nbytes ? t->nbytes : 1;
		if (t->on_cpu) {
			t->ptr = calloc(1, alloc);
			if (!t->ptr) {
				rc = werr(e, "worker.oom", true, CA_ERR_NOMEM,
					  "out of host memory for %s.%d (%zu bytes)", prefix, i,
					  alloc);
				goto out;
			}
		} else {
			cudaError_t err = cudaMalloc(&t->ptr, alloc);
			if (err != cudaSuccess) {
				char desc[256];
				t->ptr = NULL;
				tensor_spec_format(&specs[i], desc, sizeof desc);
				rc = werr(e, "worker.oom", true, CA_ERR_NOMEM,
					  "cannot allocate %zu bytes on the GPU for %s.%d (%s, %s): "
					  "%s: %s",
					  alloc, prefix, i, specs[i].name, desc,
					  cudaGetErrorName(err), cudaGetErrorString(err));
				goto out;
			}
		}
		s->n = i + 1;
	}
	tensor_set_refresh(s);
out:
	if (rc)
		tensor_set_free(s);
	return rc;
}

void tensor_set_free(struct tensor_set *s)
{
	for (int i = 0; i < s->n; i++) {
		if (!s->t[i].ptr)
			continue;
		if (s->t[i].on_cpu)
			free(s->t[i].ptr);
		else
			cudaFree(s->t[i].ptr);
	}
	free(s->t);
	free(s->dl);
	memset(s, 0, sizeof *s);
}

void tensor_set_refresh(struct tensor_set *s)
{
	for (int i = 0; i < s->n; i++) {
		struct gpu_tensor *t = &s->t[i];
		DLTensor *dl = &s->dl[i];
		int nd = t->spec->ndim;
		int64_t stride = 1;
		for (int k = nd - 1; k >= 0; k--) {
			t->shape[k] = t->spec->shape[k];
			t->strides[k] = stride;
			stride *= t->spec->shape[k] > 0 ? t->spec->shape[k] : 1;
		}
		dl->data = t->ptr;
		dl->device.device_type = t->on_cpu ? kDLCPU : kDLCUDA;
		dl->device.device_id = t->on_cpu ? 0 : s->device;
		dl->ndim = nd;
		ca_dtype_dlpack(t->spec->dtype, &dl->dtype.code, &dl->dtype.bits);
		dl->dtype.lanes = 1;
		dl->shape = t->shape;
		dl->strides = t->strides;
		dl->byte_offset = 0;
	}
}

static void describe_st(const struct st_tensor *x, char *out, size_t size)
{
	struct tensor_spec tmp;
	memset(&tmp, 0, sizeof tmp);
	tmp.dtype = x->dtype;
	tmp.ndim = x->ndim;
	for (int k = 0; k < x->ndim && k < CA_MAX_DIMS; k++)
		tmp.shape[k] = x->shape[k];
	tensor_spec_format(&tmp, out, size);
}

int tensor_set_check_file(const struct tensor_set *s, const struct safetensors *st,
			  const char *path, struct worker_error *e)
{
	if (st->count != (size_t)s->n)
		return werr(e, "worker.bad_input", true, CA_ERR_INVALID,
			    "%s holds %zu tensors but the spec has %d %s", path, st->count, s->n,
			    s->prefix);
	for (int i = 0; i < s->n; i++) {
		const struct gpu_tensor *t = &s->t[i];
		const struct st_tensor *x = safetensors_find_indexed(st, s->prefix, i);
		char want[256], got[256];
		bool same;
		if (!x)
			return werr(e, "worker.bad_input", true, CA_ERR_NOTFOUND,
				    "%s has no tensor %s.%d (%s)", path, s->prefix, i,
				    t->spec->name);
		same = x->dtype == t->spec->dtype && x->ndim == t->spec->ndim &&
		       x->nbytes == t->nbytes;
		for (int k = 0; same && k < x->ndim; k++)
			same = x->shape[k] == t->spec->shape[k];
		if (!same) {
			tensor_spec_format(t->spec, want, sizeof want);
			describe_st(x, got, sizeof got);
			return werr(e, "worker.bad_input", true, CA_ERR_INVALID,
				    "%s: %s.%d (%s) is %s but the spec says %s", path, s->prefix, i,
				    t->spec->name, got, want);
		}
	}
	return 0;
}

int tensor_set_upload(struct tensor_set *s, const struct safetensors *st, const char *path,
		      struct worker_error *e)
{
	int rc = tensor_set_check_file(s, st, path, e);
	if (rc)
		return rc;
	for (int i = 0; i < s->n; i++) {
		struct gpu_tensor *t = &s->t[i];
		const struct st_tensor *x = safetensors_find_indexed(st, s->prefix, i);
		if (t->nbytes == 0)
			continue;
		if (t->on_cpu) {
			memcpy(t->ptr, x->data, t->nbytes);
		} else {
			cudaError_t err = cudaMemcpy(t->ptr, x->data, t->nbytes,
						     cudaMemcpyHostToDevice);
			if (err != cudaSuccess)
				return werr_cuda(e, err, "uploading %s.%d from %s (cudaMemcpy)",
						 s->prefix, i, path);
		}
	}
	return 0;
}

int tensor_set_load_file(struct tensor_set *s, const char *path, struct worker_error *e)
{
	struct safetensors st;
	struct ca_diag d;
	int rc = safetensors_open(&st, path, &d);
	if (rc)
		return werr(e, "worker.bad_input", true, rc, "%s", d.msg);
	rc = tensor_set_upload(s, &st, path, e);
	safetensors_close(&st);
	return rc;
}

static void host_poison(struct gpu_tensor *t)
{
	unsigned char *p = t->ptr;
	uint16_t h16 = t->spec->dtype == CA_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
	uint32_t f32 = 0x7fc00000u;
	uint64_t f64 = 0x7ff8000000000000ull;
	switch (t->spec->dtype) {
	case CA_DTYPE_F64:
		for (size_t i = 0; i < t->numel; i++)
			memcpy(p + 8 * i, &f64, 8);
		break;
	case CA_DTYPE_F32:
		for (size_t i = 0; i < t->numel; i++)
			memcpy(p + 4 * i, &f32, 4);
		break;
	case CA_DTYPE_F16:
	case CA_DTYPE_BF16:
		for (size_t i = 0; i < t->numel; i++)
			memcpy(p + 2 * i, &h16, 2);
		break;
	default:
		memset(p, 0xff, t->nbytes);
	}
}

int tensor_set_poison(struct tensor_set *s, struct gpu_ctx *g, struct worker_error *e)
{
	for (int i = 0; i < s->n; i++) {
		struct gpu_tensor *t = &s->t[i];
		cudaError_t err;
		if (t->on_cpu) {
			host_poison(t);
			continue;
		}
		err = ca_launch_fill_nan(t->ptr, t->numel, t->spec->dtype, g->stream);
		if (err != cudaSuccess)
			return werr_cuda(e, err, "poisoning %s.%d", s->prefix, i);
	}
	return 0;
}

int tensor_set_perturb(struct tensor_set *s, struct gpu_ctx *g, double scale,
		       struct stats_rng *rng, struct worker_error *e)
{
	if (scale <= 0.0)
		return 0;
	for (int i = 0; i < s->n; i++) {
		struct gpu_tensor *t = &s->t[i];
		double factor;
		cudaError_t err;
		if (t->on_cpu || !ca_dtype_is_float(t->spec->dtype) || t->numel == 0)
			continue;
		factor = 1.0 + scale * stats_rng_signed_nonzero(rng);
		err = ca_launch_perturb(t->ptr, t->numel, t->spec->dtype, factor,
					stats_rng_next(rng), g->stream);
		if (err != cudaSuccess)
			return werr_cuda(e, err, "perturbing %s.%d", s->prefix, i);
	}
	return 0;
}

int tensor_set_checksums(const struct tensor_set *s, struct gpu_ctx *g, uint64_t *out,
			 struct worker_error *e)
{
	cudaError_t err;
	int rc;

	if (s->n == 0)
		return 0;
	if ((rc = gpu_ctx_alloc_checksums(g, (size_t)s->n, e)))
		return rc;
	err = cudaMemsetAsync(g->csum_dev, 0, (size_t)s->n * sizeof *g->csum_dev, g->stream);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "checksumming %s (cudaMemsetAsync)", s->prefix);
	for (int i = 0; i < s->n; i++) {
		const struct gpu_tensor *t = &s->t[i];
		if (t->on_cpu)
			continue;
		err = ca_launch_checksum(t->ptr, t->nbytes, g->salt, &g->csum_dev[i], g->stream);
		if (err != cudaSuccess)
			return werr_cuda(e, err, "checksumming %s.%d", s->prefix, i);
	}
	{
		unsigned long long *host = malloc((size_t)s->n * sizeof *host);
		if (!host)
			return werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
		err = cudaMemcpyAsync(host, g->csum_dev, (size_t)s->n * sizeof *host,
				      cudaMemcpyDeviceToHost, g->stream);
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(g->stream);
		if (err != cudaSuccess) {
			free(host);
			return werr_cuda(e, err, "checksumming %s (download)", s->prefix);
		}
		for (int i = 0; i < s->n; i++) {
			const struct gpu_tensor *t = &s->t[i];
			out[i] = t->on_cpu ? ca_hash64(t->ptr, t->nbytes) ^ g->salt
					   : (uint64_t)host[i];
		}
		free(host);
	}
	return 0;
}

int tensor_set_save(const struct tensor_set *s, const char *path, struct worker_error *e)
{
	struct st_tensor *out = NULL;
	unsigned char *buf = NULL;
	size_t total = 0, off = 0;
	struct ca_diag d;
	int rc = 0;

	out = calloc(s->n > 0 ? (size_t)s->n : 1, sizeof *out);
	for (int i = 0; i < s->n; i++)
		total += s->t[i].nbytes;
	buf = malloc(total ? total : 1);
	if (!out || !buf) {
		rc = werr(e, "worker.oom", true, CA_ERR_NOMEM,
			  "out of host memory for %zu bytes of %s", total, s->prefix);
		goto out;
	}
	for (int i = 0; i < s->n; i++) {
		const struct gpu_tensor *t = &s->t[i];
		struct st_tensor *x = &out[i];
		snprintf(x->name, sizeof x->name, "%s.%d", s->prefix, i);
		x->dtype = t->spec->dtype;
		x->ndim = t->spec->ndim;
		for (int k = 0; k < x->ndim; k++)
			x->shape[k] = t->spec->shape[k];
		x->nbytes = t->nbytes;
		x->data = buf + off;
		if (t->nbytes) {
			if (t->on_cpu) {
				memcpy(buf + off, t->ptr, t->nbytes);
			} else {
				cudaError_t err = cudaMemcpy(buf + off, t->ptr, t->nbytes,
							     cudaMemcpyDeviceToHost);
				if (err != cudaSuccess) {
					rc = werr_cuda(e, err, "downloading %s.%d (cudaMemcpy)",
						       s->prefix, i);
					goto out;
				}
			}
		}
		off += t->nbytes;
	}
	rc = safetensors_write(path, out, (size_t)s->n, NULL, &d);
	if (rc)
		rc = werr(e, "worker.bad_plan", true, rc, "cannot write the outputs file: %s",
			  d.msg);
out:
	free(out);
	free(buf);
	return rc;
}
