/* Unit tests for src/build/torch_rules: profiles and codes, the decoding of mangled names, the
 * verdict on every import seen in real load_inline and workdir extensions built with torch 2.11
 * (honest ones accepted; the torch-compute and tampering routes refused with the right code),
 * DT_NEEDED and run path rules, the library check on shared objects built with `cc -shared` at
 * test time that import the same (mangled) names, and (with $CA_TEST_PYTHON, a Python with torch)
 * the supervisor's side of the Python check: torch_static_check_run and torch_build_run_checked on
 * a workdir refused before anything compiles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/torch_rules.h"
#include "eval/torch_candidate.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/proc.h"

#define TEST_NAME "torch-rules"
#include "helpers.h"

/* ---- names and profiles -------------------------------------------------------------------- */

static void test_profiles_and_codes(void **state)
{
	(void)state;
	enum torch_profile p = TORCH_PROFILE_KERNELBENCH;
	struct ca_diag d;

	assert_int_equal(torch_profile_parse("cuda-agent", &p, &d), 0);
	assert_int_equal(p, TORCH_PROFILE_CUDA_AGENT);
	assert_int_equal(torch_profile_parse("kernelbench", &p, &d), 0);
	assert_int_equal(p, TORCH_PROFILE_KERNELBENCH);
	assert_int_equal(torch_profile_parse("lenient", &p, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "cuda-agent or kernelbench"));
	assert_int_equal(torch_profile_parse(NULL, &p, &d), CA_ERR_INVALID);
	assert_string_equal(torch_profile_name(TORCH_PROFILE_CUDA_AGENT), "cuda-agent");
	assert_string_equal(torch_profile_name(TORCH_PROFILE_KERNELBENCH), "kernelbench");
	assert_string_equal(torch_verdict_code(TORCH_OK), "ok");
	assert_string_equal(torch_verdict_code(TORCH_COMPUTE), "hack.torch_compute");
	assert_string_equal(torch_verdict_code(TORCH_TAMPERING), "hack.harness_tampering");
	assert_true(torch_verdict_refused(TORCH_COMPUTE, TORCH_PROFILE_CUDA_AGENT));
	assert_false(torch_verdict_refused(TORCH_COMPUTE, TORCH_PROFILE_KERNELBENCH));
	assert_true(torch_verdict_refused(TORCH_TAMPERING, TORCH_PROFILE_KERNELBENCH));
	assert_false(torch_verdict_refused(TORCH_OK, TORCH_PROFILE_CUDA_AGENT));
}

static void test_demangle(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
		{"_ZN2at4_ops4relu4callERKNS_6TensorE", "at::_ops::relu::call"},
		{"_ZN3c104impl23IncludeDispatchKeyGuardC1ENS_14DispatchKeySetE",
		 "c10::impl::IncludeDispatchKeyGuard::IncludeDispatchKeyGuard"},
		{"_ZN3c104impl23IncludeDispatchKeyGuardD1Ev",
		 "c10::impl::IncludeDispatchKeyGuard::~IncludeDispatchKeyGuard"},
		{"_ZNK2at10TensorBase8data_ptrIfEEPT_v", "at::TensorBase::data_ptr"},
		{"_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE",
		 "torch::Library::_impl"},
		{"_ZTVN5torch8autograd12AutogradMetaE", "vtable for torch::autograd::AutogradMeta"},
		{"_ZTHN3c104impl26raw_local_dispatch_key_setE",
		 "TLS init function for c10::impl::raw_local_dispatch_key_set"},
		{"_ZN3c108toStringB5cxx11ERKNS_12OperatorNameE", "c10::toString"},
		{"_ZN3c10lsERSoRKNS_12OperatorNameE", "c10::operator ls"},
		{"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7reserveEm",
		 "std::__cxx11::basic_string"},
		{"_ZSt4cout", "std::cout"},
		{"_ZThn8_N2at6native3FooD1Ev", "thunk to at::native::Foo::~Foo"},
		{"_ZZN2at6native3fooEvE1x", "a local entity of at::native::foo"},
		{"cudaMalloc", "cudaMalloc"},
		{"_Znwm", "_Znwm"},
		{"_ZN99", "_ZN99"},          /* a length past the end */
		{"_ZN2a", "_ZN2a"},          /* truncated */
		{"", ""},
	};
	char out[256];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		torch_rules_demangle(cases[i][0], out, sizeof out);
		if (strcmp(out, cases[i][1]) != 0)
			fail_msg("%s: got '%s', want '%s'", cases[i][0], out, cases[i][1]);
	}
	/* truncation keeps the output terminated */
	torch_rules_demangle("_ZN2at4_ops4relu4callERKNS_6TensorE", out, 8);
	assert_string_equal(out, "at::_op");
	/* a huge length field does not overflow */
	torch_rules_demangle("_ZN99999999999999999999999999abcE", out, sizeof out);
	assert_string_equal(out, "_ZN99999999999999999999999999abcE");
}

/* ---- symbols --------------------------------------------------------------------------------- */

/* Every torch, pybind11, Python and cuBLAS import of the repository's example candidates
 * (examples/kernelbench, examples/workdir, the python/tests fixtures) and of three more honest
 * load_inline modules (the KernelBench prompt's elementwise add; one using TORCH_CHECK,
 * AT_DISPATCH_*, OptionalCUDAGuard, torch::empty/zeros/ones/full, at::empty_strided, views,
 * copies, item(), packed accessors, the caching allocator and std::vector returns; one with its
 * own PYBIND11_MODULE, pybind11 default arguments and cuBLAS/cuBLASLt on its own handle), as
 * `nm -D --undefined-only` lists them (torch 2.11, nvcc 13, gcc 12), plus a few runtime names. */
