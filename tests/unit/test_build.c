/* Unit tests for src/build/build: real nvcc builds of the small candidates in tests/data/build/
 * (and of a few written here: host inline asm, device inline PTX) into a temporary cache (no GPU
 * needed). nvcc comes from $CA_TEST_NVCC, else $NVCC, PATH or
 * /usr/local/cuda; the tests that need it are skipped, saying so, only when there is none. The
 * include dir (dlpack/dlpack.h, cuda_agent/abi.h) is $CA_BUILD/include, else build/include. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/build.h"
#include "build/build_int.h"
#include "build/nvcc_split.h"
#include "build/elfsyms.h"
#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"

static char data_dir[PATH_MAX]; /* tests/data/build, from the repository root or $CA_BUILD/.. */
static char tmpdir[PATH_MAX];
static char cache[PATH_MAX + 16];
static char include_dir[PATH_MAX];
static char nvcc[PATH_MAX];
static bool have_nvcc;

static bool executable(const char *path)
{
	return access(path, X_OK) == 0 && ca_is_file(path);
}

static void find_nvcc(void)
{
	const char *env = getenv("CA_TEST_NVCC");
	const char *path = getenv("PATH");

	if (!env || !env[0])
		env = getenv("NVCC");
	if (env && env[0]) {
		snprintf(nvcc, sizeof nvcc, "%s", env);
		have_nvcc = executable(nvcc);
		return;
	}
	while (path && *path) {
		size_t n = strcspn(path, ":");
		if (snprintf(nvcc, sizeof nvcc, "%.*s/nvcc", (int)n, path) < (int)sizeof nvcc &&
		    executable(nvcc)) {
			have_nvcc = true;
			return;
		}
		path += n + (path[n] == ':');
	}
	snprintf(nvcc, sizeof nvcc, "/usr/local/cuda/bin/nvcc");
	have_nvcc = executable(nvcc);
}

