#include "worker/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#include "worker/activity.h"
#include "worker/events.h"
#include "worker/kernels.h"

/* From the C++ runtime (libstdc++, linked into the worker): demangles a C++ symbol. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define OTHER_KERNELS "(other kernels)"

/* Filled by the activity sink (CUPTI's thread), read after activity_end(). */
static struct profile_kernel *agg;
static size_t agg_n, agg_cap;
static uint64_t agg_total_ns;
static int agg_oom;

static struct profile_kernel *agg_new(const char *name)
{
	if (agg_n == agg_cap) {
		size_t cap = agg_cap ? 2 * agg_cap : 16;
		struct profile_kernel *p;
		if (cap > PROFILE_MAX_KERNELS + 1)
			cap = PROFILE_MAX_KERNELS + 1; /* + the lump of the rest */
		if (cap <= agg_n)
			return NULL;
		p = realloc(agg, cap * sizeof *p);
		if (!p)
			return NULL;
		agg = p;
		agg_cap = cap;
	}
	memset(&agg[agg_n], 0, sizeof agg[agg_n]);
	agg[agg_n].name = strdup(name);
	if (!agg[agg_n].name)
		return NULL;
	return &agg[agg_n++];
}

static struct profile_kernel *agg_find(const char *name)
{
	for (size_t i = 0; i < agg_n; i++)
		if (strcmp(agg[i].name, name) == 0)
			return &agg[i];
	if (agg_n < PROFILE_MAX_KERNELS)
		return agg_new(name);
	for (size_t i = 0; i < agg_n; i++)
		if (strcmp(agg[i].name, OTHER_KERNELS) == 0)
			return &agg[i];
	return agg_new(OTHER_KERNELS);
}

static void agg_add(const CUpti_ActivityKernel10 *k)
{
	const char *name = k->name ? k->name : "(unnamed kernel)";
	struct profile_kernel *e;
	uint64_t ns = k->end > k->start ? k->end - k->start : 0;

	if (strncmp(name, CA_WORKER_KERNEL_PREFIX, strlen(CA_WORKER_KERNEL_PREFIX)) == 0)
		return;
	e = agg_find(name);
	if (!e) {
		agg_oom = 1;
		return;
	}
	if (e->calls == 0 && strcmp(e->name, OTHER_KERNELS) != 0) {
		e->grid[0] = k->gridX;
		e->grid[1] = k->gridY;
		e->grid[2] = k->gridZ;
		e->block[0] = k->blockX;
		e->block[1] = k->blockY;
		e->block[2] = k->blockZ;
		e->registers = k->registersPerThread;
		e->static_smem = k->staticSharedMemory;
		e->dynamic_smem = k->dynamicSharedMemory;
	}
	e->calls++;
	e->total_ns += ns;
	agg_total_ns += ns;
}

/* The activity sink (called under activity's lock; agg is only read after activity_end). */
static void profile_sink(const CUpti_Activity *rec, void *ctx)
{
	(void)ctx;
	if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
	    rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
		agg_add((const CUpti_ActivityKernel10 *)(const void *)rec);
}

static void agg_reset(void)
{
	for (size_t i = 0; i < agg_n; i++)
		free(agg[i].name);
	free(agg);
	agg = NULL;
	agg_n = agg_cap = 0;
	agg_total_ns = 0;
	agg_oom = 0;
}