static const char *const honest[] = {
	"PyBaseObject_Type",
	"PyByteArray_AsString",
	"PyByteArray_Size",
	"PyByteArray_Type",
	"PyBytes_AsString",
	"PyBytes_AsStringAndSize",
	"PyBytes_Size",
	"PyCFunction_Type",
	"PyCMethod_New",
	"PyCapsule_GetPointer",
	"PyCapsule_New",
	"PyDict_Contains",
	"PyDict_Copy",
	"PyDict_DelItemString",
	"PyDict_GetItemWithError",
	"PyDict_New",
	"PyDict_Next",
	"PyDict_Size",
	"PyDict_Type",
	"PyErr_Clear",
	"PyErr_Fetch",
	"PyErr_Format",
	"PyErr_NormalizeException",
	"PyErr_Occurred",
	"PyErr_Restore",
	"PyErr_SetObject",
	"PyErr_SetString",
	"PyErr_WarnEx",
	"PyEval_AcquireThread",
	"PyEval_GetBuiltins",
	"PyEval_SaveThread",
	"PyExc_FutureWarning",
	"PyExc_ImportError",
	"PyExc_IndexError",
	"PyExc_MemoryError",
	"PyExc_OverflowError",
	"PyExc_RuntimeError",
	"PyExc_SystemError",
	"PyExc_TypeError",
	"PyExc_ValueError",
	"PyException_SetCause",
	"PyException_SetContext",
	"PyException_SetTraceback",
	"PyFloat_AsDouble",
	"PyFloat_FromDouble",
	"PyFloat_Type",
	"PyFrame_GetBack",
	"PyFrame_GetCode",
	"PyFrame_GetLineNumber",
	"PyGILState_Check",
	"PyGILState_Ensure",
	"PyGILState_GetThisThreadState",
	"PyGILState_Release",
	"PyIndex_Check",
	"PyInstanceMethod_New",
	"PyInstanceMethod_Type",
	"PyInterpreterState_Get",
	"PyInterpreterState_GetDict",
	"PyList_New",
	"PyList_Size",
	"PyLong_AsLong",
	"PyLong_AsUnsignedLong",
	"PyLong_FromSsize_t",
	"PyMem_Calloc",
	"PyMem_Free",
	"PyModuleDef_Init",
	"PyModule_AddObject",
	"PyModule_NewObject",
	"PyModule_Type",
	"PyNumber_Add",
	"PyNumber_Check",
	"PyNumber_Float",
	"PyNumber_Long",
	"PyObject_CallFunctionObjArgs",
	"PyObject_CallObject",
	"PyObject_ClearWeakRefs",
	"PyObject_GC_UnTrack",
	"PyObject_GetAttrString",
	"PyObject_GetItem",
	"PyObject_HasAttrString",
	"PyObject_IsInstance",
	"PyObject_Repr",
	"PyObject_SetAttrString",
	"PyObject_SetItem",
	"PyObject_Str",
	"PyProperty_Type",
	"PyThreadState_Clear",
	"PyThreadState_DeleteCurrent",
	"PyThreadState_Get",
	"PyThreadState_New",
	"PyThread_tss_create",
	"PyThread_tss_delete",
	"PyThread_tss_get",
	"PyThread_tss_set",
	"PyTuple_GetItem",
	"PyTuple_New",
	"PyTuple_SetItem",
	"PyTuple_Size",
	"PyType_FromSpec",
	"PyType_IsSubtype",
	"PyType_Ready",
	"PyType_Type",
	"PyUnicode_AsEncodedString",
	"PyUnicode_AsUTF8AndSize",
	"PyUnicode_AsUTF8String",
	"PyUnicode_DecodeUTF8",
	"PyUnicode_FromString",
	"PyWeakref_NewRef",
	"Py_GetVersion",
	"_PyObject_GetDictPtr",
	"_PyObject_New",
	"_PyThreadState_UncheckedGet",
	"_PyType_Lookup",
	"_Py_Dealloc",
	"_Py_NoneStruct",
	"_Py_NotImplementedStruct",
	"_ZN2at4_ops10empty_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_IbES5_INS6_12MemoryFormatEE",
	"_ZN2at4_ops10select_int4callERKNS_6TensorElN3c106SymIntE",
	"_ZN2at4_ops10zeros_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_IbES5_INS6_12MemoryFormatEE",
	"_ZN2at4_ops11squeeze_dim4callERKNS_6TensorEl",
	"_ZN2at4_ops12fill__Scalar4callERNS_6TensorERKN3c106ScalarE",
	"_ZN2at4_ops12split_Tensor4callERKNS_6TensorEN3c106SymIntEl",
	"_ZN2at4_ops13empty_strided4callEN3c108ArrayRefINS2_6SymIntEEES5_St8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbE",
	"_ZN2at4_ops13transpose_int4callERKNS_6TensorEll",
	"_ZN2at4_ops15to_dtype_layout4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_IbEbbS5_INS6_12MemoryFormatEE",
	"_ZN2at4_ops18flatten_using_ints4callERKNS_6TensorEll",
	"_ZN2at4_ops6unfold4callERKNS_6TensorElll", /* x.unfold(d, size, step): a view */
	"_ZN2at4_ops13record_stream4callERNS_6TensorEN3c106StreamE", /* a side stream's bookkeeping */
	"_ZN2at4_ops19empty_memory_format4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbES6_INS2_12MemoryFormatEE",
	"_ZN2at4_ops4full4callEN3c108ArrayRefINS2_6SymIntEEERKNS2_6ScalarESt8optionalINS2_10ScalarTypeEES9_INS2_6LayoutEES9_INS2_6DeviceEES9_IbE",
	"_ZN2at4_ops4ones4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbE",
	"_ZN2at4_ops4view4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEE",
	"_ZN2at4_ops5chunk4callERKNS_6TensorEll",
	"_ZN2at4_ops5clone4callERKNS_6TensorESt8optionalIN3c1012MemoryFormatEE",
	"_ZN2at4_ops5copy_4callERNS_6TensorERKS2_b",
	"_ZN2at4_ops5zero_4callERNS_6TensorE",
	"_ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbE",
	"_ZN2at4_ops6expand4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEEb",
	"_ZN2at4_ops6narrow4callERKNS_6TensorElN3c106SymIntES6_",
	"_ZN2at4_ops7permute4callERKNS_6TensorEN3c108ArrayRefIlEE",
	"_ZN2at4_ops7reshape4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEE",
	"_ZN2at4_ops8to_dtype4callERKNS_6TensorEN3c1010ScalarTypeEbbSt8optionalINS5_12MemoryFormatEE",
	"_ZN2at4_ops9new_empty4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEESt8optionalINS5_10ScalarTypeEES9_INS5_6LayoutEES9_INS5_6DeviceEES9_IbE",
	"_ZN2at4_ops9unsqueeze4callERKNS_6TensorEl",
	"_ZN2at4cuda24getCurrentCUDABlasHandleEv",
	"_ZN2at4cuda26getCurrentDevicePropertiesEv",
	"_ZN2at4cuda4blas19_cublasGetErrorEnumE14cublasStatus_t",
	"_ZN3c1010TensorImpl17set_autograd_metaESt10unique_ptrINS_21AutogradMetaInterfaceESt14default_deleteIS2_EE",
	"_ZN3c1015SmallVectorBaseIjE8grow_podEPKvmm",
	"_ZN3c1019UndefinedTensorImpl10_singletonE",
	"_ZN3c1021AutogradMetaInterfaceD2Ev",
	"_ZN3c1021throwNullDataPtrErrorEv",
	"_ZN3c1021warnDeprecatedDataPtrEv",
	"_ZN3c104cuda12device_countEv",
	"_ZN3c104cuda14ExchangeDeviceEa",
	"_ZN3c104cuda14MaybeSetDeviceEa",
	"_ZN3c104cuda17getStreamFromPoolEba",
	"_ZN3c104cuda17getStreamFromPoolEia",
	"_ZN3c104cuda20CUDACachingAllocator9allocatorE",
	"_ZN3c104cuda20getCurrentCUDAStreamEa",
	"_ZN3c104cuda20getDefaultCUDAStreamEa",
	"_ZN3c104cuda20setCurrentCUDAStreamENS0_10CUDAStreamE",
	"_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb",
	"_ZN3c104cuda9GetDeviceEPa",
	"_ZN3c104cuda9SetDeviceEab",
	"_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE",
	"_ZN3c104impl23ExcludeDispatchKeyGuardD1Ev",
	"_ZN3c104impl3cow15is_cow_data_ptrERKNS_7DataPtrE",
	"_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE",
	"_ZN3c104impl8GPUTrace13gpuTraceStateE",
	"_ZN3c104impl8GPUTrace9haveStateE",
	"_ZN3c104warnERKNS_7WarningE",
	"_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
	"_ZN3c106SymInt19promote_to_negativeEv",
	"_ZN3c106SymIntC1ENS_13intrusive_ptrINS_11SymNodeImplENS_6detail34intrusive_target_default_null_typeIS2_EEEE",
	"_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
	"_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
	"_ZN3c106detail19maybe_wrap_dim_slowIlEET_S2_S2_b",
	"_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
	"_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_S2_",
	"_ZN3c107WarningC1ESt7variantIJNS0_11UserWarningENS0_18DeprecationWarningEEERKNS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb",
	"_ZN3c10lsERSoNS_10DeviceTypeE",
	"_ZN3c10lsERSoRKNS_6DeviceE",
	"_ZN5torch16PyWarningHandlerC1Ev",
	"_ZN5torch16PyWarningHandlerD1Ev",
	"_ZN5torch29translate_exception_to_pythonERKNSt15__exception_ptr13exception_ptrE",
	"_ZN6caffe28TypeMeta13typeMetaDatasEv",
	"_ZN6caffe28TypeMeta26error_unsupported_typemetaES0_",
	"_ZN8pybind116detail11type_casterIN2at6TensorEvE4castERKS3_NS_19return_value_policyENS_6handleE",
	"_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb",
	"_ZNK2at10TensorBase16mutable_data_ptrIfEEPT_v",
	"_ZNK2at10TensorBase21__dispatch_contiguousEN3c1012MemoryFormatE",
	"_ZNK2at10TensorBase8data_ptrIN3c104HalfEEEPT_v",
	"_ZNK2at10TensorBase8data_ptrIdEEPT_v",
	"_ZNK2at10TensorBase8data_ptrIfEEPT_v",
	"_ZNK2at6Tensor4itemIfEET_v",
	"_ZNK3c1010TensorImpl15decref_pyobjectEv",
	"_ZNK3c1010TensorImpl15incref_pyobjectEv",
	"_ZNK3c1010TensorImpl27throw_data_ptr_access_errorEv",
	"_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv",
	"_ZNK3c1017SymbolicShapeMeta18init_is_contiguousEv",
	"_ZNK3c104cuda10CUDAStream11synchronizeEv",
	"_ZNK3c104cuda10CUDAStream5queryEv",
	"_ZNK3c104cuda10CUDAStream6streamEv",
	"_ZNK3c105Error4whatEv",
	"_ZNK3c106IValue23reportToTensorTypeErrorEv",
	"_ZNK3c106SymInt9guard_intEPKcl",
	"_ZNK3c107SymBool10guard_boolEPKcl",
	"_ZNK3c107SymBool14guard_or_falseEPKcl",
	"_ZNK3c108SymFloat11guard_floatEPKcl",
	"_ZTIN3c105ErrorE",
	"_ZTVN3c1021AutogradMetaInterfaceE",
	"_ZTVN3c105ErrorE",
	"_ZTVN5torch8autograd12AutogradMetaE",
	"cublasCreate_v2",
	"cublasLtCreate",
	"cublasLtDestroy",
	"cublasSetMathMode",
	"cublasSetStream_v2",
	"cublasSgemm_v2",
	"cudaLaunchKernel",
	"cudaMemsetAsync",
	"cudaGetLastError",
	"__cudaRegisterFunction",
	"memcpy",
	"fprintf",
	"__cxa_throw",
	"_ZdlPvm",
	"_Znwm",
	"cuTensorMapEncodeTiled",
};

