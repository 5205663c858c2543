#!/usr/bin/env bash
# Speed and fidelity benchmarks of the evaluation core (make bench; needs a CUDA GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-${CUDA_AGENT_PYTHON:-python3}}"
export CUDA_AGENT_PYTHON="$py"
exec "$py" bench/bench.py --build "${CA_BUILD:-$PWD/build}" "$@"
