#!/usr/bin/env bash
# The fault suite's build half (no GPU): every fault and the control compile with the real build
# driver. The shared script: tests/adversarial/check_build.sh (tests/faults/README.md).
set -uo pipefail
exec bash "$(dirname "$0")/../adversarial/check_build.sh" --suite "$(dirname "$0")" "$@"