static void test_honest_imports(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof honest / sizeof honest[0]; i++) {
		const char *why = NULL;
		enum torch_verdict v = torch_rules_symbol(honest[i], &why);
		if (v != TORCH_OK)
			fail_msg("honest import %s refused (%s): %s", honest[i], torch_verdict_code(v),
				 why);
		assert_non_null(why);
	}
}

struct refused {
	const char *sym;
	enum torch_verdict verdict;
	const char *why; /* a substring of the reason */
};

/* The imports of the refused routes (built with load_inline on torch 2.11). */
static const struct refused refused[] = {
	{"_ZN2at4_ops4relu4callERKNS_6TensorE", TORCH_COMPUTE, "torch compute from C++"},
	{"_ZN2at4_ops6matmul4callERKNS_6TensorES4_", TORCH_COMPUTE, "torch compute"},
	{"_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE", TORCH_COMPUTE, "compute"},
	{"_ZN2at4_ops3sum4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEE", TORCH_COMPUTE, ""},
	{"_ZN2at4_ops2mm4callERKNS_6TensorES4_", TORCH_COMPUTE, ""},
	{"_ZN2at4_ops5index4callERKNS_6TensorE", TORCH_COMPUTE, ""}, /* gather: not a view */
	{"_ZN2at6native4reluERKNS_6TensorE", TORCH_COMPUTE, "torch kernel called directly"},
	{"_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE", TORCH_COMPUTE, "directly"},
	{"_ZN2at4cuda3addERKNS_6TensorES3_RKN3c106ScalarE", TORCH_COMPUTE, "not on the list"},
	{"_ZN2at25compositeexplicitautograd4reluERKNS_6TensorE", TORCH_COMPUTE, "directly"},
	{"_ZN2at4cuda4blas4gemmIffLPf0EEEvcclllNS_10OpMathTypeIT_E4typeEPKS5_lS9_lS7_PT0_l",
	 TORCH_COMPUTE, "cuBLAS wrappers"},
	{"_ZN2at4cuda9CUDAGraph6replayEv", TORCH_COMPUTE, "CUDA graphs"},
	{"_ZN2at6matmulERKNS_6TensorES2_", TORCH_COMPUTE, "not on the list"},
	{"_ZN2at18TensorIteratorBase5buildERNS_20TensorIteratorConfigE", TORCH_COMPUTE, ""},
	{"_ZN5torch2nn10LinearImplC1ERKNS0_13LinearOptionsE", TORCH_COMPUTE, "not on the list"},
	{"cublasSaxpy_v2", TORCH_COMPUTE, "cuBLAS may be used for matrix multiplication only"},
	{"cufftExecC2C", TORCH_COMPUTE, "only cuBLAS"},
	{"cudnnSoftmaxForward", TORCH_COMPUTE, "convolution only"},
	{"_ZN2at4_ops4relu10redispatchEN3c1014DispatchKeySetERKNS_6TensorE", TORCH_TAMPERING,
	 "redispatch"},
	{"_ZN2at4_ops5empty10redispatchEN3c1014DispatchKeySetE", TORCH_TAMPERING, "redispatch"},
	{"_ZN3c1010Dispatcher13realSingletonEv", TORCH_TAMPERING, "dispatcher"},
	{"_ZN3c1010Dispatcher17findSchemaOrThrowEPKcS2_", TORCH_TAMPERING, "dispatcher"},
	{"_ZN3c1014OperatorHandleD1Ev", TORCH_TAMPERING, "dispatcher"},
	{"_ZNK3c104impl13OperatorEntry11reportErrorENS_11DispatchKeyE", TORCH_TAMPERING, ""},
	{"_ZN5torch7LibraryC1ENS0_4KindENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt8optionalIN3c1011DispatchKeyEEPKcj",
	 TORCH_TAMPERING, "dispatcher"},
	{"_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE", TORCH_TAMPERING,
	 ""},
	{"_ZN3c104impl29tls_set_dispatch_key_excludedENS_11DispatchKeyEb", TORCH_TAMPERING,
	 "switch off"},
	{"_ZN3c104impl29tls_set_dispatch_key_includedENS_11DispatchKeyEb", TORCH_TAMPERING, ""},
	{"_ZN3c104impl33_force_tls_local_dispatch_key_setENS0_19LocalDispatchKeySetE",
	 TORCH_TAMPERING, ""},
	{"_ZN3c104impl26raw_local_dispatch_key_setE", TORCH_TAMPERING, "dispatch keys"},
	{"_ZTWN3c104impl26raw_local_dispatch_key_setE", TORCH_TAMPERING, ""},
	{"_ZN3c104impl23IncludeDispatchKeyGuardC1ENS_14DispatchKeySetE", TORCH_TAMPERING, ""},
	{"_ZN3c104impl20TorchDispatchModeTLS9pop_stackEv", TORCH_TAMPERING, "Python modes"},
	{"_ZN2at4impl22PythonTorchFunctionTLS18set_disabled_stateENS0_26TorchFunctionDisabledStateE",
	 TORCH_TAMPERING, ""},
	{"_ZN5torch42handle_torch_function_no_python_arg_parserEN3c108ArrayRefIP7_objectEES3_S3_PKcS3_S6_NS_17TorchFunctionNameE",
	 TORCH_TAMPERING, ""},
	{"_ZTIN2at4impl26TorchFunctionDisabledStateE", TORCH_TAMPERING, ""},
	{"_ZN2at16ThreadLocalState19setThreadLocalStateERKS0_", TORCH_TAMPERING, ""},
	{"_ZN5torch8autograd6Engine11thread_initEiRKSt10shared_ptrINS0_10ReadyQueueEEb",
	 TORCH_TAMPERING, "autograd"},
	{"_ZN5torch3jit10tensorexpr16TensorExprKernel7compileEv", TORCH_TAMPERING, "TorchScript"},
	{"dlopen", TORCH_TAMPERING, "dynamic loading"},
	{"dlsym", TORCH_TAMPERING, "dynamic loading"},
	{"mprotect", TORCH_TAMPERING, "patch"},
	{"syscall", TORCH_OK, ""},
	{"PyRun_SimpleStringFlags", TORCH_TAMPERING, "runs code"},
	{"PyRun_StringFlags", TORCH_TAMPERING, ""},
	{"PyImport_ImportModule", TORCH_TAMPERING, "imports modules"},
	{"PyImport_AddModule", TORCH_TAMPERING, ""},
	{"PyEval_GetGlobals", TORCH_TAMPERING, ""},
	{"PyEval_GetFrame", TORCH_TAMPERING, ""},
	{"PyEval_SetTrace", TORCH_TAMPERING, ""},
	{"PyEval_EvalCode", TORCH_TAMPERING, ""},
	{"Py_CompileStringExFlags", TORCH_TAMPERING, ""},
	{"PySys_GetObject", TORCH_TAMPERING, "sys"},
	{"PyThreadState_GetFrame", TORCH_TAMPERING, ""},
	{"Py_AddPendingCall", TORCH_TAMPERING, ""},
};

