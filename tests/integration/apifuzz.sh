#!/usr/bin/env bash
# An OpenAPI-driven fuzz run of `cuda-agent serve` (docs/service.md): schemathesis (from PyPI, in
# a small venv of its own kept in the cache, python/requirements-apifuzz.txt) generates requests
# from GET /v1/openapi.json, valid and invalid, against a real server on CPU torch, and checks
# every answer: no 5xx, no dropped connection, status codes and content types the document
# lists, bodies that match its response schemas, and schema-invalid requests rejected with a 4xx
# (413 counts for the caps). Not checked: that every schema-valid request is accepted, since
# OpenAPI 3.0 cannot say which file names are allowed (the server's rule: relative, plain
# components, no leading dot) or that a native candidate's files live under kernels/.
# APIFUZZ_SECONDS (default 60) bounds the run. Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-apifuzz.XXXXXX)"
spid=""
trap '[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
. tests/lib.sh
export CUDA_AGENT_PROTOCOL_CPU=1

req=python/requirements-apifuzz.txt
key="$(sha256sum "$req" | cut -c1-16)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/cuda-agent/apifuzz-venv-$key"
if [ ! -x "$venv/bin/schemathesis" ]; then
  rm -rf "$venv"
  if python3 -m venv "$venv" >"$tmp/venv.log" 2>&1 && "$venv/bin/pip" install -q -r "$req" >>"$tmp/venv.log" 2>&1; then
    ok "schemathesis installed in $venv"
  else
    bad "cannot install schemathesis" "$(tail -5 "$tmp/venv.log")"; rm -rf "$venv"; finish
  fi
fi

"$cli" serve --listen 127.0.0.1:0 --port-file "$tmp/port" --state "$tmp/state" --device cpu \
  --workers 2 2>"$tmp/serve.log" &
spid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port="$(cat "$tmp/port" 2>/dev/null)"
[ -n "$port" ] && ok "serve listening on $port" || { bad "serve did not start" "$(tail -5 "$tmp/serve.log")"; finish; }

cat >"$tmp/schemathesis.toml" <<'TOML'
[checks.negative_data_rejection]
expected-statuses = [400, 401, 404, 405, 413, 422, 429]
TOML
# run from $tmp: schemathesis keeps a .schemathesis/ folder in its working directory
(cd "$tmp" && timeout 600 "$venv/bin/schemathesis" --config-file "$tmp/schemathesis.toml" run \
  "http://127.0.0.1:$port/v1/openapi.json" --checks all --exclude-checks positive_data_acceptance \
  --max-time "${APIFUZZ_SECONDS:-60}" --workers 4 --seed 20261202 >"$tmp/st.out" 2>&1)
rc=$?
grep -E "generated|passed|failed|errors?" "$tmp/st.out" | tail -6
if [ "$rc" -eq 0 ]; then ok "schemathesis: no failures (exit 0)"; else bad "schemathesis found failures (exit $rc)" "$(grep -E -A12 '^___' "$tmp/st.out" | head -60)"; fi
if kill -0 "$spid" 2>/dev/null; then ok "the server is still up"; else bad "the server died" "$(tail -5 "$tmp/serve.log")"; fi
status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/health")
[ "$status" = 200 ] && ok "health answers 200 after the run" || bad "health answers $status"
finish
