/* Unit tests for src/tensor/safetensors.c: round trips of every dtype, 0-d and zero-size tensors,
 * metadata, a fixture written by the Python `safetensors` package, corrupt inputs, and the
 * writer's argument checks. Set CA_TEST_PYTHON to a python with torch + safetensors to also check
 * that Python reads what we write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/safetensors.h"
#include "util/fs.h"
#include "util/proc.h"

/* ---- helpers --------------------------------------------------------------------------------- */

#define TEST_NAME "st"
#include "unit/helpers.h"

/* The fixture lives next to this source file: tests/unit/../data/safetensors/. */
static void fixture_path(char *out, size_t size, const char *name)
{
	const char *src = __FILE__;
	const char *slash = strrchr(src, '/');
	int dir_len = slash ? (int)(slash - src) : 1;
	int n = snprintf(out, size, "%.*s/../data/safetensors/%s", dir_len, slash ? src : ".", name);
	assert_true(n > 0 && (size_t)n < size);
}

/* A buffer holding an 8-byte header length, the header text and data_len bytes of data. */
static uint8_t *make_buf(const char *header, size_t data_len, size_t *len)
{
	size_t hlen = strlen(header);
	uint8_t *buf = malloc(8 + hlen + data_len + 1);
	assert_non_null(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
	memcpy(buf + 8, header, hlen);
	for (size_t i = 0; i < data_len; i++)
		buf[8 + hlen + i] = (uint8_t)(i * 7 + 1);
	*len = 8 + hlen + data_len;
	return buf;
}

/* Parses header+data, expects failure with code and a one-line message containing want. */
static void expect_parse_error(const char *header, size_t data_len, int code, const char *want)
{
	size_t len;
	uint8_t *buf = make_buf(header, data_len, &len);
	struct safetensors st;
	struct ca_diag d = {{0}};
	int rc = safetensors_parse(&st, buf, len, &d);
	if (rc != code || !strstr(d.msg, want))
		print_error("header %s\n  got rc %d (%s) msg '%s'\n  want rc %d msg containing '%s'\n",
			    header, rc, ca_err_name(rc), d.msg, code, want);
	assert_int_equal(rc, code);
	assert_non_null(strstr(d.msg, want));
	assert_null(strchr(d.msg, '\n'));
	assert_null(st.tensors);
	assert_int_equal(st.count, 0);
	safetensors_close(&st); /* harmless after failure */
	free(buf);
}

static void expect_parse_ok(const char *header, size_t data_len, size_t count)
{
	size_t len;
	uint8_t *buf = make_buf(header, data_len, &len);
	struct safetensors st;
	struct ca_diag d = {{0}};
	int rc = safetensors_parse(&st, buf, len, &d);
	if (rc)
		print_error("header %s: %s\n", header, d.msg);
	assert_int_equal(rc, 0);
	assert_int_equal(st.count, count);
	safetensors_close(&st);
	free(buf);
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31u + i * 13u + (i >> 8));
}

/* ---- round trips ----------------------------------------------------------------------------- */

