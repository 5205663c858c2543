/* libFuzzer target: report_add on arbitrary JSON, read as JSONL (each line one result, so
 * duplicates, levels and replacements mix), then the JSON summary, the terminal table and the
 * HTML built from whatever was accepted. Checks: messages are one line; every rate is in [0, 1];
 * fast_p never increases with p and fast_1 is the faster-than rate; geomeans are finite and
 * positive; the HTML carries no markup from the input (no <script, <img, <iframe). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rate(const json_t *v)
{
	if (!json_is_null(v) && !(json_is_number(v) && json_number_value(v) >= 0 &&
				  json_number_value(v) <= 1))
		__builtin_trap();
}

static void check_row(const json_t *row)
{
	const json_t *fe = json_object_get(json_object_get(row, "fast_p"), "eager");
	const json_t *fc = json_object_get(json_object_get(row, "fast_p"), "compile");
	check_rate(json_object_get(row, "pass_rate"));
	check_rate(json_object_get(row, "faster_eager_rate"));
	check_rate(json_object_get(row, "faster_compile_rate"));
	static const char *const geomeans[] = {"geomean_eager", "geomean_compile"};
	for (int k = 0; k < 2; k++) {
		const json_t *g = json_object_get(row, geomeans[k]);
		if (!json_is_null(g) && !(json_is_number(g) && isfinite(json_number_value(g)) &&
					  json_number_value(g) > 0))
			__builtin_trap();
	}
	if (json_array_size(fe) != REPORT_FAST_P_POINTS || json_array_size(fc) != REPORT_FAST_P_POINTS)
		__builtin_trap();
	for (size_t i = 0; i < REPORT_FAST_P_POINTS; i++) {
		check_rate(json_array_get(fe, i));
		check_rate(json_array_get(fc, i));
		if (i && (json_number_value(json_array_get(fe, i)) >
				  json_number_value(json_array_get(fe, i - 1)) ||
			  json_number_value(json_array_get(fc, i)) >
				  json_number_value(json_array_get(fc, i - 1))))
			__builtin_trap();
	}
	if (json_integer_value(json_object_get(row, "tasks")) > 0 &&
	    json_number_value(json_array_get(fe, 10)) !=
		    json_number_value(json_object_get(row, "faster_eager_rate")))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct report *r = NULL;
	struct ca_diag d;
	size_t start = 0;
	if (report_new(&r, &d))
		abort();
	while (start < size) {
		const uint8_t *nl = memchr(data + start, '\n', size - start);
		size_t end = nl ? (size_t)(nl - data) : size;
		json_t *obj = json_loadb((const char *)data + start, end - start, 0, NULL);
		if (obj) {
			d.msg[0] = '\0';
			if (report_add(r, obj, &d) != 0 && (strchr(d.msg, '\n') || !d.msg[0]))
				__builtin_trap(); /* one line, never empty */
			json_decref(obj);
		}
		start = end + 1;
	}

	json_t *j = report_json(r);
	size_t i;
	const json_t *row;
	if (!j)
		abort();
	json_array_foreach(json_object_get(j, "levels"), i, row)
		check_row(row);
	check_row(json_object_get(j, "all"));
	if (json_integer_value(json_object_get(j, "tasks")) != (json_int_t)report_tasks(r))
		__builtin_trap();
	json_decref(j);

	FILE *devnull = fopen("/dev/null", "w");
	if (devnull) {
		report_print(r, devnull);
		fclose(devnull);
	}

	char *html = NULL;
	size_t len = 0;
	if (report_html(r, "fuzz <title>", &html, &len, &d) == 0) {
		if (strlen(html) != len || strstr(html, "<script") || strstr(html, "<img") ||
		    strstr(html, "<iframe") || strstr(html, "<title>fuzz <"))
			__builtin_trap();
		free(html);
	}
	report_free(r);
	return 0;
}
