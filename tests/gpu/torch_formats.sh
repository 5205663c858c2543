#!/usr/bin/env bash
# GPU checks of PyTorch-format candidates (issue 4; part of make test-gpu): the CUDA-Agent
# workdir (axpby), KernelBench load_inline files, refusal of torch fallbacks, the recompile time
# of a workdir after one kernel changed, and bench over our KernelBench-shaped tree. Prints the
# figures it measured and "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-torch.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
results="${OUT:-$tmp}/torch_results.jsonl"
: >"$results"
. tests/lib.sh

reward_matches='
(lambda t, e, c: r["reward"] == (3 if (e - t) / e > 0.05 and (c - t) / c > 0.05 else 2 if (e - t) / e > 0.05 else 1))(
  r["timing"]["candidate"]["median_ms"], r["timing"]["eager"]["median_ms"], r["timing"]["compile"]["median_ms"])'

# ---- the CUDA-Agent workdir: axpby (task and candidate in one directory)
wd="$tmp/axpby"
cp -r examples/workdir/axpby "$wd"
run "axpby workdir evaluates" 0 "$cli" eval --json "$wd" "$wd"
head -n 1 "$tmp/out" >>"$results"
field "axpby: workdir format, correct, rewarded" 'r["candidate"]["format"] == "workdir" and r["correct"] is True and r["reward"] >= 1'
field "axpby: reward matches its speed-ups" "$reward_matches"
field "axpby: checked calls passed" 'r["timing"]["checks"]["failed"] == 0 and r["timing"]["checks"]["special"] == 2 and r["timing"]["checks"]["final"] is True'
field "axpby: ran in the sandbox" 'r["isolation"]["sandbox"] is True and r["isolation"]["reference_outputs_hidden"] is True'
"$py" - "$tmp/out" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
t = r["timing"]
print(f"figure: axpby workdir: candidate {t['candidate']['median_ms']:.4f} ms, eager {t['eager']['median_ms']:.4f} ms, "
      f"compile {t['compile']['median_ms']:.4f} ms, reward {r['reward']}, build {r['build']['seconds']:.2f} s, "
      f"total {r['seconds']['total']:.2f} s")
PY

# ---- recompile after one kernel file changed (the build cache holds every other unit)
run "axpby compile (warm)" 0 "$cli" compile --json "$wd"
printf '\n// touched %s\n' "$(date +%s%N)" >>"$wd/kernels/axpby.cu"
start=$(date +%s.%N)
run "axpby recompile after a kernel change" 0 "$cli" compile --json "$wd"
end=$(date +%s.%N)
field "recompile: one unit compiled, the others cached" 'r["build"]["units_compiled"] == 1 and r["build"]["units_cached"] >= 2'
secs=$("$py" -c "print(f'{$end - $start:.2f}')")
echo "figure: workdir recompile after one kernel changed: $secs s wall (limit 8 s)"
"$py" -c "import sys; sys.exit(0 if $secs <= 8.0 else 1)" && ok "recompile within 8 s ($secs s)" || bad "recompile within 8 s" "$secs s"

# ---- a workdir that falls back to torch compute is rejected
fb="$tmp/axpby_fallback"
cp -r examples/workdir/axpby "$fb"
"$py" - "$fb/model_new.py" <<'PY'
import re, sys
path = sys.argv[1]
src = open(path).read()
# forward() computes with torch instead of the extension
src = re.sub(r"(def forward\(self[^)]*\)[^:\n]*:\n)", r"\1        return self.alpha * x + self.beta * y\n", src, count=1)
open(path, "w").write(src)
PY
grep -q "return self.alpha \* x + self.beta \* y" "$fb/model_new.py" && ok "fallback candidate prepared" || bad "fallback candidate prepared" "$(cat "$fb/model_new.py")"
run "workdir with a torch fallback" 1 "$cli" eval --json "$wd" "$fb"
field "fallback: hack.torch_compute, reward -1" 'r["reason"]["code"] == "hack.torch_compute" and r["reward"] == -1'

# ---- KernelBench format: our KernelBench-shaped tree, imported, then evaluated and benched
store="$tmp/store"
run "import our KernelBench tree" 0 "$cli" tasks import kernelbench --store "$store" examples/kernelbench/KernelBench
run "load_inline ReLU evaluates" 0 "$cli" eval --json "$store/kernelbench/level1/19_ReLU" examples/kernelbench/candidates/level1/19_ReLU.py
head -n 1 "$tmp/out" >>"$results"
field "ReLU: kernelbench format, correct, rewarded" 'r["candidate"]["format"] == "kernelbench" and r["correct"] is True and r["reward"] >= 1'
field "ReLU: reward matches its speed-ups" "$reward_matches"
"$py" - "$tmp/out" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
t = r["timing"]
print(f"figure: load_inline ReLU 4096x16384: candidate {t['candidate']['median_ms']:.4f} ms, eager {t['eager']['median_ms']:.4f} ms, "
      f"compile {t['compile']['median_ms']:.4f} ms, reward {r['reward']}, build {r['build']['seconds']:.2f} s, total {r['seconds']['total']:.2f} s")
