/* build_int: what the build driver's parts share (not for other subsystems): the toolchain
 * (toolchain.c: arch, nvcc, CUDA libraries), compiling units in parallel with the host assembly
 * check and the object cache (compile.c), and the driver (build.c). */
#ifndef CA_BUILD_BUILD_INT_H
#define CA_BUILD_BUILD_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "build/box.h"
#include "build/build.h"
#include "util/hash.h"
#include "util/proc.h"


#define KEY_VERSION "ca-build-2" /* 2: objects carry a host assembly verdict */
#define VERDICT_CLEAN "ca-hostasm-1 clean\n"
#define VERDICT_REFUSED "ca-hostasm-1 refused\n"
#define VERDICT_MAX (64u << 10)
#define MAX_TREE_BYTES (64u << 20) /* all files under kernels/ together */
#define MAX_ERROR_LINES 20
#define MAX_ERROR_LINE_LEN 400
#define DEFAULT_TIMEOUT_S 120.0
#define MAX_JOBS 64
#define DEFAULT_ARCH "sm_90"
#define BUILD_NVCC_VERSION_MAX 1024 /* bytes of `nvcc --version` kept */

struct unit {
	const char *name;   /* relative name, e.g. "axpy.cu" (points into the tree listing) */
	const char *text;   /* file bytes (points into the file table) */
	size_t len;
	char key[CA_HASH_HEX_LEN + 1];
	char obj[PATH_MAX];
	char info_path[PATH_MAX];
	char verdict_path[PATH_MAX];
	bool cached;
	bool refused;   /* its host assembly was refused (this compile or the cached verdict) */
	char *findings; /* then: the findings, one per line */
	/* filled by the compile */
	bool failed, timed_out;
	int run_rc;
	char *log;  /* captured stderr + stdout of nvcc */
	char *info; /* ptxas lines */
};

struct candidate {
	char **names;   /* every file under kernels/ (relative), sorted */
	char **texts;
	size_t *lens;
	size_t count;
	struct unit *units;
	size_t num_units;
	bool uses_cublas, uses_cudnn;
};

struct job {
	struct unit *units;
	size_t num_units;
	const char *nvcc;
	const char *arch;
	const char *kdir;
	const char *include_dir;
	double timeout_s;
	int nvcc_threads; /* nvcc's --threads (build_nvcc_threads); 1: left out */
	/* where nvcc_split keeps its module id tags; NULL: plain nvcc (build/nvcc_split.h) */
	const char *split_dir;
	const struct build_box *box; /* the build's sandbox and staging directory (build/box.h) */
};

struct rewrite {
	const char *from, *to;
};

/* Flags of every compile; part of every object key (compile.c says why each). */
extern const char *const build_compile_flags[];
extern const size_t build_compile_flags_count;

int build_add_errors(const char *log, const char *unit, const struct rewrite *rw, size_t nrw,
		     char *errors, size_t size, int *lines);
void build_add_tail(const char *log, const struct rewrite *rw, size_t nrw, char *errors,
		    size_t size, int *lines);
bool build_buf_add_line(char *buf, size_t size, const char *line, size_t line_len);
int build_compile_all(struct job *j, int jobs, struct ca_diag *d);
char *build_concat_logs(const struct ca_run_result *rr);
int build_cuda_lib_dirs(const char *nvcc, char dirs[3][PATH_MAX]);
int build_load_verdict(struct unit *u);
int build_nvcc_version(const char *nvcc, const char *cache, char *out, size_t out_size,
		       struct ca_diag *d);
/* nvcc's --threads for each unit, from its `--version` text (toolchain.c says how). */
int build_nvcc_threads(const char *nvcc_version);
void build_replace_all(char *s, size_t size, const char *from, const char *to);
int build_pick_arch(const struct build_opts *opts, char *out, size_t out_size,
		    struct ca_diag *d);
int build_resolve_nvcc(const struct build_opts *opts, char *out, size_t out_size,
		       struct ca_diag *d);
void build_temp_name(char *out, size_t size, const char *path, const char *suffix);
void build_write_cache_file(const char *path, const char *text);

#endif
