#!/usr/bin/env bash
# The Redis scale-out without a GPU (docs/service.md, "Scale-out"): a real redis-server on a
# free loopback port (append-only file on, so that it can be restarted), two `cuda-agent serve
# --redis` replicas and `cuda-agent worker --redis` nodes with real worker processes and real
# nvcc. Checks: 200 concurrent compile jobs through both replicas, answered once each, run on
# both nodes; one key sent to both replicas is one evaluation; an agent session whose
# workspace and tools run on a node; a node killed with SIGKILL mid-job (another node takes the
# job over with XAUTOCLAIM and answers it once); a server killed with jobs queued (none lost:
# the clients' retries get them); Redis restarted with jobs queued (none lost); the fleet's
# baseline table reaching a node that did not measure it; bad URLs and an unreachable Redis.
# Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-fleet.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  pkill -9 -f "redis-server 127.0.0.1:$rport" 2>/dev/null
  rm -rf "$tmp"
}
rport=0
trap cleanup EXIT
. tests/lib.sh

if ! command -v redis-server >/dev/null; then
  bad "redis-server is installed (scripts/setup.sh installs it)"; finish
fi
rport="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis_url="redis://127.0.0.1:$rport"
mkdir -p "$tmp/redis"
start_redis() {
  redis-server --bind 127.0.0.1 --port "$rport" --dir "$tmp/redis" --appendonly yes \
    --appendfsync always --save "" --daemonize no >>"$tmp/redis.log" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  for _ in $(seq 50); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
  return 1
}
if start_redis; then ok "redis-server on $rport"; else bad "redis-server did not start" "$(tail -5 "$tmp/redis.log")"; fi

# server NAME: a replica on a free port; sets $port and $spid
server() {
  local name="$1"; shift
  rm -f "$tmp/port-$name"
  "$cli" serve --listen 127.0.0.1:0 --port-file "$tmp/port-$name" --state "$tmp/serve-$name" \
    --redis "$redis_url" "$@" 2>>"$tmp/serve-$name.log" &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 100); do [ -s "$tmp/port-$name" ] && break; sleep 0.1; done
  port="$(cat "$tmp/port-$name" 2>/dev/null)"
  if [ -n "$port" ]; then ok "serve $name: listening on $port"; else bad "serve $name did not start" "$(tail -5 "$tmp/serve-$name.log")"; fi
}
# node NAME [ARGS]: a fleet node with its own cache; sets $npid
node() {
  local name="$1"; shift
  CUDA_AGENT_CACHE="$tmp/cache-$name" "$cli" worker --redis "$redis_url" --workers 2 --device cpu \
    --state "$tmp/$name" --name "$name" "$@" 2>>"$tmp/$name.log" &
  npid=$!
  pids+=("$npid")
}
tally() {
  cat "$1"
  passed=$((passed + $(grep -c '^ok ' "$1")))
  failed=$((failed + $(grep -c '^FAIL ' "$1")))
}

# The fleet's baseline table: node1 starts with an entry it measured; node2 gets it.
cat >"$tmp/baseline.jsonl" <<'EOF'
{"task_hash": "fleet-test-task", "gpu_name": "NVIDIA H200", "torch_version": "2.11.0", "protocol_version": 4, "measured_at": 1700000000, "timing": {"eager": {"median_ms": 1.5}, "compile": {"median_ms": 1.2}}}
EOF
run "node1's cache holds one baseline" 0 env CUDA_AGENT_CACHE="$tmp/cache-node1" "$cli" baselines import "$tmp/baseline.jsonl"

server a; url_a="http://127.0.0.1:$port"; pid_a=$spid
server b; url_b="http://127.0.0.1:$port"
node node1 --reclaim-after 3; n1=$npid
node node2 --reclaim-after 3; n2=$npid

"$py" tests/integration/fleet_client.py spread "$url_a" "$url_b" >"$tmp/spread.out" 2>&1
tally "$tmp/spread.out"
"$py" tests/integration/fleet_client.py session "$url_a" >"$tmp/session.out" 2>&1
tally "$tmp/session.out"

for _ in $(seq 50); do
  CUDA_AGENT_CACHE="$tmp/cache-node2" "$cli" baselines export 2>/dev/null | grep -q fleet-test-task && break
  sleep 0.2
