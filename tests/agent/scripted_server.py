#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat completions server: a test double, never used by the product.

    python3 tests/agent/scripted_server.py --script FILE.jsonl --log REQUESTS.jsonl [--port 0]
                                           [--expect-key KEY] [--exit-on-eof]

Listens on 127.0.0.1 and prints {"port": N} as its first stdout line. Each POST to
/v1/chat/completions (or /chat/completions) is answered with the next line of the script:

  {"message": {...}, "usage": {...}, "finish_reason": "stop"}   200, a chat.completion body
  {"status": 500, "retry_after": 1, "body": "raw text"}          an error; retry_after and body
                                                                 optional (default body: an
                                                                 OpenAI-style {"error": ...})
  {"sleep": 2.5}                                                 waits, then answers the next line
  {"raw": "not json", "repeat": 1}                               200 with raw * repeat as the body

After the last line every request gets 500 "script exhausted". Each request is appended to the
log as one JSON line: {"path", "authorization" (the header or null), "body" (parsed JSON, or the
raw text if it is not JSON), "line" (the script line answered, or null)}. With --expect-key,
requests without "Authorization: Bearer KEY" get 401 and consume no script line. Requests are
answered concurrently: a sleeping line holds its request, and the next request takes the next
unconsumed line. With --exit-on-eof the server exits when its stdin closes (so that it never
outlives a test that started it with a pipe as its stdin).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = ("/v1/chat/completions", "/chat/completions")
MAX_REQUEST = 64 << 20


class Script:
    """The script's lines, consumed one per request, and the request log (thread-safe)."""

    def __init__(self, lines: list[dict[str, Any]], log_path: str) -> None:
        self.lines = lines
        self.next = 0
        self.lock = threading.Lock()
        self.log = open(log_path, "a", encoding="utf-8")

    def take(self) -> tuple[int | None, dict[str, Any] | None]:
        with self.lock:
            if self.next >= len(self.lines):
                return None, None
            self.next += 1
            return self.next - 1, self.lines[self.next - 1]

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "scripted_error", "code": status}}).encode()


def completion(line: dict[str, Any], model: str) -> bytes:
    body: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": line["message"],
                     "finish_reason": line.get("finish_reason", "stop")}],
    }
    if "usage" in line:
        body["usage"] = line["usage"]
    return json.dumps(body).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects
    server: "Server"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
             content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout or a cap)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_REQUEST:
            self.send(413, error_body(413, "request too large"))
            self.close_connection = True
            return
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        auth = self.headers.get("Authorization")
        entry: dict[str, Any] = {"path": self.path, "authorization": auth, "body": body, "line": None}
        if self.path not in PATHS:
            self.server.script.record(entry)
            self.send(404, error_body(404, f"no such path {self.path}"))
            return
        key = self.server.expect_key
        if key is not None and auth != f"Bearer {key}":
            self.server.script.record(entry)
            self.send(401, error_body(401, "Incorrect API key provided"))
            return
        index, line = self.server.script.take()
        while line is not None and "sleep" in line:
            time.sleep(float(line["sleep"]))
            index, line = self.server.script.take()
        entry["line"] = index
        self.server.script.record(entry)
        model = body.get("model", "scripted") if isinstance(body, dict) else "scripted"
        if line is None:
            self.send(500, error_body(500, "script exhausted"))
        elif "status" in line:
            headers = {"Retry-After": str(line["retry_after"])} if "retry_after" in line else {}
            text = line["body"].encode() if "body" in line else error_body(
                int(line["status"]), f"scripted status {line['status']}")
            self.send(int(line["status"]), text, headers)
        elif "raw" in line:
            self.send(200, str(line["raw"]).encode() * int(line.get("repeat", 1)))
        else:
            self.send(200, completion(line, str(model)))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, script: Script, expect_key: str | None) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.script = script
        self.expect_key = expect_key


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True, help="JSONL file, one reply or fault per line")
    ap.add_argument("--log", required=True, help="JSONL file the requests are appended to")
    ap.add_argument("--port", type=int, default=0, help="0: any free port")
    ap.add_argument("--expect-key", default=None, help="answer 401 unless Authorization: Bearer KEY")
    ap.add_argument("--exit-on-eof", action="store_true", help="exit when stdin reaches end of file")
    args = ap.parse_args()
    with open(args.script, encoding="utf-8") as f:
        lines = [json.loads(s) for s in f if s.strip()]
    server = Server(args.port, Script(lines, args.log), args.expect_key)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    if args.exit_on_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
