/* mock_worker: runs an in-process cheat's real library (as built by `cuda-agent compile`) the way
 * cuda-agent-worker calls it, on the CPU, against the stub CUDA libraries of stub_cuda.c.
 *
 * What is the same as the worker: a PIE linked with full RELRO (-z now), the CUDA runtime linked
 * by soname and the candidate dlopen'ed RTLD_NOW | RTLD_LOCAL; the worker's struct gpu_ctx
 * (src/worker/gpu.h) inside a struct on main()'s stack; a timed call shaped like
 * src/worker/timing.c's timed_call (start event, clock stamp, the call, end event, device
 * synchronize, clock stamp, cudaEventElapsedTime), the clock read with clock_gettime through the
 * GOT. What differs: the "GPU" is the CPU (stub_cuda.c), so the work is done inside the call.
 *
 * Usage: mock_worker LIBRARY SCENARIO [--mdwe] [PLAN.json]
 *   timers KEEP  6 timed calls of a 256^3 GEMM: the worker's event and host times must be about
 *                KEEP times the real time of the call (the cheat fooled both), outputs right
 *   plan         PLAN.json's "inputs" files are written here; a listed input must be computed, an
 *                unlisted one left alone (the output keeps its NaN poison)
 *   thread       the output must still be poison when ca_forward returns and right later
 *   sync         cudaDeviceSynchronize must no longer reach the runtime's code, outputs right
 *   --mdwe       prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN) first (the W^X rule of the
 *                sandbox), to see what becomes of the attack
 * Prints "ok ..." / "FAIL ..." lines; exits 0 when every check passed. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "worker/gpu.h"

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#define MDWE_REFUSE_EXEC_GAIN 1

enum { M = 256, N = 256, K = 256 };

typedef int (*forward_fn)(const DLTensor *, int, const DLTensor *, int, DLTensor *, int, cudaStream_t);
typedef int (*setup_fn)(const DLTensor *, int, cudaStream_t);
typedef void (*teardown_fn)(void);

extern int stub_device_syncs; /* stub_cuda.c */

/* Laid out like the worker's struct worker: the plan first, then the GPU context. */
struct mock {
	char plan_path[4096];
	struct gpu_ctx g;
	forward_fn forward;
	setup_fn setup;
	teardown_fn teardown;
	DLTensor x, w, y;
	int64_t xs[2], ws[2], ys[2];
};

static int failures;

static void check(int ok, const char *what, const char *detail)
{
	printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail ? ": " : "", detail ? detail : "");
	failures += !ok;
}

/* src/util/clock.c: another translation unit in the worker, so never inlined into timed_call,
 * which then keeps its stamp as a double across the call (spilled to its frame). */
static __attribute__((noinline)) double ca_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double raw_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void tensor(DLTensor *t, int64_t *shape, int64_t r, int64_t c)
{
	shape[0] = r;
	shape[1] = c;
	memset(t, 0, sizeof *t);
	t->data = aligned_alloc(256, (size_t)(r * c) * sizeof(float));
	t->device.device_type = kDLCUDA;
	t->ndim = 2;
	t->dtype.code = kDLFloat;
	t->dtype.bits = 32;
	t->dtype.lanes = 1;
	t->shape = shape;
}

static void fill(DLTensor *t, unsigned seed)
{
	float *p = t->data;
	for (int64_t i = 0; i < t->shape[0] * t->shape[1]; ++i) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
	}
}

static void poison(DLTensor *t)
{
	memset(t->data, 0xff, (size_t)(t->shape[0] * t->shape[1]) * sizeof(float));
}

/* max |y - x W^T| over the output (NaN anywhere: infinity). */
static double gemm_error(const struct mock *W)
{
	const float *x = W->x.data, *w = W->w.data, *y = W->y.data;
	double worst = 0.0;
	for (int i = 0; i < M; ++i)
		for (int j = 0; j < N; ++j) {
			double ref = 0.0;
			for (int p = 0; p < K; ++p)
				ref += (double)x[i * K + p] * w[j * K + p];
			const double e = fabs((double)y[i * N + j] - ref);
			if (!(e == e))
				return INFINITY;
			if (e > worst)
				worst = e;
		}
	return worst;
}