static void test_roundtrip_all_dtypes(void **state)
{
	(void)state;
	struct st_tensor in[CA_DTYPE_COUNT];
	uint8_t *bufs[CA_DTYPE_COUNT] = {0};
	size_t n = 0;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	struct safetensors st;
	const char *meta[] = {"seed", "42", "kind", "inputs", NULL};

	memset(in, 0, sizeof in);
	for (int t = 1; t < CA_DTYPE_COUNT; t++, n++) {
		struct st_tensor *x = &in[n];
		/* names chosen so that sorted order differs from write order */
		snprintf(x->name, sizeof x->name, "t.%s", ca_dtype_safetensors_name((enum ca_dtype)t));
		x->dtype = (enum ca_dtype)t;
		x->ndim = 3;
		x->shape[0] = 2;
		x->shape[1] = t;
		x->shape[2] = 3;
		x->nbytes = (size_t)(2 * t * 3) * ca_dtype_size(x->dtype);
		bufs[n] = malloc(x->nbytes);
		assert_non_null(bufs[n]);
		fill_pattern(bufs[n], x->nbytes, (unsigned)t);
		if (x->dtype == CA_DTYPE_BOOL)
			for (size_t i = 0; i < x->nbytes; i++)
				bufs[n][i] &= 1;
		x->data = bufs[n];
	}
	tmp_path(path, sizeof path, "all.safetensors");
	assert_int_equal(safetensors_write(path, in, n, meta, &d), 0);

	assert_int_equal(safetensors_open(&st, path, &d), 0);
	assert_true(st.storage_is_mmap);
	assert_non_null(st.storage);
	assert_int_equal(st.count, n);
	for (size_t i = 1; i < st.count; i++)
		assert_true(strcmp(st.tensors[i - 1].name, st.tensors[i].name) < 0);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = safetensors_find(&st, in[i].name);
		assert_non_null(t);
		assert_string_equal(t->name, in[i].name);
		assert_int_equal(t->dtype, in[i].dtype);
		assert_int_equal(t->ndim, 3);
		assert_memory_equal(t->shape, in[i].shape, 3 * sizeof(int64_t));
		assert_int_equal(t->nbytes, in[i].nbytes);
		assert_memory_equal(t->data, in[i].data, in[i].nbytes);
		/* data lies inside the mapping */
		assert_true((const uint8_t *)t->data >= (const uint8_t *)st.storage);
		assert_true((const uint8_t *)t->data + t->nbytes <=
			    (const uint8_t *)st.storage + st.storage_len);
	}
	assert_null(safetensors_find(&st, "t.F33"));
	assert_null(safetensors_find(&st, ""));
	safetensors_close(&st);
	assert_null(st.tensors);
	assert_null(st.storage);
	safetensors_close(&st); /* idempotent */

	/* the same file parsed from memory */
	{
		char *raw;
		size_t len;
		assert_int_equal(ca_read_file(path, 1u << 20, &raw, &len, &d), 0);
		assert_int_equal(safetensors_parse(&st, (const uint8_t *)raw, len, &d), 0);
		assert_null(st.storage);
		assert_int_equal(st.count, n);
		for (size_t i = 0; i < n; i++) {
			const struct st_tensor *t = safetensors_find(&st, in[i].name);
			assert_non_null(t);
			assert_memory_equal(t->data, in[i].data, in[i].nbytes);
		}
		safetensors_close(&st);
		free(raw);
	}
	for (size_t i = 0; i < n; i++)
		free(bufs[i]);
}

/* Header is padded with spaces to a multiple of 8 and carries __metadata__ first. */
static void test_header_layout(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	float v = 1.5f;
	struct st_tensor t = {.name = "x", .dtype = CA_DTYPE_F32, .ndim = 1, .shape = {1},
			      .nbytes = 4, .data = &v};
	const char *meta[] = {"kind", "outputs", NULL};
	char *raw;
	size_t len;
	uint64_t hlen = 0;

	tmp_path(path, sizeof path, "layout.safetensors");
	assert_int_equal(safetensors_write(path, &t, 1, meta, &d), 0);
	assert_int_equal(ca_read_file(path, 1u << 20, &raw, &len, &d), 0);
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | (uint8_t)raw[i];
	assert_int_equal(hlen % 8, 0);
	assert_int_equal(len, 8 + hlen + 4);
	assert_memory_equal(raw + 8 + hlen, &v, 4);
	{
		const char *want = "{\"__metadata__\":{\"kind\":\"outputs\"},\"x\":";
		assert_true(strncmp(raw + 8, want, strlen(want)) == 0);
	}
	/* the JSON ends with '}' followed only by spaces */
	{
		size_t end = 8 + (size_t)hlen;
		while (raw[end - 1] == ' ')
			end--;
		assert_int_equal(raw[end - 1], '}');
		assert_true(8 + hlen - end < 8);
	}
	free(raw);

	/* no temporary file is left next to the result */
	{
		char **names;
		size_t count;
		assert_int_equal(ca_list_files(tmpdir, NULL, 100, &names, &count, &d), 0);
		for (size_t i = 0; i < count; i++)
			assert_null(strstr(names[i], ".tmp."));
		ca_free_names(names, count);
	}
}

