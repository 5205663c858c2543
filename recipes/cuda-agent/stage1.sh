#!/usr/bin/env bash
# Stage 1: single-turn PPO (README.md). stage1.sh [small] [hydra overrides...]
exec "$(dirname "$0")/run.sh" 1 "$@"
