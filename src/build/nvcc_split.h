/* nvcc_split: one `nvcc -c` run as nvcc's own steps, with its host and device branches at once.
 *
 * nvcc runs its steps one after the other, even with --threads: the host branch (host
 * preprocessing, cudafe++) writes the translation unit's module id (--gen_module_id_file), and
 * the device branch (device preprocessing, cicc, ptxas, fatbinary) reads it in cicc. The two
 * branches meet otherwise only at the host compile. The module id is `_<CRC-32 of the
 * source's absolute path, hex>_<length of the file name>_<the file name, '.' and other
 * non-alphanumerics as '_'>_<tag>`. The tag comes from the unit's first external definition
 * (its mangled name, or a hash of it; measured with nvcc 13.0 -keep), so edits that keep that
 * definition keep the tag; a unit with none gets a tag that changes from run to run. So
 * nvcc_split_run:
 *  1. asks `nvcc -dryrun` (same command line, TMPDIR a private directory) for the steps, or
 *     reads the answer an earlier compile of the same command line kept (tag_dir/dryrun/: the
 *     private directory and the output path as tokens, keyed on the rest of the command line,
 *     the environment and the nvcc and gcc binaries; $CUDA_AGENT_NVCC_DRYRUN_CACHE=0: always
 *     asked);
 *  2. predicts the module id from the tag it learned from the last compile of the same source
 *     path with the same nvcc and flags (none yet: the steps run one after the other, and the
 *     tag is learned);
 *  3. runs the host branch and, at once, the device branch given the predicted id; each branch
 *     is one shell line (its steps joined by &&), so one sandbox start per branch;
 *  4. compares the id cudafe++ wrote with the prediction. Equal: the device branch's outputs are
 *     what nvcc's would be. Not equal: the device branch runs again with the written id (and
 *     the tag is learned again). Nothing is trusted to the prediction;
 *  5. runs the host compile, which joins the two, with the toolkit's part of the unit
 *     precompiled once (build/host_pch.h: begun as soon as cudafe++ is done, so that the
 *     unit's rewrite, or the header's build, runs beside the device branch).
 * Every step is nvcc's own command line, environment and temporary file, so the output is what
 * nvcc makes: the host assembly identical but for the temporary file's name on its `.file` line
 * (which differs between any two runs of nvcc; checked by tests/integration/run.sh).
 *
 * The steps' output (stderr, then stdout) is concatenated in nvcc's order, up to the first step
 * that failed, as nvcc shows it. The caller runs plain nvcc instead (NVCC_SPLIT_FALLBACK) when:
 * the split is off ($CUDA_AGENT_NVCC_SPLIT=0) or the nvcc release is not one it was tested with
 * (13.0; $CUDA_AGENT_NVCC_SPLIT=1 tries any); an argument holds a character outside
 * [A-Za-z0-9_./+=,:-] (the steps run through /bin/sh); the dry run fails or its steps are not
 * the expected ones; a step cannot be started.
 * box (build/box.h; NULL: none): the build's sandbox. Every step, the dry run included, runs in
 * it (build_exec), the private directory lies in its staging directory and is bound writable,
 * the precompiled header is built there and moved into tag_dir/pch by this side.
 * Ownership: nothing is kept between calls but the learned tags, the kept dry runs and the
 * precompiled headers (files under tag_dir). */
#ifndef CA_BUILD_NVCC_SPLIT_H
#define CA_BUILD_NVCC_SPLIT_H

#include <stdbool.h>

#include "util/proc.h"

enum { NVCC_SPLIT_DONE = 0, NVCC_SPLIT_FALLBACK = 1 };

struct build_box;

/* Whether the split is used with this nvcc (its `--version` text) and environment. */
bool nvcc_split_enabled(const char *nvcc_version);

/* argv: an nvcc command line (argv[0] the nvcc binary) that compiles src_abs (an absolute path)
 * with -c. local_dir: the candidate's directory, which argv names with -I (NULL: the host
 * compile runs without a precompiled header, build/host_pch.h). tag_dir: where the learned tags
 * and the precompiled headers (tag_dir/pch) are kept (made when missing). NVCC_SPLIT_DONE: rr
 * holds what nvcc's run would have (exit_code 0 and the output file written, or the failing
 * step's exit code, or timed_out past timeout_s); the caller frees it. NVCC_SPLIT_FALLBACK: rr
 * is untouched. *predicted (may be NULL): whether the branches ran at once on a prediction that
 * held. */
int nvcc_split_run(const char *const *argv, const char *src_abs, const char *local_dir,
		   const char *tag_dir, double timeout_s, struct ca_run_result *rr, bool *predicted,
		   const struct build_box *box);

/* The module id nvcc gives src_abs under tag (what step 2 predicts), into out. 0, or
 * CA_ERR_LIMIT when out is too small. */
int nvcc_split_module_id(const char *src_abs, const char *tag, char *out, size_t out_size);

#endif
