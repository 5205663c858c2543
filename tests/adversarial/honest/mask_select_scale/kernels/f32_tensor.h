// f32_tensor.h: the argument checks of the structured-input honest candidates (tril_skip_matmul,
// sym_upper_matvec, sorted_binary_bucketize, mask_select_scale, label_index_gather): a dense fp32
// CUDA tensor, and its element count. Linked into each candidate's kernels/ like the attack
// helpers (README.md).
#pragma once

#include <dlpack/dlpack.h>

#include <stdint.h>

static inline bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape) || !t->data)
		return false;
	if (t->strides) {
		int64_t expect = 1;
		for (int i = t->ndim - 1; i >= 0; --i) {
			if (t->shape[i] != 1 && t->strides[i] != expect)
				return false;
			expect *= t->shape[i];
		}
	}
	return true;
}

static inline int64_t numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}
