"""Test client of tests/integration/fleet.sh: drives `cuda-agent serve --redis` and its
`cuda-agent worker --redis` nodes over HTTP (stdlib only) and prints one `ok NAME` or
`FAIL NAME: why` line per check.

Usage: fleet_client.py spread URL_A URL_B      many compile jobs, both nodes, both replicas
       fleet_client.py submit URL N TAG OUT    N keyed jobs in threads; answers to OUT (JSON)
       fleet_client.py collect URL N TAG OUT   the same keys again: every job answered once
       fleet_client.py session URL             an agent session whose jobs run on a node
"""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def check(name: str, cond: bool, why: object = "") -> None:
    print(f"ok {name}" if cond else f"FAIL {name}: {str(why)[:600]}", flush=True)


def call(url: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def files(d: Path, prefix: str = "") -> dict[str, str]:
    return {prefix + p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


TINY = files(ROOT / "tests/data/candidates/tiny_task")
GOOD = files(ROOT / "tests/data/candidates/good/kernels", "kernels/")


def compile_req(key: str, salt: str = "") -> dict[str, Any]:
    kernels = dict(GOOD)
    if salt:  # a different source: a build of its own (nvcc runs)
        name = min(kernels)
        kernels[name] = kernels[name] + f"\n// {salt}\n"
    return {"task": {"files": TINY}, "candidate": {"format": "native", "files": kernels},
            "mode": "compile", "idempotency_key": key, "deadline_s": 300}


def node_of(res: Any) -> str:
    d = str(((res or {}).get("task") or {}).get("dir", "")) if isinstance(res, dict) else ""
    return "n1" if "/node1/" in d else "n2" if "/node2/" in d else "?"


def spread(url_a: str, url_b: str) -> None:
    status, h = call(url_a, "GET", "/v1/health")
    check("health says the queue is Redis", status == 200 and h.get("queue") == "redis", h)
    run = str(int(time.time() * 1000))
    n = 200
    lat: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> tuple[int, Any]:
        t = time.monotonic()
        status, res = call(url_a if i % 2 else url_b, "POST", "/v1/evaluate",
                           compile_req(f"spread-{run}-{i}"))
        with lock:
            lat.append(time.monotonic() - t)
        return status, res

    call(url_a, "POST", "/v1/evaluate", compile_req(f"warm-{run}"))  # each node's build cache
    call(url_b, "POST", "/v1/evaluate", compile_req(f"warm2-{run}"))
    with ThreadPoolExecutor(64) as ex:
        got = list(ex.map(one, range(n)))
    oks = [r for s, r in got if s == 200 and r.get("reason", {}).get("code") == "ok"]
    check(f"{n} compile jobs through two replicas and Redis: all answered ok", len(oks) == n,
          [(s, str(r)[:200]) for s, r in got if s != 200][:3])
    jobs = {r["job"]["id"] for r in oks}
    check("each answer is its own job (none doubled)", len(jobs) == n, len(jobs))
    nodes = {node_of(r) for r in oks}
    check("both nodes ran jobs", nodes == {"n1", "n2"}, nodes)
    lat.sort()
    p50, p99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
    print(f"info compile through Redis, 64 clients: p50 {p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms",
          flush=True)
    # One key sent to both replicas at once: one job, one answer for both.
    key = f"both-{run}"
    with ThreadPoolExecutor(2) as ex:
        a, b = ex.map(lambda u: call(u, "POST", "/v1/evaluate", compile_req(key, key)),
                      [url_a, url_b])
    same = (a[0] == 200 and b[0] == 200 and a[1]["candidate"]["dir"] == b[1]["candidate"]["dir"])
    check("one key at two replicas: one evaluation, the same answer", same,
          (a[0], b[0], str(a[1])[:200], str(b[1])[:200]))


def submit(url: str, n: int, tag: str, out: str) -> None:
    """Sends N keyed jobs in threads and keeps waiting; what comes back goes to OUT."""
    answers: dict[str, Any] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        status, res = call(url, "POST", "/v1/evaluate", compile_req(f"{tag}-{i}", f"{tag}-{i}"),
                           timeout=600)
        with lock:
            answers[str(i)] = [status, res if isinstance(res, dict) else str(res)]
            Path(out).write_text(json.dumps(answers))

    for i in range(n):
        threading.Thread(target=one, args=(i,), daemon=True).start()
    time.sleep(600)


def collect(url: str, n: int, tag: str, out: str) -> None:
    """The same keys again (a client's retry): every job answered, ok, once."""
    with ThreadPoolExecutor(n) as ex:
        got = list(ex.map(lambda i: call(url, "POST", "/v1/evaluate",
                                         compile_req(f"{tag}-{i}", f"{tag}-{i}"), timeout=300),
                          range(n)))
    oks = [r for s, r in got if s == 200 and r.get("reason", {}).get("code") == "ok"]
    check(f"{tag}: all {n} jobs answered ok", len(oks) == n, [(s, str(r)[:300]) for s, r in got])
    dirs = {r["candidate"]["dir"] for r in oks}
    check(f"{tag}: each key evaluated once (one run per key)", len(dirs) == n, len(dirs))
    Path(out).write_text(json.dumps([r for _, r in got]))


def session(url: str) -> None:
    status, s = call(url, "POST", "/v1/sessions", {"task": {"files": TINY}})
    check("a session through a node: created", status == 200 and "session_id" in s, s)
    if status != 200:
        return
    sid = s["session_id"]
    check("its prompt came back from the node", "INTERFACE" in s.get("prompt", "")
          or len(s.get("prompt", "")) > 200, s.get("prompt", "")[:200])
    status, r = call(url, "POST", f"/v1/sessions/{sid}/tools/read_file", {"path": "model.py"})
    check("the workspace's files are here (read_file model.py)",
          status == 200 and r["ok"] and "class Model" in r["output"], r)
    status, r = call(url, "POST", f"/v1/sessions/{sid}/tools/write_file",
                     {"path": "kernels/kernel.cu", "content": GOOD["kernels/axpb.cu"]})
    check("write_file", status == 200 and r["ok"], r)
    status, r = call(url, "POST", f"/v1/sessions/{sid}/tools/compile", {})
    check("the compile tool runs on a node", status == 200 and r["ok"]
          and r["result"]["compiled"] is True and node_of(r["result"]) in ("n1", "n2"), r)
    status, r = call(url, "POST", f"/v1/sessions/{sid}/finalize", {})
    check("finalize runs on a node and answers the result", status == 200
          and r["result"]["reason"]["code"] == "env.no_gpu" and r["reward"] is None, r)
    call(url, "DELETE", f"/v1/sessions/{sid}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "spread":
        spread(sys.argv[2], sys.argv[3])
    elif mode == "submit":
        submit(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif mode == "collect":
        collect(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif mode == "session":
        session(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")
