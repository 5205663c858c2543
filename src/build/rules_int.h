/* rules_int: what the symbol rules (rules.c) and the source rules (source_rules.c) share (not for
 * other subsystems): the reasons a refusal names, one wording for both sides. */
#ifndef CA_BUILD_RULES_INT_H
#define CA_BUILD_RULES_INT_H

#include <stddef.h>

#define D_DRIVER "the CUDA driver API is not allowed (use the runtime API)"
#define D_LIBS "only cuBLAS/cuBLASLt (GEMM) and cuDNN (convolution) are allowed among the CUDA " \
	       "libraries"
#define D_DL "dynamic loading is not allowed"
#define D_PROC "starting processes is not allowed"
#define D_THREAD "threads are not allowed"
#define D_NET "network access is not allowed"
#define D_FILE "file, pipe and memory-mapping calls are not allowed"
#define D_INPUT "reading input is not allowed"
#define D_ENV "environment access is not allowed"
#define D_CLOCK "reading or setting host clocks is not allowed (timer tampering)"
#define D_SIG "signals, timers and sleeping are not allowed"
#define D_SYS "system calls that reach outside the candidate are not allowed"
#define D_EXIT "ending the process is not allowed"
#define D_TORCH "PyTorch and Python are not allowed in a native candidate"
#define D_HOSTFN "runs host code on a CUDA driver thread (deferred host work is not allowed)"

#define NRULES(t) (sizeof(t) / sizeof((t)[0]))

/* The first line of a report (without its newline), into out. */
void rules_first_line(const char *report, char *out, size_t out_size);

#endif
