/* cuda-agent-worker PLAN.json: loads an untrusted candidate library and, on command, calls it
 * (docs/protocol.md, "The candidate's process: plan, commands, events").
 *
 * The worker is the candidate's process: once the library is loaded, everything here may have
 * been rewritten by it. So the worker decides nothing: the supervisor prepares every call's
 * data in GPU memory it owns (the slots, mapped here from descriptors), stops this process
 * between commands, stamps every call on its own clock and checks outputs where this process
 * cannot reach. What the worker reports (event times, audit records, profiles) is a claim the
 * supervisor bounds or uses as feedback only.
 *
 * Start: events channel (the original stdout) and command channel (the original stdin) kept for
 * ourselves, fd 1 -> stderr and fd 0 -> /dev/null for the candidate; plan; device; slots
 * mapped (a reference process's plan has none: it answers `empty` and `quit` only, with no data,
 * and may serve one evaluation after another); event `device`. Then one event per command until `quit` (exit 0 after `done`) or a
 * fatal error (event `error`, exit 1). Per-call failures answer `failed` and the worker goes
 * on, except CUDA faults: the context is then unusable, so `failed` and exit 1. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cudrv.h"
#include "device/device.h"
#include "protocol/layout.h"
#include "protocol/wire.h"
#include "worker/audit.h"
#include "worker/candidate.h"
#include "worker/events.h"
#include "worker/gpu.h"
#include "worker/kernels.h"
#include "worker/plan.h"
#include "worker/profile.h"

struct worker {
	struct worker_plan plan;
	struct gpu_ctx g;
	bool g_open;
	struct candidate cand;
	bool loaded;
	struct device_slot params_slot, outputs_slot, input_slots[PLAN_MAX_INPUTS];
	struct slot_layout lay_params, lay_inputs, lay_outputs;
	struct tensor_set params, outputs, inputs[PLAN_MAX_INPUTS];
	bool profiling;
	int profile_calls;
	int cmd_fd;
	char *buf;
	size_t len, cap;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cuda-agent-worker PLAN.json\n"
		"\n"
		"Loads a candidate library (include/cuda_agent/abi.h) and calls it on the\n"
		"supervisor's commands (JSON lines on stdin; events as JSON lines on stdout).\n"
		"See docs/protocol.md, \"The candidate's process\".\n");
}

/* ---- commands ---------------------------------------------------------------------------------- */

/* One command line (without the newline) into w->buf, NUL-terminated. 1 on EOF. */
static int read_command(struct worker *w, struct worker_error *e)
{
	for (;;) {
		char *nl = w->len ? memchr(w->buf, '\n', w->len) : NULL;
		ssize_t n;
		if (nl) {
			*nl = '\0';
			return 0;
		}
		if (w->len >= WIRE_MAX_COMMAND)
			return werr(e, "worker.bad_plan", true, CA_ERR_LIMIT,
				    "a command longer than %u bytes", WIRE_MAX_COMMAND);
		if (w->cap - w->len < 4096) {
			size_t ncap = w->cap ? 2 * w->cap : 8192;
			char *nb = realloc(w->buf, ncap + 1);
			if (!nb)
				return werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
			w->buf = nb;
			w->cap = ncap;
		}
		n = read(w->cmd_fd, w->buf + w->len, w->cap - w->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 1;
		w->len += (size_t)n;
	}
}

/* Drops the command just handled from the buffer. */
static void consume_command(struct worker *w)
{
	size_t n = strlen(w->buf) + 1;
	memmove(w->buf, w->buf + n, w->len - n);
	w->len -= n;
}

static void emit_failed(const struct worker_error *e, json_t *more)
{
	json_t *ev = more ? more : json_object();
	json_object_set_new(ev, "code", json_string(e->code ? e->code : "worker.internal"));
	json_object_set_new(ev, "message", json_str(e->diag.msg, 4096));
	events_emit(WIRE_EV_FAILED, ev);
}

static json_t *nullable_number(double x)
{
	return json_num(x);
}

/* inputs[r] of the command, with its scalars written; every set refreshed. */
static int call_sets(struct worker *w, const json_t *cmd, struct tensor_set **args,
		     struct worker_error *e)
{
	const json_t *in = json_object_get(cmd, "input");
	json_int_t r = json_integer_value(in);
	int rc;

	if (!json_is_integer(in) || r < 0 || r >= w->plan.num_inputs)
		return werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
			    "command: 'input' must be an integer in [0, %d)", w->plan.num_inputs);
	*args = &w->inputs[r];
	if ((rc = tensor_set_scalars(*args, json_object_get(cmd, "scalars"), e)))
		return rc;
	tensor_set_refresh(*args);
	tensor_set_refresh(&w->params);
	tensor_set_refresh(&w->outputs);
	return 0;
}

