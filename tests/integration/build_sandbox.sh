#!/usr/bin/env bash
# `cuda-agent sandbox-exec` (the build sandbox for builds driven from elsewhere, e.g. torch's
# cpp_extension) and the native build's sandbox through `cuda-agent compile`, without a GPU:
# writes land only in the --rw directory; no network (socket() refused); a daemon does not
# outlive the command; memory is capped; the time limit gives 124; exit codes and signals pass through; both
# streams are forwarded; CUDA_AGENT_SANDBOX=0 runs unsandboxed with a warning; a macro-built
# #include of /etc/hostname cannot read it and the hostname is not shown.
# When this machine cannot make the sandbox (no user or mount namespaces), its checks are
# skipped, saying so. Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-bsb-cache.XXXXXX)"
tmp="$(mktemp -d /tmp/ca-bsb.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh

if ! "$cli" sandbox-exec -- /bin/true 2>"$tmp/probe"; then
  echo "skipped: no sandbox on this machine: $(cat "$tmp/probe")"
  echo "$passed passed, $failed failed"
  exit 0
fi

# writes: only the --rw directory
rw="$tmp/rw"
mkdir -p "$rw"
marker="ca-bsb-$$-$RANDOM"
run "writes outside --rw fail, inside succeed" 0 "$cli" sandbox-exec --rw "$rw" -- /bin/sh -c \
  "echo x > /tmp/../etc/$marker; touch /root/$marker; echo x > /usr/$marker; echo y > $rw/ok"
[ "$(cat "$rw/ok" 2>/dev/null)" = y ] && ok "the --rw directory got its file" || bad "no $rw/ok"
[ ! -e "/etc/$marker" ] && [ ! -e "/root/$marker" ] && [ ! -e "/usr/$marker" ] \
  && ok "nothing written outside --rw" || bad "a file was written outside --rw"
[ "$(ls -A "$rw")" = ok ] && ok "only ok in the --rw directory" || bad "--rw holds: $(ls -A "$rw")"

# --ro: readable, not writable
ro="$tmp/ro"
mkdir -p "$ro" && chmod 755 "$ro" && echo hello > "$ro/in.txt" && chmod 644 "$ro/in.txt"
run "--ro is readable" 0 "$cli" sandbox-exec --ro "$ro" -- /bin/cat "$ro/in.txt"
grep -qx hello "$tmp/out" && ok "--ro content forwarded on stdout" || bad "stdout: $(cat "$tmp/out")"
run "--ro is not writable" 2 "$cli" sandbox-exec --ro "$ro" -- /bin/sh -c "echo z > $ro/in.txt"
grep -qx hello "$ro/in.txt" && ok "--ro file unchanged" || bad "--ro file changed"

# /etc: only what compilers need
run "/etc/hostname is not there" 1 "$cli" sandbox-exec -- /bin/cat /etc/hostname
[ -z "$(cat "$tmp/out")" ] && ok "nothing of /etc/hostname shown" || bad "stdout: $(cat "$tmp/out")"

# network: socket() of any family but AF_UNIX is refused (seccomp kills it: SIGSYS)
if [ -x /usr/bin/python3 ]; then
  "$cli" sandbox-exec -- /usr/bin/python3 -c \
    'import socket; socket.create_connection(("127.0.0.1", 22)); print("connected")' \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -ne 0 ] && ! grep -q connected "$tmp/out" && ok "a TCP connection fails (exit $rc)" \
    || bad "a TCP connection: exit $rc, $(cat "$tmp/out")"
fi
"$cli" sandbox-exec -- /bin/bash -c 'echo x > /dev/tcp/127.0.0.1/22 && echo connected' \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && ! grep -q connected "$tmp/out" && ok "bash /dev/tcp fails (exit $rc)" \
  || bad "bash /dev/tcp: exit $rc"

