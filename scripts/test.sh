#!/usr/bin/env bash
# Sets up (idempotent), builds with warnings as errors, and runs every test that needs no GPU:
# C unit tests under ASan/UBSan, libFuzzer targets briefly, the bridge's pytest suite on CPU
# torch, and the CLI integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python="$(bash scripts/setup.sh | tail -n 1)"
export CUDA_AGENT_PYTHON="$python"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
jobs="$(nproc)"
make -j"$jobs" CI=1 all
make CI=1 PYTHON="$python" test   # suites one after another: readable logs, no timing interference
