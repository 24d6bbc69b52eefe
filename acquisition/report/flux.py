"""Reading points back from InfluxDB 2.x with Flux, through influxdb-client's query API.

The library query (``points`` or ``run_points``, see :mod:`acquisition.report.influx`) is
POSTed to ``/api/v2/query`` with the target's token and org; the answer is InfluxDB's
annotated CSV (``#datatype``/``#group``/``#default`` rows, then a header and records: one
table per series and field, ``_time`` in RFC3339 with nanoseconds), read as it streams in
(``query_csv``) and decoded here, not by the client's record parser, which keeps times only to
the microsecond. Records are regrouped into :class:`~acquisition.point.Point`\\ s by
(measurement, tags, time); ``long``/``unsignedLong`` values stay ints, ``double`` floats,
``string`` strings and ``boolean`` bools. ``result``, ``table``, ``_start`` and ``_stop`` are
dropped; every other string column is a tag (empty: the series has no such tag).

influxdb-client comes with the ``influx`` extra and is imported only here.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

from acquisition.errors import NrgError, install_hint
from acquisition.point import FieldValue, Point
from acquisition.report.influx import LibraryStore, influx_error
from acquisition.report.influx_target import InfluxTarget
from acquisition.store import ScanStats

__all__ = [
    "INFLUX_NEEDS_EXTRA",
    "INFLUX_NEEDS_ORG",
    "FluxQueryError",
    "FluxStore",
    "decode_annotated_csv",
    "regroup",
    "rfc3339_ns",
]

INFLUX_NEEDS_EXTRA = f"reading from InfluxDB 2.x needs influxdb-client: {install_hint('influx')}"
INFLUX_NEEDS_ORG = "reading from InfluxDB 2.x at {url} needs its organization: set {setting}"

_DROPPED: Final = frozenset({"result", "table", "_start", "_stop"})
_RFC3339: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)\Z"
)


class FluxQueryError(ValueError):
    """The error table of a Flux answer: the query failed on the server."""


Record = tuple[str, str, tuple[tuple[str, str], ...], int, FieldValue]
"""measurement, field, sorted tags, time (Unix ns), value."""


def rfc3339_ns(text: str) -> int:
    """Unix nanoseconds of an RFC3339 time such as ``2026-01-01T00:00:00.123456789Z``, exactly."""
    m = _RFC3339.match(text)
    if m is None:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    ns = int((m.group(7) or "").ljust(9, "0"))
    zone = m.group(8)
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return (calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset) * 1_000_000_000 + ns


def _value(datatype: str, text: str) -> FieldValue:
    if datatype in ("long", "unsignedLong"):
        return int(text)
    if datatype == "double":
        return float(text)
    if datatype == "boolean":
        return text == "true"
    return text


class _Table:
    """The columns of the tables that follow one set of annotation rows."""

    def __init__(self, datatypes: list[str]) -> None:
        self.datatypes = datatypes
        self.defaults: list[str] = [""] * len(datatypes)
        self.header: list[str] | None = None
        self.tags: list[tuple[int, str]] = []

    def set_header(self, header: list[str]) -> None:
        self.header = header
        self.index = {name: i for i, name in enumerate(header) if i > 0}
        self.tags = [
            (i, name)
            for name, i in self.index.items()
            if name not in _DROPPED and not name.startswith("_") and self.datatypes[i] == "string"
        ]

    def record(self, row: list[str]) -> Record | None:
        cell = [v if v != "" else self.defaults[i] for i, v in enumerate(row)]
        ix = self.index
        if cell[ix["_value"]] == "":
            return None  # null: no value stored at this time
        value = _value(self.datatypes[ix["_value"]], cell[ix["_value"]])
        tags = tuple(sorted((name, cell[i]) for i, name in self.tags if cell[i] != ""))
        time_ns = rfc3339_ns(cell[ix["_time"]])
        return cell[ix["_measurement"]], cell[ix["_field"]], tags, time_ns, value


def decode_annotated_csv(rows: Iterable[list[str]]) -> Iterator[Record]:
    """The records of a Flux answer in annotated CSV (rows as :mod:`csv` splits them). Raises
    :class:`ValueError` with the server's words for an error table, or for rows that are not
    raw points (no ``_measurement``/``_field``/``_value``/``_time`` column)."""
    table: _Table | None = None
    for row in rows:
        if not row or row == [""]:
            continue
        head = row[0]
        if head == "#datatype":
            table = _Table(row)
        elif head == "#default" and table is not None:
            table.defaults = row
        elif head.startswith("#"):
            continue
        elif table is None:
            raise ValueError("answer without a #datatype annotation: not annotated CSV")
        elif table.header is None:
            table.set_header(row)
            if "error" in table.index:
                continue
            missing = {"_measurement", "_field", "_value", "_time"} - set(table.index)
            if missing:
                raise ValueError(f"answer without {', '.join(sorted(missing))}: not raw points")
        elif "error" in table.index:
            raise FluxQueryError(row[table.index["error"]] or "no message")
        elif (record := table.record(row)) is not None:
            yield record


def regroup(records: Iterable[Record]) -> list[Point]:
    """Points from records, fields of the same series and time together, in time order."""
    fields: dict[tuple[str, tuple[tuple[str, str], ...], int], dict[str, FieldValue]] = {}
    for measurement, name, tags, time_ns, value in records:
        fields.setdefault((measurement, tags, time_ns), {})[name] = value
    points = [Point(m, dict(tags), f, t) for (m, tags, t), f in fields.items()]
    points.sort(key=lambda p: p.time_ns)
    return points


class FluxStore(LibraryStore):
    """Points from an InfluxDB 2.x bucket, with the interface of
    :class:`~acquisition.store.Store`."""

    def __init__(self, target: InfluxTarget) -> None:
        if not target.org:
            setting = target.settings["org"]
            raise NrgError(INFLUX_NEEDS_ORG.format(url=target.base, setting=setting))
        self.target = target
        self.dialect = "flux"
        self.bucket = target.bucket
        self.where = target.where("flux")
        self.stats = ScanStats()

    def _fetch(self, text: str) -> list[Point]:
        try:
            from influxdb_client.client.influxdb_client import InfluxDBClient
            from influxdb_client.rest import ApiException
            from urllib3.exceptions import HTTPError
        except ImportError:
            raise NrgError(INFLUX_NEEDS_EXTRA) from None
        t = self.target
        timeout_ms = int(t.timeout_s * 1000)
        try:
            with InfluxDBClient(url=t.base, token=t.token, org=t.org, timeout=timeout_ms) as c:
                return regroup(decode_annotated_csv(c.query_api().query_csv(text, org=t.org)))
        except ApiException as exc:
            raise influx_error(t, "flux", int(exc.status or 0), _said(exc)) from None
        except (HTTPError, OSError) as exc:
            reason = t.redact(str(exc))
            raise NrgError(f"cannot reach InfluxDB at {t.base}: {reason}") from None
        except FluxQueryError as exc:
            said = t.redact(str(exc))[:300]
            raise NrgError(f"InfluxDB at {t.base}: the query failed: {said}") from None
        except ValueError as exc:
            said = t.redact(str(exc))[:300]
            raise NrgError(f"InfluxDB at {t.base}: cannot read its answer: {said}") from None


def _said(exc: Any) -> str:
    """The server's message of an ``ApiException`` (JSON ``message``, else the body)."""
    message = getattr(exc, "message", None)
    if message:
        return str(message)
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    return str(body or getattr(exc, "reason", "") or "")
