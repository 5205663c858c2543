"""A small typed client of `cuda-agent serve` (docs/service.md); standard library only.

- Base URL: the argument, else `$CUDA_AGENT_SERVE_URL`, else http://127.0.0.1:8040.
- Token: the argument, else `$CUDA_AGENT_SERVE_TOKEN` (the variable the service reads), sent as
  `Authorization: Bearer <token>` when set.
- Every request carries an `Idempotency-Key` header (a fresh UUID per logical request, kept
  across its retries); `/v1/evaluate` also gets it in the body, so a retry is answered once.
- Retries, as docs/service.md asks of a client: a 429 or 503 answer means the request was not
  carried out, so it is sent again after `Retry-After` seconds (default 5), for any request. A
  connection error (refused, reset, no answer) is retried only where repeating is harmless: the
  keyed `/v1/evaluate`, GET and DELETE. Retrying stops at the request's own deadline
  (`deadline_s`, default 900 s for evaluations and finalize, 300 s for the rest).
- Timeouts: each HTTP exchange gets the time left before that deadline.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]
DEFAULT_URL = "http://127.0.0.1:8040"
RETRY_STATUSES = (429, 503)


class ServiceError(Exception):
    """An answer that is not a success: `status` (0: no HTTP answer), `code` (the service's
    error code, or "connection"/"deadline"), and the message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Session:
    """An open agent session: its id, the prompt, the OpenAI tool schemas and the opening
    messages it answered with (the prompt is the messages' text in one string)."""

    client: ServiceClient
    session_id: str
    prompt: str
    tools: list[Json]
    messages: list[Json] = field(default_factory=list)
    closed: bool = field(default=False)

    def tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> Json:
        """Runs one tool: `{ok, output, exit_code, timed_out, seconds[, result]}`. Raises
        ServiceError: 404 unknown_tool, 400 bad_arguments, 404 not_found (session closed)."""
        return self.client.request(
            "POST", f"/v1/sessions/{self.session_id}/tools/{name}", dict(arguments or {}))

    def finalize(self, deadline_s: float = 900.0) -> Json:
        """Evaluates the workspace: `{result, reward}` (reward null for the service's own
        failures, the result's reason then `env.*`)."""
        return self.client.request(
            "POST", f"/v1/sessions/{self.session_id}/finalize", {}, deadline_s=deadline_s)

    def close(self) -> None:
        """Closes the session (a session already gone counts as closed)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.client.request("DELETE", f"/v1/sessions/{self.session_id}", deadline_s=30.0)
        except ServiceError as exc:
            if exc.status != 404 and exc.status != 0:
                raise


class ServiceClient:
    def __init__(self, base_url: str | None = None, token: str | None = None, *,
                 retry_after_default: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = (base_url or os.environ.get("CUDA_AGENT_SERVE_URL")
                         or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("CUDA_AGENT_SERVE_TOKEN")
        self.retry_after_default = retry_after_default
        self.sleep = sleep
        self.retries = 0  # retries made, all requests together

    # ---- endpoints ----------------------------------------------------------------------------

    def health(self) -> Json:
        return self.request("GET", "/v1/health", deadline_s=10.0)

    def open_session(self, task: Mapping[str, Any],
                     limits: Mapping[str, Any] | None = None) -> Session:
        """POST /v1/sessions: `task` is `{"id"}`, `{"hash"}` or `{"files"}` (docs/service.md)."""
        body: Json = {"task": dict(task)}
        if limits:
            body["limits"] = dict(limits)
        a = self.request("POST", "/v1/sessions", body)
        return Session(self, str(a["session_id"]), str(a.get("prompt", "")),
                       list(a.get("tools", [])), list(a.get("messages", [])))

    def evaluate(self, task: Mapping[str, Any], candidate: Mapping[str, Any], *,
                 mode: str = "eval", rules: str | None = None, deadline_s: float = 600.0,
                 key: str | None = None) -> Json:
        """POST /v1/evaluate: the result JSON (docs/result.md) plus `job`."""
        key = key or str(uuid.uuid4())
        body: Json = {"task": dict(task), "candidate": dict(candidate), "mode": mode,
                      "deadline_s": deadline_s, "idempotency_key": key}
        if rules:
            body["rules"] = rules
        # our own deadline: the service's, its grace (30 s), and the transfer
        return self.request("POST", "/v1/evaluate", body, key=key,
                            deadline_s=deadline_s + min(60.0, 2 * deadline_s))

    # ---- the exchange -------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Json | None = None, *,
                key: str | None = None, deadline_s: float = 300.0) -> Json:
        """One logical request, retried as the module doc says; the answer's JSON object."""
        key = key or str(uuid.uuid4())
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Idempotency-Key": key, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        retry_connection = method in ("GET", "DELETE") or path == "/v1/evaluate"
        end = time.monotonic() + deadline_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise ServiceError(0, "deadline", f"{method} {path}: no answer in {deadline_s} s")
            req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers=headers)
            wait: float
            try:
                with urllib.request.urlopen(req, timeout=left) as r:
                    return _json_object(r.read(), r.status)
            except urllib.error.HTTPError as e:
                raw = e.read()
                if e.code not in RETRY_STATUSES:
                    raise _error(e.code, raw) from None
                wait = _retry_after(e.headers.get("Retry-After"), self.retry_after_default)
                last = _error(e.code, raw)
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                reason = getattr(e, "reason", e)
                last = ServiceError(0, "connection", f"{method} {path}: {reason}")
                if not retry_connection:
                    raise last from None
                wait = 1.0
            if time.monotonic() + wait >= end:
                raise last
            self.retries += 1
            self.sleep(wait)


def _retry_after(value: str | None, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def _json_object(raw: bytes, status: int) -> Json:
    try:
        obj = json.loads(raw)
    except ValueError:
        raise ServiceError(status, "bad_answer", "the answer is not JSON") from None
    if not isinstance(obj, dict):
        raise ServiceError(status, "bad_answer", "the answer is not a JSON object")
    return obj


def _error(status: int, raw: bytes) -> ServiceError:
    try:
        err = json.loads(raw).get("error", {})
        return ServiceError(status, str(err.get("code", "")), str(err.get("message", "")))
    except (ValueError, AttributeError):
        return ServiceError(status, "", raw[:200].decode(errors="replace"))
