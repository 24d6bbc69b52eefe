"""A stand-in for InfluxDB 2.x's read path: ``GET /ping`` and ``POST /api/v2/query``.

No InfluxDB 2.x and no Flux engine can run on these machines (see ../shared/test-servers.md),
so the Flux reader of ``report``/``compare --influx`` is tested against this small stdlib server
at the narrowest boundary: the HTTP exchange.

- ``/ping`` answers 204 with ``X-Influxdb-Version: v2.7.11``, as InfluxDB 2.7 does.
- ``/api/v2/query`` checks the ``Authorization: Token`` header (401 with InfluxDB's JSON body
  otherwise), the ``org`` parameter and the bucket (404 with InfluxDB's messages), and that the
  posted Flux is *exactly* a library query (``queries/points.flux`` or ``run_points.flux`` of
  the source tree) as :func:`acquisition.queries.render` fills it: it reads the parameters back
  from the text, renders the library file with them and compares (400 and an entry in :attr:`errors` if not).
  Every accepted text is kept in :attr:`queries` for the Flux type checker.
- It answers what ``from |> range |> filter`` returns for those two queries: the stored points
  of the chosen measurements (and run) in [start, stop), one table per series and field, in
  InfluxDB 2.x's annotated CSV (``#datatype``/``#group``/``#default`` rows, a header, records;
  a new annotation block after an empty line when the columns or the ``_value`` type change;
  ``dateTime:RFC3339`` times with nanoseconds, trailing zeros cut as Go's RFC3339Nano does;
  ``long``/``double``/``string``/``boolean`` values; CRLF line ends).

What it proves: the request the reader sends, that its query text is the library's, the CSV
decoding and the regrouping into points. What it does not: the Flux engine's semantics of the
query, which the InfluxQL twin of each query proves against a real influxd 1.6.
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from acquisition.point import FieldValue, Point
from acquisition.queries import ALL, ParamValue, render

__all__ = ["FluxStandIn", "annotated_csv"]

VERSION = "v2.7.11"
LIBRARY = Path(__file__).resolve().parents[1] / "queries"
"""The library in the source tree: what the posted text must be (whatever NRG_QUERIES_DIR says)."""
_V = re.compile(
    r'^v = \{timeRangeStart: (\S+), timeRangeStop: (\S+), windowPeriod: \S+, defaultBucket: "(.*)"\}$',
    re.M,
)
_MEASUREMENT = re.compile(r"r\._measurement =~ /\^(.*?)\$/")
_RUN = re.compile(r'r\.run == "((?:[^"\\]|\\.)*)"')


def _ns(text: str) -> int:
    """Unix ns of an RFC3339 time as render writes it (``...T00:00:00.123456789Z``)."""
    head, _, frac = text.rstrip("Z").partition(".")
    seconds = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1_000_000_000 + int(frac.ljust(9, "0") or 0)


def rfc3339nano(ns: int) -> str:
    """Go's ``time.RFC3339Nano``: fraction without trailing zeros, none when zero."""
    seconds, frac = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def _typed(value: FieldValue) -> tuple[str, str]:
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        return "long", str(value)
    if isinstance(value, float):
        if value != value:
            return "double", "NaN"
        if value in (float("inf"), float("-inf")):
            return "double", "+Inf" if value > 0 else "-Inf"
        return "double", format(Decimal(repr(value)), "f")  # Go's 'f', -1: no exponent
    return "string", value


def annotated_csv(points: Sequence[Point], start_ns: int, stop_ns: int) -> str:
    """InfluxDB 2.x's answer to ``from |> range(start, stop) |> filter`` over ``points``."""
    tables: dict[tuple[Any, ...], list[tuple[int, str]]] = {}
    types: dict[tuple[Any, ...], str] = {}
    for p in points:
        for name, value in p.fields.items():
            key = (p.measurement, name, tuple(sorted(p.tags.items())))
            datatype, text = _typed(value)
            types[key] = datatype
            tables.setdefault(key, []).append((p.time_ns, text))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    schema: tuple[Any, ...] | None = None
    bounds = [rfc3339nano(start_ns), rfc3339nano(stop_ns)]
    for table, key in enumerate(sorted(tables)):
        measurement, field, tags = key
        tag_names = [k for k, _ in tags]
        now = (types[key], tuple(tag_names))
        if now != schema:
            if schema is not None:
                out.write("\r\n")
            schema = now
            n = len(tag_names)
            datatypes = ["long", *["dateTime:RFC3339"] * 3, types[key], "string", "string"]
            writer.writerow(["#datatype", "string", *datatypes, *["string"] * n])
            groups = ["false", "false", "true", "true", "false", "false", "true", "true"]
            writer.writerow(["#group", *groups[1:], *["true"] * n])
            writer.writerow(["#default", "_result", *[""] * (7 + n)])
            head = ["result", "table", "_start", "_stop", "_time", "_value", "_field"]
            writer.writerow(["", *head, "_measurement", *tag_names])
        for time_ns, text in sorted(tables[key]):
            row = [str(table), *bounds, rfc3339nano(time_ns), text, field, measurement]
            writer.writerow(["", "", *row, *(v for _, v in tags)])
    return out.getvalue()


