/* Unit tests for src/eval/compare: the allclose rule |out - ref| <= atol + rtol * |ref| on the
 * float32 fast path and the generic path (f64, f16, bf16, i64, bool), NaN and infinity
 * handling, the error maxima, the first mismatch's position, and compare_describe's text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/compare.h"

#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))
#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

/* IEEE half from a float; exact for zero, infinities, NaN and normal halves (all the test
 * values are exactly representable). */
static uint16_t to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
	if (exp == 0 && man == 0)
		return sign;
	int e = (int)exp - 127 + 15;
	assert_true(e > 0 && e < 31 && (man & 0x1fffu) == 0); /* a normal half, exactly */
	return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)(man >> 13));
}

/* bfloat16: the top half of a float (exact for the test values). */
static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (isnan(f))
		return 0x7fc0;
	assert_true((u & 0xffffu) == 0);
	return (uint16_t)(u >> 16);
}

/* A tensor owning a buffer of n elements of type t, filled from vals (converted). */
struct owned {
	struct st_tensor t;
	void *buf;
};

static void make(struct owned *o, enum ca_dtype t, const double *vals, size_t n, int ndim,
		 const int64_t *shape)
{
	size_t es = ca_dtype_size(t);
	memset(o, 0, sizeof *o);
	o->buf = calloc(n ? n : 1, es);
	assert_non_null(o->buf);
	for (size_t i = 0; i < n; i++) {
		unsigned char *p = (unsigned char *)o->buf + i * es;
		double v = vals[i];
		switch (t) {
		case CA_DTYPE_F64: memcpy(p, &v, 8); break;
		case CA_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
		case CA_DTYPE_F16: { uint16_t h = to_f16((float)v); memcpy(p, &h, 2); break; }
		case CA_DTYPE_BF16: { uint16_t h = to_bf16((float)v); memcpy(p, &h, 2); break; }
		case CA_DTYPE_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
		case CA_DTYPE_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
		case CA_DTYPE_BOOL: p[0] = v != 0; break;
		default: fail_msg("dtype %d not handled by the test", (int)t);
		}
	}
	o->t.dtype = t;
	o->t.ndim = ndim;
	for (int k = 0; k < ndim; k++)
		o->t.shape[k] = shape[k];
	o->t.nbytes = n * es;
	o->t.data = o->buf;
}

static void make1(struct owned *o, enum ca_dtype t, const double *vals, size_t n)
{
	int64_t shape[1] = {(int64_t)n};
	make(o, t, vals, n, 1, shape);
}

static void drop(struct owned *o)
{
	free(o->buf);
	o->buf = NULL;
}

static void compare_as(enum ca_dtype t, const double *out, const double *ref, size_t n,
		       double atol, double rtol, struct compare_result *r)
{
	struct owned o, e;
	make1(&o, t, out, n);
	make1(&e, t, ref, n);
	compare_tensors(&o.t, &e.t, atol, rtol, r);
	drop(&o);
	drop(&e);
}

static const enum ca_dtype float_types[] = {CA_DTYPE_F32, CA_DTYPE_F64, CA_DTYPE_F16,
					    CA_DTYPE_BF16};
#define N_FLOAT_TYPES (sizeof float_types / sizeof float_types[0])

/* atol 0.25, rtol 0.25: the tolerance for ref r is 0.25 + 0.25 |r|. Elements 0, 2 and 4 sit
 * exactly on the boundary (match); 1 and 3 are just past it (mismatch). */
