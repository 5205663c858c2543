#!/usr/bin/env bash
# A candidate suite's build half (no GPU): compiles every candidate with the real build driver
# against its task and checks the verdict against its expect.json:
#   honest / control         -> compiled (reason ok)
#   cheat / fault, stage run -> compiled (it is caught at run time: run.sh), or rejected with one
#                               of its reasons that a build can give (build.*; for PyTorch formats
#                               also hack.harness_tampering, hack.torch_compute, sandbox.violation)
#   stage build              -> rejected with one of its reasons
# and that every expect.json is well formed (tests/adversarial/suite.py list checks them).
# Candidates of every format: native (kernels/), kernelbench (model_new.py) and CUDA-Agent
# workdirs; the PyTorch formats build with the Python of $PYTHON (torch, nvcc: torch_build).
# Usage: tests/adversarial/check_build.sh [--suite DIR]   (default tests/adversarial; the fault
# suite: --suite tests/faults, or tests/faults/check_build.sh)
# Compiles run in parallel ($ADV_JOBS or $FAULT_JOBS, default: the number of CPUs) and go through
# the build cache ($CUDA_AGENT_CACHE or the default), so a re-run is cheap. Prints ok/FAIL lines
# and "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
suite=tests/adversarial
here="$(dirname "$0")"
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) [ $# -ge 2 ] || { usage >&2; exit 2; }; suite="$2"; shift 2 ;;
    --suite=*) suite="${1#--suite=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -d "$suite" ] || [ -d "$here/../../$suite" ] || { echo "no suite directory $suite" >&2; exit 2; }
[ -d "$suite" ] || suite="$here/../../$suite"
suite="$(cd "$suite" && pwd)"
cd "$here/../.." || exit 1
if [ -d "$suite/honest" ] || [ -d "$suite/cheats" ]; then prefix=ADV; else prefix=FAULT; fi
var="${prefix}_JOBS"
jobs="${!var:-$(nproc 2>/dev/null || echo 2)}"
tmp="$(mktemp -d /tmp/ca-suite-build.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib.sh
. tests/lib.sh

[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }

# ---- the expectations: one line per candidate
# "kind<TAB>name<TAB>dir<TAB>task dir<TAB>stage<TAB>reasons<TAB>reasons also accepted at build"
if ! "$py" tests/adversarial/suite.py list "$suite" >"$tmp/list" 2>"$tmp/list.err"; then
  bad "expect.json files of ${suite#"$PWD"/} are well formed" "$(cat "$tmp/list.err")"
else
  ok "expect.json files of ${suite#"$PWD"/} are well formed ($(cut -f1 "$tmp/list" | sort | uniq -c |
    awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}'))"
fi

# ---- compile everything, in parallel; each result in $tmp/res/<kind>__<name>.json
mkdir -p "$tmp/res"
export cli tmp
start=$(date +%s)
# shellcheck disable=SC2016 # expanded by the inner bash
cut -f1-4 "$tmp/list" | xargs -P "$jobs" -L 1 bash -c '
  kind=$0 name=$1 dir=$2 task=$3
  timeout 600 "$cli" compile --json -q --task "$task" "$dir" \
    >"$tmp/res/${kind}__${name}.json" 2>"$tmp/res/${kind}__${name}.err"
  echo $? >"$tmp/res/${kind}__${name}.rc"'
echo "compiled $(wc -l <"$tmp/list") candidates in $(( $(date +%s) - start )) s ($jobs jobs)"

# ---- verdicts
while IFS=$'\t' read -r kind name dir task stage reasons at_build; do
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
  case "$kind/$stage" in
    honest/* | control/*) label="$kind $name compiles (${task##*/})"; want=ok ;;
    */run)
      label="$kind $name compiles (caught at run time: $reasons)"; want=ok
      # A run-time cheat may already be caught at build, with one of its reasons a build gives.
      [ "$at_build" = - ] || want="ok,$at_build" ;;
    *) label="$kind $name rejected at build with one of $reasons"; want="$reasons" ;;
  esac
  if [[ ",$want," != *",$code,"* ]]; then
    bad "$label" "$dir: $detail"
  elif [ "$stage" = run ] && [ "$code" != ok ]; then
    ok "$kind $name rejected at build already with $code (one of its reasons; its run-time defence is not exercised)"
  else
    ok "$label"
  fi
done <"$tmp/list"

finish
