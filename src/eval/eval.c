/* eval: the supervisor's evaluation of one candidate against one task (eval.h). This file is
 * the list of steps; the steps are in build_step.c, reference.c, spawn.c, data.c, verify.c,
 * timing.c and result.c (their shared state and helpers: run.h, run.c). */
#include "eval/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/run.h"
#include "eval/summary.h"
#include "protocol/reasons.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"

static void run_free(struct run *r)
{
	step_finish(r, false);
	gpu_stage_leave(&r->gpu);
	cpu_claim_release(&r->cpu);
	data_close(r);
	if (r->dir[0] && !r->o->keep_run_dir)
		ca_remove_tree(r->dir, NULL);
	if (r->task_loaded)
		task_free(&r->task);
	if (r->spec_loaded)
		task_spec_free(&r->spec);
	loop_result_free(&r->timing);
	json_decref(r->spec_json);
	json_decref(r->env_gpu);
	json_decref(r->profile_event);
	json_decref(r->cached_baselines);
	json_decref(r->trials);
	json_decref(r->audit);
	json_decref(r->isolation);
	json_decref(r->modules);
	json_decref(r->inline_modules);
}

/* The seconds of a GPU shared through its lock (gpu_stage.h): only when it was. */
static void note_gpu_stage(struct run *r)
{
	const struct gpu_stage *g = &r->gpu;
	if (g->waited_s > 0 || g->held_s > 0) {
		json_object_set_new(r->seconds, "gpu_wait", json_real(g->waited_s));
		json_object_set_new(r->seconds, "gpu_held", json_real(g->held_s));
	}
}

/* Whether the protocol may run with the bridge on the CPU (tests without a GPU; PyTorch formats
 * only: timings there mean nothing). */
static bool cpu_protocol(void)
{
	const char *v = getenv("CUDA_AGENT_PROTOCOL_CPU");
	return v && strcmp(v, "1") == 0;
}

/* The task, and the result's record of it. */
static int step_task(struct run *r)
{
	struct ca_diag td = {{0}};
	if (task_load(&r->task, r->o->task_dir, &td)) {
		set_reason(r, "task.invalid", "%s", td.msg);
		return -1;
	}
	r->task_loaded = true;
	json_object_set_new(r->result, "task",
			    json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:f, s:f}", "id", r->task.id,
				      "source", r->task.source, "level",
				      r->task.level >= 0 ? json_integer(r->task.level) : json_null(),
				      "dir", r->task.dir, "hash", r->task.hash, "precision",
				      task_precision_name(r->task.precision), "atol", r->task.atol,
				      "rtol", r->task.rtol));
	return 0;
}

/* Whether a native build runs beside the task's description and the processes' start (the
 * default), or before them: CUDA_AGENT_START_AFTER_BUILD=1, the order before issue 12, which
 * bench.py's `iteration` part times side by side with the default. */
static bool build_beside_start(void)
{
	const char *v = getenv("CUDA_AGENT_START_AFTER_BUILD");
	return !(v && strcmp(v, "1") == 0);
}

/* The steps in order; each sets the reason when it fails, and the first failure ends them. A
 * native build runs while the bridge describes the task and the processes start (step_start
 * waits for it before the load); run_steps waits for it whatever happened. */
static void run_steps_in_order(struct run *r)
{
	const struct eval_opts *o = r->o;
	struct eval_session *s = r->s;
	struct ca_diag td = {{0}};

	if (step_task(r))
		return;
	/* Import torch (seconds) while nvcc compiles. */
	if (o->mode != EVAL_COMPILE)
		step_claim_cpu(r);
	if (o->mode != EVAL_COMPILE && eval_session_warm(s, &td))
		ca_log_warn("torch bridge: %s", td.msg);
	note_mark(r, "the build starts");
	if (step_build(r, o->mode != EVAL_COMPILE && build_beside_start()))
		return;
	if (o->mode == EVAL_COMPILE) {
		json_object_set_new(r->result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      r->format == CANDIDATE_NATIVE
						      ? "compiled; the library passed the symbol and "
							"source checks"
					      : r->rules == TORCH_PROFILE_KERNELBENCH
						      ? "compiled into a PyTorch extension (kernelbench "
							"rules: torch compute is allowed when it runs)"
						      : "compiled into a PyTorch extension (torch "
							"compute is refused when it runs)"));
		return;
	}
	if (step_bridge_ready(r) || step_describe(r))
		return;
	if (strcmp(s->bridge.device, "cuda") != 0 &&
	    !(cpu_protocol() && r->format != CANDIDATE_NATIVE)) {
		if (step_build_wait(r))
			return;
		set_reason(r, "env.no_gpu",
			   "no CUDA GPU here: the candidate compiled and passed the library checks "
			   "and the task is valid; verification and timing need a GPU");
		return;
	}
	note_mark(r, "the task described");
	step_preload(r);
	if (make_run_dirs(r) || step_start(r))
		return;
	ca_log_info("running %d verification trials%s", o->protocol.trials,
		    r->timing_wanted ? ", then timing" : "");
	if (step_verify(r) == 0 && r->timing_wanted && step_time_candidate(r) == 0 &&
	    r->profile_wanted)
		step_profile(r);
	/* The baselines, and a re-timing at a threshold, while the candidate's process is still
	 * there (stopped: its watchdog counts only the time it runs). */
	if (r->timed)
		step_timing_result(r);
	step_finish(r, true);
	if (r->profile_wanted && r->verify_ok)
		step_profile_result(r);
	data_close(r);
	if (strcmp(reason_code(r), "ok") == 0) {
		json_object_set_new(r->result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      o->mode == EVAL_VERIFY
						      ? "correct on every verification trial"
						      : "correct; timed against eager and "
							"torch.compile"));
	}
}

