#!/usr/bin/env bash
# Issue 17's "run that learns" on one GPU host: a `cuda-agent serve` with real GPU rewards, the
# bandit run over recipes/cuda-agent/bandit_arms.json, and the TRL GRPO smoke run through the same
# service (docs/rl.md). The GRPO model trains on the CPU (CUDA_VISIBLE_DEVICES emptied for it):
# its tiny random model must not share the GPU with the evaluations it is rewarded by.
#
# Usage: recipes/cuda-agent/learning_runs.sh OUT_DIR
#   env: CA_BUILD (default build/), PYTHON (python3 with torch; trl and datasets for GRPO),
#        STEPS (bandit steps, 30), BATCH (4), GRPO_STEPS (20; 0 skips it), SLOTS (serve
#        --gpu-slots, 3), PORT (8040).
# Writes OUT_DIR/bandit.jsonl, bandit.svg, bandit.log, grpo/ (rollouts.jsonl, metrics.jsonl),
# grpo.log, serve.log, metrics.txt (the service's Prometheus text at the end). Exit status: the
# bandit's (0 converged), or 1 when the GRPO run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: learning_runs.sh OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${CA_BUILD:-$PWD/build}" py="${PYTHON:-python3}" port="${PORT:-8040}"
export CUDA_AGENT_PYTHON="${CUDA_AGENT_PYTHON:-$py}" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
url="http://127.0.0.1:$port"
t0=$(date +%s)

"$build/cuda-agent" tasks import kernelbench tests/data/kernelbench_mini --store "$out/store" -q >/dev/null \
  || { echo "learning_runs: cannot import the GRPO run's task" >&2; exit 4; }
"$build/cuda-agent" serve --listen "127.0.0.1:$port" --state "$out/state" --tasks "$out/store" \
  --gpu-slots "${SLOTS:-3}" 2>"$out/serve.log" &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null' EXIT
for _ in $(seq 300); do
  "$py" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/v1/health', timeout=1)" \
    "$url" 2>/dev/null && break
  kill -0 $serve 2>/dev/null || { echo "learning_runs: serve exited: $(tail -5 "$out/serve.log")" >&2; exit 4; }
  sleep 0.2
done
echo "learning_runs: service up at $url after $(( $(date +%s) - t0 )) s"

grpo=
if [ "${GRPO_STEPS:-20}" -gt 0 ]; then
  ( CUDA_VISIBLE_DEVICES= "$py" -m cuda_agent_rl.grpo_smoke --url "$url" --steps "${GRPO_STEPS:-20}" \
      --out "$out/grpo" >"$out/grpo.log" 2>&1 ) &
  grpo=$!
fi
"$py" -m cuda_agent_rl.bandit --url "$url" --arms recipes/cuda-agent/bandit_arms.json \
  --steps "${STEPS:-30}" --batch "${BATCH:-4}" --out "$out/bandit.jsonl" --svg "$out/bandit.svg" \
  2>&1 | tee "$out/bandit.log"
rc=${PIPESTATUS[0]}
echo "learning_runs: bandit exit $rc after $(( $(date +%s) - t0 )) s"
if [ -n "$grpo" ]; then
  wait "$grpo"; g=$?
  tail -3 "$out/grpo.log"
  echo "learning_runs: GRPO smoke exit $g"
  [ "$g" -eq 0 ] || [ "$rc" -ne 0 ] || rc=1
fi
"$py" -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(sys.argv[1] + '/metrics').read().decode())" \
  "$url" >"$out/metrics.txt" 2>/dev/null
echo "learning_runs: done after $(( $(date +%s) - t0 )) s"
exit "$rc"