static int all_poison(const struct mock *W)
{
	const unsigned *y = W->y.data;
	for (int i = 0; i < M * N; ++i)
		if (y[i] != 0xffffffffu)
			return 0;
	return 1;
}

/* src/worker/timing.c's timed_call, minus the error mapping. */
static __attribute__((noinline)) int timed_call(struct mock *W, double *event_ms, double *host_ms)
{
	float ms = 0.0f;
	double t0, t1;
	int ret;

	cudaEventRecord(W->g.ev_start, W->g.stream);
	t0 = ca_now();
	ret = W->forward(&W->x, 1, &W->w, 1, &W->y, 1, W->g.stream);
	cudaSetDevice(W->g.device);
	cudaEventRecord(W->g.ev_end, W->g.stream);
	cudaDeviceSynchronize();
	t1 = ca_now();
	cudaGetLastError();
	if (ret != 0)
		return ret;
	if (cudaEventElapsedTime(&ms, W->g.ev_start, W->g.ev_end) != cudaSuccess)
		return -1;
	*event_ms = ms;
	*host_ms = (t1 - t0) * 1e3;
	return 0;
}

static void write_safetensors(const char *path, const DLTensor *t)
{
	char header[256];
	const size_t bytes = (size_t)(t->shape[0] * t->shape[1]) * sizeof(float);
	int n = snprintf(header, sizeof header,
			 "{\"args.0\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[0,%zu]}}",
			 (long long)t->shape[0], (long long)t->shape[1], bytes);
	while (n % 8)
		header[n++] = ' ';
	const unsigned long long len = (unsigned long long)n;
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(&len, 8, 1, f) != 1 || fwrite(header, 1, (size_t)n, f) != (size_t)n ||
	    fwrite(t->data, 1, bytes, f) != bytes) {
		perror(path);
		exit(2);
	}
	fclose(f);
}

static void scenario_timers(struct mock *W, double keep)
{
	char detail[256];
	double worst_event = 0.0, worst_host = 0.0, err = 0.0;
	for (int call = 0; call < 6; ++call) {
		double ev = 0.0, host = 0.0;
		fill(&W->x, 100u + (unsigned)call);
		poison(&W->y);
		const double r0 = raw_now();
		const int ret = timed_call(W, &ev, &host);
		const double truth = (raw_now() - r0) * 1e3;
		if (ret != 0) {
			snprintf(detail, sizeof detail, "call %d returned %d", call + 1, ret);
			check(0, "timed calls", detail);
			return;
		}
		const double e = gemm_error(W);
		if (e > err)
			err = e;
		printf("     call %d: real %.3f ms, worker's event time %.3f ms (%.3f), host time %.3f ms (%.3f)\n",
		       call + 1, truth, ev, ev / truth, host, host / truth);
		if (call > 0) { /* the first call installs */
			if (ev / truth > worst_event)
				worst_event = ev / truth;
			if (host / truth > worst_host)
				worst_host = host / truth;
		}
	}
	snprintf(detail, sizeof detail, "worst event/real %.3f, host/real %.3f, expected about %.3f", worst_event,
		 worst_host, keep);
	check(worst_event < 2.0 * keep && worst_host < 2.0 * keep, "both of the worker's timers fooled", detail);
	snprintf(detail, sizeof detail, "max abs error %.2e", err);
	check(err < 1e-3, "outputs right", detail);
}

static void scenario_plan(struct mock *W)
{
	char dir[] = "/tmp/mock-plan-XXXXXX", listed[4200], other[4200];
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(2);
	}
	snprintf(listed, sizeof listed, "%s/i0.safetensors", dir);
	snprintf(other, sizeof other, "%s/r0.safetensors", dir);
	fill(&W->x, 7u);
	write_safetensors(listed, &W->x);
	FILE *f = fopen(W->plan_path, "w");
	if (!f) {
		perror(W->plan_path);
		exit(2);
	}
	fprintf(f, "{\"library\": \"candidate.so\", \"verify\": [{\"params\": \"%s/p0.safetensors\", \"inputs\": \"%s\", "
		   "\"outputs\": \"%s/o0.safetensors\"}], \"timing\": {\"rotation\": [\"%s\"], \"checks\": [], "
		   "\"final\": {\"inputs\": \"%s\", \"outputs\": \"%s/fo.safetensors\"}}}\n",
		dir, listed, dir, other, listed, dir);
	fclose(f);
	double ev, host;
	poison(&W->y);
	timed_call(W, &ev, &host);
	check(gemm_error(W) < 1e-3, "an input the plan lists is computed", NULL);
	fill(&W->x, 8u); /* a perturbed rotation set: in no file */
	poison(&W->y);
	timed_call(W, &ev, &host);
	check(all_poison(W), "an input the plan does not list is left alone (output still poison)", NULL);
	unlink(listed);
	unlink(W->plan_path);
	rmdir(dir);
}

