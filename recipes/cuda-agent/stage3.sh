#!/usr/bin/env bash
# Stage 3: critic warm-up (README.md). stage3.sh [small] [hydra overrides...]
exec "$(dirname "$0")/run.sh" 3 "$@"
