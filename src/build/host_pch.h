/* host_pch: nvcc's host compile (build/nvcc_split.h, step 5) with the toolkit's part of the
 * translation unit precompiled once, as a gcc precompiled header.
 *
 * cudafe++ writes the host translation unit (`.cudafe1.cpp`): first the text of the CUDA runtime
 * and of every header the unit includes before its own code (about 36,000 lines for a kernel
 * that includes only cuda_runtime.h, 300,000 with cuBLAS, CUB and the C++ library), then the
 * unit's own code, then an #include of the stub that embeds the fatbinary. gcc spends most of
 * the host compile parsing the first part (0.48 s of 0.50 s for a small kernel with nvcc's
 * -O3, 2-CPU machine), and an agent's edits leave it unchanged. So:
 *  1. host_pch_scan finds the prefix: the lines before the first line marker (after the first
 *     line) that names a file under the candidate's directory or a relative path. It refuses a
 *     prefix whose directives it cannot vouch for in a precompiled header (below).
 *  2. The key is the SHA-256 of: the nvcc and gcc binaries (path, size, mtime, inode), the host
 *     compile's command line with the unit's own paths masked, and the prefix's bytes. SHA-256,
 *     not the cache's XXH3: part of the prefix is the candidate's (macros it defines before an
 *     include, a header outside its directory), and a crafted collision would hand one
 *     candidate's precompiled text to another.
 *  3. Hit (<dir>/<key>.h.gch and its dependency list exist, and no file of the candidate's
 *     directory has the relative name of a file the header read, which with -I kernels/ first
 *     would have shadowed it): the unit's file is rewritten in place (same name, so the same
 *     `.file` line) as `#include "<dir>/<key>.h"`, the prefix's `#pragma GCC diagnostic` lines
 *     (gcc 12 does not keep that state in a precompiled header), then the rest. The unit's
 *     first line, the marker that names its source, stays first and out of the header, so the
 *     header does not depend on where the candidate is. The host compile runs nvcc's own
 *     command line on it.
 *  4. Miss: the first time a key is seen, it is only marked (<key>.seen): a prefix that never
 *     comes back (an include set one candidate used once) costs nothing. The second time,
 *     <key>.h (the prefix's text less its first line) is written, and the precompiled header
 *     is built beside the device branch and nvcc's host compile of the unchanged file; the
 *     build waits for it (on 2 CPUs a small kernel's build takes about 0.5 s more, once, and a
 *     hit takes 0.4 s off its 1.5 s): the same command line as a header
 *     (`-x c++-header`, no -S), without the candidate's -I (nothing of the candidate's directory
 *     gets into it), with -MD for the list of files it read. It is kept only when gcc succeeded
 *     and printed nothing, and no file it read lies in the candidate's directory; a key whose
 *     header was not kept is marked (<key>.nopch) and not tried again. Kept: at most
 *     HOST_PCH_MAX_ENTRIES headers and HOST_PCH_MAX_SEEN marks, the least recently used removed.
 *
 * Why the output is nvcc's: gcc compiles the same text in the same order with the same command
 * line; a precompiled header is gcc's saved state after parsing its text, and gcc checks it
 * against the compiler and the options and ignores it (parsing the text, which <key>.h holds)
 * when they differ. The few lines cudafe++ writes before the first header (pragmas, macros and
 * managed-memory helpers) are under the header's name instead of the source's on a hit: a name
 * in source locations, which reaches neither the assembly (the host compile has no -g) nor a
 * message (those lines give none; a header that gave one is not kept). Includes are resolved
 * as nvcc's would be because the only #include in a prefix is cudafe++'s `crt/host_runtime.h`
 * (any other refuses the prefix) and step 3's shadow check. What gcc does not keep in a
 * precompiled header the scan refuses or replays: any #pragma other than `GCC diagnostic`
 * (replayed), balanced `GCC visibility push/pop` and loop pragmas (`unroll`, `GCC unroll`,
 * `nounroll`, `GCC ivdep`) refuses the prefix, as does a `GCC diagnostic` inside a conditional
 * other than `#if 0`, unbalanced conditionals, a NUL byte, and any directive but #define,
 * #undef, #if/#ifdef/#ifndef/#else/#elif/#endif and line markers; lines spliced by a backslash
 * start no directive, as in gcc. tests/unit/test_host_pch.c checks a hit's assembly and
 * messages against the plain compile's (for a candidate elsewhere too); tests/integration/run.sh
 * checks nvcc's objects on a hit against plain nvcc's byte for byte. The one difference: a
 * warning gcc would give inside the prefix (the toolkit's headers) is not repeated on a hit; a
 * precompiled header whose build gave any message is never kept.
 *
 * $CUDA_AGENT_HOST_PCH=0 turns it off. Ownership: struct host_pch owns its strings and the
 * thread that builds a header; host_pch_end joins it and frees them. */
