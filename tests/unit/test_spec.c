/* Unit tests for src/tensor/spec.c and src/tensor/dtype.c: task_spec JSON parsing and emission,
 * the dtype table, and ca_dtype_load's software decoding of f16/bf16 bit patterns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/dtype.h"
#include "tensor/spec.h"

/* ---- task_spec ------------------------------------------------------------------------------- */

static json_t *load(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);
	if (!j)
		fail_msg("test JSON does not parse: %s: %s", e.text, text);
	return j;
}

static void expect_spec_error(const char *text, int code, const char *want)
{
	json_t *j = load(text);
	struct task_spec spec;
	struct ca_diag d = {{0}};
	int rc = task_spec_from_json(&spec, j, &d);
	if (rc != code || !strstr(d.msg, want))
		print_error("spec %s\n  got rc %d msg '%s'\n  want rc %d msg containing '%s'\n", text,
			    rc, d.msg, code, want);
	assert_int_equal(rc, code);
	assert_non_null(strstr(d.msg, want));
	/* on failure the spec is left empty (nothing to free, nothing leaked) */
	assert_null(spec.args);
	assert_null(spec.params);
	assert_null(spec.outputs);
	assert_int_equal(spec.num_args + spec.num_params + spec.num_outputs, 0);
	json_decref(j);
}

static const char valid_spec[] =
	"{\"args\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [16, 1024], "
	"\"device\": \"cuda\"},"
	"            {\"name\": \"alpha\", \"dtype\": \"float64\", \"shape\": [], \"device\": \"cpu\"},"
	"            {\"name\": \"mask\", \"dtype\": \"torch.bool\", \"shape\": [16]}],"
	" \"params\": [{\"name\": \"weight\", \"dtype\": \"bfloat16\", \"shape\": [1024, 1024]},"
	"              {\"name\": \"bias\", \"dtype\": \"float16\", \"shape\": [0]}],"
	" \"outputs\": [{\"name\": \"out\", \"dtype\": \"float32\", \"shape\": [16, 1024]},"
	"               {\"dtype\": \"int64\", \"shape\": [1, 1, 1, 1, 1, 1, 1, 3]}]}";

static void check_valid(const struct task_spec *s)
{
	assert_int_equal(s->num_args, 3);
	assert_int_equal(s->num_params, 2);
	assert_int_equal(s->num_outputs, 2);

	assert_string_equal(s->args[0].name, "x");
	assert_int_equal(s->args[0].dtype, CA_DTYPE_F32);
	assert_int_equal(s->args[0].ndim, 2);
	assert_int_equal(s->args[0].shape[0], 16);
	assert_int_equal(s->args[0].shape[1], 1024);
	assert_false(s->args[0].on_cpu);
	assert_int_equal(tensor_spec_numel(&s->args[0]), 16 * 1024);
	assert_int_equal(tensor_spec_nbytes(&s->args[0]), 16 * 1024 * 4);

	assert_string_equal(s->args[1].name, "alpha");
	assert_int_equal(s->args[1].dtype, CA_DTYPE_F64);
	assert_int_equal(s->args[1].ndim, 0);
	assert_true(s->args[1].on_cpu);
	assert_int_equal(tensor_spec_numel(&s->args[1]), 1); /* 0-d: one element */
	assert_int_equal(tensor_spec_nbytes(&s->args[1]), 8);

	assert_int_equal(s->args[2].dtype, CA_DTYPE_BOOL); /* "torch." prefix accepted */
	assert_false(s->args[2].on_cpu);                   /* no device: cuda */

	assert_string_equal(s->params[0].name, "weight");
	assert_int_equal(s->params[0].dtype, CA_DTYPE_BF16);
	assert_int_equal(tensor_spec_nbytes(&s->params[0]), 1024 * 1024 * 2);
	assert_int_equal(s->params[1].dtype, CA_DTYPE_F16);
	assert_int_equal(tensor_spec_numel(&s->params[1]), 0);
	assert_int_equal(tensor_spec_nbytes(&s->params[1]), 0);

	assert_string_equal(s->outputs[1].name, ""); /* no name: empty */
	assert_int_equal(s->outputs[1].dtype, CA_DTYPE_I64);
	assert_int_equal(s->outputs[1].ndim, CA_MAX_DIMS);
	assert_int_equal(tensor_spec_numel(&s->outputs[1]), 3);
}

