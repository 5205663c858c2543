/* Unit tests for src/build/rules: allow/deny decisions on representative symbols (C and mangled
 * C++), needed libraries, exports, reports, source scanning, the tree listing, and the library
 * check on real libraries built with `cc -shared` at test time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build/rules.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/proc.h"

static char tmpdir[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-rules-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

static void write_file(const char *dir, const char *name, const char *content)
{
	char path[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	assert_int_equal(ca_write_file_atomic(path, content, strlen(content), &d), 0);
}

/* ---- symbols ------------------------------------------------------------------------------ */

static void test_allowed_symbols(void **state)
{
	(void)state;
	static const char *const allowed[] = {
		/* CUDA runtime, nvcc plumbing, cuBLAS, cuBLASLt, cuDNN */
		"cudaMalloc", "cudaFree", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaGetLastError",
		"cudaStreamSynchronize", "cudaFuncSetAttribute", "cudaMallocAsync",
		"__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction",
		"__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "__cudaLaunchKernel",
		"__cudaGetKernel", "__cudaUnregisterFatBinary", "cublasCreate_v2", "cublasSgemm_v2",
		"cublasGemmEx", "cublasLtMatmul", "cublasLtCreate", "cudnnCreate",
		"cudnnConvolutionForward", "cublasSgemmStridedBatched", "cublasLtMatmulDescCreate",
		"cudnnSetTensor4dDescriptor", "cudnnFindConvolutionForwardAlgorithmEx",
		"cudnnConvolutionBiasActivationForward", "cudnnSetConvolutionMathType",
		/* C runtime */
		"memcpy", "memset", "memmove", "memcmp", "strlen", "strcmp", "strncpy", "strtol",
		"strtoull", "strtof", "atoi", "malloc", "calloc", "realloc", "free", "aligned_alloc",
		"posix_memalign", "printf", "fprintf", "puts", "fputs", "fwrite", "putchar", "stdout",
		"stderr", "snprintf", "sprintf", "vsnprintf", "__snprintf_chk", "__fprintf_chk",
		"abort", "exit", "atexit", "__assert_fail", "__stack_chk_fail", "__errno_location", "qsort",
		"__libc_single_threaded", "__tls_get_addr", "pthread_mutex_lock",
		"pthread_mutex_unlock", "pthread_once", "__isoc23_strtol",
		/* libm, with the float and long double forms */
		"sin", "sinf", "sinl", "cos", "expf", "exp2f", "log1p", "log1pl", "sqrt", "sqrtf",
		"pow", "powf", "tanhf", "erff", "fmaf", "ceil", "floorf", "roundf", "fabs", "atan2f",
		"__fpclassify",
		/* libgcc and the C++ runtime */
		"_Unwind_Resume", "__udivti3", "__popcountdi2", "__extendhfsf2", "__truncsfhf2",
		"__cxa_atexit", "__cxa_finalize", "__cxa_guard_acquire", "__cxa_guard_release",
		"__cxa_allocate_exception", "__cxa_throw", "__cxa_begin_catch", "__cxa_end_catch",
		"__cxa_pure_virtual", "__gxx_personality_v0", "__gmon_start__",
		"_ITM_registerTMCloneTable", "_ITM_deregisterTMCloneTable", "__dso_handle",
		/* operator new/delete */
		"_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZnwmSt11align_val_t",
		"_ZdlPvmSt11align_val_t", "_ZnwmRKSt9nothrow_t",
		/* std::__throw_*, exceptions, strings, containers, iostream */
		"_ZSt20__throw_length_errorPKc", "_ZSt17__throw_bad_allocv",
		"_ZSt24__throw_out_of_range_fmtPKcz", "_ZSt19__throw_logic_errorPKc",
		"_ZNSt13runtime_errorC1EPKc", "_ZNSt13runtime_errorD1Ev", "_ZTISt13runtime_error",
		"_ZTVN10__cxxabiv117__class_type_infoE", "_ZTVN10__cxxabiv120__si_class_type_infoE",
		"_ZNKSt9exception4whatEv",
		"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm",
		"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE10_M_replaceEmmPKcm",
		"_ZSt29_Rb_tree_insert_and_rebalancebPSt18_Rb_tree_node_baseS0_RS_",
		"_ZNKSt8__detail20_Prime_rehash_policy14_M_need_rehashEmmm", "_ZSt11_Hash_bytesPKvmm",
		"_ZSt4cout", "_ZSt4cerr", "_ZNSolsEi", "_ZNSo5flushEv", "_ZNSo3putEc",
		"_ZNSo9_M_insertIdEERSoT_",
		"_ZSt16__ostream_insertIcSt11char_traitsIcEERSt13basic_ostreamIT_T0_ES6_PKS3_l",
		"_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev", "_ZSt21ios_base_library_initv",
		"_ZSt4endlIcSt11char_traitsIcEERSt13basic_ostreamIT_T0_ES6_",
		"_ZNKSt5ctypeIcE13_M_widen_initEv", "_ZNSt6localeC1Ev",
		"_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEED1Ev",
		"_ZSt15__once_callable", "_ZSt11__once_call", "__once_proxy",
	};
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
		const char *why = NULL;
		if (!rules_symbol_allowed(allowed[i], &why))
			fail_msg("%s should be allowed, got: %s", allowed[i], why);
		assert_non_null(why);
	}
}

