// Test candidate that pulls in PyTorch (forbidden in a native candidate).
#include <torch/extension.h>

__global__ void k(float *x) { x[0] = 1.0f; }