static void test_spec_valid(void **state)
{
	(void)state;
	json_t *j = load(valid_spec);
	struct task_spec s;
	struct ca_diag d = {{0}};

	if (task_spec_from_json(&s, j, &d) != 0)
		fail_msg("%s", d.msg);
	check_valid(&s);
	task_spec_free(&s);
	assert_null(s.args);
	assert_int_equal(s.num_args, 0);
	task_spec_free(&s); /* idempotent */
	json_decref(j);

	/* args and params may be absent or empty */
	j = load("{\"outputs\": [{\"dtype\": \"uint8\", \"shape\": [2]}], \"params\": []}");
	assert_int_equal(task_spec_from_json(&s, j, &d), 0);
	assert_int_equal(s.num_args, 0);
	assert_int_equal(s.num_params, 0);
	assert_null(s.params);
	assert_int_equal(s.num_outputs, 1);
	assert_int_equal(s.outputs[0].dtype, CA_DTYPE_U8);
	task_spec_free(&s);
	json_decref(j);
}

static void test_spec_json_round_trip(void **state)
{
	(void)state;
	json_t *j = load(valid_spec), *out, *again_json;
	struct task_spec s, again;
	struct ca_diag d = {{0}};

	assert_int_equal(task_spec_from_json(&s, j, &d), 0);
	out = task_spec_to_json(&s);
	assert_non_null(out);
	/* emitted form: torch dtype names, explicit device, an index per entry */
	{
		json_t *a1 = json_array_get(json_object_get(out, "args"), 1);
		assert_string_equal(json_string_value(json_object_get(a1, "dtype")), "float64");
		assert_string_equal(json_string_value(json_object_get(a1, "device")), "cpu");
		assert_int_equal(json_integer_value(json_object_get(a1, "index")), 1);
		assert_int_equal(json_array_size(json_object_get(a1, "shape")), 0);
	}
	assert_int_equal(task_spec_from_json(&again, out, &d), 0);
	check_valid(&again);
	/* a second emission is identical */
	again_json = task_spec_to_json(&again);
	assert_true(json_equal(out, again_json));
	task_spec_free(&s);
	task_spec_free(&again);
	json_decref(out);
	json_decref(again_json);
	json_decref(j);
}

