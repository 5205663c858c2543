/* run: one evaluation's state, shared by the supervisor's steps (eval.c: the steps in order;
 * build_step.c: the build; reference.c: the bridge and describe; spawn.c: the candidate's and the
 * reference process; data.c: the slots and every call's data; verify.c: the verification
 * trials; timing.c: the timed loops of the candidate and the baselines; result.c: timing result,
 * reward, environment; run.c: the helpers below).
 *
 * Secrets: every seed below is drawn by the supervisor (getrandom) and never reaches the
 * candidate's process: the bridge makes the data from them into slots, and the candidate sees
 * a call's inputs when the call is made.
 *
 * Ownership: a run owns every JSON value and resource it points to; eval.c's run_free releases
 * them. set_reason keeps the first reason (the cause; later failures are consequences). */
#ifndef CA_EVAL_RUN_H
#define CA_EVAL_RUN_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "build/build.h"
#include "device/device.h"
#include "eval/cpu_claim.h"
#include "eval/gpu_stage.h"
#include "eval/session.h"
#include "eval/proc.h"
#include "protocol/layout.h"
#include "protocol/loop.h"
#include "sandbox/sandbox.h"
#include "task/task.h"
#include "tensor/spec.h"

#define RUN_MAX_TRIALS 100
#define RUN_MAX_INPUTS 16
#define RUN_MAX_CHECKS 64
#define RUN_SLOT_FDS (RUN_MAX_INPUTS + 2)
/* The seed the PyTorch-format runner builds ModelNew under (the plan's candidate.init_seed), and
 * the one the reference is built under for the checks of a ModelNew whose state_dict does not
 * pair with Model's (kernelbench rules; docs/torch-rules.md, "Parameters"). Not a secret: the
 * candidate builds its model with it. */
#define RUN_TORCH_INIT_SEED UINT64_C(0)

/* The evaluation's data (data.c): the slots the bridge allocated, mapped in the supervisor's
 * device context, and what is in them. */
struct run_data {
	struct device dev;
	bool dev_open;
	bool bridge_slots; /* the bridge holds slots for this run */
	int ninputs;
	struct slot_layout lay_params, lay_inputs, lay_outputs;
	struct device_slot params, outputs, inputs[RUN_MAX_INPUTS];
	int fds[RUN_SLOT_FDS]; /* our copies of the descriptors until the candidate has its own */
	int nfds;
	json_t *scalars[RUN_MAX_INPUTS]; /* the Python-number arguments of the set in inputs[r] */
	uint64_t in_sum[RUN_MAX_INPUTS]; /* checksum of inputs[r] as prepared */
	uint64_t state[RUN_MAX_INPUTS];  /* perturbation state of inputs[r] (0: as placed) */
	uint64_t params_sum;             /* checksum of params as filled */
	uint64_t model_seed;             /* the model whose state is in params */
	uint64_t salt;
	size_t flush_bytes;
	/* Checked calls kept for after the timed loop (data_keep_reserve, the loop's keep): copies
	 * of inputs[r] and the outputs, kept_stride bytes each, in kept_buf; kept[k] what the call
	 * had besides. */
	struct device_buffer kept_buf;
	size_t kept_stride, kept_out_at; /* per copy; where its outputs begin */
	int kept_cap;                    /* copies kept_buf holds (0: none) */
	struct run_kept {
		int input;
		json_t *scalars;
		uint64_t in_sum, state;
	} *kept;
};

/* A native build running in a thread while the candidate's and the reference process start and
 * calibrate (build_step.c: step_build with async, step_build_wait). Until the join only the
 * thread touches it and the run's `build`. */
struct run_build_thread {
	pthread_t thread;
	bool started; /* the build runs (or ran) in the thread: the library goes to lib/ */
	bool pending; /* not joined yet */
	int rc;
	struct build_opts opts;
	struct ca_diag diag;
	char include[PATH_MAX], kernels[PATH_MAX];
};

