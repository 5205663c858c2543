"""Test client of tests/integration/serve.sh: drives a running `cuda-agent serve` over HTTP
(stdlib only) and prints one `ok NAME` or `FAIL NAME: why` line per check.

Usage: serve_client.py main|full|token|sessions|ws|load|limits|restart-after|gpus8
                                              (the server's URL in $CUDA_AGENT_SERVE_URL)
       serve_client.py kill|drain|restart-before URL SERVER_PID
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
URL = os.environ.get("CUDA_AGENT_SERVE_URL", "")


def check(name: str, cond: bool, why: object = "") -> None:
    print(f"ok {name}" if cond else f"FAIL {name}: {str(why)[:600]}", flush=True)


def call(method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None, timeout: float = 600) -> tuple[int, dict[str, str],
                                                                             bytes]:
    req = urllib.request.Request(URL + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def evaluate(req: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, text = call("POST", "/v1/evaluate", json.dumps(req).encode(), headers)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def files(d: Path, prefix: str = "") -> dict[str, str]:
    return {prefix + p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


TINY = files(ROOT / "tests/data/candidates/tiny_task")
GOOD = files(ROOT / "tests/data/candidates/good/kernels", "kernels/")
BAD = files(ROOT / "tests/data/build/bad_syntax/kernels", "kernels/")
CPU_TASK = files(ROOT / "tests/data/protocol_cpu/task")
HONEST = {"honest.py": (ROOT / "tests/data/protocol_cpu/honest.py").read_text()}


def native(task: dict[str, Any], kernels: dict[str, str], **more: Any) -> dict[str, Any]:
    return {"task": task, "candidate": {"format": "native", "files": kernels}, **more}


def torch_full(**more: Any) -> dict[str, Any]:
    return {"task": {"files": CPU_TASK}, "candidate": {"format": "kernelbench", "files": HONEST},
            "rules": "cuda-agent", "deadline_s": 600, **more}


def main_checks() -> None:
    status, _, text = call("GET", "/v1/health")
    h = json.loads(text)
    check("health", status == 200 and h["status"] == "ok" and h["workers"] == 2, text)
    status, _, text = call("GET", "/v1/openapi.json")
    check("openapi", status == 200 and "/v1/evaluate" in json.loads(text)["paths"], text[:200])
    status, hdr, _ = call("GET", "/v1/evaluate")
    check("405 with Allow", status == 405 and hdr.get("Allow") == "POST", (status, hdr))
    status, _, _ = call("GET", "/nope")
    check("404 for an unknown path", status == 404, status)

    hostile = {
        "not JSON": b"{bad",
        "empty body": b"",
        "invalid UTF-8": b'{"task": {"id": "\xff"}}',
        "unknown field": json.dumps(native({"id": "x"}, GOOD, tsak=1)).encode(),
        "path traversal": json.dumps(native({"id": "x"}, {"kernels/../../etc/x.cu": "x"})).encode(),
        "absolute path": json.dumps(native({"id": "x"}, {"/etc/passwd": "x"})).encode(),
        "dot file": json.dumps(native({"id": "x"}, {"kernels/.bashrc": "x"})).encode(),
        "inline task escaping": json.dumps(native({"files": {"../model.py": "x"}}, GOOD)).encode(),
        "wrong type": json.dumps({"task": {"id": 3}, "candidate": {}}).encode(),
        "bad format": json.dumps({"task": {"id": "x"}, "candidate": {"format": "exe",
                                                                    "files": GOOD}}).encode(),
        "bad deadline": json.dumps(native({"id": "x"}, GOOD, deadline_s=-1)).encode(),
    }
    for name, body in hostile.items():
        status, _, text = call("POST", "/v1/evaluate", body)
        msg = json.loads(text).get("error", {}).get("message", "") if text else ""
        check(f"400: {name}", status == 400 and len(msg) > 10, (status, text[:300]))
    big = json.dumps(native({"id": "x"}, {"kernels/a.cu": "x" * (17 << 20)})).encode()
    status, _, text = call("POST", "/v1/evaluate", big)
    check("413: a body over 16 MiB", status == 413, (status, text[:200]))
    status, r = evaluate(native({"id": "kernelbench/level1/404_Nothing"}, GOOD))
    check("404: an unknown task id", status == 404 and "no task" in r["error"]["message"], r)

    status, r = evaluate(native({"id": "kernelbench/level1/19_ReLU"}, GOOD))
    check("stored task by id: compiled, env.no_gpu, reward null",
          status == 200 and r["compiled"] is True and r["reason"]["code"] == "env.no_gpu"
          and r["reward"] is None, r)
    status, r = evaluate(native({"files": TINY}, GOOD))
    check("inline task: compiled, env.no_gpu", status == 200 and r["compiled"] is True
          and r["reason"]["code"] == "env.no_gpu", r)
    status, r = evaluate(native({"files": TINY}, BAD))
    check("a build error: reward -1 with the compiler's message",
          status == 200 and r["reason"]["code"] == "build.error" and r["reward"] == -1
          and "kernels/" in r["reason"]["message"], r)
    status, r = evaluate(torch_full())
    check("a PyTorch-format candidate evaluated in full (CPU protocol)",
          status == 200 and r["reason"]["code"] == "ok" and r["correct"] is True
          and isinstance(r["reward"], int) and r["reward"] >= 1
          and r["timing"]["candidate"]["samples"] >= 10, {k: r.get(k) for k in
                                                          ("reason", "reward", "correct")})

    # Idempotency: two requests with one key, at once, get one evaluation.
    with ThreadPoolExecutor(2) as ex:
        a, b = ex.map(lambda _: evaluate(native({"files": TINY}, GOOD, idempotency_key="same")),
                      range(2))
    check("one key, one job", a[0] == b[0] == 200 and a[1]["job"]["id"] == b[1]["job"]["id"]
          and sorted([a[1]["job"]["repeated"], b[1]["job"]["repeated"]]) == [False, True],
          (a[1].get("job"), b[1].get("job")))
    status, r = evaluate(native({"files": TINY}, BAD), {"Idempotency-Key": "same"})
    check("a key sent again gets the first answer", status == 200
          and r["job"]["id"] == a[1]["job"]["id"] and r["reason"]["code"] == "env.no_gpu", r)

    # 64 at once, compile mode: every one answered once, by its own job.
    t0 = time.time()
    with ThreadPoolExecutor(64) as ex:
        got = list(ex.map(lambda i: evaluate(native({"files": TINY}, GOOD, mode="compile",
                                                    idempotency_key=f"c{i}")), range(64)))
    ids = {r["job"]["id"] for s, r in got if s == 200}
    check(f"64 concurrent compile requests: 64 answers, 64 jobs ({time.time() - t0:.1f} s)",
          len(got) == 64 and all(s == 200 and r["reason"]["code"] == "ok" and r["compiled"]
                                 for s, r in got) and len(ids) == 64,
          [(s, r.get("reason")) for s, r in got if s != 200 or r["reason"]["code"] != "ok"][:3])

    # OpenEnv's HTTP protocol: an episode is one evaluation
    h = json.loads(call("GET", "/health")[2])
    st = json.loads(call("GET", "/state")[2])
    sc = json.loads(call("GET", "/schema")[2])
    check("openenv: health, state, schema", h == {"status": "healthy"}
          and st == {"episode_id": None, "step_count": 0}
          and {"task", "candidate"} <= set(sc["action"]["properties"])
          and "observation" in sc and "state" in sc, (h, st, list(sc)))
    status, _, text = call("POST", "/reset", b"{}")
    check("openenv: reset", status == 200 and json.loads(text)["done"] is False
          and "/step" in json.loads(text)["observation"]["prompt"], text[:200])
    status, _, text = call("POST", "/step", json.dumps(
        {"action": native({"files": TINY}, GOOD), "timeout_s": 60}).encode())
    o = json.loads(text)
    check("openenv: step evaluates the action", status == 200 and o["done"] is True
          and o["reward"] is None and o["observation"]["result"]["reason"]["code"] == "env.no_gpu"
          and o["metadata"]["job"]["id"].startswith("j-"), o)
    status, _, text = call("POST", "/step", json.dumps({"action": {"task": 1}}).encode())
    check("openenv: a bad action is 400", status == 400, (status, text[:200]))
    check("openenv: GET /step is 405", call("GET", "/step")[0] == 405, "")

    status, _, text = call("GET", "/metrics")
    m = text.decode()
    check("metrics: results by reason, requests, steps",
          status == 200 and 'cuda_agent_results_total{reason="env.no_gpu"}' in m
          and 'cuda_agent_requests_total{endpoint="evaluate",code="4xx"}' in m
          and 'cuda_agent_step_seconds_count{step="build"}' in m, m[:300])


def workers_of(server_pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(server_pid)], text=True,
                         capture_output=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "serve-worker" in line]


def kill_checks(server_pid: int) -> None:
    res: dict[str, Any] = {}

    def one() -> None:
        res["r"] = evaluate(torch_full(idempotency_key="killed"))

    t = threading.Thread(target=one)
    t.start()
    for _ in range(200):  # until a worker runs the job
        if json.loads(call("GET", "/v1/health")[2])["running"] >= 1:
            break
        time.sleep(0.02)
    time.sleep(0.2)
    victims = workers_of(server_pid)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    t.join(600)
    status, r = res.get("r", (0, {}))
    check(f"SIGKILL of the workers ({len(victims)}) mid-job: retried on a fresh worker",
          status == 200 and r.get("job", {}).get("attempts") == 2
          and r["reason"]["code"] == "ok", (status, r.get("job"), r.get("reason")))
    status, r2 = evaluate(torch_full(idempotency_key="killed"))
    check("... and answered once", status == 200 and r2["job"]["id"] == r["job"]["id"]
          and r2["job"]["repeated"] is True, r2.get("job"))
    _, _, text = call("GET", "/metrics")
    check("metrics count the restart and the retry",
          "cuda_agent_retries_total 1" in text.decode()
          and "cuda_agent_worker_restarts_total 0" not in text.decode(), text[-400:])


def drain_checks(server_pid: int) -> None:
    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(evaluate, native({"files": TINY}, GOOD, idempotency_key=f"d{i}"))
                for i in range(4)]
        time.sleep(0.5)
        os.kill(server_pid, signal.SIGTERM)
        got = [f.result() for f in futs]
    check("SIGTERM with jobs queued: every one answered",
          all(s == 200 and r["reason"]["code"] == "env.no_gpu" for s, r in got),
          [(s, r if s != 200 else r["reason"]["code"]) for s, r in got])


def full_checks() -> None:
    out: list[Any] = []

    def one() -> None:
        out.append(evaluate(torch_full()))

    ts = [threading.Thread(target=one) for _ in range(2)]
    for t in ts:
        t.start()
        time.sleep(1.0)  # the first runs, the second waits in the one-slot queue
    status, hdr, text = call("POST", "/v1/evaluate", json.dumps(torch_full()).encode())
    check("a full queue: 429 with Retry-After", status == 429 and hdr.get("Retry-After") == "5"
          and b"full" in text, (status, hdr, text[:200]))
    for t in ts:
        t.join(600)
    check("the two accepted requests answered", len(out) == 2
          and all(s == 200 and r["reason"]["code"] == "ok" for s, r in out),
          [(s, r.get("reason") if isinstance(r, dict) else r) for s, r in out])
    _, _, text = call("GET", "/metrics")
    check("metrics count the refusal", "cuda_agent_rejected_total 1" in text.decode(), "")


def token_checks() -> None:
    status, _, _ = call("GET", "/v1/health")
    check("token: health is open", status == 200, status)
    status, _, _ = call("GET", "/metrics")
    check("token: 401 without it", status == 401, status)
    status, _, _ = call("GET", "/metrics", headers={"Authorization": "Bearer wrong"})
    check("token: 401 with a wrong one", status == 401, status)
    status, _, _ = call("POST", "/v1/evaluate", b"{}", {"Authorization": "Bearer s3cre"})
    check("token: 401 with a prefix of it", status == 401, status)
    status, _, _ = call("GET", "/metrics", headers={"Authorization": "Bearer s3cret"})
    check("token: 200 with it", status == 200, status)


def session(task: dict[str, Any] | None = None, **more: Any) -> tuple[int, Any]:
    status, _, text = call("POST", "/v1/sessions",
                           json.dumps({"task": task or {"files": TINY}, **more}).encode())
    return status, json.loads(text)


def tool(sid: str, name: str, args: dict[str, Any]) -> tuple[int, Any]:
    status, _, text = call("POST", f"/v1/sessions/{sid}/tools/{name}", json.dumps(args).encode())
    return status, json.loads(text)


def session_checks() -> None:
    status, r = session(limits={"bash_timeout_s": 20, "output_cap": 5000})
    names = [t["function"]["name"] for t in r.get("tools", [])]
    check("session: created with the prompt and the tools", status == 200
          and "INTERFACE" in r["prompt"] and "SKILL" not in r["prompt"][:0]
          and {"bash", "write_file", "compile", "verify", "profile"} <= set(names), (status, r))
    msgs = r.get("messages") or [{}, {}]
    check("session: solve's opening messages (SKILL.md; model.py, INTERFACE.md), the prompt "
          "their text", [m.get("role") for m in msgs] == ["system", "user"]
          and "class Model" in msgs[1].get("content", "") and "INTERFACE.md" in msgs[1]["content"]
          and r["prompt"] == msgs[0]["content"] + "\n\n" + msgs[1]["content"], msgs)
    sid = r["session_id"]
    st, a = tool(sid, "write_file", {"path": "kernels/kernel.cu",
                                     "content": GOOD["kernels/axpb.cu"]})
    check("session: write_file", st == 200 and a["ok"], a)
    st, a = tool(sid, "read_file", {"path": "kernels/kernel.cu", "limit_lines": 2})
    check("session: read_file", st == 200 and a["ok"] and "tiny_task" in a["output"], a)
    st, a = tool(sid, "write_file", {"path": "../../escape", "content": "x"})
    check("session: a write outside the workspace is refused", st == 200 and not a["ok"]
          and "outside" in a["output"], a)
    st, a = tool(sid, "edit", {"path": "model.py", "old_string": "a", "new_string": "b"})
    check("session: model.py is read-only", st == 200 and not a["ok"], a)
    st, a = tool(sid, "bash", {"command": "ls kernels && cat /etc/hostname >/dev/null; echo $?"})
    check("session: bash in the workspace", st == 200 and a["ok"] and "kernel.cu" in a["output"],
          a)
    st, a = tool(sid, "compile", {})
    check("session: compile", st == 200 and a["ok"] and a["result"]["compiled"] is True, a)
    st, a = tool(sid, "bash", {"command": "cd kernels && cuda-agent verify --json"})
    check("session: `cuda-agent verify` inside bash goes through the queue",
          st == 200 and a["exit_code"] == 4 and '"env.no_gpu"' in a["output"], a)
    st, a = tool(sid, "nope", {})
    check("session: an unknown tool is 404", st == 404, (st, a))
    st, a = tool(sid, "read_file", {"path": 3})
    check("session: bad arguments are 400", st == 400 and "read_file" in a["error"]["message"],
          (st, a))
    status, _, text = call("POST", f"/v1/sessions/{sid}/tools/glob", b"[1]")
    check("session: arguments that are not an object are 400", status == 400, (status, text))
    status, _, text = call("POST", f"/v1/sessions/{sid}/finalize", b"")
    f = json.loads(text)
    check("session: finalize answers the result and the reward", status == 200
          and f["result"]["reason"]["code"] == "env.no_gpu" and f["reward"] is None, f)
    check("session: DELETE closes it", call("DELETE", f"/v1/sessions/{sid}")[0] == 200, "")
    check("session: a closed session is 404",
          call("POST", f"/v1/sessions/{sid}/tools/glob", b'{"pattern": "*"}')[0] == 404, "")
    check("session: a second DELETE is 404", call("DELETE", f"/v1/sessions/{sid}")[0] == 404, "")
    status, r = session({"files": {"model.py": "this is not python("}})
    check("session: a broken task is 422", status == 422 and "task." in r["error"]["message"],
          (status, r))
    status, r = session({"id": "kernelbench/level1/19_ReLU"})
    check("session: a stored task by id", status == 200 and r["session_id"].startswith("s-"),
          (status, r))
    call("DELETE", f"/v1/sessions/{r.get('session_id')}")
    for name, body in {"unknown field": {"task": {"files": TINY}, "x": 1},
                       "bad limits": {"task": {"files": TINY}, "limits": {"output_cap": 5}},
                       "no task": {}}.items():
        status, _, text = call("POST", "/v1/sessions", json.dumps(body).encode())
        check(f"session: 400 for {name}", status == 400, (status, text[:200]))


def load_checks() -> None:
    """256 sessions at once, each doing file tool calls; then 10,000 calls in all."""
    t0 = time.time()
    with ThreadPoolExecutor(256) as ex:
        made = list(ex.map(lambda _: session(), range(256)))
    sids = [r["session_id"] for s, r in made if s == 200]
    check(f"256 concurrent sessions created ({time.time() - t0:.1f} s)", len(sids) == 256,
          [r for s, r in made if s != 200][:2])
    lat: list[float] = []
    lock = threading.Lock()

    def work(i: int) -> bool:
        sid = sids[i % len(sids)]
        text = f"call {i} of {sid}\n"
        t = time.perf_counter()
        s1, a = tool(sid, "write_file", {"path": f"notes/{i}.txt", "content": text})
        s2, b = tool(sid, "read_file", {"path": f"notes/{i}.txt"})
        dt = time.perf_counter() - t
        with lock:
            lat.append(dt / 2)
        return s1 == 200 and s2 == 200 and a["ok"] and f"call {i} of {sid}" in b["output"]

    t0 = time.time()
    with ThreadPoolExecutor(256) as ex:
        good = sum(ex.map(work, range(5000)))
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    check(f"10,000 tool calls over 256 sessions: none lost, each its own answer "
          f"({time.time() - t0:.1f} s; p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms a call)",
          good == 5000, f"{5000 - good} of 5000 write+read pairs went wrong")
    # The server's own share, from its histogram (bucket bounds: an upper bound of each quantile)
    m = call("GET", "/metrics")[2].decode()
    buckets = [(float(le), int(n)) for le, n in re.findall(
        r'cuda_agent_request_seconds_bucket\{endpoint="tool",le="([0-9.e+-]+)"\} (\d+)', m)]
    total = max(n for _, n in buckets) if buckets else 0
    def q(f: float) -> float:
        return next((le for le, n in buckets if n >= f * total), float("inf"))
    check(f"the server's time per tool call: p50 <= {q(0.5) * 1e3:g} ms, p99 <= "
          f"{q(0.99) * 1e3:g} ms ({total} calls)", total >= 10000, total)
    with ThreadPoolExecutor(64) as ex:
        closed = sum(1 for s in ex.map(lambda sid: call("DELETE", f"/v1/sessions/{sid}")[0],
                                       sids) if s == 200)
    check("every session closed", closed == 256, closed)


def gpus8_checks() -> None:
    """A server told it has GPUs 0..7 (`--gpus 0,...,7`, on the CPU: each worker gets its
    CUDA_VISIBLE_DEVICES and its GPU's lock file): 24 compile jobs at once, each answered once,
    spread over every GPU; the per-GPU metrics add up."""
    status, _, text = call("GET", "/v1/health")
    check("gpus8: 8 workers, one per GPU", status == 200 and json.loads(text)["workers"] == 8,
          text)
    reqs = [native({"files": TINY}, {k: v + f"// job {i}\n" for k, v in GOOD.items()},
                   mode="compile") for i in range(24)]
    with ThreadPoolExecutor(24) as ex:
        answers = list(ex.map(evaluate, reqs))
    good = [r for s, r in answers if s == 200 and r["reason"]["code"] == "ok"]
    check("gpus8: 24 compile jobs at once, each answered ok", len(good) == 24,
          [(s, str(r)[:200]) for s, r in answers if s != 200][:2])
    m = call("GET", "/metrics")[2].decode()
    per_gpu = {g: int(n) for g, n in re.findall(r'cuda_agent_gpu_jobs_total\{gpu="(\d+)"\} (\d+)', m)}
    workers = {g: int(n) for g, n in re.findall(r'cuda_agent_gpu_workers\{gpu="(\d+)"\} (\d+)', m)}
    running = re.findall(r'cuda_agent_gpu_jobs_running\{gpu="(\d+)"\} (\d+)', m)
    check(f"gpus8: every GPU's workers took jobs ({sorted(per_gpu.items())})",
          sorted(per_gpu) == [str(g) for g in range(8)] and all(n > 0 for n in per_gpu.values())
          and sum(per_gpu.values()) == 24, m[-800:])
    check("gpus8: one worker per GPU, none running once all are answered",
          workers == {str(g): 1 for g in range(8)} and len(running) == 8
          and all(n == "0" for _, n in running), (workers, running))


def restart_before(server_pid: int) -> None:
    """Three keyed jobs (one running, two queued), then the server is killed with SIGKILL."""
    def one(i: int) -> None:
        try:
            evaluate(torch_full(idempotency_key=f"persist{i}"))
        except Exception:  # the server dies under it: the client will retry
            pass

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(3)]
    for t in ts:
        t.start()
    h: dict[str, Any] = {}
    for _ in range(500):
        h = json.loads(call("GET", "/v1/health")[2])
        if h["running"] + h["queued"] >= 3:
            break
        time.sleep(0.02)
    check("restart: three keyed jobs in the server", h.get("running", 0) + h.get("queued", 0) == 3,
          h)
    os.kill(server_pid, signal.SIGKILL)


def restart_after() -> None:
    h = json.loads(call("GET", "/v1/health")[2])
    check("restart: the jobs are back", h["running"] + h["queued"] == 3, h)
    with ThreadPoolExecutor(3) as ex:
        got = list(ex.map(lambda i: evaluate(torch_full(idempotency_key=f"persist{i}")), range(3)))
    check("restart: every job answered after the retry, by its first job",
          all(s == 200 and r["reason"]["code"] == "ok" and r["job"]["repeated"] for s, r in got),
          [(s, r.get("reason"), r.get("job")) if isinstance(r, dict) else (s, r) for s, r in got])


def limits_checks() -> None:
    a, b = session(), session()
    status, r = session()
    check("session limit: the third of 2 is 429 with Retry-After", a[0] == b[0] == 200
          and status == 429, (a[0], b[0], status, r))
    time.sleep(3.5)  # --session-idle 1: the reaper closes both
    st, _ = tool(a[1]["session_id"], "glob", {"pattern": "*"})
    status, r = session()
    check("idle sessions are reaped (404), and their places freed", st == 404 and status == 200,
          (st, status, r))


def ws_checks() -> None:
    """OpenEnv's WebSocket protocol on /ws (the one its EnvClient speaks)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ws_client import WS, WSClosed

    ws = WS(URL + "/ws")
    check("ws: handshake 101 with the right Sec-WebSocket-Accept",
          ws.status == 101 and ws.accept_ok, (ws.status, ws.headers))
    r = ws.ask({"type": "reset", "data": {}})
    check("ws: reset without a task says how an episode goes", r["type"] == "observation"
          and "finalize" in r["data"]["observation"]["prompt"] and r["data"]["done"] is False, r)
    r = ws.ask({"type": "reset", "data": {"task": {"files": TINY}}})
    d = r.get("data", {})
    check("ws: reset with a task opens a session (prompt, tools)", r["type"] == "observation"
          and "INTERFACE" in d["observation"]["prompt"] and d["observation"]["tools"]
          and d["done"] is False, r)
    sid = d.get("observation", {}).get("session_id")
    r = ws.ask({"type": "state"})
    check("ws: state names the episode", r == {"type": "state", "data": {"episode_id": sid,
                                                                          "step_count": 0}}, r)
    r = ws.ask({"type": "step", "data": {"tool": "write_file", "arguments": {
        "path": "kernels/kernel.cu", "content": GOOD["kernels/axpb.cu"]}}})
    check("ws: a tool step", r["type"] == "observation" and r["data"]["observation"]["ok"]
          and r["data"]["done"] is False and r["data"]["reward"] is None, r)
    r = ws.ask({"type": "step", "data": {"tool": "compile", "arguments": {}}})
    check("ws: compile through the queue", r["type"] == "observation"
          and r["data"]["observation"]["result"]["compiled"] is True, r)
    r = ws.ask({"type": "step", "data": {"tool": "nope"}})
    check("ws: an unknown tool is a VALIDATION_ERROR", r["type"] == "error"
          and r["data"]["code"] == "VALIDATION_ERROR", r)
    r = ws.ask({"type": "step", "data": {"tool": "finalize"}})
    check("ws: finalize ends the episode with the result", r["type"] == "observation"
          and r["data"]["done"] is True
          and r["data"]["observation"]["result"]["reason"]["code"] == "env.no_gpu"
          and r["data"]["reward"] is None, r)
    r = ws.ask({"type": "step", "data": {"tool": "glob", "arguments": {"pattern": "*"}}})
    check("ws: after finalize there is no session", r["type"] == "error"
          and r["data"]["code"] == "SESSION_ERROR", r)
    r = ws.ask({"type": "step", "data": torch_full()})
    check("ws: an evaluate request is a one-step episode", r["type"] == "observation"
          and r["data"]["done"] is True and r["data"]["observation"]["result"]["reason"]["code"]
          == "ok" and r["data"]["reward"] is not None, r)
    for name, msg, code in [("not JSON", None, "INVALID_JSON"),
                            ("an unknown type", {"type": "dance"}, "UNKNOWN_TYPE"),
                            ("a step that is not an object", {"type": "step", "data": 3},
                             "VALIDATION_ERROR"),
                            ("a bad task", {"type": "reset", "data": {"task": {}}},
                             "VALIDATION_ERROR")]:
        if msg is None:
            ws.send_raw(ws.frame(b"{not json"))
            r = ws.recv()
        else:
            r = ws.ask(msg)
        check(f"ws: {name} is {code}", r["type"] == "error" and r["data"]["code"] == code, r)
    # fragmented message and a ping in between
    text = json.dumps({"type": "state"}).encode()
    ws.send_raw(ws.frame(text[:5], fin=False) + ws.frame(b"hi", opcode=9)
                + ws.frame(text[5:], opcode=0))
    op, _, payload = ws.recv_frame()
    r = ws.recv()
    check("ws: a ping is answered, a fragmented message joined", op == 10 and payload == b"hi"
          and r["type"] == "state", (op, payload, r))
    ws.send({"type": "close"})
    try:
        ws.recv()
        closed: int | None = -1
    except WSClosed as e:
        closed = e.code
    check("ws: close ends the connection with 1000", closed == 1000, closed)
    ws.sock.close()
    # protocol errors close the connection
    for name, raw, want in [("an unmasked frame", WS.frame(b"{}", mask=False), 1002),
                            ("a binary frame", WS.frame(b"{}", opcode=2), 1003),
                            ("reserved bits", bytes([0xF1, 0x80, 0, 0, 0, 0]), 1002)]:
        w = WS(URL + "/ws")
        w.send_raw(raw)
        try:
            w.recv()
            got: int | None = -1
        except WSClosed as e:
            got = e.code
        check(f"ws: {name} closes with {want}", got == want, got)
        w.sock.close()
    status, _, text = call("GET", "/ws")
    check("ws: a plain GET /ws is 426", status == 426, (status, text[:200]))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode in ("kill", "drain", "restart-before"):
        URL = sys.argv[2]
        {"kill": kill_checks, "drain": drain_checks,
         "restart-before": restart_before}[mode](int(sys.argv[3]))
    else:
        {"main": main_checks, "full": full_checks, "token": token_checks,
         "sessions": session_checks, "ws": ws_checks, "load": load_checks,
         "limits": limits_checks, "gpus8": gpus8_checks,
         "restart-after": restart_after}[mode]()