# memory: the address space is capped (RLIMIT_AS, 16 GiB): a 20 GiB allocation fails at once
if [ -x /usr/bin/python3 ]; then
  run "a 20 GiB allocation fails (MemoryError)" 1 "$cli" sandbox-exec -- /usr/bin/python3 -c \
    'b = bytearray(20 << 30); print("allocated")'
  grep -q MemoryError "$tmp/err" && ! grep -q allocated "$tmp/out" && ok "MemoryError, nothing allocated" \
    || bad "stdout: $(cat "$tmp/out"), stderr: $(tail -2 "$tmp/err")"
fi

# a daemon does not outlive the command
run "a daemon is started" 0 "$cli" sandbox-exec -- /bin/sh -c 'sleep 1000.25 & disown 2>/dev/null; echo started'
sleep 0.3
pgrep -f "sleep 1000.25" >/dev/null && bad "the daemon outlived the command" || ok "no daemon left"

# time limit, exit codes, signals, stderr
start=$(date +%s)
run "--timeout 1 -- sleep 5 gives 124" 124 "$cli" sandbox-exec --timeout 1 -- sleep 5.125
[ $(( $(date +%s) - start )) -lt 4 ] && ok "killed at the limit" || bad "took $(( $(date +%s) - start )) s"
pgrep -f "sleep 5.125" >/dev/null && bad "sleep outlived the timeout" || ok "nothing left after the timeout"
run "the exit code passes through" 7 "$cli" sandbox-exec -- /bin/sh -c 'echo to-err >&2; exit 7'
grep -qx to-err "$tmp/err" && ok "stderr forwarded" || bad "stderr: $(cat "$tmp/err")"
run "a signal gives 128+N" 137 "$cli" sandbox-exec -- /bin/sh -c '/bin/sh -c "kill -9 \$\$"; exit $?' 
run "the environment: PATH, LANG, HOME and --env" 0 "$cli" sandbox-exec --env FOO=bar -- /bin/sh -c \
  'test "$FOO" = bar && test "$HOME" = /tmp && test "$LANG" = C.UTF-8 && test -n "$PATH"'
run "a missing program gives 125" 125 "$cli" sandbox-exec -- no-such-program-ca
grep -q '^sandbox-exec: ' "$tmp/err" && ok "the setup error says sandbox-exec:" || bad "stderr: $(cat "$tmp/err")"
run "usage error" 2 "$cli" sandbox-exec --ro

# CUDA_AGENT_SANDBOX=0: unsandboxed, with a warning
CUDA_AGENT_SANDBOX=0 run "CUDA_AGENT_SANDBOX=0 runs it" 0 "$cli" sandbox-exec -- /bin/cat /etc/hostname
grep -q "warning: CUDA_AGENT_SANDBOX=0" "$tmp/err" && ok "the warning" || bad "stderr: $(cat "$tmp/err")"

# the native build: a macro-built #include of /etc/hostname is not in the build's view
if [ -x "${NVCC:-/usr/local/cuda/bin/nvcc}" ] || command -v nvcc >/dev/null; then
  ws="$tmp/ws"
  mkdir -p "$ws/kernels"
  cp tests/data/candidates/tiny_task/model.py "$ws/"
  printf '#define STR2(x) #x\n#define STR(x) STR2(x)\n#define P /etc/hostname\n#include STR(P)\n' \
    > "$ws/kernels/a.cu"
  run "compile of an #include of /etc/hostname fails" 1 "$cli" compile --json --no-cache "$ws"
  field "build.error, the file missing in the sandbox" \
    'r["build"]["status"] == "build.error" and "/etc/hostname: No such file" in "\n".join(r["build"]["errors"])'
  host="$(head -1 /etc/hostname 2>/dev/null)"
  if [ ${#host} -ge 4 ] && grep -qF "$host" "$tmp/out"; then bad "the hostname is shown"; else ok "the hostname is not shown"; fi
  ls "$CUDA_AGENT_CACHE/build" | grep -q staging- && bad "a staging directory was left" || ok "no staging directory left"
else
  echo "skipped: no nvcc: the native build's checks"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
