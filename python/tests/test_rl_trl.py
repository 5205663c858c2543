"""The TRL environment (cuda_agent_rl/trl_env.py) against a live `cuda-agent serve` on CPU:
TRL's discovery of its tools (as GRPOTrainer does it), their schemas (transformers'
get_json_schema, what TRL renders) against the service's own, and reset/tools/get_reward."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.rl.live import BROKEN_KERNEL, RELU, RELU_KERNEL, make_store, need, service

need("trl")
from transformers.utils import get_json_schema  # noqa: E402

from cuda_agent_rl.client import ServiceClient, ServiceError  # noqa: E402
from cuda_agent_rl.trl_env import CudaAgentEnv  # noqa: E402

ROW: dict[str, Any] = {"prompt": [{"role": "user", "content": "t"}],
                       "extra_info": {"task_id": RELU, "index": 1}}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("rl-trl")
    with service(tmp, make_store(tmp)) as u:
        yield u


def trl_tools(env: CudaAgentEnv) -> dict[str, Any]:
    """The methods GRPOTrainer (trl 1.16.0) exposes as tools: public functions of the class
    other than reset and get_reward."""
    return {n: getattr(env, n) for n, _ in inspect.getmembers(type(env), inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")}


def test_tools_match_the_service_schemas(url: str) -> None:
    s = ServiceClient(url).open_session({"id": RELU})
    s.close()
    service_tools = {t["function"]["name"]: t["function"]["parameters"] for t in s.tools}
    env = CudaAgentEnv(url)
    tools = trl_tools(env)
    assert set(tools) == set(service_tools)
    for name, method in tools.items():
        ours = get_json_schema(method)["function"]["parameters"]
        theirs = service_tools[name]
        assert set(ours.get("properties", {})) == set(theirs.get("properties", {})), name
        assert set(ours.get("required", [])) == set(theirs.get("required", [])), name


def test_reset_tools_reward_round_trip(url: str) -> None:
    env = CudaAgentEnv(url)
    assert env.reset(**ROW) is None  # the row has its prompt
    tools = trl_tools(env)
    tools["write_file"](path="kernels/kernel.cu", content=RELU_KERNEL)
    assert "__global__ void relu" in tools["read_file"](path="kernels/kernel.cu")
    assert "kernels/kernel.cu" in tools["glob"](pattern="kernels/*.cu")
    assert "ok: compiled" in tools["compile"]()
    assert "kernel.cu" in tools["bash"](command="ls kernels")
    with pytest.raises(RuntimeError, match="unexpected field"):  # TRL answers {"error": ...}
        env._tool("read_file", pathx="x")
    # CPU: finalize is env.no_gpu, reward null: None (TRL drops it), never -1
    assert env.get_reward() is None
    assert env.last_result is not None and env.last_result["reason"]["code"] == "env.no_gpu"
    assert env.tool_calls == 6 and env.broken == ""
    with pytest.raises(RuntimeError, match="no session"):
        tools["glob"](pattern="*")


def test_failed_kernel_scores_minus_one_and_reset_reuses(url: str) -> None:
    env = CudaAgentEnv(url)
    env.reset(**ROW)
    first = env._session
    assert first is not None
    env.write_file(path="kernels/kernel.cu", content=BROKEN_KERNEL)
    assert env.get_reward() == -1.0
    # pooled and reset again: a fresh session; the old one is closed
    assert env.reset(extra_info={"task_id": RELU}) is not None  # no prompt in the row: ours
    assert env._session is not None and env._session.session_id != first.session_id
    with pytest.raises(ServiceError) as e:
        first.client.request("POST", f"/v1/sessions/{first.session_id}/tools/glob",
                             {"pattern": "*"})
    assert e.value.status == 404
    env.get_reward()


def test_unreachable_service_is_not_scored(tmp_path: Path) -> None:
    env = CudaAgentEnv("http://127.0.0.1:9")
    assert env.reset(**ROW) is None
    assert env.broken.startswith("service.")
    with pytest.raises(RuntimeError):
        env.bash(command="true")
    assert env.get_reward() is None
