// extra.h: what the adversarial candidates need from the emulator beyond examples/emu/cuda_emu.h
// (included after it by check.py): __constant__, half types, and the templated overloads that
// cuda_runtime.h would provide.
#pragma once
#define __constant__
#include <cuda_fp16.h>
template <class T> inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
template <class T> inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
template <class K> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, size_t)
{
	*n = 1;
	return cudaSuccess;
}
