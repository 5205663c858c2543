/* data: the evaluation's data in slots (docs/protocol.md, "Slots"): allocated by the bridge,
 * mapped in the supervisor's device context, filled by the bridge from the secret seeds,
 * prepared and checksummed by the supervisor, checked by the bridge. The candidate's process
 * maps the same slots but is stopped whenever anything here runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "device/prep.h"
#include "protocol/reasons.h"
#include "eval/compare.h"
#include "eval/run.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- open and close ---------------------------------------------------------------------------- */

static void kept_release(struct run_data *D);

static void close_fds(struct run_data *D)
{
	for (int i = 0; i < D->nfds; i++)
		if (D->fds[i] >= 0)
			close(D->fds[i]);
	D->nfds = 0;
}

int data_open(struct run *r)
{
	struct run_data *D = &r->data;
	const struct task_spec *s = &r->spec;
	struct ca_diag d = {{0}};
	json_t *req, *res = NULL;
	const char *kind;
	enum device_kind dk;
	int rc;

	D->ninputs = r->timing_wanted ? r->o->protocol.rotation_sets : 1;
	if (D->ninputs < 1 || D->ninputs > RUN_MAX_INPUTS) {
		set_reason(r, "internal", "rotation sets must be 1..%d", RUN_MAX_INPUTS);
		return -1;
	}
	if (getrandom(&D->salt, sizeof D->salt, 0) != (ssize_t)sizeof D->salt)
		D->salt = (uint64_t)(ca_now() * 1e9) ^ 0x9E3779B97F4A7C15ull;
	if ((rc = slot_layout_make(&D->lay_params, s->params, s->num_params, false, &d)) ||
	    (rc = slot_layout_make(&D->lay_inputs, s->args, s->num_args, true, &d)) ||
	    (rc = slot_layout_make(&D->lay_outputs, s->outputs, s->num_outputs, false, &d))) {
		set_reason(r, "task.unsupported", "the task's tensors: %s", d.msg);
		return -1;
	}
	req = json_pack("{s:I, s:I, s:i, s:I}", "params_bytes", (json_int_t)D->lay_params.bytes,
			"input_bytes", (json_int_t)D->lay_inputs.bytes, "inputs", D->ninputs,
			"output_bytes", (json_int_t)D->lay_outputs.bytes);
	rc = bridge_request(r, "slots", req, 120.0, &res);
	json_decref(req);
	if (rc)
		return -1;
	D->bridge_slots = true;
	kind = json_string_value(json_object_get(res, "kind"));
	dk = kind && strcmp(kind, "cuda") == 0 ? DEVICE_CUDA
	     : kind && strcmp(kind, "cpu") == 0 ? DEVICE_CPU
						: DEVICE_NONE;
	json_decref(res);
	if (dk == DEVICE_NONE) {
		set_reason(r, "env.bridge", "torch bridge (slots): unknown slot kind");
		return -1;
	}
	D->nfds = D->ninputs + 2;
	for (int i = 0; i < D->nfds; i++)
		D->fds[i] = -1;
	if (bridge_recv_fds(&r->s->bridge, D->fds, (size_t)D->nfds, 30.0, &d)) {
		D->nfds = 0;
		set_reason(r, "env.bridge", "torch bridge (slots): %s", d.msg);
		return -1;
	}
	if (eval_session_device_take(r->s, dk, &D->dev, &d)) {
		set_reason(r, "env.gpu", "the supervisor cannot use the GPU itself: %s", d.msg);
		return -1;
	}
	D->dev_open = true;
	if ((rc = device_slot_import(&D->dev, D->fds[0], D->lay_params.bytes, &D->params, &d)) ||
	    (rc = device_slot_import(&D->dev, D->fds[D->nfds - 1], D->lay_outputs.bytes,
				     &D->outputs, &d))) {
		set_reason(r, "env.gpu", "mapping the slots: %s", d.msg);
		return -1;
	}
	for (int i = 0; i < D->ninputs; i++)
		if (device_slot_import(&D->dev, D->fds[1 + i], D->lay_inputs.bytes, &D->inputs[i],
				       &d)) {
			set_reason(r, "env.gpu", "mapping the slots: %s", d.msg);
			return -1;
		}
	if (r->timing_wanted &&
	    device_flush_alloc(&D->dev, r->o->protocol.timing.l2_flush_factor, &D->flush_bytes,
			       &d)) {
		set_reason(r, "env.gpu", "%s", d.msg);
		return -1;
	}
	return 0;
}

