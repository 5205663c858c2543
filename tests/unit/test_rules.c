/* Unit tests for src/build/rules: allow/deny decisions on representative symbols (C and mangled
 * C++), needed libraries, exports, reports, source scanning, the tree listing, and the library
 * check on real libraries built with `cc -shared` at test time; and for src/build/hostasm, the
 * host assembly check, on assembly text written the way GCC and nvcc write it
 * (tests/unit/test_build.c runs the same check on real nvcc output). */
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

#include "build/hostasm.h"
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
	assert_int_equal(symlink(target, link), 0); /* outside the tree: not listed */
	assert_int_equal(ca_path_join(link, sizeof link, root, "inlink.h"), 0);
	assert_int_equal(symlink("b.h", link), 0); /* inside: listed */
	assert_int_equal(ca_path_join(link, sizeof link, root, "linkdir"), 0);
	assert_int_equal(symlink(root, link), 0); /* a loop, if it were followed */

	assert_int_equal(rules_list_tree(root, 100, &names, &count, &d), 0);
	const char *want[] = {".hidden.cuh", "a/b/c/d/depth4.h", "a/in_a.cuh", "b.h", "inlink.h",
			      "z.cu"};
	assert_int_equal(count, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < count; i++)
		assert_string_equal(names[i], want[i]);
	ca_free_names(names, count);

	assert_int_equal(rules_list_tree(root, 3, &names, &count, &d), CA_ERR_LIMIT);
	assert_null(names);
	assert_int_equal(count, 0);
}

/* ---- host assembly (build/hostasm.h) -------------------------------------------------------- */

#define KDIR "/work/cand/kernels"

/* Checks asm text as the host assembly of kernels/k.cu (source: the unit's text, or NULL). */
static int hostasm(const char *text, const char *source, char *buf, size_t size)
{
	struct rules_report r;
	struct hostasm_unit u = {.shown = "kernels/k.cu", .kdir = KDIR, .label = "kernels",
				 .source = source, .source_len = source ? strlen(source) : 0};
	rules_report_init(&r, buf, size);
	int n = hostasm_check_text(&u, text, strlen(text), &r);
	rules_report_finish(&r);
	return n;
}

/* What GCC 12 and nvcc 13 write for a .cu unit (shortened): nvcc's fatbin as file-scope asm, a
 * function, the TLS call sequence, alignment, comdat and data sections, strings holding '#', ';'
 * and quotes, exception tables, .note.GNU-stack. */
