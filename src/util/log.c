#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum ca_log_level current = CA_LOG_INFO;
static int initialized;

static void init_from_env(void)
{
	const char *e = getenv("CUDA_AGENT_LOG");
	initialized = 1;
	if (!e)
		return;
	if (strcmp(e, "quiet") == 0)
		current = CA_LOG_QUIET;
	else if (strcmp(e, "debug") == 0)
		current = CA_LOG_DEBUG;
}

void ca_log_set_level(enum ca_log_level level)
{
	initialized = 1;
	current = level;
}

enum ca_log_level ca_log_get_level(void)
{
	if (!initialized)
		init_from_env();
	return current;
}

static void emit(const char *tag, const char *fmt, va_list ap)
{
	fprintf(stderr, "cuda-agent: %s", tag);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void ca_log_info(const char *fmt, ...)
{
	va_list ap;
	if (ca_log_get_level() < CA_LOG_INFO)
		return;
	va_start(ap, fmt);
	emit("", fmt, ap);
	va_end(ap);
}

void ca_log_debug(const char *fmt, ...)
{
	va_list ap;
	if (ca_log_get_level() < CA_LOG_DEBUG)
		return;
	va_start(ap, fmt);
	emit("debug: ", fmt, ap);
	va_end(ap);
}

void ca_log_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit("warning: ", fmt, ap);
	va_end(ap);
}