struct denied {
	const char *sym;
	const char *reason_part;
};

static void test_denied_symbols(void **state)
{
	(void)state;
	static const struct denied denied[] = {
		{"cuLaunchKernel", "CUDA driver API"},
		{"cuLaunchKernelEx", "CUDA driver API"},
		{"cublasSgemv_v2", "matrix multiplication only"},
		{"cublasSasum_v2", "matrix multiplication only"},
		{"cublasLtMatrixTransform", "matrix multiplication only"},
		{"cudnnSoftmaxForward", "convolution only"},
		{"cudnnPoolingForward", "convolution only"},
		{"cudnnAddTensor", "convolution only"},
		{"cudnnBackendExecute", "convolution only"},
		{"cuGetProcAddress_v2", "CUDA driver API"},
		{"cuModuleLoad", "CUDA driver API"},
		{"cuModuleLoadData", "CUDA driver API"},
		{"cuCtxGetCurrent", "CUDA driver API"},
		{"cuTensorMapEncodeTiled", "CUDA driver API"},
		{"cudaGetDriverEntryPoint", "driver API entry points"},
		{"cudaGetDriverEntryPointByVersion", "driver API entry points"},
		{"cudaGetExportTable", "export tables"},
		{"cudaDeviceReset", "resets the device"},
		{"cudaLaunchHostFunc", "host code"},
		{"cudaStreamAddCallback", "host code"},
		{"cudaIpcOpenMemHandle", "IPC"},
		{"cufftExecC2C", "cuBLAS"},
		{"curandGenerateUniform", "cuBLAS"},
		{"nvrtcCompileProgram", "cuBLAS"},
		{"dlopen", "dynamic loading"},
		{"dlsym", "dynamic loading"},
		{"dlmopen", "dynamic loading"},
		{"dlvsym", "dynamic loading"},
		{"dl_iterate_phdr", "dynamic loading"},
		{"fork", "processes"},
		{"vfork", "processes"},
		{"clone", "processes"},
		{"execve", "processes"},
		{"execvp", "processes"},
		{"execl", "processes"},
		{"system", "processes"},
		{"popen", "processes"},
		{"posix_spawn", "processes"},
		{"posix_spawnp", "processes"},
		{"pthread_create", "threads"},
		{"thrd_create", "threads"},
		{"_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE",
		 "std::thread"},
		{"_ZNSt6thread4joinEv", "std::thread"},
		{"_ZTVNSt6thread6_StateE", "std::thread"},
		{"socket", "network"},
		{"connect", "network"},
		{"bind", "network"},
		{"getaddrinfo", "network"},
		{"open", "file"},
		{"open64", "file"},
		{"openat", "file"},
		{"__open_2", "file"},
		{"fopen", "file"},
		{"fopen64", "file"},
		{"read", "file"},
		{"write", "file"},
		{"mmap", "file"},
		{"mprotect", "file"},
		{"memfd_create", "file"},
		{"ioctl", "file"},
		{"_ZNSt13basic_filebufIcSt11char_traitsIcEE4openEPKcSt13_Ios_Openmode", "file"},
		{"_ZNSt14basic_ifstreamIcSt11char_traitsIcEEC1EPKcSt13_Ios_Openmode", "file"},
		{"fread", "input"},
		{"fgets", "input"},
		{"stdin", "input"},
		{"_ZSt3cin", "input"},
		{"getenv", "environment"},
		{"secure_getenv", "environment"},
		{"setenv", "environment"},
		{"time", "clocks"},
		{"clock", "clocks"},
		{"clock_gettime", "clocks"},
		{"gettimeofday", "clocks"},
		{"_ZNSt6chrono3_V212system_clock3nowEv", "clocks"},
		{"_ZNSt6chrono3_V212steady_clock3nowEv", "clocks"},
		{"signal", "signals"},
		{"sigaction", "signals"},
		{"alarm", "signals"},
		{"raise", "signals"},
		{"kill", "signals"},
		{"usleep", "sleeping"},
		{"ptrace", "system calls"},
		{"syscall", "system calls"},
		{"process_vm_readv", "system calls"},
		{"prctl", "system calls"},
		{"_exit", "ending the process"},
		{"_ZNK2at10TensorBase8data_ptrIfEEPT_v", "PyTorch"},
		{"_ZN2at4_ops5empty4callEN3c108ArrayRefIlEE", "PyTorch"},
		{"_ZN3c1019UndefinedTensorImpl10_singletonE", "PyTorch"},
		{"_ZN5torch8autograd12VariableInfoC1Ev", "PyTorch"},
		{"_ZN8pybind116detail11get_type_infoERKSt9type_info", "PyTorch"},
		{"_ZTIN3c1011ValueErrorE", "PyTorch"},
		{"PyObject_Call", "Python"},
		{"PyLong_FromLong", "Python"},
		{"_Py_NoneStruct", "Python"},
	};
	for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
		const char *why = NULL;
		if (rules_symbol_allowed(denied[i].sym, &why))
			fail_msg("%s should be rejected", denied[i].sym);
		assert_non_null(why);
		if (!strstr(why, denied[i].reason_part))
			fail_msg("%s: reason '%s' lacks '%s'", denied[i].sym, why,
				 denied[i].reason_part);
	}
	/* unknown names are rejected by default, with a hint for forgotten definitions */
	const char *why = NULL;
	assert_false(rules_symbol_allowed("my_helper_without_definition", &why));
	assert_non_null(strstr(why, "allowlist"));
	assert_non_null(strstr(why, "declared but not defined"));
	assert_false(rules_symbol_allowed("_Z10my_missingv", NULL));
	assert_false(rules_symbol_allowed("", &why));
	assert_false(rules_symbol_allowed(NULL, &why));
	/* similar-looking but different names */
	assert_false(rules_symbol_allowed("memcpyx", NULL));
	assert_false(rules_symbol_allowed("sinq", NULL));
	assert_false(rules_symbol_allowed("sinff", NULL));
	assert_true(rules_symbol_allowed("cudaMemset", NULL));
	assert_false(rules_symbol_allowed("cuMemsetD8_v2", NULL));
}

