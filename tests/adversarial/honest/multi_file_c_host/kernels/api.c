/* rowsum (y = x.sum(-1)): the ABI entry point written in plain C. It checks the tensors and
 * hands the pointers to the launcher in kernels.cu through the shared header rowsum_launch.h. */
#include <cuda_agent/abi.h>
#include <stddef.h>
#include <stdint.h>

#include "rowsum_launch.h"

static int f32_cuda(const DLTensor *t)
{
	int64_t expect = 1;
	int i;
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape) || !t->data)
		return 0;
	if (t->strides) {
		for (i = t->ndim - 1; i >= 0; --i) {
			if (t->shape[i] != 1 && t->strides[i] != expect)
				return 0;
			expect *= t->shape[i];
		}
	}
	return 1;
}

int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params, DLTensor *outputs,
	       int num_outputs, cudaStream_t stream)
{
	const DLTensor *x, *y;
	int64_t rows = 1;
	int i;

	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	x = &args[0];
	y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return 2;
	for (i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return 2;
		rows *= x->shape[i];
	}
	if (rows == 0)
		return 0;
	return rowsum_launch((const float *)x->data, (float *)y->data, rows, x->shape[x->ndim - 1], stream) == 0
		       ? 0
		       : 3;
}
