/* fs: bounded file reading, atomic writing, directories and paths.
 *
 * Ownership: buffers returned through `out` are heap-allocated, NUL-terminated (one extra byte
 * not counted in the length) and owned by the caller (free()). Every read takes a cap: input may
 * be untrusted, so a file larger than the cap is an error (CA_ERR_LIMIT), never a truncation. */
#ifndef CA_UTIL_FS_H
#define CA_UTIL_FS_H

#include <stdbool.h>
#include <stddef.h>

#include "util/diag.h"

int ca_read_file(const char *path, size_t cap, char **out, size_t *out_len, struct ca_diag *d);

/* Opens an existing regular file read-only (a FIFO, device or directory is refused without
 * blocking) and returns its descriptor in *fd (caller closes) and its size in *size. */
int ca_open_regular(const char *path, int *fd, size_t *size, struct ca_diag *d);

/* Writes to path.tmp.<pid> then renames over path, so readers never see a partial file. */
int ca_write_file_atomic(const char *path, const void *data, size_t len, struct ca_diag *d);

/* mkdir -p with the given mode for created components. */
int ca_mkdirs(const char *path, unsigned mode, struct ca_diag *d);

/* rm -rf; refuses "", "/" and paths with fewer than 2 components as a guard. */
int ca_remove_tree(const char *path, struct ca_diag *d);

bool ca_is_dir(const char *path);
bool ca_is_file(const char *path);

/* The first executable regular file named name in dirs (a PATH-style list; NULL: $PATH), its
 * path into out. */
bool ca_find_in_path(const char *dirs, const char *name, char *out, size_t out_size);

/* snprintf into a PATH_MAX-sized buffer; CA_ERR_LIMIT if it does not fit. */
int ca_path_join(char *out, size_t out_size, const char *a, const char *b);

/* Creates a fresh private directory (mode 0700) named <base>/<prefix>XXXXXX; base is created. */
int ca_make_temp_dir(const char *base, const char *prefix, char *out, size_t out_size,
		     struct ca_diag *d);

/* The per-user cache root: $CUDA_AGENT_CACHE, else $XDG_CACHE_HOME/cuda-agent, else
 * ~/.cache/cuda-agent. Created on first use. */
int ca_cache_dir(char *out, size_t out_size, struct ca_diag *d);

/* Absolute, symlink-resolved form of an existing path. */
int ca_realpath(const char *path, char *out, size_t out_size, struct ca_diag *d);

/* Sorted list of regular files in dir whose names end with one of the suffixes (NULL-terminated
 * array). *names is an array of heap strings (free with ca_free_names). Caps the count. */
int ca_list_files(const char *dir, const char *const *suffixes, size_t max_files, char ***names,
		  size_t *count, struct ca_diag *d);
void ca_free_names(char **names, size_t count);

#endif

#ifndef CA_UTIL_FS_ROOT
#define CA_UTIL_FS_ROOT
/* The installation root: $CUDA_AGENT_ROOT, else two levels above the running executable
 * (build/cuda-agent -> the checkout). Holds python/, include/ and build/include. */
int ca_install_root(char *out, size_t out_size, struct ca_diag *d);
/* <install root>/python, where the Python side (cuda_agent_bridge) lives. With who set, a missing
 * folder fails (CA_ERR_NOTFOUND): "<who> needs cuda-agent's python/ folder: ... is missing". */
int ca_python_dir(char *out, size_t out_size, const char *who, struct ca_diag *d);
/* Last `max_lines` lines of a text file (at most 4 KiB), for error messages; "" if unreadable. */
void ca_file_tail(const char *path, int max_lines, char *out, size_t out_size);
#endif