static void test_allclose_rule_all_float_types(void **state)
{
	(void)state;
	const double ref[] = {1.0, 2.0, 4.0, 0.0, -2.0};
	const double out[] = {1.5, 3.0, 5.25, 0.5, -2.75};
	/*     tolerance:    0.5  0.75 1.25  0.25  0.75
	 *     |diff|:       0.5  1.0  1.25  0.5   0.75 */
	for (size_t k = 0; k < N_FLOAT_TYPES; k++) {
		struct compare_result r;
		compare_as(float_types[k], out, ref, 5, 0.25, 0.25, &r);
		assert_true(r.shape_ok);
		assert_false(r.match);
		assert_int_equal(r.numel, 5);
		assert_int_equal(r.mismatches, 2);
		assert_int_equal(r.nan_unwritten, 0);
		assert_true(r.has_first);
		assert_int_equal(r.first_index, 1);
		assert_int_equal(r.ndim, 1);
		assert_int_equal(r.first_coords[0], 1);
		assert_true(r.first_out == 3.0 && r.first_ref == 2.0);
		assert_near(r.max_abs_err, 1.25, 0);
		/* rel: 0.5/1, 1/2, 1.25/4, 0.5/1e-12, 0.75/2 -> the zero reference dominates */
		assert_near(r.max_rel_err, 0.5 / 1e-12, 1.0);

		/* a looser tolerance accepts everything, a tighter one rejects all but equal pairs */
		compare_as(float_types[k], out, ref, 5, 0.5, 0.25, &r);
		assert_true(r.match);
		assert_int_equal(r.mismatches, 0);
		assert_false(r.has_first);
		compare_as(float_types[k], out, ref, 5, 0.0, 0.0, &r);
		assert_int_equal(r.mismatches, 5);
		compare_as(float_types[k], ref, ref, 5, 0.0, 0.0, &r);
		assert_true(r.match);
		assert_true(r.max_abs_err == 0.0 && r.max_rel_err == 0.0);
	}
}

/* The fast path (f32) and the generic path (f64) agree element by element. */
static void test_f32_and_generic_agree(void **state)
{
	(void)state;
	const double ref[] = {1.0, -1.0, 100.0, 0.0, 3.0, 0.125, -64.0, 7.0};
	const double out[] = {1.0078125, -1.03125, 101.0, 0.0078125, 3.0625, 0.0, -65.0, 7.0};
	const double tols[][2] = {{0, 0}, {1e-2, 1e-2}, {1e-3, 1e-2}, {0.0078125, 0}, {0, 0.03125},
				  {1, 1}};
	for (size_t i = 0; i < sizeof tols / sizeof tols[0]; i++) {
		struct compare_result a, b;
		compare_as(CA_DTYPE_F32, out, ref, 8, tols[i][0], tols[i][1], &a);
		compare_as(CA_DTYPE_F64, out, ref, 8, tols[i][0], tols[i][1], &b);
		assert_int_equal(a.match, b.match);
		assert_int_equal(a.mismatches, b.mismatches);
		assert_int_equal(a.has_first, b.has_first);
		if (a.has_first)
			assert_int_equal(a.first_index, b.first_index);
		assert_true(a.max_abs_err == b.max_abs_err);
		assert_true(a.max_rel_err == b.max_rel_err);
	}
	/* and the rule itself: with atol 1e-2, rtol 1e-2 element 1 (|d| 0.03125 > 0.02) and
	 * element 6 (|d| 1 > 0.65) fail, element 2 (|d| 1 <= 1.01) passes */
	struct compare_result r;
	compare_as(CA_DTYPE_F32, out, ref, 8, 1e-2, 1e-2, &r);
	assert_int_equal(r.mismatches, 4); /* 1, 4 (0.0625 > 0.04), 5 (0.125 > 0.01125), 6 */
	assert_int_equal(r.first_index, 1);
}

