# Shared helpers of the shell test suites (tests/integration, tests/gpu, tests/agent, ...).
# Source it from the repository root after setting $tmp (a scratch directory). It sets $build
# (CA_BUILD, else ./build), $cli (the cuda-agent binary) and $py (PYTHON, else
# CUDA_AGENT_PYTHON, else python3; exported as CUDA_AGENT_PYTHON for the bridge).
build="${CA_BUILD:-$PWD/build}"
cli="$build/cuda-agent"
py="${PYTHON:-${CUDA_AGENT_PYTHON:-python3}}"
export CUDA_AGENT_PYTHON="$py"
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; return 0; }

# run NAME EXPECTED_EXIT CMD...: runs CMD, keeps stdout in $tmp/out and stderr in $tmp/err.
run() {
  local name="$1" want="$2"; shift 2
  timeout 900 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok "$name (exit $got)"; return 0; fi
  bad "$name" "exit $got, expected $want; stderr: $(tail -c 600 "$tmp/err"); stdout: $(head -c 600 "$tmp/out")"
  return 1
}

# field NAME PYEXPR: evaluates PYEXPR with r = the JSON result on the first line of $tmp/out.
field() {
  local name="$1" expr="$2"
  if "$py" - "$tmp/out" "$expr" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).readline())
except ValueError:
    sys.exit(1)
sys.exit(0 if eval(sys.argv[2], {"r": r}) else 1)
PY
  then ok "$name"; else bad "$name" "assertion $expr failed on: $(head -c 800 "$tmp/out")"; fi
}

# grep_out NAME PATTERN: the output of the last run contains PATTERN.
grep_out() {
  if grep -q -- "$2" "$tmp/out"; then ok "$1"; else bad "$1" "no '$2' in: $(head -c 600 "$tmp/out")"; fi
}

finish() {
  echo
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