static void test_refused_imports(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		const char *why = NULL;
		enum torch_verdict v = torch_rules_symbol(refused[i].sym, &why);
		if (v != refused[i].verdict)
			fail_msg("%s: got %s, want %s (%s)", refused[i].sym, torch_verdict_code(v),
				 torch_verdict_code(refused[i].verdict), why);
		if (!strstr(why, refused[i].why))
			fail_msg("%s: reason '%s' lacks '%s'", refused[i].sym, why, refused[i].why);
	}
	assert_int_equal(torch_rules_symbol("", NULL), TORCH_OK);
	assert_int_equal(torch_rules_symbol(NULL, NULL), TORCH_OK);
}

static void test_libraries(void **state)
{
	(void)state;
	static const char *const ok[] = {"libc10.so", "libc10_cuda.so", "libtorch.so",
					 "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so",
					 "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
					 "libcudnn.so.9", "libstdc++.so.6", "libm.so.6", "libc.so.6",
					 "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libcuda.so.1"};
	const char *why;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (torch_rules_library(ok[i], &why) != TORCH_OK)
			fail_msg("%s refused: %s", ok[i], why);
	assert_int_equal(torch_rules_library("libcufft.so.12", &why), TORCH_COMPUTE);
	assert_int_equal(torch_rules_library("libnvrtc.so.13", &why), TORCH_COMPUTE);
	assert_int_equal(torch_rules_library("libevil.so", &why), TORCH_TAMPERING);
	assert_non_null(strstr(why, "never saw"));
	assert_int_equal(torch_rules_library("/tmp/x/libc10.so", &why), TORCH_TAMPERING);
	assert_int_equal(torch_rules_library(NULL, &why), TORCH_TAMPERING);
}