static void test_libraries(void **state)
{
	(void)state;
	static const char *const ok[] = {
		"libcudart.so.13", "libcudart.so.12", "libcublas.so.13", "libcublasLt.so.13",
		"libcudnn.so.9", "libcudnn_ops.so.9", "libstdc++.so.6", "libm.so.6",
		"libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
	};
	static const char *const bad[] = {
		"libcuda.so.1", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libtorch.so",
		"libc10.so", "libpython3.11.so.1.0", "libnvrtc.so.13", "libcufft.so.12",
		"libnccl.so.2", "/tmp/evil.so", "libc.so.6.evil/../x",
	};
	const char *why;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (!rules_library_allowed(ok[i], &why))
			fail_msg("%s should be allowed", ok[i]);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (rules_library_allowed(bad[i], &why))
			fail_msg("%s should be rejected", bad[i]);
		assert_non_null(strstr(why, "may not be linked"));
	}
	assert_false(rules_library_allowed(NULL, &why));
}

static void test_exports(void **state)
{
	(void)state;
	const char *why;
	assert_true(rules_export_allowed("ca_forward", &why));
	assert_true(rules_export_allowed("ca_setup", &why));
	assert_true(rules_export_allowed("my_kernel_launcher", &why));
	/* weak template instantiations of the C++ library are exported by every C++ candidate */
	assert_true(rules_export_allowed(
		"_ZNSt6vectorIfSaIfEE17_M_realloc_insertIJfEEEvN9__gnu_cxx17__normal_iteratorIPfS1_"
		"EEDpOT_",
		&why));
	assert_true(rules_export_allowed("_ZTVSt23_Sp_counted_ptr_inplaceIiSaIvELN9__gnu_cxx12_Lock"
					 "_policyE2EE",
					 &why));
	static const char *const bad[] = {"cudaMalloc", "cudaEventElapsedTime", "cuLaunchKernel",
					  "cublasSgemm_v2", "cudnnCreate", "malloc", "memcpy",
					  "clock_gettime", "dlsym", "getenv", "pthread_create"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (rules_export_allowed(bad[i], &why))
			fail_msg("exporting %s should be rejected", bad[i]);
		assert_non_null(strstr(why, "must not define"));
	}
}

