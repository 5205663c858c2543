#!/usr/bin/env bash
# `cuda-agent serve` without a GPU (docs/service.md): the real binary on a free loopback port,
# real worker processes with the real bridge on CPU torch and real nvcc. Checks health, the
# OpenAPI document and the metrics; a native candidate (compiled, then env.no_gpu: reward null)
# by stored task id and by inline task; a PyTorch-format candidate evaluated in full on the CPU
# protocol; hostile and malformed requests, each a 4xx with a message; the token; idempotency
# keys (one evaluation, one answer); 64 concurrent compile requests with none lost or doubled;
# agent sessions (tools, compile/verify through the queue, finalize, close, limits, the idle
# reaper) and 10,000 tool calls over 256 sessions; a server killed with jobs queued (none lost);
# a full queue answering 429 with Retry-After; a worker killed with SIGKILL mid-job (the job is
# retried on a fresh worker and answered once); SIGTERM with jobs queued (every one answered).
# Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-serve-cache.XXXXXX)"
tmp="$(mktemp -d /tmp/ca-serve.XXXXXX)"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh
export CUDA_AGENT_PROTOCOL_CPU=1

store="$tmp/store"
run "import the task store" 0 "$cli" tasks import kernelbench tests/data/kernelbench_mini --store "$store"

# start NAME ARGS...: a server on a free port; sets $port and $spid
start() {
  local name="$1"; shift
  rm -f "$tmp/port"
  "$cli" serve --listen 127.0.0.1:0 --port-file "$tmp/port" --state "$tmp/state-$name" \
    --tasks "$store" --device cpu "$@" 2>"$tmp/serve-$name.log" &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  port="$(cat "$tmp/port" 2>/dev/null)"
  if [ -n "$port" ]; then ok "$name: listening on $port"; else bad "$name: did not start" "$(tail -5 "$tmp/serve-$name.log")"; fi
}

start main --workers 2 --max-queue 256
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py main >"$tmp/main.out" 2>&1
cat "$tmp/main.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/main.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/main.out")))

for mode in sessions ws load; do
  CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py $mode >"$tmp/$mode.out" 2>&1
  cat "$tmp/$mode.out"
  passed=$((passed + $(grep -c '^ok ' "$tmp/$mode.out")))
  failed=$((failed + $(grep -c '^FAIL ' "$tmp/$mode.out")))
done

# The example client of docs/service.md
run "examples/serve_client.py" 0 "$py" examples/serve_client.py "http://127.0.0.1:$port" \
  tests/data/candidates/tiny_task tests/data/candidates/good
grep_out "the example prints the reward and the reason" "^reward None: env.no_gpu: "