/* Start event, the call, end event, device synchronize: *ev_ms is the elapsed event time. An
 * empty call records the two events with nothing between them and launches the empty kernel
 * after the end event: its window holds the same work as a call's (a launch, a kernel, a
 * synchronize), while ev0 is only what the events themselves add, not an empty kernel's own
 * duration (about 2 us on the H200, which subtracted from every claim put a 15 us kernel 13%
 * below ncu's gpu__time_duration). */
static int event_call(struct worker *w, struct tensor_set *args, bool empty, double *ev_ms,
		      struct worker_error *e)
{
	struct gpu_ctx *g = &w->g;
	cudaError_t err, rec, sync, last;
	float ms = 0.0f;
	int ret = 0;

	err = cudaEventRecord(g->ev_start, g->stream);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaEventRecord (start)");
	if (!empty)
		ret = candidate_forward(&w->cand, args, &w->params, &w->outputs, g->stream);
	if (err == cudaSuccess)
		err = cudaSetDevice(g->device); /* the candidate may have switched devices */
	rec = cudaEventRecord(g->ev_end, g->stream);
	if (empty && err == cudaSuccess)
		err = ca_launch_empty(g->stream);
	sync = cudaDeviceSynchronize();
	last = cudaGetLastError();
	if (sync != cudaSuccess)
		err = sync; /* a fault of the candidate's kernels surfaces here: report it first */
	else if (err == cudaSuccess && rec != cudaSuccess)
		err = rec;
	else if (err == cudaSuccess)
		err = last;
	if (err != cudaSuccess)
		return werr_cuda_call(e, err, "after ca_forward");
	if (ret != 0)
		return werr(e, "abi.forward_failed", false, CA_ERR_REJECTED,
			    "ca_forward returned %d", ret);
	err = cudaEventElapsedTime(&ms, g->ev_start, g->ev_end);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaEventElapsedTime");
	*ev_ms = (double)ms;
	return 0;
}

static int cmd_load(struct worker *w, struct worker_error *e)
{
	int rc;
	if (w->loaded)
		return werr(e, "worker.bad_plan", true, CA_ERR_INVALID, "the candidate is loaded");
	if ((rc = candidate_load(&w->cand, w->plan.library, e)))
		return rc;
	w->loaded = true;
	events_emit(WIRE_EV_LOADED, json_pack("{s:b, s:b}", "has_setup", w->cand.setup != NULL,
					      "has_teardown", w->cand.teardown != NULL));
	return 0;
}

static int need_loaded(const struct worker *w, const char *cmd, struct worker_error *e)
{
	return w->loaded ? 0
			 : werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
				"command %s before load", cmd);
}

static int cmd_call(struct worker *w, const json_t *cmd, const char *name,
		    struct worker_error *e)
{
	struct tensor_set *args = NULL;
	bool empty = strcmp(name, WIRE_CMD_EMPTY) == 0;
	double ev = 0;
	int rc;

	if (!empty && (rc = need_loaded(w, name, e)))
		return rc;
	/* a reference process makes empty calls only (handle), on no data */
	if (!w->plan.reference && (rc = call_sets(w, cmd, &args, e)))
		return rc;
	if (strcmp(name, WIRE_CMD_AUDIT) == 0) {
		struct audit_result ar;
		const char *phase = json_string_value(json_object_get(cmd, "phase"));
		if ((rc = audit_call(&w->g, &w->cand, args, &w->params, &w->outputs, "audited call",
				     phase && strcmp(phase, "timing") == 0 ? "timing" : "verify",
				     &ar, e)))
			return rc;
		rc = audit_judge(&ar, tensor_set_bytes(args) + tensor_set_bytes(&w->params),
				 "the audited call", e);
		if (rc) {
			emit_failed(e, json_pack("{s:o}", "audit", audit_result_json(&ar)));
			return 0;
		}
		events_emit(WIRE_EV_AUDITED, audit_result_json(&ar));
		return 0;
	}
	if (strcmp(name, WIRE_CMD_PROFILE) == 0) {
		struct profile_result pr;
		const json_t *last = json_object_get(cmd, "last");
		if (!w->profiling) {
			if ((rc = profile_begin(e)))
				return rc;
			w->profiling = true;
			w->profile_calls = 0;
		}
		if ((rc = event_call(w, args, false, &ev, e)))
			return rc;
		w->profile_calls++;
		if (!json_is_true(last)) {
			events_emit(WIRE_EV_CALLED, json_pack("{s:o}", "ev_ms", json_null()));
			return 0;
		}
		w->profiling = false;
		if ((rc = profile_end(&w->g, w->profile_calls, &pr, e)))
			return rc;
		{
			json_t *ev_obj = profile_result_json(&pr);
			json_object_set_new(ev_obj, "ok", json_true());
			events_emit(WIRE_EV_PROFILE, ev_obj);
		}
		profile_result_free(&pr);
		return 0;
	}
	if ((rc = event_call(w, args, empty, &ev, e)))
		return rc;
	events_emit(WIRE_EV_CALLED, json_pack("{s:o}", "ev_ms", nullable_number(ev)));
	return 0;
}

