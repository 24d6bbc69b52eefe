"""Real database servers for tests, started on free loopback ports as children of the test process.

- :class:`VictoriaMetrics` (Debian ``victoria-metrics``): takes ``/api/v2/write`` unchanged; read
  back with ``/api/v1/export`` after ``/internal/force_flush``; ``rows_invalid`` and
  ``rows_ignored`` are its silent-drop counters from ``/metrics``.
- :class:`Influxd` (Debian ``influxdb`` 1.6): InfluxDB's own storage and error semantics, with
  authentication on; it has no ``/api/v2/write``, hence
- :class:`V2Translator`: a test-owned HTTP proxy that does what InfluxDB 1.8's v2 compatibility
  endpoint does: ``POST /api/v2/write?bucket=db[/rp]&precision=P`` with ``Authorization: Token
  user:password`` becomes ``POST /write?db=db&rp=rp&precision=P&u=user&p=password``; status, headers
  and body pass through, except that a "field type conflict" 400 becomes 422 as in InfluxDB 2.x.
  It can also answer the next writes itself (:meth:`V2Translator.answer_next`) with 429/503 and
  ``Retry-After``, which influxd 1.6 never sends but InfluxDB Cloud and proxies do.

See ../shared/test-servers.md for how these servers behave.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Influxd", "V2Translator", "VictoriaMetrics", "free_port", "have"]


def have(binary: str) -> bool:
    return shutil.which(binary) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status in (200, 204):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{what} not ready at {url} after 30 s")


class _Server:
    binary = ""
    proc: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """SIGTERM by pid and wait (SIGKILL after 10 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class VictoriaMetrics(_Server):
    binary = "victoria-metrics"

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._earlier: dict[str, float] = {}

    def start(self) -> None:
        """Start (again, on the same port and data) and wait for ``/health``."""
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"-storageDataPath={self.data_dir}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=100y",
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-loggerLevel=WARN",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ready(f"{self.url}/health", self.proc, "victoria-metrics")

    def stop(self) -> None:
        """Stop, keeping the drop counters of this process (a restart starts them at 0)."""
        if self.running:
            for name, value in self.counters().items():
                self._earlier[name] = self._earlier.get(name, 0.0) + value
        super().stop()

    def total_counters(self) -> dict[str, float]:
        """The drop counters over every start of this server."""
        now = self.counters() if self.running else {}
        names = {"vm_rows_invalid_total", "vm_rows_ignored_total"}
        return {n: self._earlier.get(n, 0.0) + now.get(n, 0.0) for n in sorted(names)}

    def counters(self) -> dict[str, float]:
        """``vm_rows_invalid_total`` and ``vm_rows_ignored_total`` of the running process,
        summed over their labels."""
        _, body = _http("GET", f"{self.url}/metrics")
        out = {"vm_rows_invalid_total": 0.0, "vm_rows_ignored_total": 0.0}
        for line in body.decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out

    def export(self, run: str, metric_re: str = ".*") -> list[dict[str, Any]]:
        """Every series tagged ``run`` (after a forced flush): dicts with ``metric`` (labels),
        ``values`` and ``timestamps`` (ms)."""
        _http("GET", f"{self.url}/internal/force_flush")
        query = urllib.parse.urlencode(
            {
                "match[]": f'{{__name__=~"{metric_re}",run="{run}"}}',
                "start": "0",
                "end": str(int(time.time()) + 3 * 86400),
            }
        )
        status, body = _http("GET", f"{self.url}/api/v1/export?{query}")
        assert status == 200, body
        return [json.loads(line) for line in body.decode().splitlines() if line.strip()]

    def points(self, run: str, metric: str) -> list[tuple[int, float]]:
        """(ms timestamp, value) pairs of one metric of ``run``, over all its series, sorted."""
        pairs: list[tuple[int, float]] = []
        for series in self.export(run, metric):
            pairs.extend(zip(series["timestamps"], series["values"], strict=True))
        return sorted(pairs)


_INFLUXD_CONF = """\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"

[meta]
  dir = "{root}/meta"

[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
  query-log-enabled = false

[http]
  enabled = true
  bind-address = "127.0.0.1:{port}"
  auth-enabled = true
  log-enabled = false

[monitor]
  store-enabled = false

[continuous_queries]
  enabled = false

[logging]
  level = "warn"
"""


class Influxd(_Server):
    """influxd 1.6 with auth on; ``admin_user``/``admin_password`` may do everything."""

    binary = "influxd"
    admin_user = "admin"
    admin_password = "admin-secret"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._started = False

    def start(self) -> None:
        """Start (again, on the same port and data) and wait for ``/ping``."""
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "influxdb.conf"
        conf.write_text(_INFLUXD_CONF.format(root=self.root, port=self.port, rpc_port=free_port()))
        self.proc = subprocess.Popen(
            [self.binary, "run", "-config", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "INFLUXDB_DATA_QUERY_LOG_ENABLED": "false"},
        )
        _wait_ready(f"{self.url}/ping", self.proc, "influxd")
        if self._started:
            return
        self._started = True
        # With no user yet, influxd allows creating the first admin without credentials.
        self.query(
            f"CREATE USER {self.admin_user} WITH PASSWORD '{self.admin_password}' "
            "WITH ALL PRIVILEGES",
            auth=False,
        )

    def query(
        self, q: str, db: str = "", *, auth: bool = True, user: str = "", password: str = ""
    ) -> dict[str, Any]:
        params = {"q": q, "epoch": "ns"}
        if db:
            params["db"] = db
        if auth:
            params["u"] = user or self.admin_user
            params["p"] = password or self.admin_password
        # influxd reads credentials from the URL (or Basic auth), not from a form body.
        status, body = _http("POST", f"{self.url}/query?{urllib.parse.urlencode(params)}")
        data: dict[str, Any] = json.loads(body or b"{}")
        if status != 200 or any("error" in r for r in data.get("results", [])):
            raise RuntimeError(f"influxd query {q!r} failed: {status} {data}")
        return data

    def rows(self, q: str, db: str) -> list[dict[str, Any]]:
        """Rows of a one-statement query as dicts (column → value), in time order."""
        data = self.query(q, db)
        out: list[dict[str, Any]] = []
        for series in data["results"][0].get("series", []):
            tags = series.get("tags", {})
            for values in series["values"]:
                row = dict(zip(series["columns"], values, strict=True))
                row.update(tags)
                out.append(row)
        return out


class _TranslatorHandler(http.server.BaseHTTPRequestHandler):
    server: _TranslatorServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # /ping, /health: pass through to influxd's /ping
        self._forward("GET", "/ping", b"", {})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/api/v2/write" and self.server.faults:
            status, headers, reply = self.server.faults.pop(0)
            self.server.requests += 1
            self._reply(status, reply, headers)
            return
        if url.path != "/api/v2/write":
            self._reply(404, b'{"code":"not found","message":"path not found"}', {})
            return
        query = urllib.parse.parse_qs(url.query)
        bucket = query.get("bucket", [""])[0]
        db, _, rp = bucket.partition("/")
        params = {"db": db, "precision": {"us": "u"}.get(query.get("precision", ["ns"])[0], "ns")}
        if rp:
            params["rp"] = rp
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Token ") and ":" in auth:
            user, _, password = auth[len("Token ") :].partition(":")
            params["u"], params["p"] = user, password
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if self.headers.get("Content-Encoding"):
            headers["Content-Encoding"] = self.headers["Content-Encoding"]
        self.server.requests += 1
        self._forward("POST", "/write?" + urllib.parse.urlencode(params), body, headers)

    def _forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
            passed = {
                k: v
                for k, v in resp.getheaders()
                if k.lower() in ("content-type", "x-influxdb-error", "retry-after")
            }
        except OSError:
            self._reply(502, b'{"message":"influxd unreachable"}', {})
            return
        finally:
            conn.close()
        if status == 400 and b"field type conflict" in data:
            status = 422
        self._reply(status, data, passed)


class _TranslatorServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    upstream_port = 0
    requests = 0
    faults: list[tuple[int, dict[str, str], bytes]]


class V2Translator:
    """``/api/v2/write`` in front of an :class:`Influxd` (see the module docstring)."""

    def __init__(self, influxd: Influxd) -> None:
        self.server = _TranslatorServer(("127.0.0.1", 0), _TranslatorHandler)
        self.server.upstream_port = influxd.port
        self.server.faults = []
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def requests(self) -> int:
        return self.server.requests

    def answer_next(self, status: int, times: int, headers: dict[str, str], body: bytes) -> None:
        """Answer the next ``times`` writes with ``status`` instead of forwarding them, as an
        overloaded InfluxDB Cloud or a proxy in front of InfluxDB does (429/503 + Retry-After)."""
        self.server.faults.extend([(status, headers, body)] * times)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