/* An argument's input structure (the bridge's describe) picks its perturbation; default elements */
static void test_spec_structure(void **state)
{
	(void)state;
	json_t *j = load("{\"args\": ["
			 "{\"dtype\": \"float32\", \"shape\": [4, 8, 8], \"structure\": "
			 "{\"perturb\": \"symmetric\", \"symmetric\": true}},"
			 "{\"dtype\": \"float32\", \"shape\": [100], \"structure\": "
			 "{\"perturb\": \"uniform\", \"sorted_dim\": 0}},"
			 "{\"dtype\": \"float32\", \"shape\": [9], \"structure\": "
			 "{\"perturb\": \"none\", \"discrete\": true}},"
			 "{\"dtype\": \"float32\", \"shape\": [3]}],"
			 "\"outputs\": [{\"dtype\": \"float32\", \"shape\": [2]}]}"),
	       *out;
	struct task_spec s, again;
	struct ca_diag d = {{0}};

	if (task_spec_from_json(&s, j, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(s.args[0].perturb, TENSOR_PERTURB_SYMMETRIC);
	assert_int_equal(s.args[1].perturb, TENSOR_PERTURB_UNIFORM);
	assert_int_equal(s.args[2].perturb, TENSOR_PERTURB_NONE);
	assert_int_equal(s.args[3].perturb, TENSOR_PERTURB_ELEMENTS);
	assert_int_equal(s.outputs[0].perturb, TENSOR_PERTURB_ELEMENTS);
	out = task_spec_to_json(&s); /* kept through the plan's copy of the spec */
	assert_int_equal(task_spec_from_json(&again, out, &d), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(again.args[i].perturb, s.args[i].perturb);
	assert_null(json_object_get(json_array_get(json_object_get(out, "args"), 3), "structure"));
	task_spec_free(&s);
	task_spec_free(&again);
	json_decref(out);
	json_decref(j);

	expect_spec_error("{\"args\": [{\"dtype\": \"float32\", \"shape\": [4], \"structure\": "
			  "{\"perturb\": \"wobble\"}}], \"outputs\": [{\"dtype\": \"float32\", "
			  "\"shape\": [1]}]}",
			  CA_ERR_PARSE, "unknown perturbation 'wobble'");
	expect_spec_error("{\"args\": [{\"dtype\": \"float32\", \"shape\": [4], \"structure\": "
			  "7}], \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1]}]}",
			  CA_ERR_PARSE, "needs a 'perturb' name");
	expect_spec_error("{\"args\": [{\"dtype\": \"float32\", \"shape\": [4, 5], "
			  "\"structure\": {\"perturb\": \"symmetric\"}}], \"outputs\": "
			  "[{\"dtype\": \"float32\", \"shape\": [1]}]}",
			  CA_ERR_PARSE, "square last two dimensions");
}

static void test_spec_invalid(void **state)
{
	(void)state;
	expect_spec_error("[]", CA_ERR_PARSE, "expected an object");
	expect_spec_error("{\"args\": {}, \"outputs\": []}", CA_ERR_PARSE, "'args' must be a list");
	expect_spec_error("{\"outputs\": 3}", CA_ERR_PARSE, "'outputs' must be a list");
	expect_spec_error("{\"outputs\": []}", CA_ERR_INVALID, "returns no tensors");
	expect_spec_error("{}", CA_ERR_INVALID, "returns no tensors");
	expect_spec_error("{\"outputs\": [5]}", CA_ERR_PARSE, "outputs[0]: needs dtype and shape");
	expect_spec_error("{\"outputs\": [{\"shape\": [1]}]}", CA_ERR_PARSE, "needs dtype");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\"}]}", CA_ERR_PARSE, "shape");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\", \"shape\": 4}]}", CA_ERR_PARSE,
			  "shape");
	expect_spec_error("{\"outputs\": [{\"dtype\": 1, \"shape\": [4]}]}", CA_ERR_PARSE, "dtype");
	/* an error in a later list still frees the earlier ones */
	expect_spec_error("{\"args\": [{\"dtype\": \"float32\", \"shape\": [1]}],"
			  " \"params\": [{\"name\": \"w\", \"dtype\": \"complex64\", \"shape\": [1]}],"
			  " \"outputs\": [{\"dtype\": \"float32\", \"shape\": [1]}]}",
			  CA_ERR_UNSUPPORTED, "params[0] (w): unsupported dtype complex64");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\", \"shape\": [1]},"
			  " {\"dtype\": \"F32\", \"shape\": [1]}]}",
			  CA_ERR_UNSUPPORTED, "outputs[1] (): unsupported dtype F32");
	expect_spec_error("{\"outputs\": [{\"name\": \"y\", \"dtype\": \"float32\","
			  " \"shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1]}]}",
			  CA_ERR_LIMIT, "outputs[0] (y): more than 8 dimensions");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\", \"shape\": [2, -1]}]}",
			  CA_ERR_PARSE, "bad dimension");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\", \"shape\": [2.5]}]}",
			  CA_ERR_PARSE, "bad dimension");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\", \"shape\": [\"2\"]}]}",
			  CA_ERR_PARSE, "bad dimension");
	/* shapes whose element or byte count overflows are refused (numel/nbytes stay defined) */
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float32\","
			  " \"shape\": [4294967296, 4294967296]}]}",
			  CA_ERR_LIMIT, "shape is too large");
	expect_spec_error("{\"outputs\": [{\"dtype\": \"float64\","
			  " \"shape\": [2305843009213693952]}]}",
			  CA_ERR_LIMIT, "shape is too large");
}

