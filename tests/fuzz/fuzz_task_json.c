/* libFuzzer target: task.json as task_load() reads it (through a real file in a temporary task
 * directory next to a minimal model.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "task/task.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void write_file(const char *name, const void *buf, size_t len)
{
	char path[128];
	FILE *f;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f)
		abort();
	if (len && fwrite(buf, 1, len, f) != len)
		abort();
	fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char model[] = "class Model:\n    pass\n\ndef get_inputs():\n    return []\n\n"
				    "def get_init_inputs():\n    return []\n";
	struct task t;
	struct ca_diag d;
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/ca-fuzz-task-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		write_file("model.py", model, sizeof model - 1);
	}
	write_file("task.json", data, size);
	if (task_load(&t, dir, &d) == 0) {
		if (!(t.atol >= 0 && t.rtol >= 0) || strlen(t.hash) != 32)
			__builtin_trap();
		task_free(&t);
	} else if (strchr(d.msg, '\n')) {
		__builtin_trap(); /* messages are one line */
	}
	return 0;
}
