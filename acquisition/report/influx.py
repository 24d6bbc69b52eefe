"""Reading a run's points back from InfluxDB through InfluxQL (InfluxDB 1.x, and 3.x's v1 API).

``nrg-collect report --influx http://HOST:8086/DATABASE``: the database is the URL's path; user
and password come from ``NRG_INFLUX_USER`` / ``NRG_INFLUX_PASSWORD`` (or the URL's
``user:password@``). Queries are raw selections (``SELECT * FROM "m" WHERE time … AND "run" = '…'
GROUP BY *``) through ``GET /query?epoch=ns``; the summary is computed here from the points,
exactly as from files. The server's dialect is checked first (``/ping``'s
``X-Influxdb-Version``): InfluxDB 2.x, a Flux server, is refused with :data:`INFLUX_FLUX_ONLY`.

JSON numbers do not say int or float: a field written as a float whose value is whole comes back
as an int, which changes no figure of the summary.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from acquisition.errors import NrgError
from acquisition.point import FieldValue, Point
from acquisition.queries import QueryError, server_dialect
from acquisition.store import Query, ScanStats

__all__ = ["INFLUX_FLUX_ONLY", "INFLUX_NO_DATABASE", "InfluxQLStore"]

INFLUX_NO_DATABASE = (
    "--influx {url}: name the database as the URL's path, e.g. http://host:8086/nrg"
)
INFLUX_FLUX_ONLY = (
    "--influx {url}: this server is InfluxDB 2.x, which is queried with Flux; report and "
    "compare read runs back with InfluxQL, from InfluxDB 1.x or from InfluxDB 3.x through its "
    "v1 API. On InfluxDB 2.x, the Flux queries in queries/ serve Grafana and `influx query`"
)


def _ident(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class InfluxQLStore:
    """Points from an InfluxDB 1.x database, with the interface of :class:`~acquisition.store.Store`."""

    def __init__(self, url: str, *, timeout_s: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(url)
        database = parts.path.strip("/")
        if not database:
            raise NrgError(INFLUX_NO_DATABASE.format(url=url))
        self.database = database
        self.base = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        self.user = os.environ.get("NRG_INFLUX_USER", parts.username or "")
        self.password = os.environ.get("NRG_INFLUX_PASSWORD", parts.password or "")
        self.timeout_s = timeout_s
        self.where = f"{self.base}/{database}"
        self.stats = ScanStats()

    def check_dialect(self, *, timeout_s: float = 5.0) -> None:
        """Refuse a Flux server (InfluxDB 2.x) with :data:`INFLUX_FLUX_ONLY`. A server
        whose version cannot be told is tried with InfluxQL: its answers then say what is
        wrong (unreachable, no such database, wrong password)."""
        try:
            dialect = server_dialect(self.base, timeout=timeout_s)
        except QueryError:
            return
        if dialect == "flux":
            raise NrgError(INFLUX_FLUX_ONLY.format(url=self.where))

    def _get(self, q: str) -> dict[str, Any]:
        params = {"db": self.database, "q": q, "epoch": "ns"}
        if self.user:
            params.update(u=self.user, p=self.password)
        url = f"{self.base}/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                data: dict[str, Any] = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")[:300]
            raise NrgError(f"InfluxDB at {self.base} answered {exc.code}: {body}") from exc
        except OSError as exc:
            raise NrgError(f"cannot reach InfluxDB at {self.base}: {exc}") from exc
        for result in data.get("results", []):
            if "error" in result:
                raise NrgError(f"InfluxDB at {self.base}: {result['error']}")
        if "error" in data:
            raise NrgError(f"InfluxDB at {self.base}: {data['error']}")
        return data

    def _measurements(self) -> list[str]:
        data = self._get("SHOW MEASUREMENTS")
        out: list[str] = []
        for series in data.get("results", [{}])[0].get("series", []):
            out.extend(str(v[0]) for v in series.get("values", []))
        return out

    def points(
        self,
        measurements: Iterable[str] | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        tags: Mapping[str, str | Collection[str]] | None = None,
    ) -> Iterator[Point]:
        return self.query(Query.of(measurements, start_ns=start_ns, end_ns=end_ns, tags=tags))

    def query(self, query: Query) -> Iterator[Point]:
        names = sorted(query.measurements) if query.measurements is not None else None
        if names is None:
            names = self._measurements()
        if not names:
            return
        conditions = []
        if query.start_ns is not None:
            conditions.append(f"time >= {int(query.start_ns)}")
        if query.end_ns is not None:
            conditions.append(f"time < {int(query.end_ns)}")
        for key, values in sorted(query.tags.items()):
            alts = " OR ".join(f"{_ident(key)} = {_literal(v)}" for v in sorted(values))
            conditions.append(f"({alts})")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        q = f"SELECT * FROM {', '.join(_ident(n) for n in names)}{where} GROUP BY *"
        data = self._get(q)
        points: list[Point] = []
        for series in data.get("results", [{}])[0].get("series", []):
            points.extend(_series_points(series))
        points.sort(key=lambda p: p.time_ns)
        for p in points:
            if query.matches(p):
                self.stats.points += 1
                yield p


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
