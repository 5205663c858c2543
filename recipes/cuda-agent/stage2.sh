#!/usr/bin/env bash
# Stage 2: SFT on the RFT parquet (README.md). stage2.sh [small] [hydra overrides...]
exec "$(dirname "$0")/run.sh" 2 "$@"