static void test_zero_d_and_zero_size(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	double scalar = -0.25;
	int64_t iscalar = -7;
	uint8_t flag = 1;
	struct st_tensor in[4] = {
		{.name = "args.0", .dtype = CA_DTYPE_F64, .ndim = 0, .nbytes = 8, .data = &scalar},
		{.name = "args.1", .dtype = CA_DTYPE_F32, .ndim = 2, .shape = {0, 5}, .nbytes = 0,
		 .data = NULL},
		{.name = "args.2", .dtype = CA_DTYPE_I64, .ndim = 0, .nbytes = 8, .data = &iscalar},
		{.name = "args.3", .dtype = CA_DTYPE_BOOL, .ndim = 0, .nbytes = 1, .data = &flag},
	};
	struct safetensors st;
	const struct st_tensor *t;

	tmp_path(path, sizeof path, "scalars.safetensors");
	assert_int_equal(safetensors_write(path, in, 4, NULL, &d), 0);
	assert_int_equal(safetensors_open(&st, path, &d), 0);
	assert_int_equal(st.count, 4);
	t = safetensors_find_indexed(&st, "args", 0);
	assert_non_null(t);
	assert_int_equal(t->ndim, 0);
	assert_int_equal(t->nbytes, 8);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == -0.25);
	t = safetensors_find_indexed(&st, "args", 1);
	assert_non_null(t);
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 0);
	assert_int_equal(t->shape[1], 5);
	assert_int_equal(t->nbytes, 0);
	t = safetensors_find_indexed(&st, "args", 2);
	assert_non_null(t);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == -7.0);
	t = safetensors_find_indexed(&st, "args", 3);
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_BOOL);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == 1.0);
	safetensors_close(&st);

	/* a file holding no tensors at all, and one holding only a zero-size tensor */
	assert_int_equal(safetensors_write(path, NULL, 0, NULL, &d), 0);
	assert_int_equal(safetensors_open(&st, path, &d), 0);
	assert_int_equal(st.count, 0);
	assert_null(safetensors_find(&st, "args.0"));
	safetensors_close(&st);
	assert_int_equal(safetensors_write(path, &in[1], 1, NULL, &d), 0);
	assert_int_equal(safetensors_open(&st, path, &d), 0);
	assert_int_equal(st.count, 1);
	assert_int_equal(st.tensors[0].nbytes, 0);
	safetensors_close(&st);
}

static void test_find_indexed(void **state)
{
	(void)state;
	const char *hdr =
		"{\"args.2\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		"\"args.10\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
		"\"args.1\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]},"
		"\"params.0\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}";
	size_t len;
	uint8_t *buf = make_buf(hdr, 4, &len);
	struct safetensors st;
	struct ca_diag d = {{0}};
	const struct st_tensor *t;
	char long_prefix[CA_SAFETENSORS_NAME_MAX + 8];

	assert_int_equal(safetensors_parse(&st, buf, len, &d), 0);
	assert_int_equal(st.count, 4);
	t = safetensors_find_indexed(&st, "args", 2);
	assert_non_null(t);
	assert_string_equal(t->name, "args.2");
	assert_ptr_equal(t->data, buf + len - 4); /* offset 0 of the data */
	t = safetensors_find_indexed(&st, "args", 10);
	assert_non_null(t);
	assert_ptr_equal(t->data, buf + len - 3);
	assert_non_null(safetensors_find_indexed(&st, "args", 1));
	assert_non_null(safetensors_find_indexed(&st, "params", 0));
	assert_null(safetensors_find_indexed(&st, "args", 0));
	assert_null(safetensors_find_indexed(&st, "args", 3));
	assert_null(safetensors_find_indexed(&st, "args", -1));
	assert_null(safetensors_find_indexed(&st, "outputs", 0));
	memset(long_prefix, 'a', sizeof long_prefix - 1);
	long_prefix[sizeof long_prefix - 1] = '\0';
	assert_null(safetensors_find_indexed(&st, long_prefix, 0));
	safetensors_close(&st);
	free(buf);
}

/* ---- interoperability with the Python safetensors package ------------------------------------ */