class FluxStandIn:
    """Serves ``points`` (as InfluxDB 2.x stores them) from ``bucket`` of ``org``."""

    def __init__(self, points: Sequence[Point], *, token: str, org: str, bucket: str) -> None:
        self.points = list(points)
        self.token, self.org, self.bucket = token, org, bucket
        self.queries: list[str] = []
        self.errors: list[str] = []
        self.paths: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FluxStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def library_params(self, text: str) -> tuple[str, dict[str, ParamValue]]:
        """Which library query ``text`` is, and the parameters it was filled with."""
        v, measurement = _V.search(text), _MEASUREMENT.search(text)
        if v is None or measurement is None:
            raise ValueError("no v record or no measurement filter")
        names = measurement.group(1)
        params: dict[str, ParamValue] = {
            "timeRangeStart": _ns(v.group(1)),
            "timeRangeStop": _ns(v.group(2)),
            "bucket": v.group(3),
            "measurement": ALL
            if names == ".*"
            else [re.sub(r"\\(.)", r"\1", n) for n in names[1:-1].split("|")],
        }
        run = _RUN.search(text)
        if run is None:
            return "points", params
        params["run"] = re.sub(r"\\(.)", r"\1", run.group(1))
        return "run_points", params

    def answer(self, text: str) -> tuple[int, str, str]:
        """(status, content type, body) for a posted query."""
        try:
            name, params = self.library_params(text)
            if render((LIBRARY / f"{name}.flux").read_text(encoding="utf-8"), params) != text:
                raise ValueError(f"not the library query {name} as render fills it")
        except ValueError as exc:
            self.errors.append(f"{exc}: {text!r}")
            return 400, "application/json", json.dumps({"code": "invalid", "message": str(exc)})
        if params["bucket"] != self.bucket:
            message = (
                f'failed to initialize execute state: could not find bucket "{params["bucket"]}"'
            )
            return 404, "application/json", json.dumps({"code": "not found", "message": message})
        self.queries.append(text)
        start, stop = int(params["timeRangeStart"]), int(params["timeRangeStop"])  # type: ignore[arg-type]
        wanted = params["measurement"]
        chosen = [
            p
            for p in self.points
            if (wanted == ALL or p.measurement in wanted)
            and start <= p.time_ns < stop
            and ("run" not in params or p.tags.get("run") == params["run"])
        ]
        return 200, "text/csv; charset=utf-8", annotated_csv(chosen, start, stop)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _send(self, status: int, ctype: str, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("X-Influxdb-Version", VERSION)
                self.send_header("X-Influxdb-Build", "OSS")
                if data:
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                standin.paths.append(self.path)
                if urlsplit(self.path).path == "/ping":
                    self._send(204, "", "")
                else:
                    self._send(404, "application/json", '{"code":"not found"}')

            def do_POST(self) -> None:
                standin.paths.append(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                url = urlsplit(self.path)
                if url.path != "/api/v2/query":
                    self._send(404, "application/json", '{"code":"not found"}')
                elif self.headers.get("Authorization") != f"Token {standin.token}":
                    message = '{"code":"unauthorized","message":"unauthorized access"}'
                    self._send(401, "application/json", message)
                elif parse_qs(url.query).get("org") != [standin.org]:
                    said = f"organization name {parse_qs(url.query).get('org')!r} not found"
                    message = {"code": "not found", "message": said}
                    self._send(404, "application/json", json.dumps(message))
                else:
                    self._send(*standin.answer(str(body.get("query", ""))))

        return Handler


def points_by_line(points: Sequence[Point]) -> Iterator[str]:
    """The line protocol of each point (types and ns times included; fields in name order, which
    InfluxDB does not keep), for exact comparisons."""
    from acquisition.lineproto import LineEncoder

    encoder = LineEncoder()
    for p in points:
        yield encoder.encode(
            Point(p.measurement, p.tags, dict(sorted(p.fields.items())), p.time_ns)
        )
