"""A real HTTP server on loopback whose answers a test scripts: it records every write in the
order it arrived and answers as a misbehaving InfluxDB or proxy would (echoing the request's
headers into an error body, 413 above a size, never answering, Retry-After, a slow answer).

It speaks just enough of both write APIs (``POST /api/v2/write``, ``POST /write``, ``GET /ping``)
for the sink; it is not an InfluxDB, only the other end of real HTTP connections.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Request", "ScriptedServer", "accept", "echo_headers", "hang", "limit_size"]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float = 0.0
    """When it arrived (``time.monotonic()``)."""


Answer = tuple[int, dict[str, str], bytes] | None
"""Status, headers, body; None: never answer (hold the connection until the server stops)."""
Script = Callable[[Request], Answer]


def accept(_: Request) -> Answer:
    return 204, {}, b""


def echo_headers(status: int, token_at: int = 995) -> Script:
    """Answer ``status`` with the request's headers in the body, padded so that the token
    starts at character ``token_at`` (straddling the sink's 1,000-character cut)."""

    def script(req: Request) -> Answer:
        auth = req.headers.get("Authorization", "")
        scheme = auth.split(" ", 1)[0] + " "
        pad = "p" * max(0, token_at - len("Authorization: ") - len(scheme))
        text = f"{pad}Authorization: {auth}\n" + "".join(
            f"{k}: {v}\n" for k, v in req.headers.items()
        )
        return status, {"Content-Type": "text/plain"}, text.encode()

    return script


def limit_size(max_body: int) -> Script:
    """413 for a body above ``max_body`` bytes, as a proxy with a request size limit does."""

    def script(req: Request) -> Answer:
        if len(req.body) > max_body:
            return 413, {}, b'{"message":"request entity too large"}'
        return 204, {}, b""

    return script


def hang(_: Request) -> Answer:
    return None


@dataclass
class _State:
    script: Script
    version: str
    writes: list[Request] = field(default_factory=list)
    accepted: list[Request] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        state = self.server.state
        headers = {"X-Influxdb-Version": state.version} if state.version else {}
        self._reply(204, headers, b"")

    def do_POST(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        url = urllib.parse.urlsplit(self.path)
        req = Request(
            "POST",
            url.path,
            {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()},
            dict(self.headers.items()),
            body,
            time.monotonic(),
        )
        with state.lock:
            state.writes.append(req)
            script = state.script
            delay = state.delay_s
        if delay:
            time.sleep(delay)
        answer = script(req)
        if answer is None:
            state.stopping.wait()
            return
        if answer[0] < 300:
            with state.lock:
                state.accepted.append(req)
        self._reply(*answer)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class ScriptedServer:
    """``with ScriptedServer(script) as server:`` … ``server.url``, ``server.accepted``."""

    def __init__(self, script: Script = accept, *, version: str = "") -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = _State(script, version)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll: shutdown() waits up to one poll for serve_forever to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def state(self) -> _State:
        return self._server.state

    @property
    def writes(self) -> list[Request]:
        with self.state.lock:
            return list(self.state.writes)

    @property
    def accepted(self) -> list[Request]:
        with self.state.lock:
            return list(self.state.accepted)

    def set_script(self, script: Script, delay_s: float = 0.0) -> None:
        with self.state.lock:
            self.state.script = script
            self.state.delay_s = delay_s

    def accepted_lines(self) -> list[bytes]:
        return [line for r in self.accepted for line in r.body.split(b"\n") if line]

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
