#!/usr/bin/env bash
# The whole evaluation protocol without a GPU (docs/protocol.md, "The timed loop"): the bridge on
# CPU torch owns the slots (memfds), the supervisor maps them with its CPU device backend, the
# PyTorch-format runner runs in the sandbox as the candidate's process, stopped between calls;
# calibration before load, verification, the timed loop with checks decided after each call, the
# final call, and both baselines through the same loop. CUDA_AGENT_PROTOCOL_CPU=1 allows this;
# the times mean nothing on a CPU, the verdicts do. Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-pcpu-cache.XXXXXX)"
tmp="$(mktemp -d /tmp/ca-pcpu.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh
export CUDA_AGENT_PROTOCOL_CPU=1
data=tests/data/protocol_cpu

# One eval call, one bridge: the honest candidate, a cheat that stops computing after its first
# calls, and torch compute through operators (a line of JSON each, in order).
run "eval three candidates on the CPU" 1 "$cli" eval --device cpu --budget 0.5 --json \
  "$data/task" "$data/honest.py" "$data/skip_after.py" "$data/operator.py"
sed -n 1p "$tmp/out" >"$tmp/honest"; sed -n 2p "$tmp/out" >"$tmp/skip"; sed -n 3p "$tmp/out" >"$tmp/op"
cp "$tmp/honest" "$tmp/out"
# Without a reference process the outside bound is the calibrated one; on a 2-core host its E0
# is bimodal (0.3 or 2.4 ms for the CPU runner's empty call), so an honest candidate may be held
# to it (docs/security.md, "The outside bound's resolution"): then the median is the bound's rule
# (the result's numbers have 9 significant digits: the rule is checked to that precision)
field "honest: correct, timed, decided by the sample rule" 'r["reason"]["code"] == "ok" and r["correct"] is True and r["timing"]["candidate"]["samples"] >= 10 and (lambda t: abs(t["median_ms"] - (t["claims_median_ms"] if t["bound"] == "claims" else t["outside_ms"] - t["tol_ms"])) < 1e-7 * max(1.0, t["median_ms"]) and t["median_ms"] >= t["claims_median_ms"])(r["timing"]["candidate"])'
field "honest: special, spot and final checks all passed" 'r["timing"]["checks"]["special"] == 2 and r["timing"]["checks"]["spot"] >= 1 and r["timing"]["checks"]["final"] is True and r["timing"]["checks"]["failed"] == 0'
field "honest: protocol 9 by default, every timed check kept for after the loop, none settled" '(lambda c, p: p["version"] == 9 and p["settle_ms"] == 10 and p["settle_calls"] == 3 and p["defer_checks_mb"] == 4096 and c["deferred"] == c["special"] + c["spot"] and c["settle_calls"] == 0)(r["timing"]["checks"], r["timing"]["protocol"])'
field "honest: calibrated before load, both baselines through the loop" 'r["timing"]["candidate"]["window_overhead_ms"] > 0 and r["timing"]["eager"]["samples"] >= 10 and r["timing"]["compile"]["samples"] >= 10'
field "baselines record what they depend on" 'r["timing"]["eager"]["settings"]["torch"] and "inductor" not in r["timing"]["eager"]["settings"] and r["timing"]["compile"]["settings"]["compile_mode"] == "default" and "max_autotune" in r["timing"]["compile"]["settings"]["inductor"]'
field "honest: five trials, the isolation report" 'len(r["trials"]) == 5 and all(t["ok"] for t in r["trials"]) and r["isolation"]["separate_process"] is True'
cp "$tmp/skip" "$tmp/out"
field "skipping after the first calls: caught by a check placed after a call" 'r["reason"]["code"] in ("hack.inconsistent_output", "hack.final_mismatch") and r["reward"] == -1 and r["correct"] is False'
cp "$tmp/op" "$tmp/out"
field "torch compute through operators: refused at run time" 'r["reason"]["code"] == "hack.torch_compute" and r["reward"] == -1'

# eval --verify-only: verification and nothing after it
run "eval --verify-only" 0 "$cli" eval --device cpu --verify-only --trials 3 --json "$data/task" "$data/honest.py"
field "--verify-only: three trials, no timing, no reward" 'r["reason"]["code"] == "ok" and r["correct"] is True and len(r["trials"]) == 3 and not r.get("timing") and r["reward"] is None'
run "eval --verify-only, the cheat" 1 "$cli" eval --device cpu --verify-only --trials 3 --json "$data/task" "$data/operator.py"
field "--verify-only: torch compute still refused" 'r["reason"]["code"] == "hack.torch_compute"'