struct run {
	struct eval_session *s;
	const struct eval_opts *o;
	json_t *result;
	json_t *seconds;
	double t_start;
	struct task task;
	bool task_loaded;
	struct build_result build;
	struct run_build_thread build_bg;
	struct task_spec spec;
	bool spec_loaded;
	json_t *spec_json;
	char dir[PATH_MAX];  /* run directory: plan, stderr, scratch, lib/ */
	char work[PATH_MAX]; /* the candidate process's writable directory (torch caches) */
	enum candidate_format format;
	enum torch_profile rules;   /* the rules that judge it (o->rules, resolved by format);
				       they decide the module mode (run_module_mode) */
	/* PyTorch formats, kernelbench rules: ModelNew keeps the parameters of its construction
	 * under RUN_TORCH_INIT_SEED (the runner's `loaded` says "seeded"; spawn.c), and the checks
	 * use Model's under that seed, unperturbed (data.c) */
	bool params_seeded;
	struct gpu_stage gpu;       /* the turn on a GPU that several evaluations share */
	struct cpu_claim cpu;       /* the CPU of the candidate's and the reference process
				       (cpu -1 when not pinned) */
	char cand_path[PATH_MAX];
	json_t *modules;        /* torch formats: torch_build's modules ({name, key, library}) */
	json_t *inline_modules; /* kernelbench: spec key -> the run's copy of the module */
	char library[PATH_MAX]; /* what the candidate's process loads */
	bool sandboxed;
	json_t *isolation;
	json_t *env_gpu; /* the device as the supervisor's own context sees it */
	bool timing_wanted, profile_wanted;
	/* secrets */
	uint64_t trial_seeds[RUN_MAX_TRIALS];
	uint64_t timing_model_seed, rotation_seeds[RUN_MAX_INPUTS], check_seeds[RUN_MAX_CHECKS];
	uint64_t final_seed, loop_seed, audit_seed;
	/* data */
	struct run_data data;
	/* the candidate's process */
	struct sandbox sb;
	struct ca_child child;
	struct cand_proc proc;
	bool proc_started;
	char err_path[PATH_MAX];
	struct loop loop; /* the candidate as callee */
	/* the reference: the session's reference process (eval/twin.h), borrowed while this run
	 * times on a GPU (empty calls only: protocol/loop.h, LOOP_SEND_REF); NULL otherwise */
	struct eval_twin *twin;
	/* results */
	json_t *trials;
	bool verify_ok;
	json_t *audit;
	struct loop_result timing;
	bool timed;
	json_t *profile_event;
	json_t *cached_baselines;
};

