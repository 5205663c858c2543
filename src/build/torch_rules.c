#include "build/torch_rules.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/str.h"

#define QNAME_MAX 512 /* a decoded name, for matching and messages */
#define MAX_PARTS 24  /* components of one nested name */
#define MAX_NAME_LEN 4096u /* one <source-name> of a mangled symbol */

/* ---- the ATen operators an extension may call ------------------------------------------------
 * at::_ops::<name>::call for every overload of the ops python/cuda_agent_bridge/refusal.py allows
 * (ALLOWED_ATEN, and the ALLOWED_TENSOR/ALLOWED_TORCH names that are ATen ops: item, expand_as,
 * ...), <name> being torchgen's unambiguous name (op, or op_overload). Sorted (strcmp) for
 * bsearch; python/tests/test_torch_rules_table.py checks this table against refusal.py and the
 * installed torch. */
static const char *const allowed_ops[] = {
	"Size", "__getitem___Dict_Tensor", "__getitem___Dict_bool", "__getitem___Dict_complex",
	"__getitem___Dict_float", "__getitem___Dict_int", "__getitem___Dict_str",
	"__getitem___str", "__getitem___t", "_copy_from", "_copy_from_and_resize",
	"_copy_from_and_resize_out", "_copy_from_out", "_local_scalar_dense", "_reshape_alias",
	"_to_copy", "_to_copy_out", "_unsafe_view", "_unsafe_view_out", "_version", "alias",
	"as_strided", "as_tensor", "as_tensor_bool", "as_tensor_complex", "as_tensor_float",
	"as_tensor_int", "as_tensor_list", "can_cast", "chunk", "clone", "clone_out",
	"contiguous", "copy_", "copy__Tensor", "copy__float", "copy__int", "cpu", "cuda", "data",
	"detach", "detach_", "device", "device_with_index", "dim", "element_size", "empty_like",
	"empty_like_out", "empty_memory_format", "empty_names", "empty_names_out", "empty_out",
	"empty_strided", "empty_strided_out", "expand", "expand_as", "fill__Scalar",
	"fill__Tensor", "flatten_DimnameList", "flatten_named_out_dim", "flatten_using_ints",
	"flatten_using_names", "full", "full_like", "full_like_out", "full_names",
	"full_names_out", "full_out", "get_device", "grad", "is_complex", "is_contiguous",
	"is_contiguous_memory_format", "is_floating_point", "is_leaf", "is_same_size", "item",
	"lift_fresh", "lift_fresh_copy", "lift_fresh_copy_out", "mT", "mT_a", "narrow",
	"narrow_Tensor", "new_empty", "new_empty_out", "new_empty_strided",
	"new_empty_strided_out", "new_full", "new_full_out", "new_ones", "new_ones_out",
	"new_zeros", "new_zeros_out", "numel", "ones", "ones_like", "ones_like_out", "ones_names",
	"ones_names_out", "ones_out", "permute", "promote_types", "record_stream", "requires_grad_",
	"reshape", "reshape_as", "resize_", "result_type_Scalar", "result_type_Scalar_Scalar",
	"result_type_Scalar_Tensor", "result_type_Tensor", "scalar_tensor", "scalar_tensor_out",
	"select_Dimname", "select_int", "select_t", "size", "size_Dimname", "size_int",
	"slice_Tensor", "slice_str", "slice_t", "split", "split_Tensor", "split_sizes",
	"split_str", "split_with_sizes", "squeeze", "squeeze_dim", "squeeze_dimname",
	"squeeze_dims", "storage_offset", "stride", "stride_Dimname", "stride_int", "sym_numel",
	"sym_size", "sym_size_int", "sym_storage_offset", "sym_stride", "sym_stride_int", "t",
	"tensor", "tensor_bool", "tensor_complex", "tensor_float", "tensor_int", "to_device",
	"to_dtype", "to_dtype_layout", "to_other", "to_prim_Device", "to_prim_dtype",
	"to_prim_other", "transpose_Dimname", "transpose_int", "unbind_Dimname", "unbind_int",
	"unflatten_Dimname", "unflatten_int", "unfold", "unsafe_chunk", "unsafe_split_Tensor",
	"unsafe_split_Tensor_out", "unsqueeze", "view", "view_as", "view_dtype", "zero_", "zeros",
	"zeros_like", "zeros_like_out", "zeros_names", "zeros_names_out", "zeros_out",
};

