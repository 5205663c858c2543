/* libFuzzer target: one Ops-6K JSONL row as the importer parses it (ops6k_parse_row), then the
 * names made from it: the short op names of the task id and a sanitized path component. A row
 * is untrusted input; whatever it holds, parsing must not crash or leak, messages must be one
 * line, and every name must be safe as a path component. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "import/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_component(const char *name)
{
	if (!name[0] || name[0] == '.' || strchr(name, '/') || strstr(name, "..") ||
	    strlen(name) > CA_IMPORT_NAME_MAX)
		__builtin_trap();
	for (const char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ops6k_row *row = malloc(sizeof *row);
	struct ca_diag d;
	char short_name[CA_IMPORT_SHORT_OPS_MAX + 1], safe[CA_IMPORT_NAME_MAX + 1];

	if (!row)
		return 0;
	if (ops6k_parse_row((const char *)data, size, row, &d) != 0) {
		if (strchr(d.msg, '\n') || row->code)
			__builtin_trap(); /* one-line messages; nothing left to free */
		free(row);
		return 0;
	}
	if (!row->code || row->code_len == 0 || row->code_len > CA_IMPORT_MAX_CODE ||
	    strlen(row->code) != row->code_len || row->n_ops > CA_TASK_MAX_OPS)
		__builtin_trap();
	for (size_t i = 0; i < row->n_ops; i++) {
		size_t n = strlen(row->ops[i]);
		if (n == 0 || n >= CA_TASK_OP_MAX)
			__builtin_trap();
		for (size_t k = 0; k < n; k++)
			if ((unsigned char)row->ops[i][k] < 0x20 || row->ops[i][k] == 0x7f)
				__builtin_trap();
	}
	for (const char *p = row->data_source; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			__builtin_trap();

	ops6k_short_name(row, short_name, sizeof short_name);
	if (!short_name[0] || strlen(short_name) > CA_IMPORT_SHORT_OPS_MAX)
		__builtin_trap();
	for (const char *p = short_name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			__builtin_trap();
	if (import_sanitize_name(short_name, safe, sizeof safe) != 0)
		__builtin_trap();
	check_component(safe);
	/* each op and the data source as a file name */
	for (size_t i = 0; i < row->n_ops; i++) {
		if (import_sanitize_name(row->ops[i], safe, sizeof safe) != 0)
			__builtin_trap();
		check_component(safe);
	}
	if (row->data_source[0]) {
		if (import_sanitize_name(row->data_source, safe, sizeof safe) != 0)
			__builtin_trap();
		check_component(safe);
	}
	ops6k_row_free(row);
	free(row);
	return 0;
}
