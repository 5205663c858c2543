/* reference: the torch bridge's side of an evaluation before the candidate runs (eval/run.h):
 * waiting for the bridge, describing the task. */
#include "eval/run.h"

#include "util/clock.h"
#include "util/log.h"

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

int step_describe(struct run *r)
{
	json_t *req = json_pack("{s:s, s:I}", "task_dir", r->task.dir, "seed",
				(json_int_t)r->trial_seeds[0]);
	json_t *res = NULL;
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	int rc;
	/* A task the bridge has not seen runs its reference here: the GPU's turn (gpu_stage.h) */
	(void)gpu_stage_enter(&r->gpu);
	rc = bridge_request(r, "describe", req, 600.0, &res);
	gpu_stage_leave(&r->gpu);
	json_decref(req);
	note_seconds(r, "describe", t0);
	if (rc)
		return -1;
	rc = task_spec_from_json(&r->spec, res, &d);
	if (rc) {
		set_reason(r, "task.unsupported", "%s", d.msg);
		json_decref(res);
		return -1;
	}
	r->spec_loaded = true;
	r->spec_json = task_spec_to_json(&r->spec);
	json_object_set(r->result, "spec", r->spec_json);
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
