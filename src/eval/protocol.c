#include "eval/protocol.h"

void eval_protocol_defaults(struct eval_protocol *p)
{
	p->trials = 5;
	p->rotation_sets = 3;
	p->warmup_min_calls = 3;
	p->warmup_min_ms = 25.0;
	p->min_samples = 10;
	p->max_samples = 2000;
	p->target_rse = 0.005;
	p->budget_s = 2.0;
	p->l2_flush_factor = 2.0;
	p->perturb_scale = 1.0 / 1024.0;
	p->checks = 2;
}

json_t *eval_protocol_timing_json(const struct eval_protocol *p)
{
	return json_pack("{s:i, s:i, s:f, s:i, s:i, s:f, s:f, s:f, s:f, s:i}", "version",
			 CA_PROTOCOL_VERSION, "warmup_min_calls", p->warmup_min_calls,
			 "warmup_min_ms", p->warmup_min_ms, "min_samples", p->min_samples,
			 "max_samples", p->max_samples, "target_rse", p->target_rse, "budget_s",
			 p->budget_s, "l2_flush_factor", p->l2_flush_factor, "perturb_scale",
			 p->perturb_scale, "checks", p->checks);
}

int eval_protocol_validate(const struct eval_protocol *p, struct ca_diag *d)
{
	if (p->trials < 1 || p->trials > 100)
		return ca_fail(d, CA_ERR_INVALID, "trials must be between 1 and 100");
	if (p->rotation_sets < 1 || p->rotation_sets > 16)
		return ca_fail(d, CA_ERR_INVALID, "rotation sets must be between 1 and 16");
	if (p->min_samples < 3 || p->min_samples > p->max_samples || p->max_samples > 100000)
		return ca_fail(d, CA_ERR_INVALID,
			       "samples: need 3 <= min_samples <= max_samples <= 100000");
	if (!(p->target_rse > 0 && p->target_rse < 1))
		return ca_fail(d, CA_ERR_INVALID, "target relative standard error must be in (0, 1)");
	if (!(p->budget_s > 0 && p->budget_s <= 600))
		return ca_fail(d, CA_ERR_INVALID, "timing budget must be in (0, 600] seconds");
	if (p->checks < 0 || p->checks > p->min_samples)
		return ca_fail(d, CA_ERR_INVALID, "checks must be between 0 and min_samples");
	if (!(p->l2_flush_factor >= 0 && p->l2_flush_factor <= 16))
		return ca_fail(d, CA_ERR_INVALID, "L2 flush factor must be in [0, 16]");
	return 0;
}