static void test_python_fixture(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	struct safetensors st;
	const struct st_tensor *t;

	fixture_path(path, sizeof path, "torch_written.safetensors");
	if (safetensors_open(&st, path, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(st.count, 7);

	t = safetensors_find(&st, "args.0"); /* float32 [2,3]: arange(6) * 0.5 - 1 */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_F32);
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 2);
	assert_int_equal(t->shape[1], 3);
	assert_int_equal(t->nbytes, 24);
	for (size_t i = 0; i < 6; i++)
		assert_true(ca_dtype_load(t->dtype, t->data, i) == (double)i * 0.5 - 1.0);

	t = safetensors_find(&st, "args.1"); /* bfloat16 */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_BF16);
	assert_int_equal(t->nbytes, 8);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == 1.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 1) == -2.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 2) == 0.5);
	assert_true(ca_dtype_load(t->dtype, t->data, 3) == 3.140625);

	t = safetensors_find(&st, "args.2"); /* float16 [2,2] */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_F16);
	assert_int_equal(t->ndim, 2);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == 1.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 1) == -0.5);
	assert_true(ca_dtype_load(t->dtype, t->data, 2) == 65504.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 3) == ldexp(1.0, -14));

	t = safetensors_find(&st, "args.3"); /* int64 */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_I64);
	assert_int_equal(t->shape[0], 3);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == -3.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 1) == 0.0);
	assert_true(ca_dtype_load(t->dtype, t->data, 2) == ldexp(1.0, 40));

	t = safetensors_find(&st, "args.4"); /* bool */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_BOOL);
	assert_int_equal(t->nbytes, 5);
	{
		const uint8_t want[5] = {1, 0, 1, 1, 0};
		assert_memory_equal(t->data, want, 5);
	}

	t = safetensors_find(&st, "args.5"); /* 0-d float64 */
	assert_non_null(t);
	assert_int_equal(t->dtype, CA_DTYPE_F64);
	assert_int_equal(t->ndim, 0);
	assert_int_equal(t->nbytes, 8);
	assert_true(ca_dtype_load(t->dtype, t->data, 0) == 2.5);

	t = safetensors_find(&st, "params.0"); /* zero-size float32 [0,4] */
	assert_non_null(t);
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 0);
	assert_int_equal(t->shape[1], 4);
	assert_int_equal(t->nbytes, 0);
	safetensors_close(&st);
}

/* Writes a file that Python must read; runs the check when CA_TEST_PYTHON names a python with
 * torch and safetensors (skipped otherwise). */
