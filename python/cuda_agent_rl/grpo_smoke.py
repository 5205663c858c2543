"""The TRL wiring, end to end (issue 17; docs/rl.md, "The GRPO smoke run"): `GRPOTrainer` with
`environment_factory` = the service's environment (trl_env.CudaAgentEnv), a tiny randomly
initialised Qwen2-shaped causal LM and a byte-level tokenizer built here (no download), for
`--steps` steps through a live `cuda-agent serve`.

What a run shows: rollouts open sessions, their tool calls (if the random model ever writes one)
and finalize go through the service, the rewards reach TRL (a null reward, the service's own
failure, is left out), the loss stays finite, and the rollouts per minute. What it does not: any
learning (the model writes random bytes: on a GPU its rewards are -1, on a CPU service null).

Usage: python -m cuda_agent_rl.grpo_smoke --url URL [--task ID] [--steps 20] [--out DIR]
       [--completion-tokens 32] [--seed 0]
Writes DIR/rollouts.jsonl (one line per rollout: task, reward, reason code, tool calls,
seconds) and DIR/metrics.jsonl (TRL's log, one line per step). Exit status: 0 every step done
with a finite loss, 1 not, 2 usage, 4 the service cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from .client import ServiceClient, ServiceError
from .trl_env import CudaAgentEnv

RELU = "kernelbench/level1/19_ReLU"


def byte_tokenizer(chat_template: str | None = None) -> Any:
    """Every byte a token (any text round-trips), ChatML's special tokens, the Hermes tool-call
    tags, and `chat_template`; by default Qwen2.5's as TRL ships it, with TRL's tool-call parser
    for that template (trl.chat_template_utils.add_response_schema)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    t = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    t.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=t)
    tok.add_tokens([AddedToken(s, special=True) for s in
                    ("<|endoftext|>", "<|im_start|>", "<|im_end|>")], special_tokens=True)
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    if chat_template is not None:
        tok.chat_template = chat_template
        return tok
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    tok.chat_template = qwen2_5_chat_template
    return add_response_schema(tok)


def tiny_model(tok: Any, seed: int) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=65536,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))


class RecordingEnv(CudaAgentEnv):
    """The service's environment, writing each finished rollout to `path`."""

    path: Path | None = None

    def get_reward(self) -> float | None:
        t0 = time.monotonic()
        task = self._session.session_id if self._session else None
        reward = super().get_reward()
        res = self.last_result or {}
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({
                    "session": task, "reward": reward,
                    "code": (res.get("reason") or {}).get("code") or self.broken or None,
                    "tool_calls": self.tool_calls,
                    "finalize_seconds": round(time.monotonic() - t0, 3)}) + "\n")
        return reward


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent_rl.grpo_smoke",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--task", default=RELU, help="a task id of the service's store")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("grpo_smoke"))
    ap.add_argument("--completion-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.steps < 1 or a.completion_tokens < 1:
        print("grpo_smoke: --steps and --completion-tokens must be positive", file=sys.stderr)
        return 2
    try:
        ServiceClient(a.url).health()
    except (OSError, ServiceError) as e:
        print(f"grpo_smoke: the service at {a.url} cannot be reached: {e}", file=sys.stderr)
        return 4
    import torch
    from datasets import Dataset
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    os.environ["CUDA_AGENT_SERVE_URL"] = a.url
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    rollouts = a.out / "rollouts.jsonl"
    rollouts.write_text("")
    RecordingEnv.path = rollouts
    tok = byte_tokenizer()
    rows = [{"prompt": [{"role": "user", "content": f"Write the CUDA kernels for {a.task}."}],
             "extra_info": {"task_id": a.task, "index": i}} for i in range(2 * a.steps)]
    args = GRPOConfig(output_dir=str(a.out / "trainer"), max_steps=a.steps,
                      per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=a.completion_tokens, learning_rate=1e-4,
                      logging_steps=1, report_to="none", save_strategy="no", bf16=False,
                      use_cpu=not torch.cuda.is_available(), seed=a.seed)
    trainer = GRPOTrainer(model=tiny_model(tok, a.seed), processing_class=tok, args=args,
                          train_dataset=Dataset.from_list(rows), environment_factory=RecordingEnv)
    t0 = time.monotonic()
    trainer.train()
    wall = time.monotonic() - t0
    steps = [h for h in trainer.state.log_history if "loss" in h]
    with (a.out / "metrics.jsonl").open("w") as f:
        for h in trainer.state.log_history:
            f.write(json.dumps(h) + "\n")
    recs = [json.loads(x) for x in rollouts.read_text().splitlines()]
    scored = [r["reward"] for r in recs if r["reward"] is not None]
    finite = all(math.isfinite(float(h["loss"])) for h in steps)
    codes = sorted({str(r["code"]) for r in recs})
    print(f"grpo_smoke: {len(steps)} steps, {len(recs)} rollouts in {wall:.1f} s "
          f"({60 * len(recs) / max(wall, 1e-9):.1f} per minute), {len(scored)} scored "
          f"(mean {sum(scored) / max(len(scored), 1):.2f}), codes {codes}, "
          f"losses {'finite' if finite else 'NOT finite'}")
    return 0 if len(steps) == a.steps and finite else 1


if __name__ == "__main__":
    sys.exit(main())
