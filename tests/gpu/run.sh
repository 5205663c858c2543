#!/usr/bin/env bash
# The GPU suite: runs on a machine with a CUDA GPU (make test-gpu). Every example solution must
# pass and earn the reward its speed-ups imply; wrong, crashing, hanging and cheating kernels
# must fail with the right reason; after each failure the next evaluation must work.
# Prints a table of the examples' results and "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-gpu.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
data=tests/data/candidates
bad_dir=tests/gpu/candidates
results="${OUT:-$tmp}/gpu_results.jsonl"
: >"$results"
. tests/lib.sh

nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true

# ---- every example solution: correct, reward consistent with its speed-ups
for task in examples/tasks/*/; do
  name="$(basename "$task")"
  sol="examples/solutions/$name"
  [ -d "$sol/kernels" ] || continue
  run "example $name evaluates" 0 "$cli" eval --json "$task" "$sol"
  head -n 1 "$tmp/out" >>"$results"
  field "example $name is correct" 'r["correct"] is True and r["reward"] >= 1'
  field "example $name reward matches its speed-ups" '
(lambda t, e, c: r["reward"] == (3 if (e - t) / e > 0.05 and (c - t) / c > 0.05 else 2 if (e - t) / e > 0.05 else 1))(
  r["timing"]["candidate"]["median_ms"], r["timing"]["eager"]["median_ms"], r["timing"]["compile"]["median_ms"])'
  field "example $name checked calls passed, claims agree with the outside bound" 'r["timing"]["checks"]["failed"] == 0 and r["timing"]["checks"]["special"] == 2 and r["timing"]["checks"]["final"] is True and r["timing"]["candidate"]["bound"] == "claims"'
done

# ---- failures that must be caught, each followed by a good evaluation on the same GPU
good() {
  run "next evaluation works ($1)" 0 "$cli" verify --json --task "$data/tiny_task" "$data/good"
  field "next evaluation correct ($1)" 'r["correct"] is True'
}
run "wrong kernel" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/wrong"
field "wrong kernel: verify.mismatch with its error size" 'r["reason"]["code"] == "verify.mismatch" and r["reward"] == -1 and 0.09 < r["trials"][0]["max_abs_err"] < 0.11'
run "syntax error" 1 "$cli" eval --json "$data/tiny_task" "$data/broken_syntax"
field "syntax error: reward -1 with the compiler's message" 'r["reward"] == -1 and "kernels/bad.cu:" in r["reason"]["message"]'
run "illegal address" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/illegal_address"
field "illegal address: fault.illegal_address" 'r["reason"]["code"] == "fault.illegal_address" and r["reward"] == -1'
good "after illegal address"
run "host segfault" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/host_segfault"
field "host segfault: fault.crash naming the signal" 'r["reason"]["code"] == "fault.crash" and "signal 11" in r["reason"]["message"]'
good "after segfault"
run "nonzero return" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/nonzero_return"
field "nonzero return: abi.forward_failed" 'r["reason"]["code"] == "abi.forward_failed"'
start=$(date +%s)
run "kernel infinite loop" 1 "$cli" eval --json --timeout 15 "$data/tiny_task" "$bad_dir/kernel_hang"
field "infinite loop: timeout" 'r["reason"]["code"] == "timeout"'
[ $(( $(date +%s) - start )) -lt 40 ] && ok "infinite loop ended by the watchdog in time" || bad "watchdog too slow"
good "after hang"
run "stale outputs after verification" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/lazy_after_verify"
field "stale outputs: hack.inconsistent_output" 'r["reason"]["code"] in ("hack.inconsistent_output", "hack.final_mismatch") and r["reward"] == -1'
run "one of two outputs written" 1 "$cli" eval --json "$data/tiny_two_outputs" "$bad_dir/one_of_two_outputs"
field "unwritten output named" '"never written" in r["reason"]["message"]'
run "no ca_forward" 1 "$cli" eval --json "$data/tiny_task" "$data/no_forward"
field "no ca_forward: named" '"ca_forward" in r["reason"]["message"]'
run "empty kernels/" 1 "$cli" eval --json "$data/tiny_task" "$data/empty"
run "get_inputs raises" 3 "$cli" eval --json "$data/broken_tasks/raises" "$data/good"
field "get_inputs raising: task.inputs_raised" 'r["reason"]["code"] == "task.inputs_raised"'
good "at the end"

# ---- a run directory too small for the evaluation's sets: said before anything is written
# (needs a small file system: a tmpfs, so root; skipped and said otherwise)
mkdir -p "$tmp/small-runs"
if mount -t tmpfs -o size=256m tmpfs "$tmp/small-runs" 2>/dev/null; then
  CUDA_AGENT_RUNS="$tmp/small-runs" run "run directory too small" 4 \
    "$cli" eval --json examples/tasks/layernorm examples/solutions/layernorm
  field "too small: env.run_space with the sizes, no reward" 'r["reason"]["code"] == "env.run_space" and r["reward"] is None and "GB of tensors at once" in r["reason"]["message"] and "CUDA_AGENT_RUNS" in r["reason"]["message"]'
  if [ -z "$(find "$tmp/small-runs" -name '*.safetensors')" ]; then ok "too small: no tensor file written"
  else bad "too small: no tensor file written" "$(find "$tmp/small-runs" -name '*.safetensors' | head)"; fi
  umount "$tmp/small-runs"
else
  echo "SKIP run directory too small (cannot mount a tmpfs: not root)"
fi

# ---- the sandbox (on by default: every evaluation above ran in it) and --no-sandbox
run "sandboxed evaluation" 0 "$cli" eval --json examples/tasks/layernorm examples/solutions/layernorm
field "sandboxed by default, every layer reported" 'r["correct"] is True and r["isolation"]["sandbox"] is True and r["isolation"]["namespaces"] is True and r["isolation"]["seccomp"] is True'
run "sandboxed fault" 1 "$cli" eval --json "$data/tiny_task" "$bad_dir/illegal_address"
field "sandboxed fault: fault.illegal_address" 'r["reason"]["code"] == "fault.illegal_address"'
good "after the sandboxed fault"
run "evaluation without the sandbox" 0 "$cli" eval --json --no-sandbox examples/tasks/layernorm examples/solutions/layernorm
field "--no-sandbox: correct, and the result says the sandbox was off" 'r["correct"] is True and r["isolation"]["sandbox"] is False and r["isolation"]["reference_outputs_hidden"] is False'
field "the audit recorded two calls" 'len(r["audit"]) == 2 and all(a["ran"] for a in r["audit"]) and all(a["late_us"] <= 2 for a in r["audit"])'


# ---- bench: two examples as a small task tree; real results, the report, and a resumed re-run
mkdir -p "$tmp/bench-tasks" "$tmp/bench-cands"
for name in layernorm two_outputs; do
  cp -r "examples/tasks/$name" "$tmp/bench-tasks/$name"
  cp -r "examples/solutions/$name" "$tmp/bench-cands/$name"
done
run "bench over two examples" 0 "$cli" bench --out "$tmp/bench-out" "$tmp/bench-tasks" "$tmp/bench-cands"
if "$py" - "$tmp/bench-out/results.jsonl" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if len(rs) == 2 and all(r["correct"] is True and r["reward"] >= 1 for r in rs) else 1)
PY
then ok "bench: both results correct and rewarded"; else bad "bench: both results correct and rewarded" "$(head -c 800 "$tmp/bench-out/results.jsonl")"; fi
[ -s "$tmp/bench-out/report.html" ] && ok "bench: report.html written" || bad "bench: report.html written"
run "bench again" 0 "$cli" bench --out "$tmp/bench-out" "$tmp/bench-tasks" "$tmp/bench-cands"
grep -q "2 tasks, 0 evaluated now, 2 resumed" "$tmp/err" && ok "bench: the re-run resumes both" || bad "bench: the re-run resumes both" "$(tail -c 400 "$tmp/err")"

# ---- profile: CUPTI table
run "profile" 0 "$cli" profile --json --task examples/tasks/layernorm examples/solutions/layernorm
field "profile lists the candidate's kernels" 'len(r["profile"]["kernels"]) >= 1 and r["profile"]["kernels"][0]["calls"] >= 1 and r["profile"]["achieved_gbps"] > 0'
field "profile leaves the harness's own kernels out" 'all(not k["name"].startswith("ca_worker_") for k in r["profile"]["kernels"])'
field "profile measures the copy bandwidth" 'r["profile"]["peak_copy_gbps"] > 1000 and 0 < r["profile"]["fraction_of_peak"] < 1.5'

echo
"$py" - "$results" <<'PY'
import json, sys
print(f"{'task':32} {'reward':>6} {'cand ms':>9} {'eager ms':>9} {'comp ms':>9} {'vs eager':>8} {'vs comp':>8} {'rse%':>5}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = r.get("timing") or {}
    c, e, k = (t.get(x) or {} for x in ("candidate", "eager", "compile"))
    f = lambda v: f"{v:9.4f}" if isinstance(v, (int, float)) else f"{'-':>9}"
    g = lambda v: f"{v:7.2f}x" if isinstance(v, (int, float)) else f"{'-':>8}"
    print(f"{r['task']['id']:32} {str(r['reward']):>6} {f(c.get('median_ms'))} {f(e.get('median_ms'))} {f(k.get('median_ms'))} {g(t.get('speedup_eager'))} {g(t.get('speedup_compile'))} {100*(c.get('rse') or 0):5.2f}")
PY
finish