static void test_python_reads_ours(void **state)
{
	(void)state;
	const char *py = getenv("CA_TEST_PYTHON");
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	float f32[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
	uint16_t bf16[3] = {0x3F80, 0xC000, 0x4049};  /* 1, -2, 3.140625 */
	uint16_t f16[3] = {0x3C00, 0xB800, 0x7BFF};   /* 1, -0.5, 65504 */
	int64_t i64[2] = {-3, (int64_t)1 << 40};
	uint8_t b[3] = {1, 0, 1};
	double scalar = 2.5;
	struct st_tensor in[7] = {
		{.name = "outputs.0", .dtype = CA_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .nbytes = 24,
		 .data = f32},
		{.name = "outputs.1", .dtype = CA_DTYPE_BF16, .ndim = 1, .shape = {3}, .nbytes = 6,
		 .data = bf16},
		{.name = "outputs.2", .dtype = CA_DTYPE_F16, .ndim = 1, .shape = {3}, .nbytes = 6,
		 .data = f16},
		{.name = "outputs.3", .dtype = CA_DTYPE_I64, .ndim = 1, .shape = {2}, .nbytes = 16,
		 .data = i64},
		{.name = "outputs.4", .dtype = CA_DTYPE_BOOL, .ndim = 1, .shape = {3}, .nbytes = 3,
		 .data = b},
		{.name = "outputs.5", .dtype = CA_DTYPE_F64, .ndim = 0, .nbytes = 8, .data = &scalar},
		{.name = "outputs.6", .dtype = CA_DTYPE_F32, .ndim = 2, .shape = {0, 4}, .nbytes = 0},
	};
	const char *meta[] = {"seed", "7", "kind", "outputs", NULL};
	static const char script[] =
		"import sys, torch\n"
		"from safetensors import safe_open\n"
		"from safetensors.torch import load_file\n"
		"t = load_file(sys.argv[1])\n"
		"assert sorted(t) == ['outputs.%d' % i for i in range(7)], sorted(t)\n"
		"assert torch.equal(t['outputs.0'], torch.tensor([[-1., -.5, 0.], [.5, 1., 1.5]]))\n"
		"assert torch.equal(t['outputs.1'], torch.tensor([1., -2., 3.140625], "
		"dtype=torch.bfloat16))\n"
		"assert torch.equal(t['outputs.2'], torch.tensor([1., -.5, 65504.], "
		"dtype=torch.float16))\n"
		"assert torch.equal(t['outputs.3'], torch.tensor([-3, 1 << 40]))\n"
		"assert torch.equal(t['outputs.4'], torch.tensor([True, False, True]))\n"
		"assert t['outputs.5'].shape == () and t['outputs.5'].item() == 2.5\n"
		"assert t['outputs.5'].dtype == torch.float64\n"
		"assert t['outputs.6'].shape == (0, 4)\n"
		"with safe_open(sys.argv[1], 'pt') as f:\n"
		"    assert f.metadata() == {'seed': '7', 'kind': 'outputs'}, f.metadata()\n"
		"print('python-ok')\n";
	struct ca_run_result r;

	tmp_path(path, sizeof path, "for_python.safetensors");
	assert_int_equal(safetensors_write(path, in, 7, meta, &d), 0);
	if (!py || !py[0]) {
		printf("  skipped: no Python with torch and safetensors (CA_TEST_PYTHON unset; "
		       "scripts/test.sh sets it)\n");
		skip();
		return;
	}
	{
		const char *argv[] = {py, "-c", script, path, NULL};
		struct ca_run_opts o = {.timeout_s = 120};
		assert_int_equal(ca_run(argv, &o, &r, &d), 0);
		if (r.exit_code != 0 || !strstr(r.out, "python-ok"))
			fail_msg("python could not read our file: exit %d\n%s%s", r.exit_code, r.out,
				 r.err);
		ca_run_result_free(&r);
	}
}

/* ---- corrupt and hostile inputs -------------------------------------------------------------- */

static void test_truncated(void **state)
{
	(void)state;
	struct safetensors st;
	struct ca_diag d = {{0}};
	const uint8_t four[4] = {1, 0, 0, 0};
	size_t len;
	uint8_t *buf;

	assert_int_equal(safetensors_parse(&st, four, 4, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "too short"));
	assert_int_equal(safetensors_parse(&st, NULL, 0, &d), CA_ERR_PARSE);

	/* header length claims more bytes than there are */
	buf = make_buf("{}", 0, &len);
	assert_int_equal(safetensors_parse(&st, buf, len - 1, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "header length 2 exceeds the 1 bytes"));
	free(buf);

	/* data cut short: the last tensor's offsets run past the end */
	buf = make_buf("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, &len);
	assert_int_equal(safetensors_parse(&st, buf, len, &d), 0);
	safetensors_close(&st);
	assert_int_equal(safetensors_parse(&st, buf, len - 1, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "tensor 'a': data_offsets [0, 16] exceed the 15 data bytes"));
	free(buf);
}

static void test_huge_header_length(void **state)
{
	(void)state;
	struct safetensors st;
	struct ca_diag d = {{0}};
	uint8_t buf[16];

	memset(buf, 0xff, 8);
	memcpy(buf + 8, "{}      ", 8);
	assert_int_equal(safetensors_parse(&st, buf, sizeof buf, &d), CA_ERR_LIMIT);
	assert_non_null(strstr(d.msg, "over the limit"));

	/* just over the cap */
	{
		uint64_t h = (uint64_t)CA_SAFETENSORS_MAX_HEADER + 1;
		for (int i = 0; i < 8; i++)
			buf[i] = (uint8_t)(h >> (8 * i));
		assert_int_equal(safetensors_parse(&st, buf, sizeof buf, &d), CA_ERR_LIMIT);
	}
	/* under the cap but larger than the buffer */
	{
		uint64_t h = 9;
		for (int i = 0; i < 8; i++)
			buf[i] = (uint8_t)(h >> (8 * i));
		assert_int_equal(safetensors_parse(&st, buf, sizeof buf, &d), CA_ERR_PARSE);
		assert_non_null(strstr(d.msg, "exceeds"));
	}
}

static void test_bad_json(void **state)
{
	(void)state;
	expect_parse_error("", 0, CA_ERR_PARSE, "bad JSON");
	expect_parse_error("{", 0, CA_ERR_PARSE, "bad JSON");
	expect_parse_error("{\"a\":}", 0, CA_ERR_PARSE, "bad JSON");
	expect_parse_error("{} x", 0, CA_ERR_PARSE, "bad JSON");
	expect_parse_error("[]", 0, CA_ERR_PARSE, "not a JSON object");
	expect_parse_error("\"str\"", 0, CA_ERR_PARSE, "bad JSON");
	/* a duplicate key would silently replace the first entry */
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
			   "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
			   2, CA_ERR_PARSE, "duplicate");
	/* raw control characters quoted back by the JSON parser stay on one line */
	expect_parse_error("{\"a\n\\q\":1}", 0, CA_ERR_PARSE, "bad JSON");
	expect_parse_error("{\"a\":5}", 0, CA_ERR_PARSE, "tensor 'a': entry is not an object");
	expect_parse_error("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, CA_ERR_PARSE,
			   "dtype");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, CA_ERR_PARSE,
			   "shape");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, CA_ERR_PARSE,
			   "data_offsets");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 2,
			   CA_ERR_PARSE, "data_offsets");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0.0,1]}}", 1,
			   CA_ERR_PARSE, "non-negative integers");
	expect_parse_error("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
			   CA_ERR_PARSE, "dtype");
	/* whitespace padding after the object is fine (Python pads with spaces) */
	expect_parse_ok("{}       ", 0, 0);
	expect_parse_ok(" \n{\"__metadata__\":{}}\t ", 0, 0);
}