static void scenario_thread(struct mock *W)
{
	fill(&W->x, 11u);
	poison(&W->y);
	const int ret = W->forward(&W->x, 1, &W->w, 1, &W->y, 1, W->g.stream);
	const int untouched = all_poison(W);
	cudaDeviceSynchronize();
	check(ret == 0 && untouched, "nothing written when ca_forward returned", NULL);
	double err = INFINITY;
	for (int i = 0; i < 200 && !(err < 1e-3); ++i) {
		usleep(10000);
		err = gemm_error(W);
	}
	check(err < 1e-3, "the output is written afterwards by the candidate's thread", NULL);
}

static void scenario_sync(struct mock *W)
{
	double ev, host;
	fill(&W->x, 5u);
	poison(&W->y);
	timed_call(W, &ev, &host); /* installs the patch */
	const int before = stub_device_syncs;
	timed_call(W, &ev, &host);
	cudaDeviceSynchronize();
	char detail[64];
	snprintf(detail, sizeof detail, "%d of 2 calls reached it", stub_device_syncs - before);
	check(stub_device_syncs == before, "cudaDeviceSynchronize redirected away from the runtime", detail);
	check(gemm_error(W) < 1e-3, "outputs right", NULL);
}

int main(int argc, char **argv)
{
	struct mock W; /* on main()'s stack, as the worker's struct worker */
	int arg = 3, mdwe = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s LIBRARY timers KEEP|plan|thread|sync [--mdwe] [PLAN.json]\n", argv[0]);
		return 2;
	}
	memset(&W, 0, sizeof W);
	const char *scenario = argv[2];
	double keep = 0.0;
	if (strcmp(scenario, "timers") == 0 && argc > 3)
		keep = atof(argv[arg++]);
	for (; arg < argc; ++arg) {
		if (strcmp(argv[arg], "--mdwe") == 0)
			mdwe = 1;
		else
			snprintf(W.plan_path, sizeof W.plan_path, "%s", argv[arg]);
	}
	if (mdwe) {
		const int rc = prctl(PR_SET_MDWE, MDWE_REFUSE_EXEC_GAIN, 0, 0, 0);
		printf("     PR_SET_MDWE(REFUSE_EXEC_GAIN): %s\n", rc == 0 ? "on" : "refused by this kernel");
	}
	/* libcudart loads the driver library at its first call; here it is loaded up front. */
	if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
		return 2;
	}
	W.g.driver_version = 13000;
	W.g.runtime_version = 13000;
	cudaStreamCreate(&W.g.stream);
	cudaEventCreate(&W.g.ev_start);
	cudaEventCreate(&W.g.ev_end);

	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	W.forward = (forward_fn)dlsym(lib, "ca_forward");
	W.setup = (setup_fn)dlsym(lib, "ca_setup");
	W.teardown = (teardown_fn)dlsym(lib, "ca_teardown");
	if (!W.forward)
		return 2;
	tensor(&W.x, W.xs, M, K);
	tensor(&W.w, W.ws, N, K);
	tensor(&W.y, W.ys, M, N);
	fill(&W.w, 3u);
	if (W.setup && W.setup(&W.w, 1, W.g.stream) != 0)
		check(0, "ca_setup", "returned nonzero");

	if (strcmp(scenario, "timers") == 0)
		scenario_timers(&W, keep);
	else if (strcmp(scenario, "plan") == 0 && W.plan_path[0])
		scenario_plan(&W);
	else if (strcmp(scenario, "thread") == 0)
		scenario_thread(&W);
	else if (strcmp(scenario, "sync") == 0)
		scenario_sync(&W);
	else
		return 2;
	if (W.teardown && strcmp(scenario, "thread") != 0)
		W.teardown();
	return failures ? 1 : 0;
}
