#!/usr/bin/env bash
# Stage 4: agentic PPO (README.md). stage4.sh [small] [hydra overrides...]
exec "$(dirname "$0")/run.sh" 4 "$@"