static void test_metadata(void **state)
{
	(void)state;
	expect_parse_ok("{\"__metadata__\":{\"seed\":\"1\",\"format\":\"pt\"},"
			"\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
			1, 1);
	expect_parse_error("{\"__metadata__\":{\"seed\":1}}", 0, CA_ERR_PARSE,
			   "__metadata__ entry 'seed' is not a string");
	expect_parse_error("{\"__metadata__\":[\"x\"]}", 0, CA_ERR_PARSE,
			   "__metadata__ must be an object");
	expect_parse_error("{\"__metadata__\":null}", 0, CA_ERR_PARSE, "__metadata__");
}

static void test_offsets_out_of_range(void **state)
{
	(void)state;
	expect_parse_error("{\"args.0\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}",
			   32, CA_ERR_PARSE,
			   "tensor 'args.0': data_offsets [0, 64] exceed the 32 data bytes");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[33,33]}}", 32,
			   CA_ERR_PARSE, "exceed the 32 data bytes");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[4,3]}}", 32,
			   CA_ERR_PARSE, "tensor 'a': data_offsets [4, 3] run backwards");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 32,
			   CA_ERR_PARSE, "non-negative");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
			   "\"data_offsets\":[9223372036854775807,9223372036854775807]}}",
			   32, CA_ERR_PARSE, "exceed");
	/* larger than any JSON integer: jansson refuses it */
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
			   "\"data_offsets\":[0,18446744073709551616]}}",
			   32, CA_ERR_PARSE, "bad JSON");
	/* a zero-size tensor at the very end is fine */
	expect_parse_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[32,32]}}", 32, 1);
	/* holes between tensors are tolerated */
	expect_parse_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]}}", 32, 1);
}

static void test_overlapping(void **state)
{
	(void)state;
	expect_parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
			   16, CA_ERR_PARSE, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
	/* same range twice */
	expect_parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			   "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
			   16, CA_ERR_PARSE, "overlap");
	/* one inside another, listed in reverse */
	expect_parse_error("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]},"
			   "\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
			   16, CA_ERR_PARSE, "overlap");
	/* overlap with a tensor that is not the immediately preceding one */
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[0,10]},"
			   "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
			   "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}",
			   16, CA_ERR_PARSE, "overlap");
	/* adjacent is fine; empty tensors inside another's bytes are fine */
	expect_parse_ok("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			"\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
			"\"c\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
			"\"d\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[4,4]}}",
			16, 4);
}

static void test_shape_size_mismatch(void **state)
{
	(void)state;
	expect_parse_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 32,
			   CA_ERR_PARSE,
			   "tensor 'a': data_offsets [0, 20] hold 20 bytes but F32 shape needs 24");
	expect_parse_error("{\"a\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}}", 32,
			   CA_ERR_PARSE, "needs 2");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,1]}}", 32,
			   CA_ERR_PARSE, "needs 0");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 32,
			   CA_ERR_PARSE, "shape[0] is not a non-negative integer");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,\"2\"],\"data_offsets\":[0,2]}}", 32,
			   CA_ERR_PARSE, "shape[1]");
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 32,
			   CA_ERR_PARSE, "shape[0]");
	/* element count overflows: 2^32 * 2^32 */
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
			   "\"data_offsets\":[0,0]}}",
			   32, CA_ERR_PARSE, "too large");
	/* byte count overflows: 2^62 elements of 8 bytes */
	expect_parse_error("{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
			   "\"data_offsets\":[0,0]}}",
			   32, CA_ERR_PARSE, "too large");
	/* a zero dimension makes a huge shape legal (zero bytes) */
	expect_parse_ok("{\"a\":{\"dtype\":\"F64\",\"shape\":[0,9223372036854775807],"
			"\"data_offsets\":[0,0]}}",
			32, 1);
}

static void test_unknown_dtype(void **state)
{
	(void)state;
	expect_parse_error("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
			   CA_ERR_UNSUPPORTED, "tensor 'a': unknown dtype 'F8_E4M3'");
	expect_parse_error("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
			   CA_ERR_UNSUPPORTED, "unknown dtype 'f32'");
	expect_parse_error("{\"a\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
			   CA_ERR_UNSUPPORTED, "unknown dtype");
}