/* ---- whole libraries ------------------------------------------------------------------------- */

/* Builds tmpdir/name from C source with `cc -shared -fPIC` (undefined references allowed). */
static void cc_shared(const char *name, const char *src, const char *extra)
{
	char path[PATH_MAX], out[PATH_MAX], flags[PATH_MAX + 64];
	struct ca_diag d;
	struct ca_run_result res = {0};
	tmp_path(path, sizeof path, "src.c");
	tmp_path(out, sizeof out, name);
	assert_int_equal(ca_write_file_atomic(path, src, strlen(src), &d), 0);
	snprintf(flags, sizeof flags, "%s", extra ? extra : "-O0");
	const char *argv[] = {"cc", "-shared", "-fPIC", "-o", out, path, flags, NULL};
	struct ca_run_opts ro = {.timeout_s = 60.0};
	assert_int_equal(ca_run(argv, &ro, &res, &d), 0);
	if (res.exit_code != 0)
		fail_msg("cc failed: %s", res.err ? res.err : "");
	ca_run_result_free(&res);
}

#define IMPORT(c_name, mangled) "extern void " c_name "(void) __asm__(\"" mangled "\");\n"

static const char lib_compute[] =
	IMPORT("relu_call", "_ZN2at4_ops4relu4callERKNS_6TensorE")
	IMPORT("empty_like", "_ZN2at4_ops10empty_like4callERKNS_6TensorE")
	IMPORT("stream", "_ZN3c104cuda20getCurrentCUDAStreamEa")
	"void f(void) { relu_call(); empty_like(); stream(); }\n";

