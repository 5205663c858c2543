#!/usr/bin/env bash
# The adversarial suite's build half (no GPU): compiles every candidate under
# tests/adversarial/{honest,cheats}/ with the real build driver against its task and checks the
# verdict against its expect.json:
#   honest                -> compiled (reason ok)
#   cheat, stage "build"  -> rejected with one of its reasons
#   cheat, stage "run"    -> compiled (it is caught at run time: tests/adversarial/run.sh)
# Compiles run in parallel ($ADV_JOBS, default: the number of CPUs) and go through the build
# cache ($CUDA_AGENT_CACHE or the default), so a re-run is cheap. Prints ok/FAIL lines and
# "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build="${CA_BUILD:-$PWD/build}"
cli="$build/cuda-agent"
py="${PYTHON:-${CUDA_AGENT_PYTHON:-python3}}"
adv=tests/adversarial
jobs="${ADV_JOBS:-$(nproc 2>/dev/null || echo 2)}"
tmp="$(mktemp -d /tmp/ca-adv-build.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib.sh
. tests/lib.sh

[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }

# ---- the expectations: one line per candidate "kind<TAB>name<TAB>task<TAB>stage<TAB>reasons"
if ! "$py" - "$adv" >"$tmp/list" 2>"$tmp/list.err" <<'PY'
import json, os, sys
adv = sys.argv[1]
errors = []
for kind in ("honest", "cheats"):
    for name in sorted(os.listdir(os.path.join(adv, kind))):
        d = os.path.join(adv, kind, name)
        try:
            e = json.load(open(os.path.join(d, "expect.json")))
        except (OSError, ValueError) as ex:
            errors.append(f"{kind}/{name}: expect.json: {ex}")
            continue
        task = e.get("task")
        if not isinstance(task, str) or not os.path.isfile(os.path.join(adv, "tasks", task, "model.py")):
            errors.append(f"{kind}/{name}: task {task!r} is not a task under {adv}/tasks")
            continue
        if not isinstance(e.get("technique"), str) or not e["technique"]:
            errors.append(f"{kind}/{name}: no technique")
        if not os.path.isdir(os.path.join(d, "kernels")):
            errors.append(f"{kind}/{name}: no kernels/")
        if kind == "honest":
            if e.get("expect") != "pass":
                errors.append(f"{kind}/{name}: expect must be \"pass\"")
            print(f"{kind}\t{name}\t{task}\t-\t-")
        else:
            reasons, stage = e.get("reasons"), e.get("stage")
            if e.get("expect") != "reject" or stage not in ("build", "run") or not reasons or \
                    not all(isinstance(r, str) and r for r in reasons):
                errors.append(f"{kind}/{name}: needs expect \"reject\", stage build|run and reasons")
                continue
            print(f"{kind}\t{name}\t{task}\t{stage}\t{','.join(reasons)}")
for m in errors:
    print(m, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
then
  bad "expect.json files are well formed" "$(cat "$tmp/list.err")"
else
  ok "expect.json files are well formed ($(grep -c '^honest' "$tmp/list") honest, $(grep -c '^cheats' "$tmp/list") cheats)"
fi

# ---- compile everything, in parallel; each result in $tmp/res/<kind>__<name>.json
mkdir -p "$tmp/res"
export cli adv tmp
start=$(date +%s)
# shellcheck disable=SC2016 # expanded by the inner bash
cut -f1-3 "$tmp/list" | xargs -P "$jobs" -L 1 bash -c '
  kind=$0 name=$1 task=$2
  timeout 600 "$cli" compile --json -q --task "$adv/tasks/$task" "$adv/$kind/$name" \
    >"$tmp/res/${kind}__${name}.json" 2>"$tmp/res/${kind}__${name}.err"
  echo $? >"$tmp/res/${kind}__${name}.rc"'
echo "compiled $(wc -l <"$tmp/list") candidates in $(( $(date +%s) - start )) s ($jobs jobs)"

# ---- verdicts
while IFS=$'\t' read -r kind name task stage reasons; do
  res="$tmp/res/${kind}__${name}.json"
  got="$("$py" - "$res" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).readline())
    print(r["reason"]["code"] + "\t" + " ".join(r["reason"]["message"].split())[:300])
except (OSError, ValueError, KeyError, TypeError):
    print("no-result\t(no JSON result)")
PY
)"
  code="${got%%$'\t'*}" msg="${got#*$'\t'}"
  detail="rc $(cat "$tmp/res/${kind}__${name}.rc" 2>/dev/null); $code: $msg; stderr: $(tail -c 300 "$tmp/res/${kind}__${name}.err" 2>/dev/null)"
  if [ "$kind" = honest ]; then
    if [ "$code" = ok ]; then ok "honest $name compiles ($task)"; else bad "honest $name compiles ($task)" "$detail"; fi
  elif [ "$stage" = run ]; then
    if [ "$code" = ok ]; then ok "cheat $name compiles (caught at run time: $reasons)"
    else bad "cheat $name compiles (caught at run time: $reasons)" "$detail"; fi
  elif [[ ",$reasons," == *",$code,"* ]]; then
    ok "cheat $name rejected at build: $code"
  else
    bad "cheat $name rejected at build with one of $reasons" "$detail"
  fi
done <"$tmp/list"

finish
