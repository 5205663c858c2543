/* Shared declaration between the two translation units of the axpy test candidate. */
#pragma once
#include <cuda_runtime_api.h>

extern "C" int axpy_launch(int n, float a, const float *x, float *y, cudaStream_t stream);
