/* tasks_check: the degeneracy check of stored tasks (tasks_check.h). */
#include "cli/tasks_check.h"
#include "protocol/reasons.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge/bridge.h"
#include "cli/commands.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

#define CHECK_LEVELS 8            /* levels counted one by one; higher ones count as "other" */
#define DESCRIBE_TIMEOUT_S 1800.0 /* one task's survey (a level-3 model on the CPU is slow) */

struct pending {
	struct task_record *recs;
	size_t n, cap;
	bool again;
};

static int collect(const struct task_record *r, void *arg)
{
	struct pending *p = arg;
	if (!p->again && task_record_checked(r))
		return 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		struct task_record *grown = realloc(p->recs, cap * sizeof *grown);
		if (!grown)
			return CA_ERR_NOMEM;
		p->recs = grown;
		p->cap = cap;
	}
	p->recs[p->n++] = *r;
	return 0;
}

/* One line of JSON on stdout; takes j (NULL: nothing is printed). */
static void put_json(json_t *j)
{
	char *out = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (out)
		puts(out);
	free(out);
	json_decref(j);
}

/* "zeros (max |y| 1.2e-09, atol 0.01)" from the bridge's degenerate object. */
static void describe_degenerate(const json_t *deg, char *out, size_t size)
{
	const char *kind = json_string_value(json_object_get(deg, "kind"));
	const json_t *max_abs = json_object_get(deg, "max_abs");
	const json_t *atol = json_object_get(deg, "atol");
	size_t off = 0;
	out[0] = '\0';
	ca_appendf(out, size, &off, "%s", kind ? kind : "degenerate");
	if (json_is_number(max_abs) && json_is_number(atol))
		ca_appendf(out, size, &off, " (max |y| %.3g, atol %.3g)", json_number_value(max_abs),
			   json_number_value(atol));
	if (json_is_true(json_object_get(deg, "params_perturbed")))
		ca_appendf(out, size, &off, json_is_string(json_object_get(deg, "after"))
						    ? ", still with perturbed parameters"
						    : ", not with perturbed parameters");
}

/* One task described by the bridge and its degeneracy stored: 0 to go on (a task that cannot run
 * is counted in *failed), or the exit code that stops the check. */
static int check_one(struct task_store *s, struct bridge *b, const struct task_record *r,
		     const struct tasks_check_opts *o, size_t *degenerate,
		     size_t per_level[CHECK_LEVELS + 1], size_t *failed)
{
	char dir[PATH_MAX], code[64], line[256], *text = NULL;
	json_t *req, *res = NULL;
	const json_t *deg;
	struct ca_diag d = {{0}};
	int rc;
	if (task_store_task_dir(s, r, dir, sizeof dir) != 0) {
		fprintf(stderr, "cuda-agent: %s: bad directory in the store\n", r->id);
		(*failed)++;
		return 0;
	}
	req = json_pack("{s:s, s:i}", "task_dir", dir, "seed", 1);
	memset(&d, 0, sizeof d);
	code[0] = '\0';
	rc = bridge_call(b, "describe", req, DESCRIBE_TIMEOUT_S, &res, code, sizeof code,
			 &d);
	json_decref(req);
	if (rc == CA_ERR_INVALID && reason_class_of(code) == REASON_TASK) {
		fprintf(stderr, "cuda-agent: %s: %s: %s\n", r->id, code, d.msg);
		(*failed)++;
		return 0;
	}
	if (rc) {
		fprintf(stderr, "cuda-agent: %s: the torch bridge failed: %s\n", r->id, d.msg);
		return EXIT_ENV;
	}
	deg = json_object_get(res, "degenerate");
	if (json_is_object(deg))
		text = json_dumps(deg, JSON_COMPACT | JSON_SORT_KEYS);
	rc = task_store_set_check(s, r->id, r->hash, text, &d);
	if (rc) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		free(text);
		json_decref(res);
		return rc == CA_ERR_NOMEM ? EXIT_INTERNAL : EXIT_ENV;
	}
	if (text) {
		(*degenerate)++;
		per_level[r->level >= 0 && r->level < CHECK_LEVELS ? r->level : CHECK_LEVELS]++;
		if (o->json) {
			put_json(json_pack("{s:s, s:O}", "id", r->id, "degenerate", deg));
		} else {
			describe_degenerate(deg, line, sizeof line);
			printf("%s: %s\n", r->id, line);
		}
		fflush(stdout);
	}
	free(text);
	json_decref(res);
	return 0;
}