static int cmp_total(const void *a, const void *b)
{
	const struct profile_kernel *x = a, *y = b;
	if (x->total_ns != y->total_ns)
		return x->total_ns < y->total_ns ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* Best-of-5 device-to-device copy bandwidth in GB/s (bytes read + written), 0 when it cannot be
 * measured (not enough free memory: it is a reference figure, not worth failing for). */
static double measure_copy_gbps(struct gpu_ctx *g)
{
	size_t free_b = 0, total_b = 0, bytes = 512u << 20;
	void *a = NULL, *b = NULL;
	cudaEvent_t start = NULL, end = NULL;
	double best_ms = 0;

	if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
		return 0;
	while (bytes > 64u << 20 && 2 * bytes + (256u << 20) > free_b)
		bytes /= 2;
	if (2 * bytes + (256u << 20) > free_b || cudaMalloc(&a, bytes) != cudaSuccess ||
	    cudaMalloc(&b, bytes) != cudaSuccess || cudaMemset(a, 1, bytes) != cudaSuccess ||
	    cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess)
		goto out;
	for (int i = 0; i < 8; i++) {
		float ms = 0;
		if (cudaEventRecord(start, g->stream) != cudaSuccess ||
		    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess ||
		    cudaEventRecord(end, g->stream) != cudaSuccess ||
		    cudaEventSynchronize(end) != cudaSuccess ||
		    cudaEventElapsedTime(&ms, start, end) != cudaSuccess) {
			best_ms = 0;
			goto out;
		}
		if (i >= 3 && (best_ms == 0 || (double)ms < best_ms))
			best_ms = (double)ms;
	}
out:
	if (start)
		cudaEventDestroy(start);
	if (end)
		cudaEventDestroy(end);
	cudaFree(a);
	cudaFree(b);
	(void)cudaGetLastError();
	return best_ms > 0 ? 2.0 * (double)bytes / (best_ms * 1e-3) / 1e9 : 0;
}

int profile_begin(struct worker_error *e)
{
	static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
	agg_reset();
	return activity_begin(kinds, 1, profile_sink, NULL, "profile.cupti_error", e);
}

void profile_abort(void)
{
	activity_abort();
	agg_reset();
}

int profile_end(struct gpu_ctx *g, int calls, struct profile_result *r, struct worker_error *e)
{
	int rc;

	memset(r, 0, sizeof *r);
	r->forward_calls = calls;
	if ((rc = activity_end(&r->dropped_records, "profile.cupti_error", e)))
		goto out;
	if (agg_oom) {
		rc = werr(e, "profile.cupti_error", false, CA_ERR_NOMEM,
			  "out of host memory aggregating kernel records");
		goto out;
	}
	r->kernels = agg;
	r->n = agg_n;
	r->total_ns = agg_total_ns;
	agg = NULL;
	agg_n = agg_cap = 0;
	agg_total_ns = 0;
	if (r->n > 1)
		qsort(r->kernels, r->n, sizeof *r->kernels, cmp_total);
	r->copy_gbps = measure_copy_gbps(g);
out:
	if (rc)
		agg_reset();
	return rc;
}

static json_t *triple(const int v[3])
{
	return json_pack("[i, i, i]", v[0], v[1], v[2]);
}

json_t *profile_result_json(const struct profile_result *r)
{
	json_t *kernels = json_array();
	for (size_t i = 0; i < r->n; i++) {
		const struct profile_kernel *k = &r->kernels[i];
		int status = -1;
		char *dm = __cxa_demangle(k->name, NULL, NULL, &status);
		const char *shown = status == 0 && dm ? dm : k->name;
		json_array_append_new(
			kernels,
			json_pack("{s:o, s:I, s:I, s:I, s:o, s:o, s:i, s:i, s:i}", "name",
				  json_str(shown, PROFILE_NAME_MAX_JSON), "calls",
				  (json_int_t)k->calls, "total_ns", (json_int_t)k->total_ns,
				  "avg_ns", (json_int_t)(k->calls ? k->total_ns / k->calls : 0),
				  "grid", triple(k->grid), "block", triple(k->block), "registers",
				  k->registers, "static_smem", k->static_smem, "dynamic_smem",
				  k->dynamic_smem));
		free(dm);
	}
	return json_pack("{s:o, s:I, s:i, s:I, s:o}", "kernels", kernels, "total_ns",
			 (json_int_t)r->total_ns, "forward_calls", r->forward_calls,
			 "dropped_records", (json_int_t)r->dropped_records, "peak_copy_gbps",
			 r->copy_gbps > 0 ? json_real(r->copy_gbps) : json_null());
}

void profile_result_free(struct profile_result *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->kernels[i].name);
	free(r->kernels);
	memset(r, 0, sizeof *r);
}
