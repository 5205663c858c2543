#include "eval/session.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

static const char *const mode_names[] = {"compile", "verify", "profile", "eval"};

const char *eval_mode_name(enum eval_mode m)
{
	return (unsigned)m < 4 ? mode_names[m] : "eval";
}

int eval_mode_parse(const char *name, enum eval_mode *m)
{
	for (int i = 0; name && i < 4; i++)
		if (strcmp(name, mode_names[i]) == 0) {
			*m = (enum eval_mode)i;
			return 0;
		}
	return CA_ERR_INVALID;
}

void eval_opts_defaults(struct eval_opts *o)
{
	const char *env = getenv("CUDA_AGENT_SANDBOX");
	memset(o, 0, sizeof *o);
	o->mode = EVAL_FULL;
	eval_protocol_defaults(&o->protocol);
	/* The sandbox is on unless CUDA_AGENT_SANDBOX=0 (or --no-sandbox) turns it off. */
	o->sandbox = !(env && strcmp(env, "0") == 0);
	env = getenv("CUDA_AGENT_TORCH_VIEW");
	o->torch_view = env && strcmp(env, "0") == 0 ? 0 : env && strcmp(env, "1") == 0 ? 1 : -1;
}

void eval_session_init(struct eval_session *s, const char *python, const char *device)
{
	memset(s, 0, sizeof *s);
	ca_strlcpy(s->python, python ? python : "", sizeof s->python);
	ca_strlcpy(s->device, device ? device : "auto", sizeof s->device);
	s->bridge_opts.python = s->python[0] ? s->python : NULL;
	s->bridge_opts.device = s->device;
	eval_twin_init(&s->twin);
}

int eval_session_warm(struct eval_session *s, struct ca_diag *d)
{
	char cache[PATH_MAX], log[PATH_MAX];
	int rc;
	if (s->bridge_started)
		return 0;
	rc = ca_cache_dir(cache, sizeof cache, d);
	if (rc)
		return rc;
	if (ca_path_join(log, sizeof log, cache, "bridge.log"))
		return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	s->bridge_opts.stderr_path = ca_log_get_level() >= CA_LOG_DEBUG ? NULL : log;
	rc = bridge_start(&s->bridge, &s->bridge_opts, d);
	if (rc)
		return rc;
	s->bridge_started = true;
	return 0;
}

int eval_session_device_take(struct eval_session *s, enum device_kind kind, struct device *dev,
			     struct ca_diag *d)
{
	struct ca_diag sd = {{0}};
	/* the kept one, unless its stream stopped working since (a GPU reset, say) */
	if (s->dev_kept && s->dev.kind == kind && device_sync(&s->dev, &sd) == 0) {
		*dev = s->dev;
		memset(&s->dev, 0, sizeof s->dev);
		s->dev_kept = false;
		return 0;
	}
	if (s->dev_kept)
		device_close(&s->dev);
	s->dev_kept = false;
	return device_open(dev, kind, 0, d);
}

void eval_session_device_give(struct eval_session *s, struct device *dev)
{
	/* whether it still works is asked when it is taken again (eval_session_device_take) */
	if (s->dev_kept)
		device_close(&s->dev);
	s->dev = *dev;
	s->dev_kept = true;
	memset(dev, 0, sizeof *dev);
}

void eval_session_close(struct eval_session *s)
{
	if (s->bridge_started)
		bridge_stop(&s->bridge);
	s->bridge_started = false;
	if (s->cache_open)
		baseline_cache_close(&s->cache);
	s->cache_open = false;
	free(s->py);
	s->py = NULL;
	json_decref(s->described);
	s->described = NULL;
	if (s->dev_kept)
		device_close(&s->dev);
	s->dev_kept = false;
	eval_twin_end(&s->twin);
}