done
if CUDA_AGENT_CACHE="$tmp/cache-node2" "$cli" baselines export 2>/dev/null | grep -q '"fleet-test-task"'; then
  ok "the baseline node1 measured is in node2's table"
else
  bad "node2 did not get node1's baseline" "$(tail -5 "$tmp/node2.log")"
fi

# A node killed mid-job: the other node takes it over once it is not renewed (3 s).
kill -9 "$n2"; sleep 0.2
"$py" tests/integration/fleet_client.py submit "$url_a" 1 killed "$tmp/killed.json" &
cpid=$!; pids+=("$cpid")
held=""
for _ in $(seq 100); do
  held="$(redis-cli -p "$rport" XPENDING ca:jobs ca-workers - + 10 2>/dev/null | grep -c node1)"
  [ "$held" -gt 0 ] && break
  sleep 0.05
done
if [ "${held:-0}" -gt 0 ]; then ok "node1 holds the job"; else bad "node1 never held the job"; fi
kill -9 "$n1"
pkill -9 -P "$n1" 2>/dev/null
node node3 --reclaim-after 3; n3=$npid
for _ in $(seq 300); do [ -s "$tmp/killed.json" ] && break; sleep 0.1; done
"$py" - "$tmp/killed.json" <<'PY' >"$tmp/killed.out"
import json, sys
try:
    a = json.load(open(sys.argv[1]))["0"]
except (OSError, ValueError, KeyError) as e:
    print(f"FAIL the killed node's job was answered: {e}"); sys.exit()
ok = a[0] == 200 and a[1]["reason"]["code"] == "ok" and "/node3/" in a[1]["task"]["dir"]
print("ok the killed node's job was taken over and answered by node3" if ok else f"FAIL takeover: {str(a)[:400]}")
PY
tally "$tmp/killed.out"
if grep -q "took over job" "$tmp/node3.log"; then ok "node3 says it took the job over"; else bad "node3 did not log the takeover" "$(tail -3 "$tmp/node3.log")"; fi
"$py" tests/integration/fleet_client.py collect "$url_a" 1 killed "$tmp/killed2.json" >"$tmp/killed2.out" 2>&1
tally "$tmp/killed2.out"
kill "$cpid" 2>/dev/null

# A server killed with jobs queued (no node running): the next server gets them answered.
kill -TERM "$n3"; wait "$n3" 2>/dev/null
"$py" tests/integration/fleet_client.py submit "$url_a" 5 restart "$tmp/restart.json" &
cpid=$!; pids+=("$cpid")
for _ in $(seq 100); do [ "$(redis-cli -p "$rport" XLEN ca:jobs 2>/dev/null)" = 5 ] && break; sleep 0.05; done
kill -9 "$pid_a"; kill "$cpid" 2>/dev/null
server a2; url_a="http://127.0.0.1:$port"
# Redis restarted with the jobs still queued: they survive (append-only file) and run.
redis-cli -p "$rport" shutdown >/dev/null 2>&1; wait "$rpid" 2>/dev/null
if start_redis; then ok "redis-server restarted"; else bad "redis-server did not restart"; fi
q="$(redis-cli -p "$rport" XLEN ca:jobs 2>/dev/null)"
if [ "$q" = 5 ]; then ok "the 5 queued jobs survived the Redis restart"; else bad "after the Redis restart ca:jobs holds $q entries, not 5"; fi
node node4
"$py" tests/integration/fleet_client.py collect "$url_a" 5 restart "$tmp/restart2.json" >"$tmp/restart.out" 2>&1
tally "$tmp/restart.out"
if grep -q "took over" "$tmp/node4.log"; then bad "node4 took over jobs it should have read fresh"; else ok "node4 read the queued jobs as new ones"; fi

run "worker: no --redis is a usage error" 2 "$cli" worker
run "worker: a bad URL is a usage error" 2 "$cli" worker --redis http://x
run "serve: a bad Redis URL is a usage error" 2 "$cli" serve --redis redis://h:0
run "serve: an unreachable Redis is an environment error" 4 "$cli" serve --listen 127.0.0.1:0 --state "$tmp/x" --redis redis://127.0.0.1:1
grep -q "cannot reach Redis" "$tmp/err" && ok "the message says Redis cannot be reached" || bad "no 'cannot reach Redis' in: $(cat "$tmp/err")"
run "worker --help" 0 "$cli" worker --help
grep_out "help names XAUTOCLAIM's option" "reclaim-after"
finish