/* ---- reports and the library check -------------------------------------------------------- */

static void test_report_overflow(void **state)
{
	(void)state;
	char buf[200];
	struct rules_report r;

	rules_report_init(&r, buf, sizeof buf);
	assert_string_equal(buf, "");
	for (int i = 0; i < 50; i++)
		rules_report_add(&r, "violation number %d with some words", i);
	rules_report_finish(&r);
	assert_int_equal(r.count, 50);
	assert_true(r.dropped > 0);
	assert_true(strlen(buf) < sizeof buf);
	assert_non_null(strstr(buf, "violation number 0 with some words\n"));
	char tail[64];
	snprintf(tail, sizeof tail, "... and %d more\n", r.dropped);
	assert_non_null(strstr(buf, tail));
	/* whole lines only: 4 fit next to the room kept for the tail */
	assert_int_equal(r.count - r.dropped, 4);
	assert_non_null(strstr(buf, "violation number 3 with some words\n... and 46 more\n"));
}

static void test_check_elf_synthetic(void **state)
{
	(void)state;
	struct elf_symbol undef[] = {
		{.name = "cudaMalloc"}, {.name = "cuLaunchKernel"}, {.name = "puts"},
		{.name = "__gmon_start__", .weak = true}, {.name = "dlopen", .weak = true},
	};
	struct elf_symbol def[] = {{.name = "ca_forward"}, {.name = "cudaFree"}};
	const char *needed[] = {"libcudart.so.13", "libcuda.so.1", "libc.so.6"};
	struct elf_dynamic e = {.undefined = undef, .num_undefined = 5, .defined = def,
				.num_defined = 2, .needed = needed, .num_needed = 3};
	char buf[4096];
	struct rules_report r;

	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(rules_check_elf(&e, &r), 4);
	rules_report_finish(&r);
	assert_non_null(strstr(buf, "libcuda.so.1: this library may not be linked"));
	assert_non_null(strstr(buf, "cuLaunchKernel: the CUDA driver API is not allowed (use the "
				    "runtime API)\n"));
	assert_non_null(strstr(buf, "dlopen: dynamic loading is not allowed\n"));
	assert_non_null(strstr(buf, "exports cudaFree: "));
	assert_null(strstr(buf, "cudaMalloc"));
	assert_null(strstr(buf, "puts"));
	assert_null(strstr(buf, "ca_forward"));
}