void data_release_fds(struct run *r)
{
	close_fds(&r->data);
}

void data_close(struct run *r)
{
	struct run_data *D = &r->data;
	close_fds(D);
	kept_release(D);
	for (int i = 0; i < RUN_MAX_INPUTS; i++) {
		json_decref(D->scalars[i]);
		D->scalars[i] = NULL;
		device_slot_unmap(&D->inputs[i]);
	}
	device_slot_unmap(&D->params);
	device_slot_unmap(&D->outputs);
	if (D->dev_open)
		eval_session_device_give(r->s, &D->dev);
	D->dev_open = false;
	if (D->bridge_slots) {
		json_t *req = json_object(), *res = NULL;
		struct ca_diag d = {{0}};
		char code[64];
		if (bridge_call(&r->s->bridge, "slots_close", req, 60.0, &res, code, sizeof code, &d))
			ca_log_warn("torch bridge: cannot release the slots: %s", d.msg);
		json_decref(req);
		json_decref(res);
		D->bridge_slots = false;
	}
	slot_layout_free(&D->lay_params);
	slot_layout_free(&D->lay_inputs);
	slot_layout_free(&D->lay_outputs);
}

/* ---- checksums --------------------------------------------------------------------------------- */

/* The checksum of exactly the tensors of a slot (not its padding), each with its own salt. */
static int slot_sum(struct run *r, struct device_slot *slot, const struct tensor_spec *t, int n,
		    const struct slot_layout *lay, uint64_t *sum, struct ca_diag *d)
{
	struct device *dev = &r->data.dev;
	int rc = device_checksum_reset(dev, d);
	for (int i = 0; !rc && i < n; i++)
		if (lay->offset[i] != SIZE_MAX)
			rc = device_checksum_add(dev, slot, lay->offset[i], tensor_spec_nbytes(&t[i]),
						 r->data.salt ^ ((uint64_t)i * (uint64_t)0x9E3779B97F4A7C15ull),
						 d);
	return rc ? rc : device_checksum_read(dev, sum, d);
}

static int params_sum(struct run *r, uint64_t *sum, struct ca_diag *d)
{
	return slot_sum(r, &r->data.params, r->spec.params, r->spec.num_params,
			&r->data.lay_params, sum, d);
}

static int input_sum(struct run *r, int input, uint64_t *sum, struct ca_diag *d)
{
	return slot_sum(r, &r->data.inputs[input], r->spec.args, r->spec.num_args,
			&r->data.lay_inputs, sum, d);
}

/* ---- filling ----------------------------------------------------------------------------------- */

int data_fill(struct run *r, uint64_t model_seed, bool params, const struct data_set *sets,
	      int nsets)
{
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};
	json_t *list = json_array(), *req, *res = NULL, *scalars;
	int rc;

	for (int i = 0; i < nsets; i++) {
		json_t *e = json_pack("{s:i, s:I}", "input", sets[i].input, "seed",
				      (json_int_t)sets[i].seed);
		if (sets[i].near_seed)
			json_object_set_new(e, "near_seed", json_integer((json_int_t)*sets[i].near_seed));
		json_array_append_new(list, e);
	}
	req = json_pack("{s:s, s:I, s:b, s:o, s:s}", "task_dir", r->task.dir, "model_seed",
			(json_int_t)model_seed, "params", params, "sets", list, "module_mode",
			run_module_mode(r));
	rc = bridge_request(r, "fill", req, 600.0 + 4.0 * (double)D->lay_inputs.bytes * nsets / 1e9,
			    &res);
	json_decref(req);
	if (rc)
		return -1;
	scalars = json_object_get(res, "scalars");
	if (json_array_size(scalars) != (size_t)nsets) {
		json_decref(res);
		set_reason(r, "env.bridge", "torch bridge (fill): %zu scalar lists for %d sets",
			   json_array_size(scalars), nsets);
		return -1;
	}
	for (int i = 0; i < nsets; i++) {
		D->state[sets[i].input] = 0;
		json_decref(D->scalars[sets[i].input]);
		D->scalars[sets[i].input] = json_incref(json_array_get(scalars, (size_t)i));
	}
	json_decref(res);
	if (params) {
		D->model_seed = model_seed;
		if (params_sum(r, &D->params_sum, &d)) {
			set_reason(r, "env.gpu", "checksum of the params: %s", d.msg);
			return -1;
		}
	}
	return 0;
}