/* Handles one command: 0 to go on, 1 after quit, negative with e filled when the command
 * failed (e->fatal: the worker must stop). */
static int handle(struct worker *w, const char *line, struct worker_error *e)
{
	json_error_t jerr;
	json_t *cmd = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
	const char *name = json_string_value(json_object_get(cmd, "cmd"));
	int rc = 0;

	if (!json_is_object(cmd) || !name) {
		rc = werr(e, "worker.bad_plan", true, CA_ERR_PARSE,
			  "a command must be a JSON object with \"cmd\"");
	} else if (w->plan.reference && strcmp(name, WIRE_CMD_EMPTY) != 0 &&
		   strcmp(name, WIRE_CMD_QUIT) != 0) {
		rc = werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
			  "a reference process answers empty and quit only, not \"%.64s\"", name);
	} else if (strcmp(name, WIRE_CMD_LOAD) == 0) {
		rc = cmd_load(w, e);
	} else if (strcmp(name, WIRE_CMD_SETUP) == 0) {
		if (!(rc = need_loaded(w, name, e)) &&
		    !(rc = candidate_setup(&w->cand, &w->g, &w->params, "setup", e)))
			events_emit(WIRE_EV_SET_UP, json_object());
	} else if (strcmp(name, WIRE_CMD_EMPTY) == 0 || strcmp(name, WIRE_CMD_CALL) == 0 ||
		   strcmp(name, WIRE_CMD_AUDIT) == 0 || strcmp(name, WIRE_CMD_PROFILE) == 0) {
		rc = cmd_call(w, cmd, name, e);
	} else if (strcmp(name, WIRE_CMD_QUIT) == 0) {
		if (w->profiling)
			profile_abort();
		if (w->loaded && !(rc = candidate_teardown(&w->cand, &w->g, e)))
			rc = 1;
		else if (!w->loaded)
			rc = 1;
	} else {
		rc = werr(e, "worker.bad_plan", true, CA_ERR_INVALID, "unknown command \"%.64s\"",
			  name);
	}
	json_decref(cmd);
	return rc;
}

/* ---- start ------------------------------------------------------------------------------------- */

static json_t *nullable_int(int v)
{
	return v >= 0 ? json_integer(v) : json_null();
}

static void emit_device(struct worker *w)
{
	char drv[32], rt[32], cc[32];
	gpu_format_version(w->g.driver_version, drv, sizeof drv);
	gpu_format_version(w->g.runtime_version, rt, sizeof rt);
	snprintf(cc, sizeof cc, "%d.%d", w->g.cc_major, w->g.cc_minor);
	events_emit(WIRE_EV_DEVICE,
		    json_pack("{s:o, s:s, s:s, s:i, s:I, s:s, s:I, s:o, s:o}", "name",
			      json_str(w->g.name, 0), "cuda_driver", drv, "cuda_runtime", rt,
			      "sm_count", w->g.sm_count, "l2_bytes", (json_int_t)w->g.l2_bytes,
			      "compute_capability", cc, "memory_bytes",
			      (json_int_t)w->g.total_mem, "pci_bus_id", json_str(w->g.pci_bus_id, 0),
			      "device", nullable_int(w->g.device)));
}

static int map_one(struct worker *w, const struct plan_slot *p, const char *what,
		   struct device_slot *s, struct worker_error *e)
{
	struct ca_diag d = {{0}};
	int rc = device_slot_map(w->plan.kind, w->g.device, p->fd, p->bytes, s, &d);
	if (rc)
		return werr(e, "worker.bad_input", true, rc, "the %s slot: %s", what, d.msg);
	close(p->fd);
	return 0;
}