static void cc_shared(const char *name, const char *src)
{
	char cpath[PATH_MAX], out[PATH_MAX];
	struct ca_diag d;
	struct ca_run_result rr;

	assert_int_equal(ca_path_join(cpath, sizeof cpath, tmpdir, "src.c"), 0);
	assert_int_equal(ca_write_file_atomic(cpath, src, strlen(src), &d), 0);
	assert_int_equal(ca_path_join(out, sizeof out, tmpdir, name), 0);
	const char *argv[] = {"cc", "-shared", "-fPIC", "-O1", "-fno-builtin", "-o", out, cpath,
			      "-lm", NULL};
	assert_int_equal(ca_run(argv, NULL, &rr, &d), 0);
	if (rr.exit_code != 0)
		fail_msg("cc failed: %s", rr.err);
	ca_run_result_free(&rr);
}

static void test_check_library(void **state)
{
	(void)state;
	char path[PATH_MAX], report[4096];
	struct ca_diag d;

	cc_shared("libclean.so", "#include <stdio.h>\n#include <math.h>\n#include <stdlib.h>\n"
				 "double ca_forward(double x) { void *p = malloc(8); free(p);\n"
				 "  puts(\"x\"); return cos(x) + sqrtf((float)x); }\n");
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "libclean.so"), 0);
	int rc = rules_check_library(path, report, sizeof report, &d);
	if (rc != 0)
		fail_msg("clean library rejected: %s", report);
	assert_string_equal(report, "");

	cc_shared("libdirty.so", "#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n"
				 "int ca_forward(void) { FILE *f = fopen(\"/etc/passwd\", \"r\");\n"
				 "  const char *h = getenv(\"HOME\"); return (int)time(0) + (f != 0)"
				 " + (h != 0); }\n");
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "libdirty.so"), 0);
	assert_int_equal(rules_check_library(path, report, sizeof report, &d), CA_ERR_REJECTED);
	assert_non_null(strstr(report, "fopen: file"));
	assert_non_null(strstr(report, "getenv: environment access is not allowed"));
	assert_non_null(strstr(report, "time: reading or setting host clocks"));
	assert_non_null(strstr(d.msg, "3 forbidden symbols"));

	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "nothere.so"), 0);
	assert_int_equal(rules_check_library(path, report, sizeof report, &d), CA_ERR_NOTFOUND);
}

/* ---- sources ------------------------------------------------------------------------------- */

static int scan(const char *text, char *buf, size_t size)
{
	struct rules_report r;
	rules_report_init(&r, buf, size);
	int n = rules_scan_source("kernels/t.cu", text, strlen(text), &r);
	rules_report_finish(&r);
	return n;
}

