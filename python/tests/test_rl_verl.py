"""The verl agent loop `cuda_agent` (cuda_agent_rl/verl_agent.py) against a live `cuda-agent
serve` on CPU, instantiated the way verl's AgentLoopWorker does (its registry, hydra, verl's
default config and RLHFDataset over an exported parquet), with a scripted server manager that
emits Hermes tool calls in place of the LLM."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.rl.live import (
    BROKEN_KERNEL,
    CLI,
    RELU,
    RELU_KERNEL,
    env,
    make_store,
    need,
    service,
    tokenizer,
)

need("verl")
import hydra  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import cuda_agent_rl.verl_agent  # noqa: E402,F401 (registers cuda_agent)
from cuda_agent_rl.client import ServiceClient  # noqa: E402


def call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


class ScriptedServer:
    """Test double of verl's LLMServerClient: answers each generate() with the next scripted
    turn's tokens (ending with <|im_end|>) and records the prompt ids it was given."""

    def __init__(self, tok: Any, turns: list[str]) -> None:
        self.tok, self.turns = tok, list(turns)
        self.prompts: list[list[int]] = []
        self.outputs: list[list[int]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int],
                       sampling_params: dict[str, Any], **kw: Any) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        ids = self.tok.encode(self.turns.pop(0), add_special_tokens=False)
        ids.append(self.tok.convert_tokens_to_ids("<|im_end|>"))
        self.outputs.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("rl-verl")
    store = make_store(tmp)
    with service(tmp, store) as url:
        out = tmp / "prompts.parquet"
        p = subprocess.run([str(CLI), "tasks", "export", "--format", "verl-rl", "--store",
                            str(store), "--out", str(out), "--url", url, "-q"],
                           env=env(), capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        yield url, out


def verl_config(response_length: int = 8192) -> DictConfig:
    import verl
    d = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
    with initialize_config_dir(config_dir=d, version_base=None):
        cfg = compose(config_name="ppo_trainer")
    OmegaConf.set_struct(cfg, False)
    cfg.data.max_prompt_length = 65536
    cfg.data.max_response_length = response_length
    cfg.actor_rollout_ref.rollout.prompt_length = 65536  # byte tokens
    cfg.actor_rollout_ref.rollout.response_length = response_length
    cfg.actor_rollout_ref.rollout.multi_turn.max_tool_response_length = 4096
    return cfg


def row(parquet: Path, tok: Any, cfg: DictConfig) -> dict[str, Any]:
    """Sample 1 (19_ReLU in tasks list order) as AgentLoopWorker hands it to run()."""
    ds = RLHFDataset(data_files=[str(parquet)], tokenizer=tok, config=cfg.data)
    batch = collate_fn([ds[i] for i in range(len(ds))])
    ids = [str(x["task_id"]) for x in batch["extra_info"]]
    i = ids.index(RELU)
    return {k: v[i] for k, v in batch.items() if not hasattr(v, "shape") or v.ndim == 1
            if k != "dummy_tensor"}


def make_loop(url: str, server: ScriptedServer, tok: Any, cfg: DictConfig) -> Any:
    assert _agent_loop_registry["cuda_agent"]["_target_"].endswith("verl_agent.CudaAgentLoop")
    return hydra.utils.instantiate(
        {**_agent_loop_registry["cuda_agent"], "service_url": url},
        trainer_config=DictConfigWrap(config=cfg), server_manager=server, tokenizer=tok,
        processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data), tools=ToolListWrap([]))





def drive(url: str, server: ScriptedServer, tok: Any, cfg: DictConfig, r: dict[str, Any],
          params: dict[str, Any] | None = None) -> Any:
    """One trajectory, the loop made inside the running event loop (as verl's worker does:
    AgentLoopBase keeps the loop it was made in)."""
    async def go() -> Any:
        return await make_loop(url, server, tok, cfg).run(params or {}, **r)
    return asyncio.run(go())


def test_export_rows_select_the_agent(live: tuple[str, Path]) -> None:
    cfg, tok = verl_config(), tokenizer()
    r = row(live[1], tok, cfg)
    assert r["agent_name"] == "cuda_agent"
    assert r["extra_info"]["task_id"] == RELU
    assert [m["role"] for m in r["raw_prompt"]] == ["system", "user"]
    assert {t["function"]["name"] for t in json.loads(r["tools"])} >= {"bash", "compile"}