static void test_spec_count_cap(void **state)
{
	(void)state;
	json_t *root = json_object(), *outs = json_array();
	struct task_spec s;
	struct ca_diag d = {{0}};

	for (int i = 0; i < CA_SPEC_MAX_TENSORS; i++)
		json_array_append_new(outs, json_pack("{s:s, s:[i]}", "dtype", "float32", "shape", 1));
	json_object_set_new(root, "outputs", outs);
	assert_int_equal(task_spec_from_json(&s, root, &d), 0);
	assert_int_equal(s.num_outputs, CA_SPEC_MAX_TENSORS);
	task_spec_free(&s);
	json_array_append_new(outs, json_pack("{s:s, s:[i]}", "dtype", "float32", "shape", 1));
	assert_int_equal(task_spec_from_json(&s, root, &d), CA_ERR_LIMIT);
	assert_non_null(strstr(d.msg, "more than 4096 outputs"));
	json_decref(root);
}

static void test_spec_format(void **state)
{
	(void)state;
	struct tensor_spec t = {.dtype = CA_DTYPE_F32, .ndim = 2, .shape = {16, 1024}};
	char out[64];
	char small[10];

	tensor_spec_format(&t, out, sizeof out);
	assert_string_equal(out, "float32[16, 1024]");
	t.ndim = 0;
	tensor_spec_format(&t, out, sizeof out);
	assert_string_equal(out, "float32[]");
	t.dtype = CA_DTYPE_BF16;
	t.ndim = 1;
	t.shape[0] = 0;
	tensor_spec_format(&t, out, sizeof out);
	assert_string_equal(out, "bfloat16[0]");
	/* truncation is safe and terminated */
	t.ndim = 3;
	t.shape[0] = t.shape[1] = t.shape[2] = 123456;
	memset(small, 'Z', sizeof small);
	tensor_spec_format(&t, small, sizeof small);
	assert_true(memchr(small, '\0', sizeof small) != NULL);
	assert_true(strncmp(small, "bfloat16[", strlen(small)) == 0);
}

/* ---- dtype ----------------------------------------------------------------------------------- */

static void test_dtype_table(void **state)
{
	(void)state;
	struct {
		enum ca_dtype t;
		const char *st, *torch;
		size_t size;
		uint8_t code, bits;
		bool is_float;
	} want[] = {
		{CA_DTYPE_F64, "F64", "float64", 8, 2, 64, true},
		{CA_DTYPE_F32, "F32", "float32", 4, 2, 32, true},
		{CA_DTYPE_F16, "F16", "float16", 2, 2, 16, true},
		{CA_DTYPE_BF16, "BF16", "bfloat16", 2, 4, 16, true},
		{CA_DTYPE_I64, "I64", "int64", 8, 0, 64, false},
		{CA_DTYPE_I32, "I32", "int32", 4, 0, 32, false},
		{CA_DTYPE_I16, "I16", "int16", 2, 0, 16, false},
		{CA_DTYPE_I8, "I8", "int8", 1, 0, 8, false},
		{CA_DTYPE_U8, "U8", "uint8", 1, 1, 8, false},
		{CA_DTYPE_BOOL, "BOOL", "bool", 1, CA_DLPACK_BOOL_CODE, 8, false},
	};
	assert_int_equal(sizeof want / sizeof want[0], CA_DTYPE_COUNT - 1);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		uint8_t code = 99, bits = 99;
		assert_string_equal(ca_dtype_safetensors_name(want[i].t), want[i].st);
		assert_string_equal(ca_dtype_torch_name(want[i].t), want[i].torch);
		assert_int_equal(ca_dtype_from_safetensors(want[i].st), want[i].t);
		assert_int_equal(ca_dtype_from_torch(want[i].torch), want[i].t);
		{
			char prefixed[64];
			snprintf(prefixed, sizeof prefixed, "torch.%s", want[i].torch);
			assert_int_equal(ca_dtype_from_torch(prefixed), want[i].t);
		}
		assert_int_equal(ca_dtype_size(want[i].t), want[i].size);
		assert_int_equal(ca_dtype_is_float(want[i].t), want[i].is_float);
		ca_dtype_dlpack(want[i].t, &code, &bits);
		assert_int_equal(code, want[i].code);
		assert_int_equal(bits, want[i].bits);
		assert_int_equal(bits, 8 * want[i].size);
	}
	/* unknown names and invalid values */
	const char *bad[] = {"", "f32", "F8_E4M3", "U16", "float", "Float32", "torch.", "BOOL ", NULL};
	for (const char *const *b = bad; *b; b++) {
		assert_int_equal(ca_dtype_from_safetensors(*b), CA_DTYPE_INVALID);
		assert_int_equal(ca_dtype_from_torch(*b), CA_DTYPE_INVALID);
	}
	assert_int_equal(ca_dtype_from_torch("F32"), CA_DTYPE_INVALID);
	assert_int_equal(ca_dtype_from_safetensors("float32"), CA_DTYPE_INVALID);
	enum ca_dtype invalid[] = {CA_DTYPE_INVALID, CA_DTYPE_COUNT, (enum ca_dtype)-1};
	for (size_t i = 0; i < 3; i++) {
		uint8_t code = 99, bits = 99;
		assert_string_equal(ca_dtype_safetensors_name(invalid[i]), "INVALID");
		assert_string_equal(ca_dtype_torch_name(invalid[i]), "invalid");
		assert_int_equal(ca_dtype_size(invalid[i]), 0);
		assert_false(ca_dtype_is_float(invalid[i]));
		ca_dtype_dlpack(invalid[i], &code, &bits);
		assert_int_equal(code, 0);
		assert_int_equal(bits, 0);
	}
}