static int setup(void **state)
{
	const char *b = getenv("CA_BUILD");
	char abi[PATH_MAX + 32];
	(void)state;

	find_nvcc();
	if (!have_nvcc)
		fprintf(stderr, "test_build: nvcc not found (set CA_TEST_NVCC): nvcc builds are "
				"skipped\n");
	snprintf(include_dir, sizeof include_dir, "%s/include", b && b[0] ? b : "build");
	snprintf(abi, sizeof abi, "%s/cuda_agent/abi.h", include_dir);
	if (!ca_is_file(abi)) {
		fprintf(stderr, "test_build: %s is missing (run `make headers`)\n", abi);
		return -1;
	}
	snprintf(data_dir, sizeof data_dir, "tests/data/build");
	if (!ca_is_dir(data_dir) && b && b[0])
		snprintf(data_dir, sizeof data_dir, "%.4000s/../tests/data/build", b);
	if (!ca_is_dir(data_dir)) {
		fprintf(stderr, "test_build: tests/data/build not found (run from the repository "
				"root)\n");
		return -1;
	}
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-build-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(cache, sizeof cache, "%s/cache", tmpdir);
	return 0;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

/* Copies tests/data/build/<name>/kernels to <tmpdir>/<copy>/kernels; returns that path. */
static void copy_candidate(const char *name, const char *copy, char *out, size_t out_size)
{
	char src[PATH_MAX];
	char **names;
	size_t count;
	struct ca_diag d;

	assert_true(snprintf(src, sizeof src, "%s/%s/kernels", data_dir, name) < (int)sizeof src);
	assert_true(snprintf(out, out_size, "%s/%s/kernels", tmpdir, copy) < (int)out_size);
	assert_int_equal(ca_mkdirs(out, 0755, &d), 0);
	assert_int_equal(ca_list_files(src, NULL, 64, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++) {
		char from[PATH_MAX], to[PATH_MAX], *text;
		size_t len;
		assert_int_equal(ca_path_join(from, sizeof from, src, names[i]), 0);
		assert_int_equal(ca_path_join(to, sizeof to, out, names[i]), 0);
		assert_int_equal(ca_read_file(from, 1u << 20, &text, &len, &d), 0);
		assert_int_equal(ca_write_file_atomic(to, text, len, &d), 0);
		free(text);
	}
	ca_free_names(names, count);
}

static void append_to(const char *dir, const char *name, const char *more)
{
	char path[PATH_MAX], *text, *joined;
	size_t len;
	struct ca_diag d;

	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	assert_int_equal(ca_read_file(path, 1u << 20, &text, &len, &d), 0);
	joined = malloc(len + strlen(more) + 1);
	assert_non_null(joined);
	memcpy(joined, text, len);
	memcpy(joined + len, more, strlen(more) + 1);
	assert_int_equal(ca_write_file_atomic(path, joined, strlen(joined), &d), 0);
	free(text);
	free(joined);
}

static struct build_opts opts_for(const char *kdir)
{
	return (struct build_opts){.kernels_dir = kdir, .cache_dir = cache, .nvcc = nvcc,
				   .include_dir = include_dir, .arch = "sm_90"};
}

static void run_build(const struct build_opts *o, struct build_result *r)
{
	struct ca_diag d = {{0}};
	int rc = build_candidate(o, r, &d);
	if (rc != 0)
		fail_msg("build_candidate failed (%d): %s", rc, d.msg);
}

static void expect_status(const struct build_result *r, enum build_status want)
{
	if (r->status != want)
		fail_msg("status %s, expected %s; errors:\n%s", build_status_code(r->status),
			 build_status_code(want), r->errors);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_status_codes(void **state)
{
	(void)state;
	assert_string_equal(build_status_code(BUILD_OK), "ok");
	assert_string_equal(build_status_code(BUILD_COMPILE_ERROR), "build.error");
	assert_string_equal(build_status_code(BUILD_RULE_VIOLATION), "build.forbidden_source");
	assert_string_equal(build_status_code(BUILD_SYMBOL_VIOLATION), "build.forbidden_symbol");
	assert_string_equal(build_status_code(BUILD_NO_SOURCES), "build.no_sources");
	assert_string_equal(build_status_code(BUILD_TIMEOUT), "build.timeout");
}

static void test_bad_arguments(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct build_result r;
	struct ca_diag d;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("axpy", "args", kdir, sizeof kdir);
	assert_int_equal(build_candidate(NULL, &r, &d), CA_ERR_INVALID);
	o = opts_for(NULL);
	assert_int_equal(build_candidate(&o, &r, &d), CA_ERR_INVALID);
	o = opts_for(kdir);
	o.arch = "sm_90; rm -rf /";
	assert_int_equal(build_candidate(&o, &r, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "architecture"));
	o = opts_for(kdir);
	o.nvcc = "/nonexistent/bin/nvcc";
	assert_int_equal(build_candidate(&o, &r, &d), CA_ERR_NOTFOUND);
	assert_non_null(strstr(d.msg, "nvcc"));
}

static void test_no_sources(void **state)
{
	(void)state;
	char kdir[PATH_MAX + 32];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("empty", "empty", kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_NO_SOURCES);
	assert_non_null(strstr(r.errors, "kernels/ holds no .cu, .cpp or .c files"));
	assert_string_equal(r.library, "");
	assert_int_equal(r.objects_compiled, 0);

	snprintf(kdir, sizeof kdir, "%s/missing/kernels", tmpdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_NO_SOURCES);
	assert_non_null(strstr(r.errors, "does not exist"));
}

static void test_torch_include_rejected(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("torch_include", "torch", kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_RULE_VIOLATION);
	assert_non_null(strstr(r.errors, "kernels/ext.cu:2: #include <torch/extension.h>: PyTorch "
					 "headers are not allowed"));
	assert_int_equal(r.objects_compiled, 0);
	assert_string_equal(r.library, "");
	assert_string_equal(build_status_code(r.status), "build.forbidden_source");
}

static void test_limits(void **state)
{
	(void)state;
	char kdir[PATH_MAX + 32], path[PATH_MAX + 64];
	struct build_result r;
	struct build_opts o;
	struct ca_diag d;

	if (!have_nvcc)
		skip();
	snprintf(kdir, sizeof kdir, "%s/many/kernels", tmpdir);
	assert_int_equal(ca_mkdirs(kdir, 0755, &d), 0);
	for (int i = 0; i <= CA_BUILD_MAX_SOURCES; i++) {
		snprintf(path, sizeof path, "%s/u%02d.c", kdir, i);
		assert_int_equal(ca_write_file_atomic(path, "int x;\n", 7, &d), 0);
	}
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_RULE_VIOLATION);
	assert_non_null(strstr(r.errors, "65 source files, over the limit of 64"));
	assert_int_equal(r.objects_compiled, 0);

	snprintf(kdir, sizeof kdir, "%s/huge/kernels", tmpdir);
	assert_int_equal(ca_mkdirs(kdir, 0755, &d), 0);
	snprintf(path, sizeof path, "%s/main.cu", kdir);
	assert_int_equal(ca_write_file_atomic(path, "#include \"table.h\"\n", 20, &d), 0);
	size_t big = CA_BUILD_MAX_SOURCE_BYTES + 1;
	char *blob = malloc(big);
	assert_non_null(blob);
	memset(blob, ' ', big);
	snprintf(path, sizeof path, "%s/table.h", kdir);
	assert_int_equal(ca_write_file_atomic(path, blob, big, &d), 0);
	free(blob);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_RULE_VIOLATION);
	assert_non_null(strstr(r.errors, "kernels/table.h: larger than the limit"));
}

static bool exports(const char *lib, const char *sym)
{
	struct elf_dynamic e;
	struct ca_diag d;
	bool found;
	assert_int_equal(elf_dynamic_read_file(lib, &e, &d), 0);
	found = elf_dynamic_find_defined(&e, sym) != NULL;
	elf_dynamic_free(&e);
	return found;
}

/* The .nv_fatbin section of lib (objcopy), into *out (heap) and *len. */
static void read_fatbin(const char *lib, char **out, size_t *len)
{
	char path[PATH_MAX + 16], cmd[3 * PATH_MAX];
	struct ca_diag d = {{0}};
	snprintf(path, sizeof path, "%s.fatbin", lib);
	snprintf(cmd, sizeof cmd, "objcopy -O binary --only-section=.nv_fatbin '%s' '%s'", lib,
		 path);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(ca_read_file(path, 64u << 20, out, len, &d), 0);
	unlink(path);
}

/* The library linked by nvcc's host link line alone (build/host_link.h) against `nvcc
 * -shared`: the candidate's device code in it is byte for byte what nvcc's link put in its
 * library (which holds the device link's image before it), it loads and exports ca_forward,
 * the two are cached under different keys, and the learned line is kept in the cache. */
static void test_host_link(void **state)
{
	char kdir[PATH_MAX], nvcc_lib[PATH_MAX], nvcc_hash[33], dir[PATH_MAX + 4200];
	char *a = NULL, *b = NULL, **names = NULL;
	size_t alen = 0, blen = 0, count = 0;
	struct build_result r;
	struct build_opts o;
	struct ca_diag d = {{0}};
	(void)state;

	if (!have_nvcc)
		skip();
	copy_candidate("axpy", "axpy_link", kdir, sizeof kdir);
	append_to(kdir, "axpy.cu", "// linked both ways\n"); /* a library no other test made */
	o = opts_for(kdir);
	setenv("CUDA_AGENT_NVCC_SPLIT", "0", 1); /* plain nvcc: compile and link */
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_false(r.host_linked);
	snprintf(nvcc_lib, sizeof nvcc_lib, "%s", r.library);
	snprintf(nvcc_hash, sizeof nvcc_hash, "%s", r.hash);
	setenv("CUDA_AGENT_NVCC_SPLIT", "1", 1); /* on whatever the nvcc release */
	run_build(&o, &r);
	unsetenv("CUDA_AGENT_NVCC_SPLIT");
	expect_status(&r, BUILD_OK);
	assert_false(r.cached);
	assert_int_equal(r.objects_cached, 2);
	assert_true(r.host_linked);
	assert_string_not_equal(r.hash, nvcc_hash);
	assert_string_not_equal(r.library, nvcc_lib);

	read_fatbin(nvcc_lib, &a, &alen);
	read_fatbin(r.library, &b, &blen);
	if (!(blen > 0 && alen > blen && memcmp(a + alen - blen, b, blen) == 0))
		fail_msg("the host-linked library's device code (%zu bytes) is not the end of "
			 "nvcc's (%zu bytes)", blen, alen);
	free(a);
	free(b);

	void *h = dlopen(r.library, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fail_msg("dlopen: %s", dlerror());
	assert_non_null(dlsym(h, "ca_forward"));
	dlclose(h);

	snprintf(dir, sizeof dir, "%s/host-link", cache);
	assert_int_equal(ca_list_files(dir, NULL, 64, &names, &count, &d), 0);
	ca_free_names(names, count);
	assert_true(count >= 1); /* one per link flags (the GEMM test's cuBLAS has its own) */
}

static void test_build_cache_and_rebuilds(void **state)
{
	(void)state;
	char kdir[PATH_MAX], first_lib[PATH_MAX], prefix[PATH_MAX + 32];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("axpy", "axpy", kdir, sizeof kdir);
	o = opts_for(kdir);
	o.arch = NULL; /* from $CUDA_AGENT_ARCH, nvidia-smi, or sm_90 */
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_false(r.cached);
	assert_int_equal(r.objects_compiled, 2);
	assert_int_equal(r.objects_cached, 0);
	assert_int_equal(strncmp(r.arch, "sm_", 3), 0);
	assert_int_equal(strlen(r.hash), 32);
	assert_string_equal(r.errors, "");
	snprintf(prefix, sizeof prefix, "%s/lib/", cache);
	assert_int_equal(strncmp(r.library, prefix, strlen(prefix)), 0);
	assert_true(ca_is_file(r.library));
	assert_true(exports(r.library, "ca_forward"));
	assert_false(exports(r.library, "ca_setup"));
	/* ptxas info for the kernel (mangled name) */
	assert_non_null(strstr(r.ptxas_info, "axpy_kernel"));
	assert_non_null(strstr(r.ptxas_info, " registers, "));
	assert_non_null(strstr(r.ptxas_info, " bytes smem, "));
	assert_non_null(strstr(r.ptxas_info, " bytes spill"));
	snprintf(first_lib, sizeof first_lib, "%s", r.library);

	/* the library loads without a GPU (libcudart found through the rpath) */
	void *h = dlopen(r.library, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fail_msg("dlopen: %s", dlerror());
	assert_non_null(dlsym(h, "ca_forward"));
	dlclose(h);

	/* a second build is a full cache hit: no nvcc, well under 50 ms */
	struct build_result r2;
	double t0 = ca_now();
	run_build(&o, &r2);
	double took = ca_now() - t0;
	expect_status(&r2, BUILD_OK);
	assert_true(r2.cached);
	assert_int_equal(r2.objects_compiled, 0);
	assert_int_equal(r2.objects_cached, 2);
	assert_string_equal(r2.library, first_lib);
	assert_string_equal(r2.hash, r.hash);
	assert_string_equal(r2.ptxas_info, r.ptxas_info);
	if (took >= 0.05)
		fail_msg("cache hit took %.1f ms", took * 1e3);

	/* changing one unit recompiles that unit only */
	append_to(kdir, "host.cpp", "// changed\n");
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_false(r.cached);
	assert_int_equal(r.objects_compiled, 1);
	assert_int_equal(r.objects_cached, 1);
	assert_string_not_equal(r.library, first_lib);
	assert_string_not_equal(r.hash, r2.hash);
	assert_non_null(strstr(r.ptxas_info, "axpy_kernel")); /* from the cached object */

	/* changing a header recompiles every unit */
	append_to(kdir, "axpy.h", "// changed too\n");
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_int_equal(r.objects_compiled, 2);
	assert_int_equal(r.objects_cached, 0);

	/* a file that is neither a unit nor a header still counts (it may be #included) */
	char before[33];
	snprintf(before, sizeof before, "%s", r.hash);
	char notes[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(notes, sizeof notes, kdir, "table.inc"), 0);
	assert_int_equal(ca_write_file_atomic(notes, "1, 2, 3\n", 8, &d), 0);
	struct build_opts o2 = o;
	o2.timeout_s = 0.001; /* if anything recompiled, it would time out */
	run_build(&o2, &r);
	assert_string_not_equal(r.hash, before);
	expect_status(&r, BUILD_TIMEOUT);
	assert_non_null(strstr(r.errors, "took longer than"));
	assert_non_null(strstr(r.errors, "kernels/"));
	assert_string_equal(r.library, "");
}

static void test_compile_error(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("bad_syntax", "bad", kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_COMPILE_ERROR);
	assert_string_equal(build_status_code(r.status), "build.error");
	if (!strstr(r.errors, "kernels/bad.cu:7: error"))
		fail_msg("errors lack kernels/bad.cu:7: error:\n%s", r.errors);
	assert_null(strstr(r.errors, tmpdir)); /* paths are relative to the candidate */
	assert_null(strstr(r.errors, "errors detected"));
	assert_string_equal(r.library, "");
	assert_int_equal(r.objects_compiled, 1);

	/* a failed compile is not cached: the same error again */
	struct build_result r2;
	run_build(&o, &r2);
	expect_status(&r2, BUILD_COMPILE_ERROR);
	assert_string_equal(r2.errors, r.errors);
}

static void test_forbidden_symbols(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("forbidden", "forbidden", kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_SYMBOL_VIOLATION);
	assert_string_equal(build_status_code(r.status), "build.forbidden_symbol");
	assert_non_null(strstr(r.errors, "cuLaunchKernel: the CUDA driver API is not allowed (use "
					 "the runtime API)"));
	assert_non_null(strstr(r.errors, "dlopen: dynamic loading is not allowed"));
	assert_non_null(strstr(r.errors, "pthread_create: threads are not allowed"));
	assert_string_equal(r.library, "");

	/* from the cache the verdict is the same */
	run_build(&o, &r);
	assert_true(r.cached);
	expect_status(&r, BUILD_SYMBOL_VIOLATION);
	assert_non_null(strstr(r.errors, "cuLaunchKernel"));
}

static void test_missing_forward(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	copy_candidate("no_forward", "nofwd", kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_COMPILE_ERROR);
	assert_non_null(strstr(r.errors, "does not export ca_forward"));
	assert_string_equal(r.library, "");
}

struct concurrent {
	struct build_opts opts;
	struct build_result result;
	int rc;
	struct ca_diag d;
};

static void *build_thread(void *arg)
{
	struct concurrent *c = arg;
	c->rc = build_candidate(&c->opts, &c->result, &c->d);
	return NULL;
}

/* Two builds of the cuBLAS candidate at once, into the same cache. */
static void test_gemm_concurrent(void **state)
{
	(void)state;
	char kdir[PATH_MAX];
	struct concurrent c[2];
	pthread_t t[2];

	if (!have_nvcc)
		skip();
	copy_candidate("gemm", "gemm", kdir, sizeof kdir);
	for (int i = 0; i < 2; i++) {
		memset(&c[i], 0, sizeof c[i]);
		c[i].opts = opts_for(kdir);
		assert_int_equal(pthread_create(&t[i], NULL, build_thread, &c[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		if (c[i].rc != 0)
			fail_msg("build %d failed: %s", i, c[i].d.msg);
		expect_status(&c[i].result, BUILD_OK);
	}
	assert_string_equal(c[0].result.library, c[1].result.library);
	assert_true(exports(c[0].result.library, "ca_forward"));
	assert_true(exports(c[0].result.library, "ca_setup"));
	assert_true(exports(c[0].result.library, "ca_teardown"));

	struct elf_dynamic e;
	struct ca_diag d;
	bool cublas = false;
	assert_int_equal(elf_dynamic_read_file(c[0].result.library, &e, &d), 0);
	for (size_t i = 0; i < e.num_needed; i++)
		cublas |= strncmp(e.needed[i], "libcublas.so.", 13) == 0;
	assert_true(cublas);
	assert_non_null(elf_dynamic_find_undefined(&e, "cublasSgemm_v2"));
	elf_dynamic_free(&e);

	/* no temporary files left behind */
	char objdir[PATH_MAX + 32];
	char **names;
	size_t count;
	snprintf(objdir, sizeof objdir, "%s/lib", cache);
	assert_int_equal(ca_list_files(objdir, NULL, 1000, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++)
		assert_null(strstr(names[i], ".tmp."));
	ca_free_names(names, count);
}

/* ---- host assembly (build/hostasm.h) on real nvcc output ------------------------------------ */

/* Writes <tmpdir>/<copy>/kernels/<name>; returns the kernels path in kdir. */
static void write_unit(const char *copy, const char *name, const char *text, char *kdir,
		       size_t kdir_size)
{
	char path[PATH_MAX];
	struct ca_diag d;

	assert_true(snprintf(kdir, kdir_size, "%s/%s/kernels", tmpdir, copy) < (int)kdir_size);
	assert_int_equal(ca_mkdirs(kdir, 0755, &d), 0);
	assert_int_equal(ca_path_join(path, sizeof path, kdir, name), 0);
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), &d), 0);
}

#define FORWARD_ARGS                                                                            \
	"const DLTensor *args, int num_args, const DLTensor *params, int num_params, "          \
	"DLTensor *outputs, int num_outputs, cudaStream_t stream"

/* Host inline asm in every form a candidate can write it, each line of k.cu numbered. */
static const char asm_unit[] =
	"#include <cuda_agent/abi.h>\n"                                          /* 1 */
	"#include \"evil.cuh\"\n"                                                /* 2 */
	"\n"                                                                     /* 3 */
	"__asm__(\".globl topsym\\n topsym: ret\");\n"                           /* 4 */
	"\n"                                                                     /* 5 */
	"static long raw_syscall(long n, long a)\n"                              /* 6 */
	"{\n"                                                                    /* 7 */
	"\tlong r;\n"                                                            /* 8 */
	"\tasm volatile(\"syscall\" : \"=a\"(r) : \"a\"(n), \"D\"(a) : \"rcx\", \"r11\", "
	"\"memory\");\n"                                                         /* 9 */
	"\treturn r;\n"                                                          /* 10 */
	"}\n"                                                                    /* 11 */
	"\n"                                                                     /* 12 */
	"static void pad(void)\n"                                                /* 13 */
	"{\n"                                                                    /* 14 */
	"\t__asm__(\"nop\");\n"                                                  /* 15 */
	"}\n"                                                                    /* 16 */
	"\n"                                                                     /* 17 */
	"static void bytes(void)\n"                                              /* 18 */
	"{\n"                                                                    /* 19 */
	"\tasm volatile(\".byte 0x0f, 0x05\" ::: \"rax\", \"rcx\", \"r11\", \"memory\");\n" /* 20 */
	"}\n"                                                                    /* 21 */
	"\n"                                                                     /* 22 */
	"__global__ void zero(float *y) { y[threadIdx.x] = 0.0f; }\n"            /* 23 */
	"\n"                                                                     /* 24 */
	"extern \"C\" int ca_forward(" FORWARD_ARGS ")\n"                        /* 25 */
	"{\n"                                                                    /* 26 */
	"\t(void)args; (void)params; (void)num_params; (void)num_outputs;\n"    /* 27 */
	"\tpad();\n"                                                             /* 28 */
	"\tif (num_args == 41) {\n"                                              /* 29 */
	"\t\tEVIL_PAUSE();\n"                                                    /* 30 */
	"\t}\n"                                                                  /* 31 */
	"\tif (num_args == 42) {\n"                                              /* 32 */
	"\t\tbytes();\n"                                                         /* 33 */
	"\t\treturn (int)raw_syscall(39, 0);\n"                                  /* 34 */
	"\t}\n"                                                                  /* 35 */
	"\tzero<<<1, 32, 0, stream>>>((float *)outputs[0].data);\n"             /* 36 */
	"\treturn 0;\n"                                                          /* 37 */
	"}\n";

static void test_host_asm_refused(void **state)
{
	(void)state;
	char kdir[PATH_MAX], first[CA_BUILD_LOG_MAX];
	struct build_result r;
	struct build_opts o;

	if (!have_nvcc)
		skip();
	write_unit("hostasm", "k.cu", asm_unit, kdir, sizeof kdir);
	/* asm hidden behind a macro of a candidate header */
	write_unit("hostasm", "evil.cuh",
		   "#pragma once\n#define EVIL_PAUSE() __asm__ volatile(\"pause\")\n", kdir,
		   sizeof kdir);
	/* the same in a C unit, which nvcc hands to gcc directly */
	write_unit("hostasm", "api.c",
		   "long c_getpid(void);\n"
		   "long c_getpid(void) { long r; __asm__ volatile(\"syscall\" : \"=a\"(r) : "
		   "\"a\"(39L) : \"rcx\", \"r11\", \"memory\"); return r; }\n",
		   kdir, sizeof kdir);
	/* no inline asm at all: a syscall pasted through an asm label */
	write_unit("hostasm", "inj.cpp",
		   "extern \"C\" int hidden_impl(int x) { return x + 1; }\n"
		   "extern \"C\" int hidden(int) __asm__(\"hidden_impl\\n\\tsyscall\\n#\");\n"
		   "extern \"C\" int use_hidden(int x) { return hidden(x); }\n",
		   kdir, sizeof kdir);
	o = opts_for(kdir);
	o.jobs = 2;
	run_build(&o, &r);
	expect_status(&r, BUILD_RULE_VIOLATION);
	assert_string_equal(build_status_code(r.status), "build.forbidden_source");
	static const char *const want[] = {
		"kernels/k.cu:4: file-scope asm is not allowed in host code",
		"kernels/k.cu:9: inline assembly in host code is not allowed (system calls and "
		"self-modifying code are refused; inline PTX in __device__/__global__ functions is "
		"fine)\n",
		"kernels/k.cu:15: inline assembly in host code is not allowed",
		"kernels/k.cu:20: inline assembly in host code is not allowed",
		"kernels/api.c:2: inline assembly in host code is not allowed",
		"kernels/inj.cpp (host assembly line ",
		"): the instruction 'syscall' enters the kernel",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (!strstr(r.errors, want[i]))
			fail_msg("errors lack '%s':\n%s", want[i], r.errors);
	/* the macro's asm is named where it expands, or in the header that defines it */
	if (!strstr(r.errors, "kernels/k.cu:30: inline assembly") &&
	    !strstr(r.errors, "kernels/evil.cuh:2: inline assembly"))
		fail_msg("errors lack the macro's asm:\n%s", r.errors);
	assert_null(strstr(r.errors, tmpdir)); /* paths are relative to the candidate */
	assert_string_equal(r.library, "");
	assert_int_equal(r.objects_compiled, 3);
	snprintf(first, sizeof first, "%s", r.errors);

	/* the verdict is cached with the unit: the same answer, no nvcc (it would time out) */
	struct build_opts o2 = o;
	o2.timeout_s = 0.001;
	run_build(&o2, &r);
	expect_status(&r, BUILD_RULE_VIOLATION);
	assert_string_equal(r.errors, first);
	assert_int_equal(r.objects_compiled, 0);
}

static void test_device_ptx_builds(void **state)
{
	(void)state;
	char kdir[PATH_MAX], verdict[PATH_MAX + 64];
	struct build_result r;
	struct build_opts o;
	struct ca_diag d;

	if (!have_nvcc)
		skip();
	write_unit("ptx", "k.cu",
		   "#include <cuda_agent/abi.h>\n"
		   "__device__ __forceinline__ unsigned lane_id(void)\n"
		   "{\n"
		   "\tunsigned r;\n"
		   "\tasm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(r));\n"
		   "\treturn r;\n"
		   "}\n"
		   "__host__ __device__ inline float add_one(float x)\n"
		   "{\n"
		   "#ifdef __CUDA_ARCH__\n"
		   "\tfloat r;\n"
		   "\tasm(\"add.f32 %0, %1, 0f3F800000;\" : \"=f\"(r) : \"f\"(x));\n"
		   "\treturn r;\n"
		   "#else\n"
		   "\treturn x + 1.0f;\n"
		   "#endif\n"
		   "}\n"
		   "__global__ void fill(float *y, int n)\n"
		   "{\n"
		   "\tunsigned lane;\n"
		   "\tasm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane));\n"
		   "\tint i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
		   "\tif (i < n)\n"
		   "\t\ty[i] = add_one((float)lane_id()) + 0.0f * (float)lane;\n"
		   "}\n"
		   "extern \"C\" int ca_forward(" FORWARD_ARGS ")\n"
		   "{\n"
		   "\t(void)args; (void)num_args; (void)params; (void)num_params; "
		   "(void)num_outputs;\n"
		   "\tif (add_one(1.0f) != 2.0f) /* the host side of the function */\n"
		   "\t\treturn 1;\n"
		   "\tfill<<<1, 32, 0, stream>>>((float *)outputs[0].data, 32);\n"
		   "\treturn cudaGetLastError() != cudaSuccess;\n"
		   "}\n",
		   kdir, sizeof kdir);
	o = opts_for(kdir);
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_int_equal(r.objects_compiled, 1);
	assert_true(exports(r.library, "ca_forward"));

	/* cached: the verdict travels with the object */
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_true(r.cached);

	/* an object whose verdict is gone is compiled and checked again, never taken unchecked */
	char **names;
	size_t count, removed = 0;
	char objdir[PATH_MAX + 32];
	snprintf(objdir, sizeof objdir, "%s/obj", cache);
	assert_int_equal(ca_list_files(objdir, NULL, 1000, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++) {
		size_t n = strlen(names[i]);
		if (n > 8 && strcmp(names[i] + n - 8, ".hostasm") == 0) {
			snprintf(verdict, sizeof verdict, "%s/%s", objdir, names[i]);
			assert_int_equal(unlink(verdict), 0);
			removed++;
		}
	}
	ca_free_names(names, count);
	assert_true(removed > 0);
	run_build(&o, &r);
	expect_status(&r, BUILD_OK);
	assert_false(r.cached);
	assert_int_equal(r.objects_compiled, 1);

	/* no host assembly (<key>.o.tmp.*.s) left in the cache */
	assert_int_equal(ca_list_files(objdir, NULL, 1000, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++) {
		size_t n = strlen(names[i]);
		assert_false(n > 2 && strcmp(names[i] + n - 2, ".s") == 0);
		assert_null(strstr(names[i], ".tmp."));
	}
	ca_free_names(names, count);
}

/* nvcc's --threads: 2 by default, $CUDA_AGENT_NVCC_THREADS 1-8, 1 for nvcc before 11.2 or a
 * version text without a release, 2 (with a warning) for a bad value. */
static void test_nvcc_threads(void **state)
{
	const char *v13 = "Cuda compilation tools, release 13.0, V13.0.88";
	(void)state;
	unsetenv("CUDA_AGENT_NVCC_THREADS");
	assert_int_equal(build_nvcc_threads(v13), 2);
	assert_int_equal(build_nvcc_threads("Cuda compilation tools, release 11.2, V11.2.67"), 2);
	assert_int_equal(build_nvcc_threads("Cuda compilation tools, release 11.1, V11.1.105"), 1);
	assert_int_equal(build_nvcc_threads("Cuda compilation tools, release 10.2, V10.2.89"), 1);
	assert_int_equal(build_nvcc_threads("no version here"), 1);
	assert_int_equal(build_nvcc_threads(NULL), 1);
	setenv("CUDA_AGENT_NVCC_THREADS", "1", 1);
	assert_int_equal(build_nvcc_threads(v13), 1);
	setenv("CUDA_AGENT_NVCC_THREADS", "4", 1);
	assert_int_equal(build_nvcc_threads(v13), 4);
	assert_int_equal(build_nvcc_threads("Cuda compilation tools, release 11.0, V11.0.2"), 1);
	const char *bad[] = {"0", "9", "2x", "-1", "", NULL};
	for (int i = 0; bad[i]; i++) {
		setenv("CUDA_AGENT_NVCC_THREADS", bad[i], 1);
		assert_int_equal(build_nvcc_threads(v13), 2);
	}
	unsetenv("CUDA_AGENT_NVCC_THREADS");
}

/* The module id nvcc 13.0 wrote for these paths and flags (`nvcc -keep`, 2026-12-06), and when
 * the split is used. */
static void test_nvcc_split_module_id(void **state)
{
	char id[128];
	(void)state;
	assert_int_equal(nvcc_split_module_id("/tmp/mid/k.cu", "e6581e9d", id, sizeof id), 0);
	assert_string_equal(id, "_b9089ee6_4_k_cu_e6581e9d");
	assert_int_equal(nvcc_split_module_id("/tmp/mid/kernel.cu", "e6581e9d", id, sizeof id), 0);
	assert_string_equal(id, "_a73cca9e_9_kernel_cu_e6581e9d");
	assert_int_equal(nvcc_split_module_id("/tmp/mid/sub/k.cu", "e6581e9d", id, sizeof id), 0);
	assert_string_equal(id, "_d881e001_4_k_cu_e6581e9d");
	assert_int_equal(nvcc_split_module_id("/tmp/mid/g.cu", "35004a26", id, sizeof id), 0);
	assert_string_equal(id, "_f3de215e_4_g_cu_35004a26");
	assert_int_equal(nvcc_split_module_id("/tmp/mid/k.cu", "e6581e9d", id, 12), CA_ERR_LIMIT);

	const char *v13 = "Cuda compilation tools, release 13.0, V13.0.88";
	const char *v12 = "Cuda compilation tools, release 12.4, V12.4.131";
	unsetenv("CUDA_AGENT_NVCC_SPLIT");
	assert_true(nvcc_split_enabled(v13));
	assert_false(nvcc_split_enabled(v12)); /* not tested with: plain nvcc */
	assert_false(nvcc_split_enabled(NULL));
	setenv("CUDA_AGENT_NVCC_SPLIT", "0", 1);
	assert_false(nvcc_split_enabled(v13));
	setenv("CUDA_AGENT_NVCC_SPLIT", "1", 1);
	assert_true(nvcc_split_enabled(v12));
	unsetenv("CUDA_AGENT_NVCC_SPLIT");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nvcc_threads),
		cmocka_unit_test(test_nvcc_split_module_id),
		cmocka_unit_test(test_status_codes),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_no_sources),
		cmocka_unit_test(test_torch_include_rejected),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_build_cache_and_rebuilds),
		cmocka_unit_test(test_compile_error),
		cmocka_unit_test(test_forbidden_symbols),
		cmocka_unit_test(test_missing_forward),
		cmocka_unit_test(test_gemm_concurrent),
		cmocka_unit_test(test_host_asm_refused),
		cmocka_unit_test(test_device_ptx_builds),
		cmocka_unit_test(test_host_link),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