static const char lib_tamper[] =
	IMPORT("relu_call", "_ZN2at4_ops4relu4callERKNS_6TensorE")
	IMPORT("pop", "_ZN3c104impl20TorchDispatchModeTLS9pop_stackEv")
	"#include <dlfcn.h>\n"
	"void f(void) { relu_call(); pop(); (void)dlsym(0, \"x\"); }\n";

static const char lib_clean[] =
	IMPORT("empty_like", "_ZN2at4_ops10empty_like4callERKNS_6TensorE")
	IMPORT("check", "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
	"#include <string.h>\n"
	"void f(char *p) { empty_like(); check(); memset(p, 0, 4); }\n";

static void test_check_library(void **state)
{
	(void)state;
	char path[PATH_MAX], report[8192];
	struct torch_refusal out;
	struct ca_diag d;

	cc_shared("clean.so", lib_clean, NULL);
	tmp_path(path, sizeof path, "clean.so");
	memset(&out, 0, sizeof out);
	int rc = torch_rules_check_library(path, "clean.so", NULL, TORCH_PROFILE_CUDA_AGENT, &out,
					   report, sizeof report, &d);
	if (rc != 0)
		fail_msg("clean module refused: %s", report);
	assert_string_equal(out.code, "");
	assert_string_equal(report, "");

	cc_shared("compute.so", lib_compute, NULL);
	tmp_path(path, sizeof path, "compute.so");
	assert_int_equal(torch_rules_check_library(path, "compute.so", NULL,
						   TORCH_PROFILE_CUDA_AGENT, &out, report,
						   sizeof report, &d), CA_ERR_REJECTED);
	assert_string_equal(out.code, "hack.torch_compute");
	assert_non_null(strstr(out.message, "compute.so imports at::_ops::relu::call "
					    "(_ZN2at4_ops4relu4callERKNS_6TensorE): torch compute"));
	assert_null(strstr(report, "empty_like"));
	assert_null(strstr(report, "getCurrentCUDAStream"));
	assert_non_null(strstr(d.msg, "hack.torch_compute"));
	/* the kernelbench profile allows torch compute */
	memset(&out, 0, sizeof out);
	assert_int_equal(torch_rules_check_library(path, "compute.so", NULL,
						   TORCH_PROFILE_KERNELBENCH, &out, report,
						   sizeof report, &d), 0);
	assert_string_equal(out.code, "");

	cc_shared("tamper.so", lib_tamper, NULL);
	tmp_path(path, sizeof path, "tamper.so");
	for (int prof = 0; prof < 2; prof++) {
		memset(&out, 0, sizeof out);
		assert_int_equal(torch_rules_check_library(path, "tamper.so", NULL,
							   (enum torch_profile)prof, &out, report,
							   sizeof report, &d), CA_ERR_REJECTED);
		assert_string_equal(out.code, "hack.harness_tampering");
		assert_non_null(strstr(report, "TorchDispatchModeTLS::pop_stack"));
		assert_non_null(strstr(report, "tamper.so imports dlsym: dynamic loading"));
		assert_true(strstr(report, "relu") ? prof == 0 : prof == 1);
	}
	/* the message of the worst verdict is a tampering line, whatever the import order */
	assert_null(strstr(out.message, "relu"));

	/* a run path other than torch's library directory, and a library of the candidate's own */
	cc_shared("libown.so", "int own(void) { return 1; }\n", NULL);
	char flags[PATH_MAX * 2 + 64];
	snprintf(flags, sizeof flags, "-Wl,-rpath,%s:/opt/torch/lib,-L%s,-lown", tmpdir, tmpdir);
	cc_shared("rpath.so", "int own(void);\nint f(void) { return own(); }\n", flags);
	tmp_path(path, sizeof path, "rpath.so");
	memset(&out, 0, sizeof out);
	assert_int_equal(torch_rules_check_library(path, "rpath.so", "/opt/torch/lib",
						   TORCH_PROFILE_KERNELBENCH, &out, report,
						   sizeof report, &d), CA_ERR_REJECTED);
	assert_string_equal(out.code, "hack.harness_tampering");
	assert_non_null(strstr(report, "rpath.so needs libown.so: a library the checks never saw"));
	assert_non_null(strstr(report, "searches libraries in"));

	snprintf(flags, sizeof flags, "-Wl,-rpath,/opt/torch/lib");
	cc_shared("torchpath.so", lib_clean, flags);
	tmp_path(path, sizeof path, "torchpath.so");
	assert_int_equal(torch_rules_check_library(path, "torchpath.so", "/opt/torch/lib",
						   TORCH_PROFILE_CUDA_AGENT, &out, report,
						   sizeof report, &d), 0);
	assert_int_equal(torch_rules_check_library(path, "torchpath.so", NULL,
						   TORCH_PROFILE_CUDA_AGENT, &out, report,
						   sizeof report, &d), CA_ERR_REJECTED);

	/* not a library */
	tmp_path(path, sizeof path, "src.c");
	assert_true(torch_rules_check_library(path, "x", NULL, TORCH_PROFILE_CUDA_AGENT, &out,
					      report, sizeof report, &d) < 0);
	tmp_path(path, sizeof path, "nothere.so");
	assert_int_equal(torch_rules_check_library(path, "x", NULL, TORCH_PROFILE_CUDA_AGENT, &out,
						   report, sizeof report, &d), CA_ERR_NOTFOUND);
}

/* A report too small for every line still ends in "... and N more" and stays terminated. */
static void test_small_report(void **state)
{
	(void)state;
	char path[PATH_MAX], report[200];
	struct torch_refusal out = {"", ""};
	struct ca_diag d;
	cc_shared("tamper2.so", lib_tamper, NULL);
	tmp_path(path, sizeof path, "tamper2.so");
	assert_int_equal(torch_rules_check_library(path, "tamper2.so", NULL,
						   TORCH_PROFILE_CUDA_AGENT, &out, report,
						   sizeof report, &d), CA_ERR_REJECTED);
	assert_true(strlen(report) < sizeof report);
	assert_non_null(strstr(report, "more"));
	assert_string_equal(out.code, "hack.harness_tampering");
}

static void write_in(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), &d), 0);
}