int data_ready(struct run *r, int input, bool flush)
{
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};
	if (device_poison(&D->dev, &D->outputs, 0, D->lay_outputs.bytes, &d) ||
	    input_sum(r, input, &D->in_sum[input], &d) ||
	    (flush && device_flush_l2(&D->dev, &d)) || device_sync(&D->dev, &d)) {
		set_reason(r, "env.gpu", "preparing a call: %s", d.msg);
		return -1;
	}
	return 0;
}

/* ---- checking ---------------------------------------------------------------------------------- */

/* A value of the bridge's check answer: a number, or "nan", "inf", "-inf". */
static double check_number(const json_t *v)
{
	const char *s = json_string_value(v);
	if (json_is_number(v))
		return json_number_value(v);
	if (s && strcmp(s, "inf") == 0)
		return INFINITY;
	if (s && strcmp(s, "-inf") == 0)
		return -INFINITY;
	return NAN;
}

/* One output's figures from the bridge's check answer (compare.h's rule, computed on the
 * device by python/cuda_agent_bridge/server.py compare_stats). */
static int check_result(const json_t *o, const struct tensor_spec *spec,
			struct compare_result *cr)
{
	const json_t *first = json_object_get(o, "first_index");
	json_int_t numel = json_integer_value(json_object_get(o, "numel"));
	json_int_t bad = json_integer_value(json_object_get(o, "mismatches"));
	json_int_t unwritten = json_integer_value(json_object_get(o, "nan_unwritten"));
	memset(cr, 0, sizeof *cr);
	if (!json_is_integer(json_object_get(o, "numel")) || numel < 0 || bad < 0 ||
	    unwritten < 0 || bad > numel || (!json_is_null(first) && !json_is_integer(first)))
		return -1;
	cr->shape_ok = true;
	cr->numel = (size_t)numel;
	cr->mismatches = (size_t)bad;
	cr->nan_unwritten = (size_t)unwritten;
	cr->max_abs_err = check_number(json_object_get(o, "max_abs_err"));
	cr->max_rel_err = check_number(json_object_get(o, "max_rel_err"));
	cr->match = bad == 0;
	cr->ndim = spec->ndim;
	if (json_is_integer(first) && json_integer_value(first) >= 0 &&
	    json_integer_value(first) < numel)
		compare_locate(cr, (size_t)json_integer_value(first), spec->shape, spec->ndim,
			       check_number(json_object_get(o, "first_out")),
			       check_number(json_object_get(o, "first_ref")));
	else if (bad > 0)
		return -1;
	return 0;
}

/* The figures of a call's outputs, summed into its entry. */
struct tally {
	double max_abs, max_rel;
	size_t mismatches;
	bool all_match, described;
};

static void tally_output(struct run *r, int i, const struct compare_result *cr, json_t *entry,
			 struct tally *t)
{
	char label[CA_SPEC_NAME_MAX + 32], msg[1024];
	t->max_abs = fmax(t->max_abs, cr->max_abs_err);
	t->max_rel = fmax(t->max_rel, cr->max_rel_err);
	t->mismatches += cr->shape_ok ? cr->mismatches : cr->numel;
	if (cr->match)
		return;
	t->all_match = false;
	if (t->described)
		return;
	t->described = true;
	snprintf(label, sizeof label, "output %d (%s)", i, r->spec.outputs[i].name);
	compare_describe(cr, label, msg, sizeof msg);
	json_object_set_new(entry, "message", json_string(msg));
	if (cr->has_first) {
		json_t *idx = json_array();
		for (int k = 0; k < cr->ndim && k < 8; k++)
			json_array_append_new(idx, json_integer(cr->first_coords[k]));
		json_object_set_new(entry, "first_mismatch",
				    json_pack("{s:i, s:s, s:o, s:f, s:f}", "output", i, "name",
					      r->spec.outputs[i].name, "index", idx, "got",
					      isfinite(cr->first_out) ? cr->first_out : 0.0,
					      "expected",
					      isfinite(cr->first_ref) ? cr->first_ref : 0.0));
		if (!isfinite(cr->first_out))
			json_object_set_new(json_object_get(entry, "first_mismatch"), "got",
					    json_string(isnan(cr->first_out) ? "nan" : "inf"));
	}
}

