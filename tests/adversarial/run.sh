#!/usr/bin/env bash
# A candidate suite on a GPU: evaluates every candidate with `cuda-agent eval --json` against its
# task and checks the result against its expect.json. One eval call per task (one warm torch
# bridge for all its candidates); a candidate the call never reached is a failure (no-result).
# Two suites share this script (loader and runner: tests/adversarial/suite.py):
#   tests/adversarial (default; honest/ and cheats/; native, kernelbench and workdir candidates
#   side by side, each detected by cuda-agent):
#     honest -> correct, reward >= 1;  cheat -> reward -1 with reason.code among its "reasons";
#     a cheat with "expect": "held" -> that, or correct with timing.candidate.median_ms at least
#     (1 - its "tolerance", default 0.10) x its "twin"'s in the same run and a reward no higher
#     than the twin's (the twin is evaluated whenever the cheat is)
#   tests/faults (--suite tests/faults, or tests/faults/run.sh; no split):
#     fault  -> reward -1 with one of its reasons, ended within the watchdog + 30 s, and none of
#               its "host_files" left on the host; each fault is followed by the task's control
#               (tests/faults/good), which must be correct: the next evaluation still works
# Usage: tests/adversarial/run.sh [--suite DIR] [NAME ...]   (default: every candidate)
# Environment (PREFIX is ADV for tests/adversarial, FAULT for tests/faults):
#   PREFIX_EVAL_FLAGS  more eval options; adversarial default none, faults default --sandbox
#                      (cuda-agent's default too; --no-sandbox turns it off). Candidates with
#                      "sandbox": true are skipped without the sandbox, and so are those whose
#                      "requires" layers the
#                      host's sandbox did not have on
#   PREFIX_ALLOW_SKIP  1: skipped candidates are reported but not counted as failures
#   PREFIX_TIMEOUT     the watchdog per evaluation (--timeout), default 120 s / faults 20 s
#   PREFIX_BUDGET      timed-loop budget, default 1 s (the checked calls all fall in the first
#                      samples, so a shorter budget weakens no check)
#   CA_BUILD (build dir), PYTHON / CUDA_AGENT_PYTHON (Python with torch), OUT (where
#   <suite>_results.jsonl goes: one JSON result per evaluation with a "check" object added)
# Prints ok/FAIL lines as results arrive, a table, the suite time and "N passed, N failed" last;
# exits nonzero on any failure.
set -uo pipefail
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
suite=tests/adversarial
names=()
here="$(dirname "$0")"
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) [ $# -ge 2 ] || { usage >&2; exit 2; }; suite="$2"; shift 2 ;;
    --suite=*) suite="${1#--suite=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; names+=("$@"); break ;;
    -*) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[ -d "$suite" ] || [ -d "$here/../../$suite" ] || { echo "no suite directory $suite" >&2; exit 2; }
[ -d "$suite" ] || suite="$here/../../$suite"
suite="$(cd "$suite" && pwd)"
cd "$here/../.." || exit 1
tmp="$(mktemp -d /tmp/ca-suite.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib.sh
. tests/lib.sh

if [ -d "$suite/honest" ] || [ -d "$suite/cheats" ]; then
  prefix=ADV default_watchdog=120 default_flags=""
else
  prefix=FAULT default_watchdog=20 default_flags="--sandbox"
fi
var="${prefix}_TIMEOUT"; watchdog="${!var:-$default_watchdog}"
var="${prefix}_BUDGET"; budget="${!var:-1}"
var="${prefix}_EVAL_FLAGS"; flags="${!var-$default_flags}"
var="${prefix}_ALLOW_SKIP"; allow_skip="${!var:-0}"
results="${OUT:-$tmp}/$(basename "$suite")_results.jsonl"
: >"$results"

[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }
if ! "$py" tests/adversarial/suite.py list "$suite" ${names[@]+"${names[@]}"} >/dev/null 2>"$tmp/list.err"; then
  bad "expect.json files and names are valid (run check_build.sh)" "$(cat "$tmp/list.err")"
  finish
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null || true
echo "suite ${suite#"$PWD"/}: eval flags '${flags}', watchdog ${watchdog} s, budget ${budget} s"

start=$(date +%s)
skipped=0
ended=0
while IFS=$'\t' read -r verdict label why; do
  case "$verdict" in
    pass) ok "$label" ;;
    fail) bad "$label" "$why" ;;
    skip)
      if [ "$allow_skip" = 1 ]; then
        skipped=$((skipped + 1))
        echo "skip $label: $why"
      else
        bad "$label (skipped)" "$why (${prefix}_ALLOW_SKIP=1 accepts skips)"
      fi ;;
    note) echo "note $why" ;;
    end) ended=1 ;;
    *) bad "runner output" "unexpected line: $verdict $label $why" ;;
  esac
done < <("$py" tests/adversarial/suite.py run --suite "$suite" --cli "$cli" --results "$results" \
           --tmp "$tmp" --watchdog "$watchdog" --budget "$budget" --flags="$flags" \
           -- ${names[@]+"${names[@]}"})
[ "$ended" = 1 ] || bad "the runner (tests/adversarial/suite.py run) went through the suite" \
  "it stopped early: see its messages above"

echo
[ -s "$results" ] && "$py" tests/adversarial/suite.py table "$results"
[ "$skipped" -eq 0 ] || echo "$skipped skipped (${prefix}_ALLOW_SKIP=1: not counted as failures)"
echo "suite time: $(( $(date +%s) - start )) s"
finish
