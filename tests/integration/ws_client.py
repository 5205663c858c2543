"""A minimal WebSocket client (RFC 6455, stdlib only) for the tests of `cuda-agent serve`'s /ws
endpoint: the opening handshake, masked text frames out, frames in (continuations joined,
pings answered), and raw bytes for the malformed-frame checks."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
from typing import Any
from urllib.parse import urlsplit

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WSClosed(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(f"closed by the server (code {code})")
        self.code = code


class WS:
    def __init__(self, url: str, timeout: float = 300.0,
                 headers: dict[str, str] | None = None) -> None:
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall((f"GET {u.path or '/ws'} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"{extra}\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("no handshake answer")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, v in
                        (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.accept_ok = self.headers.get("sec-websocket-accept") == want

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    @staticmethod
    def frame(payload: bytes, opcode: int = 1, fin: bool = True, mask: bool = True) -> bytes:
        n = len(payload)
        head = bytes([(0x80 if fin else 0) | opcode])
        m = 0x80 if mask else 0
        if n < 126:
            head += bytes([m | n])
        elif n < 65536:
            head += bytes([m | 126]) + struct.pack(">H", n)
        else:
            head += bytes([m | 127]) + struct.pack(">Q", n)
        if not mask:
            return head + payload
        key = os.urandom(4)
        return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))

    def send(self, msg: dict[str, Any]) -> None:
        self.send_raw(self.frame(json.dumps(msg).encode()))

    def _need(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WSClosed(None)
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self) -> tuple[int, bool, bytes]:
        b0, b1 = self._need(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._need(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._need(8))[0]
        return b0 & 0x0F, bool(b0 & 0x80), self._need(n)

    def recv(self) -> dict[str, Any]:
        parts = b""
        while True:
            op, fin, payload = self.recv_frame()
            if op == 8:
                raise WSClosed(struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None)
            if op == 9:
                self.send_raw(self.frame(payload, opcode=10))
                continue
            if op in (1, 0):
                parts += payload
                if fin:
                    return dict(json.loads(parts))

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.send(msg)
        return self.recv()

    def close(self) -> None:
        try:
            self.send_raw(self.frame(struct.pack(">H", 1000), opcode=8))
        except OSError:
            pass
        self.sock.close()