/* Whether inputs[input] and the params are as prepared: 1, or 0 with entry saying which was
 * modified, or -1 (reason set). */
static int check_unchanged(struct run *r, int input, json_t *entry)
{
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};
	uint64_t in_now, params_now;

	if (input_sum(r, input, &in_now, &d) || params_sum(r, &params_now, &d)) {
		set_reason(r, "env.gpu", "checksums after a call: %s", d.msg);
		return -1;
	}
	if (in_now != D->in_sum[input]) {
		json_object_set_new(entry, "code", json_string("verify.input_modified"));
		json_object_set_new(entry, "message",
				    json_string("the candidate modified its inputs; inputs are "
						"read-only: write results only into the outputs"));
		return 0;
	}
	if (params_now != D->params_sum) {
		json_object_set_new(entry, "code", json_string("verify.params_modified"));
		json_object_set_new(entry, "message",
				    json_string("the candidate modified its parameters; parameters "
						"are read-only (native: pack them into buffers of your "
						"own in ca_setup)"));
		return 0;
	}
	return 1;
}

/* The bridge's comparison of the outputs with the reference on inputs[input] and `scalars`. */
static int check_outputs(struct run *r, int input, json_t *scalars, json_t *entry)
{
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};
	struct tally t = {.all_match = true};
	json_t *req, *res = NULL, *outs;
	char code[64];
	int rc;

	/* A ModelNew that kept its seeded construction's parameters (kernelbench rules, spawn.c
	 * note_params) is checked against Model built under the same seed, as constructed */
	req = json_pack("{s:s, s:I, s:i, s:o, s:f, s:f, s:s}", "task_dir", r->task.dir,
			"model_seed",
			(json_int_t)(r->params_seeded ? RUN_TORCH_INIT_SEED : D->model_seed),
			"input", input, "scalars", scalars ? json_incref(scalars) : json_array(),
			"atol", r->task.atol, "rtol", r->task.rtol, "module_mode",
			run_module_mode(r));
	if (req && r->params_seeded)
		json_object_set_new(req, "perturb", json_false());
	rc = bridge_call(&r->s->bridge, "check", req,
			 120.0 + 4.0 * (double)(D->lay_inputs.bytes + D->lay_outputs.bytes) / 1e9,
			 &res, code, sizeof code, &d);
	json_decref(req);
	if (rc) {
		set_reason(r, code[0] && reason_class_of(code) == REASON_TASK ? code : "env.bridge",
			   "the torch bridge could not check the outputs: %s", d.msg);
		return -1;
	}
	outs = json_object_get(res, "outputs");
	if (json_array_size(outs) != (size_t)r->spec.num_outputs) {
		json_decref(res);
		set_reason(r, "env.bridge", "the torch bridge checked %zu outputs; the spec has %d",
			   json_array_size(outs), r->spec.num_outputs);
		return -1;
	}
	for (int i = 0; i < r->spec.num_outputs; i++) {
		struct compare_result cr;
		if (check_result(json_array_get(outs, (size_t)i), &r->spec.outputs[i], &cr)) {
			json_decref(res);
			set_reason(r, "env.bridge", "the torch bridge's check of output %d is malformed",
				   i);
			return -1;
		}
		tally_output(r, i, &cr, entry, &t);
	}
	json_decref(res);
	json_object_set_new(entry, "max_abs_err", json_real(t.max_abs));
	json_object_set_new(entry, "max_rel_err", json_real(t.max_rel));
	json_object_set_new(entry, "mismatches", json_integer((json_int_t)t.mismatches));
	return t.all_match ? 1 : 0;
}

int data_check(struct run *r, int input, json_t *entry)
{
	int v = check_unchanged(r, input, entry);
	return v == 1 ? check_outputs(r, input, r->data.scalars[input], entry) : v;
}

