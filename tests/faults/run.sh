#!/usr/bin/env bash
# The fault suite on a GPU: every fault must end its own evaluation with its reason, in time,
# and the control evaluated after it must be correct. The shared runner:
# tests/adversarial/run.sh (options and environment there; tests/faults/README.md).
# Usage: tests/faults/run.sh [NAME ...]
set -uo pipefail
exec bash "$(dirname "$0")/../adversarial/run.sh" --suite "$(dirname "$0")" "$@"
