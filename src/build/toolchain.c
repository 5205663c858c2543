/* toolchain: the target architecture (asked, detected from the GPU, or sm_90), nvcc and its
 * version (cached per binary), the CUDA library directories (build_int.h). */
#include "build/build_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"

/* ---- arch, nvcc, CUDA libraries ------------------------------------------------------------ */

static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;
static bool arch_queried;
static char queried_arch[32]; /* empty: nvidia-smi gave nothing */
static char version_id[PATH_MAX + 96];
static char version_text[BUILD_NVCC_VERSION_MAX];

static bool arch_valid(const char *a)
{
	const char *p;
	size_t digits = 0;

	if (strncmp(a, "sm_", 3) == 0)
		p = a + 3;
	else if (strncmp(a, "compute_", 8) == 0)
		p = a + 8;
	else
		return false;
	while (*p >= '0' && *p <= '9') {
		p++;
		digits++;
	}
	if (digits < 2 || digits > 3)
		return false;
	if (*p == 'a' || *p == 'f')
		p++;
	return *p == '\0' && strlen(a) < 32;
}

/* "9.0" -> "sm_90", "10.0" -> "sm_100". */
static bool arch_from_compute_cap(const char *cc, char *out, size_t out_size)
{
	int major = 0, minor = 0;
	if (sscanf(cc, "%d.%d", &major, &minor) != 2 || major < 1 || major > 99 || minor < 0 ||
	    minor > 9)
		return false;
	return snprintf(out, out_size, "sm_%d%d", major, minor) < (int)out_size;
}

static void query_gpu_arch(char *out, size_t out_size)
{
	pthread_mutex_lock(&state_mu);
	if (!arch_queried) {
		const char *argv[] = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader",
				      NULL};
		struct ca_run_opts ro = {.timeout_s = 15, .stdout_cap = 4096, .stderr_cap = 4096};
		struct ca_run_result rr;
		arch_queried = true;
		queried_arch[0] = '\0';
		if (ca_run(argv, &ro, &rr, NULL) == 0) {
			if (!rr.timed_out && !rr.term_signal && rr.exit_code == 0 && rr.out)
				if (!arch_from_compute_cap(rr.out, queried_arch, sizeof queried_arch))
					queried_arch[0] = '\0';
			ca_run_result_free(&rr);
		}
	}
	snprintf(out, out_size, "%s", queried_arch);
	pthread_mutex_unlock(&state_mu);
}

int build_pick_arch(const struct build_opts *opts, char *out, size_t out_size,
		    struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_ARCH");

	if (opts->arch && opts->arch[0]) {
		if (!arch_valid(opts->arch))
			return ca_fail(d, CA_ERR_INVALID, "bad GPU architecture '%s' (expected e.g. "
							  "sm_90)", opts->arch);
		snprintf(out, out_size, "%s", opts->arch);
		return 0;
	}
	if (env && env[0]) {
		if (!arch_valid(env))
			return ca_fail(d, CA_ERR_INVALID, "bad $CUDA_AGENT_ARCH '%s' (expected e.g. "
							  "sm_90)", env);
		snprintf(out, out_size, "%s", env);
		return 0;
	}
	query_gpu_arch(out, out_size);
	if (!out[0])
		snprintf(out, out_size, "%s", DEFAULT_ARCH);
	return 0;
}

int build_resolve_arch(const char *arch, char *out, size_t out_size, struct ca_diag *d)
{
	struct build_opts o = {.arch = arch};
	return build_pick_arch(&o, out, out_size, d);
}

int build_resolve_nvcc(const struct build_opts *opts, char *out, size_t out_size,
		       struct ca_diag *d)
{
	const char *want = opts->nvcc && opts->nvcc[0] ? opts->nvcc : getenv("NVCC");

	if (want && want[0]) {
		if (strchr(want, '/')) {
			if (snprintf(out, out_size, "%s", want) >= (int)out_size)
				return ca_fail(d, CA_ERR_LIMIT, "nvcc path too long");
		} else if (!ca_find_in_path(NULL, want, out, out_size)) {
			return ca_fail(d, CA_ERR_NOTFOUND, "%s: not found on PATH", want);
		}
	} else if (!ca_find_in_path(NULL, "nvcc", out, out_size)) {
		snprintf(out, out_size, "%s", "/usr/local/cuda/bin/nvcc");
	}
	if (access(out, X_OK) != 0 || !ca_is_file(out))
		return ca_fail(d, CA_ERR_NOTFOUND, "nvcc not found or not executable at %s (set "
						   "NVCC or put nvcc on PATH)", out);
	return 0;
}

/* `nvcc --version`, cached per process and in <cache>/nvcc/ keyed by the nvcc binary's identity.
 * Run outside the build's sandbox (build/box.h), like every probe here: it takes no candidate
 * input. */
