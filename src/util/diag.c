#include "util/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ca_err_name(int code)
{
	switch (code) {
	case CA_OK: return "ok";
	case CA_ERR_NOMEM: return "nomem";
	case CA_ERR_IO: return "io";
	case CA_ERR_PARSE: return "parse";
	case CA_ERR_INVALID: return "invalid";
	case CA_ERR_LIMIT: return "limit";
	case CA_ERR_NOTFOUND: return "notfound";
	case CA_ERR_BUILD: return "build";
	case CA_ERR_CHILD: return "child";
	case CA_ERR_TIMEOUT: return "timeout";
	case CA_ERR_UNSUPPORTED: return "unsupported";
	case CA_ERR_REJECTED: return "rejected";
	case CA_ERR_INTERRUPTED: return "interrupted";
	default: return "unknown";
	}
}

int ca_fail(struct ca_diag *diag, int code, const char *fmt, ...)
{
	if (diag) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(diag->msg, sizeof diag->msg, fmt, ap);
		va_end(ap);
	}
	return code;
}

int ca_fail_prefix(struct ca_diag *diag, int code, const char *fmt, ...)
{
	if (diag) {
		char prefix[512];
		char old[CA_DIAG_MAX];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(prefix, sizeof prefix, fmt, ap);
		va_end(ap);
		memcpy(old, diag->msg, sizeof old);
		old[sizeof old - 1] = '\0';
		if (snprintf(diag->msg, sizeof diag->msg, "%s: %s", prefix, old) < 0)
			diag->msg[0] = '\0';
	}
	return code;
}

void ca_diag_clear(struct ca_diag *diag)
{
	if (diag)
		diag->msg[0] = '\0';
}