/* ---- rules on decoded names ------------------------------------------------------------------- */

struct trule {
	const char *pattern; /* fnmatch(3) pattern on the decoded name (or the raw one: raw_rules) */
	enum torch_verdict verdict;
	const char *reason;
};

#define T_REDISPATCH "redispatch skips dispatch keys (the harness's torch-compute refusal is one)"
#define T_DISPATCHER "the dispatcher's internals call any operator by name or change its kernels"
#define T_TLS "it changes the dispatch keys or Python modes in force (it can switch off the " \
	      "harness's torch-compute refusal)"
#define T_AUTOGRAD "autograd's internals run and change what is recorded and dispatched"
#define T_JIT "TorchScript and Dynamo run code the checks cannot see"
#define T_DL "dynamic loading brings in code the checks never saw"
#define T_PATCH "changing memory protections, tracing or raw system calls can patch the harness"
#define T_PY "this Python C-API call runs code, imports modules or reaches frames and sys, which " \
	     "the checks cannot see"
#define C_OP "torch compute from C++ (compute with your own kernels; allowed from ATen: " \
	     "allocation, metadata, views, copies)"
#define C_KERNEL "a torch kernel called directly (compute with your own kernels)"
#define C_BLAS "torch's cuBLAS wrappers are torch compute (call cuBLAS yourself, GEMM only)"
#define C_GRAPH "CUDA graphs replay torch work the harness cannot refuse"
#define C_UNLISTED "not on the list of torch functions an extension may call (allocation, " \
		   "metadata, views, copies, streams, devices, errors)"
#define OK_INFRA "torch infrastructure (allocation, metadata, streams, errors)"
#define OK_PY "Python C-API used by pybind11"