static const char gcc_output[] =
	"\t.file\t\"tmpxft_00004302_00000000-6_k.cudafe1.cpp\"\n"
	"\t.text\n"
	"#APP\n"
	"\t.section .nv_fatbin, \"a\"\n"
	".align 8\n"
	"fatbinData:\n"
	".quad 0x00100001ba55ed50,0x0000000000003460,0x0000007001010002,0x0000000000002f80\n"
	".quad 0xa66c58516ac02295, 0x000000000000000b\n"
	".text\n"
	"\n"
	"#NO_APP\n"
	"\t.p2align 4\n"
	"\t.type\t_ZL26__cudaUnregisterBinaryUtilv, @function\n"
	"_ZL26__cudaUnregisterBinaryUtilv:\n"
	".LFB2023:\n"
	"\t.cfi_startproc\n"
	"\tendbr64\n"
	"\tmovq\t_ZL20__cudaFatCubinHandle(%rip), %rdi\n"
	"\tjmp\t__cudaUnregisterFatBinary@PLT\n"
	"\t.cfi_endproc\n"
	".LFE2023:\n"
	"\t.size\t_ZL26__cudaUnregisterBinaryUtilv, .-_ZL26__cudaUnregisterBinaryUtilv\n"
	"\t.section\t.text.unlikely,\"ax\",@progbits\n"
	".LCOLDB1:\n"
	"\t.text\n"
	"\t.p2align 4,,10\n"
	"\t.globl\tca_forward\n"
	"ca_forward:\n"
	"\t.cfi_escape 0x10,0x6,0x2,0x76,0\n"
	"\tdata16\tleaq\t_ZSt15__once_callable@tlsgd(%rip), %rdi\n"
	"\t.value\t0x6666\n"
	"\trex64\n"
	"\tcall\t__tls_get_addr@PLT\n"
	"\trep ret\n"
	"\tnotrack jmp\t*%rax\n"
	"\torq\t$0, (%rsp)\n"
	"\tlock xaddl\t%eax, (%rdx)\n"
	"\t{vex} vpdpbusd\t%ymm2, %ymm1, %ymm0\n"
	"\tcall\tsyscall_count\n"
	"\t.section\t.gcc_except_table,\"a\",@progbits\n"
	".LLSDA2035:\n"
	"\t.byte\t0xff\n"
	"\t.uleb128 .LLSDACSE2035-.LLSDACSB2035\n"
	"\t.section\t.text._ZN3cub6detail5emptyEv,\"axG\",@progbits,_ZN3cub6detail5emptyEv,comdat\n"
	"\t.weak\t_ZN3cub6detail5emptyEv\n"
	"_ZN3cub6detail5emptyEv:\n"
	"\tret\n"
	"\t.section\t.rodata.str1.8,\"aMS\",@progbits,1\n"
	".LC0:\n"
	"\t.string\t\"error #%d; \\\"%s\\\" = '%c' \\\\ /* x */\"\n"
	"\t.section\t.init_array,\"aw\"\n"
	"\t.align 8\n"
	"\t.quad\t_GLOBAL__sub_I_k.cu\n"
	"\t.section\t.nvFatBinSegment,\"aw\"\n"
	"\t.align 8\n"
	"\t.long\t1180844977\n"
	"\t.zero\t4\n"
	"\t.local\t_ZL20__cudaFatCubinHandle\n"
	"\t.comm\t_ZL20__cudaFatCubinHandle,8,8\n"
	"\t.set\t.LTHUNK0,_ZN1A1fEv\n"
	"\t.section\t.tbss,\"awT\",@nobits\n"
	"\t.ident\t\"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0\"\n"
	"\t.section\t.note.GNU-stack,\"\",@progbits\n"
	/* -fcf-protection (Ubuntu's default): the GNU property note, with local labels */
	"\t.section\t.note.gnu.property,\"a\"\n"
	"\t.align 8\n"
	"\t.long\t1f - 0f\n"
	"\t.long\t4f - 1f\n"
	"\t.long\t5\n"
	"0:\n"
	"\t.string\t\"GNU\"\n"
	"1:\n"
	"\t.align 8\n"
	"\t.long\t0xc0000002\n"
	"\t.long\t3f - 2f\n"
	"2:\n"
	"\t.long\t0x3\n"
	"3:\n"
	"\t.align 8\n"
	"4:\n";

static void test_hostasm_compiler_output(void **state)
{
	(void)state;
	char buf[4096];

	assert_int_equal(hostasm(gcc_output, NULL, buf, sizeof buf), 0);
	assert_string_equal(buf, "");
	/* a .c/.cpp unit has no fatbin; an empty file is fine too */
	assert_int_equal(hostasm("\t.text\n\t.globl\tf\nf:\n\tret\n", NULL, buf, sizeof buf), 0);
	assert_int_equal(hostasm("", NULL, buf, sizeof buf), 0);
}