#ifndef CA_BUILD_HOST_PCH_H
#define CA_BUILD_HOST_PCH_H

#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/sandbox.h"
#include "util/proc.h"

struct build_box;
#define HOST_PCH_MAX_ENTRIES 32 /* headers kept (20-200 MB each) */
#define HOST_PCH_MAX_SEEN 1024 /* first sightings remembered */
#define HOST_PCH_MAX_UNIT (256u << 20) /* a bigger .cudafe1.cpp is compiled without */
#define HOST_PCH_MIN_PREFIX (16u << 10) /* a shorter prefix is not worth a header */
#define HOST_PCH_KEY_LEN 64 /* SHA-256 in hex */

/* What the scan found: the prefix's length (it ends at a line start), the length of its first
 * line when that is the line marker naming the unit's source (0 otherwise), and its
 * `#pragma GCC diagnostic` lines outside `#if 0`, in order (owned). The header holds the
 * prefix less that first line, the only one that names the candidate's path, so candidates
 * that include the same headers share a header wherever their files are. */
struct host_pch_prefix {
	size_t len, head;
	char *replay;
	size_t replay_len;
};

/* 0 with *out filled (free with host_pch_prefix_free), or a negative code when the text has
 * no prefix usable as a precompiled header (CA_ERR_REJECTED: a directive the scan does not
 * vouch for, a NUL byte, or a prefix under HOST_PCH_MIN_PREFIX; CA_ERR_NOMEM). local_dir:
 * the candidate's directory, without a trailing '/'. */
int host_pch_scan(const char *text, size_t len, const char *local_dir, struct host_pch_prefix *out);
void host_pch_prefix_free(struct host_pch_prefix *p);

enum host_pch_state { HOST_PCH_OFF = 0, HOST_PCH_HIT, HOST_PCH_BUILDING };

struct host_pch_job {
	const char *line;      /* the host compile's shell line, from nvcc's dry run */
	const char *unit;      /* the .cudafe1.cpp it compiles (an absolute path) */
	const char *dir;       /* where headers are kept (made when missing) */
	const char *scratch;   /* a private directory for the build's dependency list */
	const char *local_dir; /* the candidate's directory (its -I on the line) */
	const char *nvcc;      /* nvcc's path, for the key */
	const char *const *env; /* the steps' environment additions (PATH finds gcc) */
	double deadline;       /* ca_now() by which the header build must end */
	/* the build's sandbox (build/box.h), or NULL: the header is built in it, written into
	 * scratch (writable inside) and moved into dir by this side when it qualifies */
	const struct build_box *box;
};

struct host_pch {
	enum host_pch_state state;
	char key[HOST_PCH_KEY_LEN + 1];
	char *header, *gch, *tmp_gch, *deps, *dep_file, *line, *seen, *nopch; /* owned */
	const char *const *env;
	const char *local_dir;
	double deadline;
	const struct build_box *box;
	struct sandbox_bind scratch_bind;
	pthread_t thread;
	struct ca_run_result rr;
	bool ran;
};

/* Before the host compile: a hit rewrites job->unit (state HIT); a miss starts building the
 * header in a thread (state BUILDING); anything else leaves the unit as it is (state OFF, the
 * reason logged at debug level). Never fails the build. */
void host_pch_begin(struct host_pch *p, const struct host_pch_job *job);

/* After the host compile: joins the header's build and keeps the header when it qualifies
 * (state BUILDING), then frees what p holds. */
void host_pch_end(struct host_pch *p);

/* Whether $CUDA_AGENT_HOST_PCH allows it (unset or anything but "0"). */
bool host_pch_enabled(void);

/* Hashes what tells one binary from another (path, device, inode, size, mtime) into h: a
 * compiler replaced or upgraded gives cached products another key (here and nvcc_split.c). */
void host_pch_hash_stat(gnutls_hash_hd_t h, const char *path);

/* The compiler a step line runs: its first word, found on the PATH of env ("K=V" lines). */
bool host_pch_find_compiler(const char *line, const char *const *env, char *out, size_t size);

#endif