/* ---- checks kept for after the loop ------------------------------------------------------------- */

#define KEPT_ALIGN 256u
#define KEPT_SLACK 4 /* copies beyond the expected number of checks */

static size_t kept_round(size_t n)
{
	return (n + KEPT_ALIGN - 1) / KEPT_ALIGN * KEPT_ALIGN;
}

/* How many calls a loop of protocol p is likely to check: the special ones, and about
 * density * (1 + ln(max_samples / density)) spot checks (chance min(1, density / (i + 1))). */
static int kept_expected(const struct timing_protocol *p)
{
	double n = (double)p->max_samples, dens = p->spot_density, spot = fmin(n, dens);
	if (n > dens && dens > 0)
		spot += dens * log(n / dens);
	return p->checks + (int)ceil(spot) + KEPT_SLACK;
}

int data_keep_reserve(struct run *r)
{
	struct run_data *D = &r->data;
	const struct timing_protocol *p = &r->o->protocol.timing;
	struct ca_diag d = {{0}};
	size_t cap_bytes = (size_t)(p->defer_checks_mb * 1048576.0), stride;
	int n, rc;

	if (D->kept_cap > 0 || !(p->defer_checks_mb > 0))
		return 0;
	D->kept_out_at = kept_round(D->lay_inputs.bytes);
	stride = D->kept_out_at + kept_round(D->lay_outputs.bytes);
	n = kept_expected(p);
	if (stride == 0 || cap_bytes / stride < 1)
		return 0;
	if ((size_t)n > cap_bytes / stride)
		n = (int)(cap_bytes / stride);
	/* as many as fit, halving (a large task's copies may not all fit beside its slots) */
	while ((rc = device_buffer_alloc(&D->dev, stride * (size_t)n, D->dev.total_mem / 8,
					 &D->kept_buf, &d)) == CA_ERR_NOMEM &&
	       n > 1)
		n /= 2;
	if (rc == CA_ERR_NOMEM) {
		ca_log_debug("no room for a kept check of %zu bytes: checks at once", stride);
		return 0;
	}
	if (rc) {
		set_reason(r, "env.gpu", "the buffer for kept checks: %s", d.msg);
		return -1;
	}
	if (!(D->kept = calloc((size_t)n, sizeof *D->kept))) {
		device_buffer_free(&D->dev, &D->kept_buf);
		return 0;
	}
	D->kept_stride = stride;
	D->kept_cap = n;
	return 0;
}

static void kept_release(struct run_data *D)
{
	for (int k = 0; k < D->kept_cap; k++)
		json_decref(D->kept[k].scalars);
	free(D->kept);
	D->kept = NULL;
	D->kept_cap = 0;
	if (D->dev_open)
		device_buffer_free(&D->dev, &D->kept_buf);
}

/* Copies inputs[input] and the outputs to or from kept copy k. */
static int kept_copy(struct run *r, int input, int k, bool to_buffer, struct ca_diag *d)
{
	struct run_data *D = &r->data;
	size_t at = (size_t)k * D->kept_stride;
	return device_buffer_copy(&D->dev, &D->inputs[input], 0, &D->kept_buf, at,
				  D->lay_inputs.bytes, to_buffer, d) ||
	       device_buffer_copy(&D->dev, &D->outputs, 0, &D->kept_buf, at + D->kept_out_at,
				  D->lay_outputs.bytes, to_buffer, d);
}

static int loop_keep(void *ctx, int input, int kept, json_t *detail, struct loop_fail *f)
{
	struct run *r = ctx;
	struct run_data *D = &r->data;
	struct run_kept *k;
	struct ca_diag d = {{0}};
	int v;

	if (kept < 0 || kept >= D->kept_cap)
		return LOOP_KEEP_FULL;
	if ((v = check_unchanged(r, input, detail)) != 1) {
		if (v < 0)
			loop_fail_set(f, reason_code(r), "checking a call failed");
		return v < 0 ? v : LOOP_KEEP_WRONG;
	}
	if (kept_copy(r, input, kept, true, &d)) {
		loop_fail_set(f, "env.gpu", "keeping a checked call: %s", d.msg);
		return CA_ERR_IO;
	}
	k = &D->kept[kept];
	json_decref(k->scalars);
	*k = (struct run_kept){.input = input,
			       .scalars = D->scalars[input] ? json_incref(D->scalars[input]) : NULL,
			       .in_sum = D->in_sum[input],
			       .state = D->state[input]};
	return LOOP_KEPT;
}