static double load16(enum ca_dtype t, uint16_t bits)
{
	return ca_dtype_load(t, &bits, 0);
}

static void test_dtype_load_f16(void **state)
{
	(void)state;
	const enum ca_dtype H = CA_DTYPE_F16;
	assert_true(load16(H, 0x0000) == 0.0 && !signbit(load16(H, 0x0000)));
	assert_true(load16(H, 0x8000) == 0.0 && signbit(load16(H, 0x8000)));
	assert_true(load16(H, 0x3C00) == 1.0);
	assert_true(load16(H, 0xBC00) == -1.0);
	assert_true(load16(H, 0x4000) == 2.0);
	assert_true(load16(H, 0xC000) == -2.0);
	assert_true(load16(H, 0x3800) == 0.5);
	assert_true(load16(H, 0x3555) == 0.333251953125); /* (1 + 0x155 / 1024) / 4 */
	assert_true(load16(H, 0x3C01) == 1.0 + ldexp(1.0, -10));        /* next after 1 */
	assert_true(load16(H, 0x7BFF) == 65504.0);                      /* largest finite */
	assert_true(load16(H, 0x0400) == ldexp(1.0, -14));              /* smallest normal */
	assert_true(load16(H, 0x03FF) == ldexp(1023.0, -24));           /* largest subnormal */
	assert_true(load16(H, 0x0001) == ldexp(1.0, -24));              /* smallest subnormal */
	assert_true(load16(H, 0x8001) == -ldexp(1.0, -24));
	assert_true(isinf(load16(H, 0x7C00)) && load16(H, 0x7C00) > 0);
	assert_true(isinf(load16(H, 0xFC00)) && load16(H, 0xFC00) < 0);
	assert_true(isnan(load16(H, 0x7E00)));
	assert_true(isnan(load16(H, 0x7C01)));
	assert_true(isnan(load16(H, 0xFFFF)));
}

static void test_dtype_load_bf16(void **state)
{
	(void)state;
	const enum ca_dtype B = CA_DTYPE_BF16;
	assert_true(load16(B, 0x0000) == 0.0);
	assert_true(signbit(load16(B, 0x8000)));
	assert_true(load16(B, 0x3F80) == 1.0);
	assert_true(load16(B, 0xBF80) == -1.0);
	assert_true(load16(B, 0xC040) == -3.0);
	assert_true(load16(B, 0x4049) == 3.140625);
	assert_true(load16(B, 0x3F81) == 1.0 + ldexp(1.0, -7));
	assert_true(load16(B, 0x7F7F) == ldexp(255.0, 120));   /* largest finite: 0xFF * 2^120 */
	assert_true(load16(B, 0x0080) == ldexp(1.0, -126));    /* smallest normal */
	assert_true(load16(B, 0x0001) == ldexp(1.0, -133));    /* smallest subnormal */
	assert_true(isinf(load16(B, 0x7F80)) && load16(B, 0x7F80) > 0);
	assert_true(isinf(load16(B, 0xFF80)) && load16(B, 0xFF80) < 0);
	assert_true(isnan(load16(B, 0x7FC0)));
	assert_true(isnan(load16(B, 0x7F81)));
}

