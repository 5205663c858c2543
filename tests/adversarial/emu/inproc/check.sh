#!/usr/bin/env bash
# CPU check of the in-process native cheats' mechanics (no GPU): each cheat's real library, built
# by `cuda-agent compile` (the symbol and source checks pass), is loaded by mock_worker.c, a PIE
# with full RELRO laid out like cuda-agent-worker, on stub CUDA libraries (stub_cuda.c). Checks:
#   text_patch_timer      libc's clock_gettime and libcudart's cudaEventElapsedTime patched in their
#                         code: both worker timers read ~1/28 of the real time, outputs right;
#                         under MDWE (--mdwe) the patch cannot be written back executable
#   worker_frame_rewrite  the worker's stream/event block and its spilled clock stamp found on the
#                         stack and rewritten: both timers read ~1/8, outputs right
#   plan_inputs_match     the plan found through /proc/self/cmdline, a listed input computed, an
#                         unlisted one left unwritten
#   walk_pthread_deferred pthread_create found in libc: nothing written at return, written later
#   sync_patch_side_stream cudaDeviceSynchronize redirected away from the runtime's code
# Usage: tests/adversarial/emu/inproc/check.sh   (CA_BUILD as for check_build.sh; needs nvcc, gcc)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../../.." || exit 1
tmp="$(mktemp -d /tmp/ca-inproc.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib.sh
. tests/lib.sh
[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }
cuda="${CUDA_HOME:-/usr/local/cuda}"

# The stubs, under the sonames the candidates and the mock link against.
mkdir -p "$tmp/lib"
gcc -O2 -fPIC -shared -DSTUB_CUDART -Wl,-soname,libcudart.so.13 -o "$tmp/lib/libcudart.so.13" "$here/stub_cuda.c" &&
  gcc -O2 -fPIC -shared -DSTUB_CUBLAS -Wl,-soname,libcublas.so.13 -o "$tmp/lib/libcublas.so.13" "$here/stub_cuda.c" &&
  gcc -O2 -fPIC -shared -DSTUB_DRIVER -Wl,-soname,libcuda.so.1 -o "$tmp/lib/libcuda.so.1" "$here/stub_cuda.c" &&
  gcc -O2 -g -std=c17 -fPIE -pie -Wl,-z,relro,-z,now -D_GNU_SOURCE -Isrc -I"$build/include" -I"$cuda/include" \
    -o "$tmp/mock_worker" "$here/mock_worker.c" -L"$tmp/lib" -l:libcudart.so.13 -ldl -lm ||
  { echo "FAIL building the stubs and the mock worker"; exit 1; }
readelf -d "$tmp/mock_worker" | grep -q "BIND_NOW" && ok "mock worker linked with full RELRO (BIND_NOW)" ||
  bad "mock worker linked with full RELRO"

library() { # NAME: the cheat's library as the real build driver makes it
  "$cli" compile --json -q --task tests/adversarial/tasks/gemm "tests/adversarial/cheats/$1" | "$py" -c '
import json, sys
r = json.loads(sys.stdin.readline())
print(r["build"]["library"] if r["reason"]["code"] == "ok" else "")'
}

mock() { # NAME ARGS...: the mock worker on NAME's library; its lines are kept in $tmp/out
  local name="$1" lib; shift
  lib="$(library "$name")"
  if [ -z "$lib" ]; then bad "$name builds (cuda-agent compile)"; return; fi
  LD_LIBRARY_PATH="$tmp/lib" timeout 120 "$tmp/mock_worker" "$lib" "$@" >"$tmp/out" 2>&1
  echo "$?" >"$tmp/rc"
  sed 's/^/     /' "$tmp/out"
}

expect_pass() { # LABEL: the last mock run passed all its checks
  if [ "$(cat "$tmp/rc")" = 0 ]; then ok "$1"; else bad "$1" "exit $(cat "$tmp/rc")"; fi
}

echo "== text_patch_timer"
mock text_patch_timer timers 0.0357
expect_pass "text_patch_timer: code patches of clock_gettime and cudaEventElapsedTime fool both timers"
echo "== text_patch_timer under MDWE"
mock text_patch_timer timers 0.0357 --mdwe
rc="$(cat "$tmp/rc")"
if grep -q "refused by this kernel" "$tmp/out"; then
  echo "     (this kernel or container refuses PR_SET_MDWE: not checked)"
elif [ "$rc" != 0 ]; then
  ok "text_patch_timer under MDWE: the attack fails (exit $rc: 139 is SIGSEGV, the page left non-executable)"
else
  bad "text_patch_timer under MDWE: the attack fails" "the timers were still fooled"
fi
echo "== worker_frame_rewrite"
mock worker_frame_rewrite timers 0.125
expect_pass "worker_frame_rewrite: the worker's start event and clock stamp rewritten from the stack"
echo "== plan_inputs_match"
mock plan_inputs_match plan "$tmp/plan.json"
expect_pass "plan_inputs_match: the plan read through /proc/self/cmdline decides which calls compute"
echo "== walk_pthread_deferred"
mock walk_pthread_deferred thread
expect_pass "walk_pthread_deferred: a thread from libc's pthread_create writes the output after the return"
echo "== sync_patch_side_stream"
mock sync_patch_side_stream sync
expect_pass "sync_patch_side_stream: cudaDeviceSynchronize patched in the runtime's code"
finish