static void test_hostasm_inline_asm(void **state)
{
	(void)state;
	char buf[4096];

	/* host asm volatile("syscall") in kernels/k.cu, twice (inlined): named once */
	assert_int_equal(hostasm("\t.text\nf:\n#APP\n# 14 \"" KDIR "/k.cu\" 1\n\tsyscall\n"
				 "# 0 \"\" 2\n#NO_APP\n\tret\n"
				 "g:\n#APP\n# 14 \"" KDIR "/k.cu\" 1\n\tsyscall\n# 0 \"\" 2\n"
				 "#NO_APP\n\tret\n",
				 NULL, buf, sizeof buf),
			 1);
	assert_string_equal(buf, "kernels/k.cu:14: inline assembly in host code is not allowed "
				 "(system calls and self-modifying code are refused; inline PTX in "
				 "__device__/__global__ functions is fine)\n");
	/* host __asm__("nop"): harmless, refused all the same; a header's macro in its own file */
	assert_int_equal(hostasm("#APP\n# 3 \"" KDIR "/k.cu\" 1\n\tnop\n# 0 \"\" 2\n"
				 "# 7 \"" KDIR "/sub/evil.cuh\" 1\n\tnop\n# 0 \"\" 2\n#NO_APP\n",
				 NULL, buf, sizeof buf),
			 2);
	assert_non_null(strstr(buf, "kernels/k.cu:3: inline assembly in host code"));
	assert_non_null(strstr(buf, "kernels/sub/evil.cuh:7: inline assembly in host code"));
	/* raw bytes of a syscall: refused as inline asm (the content is not looked at then) */
	assert_int_equal(hostasm("#APP\n# 9 \"" KDIR "/k.cu\" 1\n\t.byte 0x0f, 0x05\n# 0 \"\" 2\n"
				 "#NO_APP\n",
				 NULL, buf, sizeof buf),
			 1);
	assert_non_null(strstr(buf, "kernels/k.cu:9: inline assembly"));
	/* a relative name (a forged #line) counts as the candidate's */
	assert_int_equal(hostasm("#APP\n# 2 \"k.cu\" 1\n\tnop\n# 0 \"\" 2\n#NO_APP\n", NULL, buf,
				 sizeof buf),
			 1);
	assert_non_null(strstr(buf, "k.cu:2: inline assembly"));

	/* a system header's asm is checked like the rest: cpuid passes, syscall does not */
	assert_int_equal(hostasm("#APP\n# 80 \"/usr/include/cpuid.h\" 1\n\tcpuid\n\t\n"
				 "# 0 \"\" 2\n#NO_APP\n",
				 NULL, buf, sizeof buf),
			 0);
	assert_int_equal(hostasm("#APP\n# 5 \"/usr/include/x.h\" 1\n\tsyscall\n# 0 \"\" 2\n"
				 "#NO_APP\n",
				 NULL, buf, sizeof buf),
			 1);
	assert_string_equal(buf, "/usr/include/x.h:5 (host code of kernels/k.cu): the instruction "
				 "'syscall' enters the kernel (a system call or software interrupt), "
				 "which host code may not do\n");
	/* forged markers change nothing: a "system" block that leaves app mode and comes back */
	assert_int_equal(hostasm("#APP\n# 10 \"/usr/include/stdio.h\" 1\n\tnop\n#NO_APP\n"
				 "\tsyscall\n#APP\n# 0 \"\" 2\n#NO_APP\n",
				 NULL, buf, sizeof buf),
			 1);
	assert_non_null(strstr(buf, "kernels/k.cu (host assembly line 5): the instruction "
				    "'syscall'"));
	assert_int_equal(hostasm("#APP\n# 1 \"/usr/include/stdio.h\" 1\n\t.byte 0x0f,0x05\n"
				 "# 0 \"\" 2\n#NO_APP\n",
				 NULL, buf, sizeof buf),
			 1);
	assert_non_null(strstr(buf, "/usr/include/stdio.h:1 (host code of kernels/k.cu): '.byte' "
				    "places data in the executable section '.text'"));
}

static void test_hostasm_instructions(void **state)
{
	(void)state;
	char buf[8192];
	static const char *const refused[] = {
		"\tsyscall\n", "\tSYSCALL\n", "\tsysenter\n", "\tint $0x80\n", "\tint\t$128\n",
		"\tint3\n", "\tint1\n", "\ticebp\n", "\tinto\n", "\trex64 syscall\n",
		"\tlock syscall\n", "\t{vex} syscall\n", "\tnop; syscall\n", "\tnop ;syscall ;\n",
		"\tds\tcs syscall\n", "\tsysretq\n", "\tlretq\n", "\tljmp *(%rax)\n",
		"\tlcall\t$0x23, $0\n", "\tiretq\n", "\twrpkru\n", "\txrstor64 (%rdi)\n",
		"\txrstors (%rdi)\n", "\twrfsbase %rax\n", "\tvmcall\n", "\tsenduipi %rax\n",
		"f: syscall\n", ".L1:\t.L2: sysenter\n", "\tsyscall.s\n",
	};
	static const char *const fine[] = {
		"\tcall\tsyscall@PLT\n", "\tjmp\tint3_handler\n", "\tmovl\t$0x050f, %eax\n",
		"\tpause\n", "\trdtsc\n", "\tud2\n", "\tinterrupt_me:\n", "\tintl_thing\n",
	};

	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		int n = hostasm(refused[i], NULL, buf, sizeof buf);
		if (n != 1 || !strstr(buf, "the instruction '"))
			fail_msg("'%s' gave %d finding(s): %s", refused[i], n, buf);
	}
	for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++)
		if (hostasm(fine[i], NULL, buf, sizeof buf) != 0)
			fail_msg("'%s' was refused: %s", fine[i], buf);
	assert_int_equal(hostasm("\twrpkru\n", NULL, buf, sizeof buf), 1);
	assert_non_null(strstr(buf, "'wrpkru' changes memory protection keys"));
	assert_int_equal(hostasm("\tljmp *(%rax)\n", NULL, buf, sizeof buf), 1);
	assert_non_null(strstr(buf, "'ljmp' is a far control transfer"));
}

