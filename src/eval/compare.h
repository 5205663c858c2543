/* compare: a candidate's output tensor against the reference (allclose with atol/rtol).
 *
 * An element matches when both are NaN, both are the same infinity, or
 * |out - ref| <= atol + rtol * |ref| (torch.allclose's rule). Relative error is
 * |out - ref| / max(|ref|, 1e-12). Integer and bool outputs use the same rule on their values. */
#ifndef CA_EVAL_COMPARE_H
#define CA_EVAL_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/safetensors.h"
#include "util/diag.h"

struct compare_result {
	bool shape_ok;       /* dtype and shape equal */
	bool match;          /* shape_ok and every element matches */
	size_t numel;
	size_t mismatches;
	size_t nan_unwritten; /* candidate NaN where the reference is finite */
	double max_abs_err;  /* over finite pairs */
	double max_rel_err;
	bool has_first;
	size_t first_index;  /* flat index of the first mismatch */
	int64_t first_coords[8];
	int ndim;
	double first_out, first_ref;
};

void compare_tensors(const struct st_tensor *out, const struct st_tensor *ref, double atol,
		     double rtol, struct compare_result *r);

/* Sets r's first mismatch to flat index `index` of a tensor of `shape` (row-major coordinates,
 * at most 8 dimensions kept), with the values got and expected. */
void compare_locate(struct compare_result *r, size_t index, const int64_t *shape, int ndim,
		    double got, double expected);

/* "outputs.0 [3, 17]: got 0.5, expected 0.25" style description of the first mismatch. */
void compare_describe(const struct compare_result *r, const char *name, char *buf, size_t size);

#endif
