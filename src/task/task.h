/* task: a task directory (model.py in the KernelBench convention + optional task.json).
 *
 * task.json fields, all optional: id, source, precision, atol, rtol, notes, and the importers'
 * (docs/tasks.md) level (whole number 0..99 or null), name, ops (array of strings),
 * data_source. Unknown fields are an error.
 *
 * task_load() validates what C can validate without Python (files exist, sizes within caps,
 * task.json well-formed with known fields and sane tolerances, model.py mentions Model,
 * get_inputs and get_init_inputs) and computes the task's identity: the XXH3-128 hash of the
 * model.py bytes and the task.json bytes. Deeper validation (imports, forward, outputs) is the
 * bridge's `describe`. A struct task owns its strings; free with task_free(). */
#ifndef CA_TASK_TASK_H
#define CA_TASK_TASK_H

#include <limits.h>
#include <stddef.h>

#include "util/diag.h"
#include "util/hash.h"

#define CA_TASK_MAX_MODEL_BYTES (1u << 20)
#define CA_TASK_MAX_JSON_BYTES (64u << 10)
#define CA_TASK_ID_MAX 128
#define CA_TASK_LEVEL_MAX 99        /* task.json level: a whole number 0..99 */
#define CA_TASK_DATA_SOURCE_MAX 256 /* task.json data_source: a string of < 256 bytes */
#define CA_TASK_MAX_OPS 64          /* task.json ops: at most 64 strings ... */
#define CA_TASK_OP_MAX 128          /* ... of 1-127 bytes each */

enum task_precision { TASK_FP32 = 0, TASK_FP16, TASK_BF16 };

struct task {
	char dir[PATH_MAX];          /* absolute */
	char id[CA_TASK_ID_MAX];     /* task.json id, else the directory name */
	char source[CA_TASK_ID_MAX]; /* task.json source, else "local" */
	int level;                   /* task.json level (0..99), else -1 */
	char name[CA_TASK_ID_MAX];   /* task.json name, else "" */
	char data_source[CA_TASK_DATA_SOURCE_MAX]; /* task.json data_source, else "" */
	enum task_precision precision;
	double atol, rtol;           /* defaults 1e-2 / 1e-2 */
	char hash[CA_HASH_HEX_LEN + 1];
	char *model_py;              /* owned */
	size_t model_py_len;
};

int task_load(struct task *t, const char *dir, struct ca_diag *d);
void task_free(struct task *t);
const char *task_precision_name(enum task_precision p);

#endif