/* What a candidate can paste into GCC's output without inline asm: asm labels and section
 * names are written verbatim (GCC 12 checks neither). */
static void test_hostasm_injection(void **state)
{
	(void)state;
	char buf[8192];
	static const struct {
		const char *text, *want;
	} cases[] = {
		/* int f() __asm__("foo\n\tsyscall\n#"); called from g */
		{"\t.text\ng:\n\tcall\tfoo\n\tsyscall\n#@PLT\n\tret\n", "'syscall' enters"},
		/* __attribute__((section(".data;syscall;#"))) */
		{"\t.section\t.data;syscall;#,\"aw\"\n", "a '#' outside a string"},
		{"\t.section\t.data;syscall\n", "'syscall' enters"},
		/* __attribute__((section(".text.x"))) const unsigned char code[] = {0x0f, 0x05} */
		{"\t.section\t.text.evil,\"a\"\ncode:\n\t.ascii\t\"\\017\\005\\303\"\n",
		 "'.ascii' places data in the executable section '.text.evil'"},
		{"\t.section\t.init,\"ax\"\n\t.quad 0x050f\n", "in the executable section '.init'"},
		{"\t.section\t.gnu.linkonce.t.x\n\t.long 0x050f\n", "executable section"},
		{"\t.text\n\t.byte 0x0f, 0x05\n", "'.byte' places data in the executable section"},
		{"\t.text\n\t.value 0x050f\n", "'.value' places data"},
		{"\t.text\n\t.string \"\\017\\005\"\n", "'.string' places data"},
		{"\t.text\n\t.zero 16\n", "'.zero' places data"},
		{"\t.section\t.text.startup,\"ax\",@progbits\n\t.quad 0x050f\n", "'.quad' places"},
		{"\t.text\n\t.p2align 4,0x0f\n", "padding of the executable section '.text'"},
		{"\t.text\n\t.align 16, 0x05, 3\n", "padding of the executable section"},
		/* an executable section of another name, an executable stack */
		{"\t.section\t.rodata.x,\"ax\",@progbits\n", "the section '.rodata.x' is made executable"},
		{"\t.section\t\".evil\",\"awx\"\n", "the section '.evil' is made executable"},
		{"\t.section\t.note.GNU-stack,\"x\",@progbits\n",
		 "the section '.note.GNU-stack' is made executable"},
		/* section(".text.x,\"awx\"\n#") on a function: code that can rewrite itself */
		{"\t.section\t.text.x,\"awx\"\n#,\"ax\",@progbits\n",
		 "the executable section '.text.x' is made writable"},
		{"\t.section\t.evil,\"awx\"\n", "the executable section '.evil' is made writable"},
		/* instructions in a data section */
		{"\t.data\n\tnop\n", "the instruction 'nop' in the data section '.data'"},
		/* directives GCC does not emit */
		{"\t.macro m a b\n", "the directive '.macro'"},
		{"\t.rept 2\n", "the directive '.rept'"},
		{"\t.irp r,sys\n", "the directive '.irp'"},
		{"\t.insn 0x0f05\n", "the directive '.insn'"},
		{"\t.incbin \"/etc/shadow\"\n", "the directive '.incbin'"},
		{"\t.include \"x.s\"\n", "the directive '.include'"},
		{"\t.reloc .text, R_X86_64_64, 5\n", "the directive '.reloc'"},
		{"\t.fill 2, 1, 0x0f\n", "the directive '.fill'"},
		{"\t.org 0x10\n", "the directive '.org'"},
		{"\t.pushsection .text\n", "the directive '.pushsection'"},
		{"\t.previous\n", "the directive '.previous'"},
		{"\t.code32\n", "the directive '.code32'"},
		{"\t.intel_syntax noprefix\n", "the directive '.intel_syntax'"},
		{"\t.equ x, 5\n", "the directive '.equ'"},
		{"\t.text\n\t.set ., . + 16\n", "an assignment to the location counter"},
		{"\t.set .,.+2\n", "an assignment to the location counter"},
		{"\t.dc.a 0\n", "a malformed directive"},
		{"\t.text 1\n", "a subsection number"},
		/* text the assembler would read otherwise than the check */
		{"\tnop # ;syscall\n", "a '#' outside a string"},
		{"\t.byte '#;syscall\n", "a ''' outside a string"},
		{"\tx = 5\n", "a '=' outside a string"},
		{"\tnop \\\n", "a '\\' outside a string"},
		{"\tnop /* x */\n", "a '/' outside a string"},
		{"\t.string \"abc\n", "an unterminated string"},
		{"\tnop\r\n", "a control character"},
		{"  # indented comment\n", "a '#' outside a string"},
		{"# comment; syscall\n", "a ';' in a comment line"},
		{"\t.section \"abc\n", "an unterminated string"},
		{"\t.section .x \"a\"\n", "text after a section name"},
		{"\t.section .x,a\n", "section flags without quotes"},
		{"\t{vex syscall\n", "an unclosed '{'"},
		{"\t%rax\n", "neither a directive nor an instruction"},
		{"1x:\tnop\n", "a malformed mnemonic"},
		{"1:\tsyscall\n", "'syscall' enters"},
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int n = hostasm(cases[i].text, NULL, buf, sizeof buf);
		if (n < 1 || !strstr(buf, cases[i].want))
			fail_msg("'%s': %d finding(s), expected '%s': %s", cases[i].text, n,
				 cases[i].want, buf);
	}
	/* TLS padding is only GCC's exact form */
	assert_int_equal(hostasm("\t.text\n\t.value\t0x6666\n\t.byte 0x66\n", NULL, buf, sizeof buf),
			 0);
	assert_int_equal(hostasm("\t.text\n\t.value\t0x6667\n", NULL, buf, sizeof buf), 1);
}

