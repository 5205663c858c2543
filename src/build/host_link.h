/* host_link: the candidate's library linked by nvcc's own host link line, without nvcc's device
 * link.
 *
 * `nvcc -shared` runs four steps: nvlink (the device link), fatbinary, the host compiler on a
 * registration stub for the linked device image, and the host link of that stub with the
 * objects. The candidate's units are compiled whole-program (no -rdc), so each object carries
 * and registers its own device code: the device link has nothing to resolve, and its image holds
 * no kernel of the candidate (torch's cpp_extension and CMake link such objects with the host
 * linker alone). Leaving out the first three took 30-40 ms off a build (nvcc 13.0, 2 CPUs:
 * bench/RESULTS.md).
 *
 * The line is nvcc's: `nvcc -dryrun` of the same link (the same nvcc, arch and flags) with
 * placeholder objects and output is run once per process and key, its host link line kept less
 * the device link's object, and each link puts its objects and output in. Every object's device
 * code reaches the library byte for byte as nvcc's link puts it there (its `.nv_fatbin` bytes
 * follow the device link's image in nvcc's library and stand alone in this one: checked by
 * tests/unit/test_build.c). The caller falls back to `nvcc -shared` when this returns nonzero:
 * the nvcc release is not one the split was tested with or the split is off
 * (nvcc_split_enabled), the dry run failed or did not print one host link line of the expected
 * shape, or a path holds a character the line's quoting could not carry.
 *
 * Ownership: the learned lines are kept for the process (at most HOST_LINK_KEYS, under a mutex)
 * and in the build cache;
 * host_link_argv's array and strings are the caller's (host_link_argv_free). */
#ifndef CA_BUILD_HOST_LINK_H
#define CA_BUILD_HOST_LINK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/diag.h"

#define HOST_LINK_KEYS 8

/* The host link's argv for objs into out (NULL-terminated, heap), given nvcc's link flags as
 * build.c passes them to `nvcc -shared -cudart shared -arch=ARCH`. The line learned for this
 * nvcc (path and version text), arch and flags is kept in memory and in CACHE/host-link/ (one
 * file per key, its arguments one per line), so a new process does not ask nvcc again. 0, or a
 * negative code (the caller links with nvcc). */
int host_link_argv(const char *nvcc, const char *nvcc_version, const char *cache,
		   const char *arch, const char *const *link_flags, size_t nlink,
		   const char *const *objs, size_t nobjs, const char *out, char ***argv,
		   struct ca_diag *d);
void host_link_argv_free(char **argv);

/* The `nvcc [-dryrun] -shared -cudart shared -arch=ARCH -o OUT OBJS... FLAGS...` command whose
 * host link line this module learns (and that links when it does not), into argv: room for
 * nobjs + nflags + HOST_LINK_NVCC_ARGS pointers; arch_flag holds -arch=ARCH while argv is used.
 * Returns the count; argv is NULL-terminated. */
#define HOST_LINK_NVCC_ARGS 10
size_t host_link_nvcc_argv(const char **argv, const char *nvcc, bool dryrun, const char *arch,
			   char arch_flag[48], const char *out, const char *const *objs,
			   size_t nobjs, const char *const *flags, size_t nflags);

#endif