/* Puts kept call `kept` back where it was made (its inputs, the outputs it left, and what the
 * slot's state was) and judges its outputs as data_check would have then. */
static int loop_check_kept(void *ctx, int kept, json_t *detail, struct loop_fail *f)
{
	struct run *r = ctx;
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};
	const struct run_kept *k;
	int v;

	if (kept < 0 || kept >= D->kept_cap) {
		loop_fail_set(f, "internal", "kept check %d of %d", kept, D->kept_cap);
		return CA_ERR_INVALID;
	}
	k = &D->kept[kept];
	if (kept_copy(r, k->input, kept, false, &d) || device_sync(&D->dev, &d)) {
		loop_fail_set(f, "env.gpu", "restoring a kept call: %s", d.msg);
		return CA_ERR_IO;
	}
	D->in_sum[k->input] = k->in_sum;
	D->state[k->input] = k->state;
	json_decref(D->scalars[k->input]);
	D->scalars[k->input] = k->scalars ? json_incref(k->scalars) : NULL;
	if ((v = check_outputs(r, k->input, k->scalars, detail)) < 0)
		loop_fail_set(f, reason_code(r), "checking a call failed");
	return v;
}

/* ---- the loop's view ------------------------------------------------------------------------- */

static int loop_prepare(void *ctx, int input, int special, uint64_t seed, struct loop_fail *f)
{
	struct run *r = ctx;
	struct run_data *D = &r->data;
	struct ca_diag d = {{0}};

	if (special == LOOP_NORMAL) {
		for (int i = 0; i < r->spec.num_args; i++) {
			const struct tensor_spec *t = &r->spec.args[i];
			uint64_t layout = t->perturb == TENSOR_PERTURB_UNIFORM ? CA_PREP_UNIFORM
					  : t->perturb == TENSOR_PERTURB_SYMMETRIC
						  ? (uint64_t)t->shape[t->ndim - 1]
						  : CA_PREP_ELEMENTS;
			if (D->lay_inputs.offset[i] == SIZE_MAX || !ca_dtype_is_float(t->dtype) ||
			    t->perturb == TENSOR_PERTURB_NONE)
				continue;
			if (device_perturb(&D->dev, &D->inputs[input], D->lay_inputs.offset[i],
					   (size_t)tensor_spec_numel(t), t->dtype, layout,
					   D->state[input], seed, r->o->protocol.timing.perturb_scale,
					   &d)) {
				loop_fail_set(f, "env.gpu", "perturbing an input: %s", d.msg);
				return CA_ERR_IO;
			}
		}
		D->state[input] = seed;
	} else {
		const struct eval_protocol *p = &r->o->protocol;
		struct data_set set = {.input = input};
		if (special == LOOP_FINAL) {
			set.seed = r->final_seed;
		} else {
			set.seed = r->check_seeds[special];
			/* the first special set is fresh, the others near-duplicates of a rotation
			 * set (a cache keyed by sampled input values mistakes them for one it saw) */
			if (special > 0)
				set.near_seed = &r->rotation_seeds[special % p->rotation_sets];
		}
		if (data_fill(r, r->timing_model_seed, false, &set, 1)) {
			loop_fail_set(f, reason_code(r), "placing a checked set failed");
			return CA_ERR_IO;
		}
	}
	if (data_ready(r, input, true)) {
		loop_fail_set(f, reason_code(r), "preparing a call failed");
		return CA_ERR_IO;
	}
	return 0;
}

static int loop_check(void *ctx, int input, int special, json_t *detail, struct loop_fail *f)
{
	struct run *r = ctx;
	int v;
	(void)special;
	v = data_check(r, input, detail);
	if (v < 0)
		loop_fail_set(f, reason_code(r), "checking a call failed");
	return v;
}

void data_loop_ops(struct run *r, struct loop_ops *ops)
{
	ops->ctx = r;
	ops->prepare = loop_prepare;
	ops->check = loop_check;
	ops->keep = loop_keep;
	ops->check_kept = loop_check_kept;
}