static void test_too_many_dims(void **state)
{
	(void)state;
	expect_parse_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,2],"
			"\"data_offsets\":[0,2]}}",
			2, 1);
	expect_parse_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,2],"
			   "\"data_offsets\":[0,2]}}",
			   2, CA_ERR_LIMIT, "tensor 'a': 9 dimensions, more than the 8 allowed");
}

static void test_names(void **state)
{
	(void)state;
	char hdr[1024];
	char name[CA_SAFETENSORS_NAME_MAX + 1];

	/* the longest name that fits, then one byte more */
	memset(name, 'n', CA_SAFETENSORS_NAME_MAX - 1);
	name[CA_SAFETENSORS_NAME_MAX - 1] = '\0';
	snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		 name);
	expect_parse_ok(hdr, 1, 1);
	memset(name, 'n', CA_SAFETENSORS_NAME_MAX);
	name[CA_SAFETENSORS_NAME_MAX] = '\0';
	snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		 name);
	expect_parse_error(hdr, 1, CA_ERR_LIMIT, "name longer than 255 bytes");
	expect_parse_error("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
			   CA_ERR_PARSE, "empty name");
	/* control characters in a name do not break the one-line message */
	expect_parse_error("{\"a\\nb\\u001b\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,1]}}",
			   1, CA_ERR_UNSUPPORTED, "tensor 'a?b?': unknown dtype 'X'");
	/* NUL inside a key is refused by the JSON parser */
	expect_parse_error("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
			   1, CA_ERR_PARSE, "bad JSON");
	/* unknown keys inside an entry are ignored */
	expect_parse_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":[]}}", 1,
			1);
}

static void test_tensor_count_cap(void **state)
{
	(void)state;
	size_t cap = (size_t)CA_SAFETENSORS_MAX_TENSORS + 1;
	size_t hsize = 64 * cap + 64, off = 0;
	char *hdr = malloc(hsize);

	assert_non_null(hdr);
	hdr[off++] = '{';
	for (size_t i = 0; i < cap; i++)
		off += (size_t)snprintf(hdr + off, hsize - off,
					"%s\"t%zu\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}",
					i ? "," : "", i);
	hdr[off++] = '}';
	hdr[off] = '\0';
	expect_parse_error(hdr, 0, CA_ERR_LIMIT, "65537 tensors, over the limit of 65536");
	free(hdr);
}