/* Checked in order on the decoded name; the first match decides. */
static const struct trule name_rules[] = {
	{"at::_ops::*::redispatch", TORCH_TAMPERING, T_REDISPATCH},
	{"at::redispatch::*", TORCH_TAMPERING, T_REDISPATCH},
	{"c10::Dispatcher*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::OperatorHandle*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::TypedOperatorHandle*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::impl::OperatorEntry*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::KernelFunction*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::BoxedKernel*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::RegisterOperators*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::RegistrationHandleRAII*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::detail::infer_schema*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::show_dispatch_trace*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::dispatch_trace_nesting*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::detail::_print_dispatch_trace*", TORCH_TAMPERING, T_DISPATCHER},
	{"torch::Library*", TORCH_TAMPERING, T_DISPATCHER},
	{"torch::CppFunction*", TORCH_TAMPERING, T_DISPATCHER},
	{"torch::impl::dispatch*", TORCH_TAMPERING, T_DISPATCHER},
	{"c10::impl::tls_*", TORCH_TAMPERING, T_TLS},
	{"c10::impl::_force_tls_local_dispatch_key_set*", TORCH_TAMPERING, T_TLS},
	{"c10::impl::raw_local_dispatch_key_set*", TORCH_TAMPERING, T_TLS},
	{"c10::impl::IncludeDispatchKeyGuard*", TORCH_TAMPERING, T_TLS},
	{"c10::impl::ForceDispatchKeyGuard*", TORCH_TAMPERING, T_TLS},
	{"c10::impl::PyInterpreter*", TORCH_TAMPERING, T_TLS},
	{"*DispatchModeTLS*", TORCH_TAMPERING, T_TLS},
	{"*PythonDispatcher*", TORCH_TAMPERING, T_TLS},
	{"*TorchFunction*", TORCH_TAMPERING, T_TLS},
	{"*TorchDispatch*", TORCH_TAMPERING, T_TLS},
	{"*torch_function*", TORCH_TAMPERING, T_TLS},
	{"*torch_dispatch*", TORCH_TAMPERING, T_TLS},
	{"*PythonTLSSnapshot*", TORCH_TAMPERING, T_TLS},
	{"*PythonModeTLS*", TORCH_TAMPERING, T_TLS},
	{"at::impl::*", TORCH_TAMPERING, T_TLS},
	{"at::ThreadLocalState*", TORCH_TAMPERING, T_TLS},
	{"c10::ThreadLocalState*", TORCH_TAMPERING, T_TLS},
	{"torch::autograd::AutogradMeta", TORCH_OK, "autograd metadata of new tensors (torch:: "
						    "factory functions)"},
	{"torch::autograd::AutogradMeta::*", TORCH_OK, "autograd metadata of new tensors"},
	{"torch::autograd::*", TORCH_TAMPERING, T_AUTOGRAD},
	{"torch::jit::*", TORCH_TAMPERING, T_JIT},
	{"torch::dynamo::*", TORCH_TAMPERING, T_JIT},
	{"torch::overrides::*", TORCH_TAMPERING, T_TLS},
	/* compute */
	{"at::native::*", TORCH_COMPUTE, C_KERNEL},
	{"at::cpu::*", TORCH_COMPUTE, C_KERNEL},
	{"at::meta::*", TORCH_COMPUTE, C_KERNEL},
	{"at::composite*", TORCH_COMPUTE, C_KERNEL},
	{"at::cuda::blas::_cublasGetErrorEnum", TORCH_OK, "cuBLAS error text (TORCH_CUDABLAS_CHECK)"},
	{"at::cuda::blas::*", TORCH_COMPUTE, C_BLAS},
	{"at::cuda::CUDAGraph*", TORCH_COMPUTE, C_GRAPH},
	{"at::cuda::getCurrentCUDABlasHandle", TORCH_OK, "torch's cuBLAS handle (call cuBLAS GEMM "
							 "yourself)"},
	{"at::cuda::getCurrentCUDABlasLtHandle", TORCH_OK, "torch's cuBLASLt handle"},
	{"at::cuda::getCUDABlasLtWorkspace*", TORCH_OK, "torch's cuBLASLt workspace"},
	{"at::cuda::getChosenWorkspaceSize", TORCH_OK, "torch's cuBLAS workspace size"},
	{"at::cuda::getCurrentDeviceProperties", TORCH_OK, OK_INFRA},
	{"at::cuda::getDeviceProperties", TORCH_OK, OK_INFRA},
	{"at::cuda::warp_size", TORCH_OK, OK_INFRA},
	{"at::cuda::is_available", TORCH_OK, OK_INFRA},
	{"at::cuda::getNumGPUs", TORCH_OK, OK_INFRA},
	{"at::cuda::getCUDADeviceAllocator", TORCH_OK, OK_INFRA},
	{"at::cuda::getPinnedMemoryAllocator", TORCH_OK, OK_INFRA},
	{"at::cuda::canDeviceAccessPeer", TORCH_OK, OK_INFRA},
	{"at::cuda::detail::*", TORCH_OK, OK_INFRA},
	{"at::cuda::*", TORCH_COMPUTE, C_UNLISTED},
	{"at::TensorBase::*", TORCH_OK, OK_INFRA},
	{"at::Tensor::*", TORCH_OK, OK_INFRA},
	{"at::detail::empty*", TORCH_OK, "allocation"},
	{"at::detail::getCUDAHooks", TORCH_OK, OK_INFRA},
	{"at::detail::getCPUAllocator", TORCH_OK, OK_INFRA},
	{"at::getCPUAllocator", TORCH_OK, OK_INFRA},
	{"at::globalContext", TORCH_OK, OK_INFRA},
	{"at::Context::*", TORCH_OK, OK_INFRA},
	{"at::print*", TORCH_OK, "printing a tensor"},
	{"at::operator ls", TORCH_OK, "printing a tensor (operator<<)"},
	{"at::toString*", TORCH_OK, OK_INFRA},
	{"at::DeprecatedTypeProperties*", TORCH_OK, OK_INFRA},
	{"at::getDeprecatedTypeProperties*", TORCH_OK, OK_INFRA},
	{"at::RecordFunction*", TORCH_OK, "profiler scopes"},
	{"at::getStepCallbacks*", TORCH_OK, "profiler scopes"},
	{"at::get_num_threads", TORCH_OK, "host thread pool"},
	{"at::set_num_threads", TORCH_OK, "host thread pool"},
	{"at::get_thread_num", TORCH_OK, "host thread pool"},
	{"at::in_parallel_region", TORCH_OK, "host thread pool"},
	{"at::init_num_threads", TORCH_OK, "host thread pool"},
	{"at::internal::*", TORCH_OK, "host thread pool"},
	{"at::*", TORCH_COMPUTE, C_UNLISTED},
	{"torch::PyWarningHandler*", TORCH_OK, "torch's error and warning translation"},
	{"torch::translate_exception_to_python*", TORCH_OK, "torch's error translation"},
	{"torch::*", TORCH_COMPUTE, C_UNLISTED},
};