static void expect_verdict(const char *py, const char *path, bool workdir, enum torch_profile p,
			 const char *code, const char *message_start)
{
	struct torch_refusal r = {"x", "x"};
	struct ca_diag d;
	int rc = torch_static_check_run(py, path, workdir, p, 120.0, &r, &d);
	if (rc != 0)
		fail_msg("static check of %s could not run: %s", path, d.msg);
	if (strcmp(r.code, code) != 0 || strncmp(r.message, message_start, strlen(message_start)))
		fail_msg("%s: got '%s' '%s', want '%s' '%s...'", path, r.code, r.message, code,
			 message_start);
}

static void test_python_checks(void **state)
{
	(void)state;
	const char *py = getenv("CA_TEST_PYTHON");
	const char *old_root = getenv("CUDA_AGENT_ROOT");
	char *saved_root = old_root ? strdup(old_root) : NULL;
	char cwd[PATH_MAX], script[PATH_MAX], path[PATH_MAX], wd[PATH_MAX], cache[PATH_MAX];
	struct ca_diag d;

	if (!py || !py[0]) {
		printf("  skipped: no Python with torch (CA_TEST_PYTHON unset)\n");
		free(saved_root);
		skip();
	}
	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(ca_path_join(script, sizeof script, cwd,
				      "python/cuda_agent_bridge/static_check.py"), 0);
	if (!ca_is_file(script))
		fail_msg("%s is missing: run from the repository root", script);
	setenv("CUDA_AGENT_ROOT", cwd, 1);

	write_in(tmpdir, "ok.py", "import torch\nimport torch.nn as nn\n"
				  "class ModelNew(nn.Module):\n    def forward(self, x):\n"
				  "        return x.contiguous()\n");
	tmp_path(path, sizeof path, "ok.py");
	expect_verdict(py, path, false, TORCH_PROFILE_CUDA_AGENT, "", "");
	write_in(tmpdir, "bad.py", "import torch\nimport gc\n");
	tmp_path(path, sizeof path, "bad.py");
	expect_verdict(py, path, false, TORCH_PROFILE_KERNELBENCH, "hack.harness_tampering",
		     "bad.py:2: import of gc is not allowed in candidate code");
	write_in(tmpdir, "relu.py", "import torch\nimport torch.nn as nn\n"
				    "class ModelNew(nn.Module):\n    def forward(self, x):\n"
				    "        return torch.relu(x)\n");
	tmp_path(path, sizeof path, "relu.py");
	expect_verdict(py, path, false, TORCH_PROFILE_CUDA_AGENT, "hack.torch_compute",
		     "relu.py:5: torch.relu() is torch compute");
	expect_verdict(py, path, false, TORCH_PROFILE_KERNELBENCH, "", "");
	write_in(tmpdir, "syntax.py", "def f(:\n");
	tmp_path(path, sizeof path, "syntax.py");
	expect_verdict(py, path, false, TORCH_PROFILE_CUDA_AGENT, "candidate.load_failed",
		     "syntax.py:1: not valid Python");

	/* a workdir refused by torch_build's own check: nothing is compiled */
	tmp_path(wd, sizeof wd, "wd");
	assert_int_equal(ca_mkdirs(wd, 0755, &d), 0);
	assert_int_equal(ca_path_join(path, sizeof path, wd, "kernels"), 0);
	assert_int_equal(ca_mkdirs(path, 0755, &d), 0);
	write_in(wd, "binding.cpp", "#include \"binding_registry.h\"\n");
	write_in(wd, "binding_registry.h", "#pragma once\n");
	write_in(wd, "kernels/k.cu", "__global__ void k() {}\n");
	write_in(wd, "model_new.py", "import torch\nx = torch._C\n");
	expect_verdict(py, wd, true, TORCH_PROFILE_KERNELBENCH, "hack.harness_tampering",
		     "model_new.py:2: torch._C is not allowed");
	tmp_path(cache, sizeof cache, "cache");
	const char *args[] = {"workdir", wd, "--cache", cache, "--arch", "sm_90", NULL};
	struct build_result res;
	struct torch_refusal refusal;
	json_t *modules = (json_t *)1;
	memset(&res, 0, sizeof res);
	assert_int_equal(torch_build_run_checked(py, args, 300.0, TORCH_PROFILE_CUDA_AGENT, &res,
						 &modules, &refusal, &d), 0);
	assert_int_equal(res.status, BUILD_RULE_VIOLATION);
	assert_null(modules);
	assert_string_equal(refusal.code, "hack.harness_tampering");
	assert_non_null(strstr(refusal.message, "model_new.py:2: torch._C"));
	assert_non_null(strstr(res.errors, "model_new.py:2: torch._C"));
	assert_false(ca_is_dir(cache));
	memset(&res, 0, sizeof res);
	assert_int_equal(torch_build_run(py, args, 300.0, &res, &modules, &d), 0);
	assert_int_equal(res.status, BUILD_RULE_VIOLATION);
	assert_string_equal(build_status_code(res.status), "build.forbidden_source");

	/* inline builds (pybind11 only: seconds): the symbol check of what was built */
	static const char specs[] =
		"{\"specs\": [{\"name\": \"light_ok\", \"cpp_sources\": [\"#include "
		"<pybind11/pybind11.h>\\nint add_ints(int a, int b) { return a + b; }\"], "
		"\"cuda_sources\": [], \"functions\": {\"add_ints\": \"add_ints\"}, "
		"\"extra_cflags\": [], \"extra_cuda_cflags\": [], \"extra_ldflags\": [], "
		"\"extra_include_paths\": [], \"with_cuda\": null, "
		"\"with_pytorch_error_handling\": false, \"no_implicit_headers\": true}, "
		"{\"name\": \"light_dl\", \"cpp_sources\": [\"#include <pybind11/pybind11.h>\\n"
		"#include <dlfcn.h>\\nint add_ints(int a, int b) { return dlsym(RTLD_DEFAULT, "
		"\\\"x\\\") ? a : b; }\"], \"cuda_sources\": [], \"functions\": "
		"{\"add_ints\": \"add_ints\"}, \"extra_cflags\": [], \"extra_cuda_cflags\": [], "
		"\"extra_ldflags\": [], \"extra_include_paths\": [], \"with_cuda\": null, "
		"\"with_pytorch_error_handling\": false, \"no_implicit_headers\": true}]}";
	write_in(tmpdir, "specs.json", specs);
	tmp_path(path, sizeof path, "specs.json");
	const char *inline_args[] = {"inline", path, "--cache", cache, "--arch", "sm_90", NULL};
	memset(&res, 0, sizeof res);
	/* (tampering is refused under every profile; the kernelbench profile would first refuse
	 * these pybind11-only specs for defining no __global__ kernel) */
	int rc = torch_build_run_checked(py, inline_args, 600.0, TORCH_PROFILE_CUDA_AGENT, &res,
					 &modules, &refusal, &d);
	if (rc)
		fail_msg("torch_build could not run: %s", d.msg);
	if (res.status != BUILD_SYMBOL_VIOLATION)
		fail_msg("status %s: %s", build_status_code(res.status), res.errors);
	assert_null(modules);
	assert_string_equal(refusal.code, "hack.harness_tampering");
	assert_non_null(strstr(refusal.message, "light_dl.so imports dlsym: dynamic loading"));
	assert_null(strstr(res.errors, "light_ok"));
	/* the clean module alone (cached now) passes, run path and all */
	const char *end = strstr(specs, ", {\"name\": \"light_dl\"");
	assert_non_null(end);
	char ok_specs[sizeof specs];
	snprintf(ok_specs, sizeof ok_specs, "%.*s]}", (int)(end - specs), specs);
	write_in(tmpdir, "specs.json", ok_specs);
	memset(&res, 0, sizeof res);
	assert_int_equal(torch_build_run_checked(py, inline_args, 600.0, TORCH_PROFILE_CUDA_AGENT,
						 &res, &modules, &refusal, &d), 0);
	if (res.status != BUILD_OK)
		fail_msg("status %s: %s", build_status_code(res.status), res.errors);
	assert_string_equal(refusal.code, "");
	assert_non_null(modules);
	assert_int_equal(json_array_size(modules), 1);
	json_decref(modules);

	if (saved_root)
		setenv("CUDA_AGENT_ROOT", saved_root, 1);
	else
		unsetenv("CUDA_AGENT_ROOT");
	free(saved_root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_profiles_and_codes),
		cmocka_unit_test(test_demangle),
		cmocka_unit_test(test_honest_imports),
		cmocka_unit_test(test_refused_imports),
		cmocka_unit_test(test_libraries),
		cmocka_unit_test(test_check_library),
		cmocka_unit_test(test_small_report),
		cmocka_unit_test(test_python_checks),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
