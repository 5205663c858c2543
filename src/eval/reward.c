#include "eval/reward.h"

#include <math.h>
#include <string.h>

#include "util/diag.h"

static bool faster(double t, double t0)
{
	return t > 0 && t0 > 0 && (t0 - t) / t0 > CA_REWARD_MARGIN;
}

void reward_compute(const struct reward_input *in, struct reward_output *out)
{
	memset(out, 0, sizeof *out);
	if (!in->compiled || !in->correct) {
		out->reward = -1;
		return;
	}
	if (in->t_candidate_ms > 0) {
		if (in->t_eager_ms > 0)
			out->speedup_eager = in->t_eager_ms / in->t_candidate_ms;
		if (in->t_compile_ms > 0)
			out->speedup_compile = in->t_compile_ms / in->t_candidate_ms;
	}
	out->continuous = out->speedup_compile;
	if (in->t_candidate_ms <= 0 || in->t_eager_ms <= 0) {
		out->reward = 0; /* correct but untimed: no speed reward can be given */
		return;
	}
	/* Without a torch.compile time (it failed on the task), "faster than compile" cannot be
	 * claimed: the reward is at most 2. */
	out->faster_than_eager = faster(in->t_candidate_ms, in->t_eager_ms);
	out->faster_than_compile = faster(in->t_candidate_ms, in->t_compile_ms);
	if (out->faster_than_eager && out->faster_than_compile)
		out->reward = 3;
	else if (out->faster_than_eager)
		out->reward = 2;
	else
		out->reward = 1;
}

int reward_interval(double t_ms, double se_ms, double t_base_ms, double se_base_ms,
		    struct reward_interval *out)
{
	double u;
	memset(out, 0, sizeof *out);
	if (!(t_ms > 0) || !(t_base_ms > 0) || !(se_ms >= 0) || !(se_base_ms >= 0) ||
	    !isfinite(t_ms) || !isfinite(t_base_ms) || !isfinite(se_ms) || !isfinite(se_base_ms))
		return CA_ERR_INVALID;
	u = sqrt(pow(se_ms / t_ms, 2) + pow(se_base_ms / t_base_ms, 2));
	out->speedup = t_base_ms / t_ms;
	out->lo = out->speedup * fmax(0.0, 1.0 - 2.0 * u);
	out->hi = out->speedup * (1.0 + 2.0 * u);
	out->near = out->lo <= CA_REWARD_THRESHOLD && CA_REWARD_THRESHOLD <= out->hi;
	return 0;
}

const char *reward_explain(const struct reward_output *out)
{
	switch (out->reward) {
	case -1: return "the candidate did not compile or is not correct";
	case 3: return "correct and more than 5% faster than both eager PyTorch and torch.compile";
	case 2: return "correct and more than 5% faster than eager PyTorch, not than torch.compile";
	case 1: return "correct but not more than 5% faster than eager PyTorch";
	default: return "correct; not timed, so no speed reward";
	}
}