int build_nvcc_version(const char *nvcc, const char *cache, char *out, size_t out_size,
		       struct ca_diag *d)
{
	struct stat st;
	char id[sizeof version_id], idhash[CA_HASH_HEX_LEN + 1], dir[PATH_MAX], path[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	int rc = 0;

	if (stat(nvcc, &st) != 0)
		return ca_fail(d, CA_ERR_NOTFOUND, "cannot stat %s: %s", nvcc, strerror(errno));
	snprintf(id, sizeof id, "%s|%lld.%09ld|%lld|%llu", nvcc, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec, (long long)st.st_size, (unsigned long long)st.st_ino);
	pthread_mutex_lock(&state_mu);
	if (strcmp(id, version_id) == 0) {
		snprintf(out, out_size, "%s", version_text);
		pthread_mutex_unlock(&state_mu);
		return 0;
	}
	pthread_mutex_unlock(&state_mu);

	ca_hash_hex(id, strlen(id), idhash);
	if (snprintf(dir, sizeof dir, "%s/nvcc", cache) >= (int)sizeof dir ||
	    snprintf(path, sizeof path, "%s/%s.txt", dir, idhash) >= (int)sizeof path)
		return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	if (ca_read_file(path, 4096, &text, &len, NULL) == 0 && len > 0) {
		snprintf(out, out_size, "%s", text);
	} else {
		const char *argv[] = {nvcc, "--version", NULL};
		struct ca_run_opts ro = {.timeout_s = 60, .stdout_cap = 4096, .stderr_cap = 4096};
		struct ca_run_result rr;
		char how[128];
		rc = ca_run(argv, &ro, &rr, d);
		if (rc)
			goto out;
		if (rr.timed_out || rr.term_signal || rr.exit_code != 0 || !rr.out || !rr.out[0]) {
			ca_run_describe(&rr, how, sizeof how);
			rc = ca_fail(d, CA_ERR_BUILD, "%s --version failed: %s", nvcc, how);
			ca_run_result_free(&rr);
			goto out;
		}
		snprintf(out, out_size, "%s", rr.out);
		ca_run_result_free(&rr);
		if (ca_mkdirs(dir, 0755, NULL) == 0)
			build_write_cache_file(path, out);
	}
	pthread_mutex_lock(&state_mu);
	snprintf(version_id, sizeof version_id, "%s", id);
	snprintf(version_text, sizeof version_text, "%s", out);
	pthread_mutex_unlock(&state_mu);
out:
	free(text);
	return rc;
}

/* $CUDA_AGENT_NVCC_THREADS (1-8) or 2: nvcc's --threads, used where nvcc_split is not (it runs
 * the steps itself). With 2, nvcc runs its two preprocessors at once; cicc still waits for
 * cudafe++, whose module id it reads (build/nvcc_split.h), so that is all --threads overlaps.
 * The output is what one thread makes (the assembly identical but for nvcc's temporary file
 * name, which differs between any two runs; the same ptxas report). 1 is plain nvcc, one phase
 * at a time (what bench.py's `iteration` part compares against, with the split off). nvcc
 * before release 11.2 has no --threads: 1 there, whatever was asked. */
int build_nvcc_threads(const char *nvcc_version)
{
	const char *env = getenv("CUDA_AGENT_NVCC_THREADS"), *rel;
	int threads = 2, major = 0, minor = 0;
	if (env && env[0]) {
		char *end = NULL;
		long v = strtol(env, &end, 10);
		if (end && *end == '\0' && v >= 1 && v <= 8)
			threads = (int)v;
		else
			ca_log_warn("CUDA_AGENT_NVCC_THREADS=%s is not a number 1-8: 2 is used", env);
	}
	rel = nvcc_version ? strstr(nvcc_version, "release ") : NULL;
	if (!rel || sscanf(rel, "release %d.%d", &major, &minor) != 2 ||
	    major * 100 + minor < 1102)
		threads = 1;
	return threads;
}

/* <nvcc dir>/../lib64 and <nvcc dir>/../targets/<arch>-linux/lib, those that exist. */
int build_cuda_lib_dirs(const char *nvcc, char dirs[3][PATH_MAX])
{
	static const char *const subs[] = {"lib64", "targets/x86_64-linux/lib",
					   "targets/sbsa-linux/lib"};
	char root[PATH_MAX];
	int n = 0;

	snprintf(root, sizeof root, "%s", nvcc);
	for (int k = 0; k < 2; k++) { /* strip "/nvcc", then "/bin" */
		char *slash = strrchr(root, '/');
		if (!slash)
			return 0;
		*slash = '\0';
	}
	if (!root[0])
		return 0;
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		if (snprintf(dirs[n], PATH_MAX, "%s/%s", root, subs[i]) < PATH_MAX &&
		    ca_is_dir(dirs[n]))
			n++;
	}
	return n;
}