static void run_steps(struct run *r)
{
	run_steps_in_order(r);
	step_build_wait(r);
}

/* What every result gets, however far the steps went: trials, verdict, reward, environment,
 * isolation, seconds and the summary line. */
static void run_conclude(struct run *r)
{
	const struct eval_opts *o = r->o;

	json_object_set(r->result, "trials", r->trials);
	if (r->audit)
		json_object_set(r->result, "audit", r->audit);
	/* correct: true or false once the candidate ran; null when it was never judged */
	if (json_array_size(r->trials) > 0 || strcmp(reason_code(r), "ok") != 0) {
		bool judged = reason_judged(reason_code(r)) &&
			      json_is_true(json_object_get(r->result, "compiled"));
		json_object_set_new(r->result, "correct",
				    !judged ? json_null()
					    : json_boolean(strcmp(reason_code(r), "ok") == 0));
	}
	if (o->mode == EVAL_COMPILE)
		json_object_set_new(r->result, "correct", json_null());
	note_mark(r, "the steps ended; the result is made");
	if (o->mode != EVAL_COMPILE)
		step_reward(r);
	step_env(r);
	note_mark(r, "reward and environment set");
	if (r->isolation) {
		json_object_set_new(r->isolation, "separate_process", json_true());
		json_object_set_new(r->isolation, "reference_outputs_hidden", json_true());
		json_object_set(r->result, "isolation", r->isolation);
	} else {
		json_object_set_new(
			r->result, "isolation",
			json_pack("{s:b, s:b, s:b, s:b, s:b, s:s}", "sandbox", 0, "separate_process",
				  1, "reference_outputs_hidden", 1, "namespaces", 0, "seccomp", 0,
				  "note", "the sandbox was turned off (--no-sandbox or "
				  "CUDA_AGENT_SANDBOX=0): the candidate runs in its own process, stopped "
				  "between calls, with its data in GPU memory the bridge owns, but "
				  "nothing limits its system calls or what files it can read"));
	}
	note_gpu_stage(r);
	json_object_set_new(r->seconds, "total", json_real(ca_now() - r->t_start));
	if (r->dir[0] && o->keep_run_dir)
		json_object_set_new(r->result, "run_dir", json_string(r->dir));
	json_object_set_new(r->result, "summary", json_string(""));
	{
		char *text = eval_summary_text(r->result);
		if (text)
			json_object_set_new(r->result, "summary", json_string(text));
		free(text);
	}
}

/* The run's state before its first step: the result, and every seed (secret, drawn here). */
static void run_init(struct run *r, struct eval_session *s, const struct eval_opts *o)
{
	r->s = s;
	r->o = o;
	r->t_start = ca_now();
	r->result = new_result(o);
	r->seconds = json_object();
	r->trials = json_array();
	json_object_set(r->result, "seconds", r->seconds);
	r->timing_wanted = o->mode == EVAL_FULL || o->mode == EVAL_PROFILE;
	/* the rules (and so the module mode) of a run with no candidate (baselines); step_build
	 * resolves a candidate's by its format */
	r->rules = o->rules;
	r->sandboxed = o->sandbox;
	r->profile_wanted = o->mode == EVAL_PROFILE;
	for (int k = 0; k < o->protocol.trials; k++)
		r->trial_seeds[k] = secret_seed();
	r->timing_model_seed = secret_seed();
	cpu_claim_init(&r->cpu);
	gpu_stage_init(&r->gpu);
	for (int i = 0; i < o->protocol.rotation_sets; i++)
		r->rotation_seeds[i] = secret_seed();
	for (int i = 0; i < o->protocol.timing.checks; i++)
		r->check_seeds[i] = secret_seed();
	r->final_seed = secret_seed();
	r->loop_seed = secret_seed();
	r->audit_seed = secret_seed();

}

/* The protocol an evaluation or a baselines run may use: valid, and within a run's arrays. */
static int run_protocol_check(const struct eval_protocol *p, struct ca_diag *d)
{
	int rc = eval_protocol_validate(p, d);
	if (rc)
		return rc;
	if (p->rotation_sets > RUN_MAX_INPUTS || p->trials > RUN_MAX_TRIALS ||
	    p->timing.checks > RUN_MAX_CHECKS)
		return ca_fail(d, CA_ERR_LIMIT, "at most %d rotation sets, %d trials, %d checks",
			       RUN_MAX_INPUTS, RUN_MAX_TRIALS, RUN_MAX_CHECKS);
	return 0;
}