PY
field "ReLU: checked calls passed (512 MB of tensors per call, in the bridge's slots)" 'r["timing"]["checks"]["failed"] == 0 and r["timing"]["checks"]["special"] == 2 and r["timing"]["checks"]["final"] is True'
# a wrong kernel
sed 's/v\[k\].w = relu1(v\[k\].w);/v[k].w = v[k].w;/' examples/kernelbench/candidates/level1/19_ReLU.py >"$tmp/19_ReLU_wrong.py"
cmp -s examples/kernelbench/candidates/level1/19_ReLU.py "$tmp/19_ReLU_wrong.py" && bad "wrong ReLU prepared" "the sed changed nothing" || ok "wrong ReLU prepared"
run "a wrong load_inline ReLU" 1 "$cli" eval --json "$store/kernelbench/level1/19_ReLU" "$tmp/19_ReLU_wrong.py"
field "wrong ReLU: verify.mismatch with its error size, reward -1" 'r["reason"]["code"] == "verify.mismatch" and r["reward"] == -1 and r["trials"][0]["mismatches"] > 0 and r["trials"][0]["first_mismatch"]["got"] < 0 and r["trials"][0]["max_abs_err"] > 0'
"$py" -c "import json,sys; r=json.loads(open('$tmp/out').readline()); print('figure: wrong ReLU:', r['reason']['message'][:240])"
run "load_inline ReLU again (warm build cache)" 0 "$cli" eval --json "$store/kernelbench/level1/19_ReLU" examples/kernelbench/candidates/level1/19_ReLU.py
field "ReLU warm: build cached" 'r["build"]["cached"] is True and r["correct"] is True'
"$py" -c "import json,sys; r=json.loads(open('$tmp/out').readline()); print('figure: load_inline ReLU 4096x16384 warm: total %.2f s (build %.2f s, record %s s)' % (r['seconds']['total'], r['build']['seconds'], r['seconds'].get('record')))"

run "bench over our KernelBench tree" 0 "$cli" bench --out "$tmp/kb-out" "$store/kernelbench" examples/kernelbench/candidates
if "$py" - "$tmp/kb-out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, rows
for r in rows:
    print(f"figure: bench {r['task']['id']}: {r['candidate']['format']} correct={r['correct']} reward={r['reward']} "
          f"reason={r['reason']['code']}")
assert all(r["correct"] is True for r in rows), [r["reason"] for r in rows]
PY
then ok "bench: every KernelBench-format candidate correct"; else bad "bench: every KernelBench-format candidate correct" "$(head -c 800 "$tmp/kb-out/results.jsonl")"; fi
[ -s "$tmp/kb-out/report.html" ] && ok "bench: report.html written" || bad "bench: report.html written"

# ---- the large level-1 task (ReLU on 4096 x 393216, 6.4 GB per tensor), when asked for
if [ "${CA_BIG_RELU:-0}" = 1 ]; then
  run "import the big ReLU" 0 "$cli" tasks import kernelbench --store "$store" examples/kernelbench/big
  # first: the baselines are measured (and the build may be cold); then the figure: warm
  for pass in first warm; do
    start=$(date +%s.%N)
    run "big ReLU evaluates ($pass)" 0 "$cli" eval --json "$store/kernelbench/level1/19_ReLU" examples/kernelbench/candidates/level1/19_ReLU.py
    end=$(date +%s.%N)
    head -n 1 "$tmp/out" >>"$results"
    wall=$("$py" -c "print(f'{$end - $start:.1f}')")
    "$py" - "$tmp/out" "$pass" "$wall" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
t = r.get("timing", {})
secs = {k: round(v, 2) for k, v in r.get("seconds", {}).items()}
print(f"figure: big ReLU 4096x393216 ({sys.argv[2]}): {sys.argv[3]} s wall, {r['reason']['code']}, "
      f"candidate {t.get('candidate', {}).get('median_ms')} ms, eager {t.get('eager', {}).get('median_ms')} ms, "
      f"compile {t.get('compile', {}).get('median_ms')} ms, reward {r.get('reward')}, baselines cached {t.get('baselines_cached')}, "
      f"seconds {secs}")
PY
  done
  field "big ReLU: correct on 5 trials and timed, reward matches" 'r["correct"] is True and len(r["trials"]) == 5 and r["timing"]["checks"]["failed"] == 0 and r["timing"]["checks"]["special"] == 2 and r["timing"]["checks"]["final"] is True and r["timing"]["baselines_cached"] is True'
  "$py" -c "import sys; sys.exit(0 if $wall <= 20.0 else 1)" && ok "big ReLU warm full evaluation within 20 s ($wall s)" || bad "big ReLU warm full evaluation within 20 s" "$wall s"
fi

finish
