#!/usr/bin/env bash
# wxprobe.sh: runs a command with the W^X probe preloaded (tests/sandbox/wxprobe.c: what the GPU
# worker, the PyTorch runner and the CUDA stack do that the sandbox's W^X layers would kill or
# refuse), then prints the summary (tests/sandbox/wxprobe-summary.py). The sandbox is turned off
# for the command (CUDA_AGENT_SANDBOX=0): it starts the worker with an explicit environment, which
# would drop LD_PRELOAD. Needs $CA_BUILD/tests/sandbox/wxprobe.so (make BUILD=... wxprobe).
# Usage: tests/sandbox/wxprobe.sh [-o DIR] [--only LIST] [--raw 0|1] [--writable PREFIX]... -- CMD...
#   -o DIR        where the logs go (default /tmp/wxprobe); emptied of old logs first
#   --only LIST   WXPROBE_ONLY (default: the worker and the PyTorch runner:
#                 cuda-agent-worker,cmd:cuda_agent_bridge.candidate,cmd:cuda_agent_bridge.runner)
#   --raw 0|1     WXPROBE_RAW, the raw-syscall catcher (default 1; 0 for programs that exec)
#   --writable P  passed to the summary: another place the sandboxed program may write to
# Example (on the GPU host, from the repository root, with a build in ./build):
#   tests/sandbox/wxprobe.sh -- tests/adversarial/run.sh cublas_sgemm cudnn_conv_fma
# Exit status: the summary's (0 nothing refused, 1 something would be), 2 on usage errors.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${CA_BUILD:-$root/build}"
out=/tmp/wxprobe only="cuda-agent-worker,cmd:cuda_agent_bridge.candidate,cmd:cuda_agent_bridge.runner" raw=1 writable=()
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --raw) raw="$2"; shift 2 ;;
    --writable) writable+=("--writable=$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
so="$(cd "$(dirname "$build/tests/sandbox/wxprobe.so")" 2>/dev/null && pwd)/wxprobe.so"
[ -f "$so" ] || { echo "missing $build/tests/sandbox/wxprobe.so: run make BUILD=$build wxprobe" >&2; exit 2; }
mkdir -p "$out" && rm -f "$out"/wxprobe.*.log
echo "wxprobe: logs in $out, watching '$only', raw catcher $raw"
WXPROBE_DIR="$out" WXPROBE_ONLY="$only" WXPROBE_RAW="$raw" CUDA_AGENT_SANDBOX=0 \
  LD_PRELOAD="$so${LD_PRELOAD:+:$LD_PRELOAD}" "$@"
echo "wxprobe: the command exited with status $?"
exec python3 "$here/wxprobe-summary.py" "$out" ${writable[@]+"${writable[@]}"}