# Eight GPUs (issue 19's scheduler without them: a server told it has GPUs 0..7 runs on the CPU,
# each worker with its CUDA_VISIBLE_DEVICES and its GPU's host-wide lock file).
mainport="$port" mainspid="$spid"
# The timing CPU named (a 2-CPU CI machine is too small for the pool to reserve one itself):
# the workers, and so every build and bridge, run on the others; the workers claim it.
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
top=$("$py" -c 'import os; print(max(os.sched_getaffinity(0)))')
CUDA_AGENT_TIMING_CPUS="$top" CUDA_AGENT_CACHE="$tmp/cache8" start gpus8 --gpus 0,1,2,3,4,5,6,7 --gpu-slots 1 --max-queue 64
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py gpus8 >"$tmp/gpus8.out" 2>&1
cat "$tmp/gpus8.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/gpus8.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/gpus8.out")))
# each worker process: its GPU, and that GPU's lock file in the host-wide directory
pairs=$(for c in /proc/[0-9]*; do
  [ "$(sed 's/.*) [A-Za-z] \([0-9]*\) .*/\1/' "$c/stat" 2>/dev/null)" = "$spid" ] || continue
  e=$(tr '\0' '\n' < "$c/environ" 2>/dev/null)
  echo "$(echo "$e" | sed -n 's/^CUDA_VISIBLE_DEVICES=//p') $(echo "$e" | sed -n 's/^CUDA_AGENT_GPU_LOCK=//p')"
done | sort -u)
want=$(for g in 0 1 2 3 4 5 6 7; do echo "$g $tmp/cache8/gpu-locks/gpu-$g.lock"; done | sort -u)
[ "$pairs" = "$want" ] && ok "gpus8: each worker sees its own GPU and takes turns through its lock file" || bad "gpus8: workers' GPU and lock: $pairs"
if [ "$allowed" != "$top" ]; then
  cpus=$(for c in /proc/[0-9]*; do
    [ "$(sed 's/.*) [A-Za-z] \([0-9]*\) .*/\1/' "$c/stat" 2>/dev/null)" = "$spid" ] || continue
    t=$(tr '\0' '\n' < "$c/environ" 2>/dev/null | sed -n 's/^CUDA_AGENT_TIMING_CPUS=//p')
    echo "$t $("$py" -c 'import os, sys; print(int(sys.argv[1]) in os.sched_getaffinity(int(sys.argv[2])))' "$top" "${c#/proc/}")"
  done | sort -u)
  server_has=$("$py" -c 'import os, sys; print(int(sys.argv[1]) in os.sched_getaffinity(int(sys.argv[2])))' "$top" "$spid")
  [ "$cpus" = "$top False" ] && [ "$server_has" = False ] \
    && ok "gpus8: the timing CPU $top is named to every worker, and no worker or server thread runs on it" \
    || bad "gpus8: timing CPU $top: workers '$cpus', server on it: $server_has"
fi
kill -TERM "$spid"; wait "$spid" 2>/dev/null
port="$mainport" spid="$mainspid"

# A worker killed mid-job: the job is retried on a fresh worker, answered once.
"$py" tests/integration/serve_client.py kill "http://127.0.0.1:$port" "$spid" >"$tmp/kill.out" 2>&1
cat "$tmp/kill.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/kill.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/kill.out")))

# SIGTERM with jobs queued: every request answered, then the server exits 0.
"$py" tests/integration/serve_client.py drain "http://127.0.0.1:$port" "$spid" >"$tmp/drain.out" 2>&1
cat "$tmp/drain.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/drain.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/drain.out")))
wait "$spid"; rc=$?
if [ "$rc" -eq 0 ]; then ok "SIGTERM: exit 0 after the queue drained"; else bad "SIGTERM: exit $rc"; fi

# A one-slot queue and one worker: the third concurrent request gets 429 with Retry-After.
start small --workers 1 --max-queue 1
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py full >"$tmp/full.out" 2>&1
cat "$tmp/full.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/full.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/full.out")))
kill "$spid"; wait "$spid"

# A server killed with three keyed jobs in it: the next one on the same state runs them, and
# the clients' retries get their answers.
start persist --workers 1
"$py" tests/integration/serve_client.py restart-before "http://127.0.0.1:$port" "$spid" >"$tmp/rb.out" 2>&1
wait "$spid" 2>/dev/null
start persist --workers 1
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py restart-after >"$tmp/ra.out" 2>&1
cat "$tmp/rb.out" "$tmp/ra.out"
passed=$((passed + $(cat "$tmp/rb.out" "$tmp/ra.out" | grep -c '^ok ')))
failed=$((failed + $(cat "$tmp/rb.out" "$tmp/ra.out" | grep -c '^FAIL ')))
kill "$spid"; wait "$spid"

# Two sessions at most, closed after 1 s idle.
start limits --workers 1 --max-sessions 2 --session-idle 1
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py limits >"$tmp/limits.out" 2>&1
cat "$tmp/limits.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/limits.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/limits.out")))
kill "$spid"; wait "$spid"

# The token: every endpoint but health wants it.
CUDA_AGENT_SERVE_TOKEN=s3cret start token --workers 1
CUDA_AGENT_SERVE_URL="http://127.0.0.1:$port" "$py" tests/integration/serve_client.py token >"$tmp/token.out" 2>&1
cat "$tmp/token.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/token.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/token.out")))
kill "$spid"; wait "$spid"

run "serve: a bad --listen is a usage error" 2 "$cli" serve --listen nowhere --state "$tmp/x"
run "serve: a bad --workers is a usage error" 2 "$cli" serve --workers 0
run "serve --help" 0 "$cli" serve --help
grep_out "help names the endpoints" "/v1/evaluate"
finish