/* Checked on the raw symbol (C names: libc, Python), in order. */
static const struct trule raw_rules[] = {
	{"dlopen*", TORCH_TAMPERING, T_DL}, {"dlmopen", TORCH_TAMPERING, T_DL},
	{"dlsym", TORCH_TAMPERING, T_DL}, {"dlvsym", TORCH_TAMPERING, T_DL},
	{"dladdr*", TORCH_TAMPERING, T_DL}, {"dlinfo", TORCH_TAMPERING, T_DL},
	{"dl_iterate_phdr", TORCH_TAMPERING, T_DL}, {"_dl_*", TORCH_TAMPERING, T_DL},
	{"__libc_dl*", TORCH_TAMPERING, T_DL},
	{"mprotect", TORCH_TAMPERING, T_PATCH}, {"pkey_mprotect", TORCH_TAMPERING, T_PATCH},
	{"ptrace", TORCH_TAMPERING, T_PATCH}, {"process_vm_*", TORCH_TAMPERING, T_PATCH},
	/* Not `syscall`: Ubuntu 24.04's toolchain (GCC 13.3) with torch 2.11's headers makes every
	 * extension import it (seen on the H200 host: honest workdir and load_inline modules), so
	 * it is no evidence. Raw system calls are the sandbox's (seccomp filters by number and
	 * arguments whatever the entry), and a patched clock in the candidate's process only
	 * changes its claims, which the supervisor's outside bound holds (docs/security.md). */
	{"PyRun_*", TORCH_TAMPERING, T_PY}, {"_PyRun_*", TORCH_TAMPERING, T_PY},
	{"PyImport_*", TORCH_TAMPERING, T_PY}, {"_PyImport_*", TORCH_TAMPERING, T_PY},
	{"Py_CompileString*", TORCH_TAMPERING, T_PY}, {"_Py_CompileString*", TORCH_TAMPERING, T_PY},
	{"PyCode_*", TORCH_TAMPERING, T_PY}, {"PyFunction_New*", TORCH_TAMPERING, T_PY},
	{"PyEval_EvalCode*", TORCH_TAMPERING, T_PY}, {"PyEval_EvalFrame*", TORCH_TAMPERING, T_PY},
	{"_PyEval_*", TORCH_TAMPERING, T_PY}, {"PyEval_GetGlobals", TORCH_TAMPERING, T_PY},
	{"PyEval_GetLocals", TORCH_TAMPERING, T_PY}, {"PyEval_GetFrame*", TORCH_TAMPERING, T_PY},
	{"PyEval_SetTrace*", TORCH_TAMPERING, T_PY}, {"PyEval_SetProfile*", TORCH_TAMPERING, T_PY},
	{"PySys_*", TORCH_TAMPERING, T_PY}, {"_PySys_*", TORCH_TAMPERING, T_PY},
	{"PyMarshal_*", TORCH_TAMPERING, T_PY}, {"Py_AddPendingCall", TORCH_TAMPERING, T_PY},
	{"Py_AtExit", TORCH_TAMPERING, T_PY}, {"PyThread_start_new_thread", TORCH_TAMPERING, T_PY},
	{"PyThreadState_GetFrame", TORCH_TAMPERING, T_PY},
	{"PyThreadState_SetAsyncExc", TORCH_TAMPERING, T_PY},
	{"PyFrame_New", TORCH_TAMPERING, T_PY}, {"PyFrame_LocalsToFast", TORCH_TAMPERING, T_PY},
	{"PyFrame_FastToLocals*", TORCH_TAMPERING, T_PY},
	{"PyFrame_GetLocals", TORCH_TAMPERING, T_PY}, {"PyFrame_GetGlobals", TORCH_TAMPERING, T_PY},
	{"PyFrame_GetBuiltins", TORCH_TAMPERING, T_PY},
	{"Py*", TORCH_OK, OK_PY}, {"_Py*", TORCH_OK, OK_PY}, {"THP*", TORCH_OK, OK_PY},
};

