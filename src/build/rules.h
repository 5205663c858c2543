/* rules: what a native candidate may use (ARCHITECTURE.md sections 4 and 6).
 *
 * Primary enforcement is on the built library (rules_check_library): every undefined dynamic
 * symbol must be allowed by the symbol allowlist (CUDA runtime, cuBLAS/cuBLASLt, cuDNN and a safe
 * subset of libc/libm/libstdc++/libgcc: no driver API, no dynamic loading, no processes or
 * threads, no files, sockets, environment, clocks or signals, nothing of PyTorch or Python);
 * every DT_NEEDED entry must be one of the allowed libraries; and the library must not export a
 * definition that would shadow a CUDA or C runtime function. Both symbol tables are fnmatch
 * patterns with a reason each, and a deny entry wins over an allow entry. Source rules
 * (rules_check_sources) are a backup on the text of kernels/: no PyTorch, pybind11 or Python
 * headers, no dlfcn.h, no dlopen/dlsym, no system/popen/fork/exec*, no '..' or absolute includes.
 * Comments and string literals are ignored. Inline asm is not looked at here: inline PTX in
 * device code is legitimate, and host inline asm is refused exactly on the host assembly the
 * compiler emitted (build/hostasm.h), which sees through macros, headers and asm labels.
 *
 * Reports are caller-owned text buffers holding one violation per line; a report that does not
 * fit ends with "... and N more". Nothing here keeps state between calls. */
#ifndef CA_BUILD_RULES_H
#define CA_BUILD_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "build/elfsyms.h"
#include "util/diag.h"

#define RULES_MAX_TREE_FILES 256       /* files looked at under kernels/ */
#define RULES_MAX_TREE_DEPTH 4         /* subdirectory levels under kernels/ */
#define RULES_MAX_SOURCE_BYTES (4u << 20) /* one source or header file */

/* A report being written: one violation per line into buf (NUL-terminated at all times). */
struct rules_report {
	char *buf;
	size_t size;
	size_t len;
	int count;   /* violations added */
	int dropped; /* violations that did not fit */
};

void rules_report_init(struct rules_report *r, char *buf, size_t size);
void rules_report_add(struct rules_report *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Appends "... and N more" when lines were dropped. */
void rules_report_finish(struct rules_report *r);

/* Whether a native candidate may import `sym`. *reason (if reason is non-NULL) receives a short
 * static text: why it is allowed, or why it is not, for messages "sym: reason". */
bool rules_symbol_allowed(const char *sym, const char **reason);

/* Whether a DT_NEEDED entry is an allowed library. */
bool rules_library_allowed(const char *needed, const char **reason);

/* Whether the library may export (define) `sym`: definitions of CUDA, C runtime and other
 * forbidden names are refused, since they could shadow the real functions for later lookups. */
bool rules_export_allowed(const char *sym, const char **reason);

/* Adds one line per violation of an already parsed library to r; returns how many. */
int rules_check_elf(const struct elf_dynamic *e, struct rules_report *r);

/* Reads the library and checks it. 0: clean. CA_ERR_REJECTED: violations, listed in report (one
 * per line, "cuLaunchKernel: the CUDA driver API is not allowed (use the runtime API)") and
 * summarized in d. Other negative codes: the file cannot be read or parsed. */
int rules_check_library(const char *so_path, char *report, size_t report_size, struct ca_diag *d);

/* Scans one source text; display_name prefixes each line ("kernels/a.cu:12: ..."). Adds one line
 * per violation to r and returns how many. */
int rules_scan_source(const char *display_name, const char *text, size_t len,
		      struct rules_report *r);

/* The line of the first file-scope asm declaration (`asm("...");` outside any function, also
 * inside namespaces and extern "C" blocks) in a source text, or 0: best effort, for messages
 * only (a macro that expands to asm is not seen); the verdict comes from build/hostasm.h. */
unsigned rules_file_scope_asm_line(const char *text, size_t len);

/* Scans every .cu/.cuh/.cpp/.cc/.cxx/.c/.h/.hpp/.hh/.inl file under dir (see rules_list_tree);
 * lines are prefixed with the last component of dir ("kernels/sub/x.cuh:3: ..."). 0: clean;
 * CA_ERR_REJECTED with report lines; other negative codes on I/O errors. */
int rules_check_sources(const char *dir, char *report, size_t report_size, struct ca_diag *d);

/* Sorted relative paths ("a.cu", "sub/b.cuh") of the regular files under dir, at most max_files
 * (CA_ERR_LIMIT beyond) and RULES_MAX_TREE_DEPTH levels deep. Symbolic links to files inside
 * dir are followed; links to files outside it (the build's sandbox would not show them) and
 * links to directories are not. Free with ca_free_names (util/fs.h). */
int rules_list_tree(const char *dir, size_t max_files, char ***relpaths, size_t *count,
		    struct ca_diag *d);

#endif
