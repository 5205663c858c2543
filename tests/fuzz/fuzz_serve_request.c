/* libFuzzer target: the bodies of POST /v1/evaluate and POST /v1/sessions (src/serve/
 * request.c), as the service reads them from the network. Whatever parses must name only files
 * inside a job or session directory, within the caps; the bytes are also tried as a file name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether path could leave the directory it is joined to: absolute, or a component that is
 * empty, "." or "..". */
static int escapes(const char *path)
{
	if (path[0] == '/' || path[0] == '\0')
		return 1;
	for (const char *p = path;;) {
		size_t k = strcspn(p, "/");
		if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.'))
			return 1;
		if (!p[k])
			return 0;
		p += k + 1;
	}
}

static void check_files(const struct serve_file *f, size_t n)
{
	if (n > SERVE_MAX_FILES)
		abort();
	for (size_t i = 0; i < n; i++)
		if (!serve_path_ok(f[i].path) || escapes(f[i].path) ||
		    f[i].len > SERVE_MAX_FILE_BYTES || strlen(f[i].data) != f[i].len)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct serve_request *r = malloc(sizeof *r);
	struct ca_diag d;
	char *name = malloc(size + 1);
	if (!r || !name)
		abort();
	if (serve_request_parse(r, (const char *)data, size, &d) == 0) {
		check_files(r->files, r->nfiles);
		check_files(r->task_files, r->ntask_files);
		if (r->nfiles == 0 || !(r->deadline_s > 0) || strlen(r->key) > SERVE_KEY_MAX)
			abort();
		serve_request_free(r);
	}
	if (serve_session_request_parse(r, (const char *)data, size, &d) == 0) {
		check_files(r->task_files, r->ntask_files);
		if (r->nfiles != 0 || r->bash_timeout_s < 0 || r->bash_timeout_s > SERVE_DEADLINE_MAX_S ||
		    (r->output_cap && (r->output_cap < 1000 || r->output_cap > (1u << 20))))
			abort();
		serve_request_free(r);
	}
	memcpy(name, data, size);
	name[size] = '\0';
	if (serve_path_ok(name) && escapes(name))
		abort();
	free(name);
	free(r);
	return 0;
}
