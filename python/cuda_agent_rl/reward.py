"""Single-turn warm-up (recipe stage 1): a one-shot answer rewarded by `POST /v1/evaluate`.

The candidate is the answer's last CUDA or Python fenced block (cuda_agent_rl.candidate). What
the functions give:

| the answer, the service's answer                    | verl `compute_score` | TRL `trl_reward` |
| --------------------------------------------------- | -------------------- | ---------------- |
| no CUDA/Python block                                 | -1.0                 | -1.0             |
| judged: reward -1, 1, 2 or 3 (docs/result.md)       | that reward          | that reward      |
| not judged: reward null (`env.*`, `task.*`,         | 0.0, `valid` 0       | None             |
| `internal`, `build.internal`), or no answer at all  |                      |                  |

-1 is the reward of a candidate that fails; a failure of the service (or of the task) is not the
model's, so it never becomes -1. TRL drops a None reward from that completion's sum (its
documented behaviour for reward functions that do not apply). verl's reward managers need a
number, so `compute_score` gives 0.0 (no CUDA-Agent reward is 0) with `valid` 0 and the reason
in the extra info, which verl logs per sample; filter on `valid` to drop those samples.

`compute_score` returns the same keys every time (verl stacks them per batch): score, valid,
reason, speedup_eager, speedup_compile (NaN when not timed), compiled, correct (0/1).

The task: `extra_info["task_id"]` (what `cuda-agent tasks export` writes), else
`ground_truth` as a task id. The service: the `service_url` keyword (verl:
`reward.custom_reward_function.reward_kwargs.service_url`), else `$CUDA_AGENT_SERVE_URL`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cuda_agent_rl.candidate import candidate_of
from cuda_agent_rl.client import ServiceClient, ServiceError

NO_BLOCK = "no_code_block"
_clients: dict[tuple[str | None, str | None], ServiceClient] = {}


@dataclass(frozen=True)
class Score:
    reward: float | None  # None: not judged (the service's or the task's failure)
    reason: str
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    compiled: bool = False
    correct: bool = False


def client_for(service_url: str | None = None, token: str | None = None) -> ServiceClient:
    key = (service_url, token)
    if key not in _clients:
        _clients[key] = ServiceClient(service_url, token)
    return _clients[key]


def score_answer(answer: str, task_id: str, client: ServiceClient, *,
                 deadline_s: float = 600.0) -> Score:
    cand = candidate_of(answer)
    if cand is None:
        return Score(-1.0, NO_BLOCK)
    try:
        res = client.evaluate({"id": task_id}, cand, deadline_s=deadline_s)
    except ServiceError as exc:
        return Score(None, f"service.{exc.code or exc.status}")
    return score_of_result(res)


def score_of_result(res: Mapping[str, Any]) -> Score:
    """The Score of a result object (docs/result.md)."""
    reason = res.get("reason") or {}
    code = str(reason.get("code", "")) if isinstance(reason, Mapping) else ""
    reward = res.get("reward")
    timing = res.get("timing") or {}
    return Score(float(reward) if isinstance(reward, (int, float)) else None, code,
                 _num(timing.get("speedup_eager")), _num(timing.get("speedup_compile")),
                 bool(res.get("compiled")), bool(res.get("correct")))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _task_id(ground_truth: Any, extra_info: Mapping[str, Any] | None) -> str:
    if extra_info and extra_info.get("task_id"):
        return str(extra_info["task_id"])
    if isinstance(ground_truth, str) and ground_truth:
        return ground_truth
    raise ValueError("no task id: give extra_info['task_id'] (cuda-agent tasks export) or "
                     "ground_truth")


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """verl's custom reward function (reward.custom_reward_function.path/name)."""
    del data_source
    client = client_for(kwargs.get("service_url"), kwargs.get("token"))
    s = score_answer(solution_str, _task_id(ground_truth, extra_info), client)
    return {
        "score": s.reward if s.reward is not None else 0.0,
        "valid": 1 if s.reward is not None else 0,
        "reason": s.reason,
        "speedup_eager": s.speedup_eager if s.speedup_eager is not None else math.nan,
        "speedup_compile": s.speedup_compile if s.speedup_compile is not None else math.nan,
        "compiled": int(s.compiled),
        "correct": int(s.correct),
    }


def _text(completion: Any) -> str:
    """A TRL completion: text (standard format) or a list of messages (conversational)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        parts = [m.get("content") for m in completion
                 if isinstance(m, Mapping) and m.get("role") == "assistant"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def trl_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A TRL reward function (GRPOTrainer(reward_funcs=[trl_reward])). The task of completion i
    is the dataset's `extra_info` column (its task_id) or a `task_id` column; the service is
    `$CUDA_AGENT_SERVE_URL`."""
    del prompts
    n = len(completions)
    extra = kwargs.get("extra_info") or [None] * n
    ids = kwargs.get("task_id") or [None] * n
    client = client_for(kwargs.get("service_url"))
    tasks = [_task_id(tid, info if isinstance(info, Mapping) else None)
             for info, tid in zip(extra, ids, strict=True)]
    if not completions:
        return []
    with ThreadPoolExecutor(max_workers=min(64, n)) as pool:  # the service queues them
        scores = pool.map(lambda a: score_answer(_text(a[0]), a[1], client),
                          zip(completions, tasks, strict=True))
        return [s.reward for s in scores]
