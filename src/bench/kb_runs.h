/* kb_runs: KernelBench's own layout of generated kernels and of its eval results, so that bench
 * reads a KernelBench run as a KernelBench user has it (docs/bench.md, "KernelBench runs").
 *
 * KernelBench's generation scripts write one file per sample into runs/<run_name>/:
 *   level_<L>_problem_<P>_sample_<S>_kernel.py
 * and its eval script (scripts/eval_from_generations.py) writes runs/<run_name>/eval_results.json:
 *   {"<P>": [{"sample_id", "compiled", "correctness", "runtime", ...}, ...]}
 * Older versions keep one object per problem ({"<P>": {"sample_id", ...}}) or one per sample
 * ({"<P>": {"<S>": {...}}}); keys "L<L>P<P>" also occur. All of these are read.
 *
 * A task key is bench's ("level1/19_ReLU", or deeper: ".../level1/19_ReLU"): the level is the
 * number after "level" in the second-to-last part, the problem the leading number of the last.
 *
 * The results file is untrusted input: read capped (KB_RESULTS_MAX_BYTES), every field checked;
 * what does not fit is ignored, never fatal (fuzzed: tests/fuzz/fuzz_kb_results.c). */
#ifndef CA_BENCH_KB_RUNS_H
#define CA_BENCH_KB_RUNS_H

#include <jansson.h>
#include <stddef.h>

#include "util/diag.h"

#define KB_RESULTS_MAX_BYTES (64u << 20)
#define KB_MAX_SAMPLE 1000000

/* The level and problem of a task key; CA_ERR_INVALID when the key is not KernelBench's. */
int kb_key_parse(const char *key, int *level, int *problem);

/* The file KernelBench's generation scripts write for the key's problem and sample, under
 * candidates_dir, into out; CA_ERR_NOTFOUND when the key is not KernelBench's or the file does not
 * exist. */
int kb_run_candidate(const char *candidates_dir, const char *key, int sample, char *out,
		     size_t size);

#define KB_REASON_MAX 200 /* bytes of a verdict's reason */

/* KernelBench's verdict on the key's problem and sample from a parsed eval_results.json: a new
 * object {"sample_id", "compiled", "correctness", "runtime"} (fields it lacks are null; runtime in
 * ms as KernelBench reports it, -1 for none), with, only where the record has them: "reason"
 * (one line, at most KB_REASON_MAX bytes: the record's own reason, as cuda-agent's harness writes
 * it, else the first of metadata's error, correctness_issue, compilation_error(_name),
 * runtime_error(_name), cuda_error(_name), other_error(_name)), "ref_runtime" (KernelBench's
 * timing of the reference, ms) and "excessive_speedup": true (KernelBench flagged the speed-up).
 * NULL when the file has none. */
json_t *kb_results_lookup(const json_t *results, const char *key, int sample);

/* Reads and parses path (at most KB_RESULTS_MAX_BYTES) into *out (a new reference to an object). */
int kb_results_load(const char *path, json_t **out, struct ca_diag *d);

#endif