static void test_dtype_load_others(void **state)
{
	(void)state;
	double f64[3] = {1.5, -2.25, 1e300};
	float f32[2] = {0.1f, -3.5f};
	int64_t i64[2] = {INT64_MIN, (int64_t)1 << 53};
	int32_t i32[2] = {-7, INT32_MAX};
	int16_t i16[2] = {-32768, 12345};
	int8_t i8[3] = {-128, 0, 127};
	uint8_t u8[2] = {0, 255};
	uint8_t b[3] = {0, 1, 7};
	uint16_t h[3] = {0x3C00, 0x4000, 0x4200}; /* index scaling for 2-byte types */

	assert_true(ca_dtype_load(CA_DTYPE_F64, f64, 2) == 1e300);
	assert_true(ca_dtype_load(CA_DTYPE_F64, f64, 1) == -2.25);
	assert_true(ca_dtype_load(CA_DTYPE_F32, f32, 0) == (double)0.1f);
	assert_true(ca_dtype_load(CA_DTYPE_F32, f32, 1) == -3.5);
	assert_true(ca_dtype_load(CA_DTYPE_I64, i64, 0) == -9223372036854775808.0);
	assert_true(ca_dtype_load(CA_DTYPE_I64, i64, 1) == 9007199254740992.0);
	assert_true(ca_dtype_load(CA_DTYPE_I32, i32, 0) == -7.0);
	assert_true(ca_dtype_load(CA_DTYPE_I32, i32, 1) == 2147483647.0);
	assert_true(ca_dtype_load(CA_DTYPE_I16, i16, 0) == -32768.0);
	assert_true(ca_dtype_load(CA_DTYPE_I16, i16, 1) == 12345.0);
	assert_true(ca_dtype_load(CA_DTYPE_I8, i8, 0) == -128.0);
	assert_true(ca_dtype_load(CA_DTYPE_I8, i8, 2) == 127.0);
	assert_true(ca_dtype_load(CA_DTYPE_U8, u8, 1) == 255.0);
	assert_true(ca_dtype_load(CA_DTYPE_BOOL, b, 0) == 0.0);
	assert_true(ca_dtype_load(CA_DTYPE_BOOL, b, 1) == 1.0);
	assert_true(ca_dtype_load(CA_DTYPE_BOOL, b, 2) == 1.0); /* any nonzero byte is true */
	assert_true(ca_dtype_load(CA_DTYPE_F16, h, 2) == 3.0);
	{
		uint16_t hb[2] = {0x3F80, 0x4040};
		assert_true(ca_dtype_load(CA_DTYPE_BF16, hb, 1) == 3.0);
	}
	assert_true(isnan(ca_dtype_load(CA_DTYPE_INVALID, u8, 0)));
	/* unaligned access goes through memcpy */
	{
		unsigned char raw[9] = {0};
		double v = -0.75;
		memcpy(raw + 1, &v, 8);
		assert_true(ca_dtype_load(CA_DTYPE_F64, raw + 1, 0) == -0.75);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_valid),
		cmocka_unit_test(test_spec_json_round_trip),
		cmocka_unit_test(test_spec_invalid),
		cmocka_unit_test(test_spec_structure),
		cmocka_unit_test(test_spec_count_cap),
		cmocka_unit_test(test_spec_format),
		cmocka_unit_test(test_dtype_table),
		cmocka_unit_test(test_dtype_load_f16),
		cmocka_unit_test(test_dtype_load_bf16),
		cmocka_unit_test(test_dtype_load_others),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
