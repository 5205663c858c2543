#!/usr/bin/env bash
# The adversarial suite on a GPU: evaluates every candidate under tests/adversarial/{honest,cheats}/
# with `cuda-agent eval --json` against its task and checks the result against its expect.json:
#   honest -> correct, reward >= 1
#   cheat  -> reward -1 with reason.code among its "reasons"
# Usage: tests/adversarial/run.sh [NAME ...]   (default: every candidate)
# Environment: CA_BUILD (build dir), PYTHON / CUDA_AGENT_PYTHON (Python with torch), ADV_BUDGET
# (timed-loop budget in seconds, default 1: the checked calls all fall in the first samples, so a
# shorter budget weakens no check), ADV_TIMEOUT (watchdog per evaluation, default 120 s),
# ADV_EVAL_FLAGS (more eval options, e.g. --sandbox), OUT (where adversarial_results.jsonl
# goes). Prints a table (name, expected, got, reward, verdict) and "N passed, N failed" last;
# exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build="${CA_BUILD:-$PWD/build}"
cli="$build/cuda-agent"
py="${PYTHON:-${CUDA_AGENT_PYTHON:-python3}}"
export CUDA_AGENT_PYTHON="$py"
adv=tests/adversarial
budget="${ADV_BUDGET:-1}"
watchdog="${ADV_TIMEOUT:-120}"
tmp="$(mktemp -d /tmp/ca-adv.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
results="${OUT:-$tmp}/adversarial_results.jsonl"
: >"$results"
# shellcheck source=tests/lib.sh
. tests/lib.sh

[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null || true

# One line per candidate: kind<TAB>name<TAB>task<TAB>expected reasons (honest: "ok")
"$py" - "$adv" "$@" >"$tmp/list" <<'PY' || { echo "bad expect.json (run check_build.sh)"; exit 1; }
import json, os, sys
adv, only = sys.argv[1], set(sys.argv[2:])
for kind in ("honest", "cheats"):
    for name in sorted(os.listdir(os.path.join(adv, kind))):
        if only and name not in only:
            continue
        e = json.load(open(os.path.join(adv, kind, name, "expect.json")))
        reasons = "ok" if kind == "honest" else ",".join(e["reasons"])
        print(f"{kind}\t{name}\t{e['task']}\t{reasons}")
PY

start=$(date +%s)
while IFS=$'\t' read -r kind name task reasons; do
  t0=$(date +%s)
  # shellcheck disable=SC2086 # ADV_EVAL_FLAGS is a list of options
  timeout $((watchdog + 300)) "$cli" eval --json -q --budget "$budget" --timeout "$watchdog" ${ADV_EVAL_FLAGS:-} \
    "$adv/tasks/$task" "$adv/$kind/$name" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  # One JSON line per evaluation, with the suite's own fields added for the table.
  "$py" - "$tmp/out" "$kind" "$name" "$reasons" "$rc" "$(( $(date +%s) - t0 ))" >>"$results" <<'PY'
import json, sys
path, kind, name, reasons, rc, secs = sys.argv[1:]
try:
    r = json.loads(open(path).readline())
except (OSError, ValueError):
    r = {"reason": {"code": "no-result", "message": f"cuda-agent exited {rc} without a JSON result"}}
reason = r.get("reason") or {}
code = reason.get("code", "no-result")
if kind == "honest":
    passed = r.get("correct") is True and isinstance(r.get("reward"), (int, float)) and r["reward"] >= 1
else:
    passed = r.get("reward") == -1 and code in reasons.split(",")
r["adversarial"] = {"kind": kind, "name": name, "expected": reasons, "got": code, "passed": passed,
                    "seconds": int(secs), "exit": int(rc)}
print(json.dumps(r))
PY
  # "pass" or "fail", a tab, and what went wrong
  verdict="$(tail -n 1 "$results" | "$py" -c '
import json, sys
r = json.loads(sys.stdin.read())
a = r["adversarial"]
msg = " ".join((r.get("reason") or {}).get("message", "").split())[:400]
why = "expected %s, got %s (reward %s, exit %s): %s" % (a["expected"], a["got"], r.get("reward"), a["exit"], msg)
print(("pass" if a["passed"] else "fail") + "\t" + why)')"
  if [ "${verdict%%$'\t'*}" = pass ]; then
    ok "$kind $name"
  else
    bad "$kind $name" "${verdict#*$'\t'}"
  fi
done <"$tmp/list"

echo
"$py" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'candidate':34} {'expected':58} {'got':26} {'reward':>6} {'ms':>9} {'s':>4}  verdict")
for r in rows:
    a = r["adversarial"]
    t = (r.get("timing") or {}).get("candidate") or {}
    ms = t.get("median_ms")
    ms = f"{ms:9.4f}" if isinstance(ms, (int, float)) else f"{'-':>9}"
    exp = a["expected"] if len(a["expected"]) <= 58 else a["expected"][:55] + "..."
    print(f"{a['kind'][0] + ':' + a['name']:34} {exp:58} {a['got']:26} {str(r.get('reward')):>6} {ms} "
          f"{a['seconds']:4d}  {'ok' if a['passed'] else 'FAIL'}")
honest = [r for r in rows if r["adversarial"]["kind"] == "honest"]
cheats = [r for r in rows if r["adversarial"]["kind"] == "cheats"]
print(f"\nhonest passed: {sum(r['adversarial']['passed'] for r in honest)}/{len(honest)}; "
      f"cheats rejected as expected: {sum(r['adversarial']['passed'] for r in cheats)}/{len(cheats)}")
PY
echo "suite time: $(( $(date +%s) - start )) s"
finish
