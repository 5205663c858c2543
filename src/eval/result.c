/* result: the timing result, the reward and the environment of an evaluation's result JSON
 * (eval/run.h), and the cached baselines they use. */
#include "eval/run.h"
#include "util/clock.h"

#include <string.h>
#include <unistd.h>

#include "eval/eval.h"
#include "eval/reward.h"
#include "protocol/reasons.h"
#include "util/log.h"

static int open_cache(struct run *r)
{
	struct ca_diag d = {{0}};
	if (r->s->cache_open)
		return 0;
	if (baseline_cache_open(&r->s->cache, r->o->baseline_db, &d)) {
		ca_log_warn("baseline cache unavailable (%s); baselines will be measured", d.msg);
		return -1;
	}
	r->s->cache_open = true;
	return 0;
}

struct baseline_key run_baseline_key(const struct run *r, char *task, size_t size)
{
	bool eval = strcmp(run_module_mode(r), "eval") == 0;
	snprintf(task, size, "%s%s", r->task.hash, eval ? "/eval" : "");
	return (struct baseline_key){task, r->s->bridge.gpu_name, r->s->bridge.torch_version,
				     CA_PROTOCOL_VERSION};
}

/* The cached baselines (the caller owns them), or NULL when they must be measured. */
json_t *cached_baselines(struct run *r)
{
	char task[sizeof r->task.hash + 8];
	struct baseline_key key = run_baseline_key(r, task, sizeof task);
	struct ca_diag d = {{0}};
	json_t *baselines = NULL;
	if (open_cache(r) != 0 || r->o->refresh_baselines ||
	    baseline_cache_get(&r->s->cache, &key, &baselines, &d) != 0)
		return NULL;
	return baselines;
}

/* Looks the baselines up (kept in r for step_baselines). When this evaluation will measure
 * them, the bridge starts importing torch.compile's machinery now (op preload), so that the
 * import overlaps reference data and the worker. Not otherwise: the import competes for the
 * bridge's GIL for seconds (docs/protocol.md). */
void step_preload(struct run *r)
{
	json_t *req, *res = NULL;
	struct ca_diag d = {{0}};
	char code[64];
	if (!r->timing_wanted)
		return;
	r->cached_baselines = cached_baselines(r);
	if (r->cached_baselines)
		return;
	req = json_object();
	if (bridge_call(&r->s->bridge, "preload", req, 30.0, &res, code, sizeof code, &d))
		ca_log_warn("torch bridge (preload): %s", d.msg);
	json_decref(req);
	json_decref(res);
}

