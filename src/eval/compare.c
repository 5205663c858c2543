#include "eval/compare.h"

#include <math.h>
#include <string.h>

#include "util/str.h"

/* Records a mismatch at flat index i (the first one with its coordinates). */
static void note_mismatch(struct compare_result *r, const struct st_tensor *ref, size_t i,
			  double o, double e)
{
	if (!r->has_first)
		compare_locate(r, i, ref->shape, ref->ndim, o, e);
	r->mismatches++;
}

void compare_locate(struct compare_result *r, size_t index, const int64_t *shape, int ndim,
		    double got, double expected)
{
	size_t rem = index;
	r->has_first = true;
	r->first_index = index;
	r->first_out = got;
	r->first_ref = expected;
	r->ndim = ndim;
	for (int k = ndim - 1; k >= 0; k--) {
		size_t dim = shape[k] > 0 ? (size_t)shape[k] : 1;
		if (k < 8)
			r->first_coords[k] = (int64_t)(rem % dim);
		rem /= dim;
	}
}

/* One element; returns true when it matches. */
static inline bool compare_one(double o, double e, double atol, double rtol,
			       struct compare_result *r)
{
	if (isnan(e) || isnan(o)) {
		if (isnan(o) && !isnan(e))
			r->nan_unwritten++;
		return isnan(e) && isnan(o);
	}
	if (isinf(e) || isinf(o))
		return o == e;
	double abs_err = fabs(o - e);
	double rel_err = abs_err / fmax(fabs(e), 1e-12);
	if (abs_err > r->max_abs_err)
		r->max_abs_err = abs_err;
	if (rel_err > r->max_rel_err)
		r->max_rel_err = rel_err;
	return abs_err <= atol + rtol * fabs(e);
}

/* float32, the common case: no per-element type dispatch, so large outputs compare at memory
 * speed. Same rule as compare_generic. */
static void compare_f32(const struct st_tensor *out, const struct st_tensor *ref, double atol,
			double rtol, struct compare_result *r)
{
	const float *o = out->data, *e = ref->data;
	for (size_t i = 0; i < r->numel; i++) {
		double ov = (double)o[i], ev = (double)e[i];
		if (!compare_one(ov, ev, atol, rtol, r))
			note_mismatch(r, ref, i, ov, ev);
	}
}

static void compare_generic(const struct st_tensor *out, const struct st_tensor *ref,
			    double atol, double rtol, struct compare_result *r)
{
	for (size_t i = 0; i < r->numel; i++) {
		double o = ca_dtype_load(out->dtype, out->data, i);
		double e = ca_dtype_load(ref->dtype, ref->data, i);
		if (!compare_one(o, e, atol, rtol, r))
			note_mismatch(r, ref, i, o, e);
	}
}

void compare_tensors(const struct st_tensor *out, const struct st_tensor *ref, double atol,
		     double rtol, struct compare_result *r)
{
	memset(r, 0, sizeof *r);
	r->ndim = ref->ndim;
	r->shape_ok = out->dtype == ref->dtype && out->ndim == ref->ndim &&
		      out->nbytes == ref->nbytes;
	for (int i = 0; r->shape_ok && i < ref->ndim; i++)
		r->shape_ok = out->shape[i] == ref->shape[i];
	if (!r->shape_ok)
		return;
	size_t esize = ca_dtype_size(ref->dtype);
	r->numel = esize ? ref->nbytes / esize : 0;
	if (ref->dtype == CA_DTYPE_F32)
		compare_f32(out, ref, atol, rtol, r);
	else
		compare_generic(out, ref, atol, rtol, r);
	r->match = r->mismatches == 0;
}

void compare_describe(const struct compare_result *r, const char *name, char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	if (!r->shape_ok) {
		ca_appendf(buf, size, &off, "%s: dtype or shape differs from the reference", name);
		return;
	}
	if (!r->has_first) {
		ca_appendf(buf, size, &off, "%s: matches", name);
		return;
	}
	if (r->nan_unwritten == r->numel) {
		ca_appendf(buf, size, &off,
			   "%s was never written (every element is still the NaN poison)", name);
		return;
	}
	ca_appendf(buf, size, &off, "%s: %zu of %zu elements differ; first at [", name,
		   r->mismatches, r->numel);
	for (int k = 0; k < r->ndim && k < 8; k++)
		ca_appendf(buf, size, &off, "%s%lld", k ? ", " : "", (long long)r->first_coords[k]);
	ca_appendf(buf, size, &off, "]: got %.6g, expected %.6g; max abs err %.3g, max rel err %.3g",
		   r->first_out, r->first_ref, r->max_abs_err, r->max_rel_err);
	if (r->nan_unwritten)
		ca_appendf(buf, size, &off, "; %zu elements left unwritten (NaN)", r->nan_unwritten);
}
