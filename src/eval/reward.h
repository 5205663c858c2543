/* reward: the CUDA-Agent reward from the verification verdict and the timing medians.
 *
 *   r = -1  if the candidate did not compile or is not correct;
 *   r =  3  if it is more than 5% faster than both eager PyTorch and torch.compile;
 *   r =  2  if it is more than 5% faster than eager only;
 *   r =  1  otherwise.
 * "Faster" means (t0 - t) / t0 > 0.05. The continuous variant is t_compile / t (0 if incorrect).
 * Without a candidate or eager time the reward is 0 ("untimed"); without a torch.compile time
 * (compilation of the baseline failed) the reward is at most 2 and the continuous variant 0. */
#ifndef CA_EVAL_REWARD_H
#define CA_EVAL_REWARD_H

#include <stdbool.h>

#define CA_REWARD_MARGIN 0.05

struct reward_input {
	bool compiled, correct;
	double t_candidate_ms, t_eager_ms, t_compile_ms; /* <= 0: not measured */
};

struct reward_output {
	int reward;               /* -1, 1, 2 or 3; 0 when timing is missing for a correct kernel */
	double continuous;        /* t_compile / t; 0 when unknown */
	double speedup_eager;     /* t_eager / t; 0 when unknown */
	double speedup_compile;   /* t_compile / t; 0 when unknown */
	bool faster_than_eager, faster_than_compile;
};

void reward_compute(const struct reward_input *in, struct reward_output *out);

/* The speed-up at which "faster" begins: 1 / (1 - CA_REWARD_MARGIN), about 1.0526. */
#define CA_REWARD_THRESHOLD (1.0 / (1.0 - CA_REWARD_MARGIN))

/* A speed-up t_base / t and its interval from the two medians' standard errors:
 * s * (1 -+ 2u), u = sqrt((se/t)^2 + (se_base/t_base)^2). near: the interval holds
 * CA_REWARD_THRESHOLD, so the two medians alone cannot decide which side of it the kernel is
 * on (docs/evaluation.md, "Decisions at the thresholds"). */
struct reward_interval {
	double speedup, lo, hi;
	bool near;
};
/* 0, or CA_ERR_INVALID when a time is not positive or an error is negative or not finite. */
int reward_interval(double t_ms, double se_ms, double t_base_ms, double se_base_ms,
		    struct reward_interval *out);
/* One sentence explaining the reward. */
const char *reward_explain(const struct reward_output *out);

#endif
