#!/usr/bin/env bash
# `cuda-agent bench` without a GPU: a small KernelBench-shaped tree of our own tasks and
# candidates (one good, one that does not compile, one task without a candidate), real nvcc,
# the real bridge on CPU torch. Checks the stored results (JSONL and SQLite), the report, resume
# (final results are kept, env.no_gpu ones are evaluated again), --fresh, a changed candidate,
# an interrupted run (SIGINT) that resumes, usage errors, KernelBench's eval_results.json beside
# ours, and KernelBench's own harness run first (--kernelbench-harness, a stand-in checkout).
# Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-bench-cache.XXXXXX)"
data=tests/data/candidates
tmp="$(mktemp -d /tmp/ca-bench.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh

# jsonl NAME PYEXPR: evaluates PYEXPR with rs = the results in $out/results.jsonl (list).
jsonl() {
  if "$py" - "$out/results.jsonl" "$2" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {r["task"]["dir"].split("/tasks/", 1)[-1]: r for r in rs}
sys.exit(0 if eval(sys.argv[2], {"rs": rs, "by": by}) else 1)
PY
  then ok "$1"; else bad "$1" "assertion $2 failed on: $(head -c 600 "$out/results.jsonl")"; fi
}

tasks="$tmp/tasks" cands="$tmp/cands" out="$tmp/out-dir"
mkdir -p "$tasks/level1" "$tasks/level2" "$cands/level1"
cp -r "$data/tiny_task" "$tasks/level1/1_axpb"
cp -r "$data/tiny_task" "$tasks/level1/2_axpb_broken"
cp -r "$data/tiny_task" "$tasks/level2/3_axpb_nobody"
cp -r "$data/good" "$cands/level1/1_axpb"
cp -r "$data/broken_syntax" "$cands/level1/2_axpb_broken"

run "bench --help" 0 "$cli" bench --help
grep_out "bench --help names --out" "--out DIR"
run "bench needs two directories" 2 "$cli" bench "$tasks"
run "bench: missing task tree" 2 "$cli" bench --out "$out" "$tmp/nope" "$cands"
run "bench: bad --jobs" 2 "$cli" bench --jobs 0 "$tasks" "$cands"
run "bench: --out without a value" 2 "$cli" bench "$tasks" "$cands" --out
grep -q -- "--out needs a value" "$tmp/err" && ok "bench: says --out needs a value" || bad "bench: says --out needs a value" "$(cat "$tmp/err")"
run "bench: empty tree" 2 "$cli" bench --out "$out" "$cands/level1/1_axpb" "$cands"

run "bench a small tree (no GPU: exit 0, some results env.no_gpu)" 0 \
  "$cli" bench --device cpu --jobs 2 --out "$out" "$tasks" "$cands"
[ -f "$out/bench.sqlite" ] && ok "bench.sqlite written" || bad "bench.sqlite written"
[ -f "$out/report.html" ] && ok "report.html written" || bad "report.html written"
jsonl "one result per task, in task order" '[r["task"]["dir"].split("/tasks/")[1] for r in rs] == ["level1/1_axpb", "level1/2_axpb_broken", "level2/3_axpb_nobody"]'
jsonl "the good candidate compiled and says there is no GPU (no reward)" 'by["level1/1_axpb"]["compiled"] is True and by["level1/1_axpb"]["reason"]["code"] == "env.no_gpu" and by["level1/1_axpb"]["reward"] is None'
jsonl "the broken candidate: build.error" 'by["level1/2_axpb_broken"]["reason"]["code"] == "build.error"'
jsonl "the task without a candidate: candidate.missing" 'by["level2/3_axpb_nobody"]["reason"]["code"] == "candidate.missing"'
grep -q "results:" "$tmp/out" && ok "the report is printed" || bad "the report is printed" "$(head -c 600 "$tmp/out")"
grep -q "3 tasks, 3 evaluated now, 0 resumed" "$tmp/err" && ok "summary: 3 evaluated" || bad "summary: 3 evaluated" "$(tail -c 600 "$tmp/err")"

run "bench again resumes" 0 "$cli" bench --device cpu --out "$out" "$tasks" "$cands"
grep -q "3 tasks, 1 evaluated now, 2 resumed" "$tmp/err" && ok "final results kept, env.no_gpu evaluated again" || bad "final results kept, env.no_gpu evaluated again" "$(tail -c 600 "$tmp/err")"
jsonl "still one line per task after resuming" 'len(rs) == 3'

echo '// changed' >>"$cands/level1/2_axpb_broken/kernels/bad.cu"
run "a changed candidate is evaluated again" 0 "$cli" bench --device cpu --out "$out" "$tasks" "$cands"
grep -q "3 tasks, 2 evaluated now, 1 resumed" "$tmp/err" && ok "changed candidate re-evaluated" || bad "changed candidate re-evaluated" "$(tail -c 600 "$tmp/err")"

run "bench --fresh" 0 "$cli" bench --device cpu --fresh --out "$out" "$tasks" "$cands"
grep -q "3 tasks, 3 evaluated now, 0 resumed" "$tmp/err" && ok "--fresh evaluates everything" || bad "--fresh evaluates everything" "$(tail -c 600 "$tmp/err")"