static void test_integer_and_bool(void **state)
{
	(void)state;
	struct compare_result r;
	const double iref[] = {10, 20, -5, 1000000};
	const double iout_ok[] = {11, 23, -5, 1000000};
	const double iout_bad[] = {11, 24, -5, 999999};
	/* atol 1, rtol 0.1: tolerance 2, 3, 1.5, 100001 */
	compare_as(CA_DTYPE_I64, iout_ok, iref, 4, 1.0, 0.1, &r);
	assert_true(r.match);
	assert_near(r.max_abs_err, 3.0, 0);
	compare_as(CA_DTYPE_I64, iout_bad, iref, 4, 1.0, 0.1, &r);
	assert_false(r.match);
	assert_int_equal(r.mismatches, 1);
	assert_int_equal(r.first_index, 1);
	assert_true(r.first_out == 24.0 && r.first_ref == 20.0);
	compare_as(CA_DTYPE_I64, iout_bad, iref, 4, 0.0, 0.0, &r);
	assert_int_equal(r.mismatches, 3);
	compare_as(CA_DTYPE_I32, iout_bad, iref, 4, 0.0, 0.0, &r);
	assert_int_equal(r.mismatches, 3);

	const double bref[] = {1, 0, 1, 0};
	const double bout[] = {1, 1, 1, 0};
	compare_as(CA_DTYPE_BOOL, bout, bref, 4, 0.0, 0.0, &r);
	assert_false(r.match);
	assert_int_equal(r.mismatches, 1);
	assert_int_equal(r.first_index, 1);
	assert_true(r.first_out == 1.0 && r.first_ref == 0.0);
	/* the same rule on the values: atol 1 accepts a flipped bool */
	compare_as(CA_DTYPE_BOOL, bout, bref, 4, 1.0, 0.0, &r);
	assert_true(r.match);
	compare_as(CA_DTYPE_BOOL, bref, bref, 4, 0.0, 0.0, &r);
	assert_true(r.match);
}

static void test_nan_and_inf(void **state)
{
	(void)state;
	for (size_t k = 0; k < N_FLOAT_TYPES; k++) {
		enum ca_dtype t = float_types[k];
		struct compare_result r;
		/* matching specials: NaN/NaN, +inf/+inf, -inf/-inf */
		const double ref_ok[] = {NAN, INFINITY, -INFINITY, 1.0};
		compare_as(t, ref_ok, ref_ok, 4, 0.0, 0.0, &r);
		assert_true(r.match);
		assert_int_equal(r.nan_unwritten, 0);
		assert_true(r.max_abs_err == 0.0); /* specials do not enter the maxima */

		/* NaN where the reference is finite: unwritten and a mismatch, whatever atol */
		const double ref1[] = {1.0, 2.0, 3.0};
		const double out1[] = {1.0, NAN, NAN};
		compare_as(t, out1, ref1, 3, 1e6, 1e6, &r);
		assert_false(r.match);
		assert_int_equal(r.mismatches, 2);
		assert_int_equal(r.nan_unwritten, 2);
		assert_int_equal(r.first_index, 1);
		assert_true(isnan(r.first_out) && r.first_ref == 2.0);
		assert_true(r.max_abs_err == 0.0);

		/* a finite output where the reference is NaN is a mismatch, not "unwritten" */
		const double ref2[] = {NAN};
		const double out2[] = {0.0};
		compare_as(t, out2, ref2, 1, 1e6, 1e6, &r);
		assert_int_equal(r.mismatches, 1);
		assert_int_equal(r.nan_unwritten, 0);

		/* +inf vs -inf, finite vs inf and inf vs finite: mismatches, even with huge atol */
		const double ref3[] = {INFINITY, INFINITY, 4.0, -INFINITY};
		const double out3[] = {-INFINITY, 256.0, INFINITY, -INFINITY};
		compare_as(t, out3, ref3, 4, 1e30, 1e30, &r);
		assert_int_equal(r.mismatches, 3);
		assert_int_equal(r.first_index, 0);
		assert_true(r.first_out == -INFINITY && r.first_ref == INFINITY);
		assert_int_equal(r.nan_unwritten, 0);
		assert_true(isfinite(r.max_abs_err) && isfinite(r.max_rel_err));
	}
}

static void test_error_maxima(void **state)
{
	(void)state;
	struct compare_result r;
	const double ref[] = {2.0, 0.5, -8.0, 1.0};
	const double out[] = {2.5, 0.5, -7.0, 1.0};
	/* abs: 0.5, 0, 1, 0 ; rel: 0.25, 0, 0.125, 0 */
	for (size_t k = 0; k < N_FLOAT_TYPES; k++) {
		compare_as(float_types[k], out, ref, 4, 10.0, 0.0, &r);
		assert_true(r.match); /* the maxima are reported for matching tensors too */
		assert_true(r.max_abs_err == 1.0);
		assert_true(r.max_rel_err == 0.25);
	}
	/* a zero reference divides by 1e-12 */
	const double zref[] = {0.0};
	const double zout[] = {0.25};
	compare_as(CA_DTYPE_F64, zout, zref, 1, 1.0, 0.0, &r);
	assert_true(r.match);
	assert_near(r.max_rel_err, 0.25e12, 1.0);
}