# The kernel-free view of torch (docs/security.md, "Torch compute in PyTorch-format candidates"):
# on a GPU by default; CUDA_AGENT_TORCH_VIEW=1 shows it on the CPU too, which checks the
# mechanics (the copies built once, bound over the originals, torch importing through the
# refusal library) with the honest candidate correct and torch compute still refused.
field "without a GPU the view is off" 'r["torch_view"] is False'
CUDA_AGENT_TORCH_VIEW=1 run "eval --verify-only in the torch view" 1 "$cli" eval --device cpu \
  --verify-only --trials 2 --json "$data/task" "$data/honest.py" "$data/operator.py"
sed -n 2p "$tmp/out" >"$tmp/op"; sed -i 1q "$tmp/out"
field "torch view: built, shown, the honest candidate correct" 'r["torch_view"] is True and r["reason"]["code"] == "ok" and r["correct"] is True'
cp "$tmp/op" "$tmp/out"
field "torch view: torch compute refused" 'r["torch_view"] is True and r["reason"]["code"] == "hack.torch_compute"'
ls "$CUDA_AGENT_CACHE"/torch-view/*/view.json >/dev/null 2>&1 && ok "the view is in the cache" \
  || bad "no view under $CUDA_AGENT_CACHE/torch-view"

# Input sets off the generator's distribution (docs/protocol.md, "In-distribution inputs"): a
# row mean over the first half of each row is within tolerance for every plain draw of its task
# and wrong on a varied set; its honest twin is correct on every set, verified and timed
# (rotation sets, near-duplicates, the final set).
run "eval --verify-only, a row mean and one over half of each row" 1 "$cli" eval --device cpu \
  --verify-only --json "$data/rowmean_task" "$data/rowmean.py" "$data/half_rowmean.py"
sed -n 2p "$tmp/out" >"$tmp/half"; sed -i 1q "$tmp/out"
field "row mean: correct on five trials" 'r["reason"]["code"] == "ok" and r["correct"] is True and len(r["trials"]) == 5 and all(t["ok"] for t in r["trials"])'
cp "$tmp/half" "$tmp/out"
field "half of each row: a verification mismatch" 'r["reason"]["code"] == "verify.mismatch" and r["correct"] is False and r["reward"] == -1'
run "eval the row mean, timed" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 --json \
  "$data/rowmean_task" "$data/rowmean.py"
field "row mean: every check of the timed loop passed" 'r["reason"]["code"] == "ok" and r["timing"]["checks"]["failed"] == 0 and r["timing"]["checks"]["final"] is True and r["timing"]["checks"]["special"] >= 2'

# One mode for both models, the rules' (issue 46; docs/torch-rules.md, "Rules profiles"): training
# under kernelbench, as KernelBench's harness runs them; eval under cuda-agent, as the published
# CUDA-Agent verification does. A BatchNorm task: nn.BatchNorm1d in ModelNew (kernelbench: torch
# compute allowed) is right in training mode; a kernel of its own on the running statistics is
# right in eval mode only, so it fails under kernelbench and passes under cuda-agent.
run "kernelbench rules: a BatchNorm task, nn.BatchNorm1d and a kernel on running statistics" 1 \
  "$cli" eval --device cpu --verify-only --trials 2 --rules kernelbench --json "$data/bn_task" \
  "$data/bn_relu.py" "$data/bn_relu_eval.py"
sed -n 2p "$tmp/out" >"$tmp/bn_eval"; sed -i 1q "$tmp/out"
field "kernelbench: both models in training mode, nn.BatchNorm1d correct" 'r["reason"]["code"] == "ok" and r["correct"] is True and r["module_mode"] == "train"'
cp "$tmp/bn_eval" "$tmp/out"
field "kernelbench: running statistics where the batch's are used, a mismatch" 'r["reason"]["code"] == "verify.mismatch" and r["correct"] is False and r["module_mode"] == "train"'
run "cuda-agent rules: the kernel on running statistics" 0 "$cli" eval --device cpu --verify-only \
  --trials 2 --json "$data/bn_task" "$data/bn_relu_eval.py"
field "cuda-agent: both models in eval mode, correct" 'r["rules"] == "cuda-agent" and r["reason"]["code"] == "ok" and r["correct"] is True and r["module_mode"] == "eval" and r["params"] == "paired"'

# Slow but correct (issue 46): calls of 0.2 to 0.7 s under a 3 s watchdog. The watchdog bounds
# each command (not the run: 2 trials, warm-up, samples and checks pass 3 s in all) and the timed
# loop takes the samples that fit --slow-budget: scored, reward 1, and the result says so.
run "a slow but correct candidate" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --timeout 3 --slow-budget 1 --json "$data/task" "$data/slow.py"
field "slow: correct, reward 1, fewer samples said" 'r["reason"]["code"] == "ok" and r["correct"] is True and r["reward"] == 1 and 3 <= r["slow"]["min_samples"] < 10 and r["slow"]["call_s"] > 0.1'

# The rules profiles (docs/torch-rules.md, "Rules profiles"): one file, two verdicts.
run "eval under the kernelbench rules" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --rules kernelbench --json "$data/task" "$data/kb_rules.py"
field "kernelbench rules: renamed parameter matched by shape, torch operators allowed" 'r["rules"] == "kernelbench" and r["reason"]["code"] == "ok" and r["correct"] is True and r["params"] == "paired"'
run "the same file under the cuda-agent rules" 1 "$cli" eval --device cpu --budget 0.3 \
  --trials 2 --json "$data/task" "$data/kb_rules.py"
field "cuda-agent rules: parameters matched by name" 'r["rules"] == "cuda-agent" and r["reason"]["code"] == "candidate.params_mismatch" and "missing bias" in r["reason"]["message"] and r["reward"] == -1'

# KernelBench's parameter semantics (issue 46): a state_dict that pairs with Model's neither by
# name nor by order and shape (a conv bias dropped, which the instance norm after it cancels; the
# norm's affine parameters declared under other names) is ModelNew's construction under the seed
# Model is built with, as KernelBench's harness builds both; the checks use Model under that
# seed. The cuda-agent rules load the reference's state_dict into ModelNew, and refuse it.
run "kernelbench rules, a state_dict that does not pair with Model's" 0 "$cli" eval --device cpu \
  --budget 0.3 --trials 2 --rules kernelbench --json "$data/seeded_task" "$data/seeded.py"
field "seeded: correct, scored, and the result says how the parameters were had" 'r["reason"]["code"] == "ok" and r["correct"] is True and r["reward"] >= 1 and r["params"] == "seeded" and r["timing"]["checks"]["failed"] == 0 and "params    seeded" in r["summary"]'
run "the same file under the cuda-agent rules" 1 "$cli" eval --device cpu --verify-only \
  --trials 2 --json "$data/seeded_task" "$data/seeded.py"
field "cuda-agent rules: the state_dict must pair by name" 'r["rules"] == "cuda-agent" and r["reason"]["code"] == "candidate.params_mismatch" and "missing conv.bias" in r["reason"]["message"] and r["reward"] == -1 and "params" not in r'
# A degenerate task judged seeded cannot have perturbed parameters (nothing pairs ModelNew's
# with Model's): a candidate that returns zeros passes, and the result says so plainly.
run "kernelbench rules, a degenerate task, zeros from a state_dict that does not pair" 0 "$cli" \
  eval --device cpu --verify-only --trials 2 --rules kernelbench --json \
  "$data/degenerate_task" "$data/degenerate_zeros.py"
field "seeded on a degenerate task: verified without perturbation, said" '(lambda d: r["params"] == "seeded" and r["correct"] is True and d["kind"] == "zeros" and d["params_perturbed"] is False and "WITHOUT perturbed parameters" in d["message"])(r["task"]["degenerate"])'

# CUDA_AGENT_PIN_PROCESSES=1 (docs/protocol.md, "The sample"; on by itself only with a GPU): the
# candidate's process on one CPU claimed for the evaluation
CUDA_AGENT_PIN_PROCESSES=1 run "eval with the processes pinned" 0 "$cli" eval --device cpu --budget 0.3 \
  --trials 2 --json "$data/task" "$data/honest.py"
field "pinned: the CPU is named, the candidate still judged" 'isinstance(r["env"]["pinned_cpu"], int) and r["reason"]["code"] == "ok"'

# --settle-calls (docs/protocol.md, "After a checked call"): after each checked timed call that
# another follows, N calls neither sampled nor checked; the checks and the verdicts as without.
run "eval --settle-calls 2" 1 "$cli" eval --device cpu --budget 0.3 --trials 2 --settle-calls 2 \
  --defer-checks-mb 0 --settle-ms 0 --settle-below-ms 600000 --json "$data/task" "$data/honest.py" "$data/skip_after.py"
sed -n 2p "$tmp/out" >"$tmp/skip"; sed -i 1q "$tmp/out"
field "settle: two per check that a timed call follows, the protocol says so, still judged" 'r["reason"]["code"] == "ok" and r["timing"]["checks"]["settle_calls"] == 2 * sum(1 for c in r["timing"]["checks"]["calls"] if isinstance(c["call"], int) and c["call"] + 1 < r["timing"]["candidate"]["samples"]) > 0 and r["timing"]["protocol"]["settle_calls"] == 2 and r["timing"]["protocol"]["settle_below_ms"] == 600000 and r["timing"]["protocol"]["hold_us"] == 100 and r["timing"]["protocol"]["settle_ms"] == 0'
cp "$tmp/skip" "$tmp/out"
field "settle: skipping after the first calls still caught" 'r["reason"]["code"] in ("hack.inconsistent_output", "hack.final_mismatch") and r["reward"] == -1'
run "--settle-calls out of range" 2 "$cli" eval --settle-calls 17 "$data/task" "$data/honest.py"
run "eval --settle-ms 0 --settle-below-ms 0.001" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --defer-checks-mb 0 --settle-ms 0 --settle-below-ms 0.001 --hold-us 250 --json "$data/task" "$data/honest.py"
field "settle: none after checked calls longer than settle_below_ms; the options recorded" 'r["reason"]["code"] == "ok" and r["timing"]["checks"]["settle_calls"] == 0 and len(r["timing"]["checks"]["calls"]) > 1 and r["timing"]["protocol"]["settle_below_ms"] == 0.001 and r["timing"]["protocol"]["settle_calls"] == 3 and r["timing"]["protocol"]["settle_ms"] == 0 and r["timing"]["protocol"]["hold_us"] == 250'
run "--settle-below-ms out of range" 2 "$cli" eval --settle-below-ms 0 "$data/task" "$data/honest.py"
run "eval --settle-ms 0.001 --settle-below-ms 0.001" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --defer-checks-mb 0 --settle-below-ms 0.001 --settle-ms 0.001 --json "$data/task" "$data/honest.py"
field "settle_ms: one settling call after every checked call that another follows, whatever its window" 'r["reason"]["code"] == "ok" and r["timing"]["checks"]["settle_calls"] == sum(1 for c in r["timing"]["checks"]["calls"] if isinstance(c["call"], int) and c["call"] + 1 < r["timing"]["candidate"]["samples"]) > 0 and r["timing"]["protocol"]["settle_ms"] == 0.001'
run "--settle-ms out of range" 2 "$cli" eval --settle-ms 1001 "$data/task" "$data/honest.py"

# --defer-checks-mb (docs/protocol.md, "Kept checks"): a checked timed call's inputs and outputs
# copied at once and judged after the loop, with no settling after it; the verdicts as before.
run "eval --defer-checks-mb 64" 1 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --defer-checks-mb 64 --settle-below-ms 600000 --json "$data/task" "$data/honest.py" \
  "$data/skip_after.py" "$data/modify_input.py"
sed -n 2p "$tmp/out" >"$tmp/skip"; sed -n 3p "$tmp/out" >"$tmp/modify"; sed -i 1q "$tmp/out"
field "deferred: every timed check kept and judged after the loop, none settled" '(lambda c: r["reason"]["code"] == "ok" and c["failed"] == 0 and c["settle_calls"] == 0 and c["deferred"] == sum(1 for x in c["calls"] if isinstance(x["call"], int)) >= 3 and all((x.get("deferred") is True) == (x["call"] != "final") and x["ok"] for x in c["calls"]) and c["calls"][-1]["call"] == "final" and r["timing"]["protocol"]["defer_checks_mb"] == 64)(r["timing"]["checks"])'
cp "$tmp/skip" "$tmp/out"
field "deferred: skipping after the first calls still caught" 'r["reason"]["code"] in ("hack.inconsistent_output", "hack.final_mismatch") and r["reward"] == -1'
cp "$tmp/modify" "$tmp/out"
field "deferred: an input written by a checked call caught when the call is kept" 'r["reason"]["code"] == "verify.input_modified" and r["reward"] == -1'
run "--defer-checks-mb out of range" 2 "$cli" eval --defer-checks-mb 65537 "$data/task" "$data/honest.py"
run "--hold-us out of range" 2 "$cli" eval --hold-us -1 "$data/task" "$data/honest.py"

# Decisions at the thresholds (docs/evaluation.md): forced here, as CPU times decide nothing.
run "eval with --interleave always" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --rules kernelbench --interleave always --json "$data/task" "$data/kb_rules.py"
field "interleaved rounds against both baselines, and the reward uses them" 'all(r["timing"]["decision"][m]["retimed"] is True and r["timing"]["decision"][m]["interleaved"]["rounds"] == 5 and len(r["timing"]["decision"][m]["interleaved"]["speedups"]) == 5 and r["timing"]["decision"][m]["interleaved"]["interval"][0] <= r["timing"]["decision"][m]["interleaved"]["speedup"] <= r["timing"]["decision"][m]["interleaved"]["interval"][1] for m in ("eager", "compile")) and abs(r["timing"]["speedup_eager"] - r["timing"]["decision"]["eager"]["interleaved"]["speedup"]) <= 1e-7 * r["timing"]["speedup_eager"] and r["reward"] in (1, 2, 3)'
run "eval with --interleave never" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --rules kernelbench --interleave never --json "$data/task" "$data/kb_rules.py"
field "never: the interval is reported, nothing re-timed" 'all(d["retimed"] is False and "interleaved" not in d and d["interval"][0] <= d["speedup"] <= d["interval"][1] and abs(d["threshold"] - 1 / 0.95) < 1e-6 for d in r["timing"]["decision"].values())'
run "--interleave with a bad value" 2 "$cli" eval --interleave sometimes "$data/task" "$data/kb_rules.py"

# Baselines with no candidate (cuda-agent baselines measure; synth export --baselines): the same
# loop as an evaluation's, stored in the cache, found there the next time.
# The evaluations below judge under the kernelbench rules: their baselines are training mode's
# (a cuda-agent evaluation's, eval mode's, are kept apart: src/eval/run.h, run_baseline_key).
run "baselines measure --refresh: measured" 0 "$cli" baselines measure --refresh --rules kernelbench \
  --json "$data/task"
field "measured: both baselines through the loop, stored, no candidate or reward" 'r["mode"] == "baselines" and r["reason"]["code"] == "ok" and r["baselines_cached"] is False and r["baselines"]["eager"]["samples"] >= 10 and r["baselines"]["compile"]["samples"] >= 10 and r["baselines"]["compile"]["settings"]["compile_mode"] == "default" and "reward" not in r and "candidate" not in r and r["seconds"]["baselines"] > 0 and r["module_mode"] == "train" and r["baselines"]["eager"]["settings"]["module_mode"] == "train"'
cp "$tmp/out" "$tmp/measured"
run "baselines measure again: from the cache" 0 "$cli" baselines measure --rules kernelbench --json "$data/task"
"$py" - "$tmp/measured" "$tmp/out" <<'PY' && ok "the cached baselines are the measured ones" || bad "cached: $(head -c 300 "$tmp/out")"
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
sys.exit(0 if b["baselines_cached"] is True and b["baselines"]["eager"]["median_ms"] == a["baselines"]["eager"]["median_ms"] and b["baselines"]["compile"]["median_ms"] == a["baselines"]["compile"]["median_ms"] else 1)
PY
run "an evaluation of the task then uses them" 0 "$cli" eval --device cpu --budget 0.3 --trials 2 \
  --rules kernelbench --interleave never --json "$data/task" "$data/kb_rules.py"
"$py" - "$tmp/measured" "$tmp/out" <<'PY' && ok "the evaluation's baselines are the measured ones, cached" || bad "eval: $(head -c 300 "$tmp/out")"
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
t = b["timing"]
# (the evaluation's result keeps 9 significant digits)
sys.exit(0 if t["baselines_cached"] is True and abs(t["eager"]["median_ms"] - a["baselines"]["eager"]["median_ms"]) <= 1e-7 * t["eager"]["median_ms"] else 1)
PY

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
