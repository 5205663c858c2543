"""recipes/cuda-agent: every stage's config composes in verl's own config system (hydra, verl
0.9.1's ppo_trainer / sft_trainer_engine as defaults) and names only keys verl's default
config has; the SFT dataset class reads an rft parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fixtures.rl.live import REPO, need, tokenizer

need("verl")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

RECIPE = REPO / "recipes/cuda-agent"
SEARCHPATH = "hydra.searchpath=[pkg://verl.trainer.config]"  # as run.sh passes it
STAGES = ["stage1_single_turn", "stage2_sft", "stage3_critic", "stage4_agentic"]
CONFIGS = STAGES + [s + "_small" for s in STAGES]
# keys verl 0.9.1 reads that its default config does not list:
# reward.custom_reward_function.reward_kwargs (verl/trainer/ppo/reward.py, get_custom_reward_fn)
EXTRA = {"reward.custom_reward_function.reward_kwargs"}
ENV = {"CA_DATA": "/data", "CA_OUT": "/out", "CA_MODEL": "/m0", "CA_STAGE1_MODEL": "/m1",
       "CA_STAGE2_MODEL": "/m2", "CA_STAGE3_CRITIC": "/c3", "CA_PYTHON_DIR": "/py",
       "CA_RECIPE": str(RECIPE)}


def verl_default(name: str) -> DictConfig:
    import verl
    d = os.path.join(os.path.dirname(verl.__file__), "trainer/config")
    with initialize_config_dir(config_dir=d, version_base=None):
        return compose(config_name=name)


def paths(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix]
    out = []
    for k, v in node.items():
        if k in ("defaults", "hydra"):
            continue
        p = f"{prefix}.{k}" if prefix else str(k)
        out += [p] if any(p == e or p.startswith(e + ".") for e in EXTRA) else paths(v, p)
    return out


def has(cfg: DictConfig, path: str) -> bool:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        if OmegaConf.is_missing(node, part):  # a mandatory value (???), e.g. rollout.name
            return True
        node = node[part]
    return True


@pytest.mark.parametrize("name", CONFIGS)
def test_config_keys_are_verls(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    default = verl_default("sft_trainer_engine" if "sft" in name else "ppo_trainer")
    own = OmegaConf.to_container(OmegaConf.load(RECIPE / f"{name}.yaml"), resolve=False)
    keys = paths(own)
    assert keys, name
    unknown = [k for k in keys if not any(k == e or k.startswith(e + ".") for e in EXTRA)
               and not has(default, k)]
    assert unknown == [], f"{name}: keys verl's default config lacks: {unknown}"
    # and it composes, with every interpolation resolved
    with initialize_config_dir(config_dir=str(RECIPE), version_base=None):
        cfg = compose(config_name=name, overrides=[SEARCHPATH])
    OmegaConf.resolve(cfg)
    if "sft" not in name:
        assert cfg.algorithm.adv_estimator == "gae"
        assert (cfg.algorithm.gamma, cfg.algorithm.lam) == (1.0, 0.95)
        assert cfg.actor_rollout_ref.actor.optim.lr == 3e-6 and cfg.critic.optim.lr == 6e-6
        a = cfg.actor_rollout_ref.actor
        assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.28)
    if name == "stage4_agentic":
        assert cfg.data.train_batch_size == 1024
        assert cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 150
        assert cfg.data.max_prompt_length + cfg.data.max_response_length == 128 * 1024
        assert cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path.endswith(
            "agent_loop.yaml")
    if name.startswith("stage3"):
        assert cfg.trainer.critic_warmup == cfg.trainer.total_training_steps > 0
    if name.endswith("_small"):
        assert cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.get("nnodes", 1) == 1


def test_agent_loop_config_names_our_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_SERVE_URL", "http://h:1")
    entries = OmegaConf.load(RECIPE / "agent_loop.yaml")
    (e,) = entries
    assert e.name == "cuda_agent" and e.service_url == "http://h:1" and int(e.max_turns) == 150
    mod, cls = e._target_.rsplit(".", 1)
    assert cls == "CudaAgentLoop" and mod == "cuda_agent_rl.verl_agent"


def test_rft_sft_dataset_decodes_tools(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cuda_agent_rl.verl_sft import RftSFTDataset
    tools = [{"type": "function", "function": {"name": "compile", "parameters": {
        "type": "object", "properties": {}}}}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "done"}]
    f = tmp_path / "sft.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": msgs, "tools": json.dumps(tools)}]), f)
    cfg = verl_default("sft_trainer_engine").data
    ds = RftSFTDataset(str(f), tokenizer(), cfg)
    assert ds.tools == [tools]
    item = ds[0]
    assert int(item["loss_mask"].sum()) > 0
