/* request: the body of `POST /v1/evaluate` (docs/service.md), parsed defensively (it comes from
 * the network), and written out as a task and a candidate in a job directory.
 *
 * Body: {"task": {"id": ID} | {"hash": HEX} | {"files": {NAME: TEXT}},
 *        "candidate": {"format": "native"|"kernelbench"|"workdir", "files": {PATH: TEXT}},
 *        "rules"?: "cuda-agent"|"kernelbench", "mode"?: "eval"|"verify"|"compile",
 *        "deadline_s"?: N, "idempotency_key"?: KEY}
 * Unknown fields, wrong types, invalid UTF-8 (jansson refuses it), paths that could leave the
 * job directory (absolute, "..", ".", empty components, a leading dot, characters outside
 * [A-Za-z0-9._+-/]) and anything over the caps below are errors: CA_ERR_PARSE (not JSON),
 * CA_ERR_INVALID (not a request), CA_ERR_LIMIT (a cap), each with a message for the client.
 *
 * Ownership: a serve_request owns its strings (serve_request_free). */
#ifndef CA_SERVE_REQUEST_H
#define CA_SERVE_REQUEST_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "task/task.h"
#include "util/diag.h"
#include "util/hash.h"

#define SERVE_MAX_BODY       (16u << 20) /* bytes of a request body */
#define SERVE_MAX_FILES      64          /* files of a candidate, and of an inline task */
#define SERVE_MAX_FILE_BYTES (4u << 20)
#define SERVE_MAX_PATH       200         /* bytes of a file's relative path */
#define SERVE_MAX_DEPTH      8           /* components of a path */
#define SERVE_KEY_MAX        128         /* bytes of an idempotency key */
#define SERVE_DEADLINE_DEFAULT_S 600.0
#define SERVE_DEADLINE_MAX_S     3600.0

struct serve_file {
	char *path; /* relative, checked (serve_path_ok) */
	char *data;
	size_t len;
};

enum serve_task_by { SERVE_TASK_ID, SERVE_TASK_HASH, SERVE_TASK_INLINE };

struct serve_request {
	enum serve_task_by task_by;
	char task_ref[CA_TASK_ID_MAX]; /* the id or hash */
	struct serve_file task_files[SERVE_MAX_FILES];
	size_t ntask_files;
	char format[16]; /* native, kernelbench, workdir */
	struct serve_file files[SERVE_MAX_FILES];
	size_t nfiles;
	char rules[16]; /* "" (the format's default), cuda-agent, kernelbench */
	char mode[16];  /* eval, verify, compile */
	double deadline_s;
	char key[SERVE_KEY_MAX + 1]; /* "" when none */
	/* POST /v1/sessions: {"task": ..., "limits"?: {"bash_timeout_s", "output_cap"}} */
	double bash_timeout_s; /* 0: the tools' default (120 s); at most 3600 */
	size_t output_cap;     /* 0: the tools' default (30000 bytes); at most 1 MiB */
};

int serve_request_parse(struct serve_request *r, const char *body, size_t len,
			struct ca_diag *d);
/* The body of POST /v1/sessions (task and limits; no candidate). */
int serve_session_request_parse(struct serve_request *r, const char *body, size_t len,
				struct ca_diag *d);
void serve_request_free(struct serve_request *r);
/* Writes files under dir (made 0755 with the directories the paths need). */
int serve_files_write(const char *dir, const struct serve_file *f, size_t n, struct ca_diag *d);
/* Whether path may name a file inside a job directory (see above). */
bool serve_path_ok(const char *path);
/* Writes the inline task (when there is one) to DIR/task and the candidate to DIR/candidate
 * (DIR is made 0711 and fresh: an existing DIR is an error; what is inside is readable by all,
 * as the sandbox's uid must read it). *cand_path: what `eval` takes (the
 * directory, or the one .py file of a kernelbench candidate); *task_dir: DIR/task, or "" for a
 * stored task. */
int serve_request_write(const struct serve_request *r, const char *dir, char *cand_path,
			size_t cand_size, char *task_dir, size_t task_size, struct ca_diag *d);

#endif