void set_reason(struct run *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const char *reason_code(const struct run *r);
/* r->seconds[what] = now - since. CUDA_AGENT_LOG=debug logs it in the run's timeline, and
 * CUDA_AGENT_TIMELINE=FILE appends it to FILE (util/timeline.h). */
void note_seconds(struct run *r, const char *what, double since);
/* CUDA_AGENT_LOG=debug: logs when, since the run began, what happened. */
void note_mark(const struct run *r, const char *what);
/* A secret seed (getrandom): never derived from anything the candidate could see. */
uint64_t secret_seed(void);
/* The last lines of a process's stderr file, on one line (empty when there are none). */
void stderr_tail(const char *path, char *out, size_t size);
/* Where run directories go ($CUDA_AGENT_RUNS, /dev/shm/cuda-agent-UID, <cache>/runs). */
int runs_base(char *out, size_t size, struct ca_diag *d);

/* The steps, in the order eval_run takes them (eval.c). Each sets the reason when it fails and
 * returns -1 then. */
json_t *new_result(const struct eval_opts *o);            /* result.c */
/* build_step.c. With async a native candidate's build runs in a thread: step_build_wait joins
 * it (0 when nothing is pending or it built; -1 with the build's reason, which replaces any a
 * later step set: the build comes first). Every run calls step_build_wait before it concludes. */
int step_build(struct run *r, bool async);
int step_build_wait(struct run *r);
int step_bridge_ready(struct run *r);                      /* reference.c */
int step_describe(struct run *r);                          /* reference.c */
void step_preload(struct run *r);                          /* result.c: baselines to measure? */
int make_run_dirs(struct run *r);                          /* spawn.c */
/* spawn.c: claims the CPU of the candidate's and the reference process before the build starts
 * (on a GPU host, eval/cpu_claim.h), so that the compilers run elsewhere. */
void step_claim_cpu(struct run *r);
int step_start(struct run *r);                             /* spawn.c */
void step_env_gpu(struct run *r); /* spawn.c: the GPU as the supervisor's context sees it */
void step_timing_result(struct run *r);                    /* result.c */
void step_finish(struct run *r, bool quit);                /* spawn.c */
void step_profile_result(struct run *r);                   /* result.c */
void step_reward(struct run *r);                           /* result.c */
void step_env(struct run *r);                              /* result.c */
/* The cached baselines of this evaluation's task and device (result.c), or NULL. */
json_t *cached_baselines(struct run *r);

#define SPAWN_MAX_BINDS (PY_RUNTIME_MAX_DIRS + PY_VIEW_MAX_MASKS + 8)
#define SPAWN_MAX_ENV   12
/* How the candidate's process starts (spawn.c; build_step.c records kernelbench files with
 * it too). */
const char *session_python(const struct eval_session *s);
const struct python_runtime *session_runtime(struct run *r, struct ca_diag *d);
/* The session's runtime with its kernel-free view of torch built or found (once a session). */
const struct python_runtime *session_torch_view(struct run *r, struct ca_diag *d);
/* Binds of the runner: the runtime's directories, `more`, then (view) the runtime's masks. */
int python_binds(const struct python_runtime *rt, const char *const *more, bool view,
		 struct sandbox_bind *binds, size_t cap, char *pp_env, size_t pp_size);
extern const char *const python_env_fixed[];
int spawn_candidate(struct run *r, const char *const *argv, const struct sandbox_bind *binds,
		    size_t nbinds, const char *const *env, const char *stderr_path, double limit_s,
		    struct sandbox *sb, struct ca_child *child, struct ca_diag *d);
/* A bridge request; a failure sets the reason (task.* as the task's, else env.bridge). */
int bridge_request(struct run *r, const char *op, const json_t *req, double timeout_s,
		   json_t **res);
/* The module mode of the reference Model and of a PyTorch-format candidate's ModelNew
 * (docs/torch-rules.md, "Module mode"), from the rules alone: "train" under kernelbench
 * (KernelBench's harness never calls eval()), "eval" under cuda-agent (the published
 * verification puts both models in eval mode). Every bridge request that builds Model
 * (describe, fill, check, bench_open) and the runner's plan carry it; the result records it
 * ("module_mode"); the session's describe answers and the baseline cache are keyed by it. */
const char *run_module_mode(const struct run *r);
/* The baseline cache's key of this evaluation (result.c): the task as `task` (the task's hash,
 * with "/eval" after it for baselines of eval mode: the entries measured before modes were
 * keyed ran in training mode, and keep their key), the GPU, torch, the protocol version. */
struct baseline_key run_baseline_key(const struct run *r, char *task, size_t size);
/* A loop failure as the run's reason. */
void reason_from_fail(struct run *r, const struct loop_fail *f);

/* data.c */
int data_open(struct run *r);
/* Closes the supervisor's copies of the slot descriptors (the candidate's process has its own). */
void data_release_fds(struct run *r);
void data_close(struct run *r);
/* Fills params (model_seed, when `params`) and sets[i] = {input, seed, near_seed or 0} through
 * the bridge; keeps each set's scalars and the params checksum. */
struct data_set {
	int input;
	uint64_t seed;
	const uint64_t *near_seed;
};
int data_fill(struct run *r, uint64_t model_seed, bool params, const struct data_set *sets,
	      int nsets);
/* Poison the outputs, checksum inputs[r] (kept as prepared), synchronize. */
int data_ready(struct run *r, int input, bool flush);
/* Compares the outputs with the reference of the model in params on inputs[r] (the bridge)
 * after checking that inputs[r] and the params are unchanged: 1 correct, 0 wrong (entry says
 * how), negative when the check could not be made (reason set). */
int data_check(struct run *r, int input, json_t *entry);
/* The loop's view of the candidate's data (prepare, check, keep, check_kept). */
void data_loop_ops(struct run *r, struct loop_ops *ops);
/* Before the candidate's timed loop, after its set-up: the buffer for its kept checks (protocol defer_checks_mb),
 * as many copies as the loop is likely to check, within that cap and leaving an eighth of the
 * GPU's memory free; none when not even one fits. -1 (reason set) only on a GPU error. */
int data_keep_reserve(struct run *r);

/* verify.c */
void cand_loop_init(struct run *r);       /* r->loop: the candidate's process as callee */
void cand_loop_audit_phase(const char *phase);
int step_verify(struct run *r);

/* timing.c */
int step_time_candidate(struct run *r);
void step_profile(struct run *r);
/* The baselines: cached, or measured with the same loop (the bridge as callee). */
int step_baselines(struct run *r, json_t **baselines, bool *cached);
/* The rotation sets into inputs[0..R-1] and the timing model's state (the timed loops' data). */
int timing_fill_rotation(struct run *r);
/* Decisions at the thresholds (docs/evaluation.md): for each baseline whose speed-up's interval
 * holds CA_REWARD_THRESHOLD (or always, or never: o->interleave), re-times the candidate (its
 * process still running) and the baseline in alternating rounds and records timing.decision.
 * 0, or -1 with the reason set (a check failed in a round). */
int step_decide(struct run *r, json_t *timing);
json_t *timing_summary(const struct loop_result *t, const struct loop_calibration *cal,
		       size_t flush_bytes);

#endif
