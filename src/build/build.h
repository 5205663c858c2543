/* build: the build driver. Turns a candidate's kernels/ directory into one shared library with
 * nvcc alone, through a content-addressed cache, and checks what the library may call.
 *
 * Steps: (1) source rules on every file in kernels/ (no PyTorch headers, no dlopen, ...: see
 * build/rules.h); (2) each .cu/.cpp/.c is compiled to an object cached by the hash of (its bytes,
 * the bytes of every header in kernels/, nvcc version, flags, arch), and the host assembly the
 * compiler emitted for it is checked (no inline assembly in host code, no system call
 * instructions: build/hostasm.h); the verdict is cached with the object, a refused unit is
 * build.forbidden_source and no object of it is kept or linked; (3) objects are linked with
 * `nvcc -shared -cudart shared` plus the allowed libraries, cached by the hash of the object
 * hashes, and taken from the cache only when every unit has a clean cached verdict; (4) the
 * library's undefined dynamic symbols and DT_NEEDED entries are checked against the allowlist
 * (build/elfsyms.h, build/rules.h). The cache lives under <cache>/build/. */
#ifndef CA_BUILD_BUILD_H
#define CA_BUILD_BUILD_H

#include <limits.h>
#include <stdbool.h>

#include "util/diag.h"

#define CA_BUILD_MAX_SOURCES 64
#define CA_BUILD_MAX_SOURCE_BYTES (4u << 20)
#define CA_BUILD_LOG_MAX 8192

struct build_opts {
	const char *kernels_dir; /* candidate's kernels/ */
	const char *arch;        /* "sm_90"; NULL: from nvidia-smi, else $CUDA_AGENT_ARCH, else sm_90 */
	const char *cache_dir;   /* NULL: ca_cache_dir()/build */
	const char *nvcc;        /* NULL: $NVCC, else "nvcc" on PATH, else /usr/local/cuda/bin/nvcc */
	const char *include_dir; /* dir holding dlpack/dlpack.h and cuda_agent/abi.h */
	double timeout_s;        /* per nvcc invocation; 0: 120 s */
	int jobs;                /* parallel compiles; 0: number of CPUs */
	bool no_cache;
	/* RLIMIT_AS of each compiler process in the build's sandbox; 0: SANDBOX_BUILD_AS_BYTES
	 * (16 GiB; build/box.h) */
	unsigned long long as_bytes;
};

enum build_status {
	BUILD_OK = 0,
	BUILD_COMPILE_ERROR,  /* reason build.error */
	BUILD_RULE_VIOLATION, /* reason build.forbidden_source (source rules, host assembly) */
	BUILD_SYMBOL_VIOLATION, /* reason build.forbidden_symbol */
	BUILD_NO_SOURCES,     /* reason build.no_sources */
	BUILD_TIMEOUT,        /* reason build.timeout */
};

struct build_result {
	enum build_status status;
	char library[PATH_MAX];   /* the built .so (in the cache) when status == BUILD_OK */
	char hash[33];            /* content hash of the candidate's sources + flags */
	char arch[32];
	bool cached;              /* library came from the cache (no nvcc ran) */
	int objects_compiled;     /* translation units nvcc compiled this time */
	int objects_cached;
	bool host_linked;         /* linked by nvcc's host link line alone (build/host_link.h) */
	bool sandboxed;           /* the compilers ran in the build's sandbox (build/box.h; off
				   * only with $CUDA_AGENT_SANDBOX=0); false when none ran */
	double seconds;
	char errors[CA_BUILD_LOG_MAX];  /* the first compiler errors with file:line, or the rule or
					   symbol violations, one per line; empty when ok */
	char ptxas_info[CA_BUILD_LOG_MAX]; /* "kernel: N registers, M bytes smem, K bytes spill" lines */
};

/* Returns 0 when the build ran to a verdict (see result->status), negative on an internal error
 * (cannot run nvcc at all, I/O failure). */
int build_candidate(const struct build_opts *opts, struct build_result *result, struct ca_diag *d);

/* The GPU architecture a build uses: `arch` when given (validated), else $CUDA_AGENT_ARCH, else
 * the GPU's (nvidia-smi), else sm_90. */
int build_resolve_arch(const char *arch, char *out, size_t out_size, struct ca_diag *d);

/* A short stable reason code for a status: "ok", "build.error", ... */
const char *build_status_code(enum build_status s);

#endif
