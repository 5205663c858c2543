/* reference: the torch bridge's side of an evaluation before the candidate runs (eval/run.h):
 * waiting for the bridge, describing the task. */
#include "eval/run.h"

#include <string.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

int step_bridge_ready(struct run *r)
{
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	int rc = eval_session_warm(r->s, &d);
	if (!rc)
		rc = bridge_wait_ready(&r->s->bridge, 180.0, &d);
	note_seconds(r, "bridge_wait", t0);
	if (rc) {
		set_reason(r, "env.bridge", "cannot start the torch bridge: %s", d.msg);
		return -1;
	}
	return 0;
}

/* The seed describe builds the model and draws the inputs with: fixed, so that the answer (shapes,
 * dtypes, input structure, the degenerate verdict) depends on the task's files only and a
 * session keeps it (eval_session.described). It is no secret: nothing of a candidate runs. */
#define DESCRIBE_SEED 0x5eedULL

/* The session's describe answer for this task, or NULL (borrowed). Keyed by the task's hash
 * (model.py and task.json, as the baseline cache is) and the module mode (run_module_mode: the
 * determinism check and the degenerate verdict are that mode's): a service's sessions each copy
 * their task into a directory of their own, and the answer does not depend on where the files
 * are. */
static json_t *described_get(struct run *r, char *key, size_t size)
{
	if (ca_format(key, size, "%s/%s", r->task.hash, run_module_mode(r)))
		return NULL;
	return r->s->described ? json_object_get(r->s->described, key) : NULL;
}

static void described_put(struct run *r, const char *key, json_t *res)
{
	if (!key[0])
		return;
	if (!r->s->described || json_object_size(r->s->described) >= EVAL_DESCRIBED_MAX) {
		json_decref(r->s->described); /* full: start again (tasks repeat in bursts) */
		r->s->described = json_object();
	}
	if (r->s->described)
		json_object_set(r->s->described, key, res);
}

int step_describe(struct run *r)
{
	char key[sizeof r->task.hash + 8] = "";
	json_t *res = described_get(r, key, sizeof key);
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	int rc;
	if (res) {
		json_incref(res);
	} else {
		json_t *req = json_pack("{s:s, s:I, s:s}", "task_dir", r->task.dir, "seed",
					(json_int_t)DESCRIBE_SEED, "module_mode",
					run_module_mode(r));
		/* The bridge runs the task's reference: the GPU's turn (gpu_stage.h) */
		(void)gpu_stage_enter(&r->gpu);
		rc = bridge_request(r, "describe", req, 600.0, &res);
		gpu_stage_leave(&r->gpu);
		json_decref(req);
		if (rc) {
			note_seconds(r, "describe", t0);
			return -1;
		}
		if (!json_is_string(json_object_get(res, "module_mode")) ||
		    strcmp(json_string_value(json_object_get(res, "module_mode")),
			   run_module_mode(r)) != 0) {
			/* a bridge older than its supervisor builds Model in a mode of its own */
			set_reason(r, "env.bridge",
				   "the torch bridge described the task without module_mode %s: it "
				   "is older than this supervisor",
				   run_module_mode(r));
			json_decref(res);
			note_seconds(r, "describe", t0);
			return -1;
		}
		described_put(r, key, res);
	}
	note_seconds(r, "describe", t0);
	rc = task_spec_from_json(&r->spec, res, &d);
	if (rc) {
		set_reason(r, "task.unsupported", "%s", d.msg);
		json_decref(res);
		return -1;
	}
	r->spec_loaded = true;
	r->spec_json = task_spec_to_json(&r->spec);
	json_object_set(r->result, "spec", r->spec_json);
	/* the mode Model runs in, and a PyTorch-format candidate's ModelNew (spawn.c's plan) */
	json_object_set_new(r->result, "module_mode", json_string(run_module_mode(r)));
	{ /* a degenerate task (the bridge's verdict, docs/evaluation.md): said, not refused */
		json_t *deg = json_object_get(res, "degenerate");
		json_t *task = json_object_get(r->result, "task");
		const char *msg = json_string_value(json_object_get(deg, "message"));
		if (json_is_object(deg) && json_is_object(task)) {
			json_object_set(task, "degenerate", deg);
			ca_log_warn("task %s: %s", r->task.id, msg ? msg : "degenerate");
		}
	}
	json_decref(res);
	return 0;
}