# Interrupted: SIGINT once the first result is stored; the run stops between tasks (exit 130),
# keeps what it stored, and the next run resumes from there. Each task's get_inputs() sleeps
# 0.25 s, so that the 24 evaluations take seconds and the signal lands among them (without a GPU
# an evaluation ends after describe, a few milliseconds).
more="$tmp/more" more_cands="$tmp/more-cands" out2="$tmp/out2"
mkdir -p "$more" "$more_cands"
for i in $(seq 1 24); do
  cp -r "$data/tiny_task" "$more/t$i"; cp -r "$data/good" "$more_cands/t$i"
  # each its own model.py (a describe is kept per task hash), each slow to describe
  printf '\n\nimport time\n_get_inputs = get_inputs\n\n\ndef get_inputs():\n    time.sleep(0.25)\n    return _get_inputs()\n# task %s\n' "$i" >>"$more/t$i/model.py"
done
"$cli" bench --device cpu --jobs 1 --out "$out2" "$more" "$more_cands" >"$tmp/int.out" 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$out2/results.jsonl" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
rc=$?
if [ "$rc" -eq 130 ]; then ok "SIGINT stops the run (exit 130)"; else bad "SIGINT stops the run (exit 130)" "exit $rc: $(tail -c 400 "$tmp/int.err")"; fi
grep -q "run the same command again to resume" "$tmp/int.err" && ok "interrupted run says how to resume" || bad "interrupted run says how to resume" "$(tail -c 400 "$tmp/int.err")"
stored=$("$py" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from results').fetchone()[0])" "$out2/bench.sqlite")
[ "$stored" -ge 1 ] && [ "$stored" -lt 24 ] && ok "interrupted run stored $stored of 24" || bad "interrupted run stored some results" "stored $stored"
run "the interrupted run completes (every result env.no_gpu here: exit 4)" 4 "$cli" bench --device cpu --out "$out2" "$more" "$more_cands"
out="$out2" jsonl "all 24 tasks have a result" 'len(rs) == 24 and all(r["compiled"] is True for r in rs)'

# KernelBench's own layout: runs/<run_name>/level_<L>_problem_<P>_sample_<S>_kernel.py with its
# eval_results.json beside them; KernelBench files judged under the kernelbench rules by default.
kbt="$tmp/kb-tasks" runs="$tmp/runs/my_run" out3="$tmp/out3"
mkdir -p "$kbt/level1" "$runs"
cp -r tests/data/protocol_cpu/task "$kbt/level1/7_ReluScaleBias"
cp -r tests/data/protocol_cpu/task "$kbt/level1/8_ReluScaleBias"
cp tests/data/protocol_cpu/kb_rules.py "$runs/level_1_problem_7_sample_1_kernel.py"
cp tests/data/protocol_cpu/operator.py "$runs/level_1_problem_8_sample_1_kernel.py"
cp tests/data/protocol_cpu/honest.py "$runs/level_1_problem_7_sample_0_kernel.py"
printf '{"7": [{"sample_id": 0, "compiled": true, "correctness": false, "runtime": -1.0}, {"sample_id": 1, "compiled": true, "correctness": true, "runtime": 0.25}], "8": [{"sample_id": 1, "compiled": true, "correctness": true, "runtime": 0.5}]}\n' >"$runs/eval_results.json"
CUDA_AGENT_PROTOCOL_CPU=1 run "bench over a KernelBench run directory (sample 1)" 0 "$cli" bench --device cpu --budget 0.3 --trials 2 --sample 1 --out "$out3" "$kbt" "$runs"
grep -q "KernelBench's verdicts from .*eval_results.json" "$tmp/err" && ok "KernelBench's eval_results.json found in the run directory" || bad "KernelBench's eval_results.json found" "$(head -c 600 "$tmp/err")"
out="$out3" jsonl "runs layout: sample 1 taken, kernelbench rules, KernelBench's verdict carried" 'len(rs) == 2 and all(r["rules"] == "kernelbench" and r["candidate"]["dir"].endswith("_sample_1_kernel.py") for r in rs) and rs[0]["reason"]["code"] == "ok" and rs[0]["kernelbench_eval"] == {"sample_id": 1, "compiled": True, "correctness": True, "runtime": 0.25} and rs[1]["reason"]["code"] == "build.no_sources"'
grep -q "beside KernelBench's own eval (2 tasks, 1 where the verdicts differ)" "$tmp/out" && ok "the report puts KernelBench's verdicts beside ours" || bad "the report puts KernelBench's verdicts beside ours" "$(tail -c 800 "$tmp/out")"
grep -q "<th>KernelBench's eval</th>" "$out3/report.html" && grep -q "correct, 0.5 ms (differs)" "$out3/report.html" && ok "the HTML report's task table shows KernelBench's verdicts" || bad "the HTML report's task table shows KernelBench's verdicts" "$(grep -o '<tr class.*' "$out3/report.html" | head -3)"
run "report --json over the same results" 0 "$cli" report --json "$out3/results.jsonl"
field "report JSON: kernelbench rows with differ" 'len(r["kernelbench"]) == 2 and r["kernelbench"][1]["differ"] is True and r["kernelbench"][0]["ours"]["rules"] == "kernelbench"'
run "bench: bad --sample" 2 "$cli" bench --sample -1 "$kbt" "$runs"
run "bench: a named results file that is not JSON" 2 "$cli" bench --device cpu --kernelbench-results "$runs/level_1_problem_7_sample_1_kernel.py" --out "$tmp/out4" "$kbt" "$runs"

# KernelBench's own harness beside ours (--kernelbench-harness), with the stand-in checkout
# python/tests/fixtures/fake_kernelbench (its eval answers as each candidate's "# FAKE:" line asks),
# and --skip-missing for a task without a candidate: one task both call correct (timed by both),
# one we refuse and it accepts, one it refuses and we accept.
fake=python/tests/fixtures/fake_kernelbench kbc="$tmp/kb-cands" out5="$tmp/out5"
mkdir -p "$kbc/level1"
cp -r tests/data/protocol_cpu/task "$kbt/level1/9_Exp"
cp -r tests/data/protocol_cpu/task "$kbt/level1/5_Neg"
{ cat tests/data/protocol_cpu/kb_rules.py; echo "# FAKE: wrong"; } >"$kbc/level1/7_ReluScaleBias.py"
cp tests/data/protocol_cpu/operator.py "$kbc/level1/8_ReluScaleBias.py"
cp tests/data/protocol_cpu/kb_rules.py "$kbc/level1/9_Exp.py"
run "bench: --kernelbench-harness and --kernelbench-results together" 2 "$cli" bench --kernelbench-harness "$fake" --kernelbench-results "$runs/eval_results.json" "$kbt" "$kbc"
run "bench: --kernelbench-timeout without the harness" 2 "$cli" bench --kernelbench-timeout 60 "$kbt" "$kbc"
run "bench: --kernelbench-timeout 0" 2 "$cli" bench --kernelbench-harness "$fake" --kernelbench-timeout 0 "$kbt" "$kbc"
run "bench: --kernelbench-harness on a folder that is no checkout" 2 "$cli" bench --device cpu --skip-missing --kernelbench-harness "$tmp" --out "$tmp/out6" "$kbt" "$kbc"
CUDA_AGENT_PROTOCOL_CPU=1 run "bench with KernelBench's harness first (stand-in checkout)" 0 "$cli" bench --device cpu --budget 0.3 --trials 2 --skip-missing --kernelbench-harness "$fake" --kernelbench-timeout 120 --out "$out5" "$kbt" "$kbc"
grep -q "kernelbench \[3/3\] level1/9_Exp: correct, 1.25 ms" "$tmp/err" && ok "the harness's progress lines on stderr" || bad "the harness's progress lines on stderr" "$(head -c 800 "$tmp/err")"
out="$out5" jsonl "--skip-missing: 3 results, each with KernelBench's verdict and reason" 'len(rs) == 3 and [r["kernelbench_eval"]["correctness"] for r in rs] == [False, True, True] and rs[0]["kernelbench_eval"]["reason"] == "Output mismatch: (0 / 5)" and rs[1]["kernelbench_eval"]["ref_runtime"] == 2.5 and [r["reason"]["code"] for r in rs] == ["ok", "build.no_sources", "ok"]'
grep_out "the agreement table" "ours refuses                                        1                    0"
grep_out "we refuse, KernelBench accepts, with our reason" "8_ReluScaleBias: build.no_sources (kernelbench)"
grep_out "KernelBench refuses, we accept, with its reason" "7_ReluScaleBias: Output mismatch: (0 / 5)"
grep_out "the timing ratio" "timing, our median ms over KernelBench's runtime"
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if d["_harness"]["schema"] == "cuda-agent.kernelbench-eval/1" and sorted(k for k in d if k != "_harness") == ["L1P7", "L1P8", "L1P9"] else 1)' "$out5/kernelbench_eval.json" && ok "OUT/kernelbench_eval.json in KernelBench's shape" || bad "OUT/kernelbench_eval.json in KernelBench's shape" "$(head -c 600 "$out5/kernelbench_eval.json")"
CUDA_AGENT_PROTOCOL_CPU=1 run "the same bench again" 0 "$cli" bench --device cpu --budget 0.3 --trials 2 --skip-missing --kernelbench-harness "$fake" --kernelbench-timeout 120 --out "$out5" "$kbt" "$kbc"
[ "$(grep -c '(kept)' "$tmp/err")" = 3 ] && ok "the harness keeps its verdicts on a run again" || bad "the harness keeps its verdicts" "$(grep kernelbench "$tmp/err")"
run "report --json: the agreement" 0 "$cli" report --json "$out5/results.jsonl"
field "report JSON: kernelbench_agreement" 'r["kernelbench_agreement"]["both_correct"] == 1 and r["kernelbench_agreement"]["we_refuse_kb_accepts"] == 1 and r["kernelbench_agreement"]["kb_refuses_we_accept"] == 1 and r["kernelbench_agreement"]["timing"][-1]["tasks"] == 1'

finish
