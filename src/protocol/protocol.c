#include "protocol/protocol.h"

#include <math.h>

void eval_protocol_defaults(struct eval_protocol *p)
{
	p->trials = 5;
	p->rotation_sets = 3;
	timing_protocol_defaults(&p->timing);
}

json_t *eval_protocol_timing_json(const struct eval_protocol *p)
{
	return timing_protocol_to_json(&p->timing);
}

int eval_protocol_validate(const struct eval_protocol *p, struct ca_diag *d)
{
	struct timing_protocol parsed;
	json_t *obj;
	int rc;

	if (p->trials < 1 || p->trials > 100)
		return ca_fail(d, CA_ERR_INVALID, "trials must be between 1 and 100");
	if (p->rotation_sets < 1 || p->rotation_sets > 16)
		return ca_fail(d, CA_ERR_INVALID, "rotation sets must be between 1 and 16");
	const struct {
		const char *name;
		double value;
	} reals[] = {{"warmup_min_ms", p->timing.warmup_min_ms},
		     {"target_rse", p->timing.target_rse},
		     {"budget_s", p->timing.budget_s},
		     {"l2_flush_factor", p->timing.l2_flush_factor},
		     {"perturb_scale", p->timing.perturb_scale}};
	for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
		if (!isfinite(reals[i].value))
			return ca_fail(d, CA_ERR_INVALID, "timing protocol: '%s' must be finite",
				       reals[i].name);
	if (p->timing.min_samples < 3)
		return ca_fail(d, CA_ERR_INVALID, "timing protocol: 'min_samples' must be at least 3");
	if (!(p->timing.target_rse > 0 && p->timing.target_rse < 1))
		return ca_fail(d, CA_ERR_INVALID,
			       "timing protocol: 'target_rse' must be in (0, 1)");
	obj = timing_protocol_to_json(&p->timing);
	if (!obj)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	rc = timing_protocol_from_json(&parsed, obj, d);
	json_decref(obj);
	return rc;
}
