#include "worker/gpu.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


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
	return 0;
}

void gpu_ctx_close(struct gpu_ctx *g)
{
	if (g->ev_start)
		cudaEventDestroy(g->ev_start);
	if (g->ev_end)
		cudaEventDestroy(g->ev_end);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	g->ev_start = g->ev_end = NULL;
	g->stream = NULL;
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

/* ---- tensor sets --------------------------------------------------------------------------------- */

size_t tensor_set_bytes(const struct tensor_set *s)
{
	size_t n = 0;
	for (int i = 0; i < s->n; i++)
		n += s->t[i].nbytes;
	return n;
}

int tensor_set_bind(struct tensor_set *s, const char *prefix, const struct tensor_spec *specs,
		    int n, int device, uint64_t base, size_t slot_bytes,
		    const struct slot_layout *layout, struct worker_error *e)
{
	int rc = 0;

	memset(s, 0, sizeof *s);
	s->prefix = prefix;
	s->device = device;
	if (n <= 0)
		return 0;
	if (layout->n != n)
		return werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
			    "plan: the %s slot's layout has %d tensors, the spec %d", prefix,
			    layout->n, n);
	s->t = calloc((size_t)n, sizeof *s->t);
	s->dl = calloc((size_t)n, sizeof *s->dl);
	if (!s->t || !s->dl) {
		rc = werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory for %d tensors",
			  n);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct gpu_tensor *t = &s->t[i];
		t->spec = &specs[i];
		t->on_cpu = specs[i].on_cpu;
		t->numel = (size_t)tensor_spec_numel(&specs[i]);
		t->nbytes = tensor_spec_nbytes(&specs[i]);
		if (t->on_cpu) {
			if (t->nbytes > 8) {
				rc = werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
					  "plan: %s.%d (%s) is on the CPU but not a number", prefix,
					  i, specs[i].name);
				goto out;
			}
			t->ptr = calloc(1, 8);
			if (!t->ptr) {
				rc = werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
				goto out;
			}
		} else {
			size_t off = layout->offset[i];
			if (off > slot_bytes || t->nbytes > slot_bytes - off) {
				rc = werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
					  "plan: %s.%d (%s, %zu bytes at %zu) does not fit in its "
					  "%zu-byte slot",
					  prefix, i, specs[i].name, t->nbytes, off, slot_bytes);
				goto out;
			}
			t->ptr = (void *)(uintptr_t)(base + off);
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
	for (int i = 0; i < s->n; i++)
		if (s->t[i].on_cpu)
			free(s->t[i].ptr);
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

static int store_scalar(struct gpu_tensor *t, const json_t *v)
{
	switch (t->spec->dtype) {
	case CA_DTYPE_BOOL: {
		uint8_t b;
		if (!json_is_boolean(v) && !json_is_integer(v))
			return -1;
		b = json_is_boolean(v) ? (uint8_t)json_is_true(v) : json_integer_value(v) != 0;
		memcpy(t->ptr, &b, 1);
		return 0;
	}
	case CA_DTYPE_I64: {
		int64_t x;
		if (!json_is_integer(v))
			return -1;
		x = (int64_t)json_integer_value(v);
		memcpy(t->ptr, &x, 8);
		return 0;
	}
	case CA_DTYPE_F64: {
		double x;
		const char *str = json_string_value(v);
		if (json_is_number(v))
			x = json_number_value(v);
		else if (str && strcmp(str, "nan") == 0)
			x = NAN;
		else if (str && strcmp(str, "inf") == 0)
			x = INFINITY;
		else if (str && strcmp(str, "-inf") == 0)
			x = -INFINITY;
		else
			return -1;
		memcpy(t->ptr, &x, 8);
		return 0;
	}
	default:
		return -1;
	}
}

int tensor_set_scalars(struct tensor_set *s, const json_t *scalars, struct worker_error *e)
{
	size_t k;
	const json_t *pair;

	if (!scalars)
		return 0;
	if (!json_is_array(scalars) || json_array_size(scalars) > (size_t)s->n)
		return werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
			    "command: 'scalars' must be a list of at most %d [index, value] pairs",
			    s->n);
	json_array_foreach(scalars, k, pair) {
		const json_t *idx = json_array_get(pair, 0);
		json_int_t i = json_integer_value(idx);
		if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(idx) ||
		    i < 0 || i >= s->n || !s->t[i].on_cpu ||
		    store_scalar(&s->t[i], json_array_get(pair, 1)) != 0)
			return werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
				    "command: scalars[%zu] is not [index of a number argument, its "
				    "value]",
				    k);
	}
	return 0;
}
