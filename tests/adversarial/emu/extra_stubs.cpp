// extra_stubs.cpp: CPU stand-ins for the CUDA runtime and cuBLAS calls the adversarial candidates
// make beyond those of examples/emu/lib_stubs.cpp (streams and events are tokens: the emulator
// runs everything synchronously).
#include "cuda_emu.h"
#include <cublas_v2.h>
#include <cstdlib>
#include <cstring>
extern "C" {
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { *p = malloc(n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return cudaSuccess; }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { static int k; *s = (cudaStream_t)(uintptr_t)(0x1000 + ++k); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { static int k; *e = (cudaEvent_t)(uintptr_t)(0x2000 + ++k); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) { *v = 2; return cudaSuccess; }
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
					 const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb,
					 long long sb, const float *beta, float *C, int ldc, long long sc, int batch)
{
	for (int bi = 0; bi < batch; ++bi) {
		const float *a = A + bi * sa, *b = B + bi * sb;
		float *c = C + bi * sc;
		for (int j = 0; j < n; ++j)
			for (int i = 0; i < m; ++i) {
				double acc = 0;
				for (int p = 0; p < k; ++p) {
					const float av = ta != CUBLAS_OP_N ? a[p + (long)i * lda] : a[i + (long)p * lda];
					const float bv = tb != CUBLAS_OP_N ? b[j + (long)p * ldb] : b[p + (long)j * ldb];
					acc += (double)av * bv;
				}
				c[i + (long)j * ldc] = (float)(*alpha * acc + (*beta != 0 ? *beta * c[i + (long)j * ldc] : 0));
			}
	}
	return CUBLAS_STATUS_SUCCESS;
}
}
