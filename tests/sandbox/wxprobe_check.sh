#!/usr/bin/env bash
# wxprobe_check.sh: the W^X probe (tests/sandbox/wxprobe.c) on this machine, no GPU needed: the
# self-test program's W+X mapping, memfd, mprotect(PROT_EXEC), write-open outside the writable
# places and raw memfd_create syscall all show in the summary, the program's output is
# unchanged, and a plain `true` (a process, through env) is reported clean. Needs CA_BUILD
# (default build) with tests/sandbox/wxprobe.so.
set -uo pipefail
cd "$(dirname "$0")/../.."
build="${CA_BUILD:-build}"
tmp="$(mktemp -d /tmp/ca-wxprobe.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if grep -q -- "$2" "$tmp/summary"; then echo "ok: $1"; else echo "FAIL: $1 (no '$2')"; fail=1; fi; }
cc -O1 -o "$tmp/selftest" tests/sandbox/wxprobe_selftest.c || exit 1
tests/sandbox/wxprobe.sh -o "$tmp/logs" --only selftest -- "$tmp/selftest" >"$tmp/summary" 2>&1
rc=$?
cat "$tmp/summary"
[ "$rc" = 1 ] && echo "ok: exit status 1 (something refused)" || { echo "FAIL: exit status $rc"; fail=1; }
check "the program ran as before" "^selftest done"
check "W+X mapping" "mmap RWX PRIVATE|ANON .*from selftest"
check "memfd_create" "^ *memfd_create .*from selftest"
check "mprotect(PROT_EXEC)" "mprotect R-X .*from selftest"
check "write-open outside the writable places" "open for writing /nonexistent-wxprobe/x"
if [ "$(uname -m)" = x86_64 ]; then
  check "raw syscall" "memfd_create (raw syscall, outside libc)"
  check "raw catcher on" "raw catcher: on"
fi
tests/sandbox/wxprobe.sh -o "$tmp/logs2" --only true -- env true >"$tmp/summary" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "nothing the W^X layers refuse" "$tmp/summary" && echo "ok: true is clean" ||
  { echo "FAIL: true: status $rc"; cat "$tmp/summary"; fail=1; }
[ "$fail" = 0 ] && echo "wxprobe: all checks passed" || echo "wxprobe: FAILED"
exit "$fail"
