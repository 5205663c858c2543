/* box: the build's sandbox.
 * Every process the build starts with candidate input (nvcc, its
 * steps under nvcc_split, the host compiler's assembly, the precompiled header's build, the
 * link) runs through build_exec in the sandbox's build profile (sandbox_build_opts: no GPU, no
 * network, minimal /etc, the system read-only, RLIMIT_AS, a private /tmp, its own PID
 * namespace) and sees, of this host's files, only: the candidate's kernels/ and the include
 * directory (read-only), the precompiled headers (read-only), and the build's staging
 * directory (writable; made under the cache so that rename() moves what the trusted side
 * checked into the cache entry it keys itself). The toolchain's probes (toolchain.c: nvcc
 * --version, the CUDA library directories; host_link.c's dry run of a link of placeholder
 * names) take no candidate input and stay outside. $CUDA_AGENT_SANDBOX=0: build_exec is
 * ca_run (a warning is logged). A missing required layer (SANDBOX_BUILD_REQUIRED) fails the
 * process before it runs. */
#ifndef CA_BUILD_BOX_H
#define CA_BUILD_BOX_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/sandbox.h"
#include "util/diag.h"
#include "util/proc.h"

#define BUILD_BOX_MAX_BINDS   8
#define BUILD_BOX_MAX_ROOTS   12
#define BUILD_EXEC_MAX_EXTRA  68 /* CA_BUILD_MAX_SOURCES objects and a few more */
#define BUILD_EXEC_MAX_ARGS   4096

struct build_box {
	bool sandboxed;
	char staging[PATH_MAX]; /* per build, under the cache; removed by build_box_close */
	char pch_dir[PATH_MAX]; /* <cache>/nvcc-split/pch, read-only inside */
	char include_dir[PATH_MAX]; /* build_opts.include_dir resolved ("" when none) */
	uint64_t as_bytes;          /* build_opts.as_bytes; 0: the profile's */
	char path_env[PATH_MAX + 8]; /* "PATH=<the service's PATH>" */
	char *pass_env[3];           /* NVCC_CCBIN, NVCC_*_FLAGS where set (owned) */
	size_t n_pass_env;
	struct sandbox_bind binds[BUILD_BOX_MAX_BINDS];
	size_t n_binds;
	/* where a diagnostic may be located and still be shown (build_filter_log) */
	char roots[BUILD_BOX_MAX_ROOTS][PATH_MAX];
	size_t n_roots;
};

/* Makes the staging directory and the binds (kdir, include_dir: absolute, resolved). */
int build_box_open(struct build_box *bx, const char *cache, const char *kdir,
		   const char *include_dir, const char *nvcc, struct ca_diag *d);
/* Removes the staging directory and everything in it; safe to call twice. */
void build_box_close(struct build_box *bx);
/* ca_run in the build's sandbox (bx NULL or not sandboxed: ca_run itself), with extra binds
 * for this process (e.g. the objects a link reads). argv[0] a bare name is found on PATH. */
int build_exec(const struct build_box *bx, const char *const *argv, const struct ca_run_opts *ro,
	       const struct sandbox_bind *extra, size_t n_extra, struct ca_run_result *rr,
	       struct ca_diag *d);
/* The second layer behind the sandbox's view: every diagnostic of a compiler's log located in
 * a file outside the candidate's directory, the staging directory, the include directory, the
 * CUDA toolkit and the system's and gcc's headers becomes one line "<path>: diagnostic
 * withheld (a file outside the candidate's directory)", its quoted source and caret lines
 * dropped. Takes log (heap) and returns the filtered heap text (log itself when bx or log is
 * NULL; NULL when out of memory: never the unfiltered text). */
char *build_filter_log(const struct build_box *bx, char *log);
bool build_path_shown(const struct build_box *bx, const char *path);
/* A file the sandbox wrote, made the service's (owner root when running as root) before it is
 * renamed into the cache. */
void build_adopt(const char *path);

#endif