/* Shape [2, 3, 4]: flat index 14 is [1, 0, 2]; a later mismatch (23 = [1, 2, 3]) is counted but
 * the first is reported. */
static void test_first_mismatch_coordinates(void **state)
{
	(void)state;
	double ref[24], out[24];
	int64_t shape[3] = {2, 3, 4};
	struct owned o, e;
	struct compare_result r;
	char text[512];

	for (int i = 0; i < 24; i++)
		ref[i] = out[i] = (double)i * 0.25;
	out[14] = 0.5;   /* ref 3.5 */
	out[23] = -1.0;  /* ref 5.75 */
	for (size_t k = 0; k < 2; k++) {
		enum ca_dtype t = k == 0 ? CA_DTYPE_F32 : CA_DTYPE_F64;
		make(&o, t, out, 24, 3, shape);
		make(&e, t, ref, 24, 3, shape);
		compare_tensors(&o.t, &e.t, 1e-3, 1e-3, &r);
		assert_true(r.shape_ok);
		assert_false(r.match);
		assert_int_equal(r.numel, 24);
		assert_int_equal(r.mismatches, 2);
		assert_int_equal(r.first_index, 14);
		assert_int_equal(r.ndim, 3);
		assert_int_equal(r.first_coords[0], 1);
		assert_int_equal(r.first_coords[1], 0);
		assert_int_equal(r.first_coords[2], 2);
		assert_true(r.first_out == 0.5 && r.first_ref == 3.5);
		assert_true(r.max_abs_err == 6.75);

		compare_describe(&r, "outputs.0", text, sizeof text);
		assert_contains(text, "outputs.0");
		assert_contains(text, "2 of 24");
		assert_contains(text, "[1, 0, 2]");
		assert_contains(text, "got 0.5");
		assert_contains(text, "expected 3.5");
		assert_null(strstr(text, "unwritten"));
		assert_null(strstr(text, "never written"));
		drop(&o);
		drop(&e);
	}
}

static void test_shape_and_dtype_mismatch(void **state)
{
	(void)state;
	const double v[] = {1, 2, 3, 4, 5, 6};
	int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6}, s3[1] = {3};
	struct owned a, b;
	struct compare_result r;
	char text[256];

	make(&a, CA_DTYPE_F32, v, 6, 2, s23);
	make(&b, CA_DTYPE_F32, v, 6, 2, s32); /* same bytes, transposed shape */
	compare_tensors(&a.t, &b.t, 1, 1, &r);
	assert_false(r.shape_ok);
	assert_false(r.match);
	compare_describe(&r, "outputs.1", text, sizeof text);
	assert_contains(text, "outputs.1");
	assert_contains(text, "dtype or shape differs");
	drop(&b);

	make(&b, CA_DTYPE_F32, v, 6, 1, s6); /* same bytes, other rank */
	compare_tensors(&a.t, &b.t, 1, 1, &r);
	assert_false(r.shape_ok);
	assert_false(r.match);
	drop(&b);

	make(&b, CA_DTYPE_I32, v, 6, 2, s23); /* same shape and bytes, other dtype */
	compare_tensors(&a.t, &b.t, 1, 1, &r);
	assert_false(r.shape_ok);
	assert_false(r.match);
	drop(&b);

	make(&b, CA_DTYPE_F32, v, 6, 2, s23); /* inconsistent: same dtype and shape, fewer bytes */
	b.t.nbytes -= 4;
	compare_tensors(&a.t, &b.t, 1, 1, &r);
	assert_false(r.shape_ok);
	drop(&b);

	make(&b, CA_DTYPE_F64, v, 3, 1, s3); /* same byte count (24), other dtype and shape */
	drop(&a);
	make(&a, CA_DTYPE_F32, v, 6, 1, s6);
	compare_tensors(&a.t, &b.t, 1, 1, &r);
	assert_false(r.shape_ok);
	assert_false(r.match);
	drop(&a);
	drop(&b);
}