int eval_run(struct eval_session *s, const struct eval_opts *o, json_t **result,
	     struct ca_diag *d)
{
	struct run *r;
	int rc;

	*result = NULL;
	if (!o->task_dir || !o->candidate_dir)
		return ca_fail(d, CA_ERR_INVALID, "a task directory and a candidate are required");
	if ((rc = run_protocol_check(&o->protocol, d)))
		return rc;
	if (!(r = calloc(1, sizeof *r)))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	run_init(r, s, o);
	run_steps(r);
	run_conclude(r);
	*result = r->result;
	json_decref(r->seconds);
	run_free(r);
	free(r);
	return 0;
}

int eval_exit_code(const json_t *result)
{
	return reason_exit_code(
		json_string_value(json_object_get(json_object_get(result, "reason"), "code")));
}

/* ---- baselines only ------------------------------------------------------------------------ */

static void baselines_steps(struct run *r)
{
	struct ca_diag td = {{0}};
	json_t *baselines = NULL;
	bool cached = false;

	if (step_task(r))
		return;
	step_claim_cpu(r); /* the bridge's timing thread runs its loops there (timing.c) */
	if (eval_session_warm(r->s, &td))
		ca_log_warn("torch bridge: %s", td.msg);
	if (step_bridge_ready(r))
		return;
	if (strcmp(r->s->bridge.device, "cuda") != 0 && !cpu_protocol()) {
		set_reason(r, "env.no_gpu",
			   "no CUDA GPU here: baselines are measured on the GPU that rewards against "
			   "them");
		return;
	}
	if (step_describe(r))
		return;
	step_preload(r); /* the cached baselines, unless refreshed */
	if (!r->cached_baselines) {
		if (data_open(r))
			return;
		step_env_gpu(r);
		(void)gpu_stage_enter(&r->gpu);
		if (timing_fill_rotation(r))
			return;
	}
	if (step_baselines(r, &baselines, &cached))
		return;
	gpu_stage_leave(&r->gpu);
	json_object_set_new(r->result, "baselines", baselines);
	json_object_set_new(r->result, "baselines_cached", json_boolean(cached));
	{
		const json_t *comp = json_object_get(baselines, "compile");
		const char *code = json_string_value(json_object_get(comp, "code"));
		json_object_set_new(r->result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      code ? "eager measured; torch.compile failed on this "
						     "task (no compile baseline)"
					      : cached ? "found in the baseline cache"
						       : "measured and stored in the baseline cache"));
	}
}

static double baseline_median(const json_t *result, const char *mode)
{
	const json_t *v = json_object_get(
		json_object_get(json_object_get(result, "baselines"), mode), "median_ms");
	return json_is_number(v) ? json_number_value(v) : -1.0;
}

int eval_baselines(struct eval_session *s, const struct eval_opts *o, json_t **result,
		   struct ca_diag *d)
{
	struct eval_opts bo = *o;
	struct run *r;
	char line[512];
	int rc;

	*result = NULL;
	if (!o->task_dir)
		return ca_fail(d, CA_ERR_INVALID, "a task directory is required");
	bo.mode = EVAL_FULL; /* the timing protocol's sets and seeds, as a timed evaluation's */
	bo.candidate_dir = "";
	if ((rc = run_protocol_check(&bo.protocol, d)))
		return rc;
	if (!(r = calloc(1, sizeof *r)))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	run_init(r, s, &bo);
	json_object_set_new(r->result, "mode", json_string("baselines"));
	json_object_del(r->result, "candidate");
	json_object_del(r->result, "reward");
	json_object_del(r->result, "reward_continuous");
	json_object_del(r->result, "compiled");
	json_object_del(r->result, "correct");
	json_object_del(r->result, "rules");
	json_object_set_new(r->result, "baselines", json_null());
	baselines_steps(r);
	step_env(r);
	note_gpu_stage(r);
	json_object_set_new(r->seconds, "total", json_real(ca_now() - r->t_start));
	if (strcmp(reason_code(r), "ok") == 0)
		snprintf(line, sizeof line, "%s: eager %.4f ms, torch.compile %.4f ms (%s)",
			 r->task.id, baseline_median(r->result, "eager"),
			 baseline_median(r->result, "compile"),
			 json_string_value(json_object_get(json_object_get(r->result, "reason"),
							   "message")));
	else
		snprintf(line, sizeof line, "%s: %s: %s", r->task_loaded ? r->task.id : o->task_dir,
			 reason_code(r),
			 json_string_value(json_object_get(json_object_get(r->result, "reason"),
							   "message")));
	json_object_set_new(r->result, "summary", json_string(line));
	*result = r->result;
	json_decref(r->seconds);
	run_free(r);
	free(r);
	return 0;
}
