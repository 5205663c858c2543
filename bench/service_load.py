"""Throughput of `cuda-agent serve` on a GPU machine (issue 15's H200 figures; docs/service.md).

Starts the service (the embedded queue, or `--redis`: a redis-server from PATH, `serve --redis`
and `--nodes` `cuda-agent worker --redis` processes, default 1, each with --gpu-slots workers;
on one host they take turns on the GPU through one lock file), then C clients each open an agent session on the
rowsum task, write a kernel of their own (tests/adversarial/honest/block_smem_rowsum with a
unique comment, so every evaluation builds), and finalize it, until N evaluations are done.
Reports evaluations per minute, finalize p50/p99, the host's CPU busy fraction, the GPU's busy fraction (NVML utilization,
sampled every 200 ms by nvidia-smi during the load), the mean time an evaluation held the GPU's
lock (seconds.gpu_held) and the rate that bounds, the mean of each step, the rewards, and the rewards of three of the
same kernels evaluated from the CLI. Prints one JSON object; `--out FILE` keeps the records.

Usage: python3 bench/service_load.py [--build build] [--gpu-slots 3] [--clients 64]
                                     [--evaluations 128] [--seconds S] [--redis [--nodes N]]
                                     [--out FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADV = ROOT / "tests/adversarial"
TASK = {p.name: p.read_text() for p in (ADV / "tasks/rowsum").iterdir() if p.is_file()}
DEVICE = os.environ.get("CUDA_AGENT_DEVICE", "cuda")  # cpu: a dry run of the harness
KERNEL = (ADV / "honest/block_smem_rowsum/kernels/rowsum_block.cu").read_text()


# Each run's candidates differ from every earlier run's (--salt), so that their builds miss the
# build cache as an RL run's fresh candidates do.
SALT = [str(time.time_ns())]


def variant(i: int) -> str:
    return KERNEL + f"\n// variant {i} of run {SALT[0]}\n"


def timing_brief(res: dict[str, Any]) -> dict[str, Any]:
    """What decided how long an evaluation held the GPU: the candidate's stopping rule and
    whether a speed-up near a threshold was re-timed."""
    t = res.get("timing") or {}
    c = t.get("candidate") or {}
    dec = {k: {"speedup": v.get("speedup"), "retimed": v.get("retimed"),
               "rounds": (v.get("interleaved") or {}).get("rounds")}
           for k, v in (t.get("decision") or {}).items() if isinstance(v, dict)}
    return {"stop_reason": c.get("stop_reason"), "samples": c.get("samples"), "rse": c.get("rse"),
            "bound": c.get("bound"), "probes_slow": c.get("probes_slow"),
            "loop_seconds": c.get("loop_seconds"), "decision": dec,
            "pinned_cpu": (res.get("env") or {}).get("pinned_cpu")}


def call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:300]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(url: str, clients: int, n: int, first: int,
         seconds: float = float("inf")) -> list[dict[str, Any]]:
    """n evaluations by `clients` threads; none is started after `seconds`."""
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    recs: list[dict[str, Any]] = []
    nxt = [first]

    def worker() -> None:
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= first + n or time.monotonic() > deadline:
                return
            try:
                one(i)
            except OSError as e:  # the server went away (a signal to the process group, say)
                with lock:
                    recs.append({"i": i, "error": f"{type(e).__name__}: {e}"})
                return

    def one(i: int) -> None:
        st, r = call(url, "POST", "/v1/sessions", {"task": {"files": TASK}})
        if st != 200:
            with lock:
                recs.append({"i": i, "error": f"session {st}: {r}"})
            return
        sid = r["session_id"]
        call(url, "POST", f"/v1/sessions/{sid}/tools/write_file",
             {"path": "kernels/kernel.cu", "content": variant(i)})
        t = time.monotonic()
        st, f = call(url, "POST", f"/v1/sessions/{sid}/finalize", {})
        lat = time.monotonic() - t
        call(url, "DELETE", f"/v1/sessions/{sid}")
        res = f.get("result", {}) if isinstance(f, dict) else {}
        with lock:
            recs.append({"i": i, "status": st, "finalize_s": lat, "reward": res.get("reward"),
                         "code": (res.get("reason") or {}).get("code"),
                         "seconds": res.get("seconds"), "timing": timing_brief(res)})
            if len(recs) % 16 == 0:
                print(f"{len(recs)} evaluations done", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.5)
    except KeyboardInterrupt:  # SIGINT or SIGTERM: what finished so far is reported
        with lock:
            nxt[0] = first + n  # no client starts another
            recs.append({"interrupted": True})
    with lock:
        return list(recs)


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)  # idle + iowait
    return sum(v) - idle, sum(v)


def summary(recs: list[dict[str, Any]], seconds: float, util: list[float]) -> dict[str, Any]:
    interrupted = any(r.get("interrupted") for r in recs)
    recs = [r for r in recs if not r.get("interrupted")]
    lat = sorted(r["finalize_s"] for r in recs if "finalize_s" in r)
    ok = [r for r in recs if r.get("code") == "ok"]
    held = [float((r.get("seconds") or {}).get("gpu_held", 0)) for r in recs]
    held = [h for h in held if h > 0]
    steps: dict[str, float] = {}
    for r in recs:  # the mean of each step: where an evaluation's time goes
        for k, v in (r.get("seconds") or {}).items():
            steps[k] = steps.get(k, 0.0) + float(v) / max(len(recs), 1)
    return {"evaluations": len(recs), "ok": len(ok), "seconds": round(seconds, 1),
            # stopped by a signal: the evaluations finished by then, in the time until then
            "interrupted": interrupted,
            # one GPU finishes at most one evaluation per gpu_held, whatever --gpu-slots is
            "gpu_held_mean_s": round(statistics.mean(held), 3) if held else None,
            "gpu_bound_evals_per_min": round(60 / statistics.mean(held), 1) if held else None,
            "mean_seconds_by_step": {k: round(v, 3) for k, v in sorted(steps.items())},
            "evals_per_min": round(len(recs) / seconds * 60, 1),
            "finalize_p50_s": round(statistics.median(lat), 2) if lat else None,
            "finalize_p99_s": round(lat[math.ceil(0.99 * len(lat)) - 1], 2) if lat else None,
            "gpu_busy_pct": round(statistics.mean(util), 1) if util else None,
            "codes": sorted({str(r.get("code")) for r in recs}),
            # what kept an evaluation on the GPU: the stopping rule, and re-timing near a threshold
            "stop_reasons": dict(collections.Counter(
                str((r.get("timing") or {}).get("stop_reason")) for r in recs)),
            "retimed": sum(1 for r in recs if any(
                d.get("retimed") for d in ((r.get("timing") or {}).get("decision") or {}).values())),
            "rewards": {str(k): sum(1 for r in recs if r.get("reward") == k)
                        for k in (-1, 1, 2, 3, None)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--gpu-slots", type=int, default=3)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--evaluations", type=int, default=128)
    ap.add_argument("--redis", action="store_true")
    ap.add_argument("--nodes", type=int, default=1, help="with --redis: worker processes")
    ap.add_argument("--seconds", type=float, default=float("inf"),
                    help="start no evaluation after this many seconds of load")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--salt", help="the candidates' salt (default: the time): the same salt "
                    "twice builds nothing the second time")
    a = ap.parse_args()
    if a.salt is not None:
        SALT[0] = a.salt
    cli = str(a.build / "cuda-agent")
    tmp = Path(tempfile.mkdtemp(prefix="ca-service-load-"))
    procs: list[subprocess.Popen[bytes]] = []
    report: dict[str, Any] = {"mode": "redis" if a.redis else "embedded",
                              "gpu_slots": a.gpu_slots, "clients": a.clients}
    if a.redis:
        report["nodes"] = a.nodes
    try:
        port = free_port()
        args = [cli, "serve", "--listen", f"127.0.0.1:{port}", "--state", str(tmp / "serve"),
                "--device", DEVICE]
        if a.redis:
            rport = free_port()
            procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--save", "",
                                           "--appendonly", "no"], stdout=subprocess.DEVNULL))
            time.sleep(0.5)
            args += ["--redis", f"redis://127.0.0.1:{rport}"]
            for k in range(a.nodes):
                procs.append(subprocess.Popen(
                    [cli, "worker", "--redis", f"redis://127.0.0.1:{rport}", "--gpu-slots",
                     str(a.gpu_slots), "--device", DEVICE, "--state", str(tmp / f"node{k}"),
                     "--name", f"node{k}"],
                    stderr=open(tmp / f"node{k}.log", "wb")))  # noqa: SIM115 (open while it runs)
        else:
            args += ["--gpu-slots", str(a.gpu_slots)]
        procs.append(subprocess.Popen(args, stderr=open(tmp / "serve.log", "wb")))  # noqa: SIM115
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if call(url, "GET", "/v1/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        warm = a.gpu_slots * (a.nodes if a.redis else 1)
        load(url, warm, warm, 10_000)  # warm: bridges, baselines
        smi = (subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu",
                                 "--format=csv,noheader,nounits", "-lms", "200"],
                                stdout=subprocess.PIPE, text=True)
               if shutil.which("nvidia-smi") else None)
        t0 = time.monotonic()
        c0 = cpu_times()
        recs = load(url, a.clients, a.evaluations, 0, a.seconds)
        el = time.monotonic() - t0
        c1 = cpu_times()
        util: list[float] = []
        if smi:
            smi.terminate()
            util = [float(x) for x in (smi.communicate()[0] or "").split() if x.isdigit()]
        report.update(summary(recs, el, util))
        recs = [r for r in recs if not r.get("interrupted")]
        if a.out:  # before the CLI's comparison, which a time limit may cut
            a.out.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        if report["interrupted"]:
            raise KeyboardInterrupt
        # the host's CPUs during the load: whether they, not the GPU, bound it
        report["cpu_busy_pct"] = round(100 * (c1[0] - c0[0]) / max(c1[1] - c0[1], 1.0), 1)
        report["cpus"] = os.cpu_count()
        # the same kernels from the CLI
        cli_rewards = {}
        for i in (3, 17, 40):
            d = tmp / f"cli{i}" / "kernels"
            d.mkdir(parents=True)
            (d / "kernel.cu").write_text(variant(i))
        p = subprocess.run([cli, "eval", "--json", "--task", str(ADV / "tasks/rowsum")]
                           + [str(tmp / f"cli{i}") for i in (3, 17, 40)],
                           capture_output=True, text=True, timeout=300, check=False)
        for i, line in zip((3, 17, 40), [x for x in p.stdout.splitlines() if x.startswith("{")]):
            cli_rewards[i] = json.loads(line)["reward"]
        served = {r["i"]: r.get("reward") for r in recs}
        report["cli_vs_service_rewards"] = {str(i): [cli_rewards.get(i), served.get(i)]
                                            for i in (3, 17, 40)}
    except KeyboardInterrupt:
        report["interrupted"] = True
    finally:
        for pr in reversed(procs):
            pr.terminate()
            try:
                pr.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pr.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(report))
    sys.exit(0 if report.get("ok") == report.get("evaluations") else 1)


def on_term(signum: int, frame: Any) -> None:
    # once: `timeout` signals the process group too, which must not cut the clean-up short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    os.environ.setdefault("CUDA_AGENT_LOG", "quiet")
    signal.signal(signal.SIGTERM, on_term)  # `timeout` sends it: the summary still comes
    main()