static double median_of(const json_t *t)
{
	const json_t *v = json_object_get(t, "median_ms");
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

/* The timing object: the candidate's loop (also when it failed: what was measured up to the
 * failure), then, for a correct candidate, the baselines. */
void step_timing_result(struct run *r)
{
	json_t *timing = json_object(), *baselines = NULL, *cand;
	bool cached = false;

	json_object_set_new(r->result, "timing", timing);
	cand = timing_summary(&r->timing, &r->loop.cal, r->data.flush_bytes);
	json_object_set_new(timing, "candidate", cand);
	json_object_set_new(timing, "method",
			    json_string("per call: the candidate's CUDA-event time, kept where it "
					"agrees with the supervisor's own clock around the call (its "
					"process stopped between calls, its GPU work drained by a probe "
					"from the supervisor's context); median over calls"));
	json_object_set_new(timing, "l2_flush_bytes", json_integer((json_int_t)r->data.flush_bytes));
	/* the parameters the loop ran with (docs/protocol.md, "The timed loop") */
	json_object_set_new(timing, "protocol", eval_protocol_timing_json(&r->o->protocol));
	json_object_set_new(timing, "checks",
			    json_pack("{s:i, s:i, s:b, s:i, s:i, s:i, s:O}", "special",
				      r->timing.special_checks, "spot", r->timing.spot_checks, "final",
				      r->timing.final_done, "failed", r->timing.checks_failed,
				      "deferred", r->timing.deferred_checks, "settle_calls",
				      r->timing.settle_calls, "calls",
				      r->timing.checks ? r->timing.checks : json_null()));
	if (strcmp(reason_code(r), "ok") != 0)
		return;
	if (step_baselines(r, &baselines, &cached) != 0)
		return;
	json_t *eager = json_object_get(baselines, "eager");
	json_t *compiled = json_object_get(baselines, "compile");
	json_object_set(timing, "eager", eager);
	json_object_set_new(timing, "compile", compiled && !json_object_get(compiled, "code")
						       ? json_incref(compiled)
						       : json_pack("{s:O?}", "error",
								   json_object_get(compiled,
										   "error")));
	json_object_set_new(timing, "baselines_cached", json_boolean(cached));
	json_decref(baselines);
	if (r->proc_started && !r->proc.dead && strcmp(reason_code(r), "ok") == 0) {
		double t0 = ca_now();
		(void)step_decide(r, timing); /* a failure sets the reason */
		note_seconds(r, "decide", t0);
	}
}

/* A baseline's time for the reward: its median, or, where it was re-timed interleaved with the
 * candidate at a threshold, the candidate's median times the rounds' median speed-up (so the
 * speed-up the reward sees is the interleaved one). */
static double decided_baseline(const json_t *timing, const char *mode, double t_candidate)
{
	const json_t *inter = json_object_get(
		json_object_get(json_object_get(timing, "decision"), mode), "interleaved");
	const json_t *s = json_object_get(inter, "speedup");
	if (json_is_number(s) && json_number_value(s) > 0 && t_candidate > 0)
		return t_candidate * json_number_value(s);
	return median_of(json_object_get(timing, mode));
}

void step_reward(struct run *r)
{
	json_t *timing = json_object_get(r->result, "timing");
	struct reward_input in = {0};
	struct reward_output out;
	if (!reason_judged(reason_code(r))) {
		json_object_set_new(r->result, "reward", json_null());
		json_object_set_new(r->result, "reward_continuous", json_null());
		json_object_set_new(r->result, "reward_explanation",
				    json_sprintf("no reward: the evaluation could not judge the "
						 "candidate (%s is the environment's or the task's "
						 "failure, not the candidate's)",
						 reason_code(r)));
		return;
	}
	in.compiled = json_is_true(json_object_get(r->result, "compiled"));
	in.correct = json_is_true(json_object_get(r->result, "correct"));
	in.t_candidate_ms = median_of(json_object_get(timing, "candidate"));
	in.t_eager_ms = decided_baseline(timing, "eager", in.t_candidate_ms);
	in.t_compile_ms = decided_baseline(timing, "compile", in.t_candidate_ms);
	reward_compute(&in, &out);
	if (out.reward == 0) {
		json_object_set_new(r->result, "reward", json_null());
		json_object_set_new(r->result, "reward_continuous", json_null());
	} else {
		json_object_set_new(r->result, "reward", json_integer(out.reward));
		json_object_set_new(r->result, "reward_continuous", json_real(out.continuous));
	}
	if (timing && in.t_candidate_ms > 0) {
		json_object_set_new(timing, "speedup_eager",
				    out.speedup_eager > 0 ? json_real(out.speedup_eager) : json_null());
		json_object_set_new(timing, "speedup_compile",
				    out.speedup_compile > 0 ? json_real(out.speedup_compile)
							    : json_null());
	}
	json_object_set_new(r->result, "reward_explanation", json_string(reward_explain(&out)));
}

void step_env(struct run *r)
{
	json_t *env = r->env_gpu ? json_deep_copy(r->env_gpu) : json_object();
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	json_object_set_new(env, "host", json_string(host));
	if (r->cpu.cpu >= 0)
		json_object_set_new(env, "pinned_cpu", json_integer(r->cpu.cpu));
	if (r->s->bridge_started && r->s->bridge.ready) {
		json_object_set_new(env, "torch", json_string(r->s->bridge.torch_version));
		json_object_set_new(env, "python", json_string(r->s->bridge.python_version));
		json_object_set_new(env, "bridge_device", json_string(r->s->bridge.device));
	}
	if (r->timed) {
		json_object_set_new(env, "sm_clock_mhz_before",
				    r->timing.sm_clock_before >= 0
					    ? json_integer(r->timing.sm_clock_before)
					    : json_null());
		json_object_set_new(env, "sm_clock_mhz_after",
				    r->timing.sm_clock_after >= 0 ? json_integer(r->timing.sm_clock_after)
								  : json_null());
	}
	json_object_set_new(r->result, "env", env);
}

void step_profile_result(struct run *r)
{
	json_t *prof = json_object();
	const json_t *cand = json_object_get(json_object_get(r->result, "timing"), "candidate");
	double t_ms = median_of(cand);
	double bytes = 0;

	if (r->profile_event) {
		json_object_set(prof, "kernels", json_object_get(r->profile_event, "kernels"));
		json_object_set(prof, "total_ns", json_object_get(r->profile_event, "total_ns"));
	}
	if (!r->profile_event || json_object_get(r->profile_event, "code")) {
		const char *msg = json_string_value(json_object_get(r->profile_event, "message"));
		json_object_set_new(prof, "error",
				    json_string(msg ? msg : "no CUPTI profile was produced"));
	}
	json_object_set_new(prof, "resources",
			    json_deep_copy(json_object_get(json_object_get(r->result, "build"),
							   "resources")));
	for (int i = 0; i < r->spec.num_args; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.args[i]);
	for (int i = 0; i < r->spec.num_params; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.params[i]);
	for (int i = 0; i < r->spec.num_outputs; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.outputs[i]);
	json_object_set_new(prof, "min_bytes", json_real(bytes));
	if (t_ms > 0) {
		double achieved = bytes / (t_ms * 1e-3) / 1e9;
		const json_t *peak = json_object_get(r->profile_event, "peak_copy_gbps");
		json_object_set_new(prof, "achieved_gbps", json_real(achieved));
		if (json_is_number(peak) && json_number_value(peak) > 0) {
			json_object_set(prof, "peak_copy_gbps", (json_t *)peak);
			json_object_set_new(prof, "fraction_of_peak",
					    json_real(achieved / json_number_value(peak)));
		}
	}
	json_object_set_new(r->result, "profile", prof);
}

json_t *new_result(const struct eval_opts *o)
{
	return json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s}, s:s, s:n, s:n, s:n, s:n, "
			 "s:{s:s, s:s}}",
			 "schema", CA_RESULT_SCHEMA, "mode", eval_mode_name(o->mode), "task", "dir",
			 o->task_dir ? o->task_dir : "", "candidate", "format", "native", "dir",
			 o->candidate_dir ? o->candidate_dir : "", "rules",
			 torch_profile_name(o->rules), "reward", "reward_continuous", "compiled",
			 "correct", "reason", "code", "ok", "message", "");
}