static void test_open_errors(void **state)
{
	(void)state;
	struct safetensors st;
	struct ca_diag d = {{0}};
	char path[PATH_MAX];

	tmp_path(path, sizeof path, "missing.safetensors");
	assert_int_equal(safetensors_open(&st, path, &d), CA_ERR_NOTFOUND);
	assert_non_null(strstr(d.msg, path));

	assert_int_equal(safetensors_open(&st, tmpdir, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "not a regular file"));

	tmp_path(path, sizeof path, "fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	/* refused at once, without waiting for a writer */
	assert_int_equal(safetensors_open(&st, path, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "not a regular file"));
	unlink(path);
	assert_int_equal(safetensors_open(&st, "/dev/null", &d), CA_ERR_INVALID);

	tmp_path(path, sizeof path, "empty.safetensors");
	assert_int_equal(ca_write_file_atomic(path, "", 0, &d), 0);
	assert_int_equal(safetensors_open(&st, path, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "too short"));

	tmp_path(path, sizeof path, "bad.safetensors");
	{
		size_t len;
		uint8_t *buf = make_buf("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
					4, &len);
		assert_int_equal(ca_write_file_atomic(path, buf, len, &d), 0);
		free(buf);
	}
	assert_int_equal(safetensors_open(&st, path, &d), CA_ERR_PARSE);
	/* the message names the file, then what is wrong */
	assert_true(strncmp(d.msg, path, strlen(path)) == 0);
	assert_non_null(strstr(d.msg, "tensor 'a': data_offsets [0, 8] exceed the 4 data bytes"));
	assert_null(st.tensors);
	assert_null(st.storage);
	safetensors_close(&st);
}

static void test_write_errors(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	float v[4] = {0};
	struct st_tensor good = {.name = "a", .dtype = CA_DTYPE_F32, .ndim = 1, .shape = {4},
				 .nbytes = 16, .data = v};
	struct st_tensor t;
	struct st_tensor two[2];

	tmp_path(path, sizeof path, "w.safetensors");

	t = good;
	t.nbytes = 12;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "nbytes is 12 but a F32 tensor of that shape holds 16"));

	t = good;
	t.dtype = CA_DTYPE_INVALID;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	t.dtype = CA_DTYPE_COUNT;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);

	t = good;
	t.ndim = CA_MAX_DIMS + 1;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	t.ndim = -1;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);

	t = good;
	t.shape[0] = -4;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);

	t = good;
	t.ndim = 2;
	t.shape[0] = INT64_MAX;
	t.shape[1] = 4;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "too large"));

	t = good;
	t.data = NULL;
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "no data"));

	t = good;
	t.name[0] = '\0';
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	t = good;
	strcpy(t.name, "__metadata__");
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	t = good;
	memset(t.name, 'x', sizeof t.name); /* not terminated */
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	t = good;
	strcpy(t.name, "bad\xff");
	assert_int_equal(safetensors_write(path, &t, 1, NULL, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "UTF-8"));

	two[0] = good;
	two[1] = good;
	assert_int_equal(safetensors_write(path, two, 2, NULL, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "tensor 'a' appears twice"));

	{
		const char *odd[] = {"seed", NULL};
		const char *bad_utf8[] = {"seed", "\xc3", NULL};
		assert_int_equal(safetensors_write(path, &good, 1, odd, &d), CA_ERR_INVALID);
		assert_non_null(strstr(d.msg, "metadata key 'seed' has no value"));
		assert_int_equal(safetensors_write(path, &good, 1, bad_utf8, &d), CA_ERR_INVALID);
	}
	assert_int_equal(safetensors_write(path, &good, (size_t)CA_SAFETENSORS_MAX_TENSORS + 1, NULL,
					   &d),
			 CA_ERR_LIMIT);
	/* none of the failures left a file behind */
	assert_false(ca_is_file(path));

	/* a directory that does not exist: I/O error, nothing created */
	tmp_path(path, sizeof path, "no/such/dir/w.safetensors");
	assert_int_equal(safetensors_write(path, &good, 1, NULL, &d), CA_ERR_IO);
	assert_non_null(strstr(d.msg, "cannot create"));

	/* an empty metadata list writes no __metadata__ */
	{
		const char *none[] = {NULL};
		char *raw;
		tmp_path(path, sizeof path, "w.safetensors");
		assert_int_equal(safetensors_write(path, &good, 1, none, &d), 0);
		assert_int_equal(ca_read_file(path, 1u << 20, &raw, NULL, &d), 0);
		assert_null(strstr(raw + 8, "__metadata__"));
		free(raw);
	}
}

/* Writing over an existing file replaces it whole. */
static void test_overwrite(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	struct safetensors st;
	int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	int8_t b = -5;
	struct st_tensor big = {.name = "x", .dtype = CA_DTYPE_I32, .ndim = 1, .shape = {8},
				.nbytes = 32, .data = a};
	struct st_tensor small = {.name = "y", .dtype = CA_DTYPE_I8, .ndim = 0, .nbytes = 1,
				  .data = &b};

	tmp_path(path, sizeof path, "over.safetensors");
	assert_int_equal(safetensors_write(path, &big, 1, NULL, &d), 0);
	assert_int_equal(safetensors_write(path, &small, 1, NULL, &d), 0);
	assert_int_equal(safetensors_open(&st, path, &d), 0);
	assert_int_equal(st.count, 1);
	assert_null(safetensors_find(&st, "x"));
	assert_non_null(safetensors_find(&st, "y"));
	assert_true(ca_dtype_load(CA_DTYPE_I8, safetensors_find(&st, "y")->data, 0) == -5.0);
	safetensors_close(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_all_dtypes),
		cmocka_unit_test(test_header_layout),
		cmocka_unit_test(test_zero_d_and_zero_size),
		cmocka_unit_test(test_find_indexed),
		cmocka_unit_test(test_python_fixture),
		cmocka_unit_test(test_python_reads_ours),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_huge_header_length),
		cmocka_unit_test(test_bad_json),
		cmocka_unit_test(test_metadata),
		cmocka_unit_test(test_offsets_out_of_range),
		cmocka_unit_test(test_overlapping),
		cmocka_unit_test(test_shape_size_mismatch),
		cmocka_unit_test(test_unknown_dtype),
		cmocka_unit_test(test_too_many_dims),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_tensor_count_cap),
		cmocka_unit_test(test_open_errors),
		cmocka_unit_test(test_write_errors),
		cmocka_unit_test(test_overwrite),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