/* CUDA libraries: their calls follow the cuda-agent rules for native candidates (build/rules.h:
 * cuBLAS/cuBLASLt for GEMM, cuDNN for convolution, nothing else). */
static const char *const cuda_lib_prefixes[] = {"cublas", "cudnn", "cufft", "curand", "cusparse",
						"cusolver", "cutensor", "nccl", "nvrtc", "nvJitLink",
						"npp", "nvjpeg"};

static const struct trule library_rules[] = {
	{"libc10.so", TORCH_OK, "torch"}, {"libc10_cuda.so", TORCH_OK, "torch"},
	{"libtorch.so", TORCH_OK, "torch"}, {"libtorch_cpu.so", TORCH_OK, "torch"},
	{"libtorch_cuda.so", TORCH_OK, "torch"}, {"libtorch_python.so", TORCH_OK, "torch"},
	{"libcudart.so*", TORCH_OK, "CUDA runtime"}, {"libcuda.so*", TORCH_OK, "CUDA driver"},
	{"libcublas.so*", TORCH_OK, "cuBLAS"}, {"libcublasLt.so*", TORCH_OK, "cuBLASLt"},
	{"libcudnn*.so*", TORCH_OK, "cuDNN"}, {"libstdc++.so*", TORCH_OK, "C++ runtime"},
	{"libm.so*", TORCH_OK, "C runtime"}, {"libgcc_s.so*", TORCH_OK, "C runtime"},
	{"libc.so*", TORCH_OK, "C runtime"}, {"ld-linux*", TORCH_OK, "C runtime"},
	{"libpthread.so*", TORCH_OK, "C runtime"}, {"librt.so*", TORCH_OK, "C runtime"},
	{"libdl.so*", TORCH_OK, "C runtime"},
	{"libcufft*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libcurand*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libcusparse*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libcusolver*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libcutensor*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libnccl*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libnvrtc*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libnvJitLink*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libnpp*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
	{"libnvjpeg*", TORCH_COMPUTE, "a CUDA library the cuda-agent rules do not allow"},
};

#define NRULES(t) (sizeof(t) / sizeof((t)[0]))

static const struct trule *find(const struct trule *rules, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (fnmatch(rules[i].pattern, name, 0) == 0)
			return &rules[i];
	return NULL;
}

/* ---- names ------------------------------------------------------------------------------------ */

const char *torch_profile_name(enum torch_profile p)
{
	return p == TORCH_PROFILE_KERNELBENCH ? "kernelbench" : "cuda-agent";
}

int torch_profile_parse(const char *s, enum torch_profile *out, struct ca_diag *d)
{
	if (s && strcmp(s, "cuda-agent") == 0) {
		*out = TORCH_PROFILE_CUDA_AGENT;
		return 0;
	}
	if (s && strcmp(s, "kernelbench") == 0) {
		*out = TORCH_PROFILE_KERNELBENCH;
		return 0;
	}
	return ca_fail(d, CA_ERR_INVALID, "unknown rules profile '%.64s' (cuda-agent or kernelbench)",
		       s ? s : "");
}

const char *torch_verdict_code(enum torch_verdict v)
{
	switch (v) {
	case TORCH_OK: return "ok";
	case TORCH_COMPUTE: return "hack.torch_compute";
	case TORCH_TAMPERING: return "hack.harness_tampering";
	}
	return "ok";
}

bool torch_verdict_refused(enum torch_verdict v, enum torch_profile p)
{
	return v == TORCH_TAMPERING || (v == TORCH_COMPUTE && p == TORCH_PROFILE_CUDA_AGENT);
}

/* ---- decoding mangled names ------------------------------------------------------------------- */

struct part {
	const char *s;
	size_t n;
};

struct decoded {
	const char *kind;              /* "vtable for ", ...: text before the name, or "" */
	struct part parts[MAX_PARTS];  /* the qualified name's components */
	size_t nparts;
	int special;                   /* 'C': a constructor follows, 'D': a destructor */
	size_t op_part;                /* index + 1 of a part that is an operator's code ("ls") */
	bool mangled;                  /* sym began with _Z */
};

/* Reads <length><name> at *p (bounded by the string); false when there is none. */
static bool source_name(const char **p, struct part *out)
{
	const char *s = *p;
	size_t len = 0;
	if (*s < '1' || *s > '9')
		return false;
	while (*s >= '0' && *s <= '9') {
		len = len * 10 + (size_t)(*s - '0');
		if (len > MAX_NAME_LEN)
			return false;
		s++;
	}
	if (strnlen(s, len) < len)
		return false;
	out->s = s;
	out->n = len;
	*p = s + len;
	return true;
}

/* Skips ABI tags (B<source-name>) after a name. */
static void skip_abi_tags(const char **p)
{
	struct part tag;
	while (**p == 'B') {
		const char *q = *p + 1;
		if (!source_name(&q, &tag))
			return;
		*p = q;
	}
}

static bool add_part(struct decoded *dc, const char *s, size_t n)
{
	if (dc->nparts == MAX_PARTS)
		return false;
	dc->parts[dc->nparts].s = s;
	dc->parts[dc->nparts].n = n;
	dc->nparts++;
	return true;
}

static void decode(const char *sym, struct decoded *dc)
{
	static const struct {
		const char *prefix, *kind;
	} specials[] = {{"_ZTV", "vtable for "}, {"_ZTI", "typeinfo for "},
			{"_ZTS", "typeinfo name for "}, {"_ZTT", "VTT for "},
			{"_ZTH", "TLS init function for "}, {"_ZTW", "TLS wrapper function for "},
			{"_ZGV", "guard variable for "}};
	const char *p = sym;
	struct part part;

	memset(dc, 0, sizeof *dc);
	dc->kind = "";
	if (strncmp(p, "_Z", 2) != 0)
		return;
	dc->mangled = true;
	for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
		if (strncmp(p, specials[i].prefix, 4) == 0) {
			dc->kind = specials[i].kind;
			p += 2; /* the 'T'/'G' pair is skipped below */
			break;
		}
	p += 2;
	if (!dc->kind[0] && p[0] == 'T' && (p[1] == 'h' || p[1] == 'v')) {
		/* a thunk: Th <offset> _ or Tv <offset> _ <virtual offset> _, then the target */
		int offsets = p[1] == 'h' ? 1 : 2;
		dc->kind = "thunk to ";
		p += 2;
		for (int i = 0; i < offsets; i++) {
			if (*p == 'n')
				p++;
			while (*p >= '0' && *p <= '9')
				p++;
			if (*p != '_')
				return;
			p++;
		}
	} else if (!dc->kind[0] && p[0] == 'Z') {
		dc->kind = "a local entity of "; /* Z <function encoding> E <entity>: the function */
		p++;
	}
	if (*p == 'N') {
		p++;
		while (*p == 'r' || *p == 'V' || *p == 'K' || *p == 'R' || *p == 'O')
			p++;
		if (p[0] == 'S' && p[1] == 't') {
			add_part(dc, "std", 3);
			p += 2;
		}
		for (;;) {
			if (source_name(&p, &part)) {
				if (!add_part(dc, part.s, part.n))
					return;
				skip_abi_tags(&p);
			} else if (p[0] == 'C' && p[1] >= '1' && p[1] <= '5') {
				dc->special = 'C';
				return;
			} else if (p[0] == 'D' && p[1] >= '0' && p[1] <= '5') {
				dc->special = 'D';
				return;
			} else if (p[0] >= 'a' && p[0] <= 'z' && p[1] >= 'a' && p[1] <= 'z') {
				if (add_part(dc, p, 2))
					dc->op_part = dc->nparts;
				return; /* an operator (ls: <<, ix: [], cv: a conversion, ...) */
			} else {
				return; /* E (the end), template arguments, substitutions */
			}
		}
	}
	if (p[0] == 'S' && p[1] == 't') {
		add_part(dc, "std", 3);
		p += 2;
	}
	if (source_name(&p, &part))
		add_part(dc, part.s, part.n);
}

/* The decoded qualified name (without kind) into out; false when nothing was decoded. */
static bool qualified(const struct decoded *dc, char *out, size_t size)
{
	size_t off = 0;
	out[0] = '\0';
	if (dc->nparts == 0)
		return false;
	for (size_t i = 0; i < dc->nparts; i++)
		ca_appendf(out, size, &off, "%s%s%.*s", i ? "::" : "",
			   i + 1 == dc->op_part ? "operator " : "", (int)dc->parts[i].n,
			   dc->parts[i].s);
	if (dc->special && dc->nparts > 0) {
		const struct part *last = &dc->parts[dc->nparts - 1];
		ca_appendf(out, size, &off, "::%s%.*s", dc->special == 'D' ? "~" : "", (int)last->n,
			   last->s);
	}
	return true;
}

void torch_rules_demangle(const char *sym, char *out, size_t out_size)
{
	struct decoded dc;
	char q[QNAME_MAX];
	if (!out || out_size == 0)
		return;
	decode(sym ? sym : "", &dc);
	if (qualified(&dc, q, sizeof q))
		snprintf(out, out_size, "%s%s", dc.kind, q);
	else
		ca_strlcpy(out, sym ? sym : "", out_size);
}

/* ---- verdicts --------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool op_allowed(const struct part *name)
{
	char buf[256];
	const char *key = buf;
	if (name->n >= sizeof buf)
		return false;
	memcpy(buf, name->s, name->n);
	buf[name->n] = '\0';
	return bsearch(&key, allowed_ops, NRULES(allowed_ops), sizeof allowed_ops[0], cmp_str) != NULL;
}

static bool is_cuda_library_symbol(const char *sym)
{
	for (size_t i = 0; i < NRULES(cuda_lib_prefixes); i++)
		if (strncmp(sym, cuda_lib_prefixes[i], strlen(cuda_lib_prefixes[i])) == 0)
			return true;
	return false;
}

static bool part_is(const struct part *p, const char *s)
{
	return p->n == strlen(s) && memcmp(p->s, s, p->n) == 0;
}

enum torch_verdict torch_rules_symbol(const char *sym, const char **reason)
{
	const struct trule *r;
	const char *why = "allowed";
	enum torch_verdict v = TORCH_OK;
	struct decoded dc;
	char q[QNAME_MAX];

	if (!sym || !sym[0])
		goto out;
	decode(sym, &dc);
	if (dc.mangled && qualified(&dc, q, sizeof q)) {
		if (dc.nparts >= 4 && part_is(&dc.parts[0], "at") && part_is(&dc.parts[1], "_ops") &&
		    !part_is(&dc.parts[3], "redispatch")) {
			v = op_allowed(&dc.parts[2]) ? TORCH_OK : TORCH_COMPUTE;
			why = v == TORCH_OK ? "an allowed ATen operator (allocation, metadata, view, "
					      "copy)" : C_OP;
			goto out;
		}
		if ((r = find(name_rules, NRULES(name_rules), q)) != NULL) {
			v = r->verdict;
			why = r->reason;
		}
		goto out;
	}
	if ((r = find(raw_rules, NRULES(raw_rules), sym)) != NULL) {
		v = r->verdict;
		why = r->reason;
	} else if (is_cuda_library_symbol(sym) && !rules_symbol_allowed(sym, &why)) {
		v = TORCH_COMPUTE;
	}
out:
	if (reason)
		*reason = why;
	return v;
}

enum torch_verdict torch_rules_library(const char *needed, const char **reason)
{
	const struct trule *r = NULL;
	if (needed && !strchr(needed, '/'))
		r = find(library_rules, NRULES(library_rules), needed);
	if (reason)
		*reason = r ? r->reason : "a library the checks never saw (its code would run when the "
					  "module is loaded)";
	return r ? r->verdict : TORCH_TAMPERING;
}

/* Whether every ':'-separated entry of a run path is torch_lib. */
static bool runpath_allowed(const char *runpath, const char *torch_lib)
{
	const char *p = runpath;
	size_t tl = torch_lib ? strlen(torch_lib) : 0;
	while (*p) {
		size_t n = strcspn(p, ":");
		if (n > 0 && !(tl > 0 && n == tl && memcmp(p, torch_lib, n) == 0))
			return false;
		p += n;
		if (*p == ':')
			p++;
	}
	return true;
}

struct verdicts {
	enum torch_verdict worst;
	struct torch_refusal *out;
	char first_compute[TORCH_REFUSAL_MSG_MAX];
	char first_tamper[TORCH_REFUSAL_MSG_MAX];
};

static void note(struct verdicts *vs, struct rules_report *r, enum torch_verdict v,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void note(struct verdicts *vs, struct rules_report *r, enum torch_verdict v,
		 const char *fmt, ...)
{
	char line[TORCH_REFUSAL_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	if (vsnprintf(line, sizeof line, fmt, ap) < 0)
		line[0] = '\0';
	va_end(ap);
	if (r)
		rules_report_add(r, "%s", line);
	char *first = v == TORCH_TAMPERING ? vs->first_tamper : vs->first_compute;
	if (!first[0])
		ca_strlcpy(first, line, TORCH_REFUSAL_MSG_MAX);
	if (v > vs->worst)
		vs->worst = v;
}

enum torch_verdict torch_rules_check_elf(const struct elf_dynamic *e, const char *display,
					 const char *torch_lib, enum torch_profile p,
					 struct rules_report *r, struct torch_refusal *out)
{
	struct verdicts vs = {TORCH_OK, out, "", ""};
	char name[QNAME_MAX], shown[QNAME_MAX], raw[160];
	const char *why;
	enum torch_verdict v;

	display = display ? display : "the extension";
	for (size_t i = 0; i < e->num_needed; i++) {
		v = torch_rules_library(e->needed[i], &why);
		if (torch_verdict_refused(v, p))
			note(&vs, r, v, "%s needs %.200s: %s", display,
			     ca_printable(raw, e->needed[i], sizeof raw), why);
	}
	if (e->runpath && !runpath_allowed(e->runpath, torch_lib))
		note(&vs, r, TORCH_TAMPERING, "%s searches libraries in %.200s: only torch's library "
		     "directory may be a run path (libraries from elsewhere are code the checks never "
		     "saw)", display, ca_printable(raw, e->runpath, sizeof raw));
	for (size_t i = 0; i < e->num_undefined; i++) {
		const char *sym = e->undefined[i].name;
		v = torch_rules_symbol(sym, &why);
		if (!torch_verdict_refused(v, p))
			continue;
		torch_rules_demangle(sym, name, sizeof name);
		ca_printable(shown, name, sizeof shown);
		if (strcmp(name, sym) == 0)
			note(&vs, r, v, "%s imports %.300s: %s", display, shown, why);
		else
			note(&vs, r, v, "%s imports %.300s (%.120s): %s", display, shown,
			     ca_printable(raw, sym, sizeof raw), why);
	}
	if (out && vs.worst != TORCH_OK) {
		ca_strlcpy(out->code, torch_verdict_code(vs.worst), sizeof out->code);
		ca_strlcpy(out->message, vs.worst == TORCH_TAMPERING ? vs.first_tamper :
			   vs.first_compute, sizeof out->message);
	}
	return vs.worst;
}

int torch_rules_check_library(const char *so_path, const char *display, const char *torch_lib,
			      enum torch_profile p, struct torch_refusal *out, char *report,
			      size_t report_size, struct ca_diag *d)
{
	struct elf_dynamic e;
	struct rules_report r;
	enum torch_verdict v;
	int rc;

	rules_report_init(&r, report, report_size);
	rc = elf_dynamic_read_file(so_path, &e, d);
	if (rc)
		return rc;
	v = torch_rules_check_elf(&e, display, torch_lib, p, &r, out);
	rules_report_finish(&r);
	elf_dynamic_free(&e);
	if (v == TORCH_OK)
		return 0;
	return ca_fail(d, CA_ERR_REJECTED, "%s: %s", torch_verdict_code(v),
		       out ? out->message : "the extension was refused");
}
