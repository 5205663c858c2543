#!/usr/bin/env bash
# The main job: sets up (idempotent), builds, and evaluates every example solution against its
# task. On a machine with a CUDA GPU this verifies and times each kernel for real and prints its
# reward; without one it says so, compiles every solution, checks the libraries and validates
# the tasks on CPU torch.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CUDA_AGENT_PYTHON:-}" ]; then
  CUDA_AGENT_PYTHON="$(bash scripts/setup.sh | tail -n 1)"
fi
export CUDA_AGENT_PYTHON
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
make -j"$(nproc)" all >/dev/null

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
  mode=eval
else
  echo "No CUDA GPU on this machine: compiling every example solution and validating the tasks"
  echo "on CPU torch; verification and timing need a GPU (see README)."
  mode=cpu
fi

status=0
for task in examples/tasks/*/; do
  name="$(basename "$task")"
  sol="examples/solutions/$name"
  [ -d "$sol/kernels" ] || continue
  echo
  echo "=== $name"
  if [ "$mode" = eval ]; then
    ./build/cuda-agent eval "$task" "$sol" "$@" || status=1
  else
    ./build/cuda-agent verify --task "$task" --device cpu "$sol" "$@" || {
      rc=$?; [ "$rc" -eq 4 ] || status=1; }
  fi
done
exit $status
