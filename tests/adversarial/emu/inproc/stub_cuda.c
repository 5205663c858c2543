/* CPU stand-ins for libcudart.so.13, libcublas.so.13 and libcuda.so.1 (one source, built three
 * times: -DSTUB_CUDART, -DSTUB_CUBLAS, -DSTUB_DRIVER), enough to load the in-process cheats'
 * real libraries (built by `cuda-agent compile`) in mock_worker.c without a GPU and run their host
 * code. "Device" memory is host memory; every operation is done at once, so streams and events
 * only order nothing; an event holds a CLOCK_MONOTONIC_RAW stamp taken when it is recorded (the
 * cheats fake CLOCK_MONOTONIC, never the raw clock), which stands for the GPU's own clock. Kernel
 * launches do nothing: the checks use cuBLAS (a real CPU GEMM here) for the work. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct stub_event {
	double t; /* seconds, CLOCK_MONOTONIC_RAW */
	int recorded;
};

static double raw_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int elapsed(float *ms, const struct stub_event *a, const struct stub_event *b)
{
	if (!ms || !a || !b || !a->recorded || !b->recorded)
		return 1;
	*ms = (float)((b->t - a->t) * 1e3);
	return 0;
}

#ifdef STUB_CUDART
typedef struct {
	unsigned x, y, z;
} dim3_t;

int stub_device_syncs; /* calls that reached this cudaDeviceSynchronize's own code */

void **__cudaRegisterFatBinary(void *fatbin)
{
	static void *handle;
	(void)fatbin;
	return &handle;
}
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
void __cudaRegisterFunction(void **h, const char *f, char *d, const char *n, int t, void *a, void *b, void *c,
			    void *e, int *s)
{
	(void)h, (void)f, (void)d, (void)n, (void)t, (void)a, (void)b, (void)c, (void)e, (void)s;
}
unsigned __cudaPushCallConfiguration(dim3_t g, dim3_t b, size_t shmem, void *stream)
{
	(void)g, (void)b, (void)shmem, (void)stream;
	return 0;
}
int __cudaPopCallConfiguration(dim3_t *g, dim3_t *b, size_t *shmem, void *stream)
{
	(void)g, (void)b, (void)shmem, (void)stream;
	return 0;
}
int __cudaGetKernel(void **kernel, const void *func)
{
	(void)func;
	if (kernel)
		*kernel = NULL;
	return 0;
}
int __cudaLaunchKernel(void) { return 0; } /* kernels do not run here */
int cudaLaunchKernel(void) { return 0; }

int cudaGetLastError(void) { return 0; }
int cudaPeekAtLastError(void) { return 0; }
int cudaGetDevice(int *d)
{
	*d = 0;
	return 0;
}
int cudaSetDevice(int d)
{
	(void)d;
	return 0;
}
int cudaDeviceGetAttribute(int *v, int attr, int dev)
{
	(void)attr, (void)dev;
	*v = 1980000; /* kHz */
	return 0;
}
int cudaDeviceSynchronize(void)
{
	__atomic_add_fetch(&stub_device_syncs, 1, __ATOMIC_RELAXED);
	return 0;
}
int cudaStreamCreate(void **s)
{
	*s = calloc(1, 64);
	return 0;
}
int cudaStreamCreateWithFlags(void **s, unsigned flags)
{
	(void)flags;
	return cudaStreamCreate(s);
}
int cudaStreamDestroy(void *s)
{
	free(s);
	return 0;
}
int cudaStreamSynchronize(void *s)
{
	(void)s;
	return 0;
}
int cudaStreamWaitEvent(void *s, void *e, unsigned flags)
{
	(void)s, (void)e, (void)flags;
	return 0;
}
int cudaEventCreate(struct stub_event **e)
{
	*e = calloc(1, sizeof **e);
	return 0;
}
int cudaEventCreateWithFlags(struct stub_event **e, unsigned flags)
{
	(void)flags;
	return cudaEventCreate(e);
}
int cudaEventDestroy(struct stub_event *e)
{
	free(e);
	return 0;
}
int cudaEventRecord(struct stub_event *e, void *stream)
{
	(void)stream;
	e->t = raw_now();
	e->recorded = 1;
	return 0;
}
int cudaEventElapsedTime(float *ms, struct stub_event *a, struct stub_event *b)
{
	return elapsed(ms, a, b) ? 400 /* cudaErrorInvalidResourceHandle */ : 0;
}
int cudaMalloc(void **p, size_t n)
{
	*p = aligned_alloc(256, (n + 255) & ~(size_t)255);
	return *p ? 0 : 2;
}
int cudaFree(void *p)
{
	free(p);
	return 0;
}
int cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
int cudaHostAlloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	return cudaMalloc(p, n);
}
int cudaFreeHost(void *p) { return cudaFree(p); }
int cudaMemcpy(void *d, const void *s, size_t n, int kind)
{
	(void)kind;
	memmove(d, s, n);
	return 0;
}
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *stream)
{
	(void)stream;
	return cudaMemcpy(d, s, n, kind);
}
#endif

#ifdef STUB_CUBLAS
int cublasCreate_v2(void **h)
{
	*h = calloc(1, 64);
	return 0;
}
int cublasDestroy_v2(void *h)
{
	free(h);
	return 0;
}
int cublasSetMathMode(void *h, int mode)
{
	(void)h, (void)mode;
	return 0;
}
int cublasSetStream_v2(void *h, void *s)
{
	(void)h, (void)s;
	return 0;
}
/* Column-major C = alpha op(A) op(B) + beta C (op: 0 none, 1 transpose). */
int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *a, int lda,
		   const float *b, int ldb, const float *beta, float *c, int ldc)
{
	(void)h;
	for (int j = 0; j < n; ++j)
		for (int i = 0; i < m; ++i) {
			float acc = 0.0f;
			for (int p = 0; p < k; ++p) {
				const float av = ta ? a[p + (size_t)i * lda] : a[i + (size_t)p * lda];
				const float bv = tb ? b[j + (size_t)p * ldb] : b[p + (size_t)j * ldb];
				acc += av * bv;
			}
			float *cv = &c[i + (size_t)j * ldc];
			*cv = *alpha * acc + (*beta != 0.0f ? *beta * *cv : 0.0f);
		}
	return 0;
}
#endif

#ifdef STUB_DRIVER
int cuEventElapsedTime(float *ms, struct stub_event *a, struct stub_event *b)
{
	return elapsed(ms, a, b) ? 400 : 0;
}
#endif