/* The last line: how many were checked, degenerate (by level) and could not run. */
static void print_summary(const struct tasks_check_opts *o, size_t n, size_t failed,
			  size_t degenerate, const size_t per_level[CHECK_LEVELS + 1], double seconds)
{
	size_t checked = n - failed;
	char levels[256];
	size_t off = 0;
	levels[0] = '\0';
	for (int l = 0; l <= CHECK_LEVELS; l++) {
		if (!per_level[l])
			continue;
		if (l < CHECK_LEVELS)
			ca_appendf(levels, sizeof levels, &off, "%slevel %d: %zu",
				   off ? ", " : "", l, per_level[l]);
		else
			ca_appendf(levels, sizeof levels, &off, "%sother: %zu",
				   off ? ", " : "", per_level[l]);
	}
	if (o->json) {
		put_json(json_pack("{s:I, s:I, s:I, s:f}", "checked",
				   (json_int_t)(checked), "degenerate",
				   (json_int_t)degenerate, "failed", (json_int_t)failed,
				   "seconds", seconds));
	} else {
		printf("checked %zu task%s: %zu degenerate%s%s%s, %zu could not run (%.1f s)\n",
		       checked, checked == 1 ? "" : "s", degenerate,
		       off ? " (" : "", levels, off ? ")" : "", failed, seconds);
	}
}

int tasks_check_run(struct task_store *s, const struct task_filter *f,
		    const struct tasks_check_opts *o)
{
	struct pending p = {.again = o->again};
	struct bridge b;
	struct bridge_opts bo = {.python = o->python, .device = o->device ? o->device : "auto",
				 .stderr_path = o->quiet ? "/dev/null" : NULL};
	struct ca_diag d = {{0}};
	size_t degenerate = 0, failed = 0, per_level[CHECK_LEVELS + 1] = {0};
	double t0 = ca_now(), shown = t0;
	int rc, exit_code = EXIT_OK;

	memset(&b, 0, sizeof b);

	rc = task_store_list(s, f, collect, &p, &d);
	if (rc == CA_ERR_NOMEM || (rc && !d.msg[0])) {
		free(p.recs);
		fprintf(stderr, "cuda-agent: out of memory\n");
		return EXIT_INTERNAL;
	}
	if (rc) {
		free(p.recs);
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_ENV;
	}
	if (p.n == 0) {
		ca_log_info("no task to check (every selected task is checked at its current "
			    "content; --again checks them again)");
		goto summary;
	}
	if (bridge_start(&b, &bo, &d) || bridge_wait_ready(&b, 300.0, &d)) {
		fprintf(stderr, "cuda-agent: the torch bridge cannot start: %s\n", d.msg);
		free(p.recs);
		bridge_stop(&b);
		return EXIT_ENV;
	}
	ca_log_info("checking %zu task%s on %s", p.n, p.n == 1 ? "" : "s", b.device);
	for (size_t i = 0; i < p.n; i++) {
		if ((exit_code = check_one(s, &b, &p.recs[i], o, &degenerate, per_level, &failed)))
			break;
		if (!o->quiet && ca_now() - shown >= 5.0) {
			shown = ca_now();
			fprintf(stderr, "tasks check: %zu/%zu, %zu degenerate, %.0f s\n", i + 1, p.n,
				degenerate, shown - t0);
		}
	}
	bridge_stop(&b);
summary:
	print_summary(o, p.n, failed, degenerate, per_level, ca_now() - t0);
	free(p.recs);
	if (exit_code == EXIT_OK && failed)
		exit_code = EXIT_TASK;
	return exit_code;
}