/* Maps every slot and lays the tensor sets over them. */
static int map_slots(struct worker *w, struct worker_error *e)
{
	const struct task_spec *s = &w->plan.spec;
	struct ca_diag d = {{0}};
	int rc;

	if (w->plan.kind != DEVICE_CUDA)
		return werr(e, "worker.bad_plan", true, CA_ERR_INVALID,
			    "plan: the native worker needs CUDA slots");
	if (!cudrv_load(&d))
		return werr(e, "worker.no_gpu", true, CA_ERR_UNSUPPORTED, "%s", d.msg);
	if ((rc = slot_layout_make(&w->lay_params, s->params, s->num_params, false, &d)) ||
	    (rc = slot_layout_make(&w->lay_inputs, s->args, s->num_args, true, &d)) ||
	    (rc = slot_layout_make(&w->lay_outputs, s->outputs, s->num_outputs, false, &d)))
		return werr(e, "worker.bad_plan", true, rc, "plan: %s", d.msg);
	if ((rc = map_one(w, &w->plan.params, "params", &w->params_slot, e)) ||
	    (rc = map_one(w, &w->plan.outputs, "outputs", &w->outputs_slot, e)))
		return rc;
	for (int i = 0; i < w->plan.num_inputs; i++)
		if ((rc = map_one(w, &w->plan.inputs[i], "inputs", &w->input_slots[i], e)))
			return rc;
	if ((rc = tensor_set_bind(&w->params, "params", s->params, s->num_params, w->g.device,
				  w->params_slot.dptr, w->params_slot.bytes, &w->lay_params, e)) ||
	    (rc = tensor_set_bind(&w->outputs, "outputs", s->outputs, s->num_outputs,
				  w->g.device, w->outputs_slot.dptr, w->outputs_slot.bytes,
				  &w->lay_outputs, e)))
		return rc;
	for (int i = 0; i < w->plan.num_inputs; i++)
		if ((rc = tensor_set_bind(&w->inputs[i], "args", s->args, s->num_args, w->g.device,
					  w->input_slots[i].dptr, w->input_slots[i].bytes,
					  &w->lay_inputs, e)))
			return rc;
	return 0;
}

/* Keeps the original stdin for commands and gives the candidate /dev/null instead. */
static int hide_stdin(void)
{
	int fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3 + 2 * PLAN_MAX_INPUTS + 8);
	int null = open("/dev/null", O_RDONLY);
	if (null > STDIN_FILENO) {
		dup2(null, STDIN_FILENO);
		close(null);
	}
	return fd;
}

static void release(struct worker *w)
{
	tensor_set_free(&w->params);
	tensor_set_free(&w->outputs);
	for (int i = 0; i < PLAN_MAX_INPUTS; i++) {
		tensor_set_free(&w->inputs[i]);
		device_slot_unmap(&w->input_slots[i]);
	}
	device_slot_unmap(&w->params_slot);
	device_slot_unmap(&w->outputs_slot);
	slot_layout_free(&w->lay_params);
	slot_layout_free(&w->lay_inputs);
	slot_layout_free(&w->lay_outputs);
	if (w->g_open)
		gpu_ctx_close(&w->g);
	worker_plan_free(&w->plan);
	free(w->buf);
}

int main(int argc, char **argv)
{
	struct worker w;
	struct worker_error e = {0};
	struct ca_diag d = {{0}};
	int status = 1, rc;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	memset(&w, 0, sizeof w);
	if (events_open(&d) != 0) {
		fprintf(stderr, "cuda-agent-worker: %s\n", d.msg);
		return 1;
	}
	w.cmd_fd = hide_stdin();
	if (argc != 2) {
		usage(stderr);
		events_error("worker.bad_plan", "usage: cuda-agent-worker PLAN.json");
		return 1;
	}
	if (worker_plan_load(&w.plan, argv[1], &d) != 0) {
		events_error("worker.bad_plan", d.msg);
		return 1;
	}
	if (w.cmd_fd < 0) {
		events_error("worker.internal", "no command channel (stdin)");
		goto out;
	}
	if (gpu_ctx_open(&w.g, w.plan.device, &e) != 0)
		goto fatal;
	w.g_open = true;
	/* `device` once the slots are mapped too: the supervisor counts the start (the context, the
	 * mappings) as the GPU set-up it keeps away from other evaluations' measurements */
	if (!w.plan.reference && map_slots(&w, &e) != 0)
		goto fatal;
	emit_device(&w);
	for (;;) {
		memset(&e, 0, sizeof e);
		rc = read_command(&w, &e);
		if (rc == 1) { /* the supervisor is gone */
			status = 1;
			goto out;
		}
		if (rc)
			goto fatal;
		rc = handle(&w, w.buf, &e);
		consume_command(&w);
		if (rc == 1) {
			events_emit(WIRE_EV_DONE, json_object());
			status = 0;
			goto out;
		}
		if (rc == 0)
			continue;
		if (worker_error_is_call_failure(&e)) {
			emit_failed(&e, NULL);
			if (!e.fatal)
				continue;
			goto out; /* a CUDA fault: the context is unusable */
		}
		goto fatal;
	}
fatal:
	events_error(e.code ? e.code : "worker.internal", e.diag.msg);
out:
	release(&w);
	if (w.cmd_fd >= 0)
		close(w.cmd_fd);
	return status;
}
