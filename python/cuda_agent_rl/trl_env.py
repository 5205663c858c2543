"""TRL environment (trl 1.16.0, `GRPOTrainer(environment_factory=CudaAgentEnv)`): one service
session per rollout (docs/rl.md, "TRL").

TRL's contract (trl/trainer/grpo_trainer.py of 1.16.0): the factory is called with no argument;
each instance is pooled and reused, `reset(**row)` is called with the dataset row before each
rollout and may return a string appended to the last user message; every other public method
is a tool whose schema transformers derives from its type hints and docstring (so the methods
below carry the service's tool names and parameter names; tests/test_rl_trl.py checks them
against the live service's schemas); a tool that raises is answered `{"error": ...}` and
counted as a tool failure; `get_reward()` is called once per finished rollout, and a None
reward is dropped from that rollout's sum.

The task: the row's `extra_info.task_id` (what `cuda-agent tasks export` writes) or a
`task_id` column. The service: `$CUDA_AGENT_SERVE_URL` (or the constructor's argument, through
functools.partial), the token `$CUDA_AGENT_SERVE_TOKEN`.

Rewards: finalize's reward (-1, 1, 2, 3); None when the service could not judge (reward null:
`env.*`) or failed during the rollout, so an infrastructure failure is never scored -1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda_agent_rl.client import ServiceClient, ServiceError, Session
from cuda_agent_rl.reward import client_for

REJECTED = ("unknown_tool", "bad_arguments")


class CudaAgentEnv:
    def __init__(self, service_url: str | None = None, token: str | None = None) -> None:
        self._client: ServiceClient = client_for(service_url, token)
        self._session: Session | None = None
        self._broken = ""  # why the rollout cannot be judged (service.<code>)
        self._result: dict[str, Any] | None = None
        self._calls = 0

    # ---- TRL's lifecycle ----------------------------------------------------------------------

    def reset(self, **kwargs: Any) -> str | None:
        """Closes the previous rollout's session and opens one for this row's task. Returns the
        session's prompt when the row has none, else None (the exported rows carry it)."""
        self._close()
        self._broken, self._result, self._calls = "", None, 0
        task = _task(kwargs)
        try:
            self._session = self._client.open_session(task)
        except ServiceError as exc:
            self._broken = f"service.{exc.code or exc.status}"
            return None
        return None if kwargs.get("prompt") else self._session.prompt

    def get_reward(self) -> float | None:
        """Finalizes the workspace and closes the session: finalize's reward, or None when the
        service could not judge."""
        s = self._session
        if s is None or self._broken:
            self._close()
            return None
        try:
            fin = s.finalize()
        except ServiceError as exc:
            self._broken = f"service.{exc.code or exc.status}"
            return None
        finally:
            self._close()
        self._result = fin.get("result")
        r = fin.get("reward")
        return float(r) if isinstance(r, (int, float)) else None

    # ---- the tools (the service's; docs/agent-tools.md) --------------------------------------

    def bash(self, command: str, timeout_s: float | None = None) -> str:
        """Run a bash command in the workspace's sandbox (no network, no GPU; stdout and stderr
        merged, long output keeps its head and tail).

        Args:
            command: The command line.
            timeout_s: Time limit in seconds (at most the session's limit; default 120).
        """
        return self._tool("bash", command=command, timeout_s=timeout_s)

    def read_file(self, path: str, offset_line: int | None = None,
                  limit_lines: int | None = None) -> str:
        """Read a text file of the workspace; lines are numbered like cat -n.

        Args:
            path: Relative to the workspace.
            offset_line: First line to show (1-based, default 1).
            limit_lines: Lines to show (default 2000).
        """
        return self._tool("read_file", path=path, offset_line=offset_line,
                          limit_lines=limit_lines)

    def write_file(self, path: str, content: str) -> str:
        """Create or replace a file of the workspace with content.

        Args:
            path: Relative to the workspace.
            content: The whole new content.
        """
        return self._tool("write_file", path=path, content=content)

    def edit(self, path: str, old_string: str, new_string: str,
             replace_all: bool | None = None) -> str:
        """Replace old_string by new_string in a file; old_string must occur exactly once unless
        replace_all is true.

        Args:
            path: Relative to the workspace.
            old_string: Exact text to replace (not empty).
            new_string: Replacement (different from old_string).
            replace_all: Replace every occurrence (default false).
        """
        return self._tool("edit", path=path, old_string=old_string, new_string=new_string,
                          replace_all=replace_all)

    def multi_edit(self, path: str, edits: list[dict[str, Any]]) -> str:
        """Apply several edits to one file, in order; the file is written only if every edit
        succeeds.

        Args:
            path: Relative to the workspace.
            edits: The edits, each {"old_string", "new_string", "replace_all"?}.
        """
        return self._tool("multi_edit", path=path, edits=edits)

    def glob(self, pattern: str) -> str:
        """List files of the workspace matching a pattern (** for any number of directories).

        Args:
            pattern: Relative to the workspace, e.g. kernels/**/*.cu.
        """
        return self._tool("glob", pattern=pattern)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None,
             ignore_case: bool | None = None, max_results: int | None = None) -> str:
        """Search text files of the workspace for a POSIX extended regular expression.

        Args:
            pattern: POSIX extended regular expression.
            path: File or directory to search, relative to the workspace (default: all of it).
            glob: Only files matching this pattern (a name like *.cu, or a path pattern).
            ignore_case: Match without regard to case.
            max_results: At most this many matches (default 200).
        """
        return self._tool("grep", pattern=pattern, path=path, glob=glob,
                          ignore_case=ignore_case, max_results=max_results)

    def compile(self) -> str:
        """Build kernels/ with nvcc and check the library (cuda-agent compile)."""
        return self._tool("compile")

    def verify(self) -> str:
        """Compile, then check ca_forward against the reference on fresh secret inputs."""
        return self._tool("verify")

    def profile(self) -> str:
        """Verify, then time the kernel against eager PyTorch and torch.compile (needs a GPU)."""
        return self._tool("profile")

    # ---- helpers -----------------------------------------------------------------------------

    def _tool(self, name: str, **arguments: Any) -> str:
        if self._session is None:
            raise RuntimeError(f"no session ({self._broken or 'reset was not called'})")
        self._calls += 1
        args = {k: v for k, v in arguments.items() if v is not None}
        try:
            ans = self._session.tool(name, args)
        except ServiceError as exc:
            if exc.code not in REJECTED:
                self._broken = f"service.{exc.code or exc.status}"
            raise RuntimeError(exc.message) from None
        return str(ans.get("output", ""))

    def _close(self) -> None:
        s, self._session = self._session, None
        if s is not None:
            try:
                s.close()
            except ServiceError:
                pass  # the service reaps idle sessions

    def __del__(self) -> None:
        self._close()

    @property
    def last_result(self) -> dict[str, Any] | None:
        """The last finalize's result object (docs/result.md), for logging."""
        return self._result

    @property
    def tool_calls(self) -> int:
        return self._calls

    @property
    def broken(self) -> str:
        return self._broken


def _task(row: Mapping[str, Any]) -> dict[str, str]:
    info = row.get("extra_info")
    if isinstance(info, Mapping) and info.get("task_id"):
        return {"id": str(info["task_id"])}
    if row.get("task_id"):
        return {"id": str(row["task_id"])}
    raise ValueError("the row names no task: an extra_info.task_id or a task_id column")