static void test_scan_includes(void **state)
{
	(void)state;
	char buf[4096];

	assert_int_equal(scan("#include <torch/extension.h>\n", buf, sizeof buf), 1);
	assert_string_equal(buf, "kernels/t.cu:1: #include <torch/extension.h>: PyTorch headers are "
				 "not allowed in a native candidate\n");
	assert_int_equal(scan("\n\n  #  include \"ATen/ATen.h\"\n", buf, sizeof buf), 1);
	assert_non_null(strstr(buf, "kernels/t.cu:3: #include \"ATen/ATen.h\""));
	assert_int_equal(scan("#include <c10/util/Half.h>\n#include <pybind11/pybind11.h>\n"
			      "#include <Python.h>\n#include <dlfcn.h>\n",
			      buf, sizeof buf),
			 4);
	assert_non_null(strstr(buf, ":2: #include <pybind11/pybind11.h>: pybind11"));
	assert_non_null(strstr(buf, ":3: #include <Python.h>: Python headers"));
	assert_non_null(strstr(buf, ":4: #include <dlfcn.h>: dynamic loading"));
	assert_int_equal(scan("#include \"../secret.h\"\n#include \"/etc/passwd\"\n"
			      "#include \"a/../../b.h\"\n#include_next <torch/x.h>\n",
			      buf, sizeof buf),
			 4);
	assert_non_null(strstr(buf, ":1: #include \"../secret.h\": includes must"));
	assert_non_null(strstr(buf, ":2: #include \"/etc/passwd\": includes must"));

	/* fine: the CUDA headers, cuBLAS, local headers, names that merely look alike */
	assert_int_equal(scan("#include <cuda_runtime.h>\n#include <cublas_v2.h>\n#include <cudnn.h>\n"
			      "#include \"common.cuh\"\n#include \"sub/helpers.h\"\n"
			      "#include <cuda_agent/abi.h>\n#include \"torchlike.h\"\n"
			      "#include \"my..file.h\"\n#include MACRO_HEADER\n",
			      buf, sizeof buf),
			 0);
	assert_string_equal(buf, "");
}

static void test_scan_calls(void **state)
{
	(void)state;
	char buf[4096];

	assert_int_equal(scan("int f() {\n  void *h = dlopen(\"x\", 1);\n  return h != 0; }\n", buf,
			      sizeof buf),
			 1);
	assert_string_equal(buf, "kernels/t.cu:2: dlopen: dynamic loading is not allowed\n");
	assert_int_equal(scan("auto p = &dlsym;\n", buf, sizeof buf), 1);
	assert_int_equal(scan("void g() { system(\"ls\"); }\n", buf, sizeof buf), 1);
	assert_non_null(strstr(buf, "kernels/t.cu:1: system: starting processes"));
	assert_int_equal(scan("void g() { std::system (\"ls\"); fork(); execvp(a, b);\n"
			      "FILE *p = popen(\"x\", \"r\"); posix_spawn(0,0,0,0,0,0); }\n",
			      buf, sizeof buf),
			 5);
	assert_non_null(strstr(buf, ":2: popen"));
	assert_non_null(strstr(buf, ":2: posix_spawn"));

	/* not violations: comments, strings, members, other identifiers, inline PTX */
	assert_int_equal(scan("// system(\"ls\"); dlopen\n/* fork();\n #include <torch/x.h>\n*/\n"
			      "const char *s = \"dlopen system( fork()\";\n"
			      "char c = '\\''; int forked = 0; int system_id = 1;\n"
			      "obj.system(1); ptr->fork(); int x = 1'000'000;\n"
			      "auto r = R\"delim(system(\"x\") )\" dlopen)delim\";\n"
			      "asm volatile(\"mov.u32 %0, %%clock;\" : \"=r\"(x));\n"
			      "__global__ void k(float *y) { y[0] = dlopen_count; }\n",
			      buf, sizeof buf),
			 0);
	assert_string_equal(buf, "");

	/* line numbers survive comments, continued lines and raw strings */
	assert_int_equal(scan("/* a\nb\n*/ int a = 1;\nauto s = R\"(x\ny)\";\n// c \\\nd\n"
			      "popen(\"x\", \"r\");\n",
			      buf, sizeof buf),
			 1);
	assert_non_null(strstr(buf, "kernels/t.cu:8: popen"));

	/* a macro spelling is not seen by the text rules: the symbol check covers it */
	assert_int_equal(scan("#define S sys##tem\nvoid g() { S(\"ls\"); }\n", buf, sizeof buf), 0);

	/* unterminated comment and string, NUL bytes: no crash, no false hit */
	assert_int_equal(scan("/* open comment system(", buf, sizeof buf), 0);
	assert_int_equal(scan("\"open string system(", buf, sizeof buf), 0);
	struct rules_report r;
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(rules_scan_source("kernels/t.cu", "a\0b\nfork()\n", 11, &r), 1);
	assert_non_null(strstr(buf, "kernels/t.cu:2: fork"));
}