def test_trajectory_masks_tokens_and_reward(live: tuple[str, Path]) -> None:
    url, parquet = live
    cfg, tok = verl_config(), tokenizer()
    script = [
        "I will write the kernel. " + call("write_file", {"path": "kernels/kernel.cu",
                                                          "content": RELU_KERNEL}),
        "<tool_call>{not json</tool_call>" + call("compile", {}),
        "The kernel compiles; done.",
    ]
    server = ScriptedServer(tok, script)
    r = row(parquet, tok, cfg)
    out = drive(url, server, tok, cfg, r,
                {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True})

    # token-in/token-out: each generate() got the previous prompt, the tokens generated, then
    # only the new tool answers; the first prompt is the row's, rendered once with its tools
    first = tok.apply_chat_template(list(r["raw_prompt"]), tools=json.loads(r["tools"]),
                                    add_generation_prompt=True, tokenize=True)["input_ids"]
    assert server.prompts[0] == first == out.prompt_ids
    for k in (1, 2):
        prev, gen = server.prompts[k - 1], server.outputs[k - 1]
        assert server.prompts[k][: len(prev) + len(gen)] == prev + gen
        added = tok.decode(server.prompts[k][len(prev) + len(gen):])
        assert added.startswith("<|im_start|>user\n<tool_response>")
        assert added.endswith("<|im_start|>assistant\n")
    added = tok.decode(server.prompts[1][len(server.prompts[0]) + len(server.outputs[0]):])
    assert added.count("<tool_response>") == 1
    added = tok.decode(server.prompts[2][len(server.prompts[1]) + len(server.outputs[1]):])
    assert added.count("<tool_response>") == 2 and "error: the tool call is not JSON" in added
    assert "ok: compiled" in added  # compile ran in the session's workspace on our kernel

    # response = everything after the prompt; mask 1 exactly on generated tokens
    assert out.prompt_ids + out.response_ids == server.prompts[2] + server.outputs[2]
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
    expect: list[int] = []
    for k, gen in enumerate(server.outputs):
        expect += [1] * len(gen)
        if k < 2:
            expect += [0] * (len(server.prompts[k + 1]) - len(server.prompts[k]) - len(gen))
    assert out.response_mask == expect
    lp = [x for x, m in zip(out.response_logprobs, out.response_mask, strict=True) if m]
    assert lp == [-0.5] * sum(expect)

    # finalize on a CPU machine: env.no_gpu, reward null -> 0.0, marked invalid, never -1
    f = out.extra_fields
    assert f["reason"] == "env.no_gpu" and f["reward_valid"] is False
    assert out.reward_score == 0.0
    assert (f["assistant_turns"], f["user_turns"], f["tool_calls"]) == (3, 2, 2)
    assert f["schema_violations"] == 1 and f["finish"] == "answered"
    assert out.num_turns == 6
    assert out.metrics.generate_sequences >= 0 and out.metrics.tool_calls > 0
    # the session was closed
    s = ServiceClient(url)
    with pytest.raises(Exception) as e:
        s.request("POST", f"/v1/sessions/{f['session_id']}/tools/glob", {"pattern": "*"})
    assert getattr(e.value, "status", None) == 404


def test_failed_kernel_is_minus_one_and_unknown_tool_answered(live: tuple[str, Path]) -> None:
    url, parquet = live
    cfg, tok = verl_config(), tokenizer()
    server = ScriptedServer(tok, [
        call("nope", {}) + call("write_file", {"path": "kernels/kernel.cu",
                                               "content": BROKEN_KERNEL}),
        "done"])
    out = drive(url, server, tok, cfg, row(parquet, tok, cfg))
    added = tok.decode(server.prompts[1][len(server.prompts[0]) + len(server.outputs[0]):])
    assert "error: unknown tool 'nope'" in added
    assert out.extra_fields["reason"] == "build.error"
    assert out.reward_score == -1.0 and out.extra_fields["reward_valid"] is True


def test_response_length_ends_the_trajectory(live: tuple[str, Path]) -> None:
    url, parquet = live
    cfg, tok = verl_config(response_length=300), tokenizer()
    server = ScriptedServer(tok, [call("read_file", {"path": "SKILL.md"})] * 3)
    out = drive(url, server, tok, cfg, row(parquet, tok, cfg))
    # SKILL.md's answer does not fit in 300 tokens: the trajectory ends before it
    assert out.extra_fields["finish"] == "length"
    assert len(server.prompts) == 1 and out.response_mask == [1] * len(server.outputs[0])


def test_service_down_is_not_scored(live: tuple[str, Path]) -> None:
    cfg, tok = verl_config(), tokenizer()
    server = ScriptedServer(tok, ["done"])
    out = drive("http://127.0.0.1:9", server, tok, cfg, row(live[1], tok, cfg))
    assert out.extra_fields["finish"] == "service_error"
    assert out.extra_fields["reward_valid"] is False and out.reward_score == 0.0
    assert out.response_ids == [] and server.prompts == []