static void test_describe_never_written_and_partial(void **state)
{
	(void)state;
	const double ref[] = {1.0, 2.0, 3.0, 4.0};
	const double all_nan[] = {NAN, NAN, NAN, NAN};
	const double some_nan[] = {1.0, NAN, 3.5, 4.0};
	struct compare_result r;
	char text[512];

	compare_as(CA_DTYPE_F32, all_nan, ref, 4, 1e-2, 1e-2, &r);
	assert_int_equal(r.nan_unwritten, 4);
	compare_describe(&r, "outputs.0", text, sizeof text);
	assert_contains(text, "outputs.0");
	assert_contains(text, "never written");

	compare_as(CA_DTYPE_F32, some_nan, ref, 4, 1e-2, 1e-2, &r);
	assert_int_equal(r.mismatches, 2);
	assert_int_equal(r.nan_unwritten, 1);
	compare_describe(&r, "outputs.0", text, sizeof text);
	assert_null(strstr(text, "never written"));
	assert_contains(text, "2 of 4");
	assert_contains(text, "[1]");
	assert_contains(text, "got nan");
	assert_contains(text, "expected 2");
	assert_contains(text, "1 elements left unwritten");

	compare_as(CA_DTYPE_F32, ref, ref, 4, 0, 0, &r);
	compare_describe(&r, "outputs.0", text, sizeof text);
	assert_contains(text, "matches");

	/* a tiny buffer is truncated, never overrun (ASan watches) */
	compare_as(CA_DTYPE_F32, some_nan, ref, 4, 1e-2, 1e-2, &r);
	char small[8];
	compare_describe(&r, "outputs.0", small, sizeof small);
	assert_true(strlen(small) < sizeof small);
}

static void test_zero_elements_and_scalar(void **state)
{
	(void)state;
	int64_t s0[2] = {0, 3};
	struct owned a, b;
	struct compare_result r;

	make(&a, CA_DTYPE_F32, NULL, 0, 2, s0);
	make(&b, CA_DTYPE_F32, NULL, 0, 2, s0);
	compare_tensors(&a.t, &b.t, 0, 0, &r);
	assert_true(r.shape_ok);
	assert_true(r.match);
	assert_int_equal(r.numel, 0);
	assert_int_equal(r.mismatches, 0);
	drop(&a);
	drop(&b);
	make(&a, CA_DTYPE_BF16, NULL, 0, 2, s0);
	make(&b, CA_DTYPE_BF16, NULL, 0, 2, s0);
	compare_tensors(&a.t, &b.t, 0, 0, &r);
	assert_true(r.match);
	drop(&a);
	drop(&b);

	/* a 0-d tensor holds one element */
	const double x = 2.0, y = 2.5;
	make(&a, CA_DTYPE_F32, &y, 1, 0, NULL);
	make(&b, CA_DTYPE_F32, &x, 1, 0, NULL);
	compare_tensors(&a.t, &b.t, 0.1, 0, &r);
	assert_true(r.shape_ok);
	assert_int_equal(r.numel, 1);
	assert_int_equal(r.mismatches, 1);
	assert_int_equal(r.first_index, 0);
	assert_int_equal(r.ndim, 0);
	compare_tensors(&a.t, &b.t, 0.5, 0, &r);
	assert_true(r.match);
	drop(&a);
	drop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allclose_rule_all_float_types),
		cmocka_unit_test(test_f32_and_generic_agree),
		cmocka_unit_test(test_integer_and_bool),
		cmocka_unit_test(test_nan_and_inf),
		cmocka_unit_test(test_error_maxima),
		cmocka_unit_test(test_first_mismatch_coordinates),
		cmocka_unit_test(test_shape_and_dtype_mismatch),
		cmocka_unit_test(test_describe_never_written_and_partial),
		cmocka_unit_test(test_zero_elements_and_scalar),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