static void test_check_sources(void **state)
{
	(void)state;
	char kdir[PATH_MAX], sub[PATH_MAX], report[4096];
	struct ca_diag d;

	assert_int_equal(ca_path_join(kdir, sizeof kdir, tmpdir, "cand/kernels"), 0);
	assert_int_equal(ca_path_join(sub, sizeof sub, kdir, "sub"), 0);
	assert_int_equal(ca_mkdirs(sub, 0755, &d), 0);
	write_file(kdir, "main.cu", "#include \"sub/x.cuh\"\n__global__ void k() {}\n");
	write_file(kdir, "README.md", "Do not call system(\"x\") or #include <torch/extension.h>\n");
	write_file(sub, "x.cuh", "#pragma once\n#include <torch/extension.h>\n");
	assert_int_equal(rules_check_sources(kdir, report, sizeof report, &d), CA_ERR_REJECTED);
	assert_string_equal(report, "kernels/sub/x.cuh:2: #include <torch/extension.h>: PyTorch "
				    "headers are not allowed in a native candidate\n");
	assert_non_null(strstr(d.msg, "1 source rule violation"));

	write_file(sub, "x.cuh", "#pragma once\n#include <cuda_runtime.h>\n");
	assert_int_equal(rules_check_sources(kdir, report, sizeof report, &d), 0);
	assert_string_equal(report, "");

	assert_int_equal(ca_path_join(sub, sizeof sub, tmpdir, "nope"), 0);
	assert_int_equal(rules_check_sources(sub, report, sizeof report, &d), CA_ERR_NOTFOUND);
}

static void test_list_tree(void **state)
{
	(void)state;
	char root[PATH_MAX], deep[PATH_MAX], target[PATH_MAX], link[PATH_MAX];
	char **names;
	size_t count;
	struct ca_diag d;

	assert_int_equal(ca_path_join(root, sizeof root, tmpdir, "tree"), 0);
	assert_int_equal(ca_path_join(deep, sizeof deep, root, "a/b/c/d/e/f"), 0);
	assert_int_equal(ca_mkdirs(deep, 0755, &d), 0);
	write_file(root, "z.cu", "z");
	write_file(root, "b.h", "b");
	write_file(root, ".hidden.cuh", "h");
	write_file(root, "a/in_a.cuh", "a");
	write_file(root, "a/b/c/d/depth4.h", "4");
	write_file(root, "a/b/c/d/e/depth5.h", "5");
	assert_int_equal(ca_path_join(target, sizeof target, tmpdir, "outside.h"), 0);
	write_file(tmpdir, "outside.h", "o");
	assert_int_equal(ca_path_join(link, sizeof link, root, "link.h"), 0);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(ca_path_join(link, sizeof link, root, "linkdir"), 0);
	assert_int_equal(symlink(root, link), 0); /* a loop, if it were followed */

	assert_int_equal(rules_list_tree(root, 100, &names, &count, &d), 0);
	const char *want[] = {".hidden.cuh", "a/b/c/d/depth4.h", "a/in_a.cuh", "b.h", "link.h",
			      "z.cu"};
	assert_int_equal(count, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < count; i++)
		assert_string_equal(names[i], want[i]);
	ca_free_names(names, count);

	assert_int_equal(rules_list_tree(root, 3, &names, &count, &d), CA_ERR_LIMIT);
	assert_null(names);
	assert_int_equal(count, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed_symbols),
		cmocka_unit_test(test_denied_symbols),
		cmocka_unit_test(test_libraries),
		cmocka_unit_test(test_exports),
		cmocka_unit_test(test_report_overflow),
		cmocka_unit_test(test_check_elf_synthetic),
		cmocka_unit_test(test_check_library),
		cmocka_unit_test(test_scan_includes),
		cmocka_unit_test(test_scan_calls),
		cmocka_unit_test(test_check_sources),
		cmocka_unit_test(test_list_tree),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
