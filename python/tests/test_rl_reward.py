"""The single-turn reward (cuda_agent_rl/reward.py, candidate.py) against a live `cuda-agent
serve` on CPU, and the client's retries."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fixtures.rl.live import BROKEN_KERNEL, RELU, RELU_KERNEL, make_store, service

from cuda_agent_rl import reward
from cuda_agent_rl.candidate import blocks, candidate_of
from cuda_agent_rl.client import ServiceClient, ServiceError

GOOD = f"The model:\n```python\nx = 1\n```\nand my kernel:\n```cuda\n{RELU_KERNEL}```\n"
BROKEN = f"```cuda\n{BROKEN_KERNEL}```"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("rl-reward")
    with service(tmp, make_store(tmp), token="s3cret") as u:
        yield u


def test_candidate_is_the_last_cuda_or_python_block() -> None:
    assert candidate_of(GOOD) == {"format": "native", "files": {"kernels/kernel.cu": RELU_KERNEL}}
    text = "```cuda\nA\n```\n````python\nclass ModelNew: ...\n```\n````\n```text\nno\n```"
    assert candidate_of(text) == {"format": "kernelbench",
                                  "files": {"model_new.py": "class ModelNew: ...\n```\n"}}
    assert candidate_of("no code at all") is None
    assert candidate_of("```\nplain\n```\n```cuda\nunclosed") is None
    assert blocks("```C++ x\nint a;\n```") == [("c++", "int a;\n")]


def test_compute_score_semantics(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_SERVE_TOKEN", "s3cret")
    kw = {"service_url": url}
    info = {"task_id": RELU}
    # compiles, then CPU: env.no_gpu -> not judged: 0.0 with valid 0, never -1
    s = reward.compute_score("cuda-agent/kernelbench", GOOD, RELU, info, **kw)
    assert (s["score"], s["valid"], s["reason"], s["compiled"]) == (0.0, 0, "env.no_gpu", 1)
    s = reward.compute_score("cuda-agent/kernelbench", BROKEN, RELU, info, **kw)
    assert (s["score"], s["valid"], s["reason"]) == (-1.0, 1, "build.error")
    s = reward.compute_score("cuda-agent/kernelbench", "I cannot.", RELU, None, **kw)
    assert (s["score"], s["valid"], s["reason"]) == (-1.0, 1, reward.NO_BLOCK)
    assert set(s) == {"score", "valid", "reason", "speedup_eager", "speedup_compile",
                      "compiled", "correct"}


def test_trl_reward(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_SERVE_TOKEN", "s3cret")
    monkeypatch.setenv("CUDA_AGENT_SERVE_URL", url)
    reward._clients.clear()
    completions = [[{"role": "assistant", "content": GOOD}], BROKEN, "no block"]
    out = reward.trl_reward(["p"] * 3, completions, extra_info=[{"task_id": RELU}] * 3)
    assert out == [None, -1.0, -1.0]
    reward._clients.clear()


def test_token_is_sent(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_AGENT_SERVE_TOKEN", raising=False)
    with pytest.raises(ServiceError) as e:
        ServiceClient(url).open_session({"id": RELU})
    assert e.value.status == 401
    s = ServiceClient(url, token="s3cret").open_session({"id": RELU})
    s.close()
    # an unreachable service is not a candidate's failure: reward None
    sc = reward.score_answer(GOOD, RELU, ServiceClient("http://127.0.0.1:9"), deadline_s=1)
    assert sc.reward is None and sc.reason == "service.connection"


class Busy(BaseHTTPRequestHandler):
    """Answers 429 (Retry-After 0) twice, then the idempotency key it saw each time."""

    seen: list[tuple[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n))
        Busy.seen.append((self.headers["Idempotency-Key"], body.get("idempotency_key", "")))
        if len(Busy.seen) <= 2:
            self.send_response(429)
            self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(b'{"error": {"code": "queue_full", "message": "full"}}')
            return
        data = json.dumps({"reward": 2, "reason": {"code": "ok"}, "compiled": True,
                           "correct": True, "timing": {"speedup_eager": 1.5}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_retries_429_with_the_same_key() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        c = ServiceClient(f"http://127.0.0.1:{srv.server_address[1]}")
        sc = reward.score_of_result(c.evaluate({"id": RELU}, {"format": "native", "files": {}}))
        assert (sc.reward, sc.speedup_eager, c.retries) == (2.0, 1.5, 2)
        keys = {k for pair in Busy.seen for k in pair}
        assert len(Busy.seen) == 3 and len(keys) == 1
    finally:
        srv.shutdown()
