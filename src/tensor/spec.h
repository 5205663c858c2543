/* spec: what a task's forward() takes and returns, as the torch bridge describes it.
 *
 * A task_spec lists args (forward() arguments in order; Python numbers become 0-d CPU tensors),
 * params (parameters and buffers in state_dict order) and outputs (the flattened return value).
 * It is the contract shared by the bridge, the worker and the agent's interface file.
 * Parsed from and written to JSON; caps bound the counts (CA_SPEC_MAX_TENSORS). */
#ifndef CA_TENSOR_SPEC_H
#define CA_TENSOR_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "tensor/dtype.h"
#include "util/diag.h"

#define CA_SPEC_MAX_TENSORS 4096
#define CA_SPEC_NAME_MAX 256

/* How the supervisor may move an input between timed calls without breaking what the task's
 * get_inputs() guarantees (the bridge's describe: "structure": {"perturb": ...}; docs/protocol.md,
 * "In-distribution inputs"). */
enum tensor_perturb {
	TENSOR_PERTURB_ELEMENTS = 0, /* each element at its value or half of it (the default) */
	TENSOR_PERTURB_SYMMETRIC,    /* the same, (r, c) and (c, r) of the last two dims together */
	TENSOR_PERTURB_UNIFORM,      /* the whole tensor at once (keeps order) */
	TENSOR_PERTURB_NONE,         /* never (discrete values: labels, masks) */
};

struct tensor_spec {
	char name[CA_SPEC_NAME_MAX];
	enum ca_dtype dtype;
	int ndim;
	int64_t shape[CA_MAX_DIMS];
	bool on_cpu; /* true for Python scalars passed as 0-d CPU tensors */
	enum tensor_perturb perturb;
};

struct task_spec {
	struct tensor_spec *args, *params, *outputs;
	int num_args, num_params, num_outputs;
};

/* Parses {"args":[...],"params":[...],"outputs":[...]} where each entry is
 * {"name":..., "dtype":"float32", "shape":[...], "device":"cuda"|"cpu", "structure"?:
 * {"perturb": "elements"|"symmetric"|"uniform"|"none", ...}} ("symmetric" needs square last two
 * dimensions). */
int task_spec_from_json(struct task_spec *spec, const json_t *obj, struct ca_diag *d);
json_t *task_spec_to_json(const struct task_spec *spec);
void task_spec_free(struct task_spec *spec);

int64_t tensor_spec_numel(const struct tensor_spec *t);
const char *tensor_perturb_name(enum tensor_perturb p);
size_t tensor_spec_nbytes(const struct tensor_spec *t);
/* "float32[16, 1024]" */
void tensor_spec_format(const struct tensor_spec *t, char *out, size_t out_size);

#endif