static void test_hostasm_file_scope(void **state)
{
	(void)state;
	char buf[4096];
	static const char source[] = "#include <cuda_agent/abi.h>\n"
				     "// asm(\"nop\") in a comment\n"
				     "extern int f(int) __asm__(\"g\");\n"
				     "namespace a { namespace b {\n"
				     "void h() { asm(\"nop\"); }\n"
				     "__asm__(\".globl topsym\\n topsym: ret\");\n"
				     "} }\n";

	/* the candidate's file-scope asm comes before nvcc's fatbin in the same #APP block */
	assert_int_equal(hostasm("\t.text\n#APP\n\t.globl topsym\n topsym: ret\n"
				 "\t.section .nv_fatbin, \"a\"\n.align 8\nfatbinData:\n"
				 ".quad 0x1,0x2\n.text\n\n#NO_APP\n",
				 source, buf, sizeof buf),
			 1);
	assert_string_equal(buf, "kernels/k.cu:6: file-scope asm is not allowed in host code "
				 "(inline assembly in host code is refused; inline PTX in "
				 "__device__/__global__ functions is fine)\n");
	/* without the source (or when a macro hides it): the unit alone */
	assert_int_equal(hostasm("#APP\n\tnop\n#NO_APP\n", NULL, buf, sizeof buf), 1);
	assert_non_null(strstr(buf, "kernels/k.cu: file-scope asm is not allowed"));
	/* GCC 13's <iostream>: a file-scope `.globl` of the library's stream initializer before
	 * nvcc's fatbin (seen with Ubuntu's gcc 13.3 and CUB); a .globl only binds a symbol */
	assert_int_equal(hostasm("\t.text\n#APP\n\t.globl _ZSt21ios_base_library_initv\n"
				 "\t.section .nv_fatbin, \"a\"\n.align 8\nfatbinData:\n"
				 ".quad 0x1,0x2\n.text\n\n#NO_APP\n",
				 NULL, buf, sizeof buf),
			 0);
	assert_int_equal(hostasm("#APP\n\t.globl x; syscall\n#NO_APP\n", NULL, buf, sizeof buf), 1);
	assert_int_equal(hostasm("#APP\n\t.globl 1x\n#NO_APP\n", NULL, buf, sizeof buf), 1);
	/* the fatbin block must be exactly nvcc's */
	static const char *const not_fatbin[] = {
		"#APP\n\t.section .nv_fatbin, \"ax\"\n.align 8\nfatbinData:\n.quad 0x1\n.text\n#NO_APP\n",
		"#APP\n\t.section .nv_fatbin, \"a\"\n.align 8\nfatbinData:\n.quad 0x1\nnop\n.text\n"
		"#NO_APP\n",
		"#APP\n\t.section .nv_fatbin, \"a\"\n.align 8\nfatbinData:\n.quad sym\n.text\n#NO_APP\n",
		"#APP\n\t.section .nv_fatbin, \"a\"\nfatbinData:\n.quad 0x1\n.text\n#NO_APP\n",
		"#APP\n.text\n#NO_APP\n",
	};
	for (size_t i = 0; i < sizeof not_fatbin / sizeof not_fatbin[0]; i++)
		if (hostasm(not_fatbin[i], NULL, buf, sizeof buf) < 1 ||
		    !strstr(buf, "file-scope asm"))
			fail_msg("not refused: %s", not_fatbin[i]);

	/* where file-scope asm is, for messages */
	assert_int_equal(rules_file_scope_asm_line(source, strlen(source)), 6);
	static const struct {
		const char *text;
		unsigned line;
	} where[] = {
		{"asm(\"nop\");\n", 1},
		{"#include <x.h>\nint a;\n__asm(\"nop\");\n", 3},
		{"extern \"C\" {\nint a;\nasm(\"nop\");\n}\n", 3},
		{"namespace {\nasm(\"nop\");\n}\n", 2},
		{"void f() {\n  asm volatile(\"nop\");\n}\n", 0},
		{"struct S {\n  void f() { asm(\"nop\"); }\n};\n", 0},
		{"int g(int) asm(\"h\");\n", 0},
		{"/* asm(\"nop\"); */ const char *s = \"asm(x);\";\n", 0},
		{"#define A asm(\"nop\");\n", 0},
		{"}}} asm(\"nop\");\n", 1},
	};
	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
		unsigned got = rules_file_scope_asm_line(where[i].text, strlen(where[i].text));
		if (got != where[i].line)
			fail_msg("'%s': line %u, expected %u", where[i].text, got, where[i].line);
	}
}

