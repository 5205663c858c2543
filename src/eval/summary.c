#include "eval/summary.h"

#include <stdlib.h>
#include <string.h>

#include "util/str.h"

#define SUMMARY_MAX 8192

static double num(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

static const char *str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "";
}

static void timing_line(char *buf, size_t *off, const json_t *timing)
{
	const json_t *cand = json_object_get(timing, "candidate");
	const json_t *eager = json_object_get(timing, "eager");
	const json_t *comp = json_object_get(timing, "compile");
	if (!cand)
		return;
	ca_appendf(buf, SUMMARY_MAX, off, "time      %.4f ms", num(cand, "median_ms"));
	if (num(eager, "median_ms") > 0)
		ca_appendf(buf, SUMMARY_MAX, off, "   eager %.4f ms (%.2fx)", num(eager, "median_ms"),
			   num(timing, "speedup_eager"));
	if (num(comp, "median_ms") > 0)
		ca_appendf(buf, SUMMARY_MAX, off, "   torch.compile %.4f ms (%.2fx)",
			   num(comp, "median_ms"), num(timing, "speedup_compile"));
	else if (json_object_get(comp, "error"))
		ca_appendf(buf, SUMMARY_MAX, off, "   torch.compile failed");
	ca_appendf(buf, SUMMARY_MAX, off, "   [%lld samples, rse %.2f%%%s]\n",
		   (long long)json_integer_value(json_object_get(cand, "samples")),
		   100.0 * num(cand, "rse"),
		   json_is_true(json_object_get(timing, "baselines_cached")) ? ", baselines cached"
									       : "");
}

char *eval_summary_text(const json_t *result)
{
	char *buf = malloc(SUMMARY_MAX);
	size_t off = 0;
	const json_t *task = json_object_get(result, "task");
	const json_t *cand = json_object_get(result, "candidate");
	const json_t *build = json_object_get(result, "build");
	const json_t *reason = json_object_get(result, "reason");
	const json_t *trials = json_object_get(result, "trials");
	const json_t *reward = json_object_get(result, "reward");
	const json_t *prof = json_object_get(result, "profile");

	if (!buf)
		return NULL;
	buf[0] = '\0';
	ca_appendf(buf, SUMMARY_MAX, &off, "task      %s", str(task, "id")[0] ? str(task, "id")
								      : str(task, "dir"));
	if (str(task, "hash")[0])
		ca_appendf(buf, SUMMARY_MAX, &off, "  (%.12s, %s, atol %g rtol %g)", str(task, "hash"),
			   str(task, "precision"), num(task, "atol"), num(task, "rtol"));
	ca_appendf(buf, SUMMARY_MAX, &off, "\ncandidate %s (%s)\n", str(cand, "dir"),
		   str(cand, "format"));
	if (build)
		ca_appendf(buf, SUMMARY_MAX, &off, "build     %s in %.2f s (%s%s, %lld compiled, %lld "
			   "cached)\n", str(build, "status"), num(build, "seconds"),
			   str(build, "arch"), json_is_true(json_object_get(build, "cached"))
						      ? ", library cached" : "",
			   (long long)json_integer_value(json_object_get(build, "units_compiled")),
			   (long long)json_integer_value(json_object_get(build, "units_cached")));
	if (json_array_size(trials) > 0) {
		size_t ok = 0, i;
		double max_abs = 0, max_rel = 0;
		const json_t *t;
		json_array_foreach(trials, i, t) {
			ok += json_is_true(json_object_get(t, "ok"));
			if (num(t, "max_abs_err") > max_abs)
				max_abs = num(t, "max_abs_err");
			if (num(t, "max_rel_err") > max_rel)
				max_rel = num(t, "max_rel_err");
		}
		ca_appendf(buf, SUMMARY_MAX, &off,
			   "verify    %zu/%zu trials correct (max abs err %.3g, max rel err %.3g)\n",
			   ok, json_array_size(trials), max_abs, max_rel);
	}
	if (strcmp(str(result, "params"), "seeded") == 0)
		ca_appendf(buf, SUMMARY_MAX, &off, "params    seeded: ModelNew's state_dict does not pair "
			   "with Model's; both built under the same seed (kernelbench rules)\n");
	timing_line(buf, &off, json_object_get(result, "timing"));
	if (prof) {
		size_t i;
		const json_t *k;
		ca_appendf(buf, SUMMARY_MAX, &off, "profile   %.1f GB/s achieved over %.1f MB moved "
			   "(minimum)", num(prof, "achieved_gbps"), num(prof, "min_bytes") / 1e6);
		if (num(prof, "peak_copy_gbps") > 0)
			ca_appendf(buf, SUMMARY_MAX, &off, ", %.0f%% of the %.0f GB/s measured copy "
				   "bandwidth", 100.0 * num(prof, "fraction_of_peak"),
				   num(prof, "peak_copy_gbps"));
		ca_appendf(buf, SUMMARY_MAX, &off, "\n");
		json_array_foreach(json_object_get(prof, "kernels"), i, k) {
			if (i >= 8)
				break;
			ca_appendf(buf, SUMMARY_MAX, &off,
				   "          %-40.40s %6lld calls %10.1f us avg  %lld regs  %lld B "
				   "smem\n", str(k, "name"),
				   (long long)json_integer_value(json_object_get(k, "calls")),
				   num(k, "avg_ns") / 1e3,
				   (long long)json_integer_value(json_object_get(k, "registers")),
				   (long long)(json_integer_value(json_object_get(k, "static_smem")) +
					       json_integer_value(json_object_get(k, "dynamic_smem"))));
		}
	}
	if (strcmp(str(reason, "code"), "ok") != 0)
		ca_appendf(buf, SUMMARY_MAX, &off, "result    FAIL %s: %s\n", str(reason, "code"),
			   str(reason, "message"));
	else
		ca_appendf(buf, SUMMARY_MAX, &off, "result    ok: %s\n", str(reason, "message"));
	if (json_is_integer(reward))
		ca_appendf(buf, SUMMARY_MAX, &off, "reward    %lld (continuous %.3f): %s\n",
			   (long long)json_integer_value(reward), num(result, "reward_continuous"),
			   str(result, "reward_explanation"));
	return buf;
}
