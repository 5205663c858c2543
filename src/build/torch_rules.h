/* torch_rules: what a PyTorch-format candidate's built extension module (.so) may import
 * (docs/torch-rules.md; ARCHITECTURE.md sections 4, 6a, 6b).
 *
 * The check reads the module's dynamic linking view with the project's ELF reader (elfsyms.h)
 * before the module is ever loaded, so nothing the candidate wrote has run yet. Each undefined
 * dynamic symbol is classified:
 *
 *   TORCH_TAMPERING  reaches the machinery the harness's runtime refusal is made of, or code the
 *                    checks cannot see: ATen redispatch, the dispatcher's internals
 *                    (c10::Dispatcher, OperatorHandle, torch::Library), dispatch-key and Python
 *                    mode thread-local state (tls_set_dispatch_key_*, IncludeDispatchKeyGuard,
 *                    TorchDispatchModeTLS, PythonTorchFunctionTLS, ThreadLocalState), autograd
 *                    and TorchScript internals, dynamic loading, code patching (mprotect,
 *                    ptrace, syscall) and the Python C-API calls that run code, import modules
 *                    or reach frames and sys (PyRun_*, PyImport_*, PyEval_EvalCode*, PySys_*, ...).
 *                    Refused under every profile.
 *   TORCH_COMPUTE    torch compute: at::_ops::<op>::call for an op that is not allocation,
 *                    metadata, a view or a copy (the ops refusal.py's ALLOWED_ATEN,
 *                    ALLOWED_TENSOR and ALLOWED_TORCH name, with every overload), the per-backend
 *                    and native kernels (at::native::, at::cpu::, at::cuda::<op>, at::meta::,
 *                    at::composite*::), torch's BLAS wrappers (at::cuda::blas::), CUDA graphs,
 *                    any other at:: or torch:: function that is not listed infrastructure, and
 *                    CUDA library calls the cuda-agent rules do not allow (cuBLAS outside GEMM,
 *                    cuDNN outside convolution, cuFFT, cuRAND, ...: build/rules.h). Refused
 *                    under the cuda-agent profile, allowed under kernelbench.
 *   TORCH_OK         everything else: pybind11 and the Python C-API it needs, c10 allocation,
 *                    TensorImpl and storage, at::empty* and the allowed ops, stream and device
 *                    getters, TORCH_CHECK machinery, the C/C++ runtime, the CUDA runtime.
 *
 * DT_NEEDED entries must name torch's, CUDA's or the C/C++ runtime's libraries (another library
 * is code the check never saw: TORCH_TAMPERING); DT_RUNPATH/DT_RPATH entries must be the torch
 * library directory the caller names.
 *
 * What this cannot see: native code can still reach Python through the C-API pybind11 itself
 * needs (PyEval_GetBuiltins, PyObject_Call, ...) or write thread-local state through raw
 * pointers; ARCHITECTURE.md 6a's trust boundary, not this list, is what holds against those.
 *
 * Nothing here keeps state between calls; reports are caller-owned buffers (build/rules.h). */
#ifndef CA_BUILD_TORCH_RULES_H
#define CA_BUILD_TORCH_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "build/elfsyms.h"
#include "build/rules.h"
#include "util/diag.h"

enum torch_profile {
	TORCH_PROFILE_CUDA_AGENT = 0, /* no torch compute in forward(), cuBLAS GEMM, cuDNN conv */
	TORCH_PROFILE_KERNELBENCH,    /* torch compute allowed; tampering still refused */
};

enum torch_verdict {
	TORCH_OK = 0,
	TORCH_COMPUTE,   /* hack.torch_compute */
	TORCH_TAMPERING, /* hack.harness_tampering */
};

#define TORCH_REFUSAL_CODE_MAX 48
#define TORCH_REFUSAL_MSG_MAX 1024

/* Why a candidate is refused before it runs: the reason code and its one-line message. */
struct torch_refusal {
	char code[TORCH_REFUSAL_CODE_MAX];   /* "" (not refused), "hack.torch_compute",
						"hack.harness_tampering", "candidate.load_failed" */
	char message[TORCH_REFUSAL_MSG_MAX]; /* the first finding of that code */
};

/* "cuda-agent", "kernelbench". */
const char *torch_profile_name(enum torch_profile p);
/* The profile named s; CA_ERR_INVALID (naming the accepted ones) otherwise. */
int torch_profile_parse(const char *s, enum torch_profile *out, struct ca_diag *d);
/* "ok", "hack.torch_compute", "hack.harness_tampering". */
const char *torch_verdict_code(enum torch_verdict v);
/* Whether profile p refuses verdict v (tampering always, compute under cuda-agent). */
bool torch_verdict_refused(enum torch_verdict v, enum torch_profile p);

/* The readable prefix of a symbol into out (always NUL-terminated, truncated to fit):
 * "at::_ops::relu::call" for _ZN2at4_ops4relu4callERKNS_6TensorE, "c10::impl::
 * IncludeDispatchKeyGuard::IncludeDispatchKeyGuard" for its constructor, "vtable for X",
 * the name itself when it is not mangled. Only the nested or plain name is decoded (no
 * parameters, template arguments or substitutions); decoding stops where it would need them. */
void torch_rules_demangle(const char *sym, char *out, size_t out_size);

/* The verdict on one undefined symbol; *reason (if non-NULL) receives a static text saying why
 * (also for TORCH_OK). Profile-independent: see torch_verdict_refused. */
enum torch_verdict torch_rules_symbol(const char *sym, const char **reason);

/* The verdict on one DT_NEEDED entry. */
enum torch_verdict torch_rules_library(const char *needed, const char **reason);

/* Checks a parsed module: adds one report line per refused import ("<display>: <readable name>
 * (<raw>): <reason>"), library and run path, under profile p; torch_lib is the only directory a
 * run path may name (NULL: none may). Returns the worst refused verdict; out (if non-NULL)
 * gets its code and the first line of that verdict (unchanged when TORCH_OK). */
enum torch_verdict torch_rules_check_elf(const struct elf_dynamic *e, const char *display,
					 const char *torch_lib, enum torch_profile p,
					 struct rules_report *r, struct torch_refusal *out);

/* Reads and checks the module at so_path. 0: accepted. CA_ERR_REJECTED: refused, with out
 * filled and the report lines in report. Other negative codes: the file cannot be read or is not
 * a usable ELF file (d says why). */
int torch_rules_check_library(const char *so_path, const char *display, const char *torch_lib,
			      enum torch_profile p, struct torch_refusal *out, char *report,
			      size_t report_size, struct ca_diag *d);

#endif
