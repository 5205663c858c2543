/* kb_runs: KernelBench run layout and eval results (kb_runs.h). */
#include "bench/kb_runs.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

/* The non-negative decimal number at s (at most 9 digits), or -1; *end past it. */
static int leading_number(const char *s, const char **end)
{
	long v = 0;
	int n = 0;
	while (isdigit((unsigned char)s[n]) && n < 9)
		v = v * 10 + (s[n++] - '0');
	*end = s + n;
	return n == 0 || isdigit((unsigned char)s[n]) ? -1 : (int)v;
}

int kb_key_parse(const char *key, int *level, int *problem)
{
	const char *last = strrchr(key, '/'), *prev, *end;
	int l, p;
	if (!last || last == key)
		return CA_ERR_INVALID;
	prev = last;
	while (prev > key && prev[-1] != '/')
		prev--;
	if (strncmp(prev, "level", 5) != 0)
		return CA_ERR_INVALID;
	l = leading_number(prev + 5, &end);
	if (l < 0 || end != last)
		return CA_ERR_INVALID;
	p = leading_number(last + 1, &end);
	if (p < 0 || (*end != '_' && *end != '\0'))
		return CA_ERR_INVALID;
	*level = l;
	*problem = p;
	return 0;
}

int kb_run_candidate(const char *candidates_dir, const char *key, int sample, char *out,
		     size_t size)
{
	int level, problem, n;
	if (kb_key_parse(key, &level, &problem) || sample < 0)
		return CA_ERR_NOTFOUND;
	n = snprintf(out, size, "%s/level_%d_problem_%d_sample_%d_kernel.py", candidates_dir, level,
		     problem, sample);
	if (n < 0 || (size_t)n >= size || !ca_is_file(out))
		return CA_ERR_NOTFOUND;
	return 0;
}

/* A value copied when it has the type KernelBench writes, else null. */
static json_t *bool_or_null(const json_t *v)
{
	return json_is_boolean(v) ? json_boolean(json_is_true(v)) : json_null();
}

/* A one-line copy of a string field (whitespace runs become one space), at most KB_REASON_MAX
 * bytes cut at a character boundary; NULL when v is no non-empty string. */
static json_t *one_line(const json_t *v)
{
	char out[KB_REASON_MAX + 1];
	const char *s = json_string_value(v);
	size_t n = 0;
	bool space = false;
	if (!s)
		return NULL;
	for (; *s && n < KB_REASON_MAX; s++) {
		if (isspace((unsigned char)*s)) {
			space = n > 0;
			continue;
		}
		if (space && n + 1 < KB_REASON_MAX)
			out[n++] = ' ';
		space = false;
		out[n++] = *s;
	}
	while (n > 0 && ((unsigned char)out[n - 1] & 0xC0) == 0x80 && *s)
		n--; /* a cut multi-byte character */
	if (n > 0 && *s && ((unsigned char)out[n - 1] & 0xC0) == 0xC0)
		n--;
	out[n] = '\0';
	return n ? json_stringn(out, n) : NULL;
}

/* Why KernelBench refused (or flagged) it: the record's "reason" (cuda-agent's harness writes
 * one), else the first of the metadata fields KernelBench's eval and scripts fill. */
static json_t *reason_of(const json_t *rec)
{
	static const char *const keys[] = {"error", "correctness_issue", "compilation_error_name",
					   "compilation_error", "runtime_error_name",
					   "runtime_error", "cuda_error_name", "cuda_error",
					   "other_error_name", "other_error"};
	const json_t *md = json_object_get(rec, "metadata");
	json_t *r = one_line(json_object_get(rec, "reason"));
	if (r || json_is_string(json_object_get(rec, "reason")))
		return r;
	for (size_t i = 0; json_is_object(md) && i < sizeof keys / sizeof keys[0]; i++)
		if ((r = one_line(json_object_get(md, keys[i]))))
			return r;
	return NULL;
}

static json_t *verdict_of(const json_t *rec, int sample)
{
	const json_t *rt = json_object_get(rec, "runtime"), *ref = json_object_get(rec, "ref_runtime");
	const json_t *md = json_object_get(rec, "metadata");
	json_t *v, *reason;
	if (!json_is_object(rec))
		return NULL;
	v = json_pack("{s:i, s:o, s:o, s:o}", "sample_id", sample, "compiled",
		      bool_or_null(json_object_get(rec, "compiled")), "correctness",
		      bool_or_null(json_object_get(rec, "correctness")), "runtime",
		      json_is_number(rt) ? json_real(json_number_value(rt)) : json_null());
	if (!v)
		return NULL;
	/* Only what the record has: a plain eval_results.json gives the four fields above. */
	if ((reason = reason_of(rec)))
		json_object_set_new(v, "reason", reason);
	if (json_is_number(ref) && json_number_value(ref) > 0)
		json_object_set_new(v, "ref_runtime", json_real(json_number_value(ref)));
	if (json_is_object(md) && json_is_true(json_object_get(md, "excessive_speedup")))
		json_object_set_new(v, "excessive_speedup", json_true());
	return v;
}

/* Whether rec (an object) names sample: its "sample_id" when it has one, else sample 0. */
static int record_sample(const json_t *rec)
{
	const json_t *s = json_object_get(rec, "sample_id");
	if (!s)
		return 0;
	if (json_is_integer(s) && json_integer_value(s) >= 0 && json_integer_value(s) <= KB_MAX_SAMPLE)
		return (int)json_integer_value(s);
	if (json_is_string(s)) {
		const char *end;
		int v = leading_number(json_string_value(s), &end);
		return *end ? -1 : v;
	}
	return -1;
}

json_t *kb_results_lookup(const json_t *results, const char *key, int sample)
{
	char name[32], sname[16];
	const json_t *entry, *rec;
	int level, problem;
	size_t i;

	if (!json_is_object(results) || kb_key_parse(key, &level, &problem))
		return NULL;
	snprintf(name, sizeof name, "L%dP%d", level, problem);
	entry = json_object_get(results, name);
	if (!entry) {
		snprintf(name, sizeof name, "%d", problem);
		entry = json_object_get(results, name);
	}
	if (json_is_array(entry)) {
		json_array_foreach(entry, i, rec)
			if (json_is_object(rec) && record_sample(rec) == sample)
				return verdict_of(rec, sample);
		return NULL;
	}
	if (!json_is_object(entry))
		return NULL;
	snprintf(sname, sizeof sname, "%d", sample);
	rec = json_object_get(entry, sname);
	if (json_is_object(rec))
		return verdict_of(rec, sample);
	return record_sample(entry) == sample && json_object_get(entry, "compiled")
		       ? verdict_of(entry, sample)
		       : NULL;
}

int kb_results_load(const char *path, json_t **out, struct ca_diag *d)
{
	char *text = NULL;
	size_t len = 0;
	json_error_t err;
	int rc = ca_read_file(path, KB_RESULTS_MAX_BYTES, &text, &len, d);
	*out = NULL;
	if (rc)
		return rc;
	*out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	free(text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return ca_fail(d, CA_ERR_INVALID,
			       "%s is not KernelBench's eval results (a JSON object): line %d: %s",
			       path, err.line, err.text);
	}
	return 0;
}
