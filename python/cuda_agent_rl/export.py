"""Prompts for the trainers: `cuda-agent tasks export --format verl-rl|verl-single --store S
--out prompts.parquet` (docs/cli.md, docs/rl.md). The C command runs this module.

The opening messages and the tools come from the service itself: a session is opened for each
task (on `--url`, else on a `cuda-agent serve --device cpu` this module starts on a loopback
port and stops) and its answer `{messages, tools}` is what the row holds, so a rollout's session
and its prompt cannot disagree, and `cuda-agent solve` starts from the same messages. A row
(verl's RLHFDataset reads every column; TRL's GRPOTrainer reads `prompt` and hands the others
to `reset` and the reward functions):

- `prompt`: verl-rl: the session's messages [system: SKILL.md, user: the task's model.py, its
  interface (INTERFACE.md) and what to do]; verl-single: [system: SKILL.md, user: the task's id
  and model.py and what the answer must hold]
- `tools`: the session's OpenAI tool schemas as JSON text (a parquet list of structs would give
  every tool every other tool's parameters as nulls); `[]` for verl-single
- `agent_name`: `cuda_agent` (verl-rl) or verl's `single_turn_agent` (verl-single)
- `data_source`: `cuda-agent/<source>`; `ability`: `cuda`
- `reward_model`: `{style: rule, ground_truth: <task id>}`
- `extra_info`: `{index, task_id, task_hash, source, level}`

Exit status: 0 written, 2 usage, 3 no task selected (or no store), or every task failed, 4 the
service cannot be started or reached, or pyarrow is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cuda_agent_rl.client import ServiceClient, ServiceError

Json = dict[str, Any]
FORMATS = {"verl-rl": "cuda_agent", "verl-single": "single_turn_agent"}
SINGLE_TURN = (
    "Answer in one message, without tools: give the complete kernels/kernel.cu (CUDA C++ "
    "exporting ca_forward, as the interface above says) in one ```cuda fenced block. Only the "
    "last ```cuda block of your answer is evaluated.")


class ExportError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def list_tasks(cli: str, store: str | None, source: str | None, level: int | None) -> list[Json]:
    cmd = [cli, "tasks", "list", "--json", "-q"]
    cmd += ["--store", store] if store else []
    cmd += ["--source", source] if source else []
    cmd += ["--level", str(level)] if level is not None else []
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise ExportError(4, f"tasks list: {p.stderr.strip()}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


@contextmanager
def local_service(cli: str, store: str | None, python: str | None,
                  workers: int) -> Iterator[str]:
    """A `cuda-agent serve --device cpu` on a free loopback port, stopped (SIGTERM) after."""
    with tempfile.TemporaryDirectory(prefix="ca-export-") as tmp:
        port_file = Path(tmp, "port")
        cmd = [cli, "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file),
               "--state", str(Path(tmp, "state")), "--device", "cpu",
               "--workers", str(workers)]
        cmd += ["--tasks", store] if store else []
        cmd += ["--python", python] if python else []
        log = open(Path(tmp, "serve.log"), "wb")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            end = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().strip()):
                if proc.poll() is not None or time.monotonic() > end:
                    log.flush()
                    tail = Path(tmp, "serve.log").read_text(errors="replace")[-600:]
                    raise ExportError(4, f"cuda-agent serve did not start: {tail}")
                time.sleep(0.1)
            yield f"http://127.0.0.1:{port_file.read_text().strip()}"
        finally:
            stop_process(proc, 30)
            log.close()


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM (a service drains its queue and exits), then SIGKILL after timeout_s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def user_message(task: Json, fmt: str) -> str:
    try:
        model = Path(task["dir"], "model.py").read_text(errors="replace")
    except OSError:
        model = ""
    text = f"Task {task['id']}. The PyTorch model to replace (model.py):\n\n```python\n{model}```"
    return text + ("\n\n" + SINGLE_TURN if fmt == "verl-single" else "")


def row(index: int, task: Json, session: Json, fmt: str) -> Json:
    return {
        "data_source": f"cuda-agent/{task['source']}",
        "agent_name": FORMATS[fmt],
        # verl-rl: the session's own opening messages, solve's too (one source: agent/loop.h)
        "prompt": ([dict(m) for m in session["messages"]] if fmt == "verl-rl" else
                   [{"role": "system", "content": session["messages"][0]["content"]},
                    {"role": "user", "content": user_message(task, fmt)}]),
        "tools": json.dumps(session["tools"] if fmt == "verl-rl" else []),
        "ability": "cuda",
        "reward_model": {"style": "rule", "ground_truth": task["id"]},
        "extra_info": {"index": index, "task_id": task["id"], "task_hash": task["hash"],
                       "source": task["source"], "level": task.get("level")},
    }


def session_answer(client: ServiceClient, task_id: str) -> Json:
    s = client.open_session({"id": task_id})
    try:
        return {"messages": s.messages, "tools": s.tools}
    finally:
        s.close()


def export(tasks: list[Json], client: ServiceClient, fmt: str, jobs: int,
           quiet: bool) -> tuple[list[Json], list[str]]:
    def one(t: Json) -> Json | str:
        try:
            return session_answer(client, t["id"])
        except ServiceError as exc:
            if exc.status in (0, 401, 503):
                raise ExportError(4, f"the service: {exc}") from None
            return f"{t['id']}: {exc}"

    rows: list[Json] = []
    failed: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for t, ans in zip(tasks, pool.map(one, tasks), strict=True):
            if isinstance(ans, str):
                failed.append(ans)
                if not quiet:
                    print(f"cuda-agent tasks export: skipped {ans}", file=sys.stderr)
            else:
                rows.append(row(len(rows), t, ans, fmt))
    return rows, failed


def write_parquet(rows: list[Json], out: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(4, "writing parquet needs pyarrow in this Python") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda-agent tasks export")
    ap.add_argument("--format", required=True, choices=sorted(FORMATS))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cli", default=os.environ.get("CUDA_AGENT_CLI", "cuda-agent"))
    ap.add_argument("--store")
    ap.add_argument("--source")
    ap.add_argument("--level", type=int)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--url", help="a running service (else one is started on CPU)")
    ap.add_argument("--python", help="the started service's bridge Python")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("-q", "--quiet", action="store_true")
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    try:
        tasks = list_tasks(a.cli, a.store, a.source, a.level)[: a.limit]
        if not tasks:
            raise ExportError(3, "no task selected (cuda-agent tasks list shows the store)")
        if a.url:
            rows, failed = export(tasks, ServiceClient(a.url), a.format, a.jobs, a.quiet)
        else:
            with local_service(a.cli, a.store, a.python, min(4, max(1, a.jobs))) as url:
                rows, failed = export(tasks, ServiceClient(url), a.format, a.jobs, a.quiet)
        if not rows:
            raise ExportError(3, f"every task failed (first: {failed[0]})")
        write_parquet(rows, a.out)
    except ExportError as exc:
        print(f"cuda-agent tasks export: {exc}", file=sys.stderr)
        return exc.code
    print(f"exported {len(rows)} tasks to {a.out} ({a.format}), skipped {len(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
