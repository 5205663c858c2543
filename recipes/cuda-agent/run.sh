#!/usr/bin/env bash
# One stage of the recipe (README.md): run.sh STAGE [small] [hydra overrides...]
#   STAGE: 1 (single-turn PPO), 2 (SFT), 3 (critic warm-up), 4 (agentic PPO)
# Needs: verl 0.9.1 with vllm on the training host, cuda_agent_rl importable (this checkout's
# python/ is put on PYTHONPATH), $CA_DATA (the parquet files), $CA_OUT (checkpoints), the model
# variables of the stage and, for stages 1, 3 and 4, $CUDA_AGENT_SERVE_URL (a GPU service).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stage="${1:?usage: run.sh 1|2|3|4 [small] [overrides...]}"; shift
suffix=""
if [ "${1:-}" = small ]; then suffix=_small; shift; fi
export CA_RECIPE="$here" CA_PYTHON_DIR="${CA_PYTHON_DIR:-$(cd "$here/../../python" && pwd)}"
export PYTHONPATH="$CA_PYTHON_DIR${PYTHONPATH:+:$PYTHONPATH}"
: "${CA_DATA:?set CA_DATA}" "${CA_OUT:?set CA_OUT}"
case "$stage" in
  1) name=stage1_single_turn; module=verl.trainer.main_ppo; : "${CA_MODEL:?}" ;;
  2) name=stage2_sft; module=verl.trainer.sft_trainer; : "${CA_STAGE1_MODEL:?}" ;;
  3) name=stage3_critic; module=verl.trainer.main_ppo; : "${CA_STAGE2_MODEL:?}" ;;
  4) name=stage4_agentic; module=verl.trainer.main_ppo
     : "${CA_STAGE2_MODEL:?}" "${CA_STAGE3_CRITIC:?set CA_STAGE3_CRITIC (stage 3 critic)}" ;;
  *) echo "run.sh: stage 1, 2, 3 or 4" >&2; exit 2 ;;
esac
if [ "$stage" != 2 ]; then
  curl -fsS "${CUDA_AGENT_SERVE_URL:?set CUDA_AGENT_SERVE_URL}/v1/health" >/dev/null \
    || { echo "run.sh: the service at $CUDA_AGENT_SERVE_URL does not answer" >&2; exit 4; }
fi
# verl's own configs (ppo_trainer, sft_trainer_engine) are the defaults of ours
exec python3 -m "$module" --config-path "$here" --config-name "$name$suffix" \
  "hydra.searchpath=[pkg://verl.trainer.config]" "$@"
