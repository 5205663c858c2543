/* bridge: the C side of the torch bridge (python/cuda_agent_bridge), a long-lived Python process
 * speaking JSON lines (docs/protocol.md). One struct bridge owns one child process.
 *
 * bridge_start() only spawns (importing torch takes seconds), so callers overlap it with other
 * work (the nvcc build) and call bridge_wait_ready() when they need it. */
#ifndef CA_BRIDGE_BRIDGE_H
#define CA_BRIDGE_BRIDGE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>

#include "util/diag.h"
#include "util/proc.h"

#define CA_BRIDGE_MAX_LINE (64u << 20)

struct bridge_opts {
	const char *python;      /* NULL: $CUDA_AGENT_PYTHON, else "python3" */
	const char *device;      /* "auto" (default), "cuda", "cpu" */
	const char *stderr_path; /* NULL: inherit stderr */
};

struct bridge {
	struct ca_child child;
	long next_id;
	bool ready;
	char stderr_path[PATH_MAX];
	char torch_version[64];
	char python_version[32];
	char device[16];
	char gpu_name[128];
	char cuda_version[32];
	long long l2_bytes;
	int fd_channel; /* our end of the socket pair the bridge sends descriptors on (fd 3 there) */
};

int bridge_start(struct bridge *b, const struct bridge_opts *opts, struct ca_diag *d);

/* The Python the bridge (and every other Python child: torch_build, the PyTorch-format runner)
 * runs: `configured` when set, else $CUDA_AGENT_PYTHON, else "python3". */
const char *bridge_python(const char *configured);
int bridge_wait_ready(struct bridge *b, double timeout_s, struct ca_diag *d);

/* Sends {"id":N,"op":op, ...fields of req} and waits for the answer. req is borrowed.
 * On {"ok":true} stores a new reference to "result" in *result (caller json_decref()s).
 * On {"ok":false} returns CA_ERR_INVALID with the bridge's message in d and its code (e.g.
 * "task.forward_raised") in err_code. A dead or silent bridge is CA_ERR_CHILD/CA_ERR_TIMEOUT
 * with the tail of its stderr log. */
int bridge_call(struct bridge *b, const char *op, const json_t *req, double timeout_s,
		json_t **result, char *err_code, size_t err_code_size, struct ca_diag *d);

/* Receives the descriptors the bridge sent with its last answer (SCM_RIGHTS on the channel, op
 * "slots" of docs/protocol.md): exactly `want` of them into fds (the caller closes them), within
 * timeout_s. Fewer, more, or none in time is an error (any received are closed). */
int bridge_recv_fds(struct bridge *b, int *fds, size_t want, double timeout_s, struct ca_diag *d);

void bridge_stop(struct bridge *b);

#endif
