"""Reading a run's points back from InfluxDB with the query library (``queries/``).

``nrg-collect report --influx``: :func:`open_influx` asks the server's ``/ping`` which dialect
it speaks (:func:`acquisition.queries.server_dialect`): InfluxDB 1.x and 3.x are read with
InfluxQL here (:class:`InfluxQLStore`, ``GET /query?epoch=ns``), InfluxDB 2.x with Flux
(:class:`acquisition.report.flux.FluxStore`). Both send the library's ``points`` query (every
point of the chosen measurements in a time range) or ``run_points`` (the same, of one run),
rendered by :func:`acquisition.queries.render`; other tag filters are applied here, and the
summary is computed from the points exactly as from files.

JSON numbers do not say int or float: through InfluxQL, a field written as a float whose
value is whole comes back as an int, which changes no figure of the summary.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any, Final

from acquisition.errors import NrgError
from acquisition.point import FieldValue, Point
from acquisition.queries import ALL, ParamValue, QueryError, load_query, render, server_dialect
from acquisition.report.influx_target import InfluxTarget
from acquisition.store import Query, QueryStore, ScanStats

__all__ = [
    "MAX_TIME_NS",
    "InfluxQLStore",
    "LibraryStore",
    "influx_error",
    "library_query",
    "open_influx",
]

MAX_TIME_NS: Final = 2**63 - 2
"""InfluxDB's latest storable time: the end of a query with no end."""
_CUT: Final = 300


def open_influx(target: InfluxTarget, *, timeout_s: float = 5.0) -> LibraryStore:
    """The store for ``target``'s server: Flux for InfluxDB 2.x, else InfluxQL. A server whose
    version cannot be told (or that does not answer) is tried with InfluxQL, whose answer then
    says what is wrong."""
    try:
        dialect = server_dialect(target.base, timeout=timeout_s)
    except QueryError:
        dialect = "influxql"
    if dialect == "flux":
        from acquisition.report.flux import FluxStore

        return FluxStore(target)
    return InfluxQLStore(target)


def library_query(query: Query, dialect: str, *, bucket: str = "") -> str | None:
    """The rendered library query that selects ``query``'s points (a superset: the tags other
    than one ``run`` are left to :meth:`Query.matches`); None when nothing can match."""
    if query.measurements is not None and not query.measurements:
        return None
    start = max(0, query.start_ns or 0)
    stop = MAX_TIME_NS if query.end_ns is None else query.end_ns
    if dialect == "influxql" and query.end_ns is not None:
        stop -= 1  # $timeFilter's end is inclusive, Flux's range(stop:) is not
    if stop < start or (stop == start and dialect == "flux"):
        return None
    params: dict[str, ParamValue] = {
        "measurement": ALL if query.measurements is None else sorted(query.measurements),
        "timeRangeStart": start,
        "timeRangeStop": stop,
    }
    if bucket:
        params["bucket"] = bucket
    runs = query.tags.get("run")
    name = "points"
    if runs is not None and len(runs) == 1:
        name, params["run"] = "run_points", next(iter(runs))
    return render(load_query(name, dialect), params, dialect=dialect)


def influx_error(target: InfluxTarget, dialect: str, status: int, said: str) -> NrgError:
    """One line for an HTTP error status, naming the setting to fix; secrets redacted."""
    said = target.redact(said.strip())[:_CUT] or "no message"
    s = target.settings
    where = f"InfluxDB at {target.base} answered {status} ({said})"
    if status == 401:
        fix = s["token"] if dialect == "flux" else s["credentials"]
        return NrgError(f"{where}: the credentials were rejected; set {fix}")
    if status == 403:
        what = f"bucket {target.bucket!r}" if dialect == "flux" else f"{target.database!r}"
        fix = s["token"] if dialect == "flux" else s["credentials"]
        return NrgError(f"{where}: not allowed to read {what}; grant read access or change {fix}")
    if status == 404 and dialect == "flux":
        if "organization" in said.lower() and "bucket" not in said.lower():
            return NrgError(f"{where}: no organization {target.org!r}; fix {s['org']}")
        return NrgError(f"{where}: no bucket {target.bucket!r}; fix {s['bucket']}")
    return NrgError(f"{where}; check {s['url']}")


class LibraryStore(QueryStore):
    """A store that reads InfluxDB with the library's ``points``/``run_points`` query in its
    ``dialect``; subclasses fetch a rendered query's points (:meth:`_fetch`)."""

    dialect: str = "influxql"
    where: str
    """The server and database or bucket, for messages (no secret)."""
    stats: ScanStats
    bucket: str = ""

    def query(self, query: Query) -> Iterator[Point]:
        text = library_query(query, self.dialect, bucket=self.bucket)
        if text is None:
            return
        for p in self._fetch(text):
            if query.matches(p):
                self.stats.points += 1
                yield p

    def _fetch(self, text: str) -> list[Point]:
        raise NotImplementedError


class InfluxQLStore(LibraryStore):
    """Points from an InfluxDB 1.x/3.x database, with the interface of
    :class:`~acquisition.store.Store`."""

    def __init__(self, target: InfluxTarget) -> None:
        self.target = target
        self.base = target.base
        self.where = target.where("influxql")
        self.stats = ScanStats()

    def _get(self, q: str) -> dict[str, Any]:
        t = self.target
        params = {"db": t.database, "q": q, "epoch": "ns"}
        if t.retention_policy:
            params["rp"] = t.retention_policy
        headers = {}
        if t.username or t.password:
            params.update(u=t.username, p=t.password)
        elif t.token:  # InfluxDB 3.x (and 2.x's v1 API) take a token this way
            headers["Authorization"] = f"Token {t.token}"
        url = f"{self.base}/query?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=t.timeout_s) as resp:
                data: dict[str, Any] = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise influx_error(t, "influxql", exc.code, body) from None
        except OSError as exc:
            reason = t.redact(str(getattr(exc, "reason", exc)))
            raise NrgError(f"cannot reach InfluxDB at {self.base}: {reason}") from None
        errors = [r["error"] for r in data.get("results", []) if "error" in r]
        if "error" in data:
            errors.append(data["error"])
        if errors:
            said = t.redact(str(errors[0]))[:_CUT]
            fix = t.settings["database"] if "database not found" in said else t.settings["url"]
            raise NrgError(f"InfluxDB at {self.base}: {said}; check {fix}")
        return data

    def _fetch(self, text: str) -> list[Point]:
        data = self._get(text)
        points: list[Point] = []
        for series in data.get("results", [{}])[0].get("series", []):
            points.extend(_series_points(series))
        points.sort(key=lambda p: p.time_ns)
        return points


def _series_points(series: Mapping[str, Any]) -> Iterator[Point]:
    name = str(series.get("name", ""))
    tags = {str(k): str(v) for k, v in (series.get("tags") or {}).items() if v not in (None, "")}
    columns = list(series.get("columns", []))
    for row in series.get("values", []):
        record = dict(zip(columns, row, strict=True))
        time_ns = int(record.pop("time"))
        fields: dict[str, FieldValue] = {
            k: v
            for k, v in record.items()
            if v is not None and isinstance(v, int | float | str | bool)
        }
        if fields:
            yield Point(name, dict(tags), fields, time_ns)