static void test_hostasm_limits_and_files(void **state)
{
	(void)state;
	char buf[8192], path[PATH_MAX];
	struct rules_report r;
	struct ca_diag d;
	struct hostasm_unit u = {.shown = "kernels/k.cu", .kdir = KDIR, .label = "kernels"};

	/* at most HOSTASM_MAX_FINDINGS lines, then a count */
	char many[2048] = "";
	for (int i = 0; i < 20; i++)
		strncat(many, "\tsyscall\n", sizeof many - strlen(many) - 1);
	assert_int_equal(hostasm(many, NULL, buf, sizeof buf), 20);
	assert_non_null(strstr(buf, "kernels/k.cu: ... and 12 more host assembly findings\n"));

	/* files: clean, refused, missing, a line over the limit */
	write_file(tmpdir, "clean.s", gcc_output);
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "clean.s"), 0);
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(hostasm_check_file(&u, path, &r, &d), 0);
	assert_string_equal(buf, "");

	write_file(tmpdir, "bad.s", "\t.text\n\tnop\n\tsyscall");
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "bad.s"), 0);
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(hostasm_check_file(&u, path, &r, &d), CA_ERR_REJECTED);
	assert_non_null(strstr(buf, "kernels/k.cu (host assembly line 3): the instruction "
				    "'syscall'"));
	assert_non_null(strstr(d.msg, "1 host assembly finding"));

	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "missing.s"), 0);
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(hostasm_check_file(&u, path, &r, &d), CA_ERR_NOTFOUND);

	size_t big = HOSTASM_MAX_LINE + 16;
	char *line = malloc(big + 1);
	assert_non_null(line);
	memset(line, 'a', big);
	line[big] = '\0';
	write_file(tmpdir, "long.s", line);
	free(line);
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "long.s"), 0);
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(hostasm_check_file(&u, path, &r, &d), CA_ERR_REJECTED);
	assert_non_null(strstr(buf, "a line longer than"));

	/* a large clean file, read in chunks: lines cross the chunk boundaries */
	size_t reps = 2000, one = strlen(gcc_output);
	char *large = malloc(reps * one + 1);
	assert_non_null(large);
	for (size_t i = 0; i < reps; i++)
		memcpy(large + i * one, gcc_output, one);
	large[reps * one] = '\0';
	write_file(tmpdir, "large.s", large);
	free(large);
	assert_int_equal(ca_path_join(path, sizeof path, tmpdir, "large.s"), 0);
	rules_report_init(&r, buf, sizeof buf);
	assert_int_equal(hostasm_check_file(&u, path, &r, &d), 0);
	assert_string_equal(buf, "");
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
		cmocka_unit_test(test_hostasm_compiler_output),
		cmocka_unit_test(test_hostasm_inline_asm),
		cmocka_unit_test(test_hostasm_instructions),
		cmocka_unit_test(test_hostasm_injection),
		cmocka_unit_test(test_hostasm_file_scope),
		cmocka_unit_test(test_hostasm_limits_and_files),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
