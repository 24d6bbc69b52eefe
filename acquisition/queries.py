"""The query library: questions about nrg data in Flux (InfluxDB 2) and InfluxQL (InfluxDB 1.x, 3.x).

Each question is a pair of files in ``queries/``: ``<name>.flux`` and ``<name>.influxql``, each
starting with a one-line comment that says what it answers. They are written the way Grafana
runs them: Flux reads ``v.timeRangeStart``, ``v.timeRangeStop``, ``v.windowPeriod`` and
``v.defaultBucket``; InfluxQL uses ``$timeFilter`` and ``$__interval``; both name dashboard
variables as ``$experiment`` inside string literals and ``/^$host$/`` inside regular-expression
literals (a multi-value variable there becomes an alternation, as Grafana formats it).

:func:`render` fills the same placeholders outside Grafana, so the command line runs the very
text the dashboards run. :func:`server_dialect` picks the dialect from the ``X-Influxdb-Version``
header of the server's ``/ping``.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "ALL",
    "DIALECTS",
    "QueryError",
    "available",
    "describe",
    "load_query",
    "queries_dir",
    "render",
    "server_dialect",
]

Dialect = Literal["flux", "influxql"]
DIALECTS: Final[tuple[Dialect, ...]] = ("flux", "influxql")
_SUFFIX: Final[dict[str, str]] = {"flux": ".flux", "influxql": ".influxql"}
_COMMENT: Final[dict[str, str]] = {"flux": "//", "influxql": "--"}

ALL: Final = "*"
"""A variable's value meaning every value (Grafana's "All"): matches anything, even a missing tag."""

ENV_QUERIES_DIR: Final = "NRG_QUERIES_DIR"

MSG_NO_LIBRARY: Final = "query library not found: looked in {where} (set NRG_QUERIES_DIR)"
MSG_BAD_NAME: Final = "invalid query name {name!r}: use lowercase letters, digits and _"
MSG_UNKNOWN_QUERY: Final = "no {dialect} query named {name!r} in {where}; known: {known}"
MSG_BAD_DIALECT: Final = "unknown query dialect {dialect!r}: use 'flux' or 'influxql'"
MSG_MISSING_PARAM: Final = "query needs parameter {name!r} (given: {given})"
MSG_LIST_IN_STRING: Final = (
    "parameter {name!r} has several values but stands in a string literal: give one value"
)
MSG_PING_FAILED: Final = "cannot ask {url} for its version: {error}"
MSG_UNKNOWN_VERSION: Final = (
    "{url}/ping names no InfluxDB version I know (X-Influxdb-Version: {version!r}); "
    "pass the dialect explicitly: 'flux' for InfluxDB 2, 'influxql' for InfluxDB 1.x and 3.x"
)


class QueryError(ValueError):
    """A query that cannot be loaded or filled in, with a message for the user."""


ParamValue = str | int | float | Sequence[str] | datetime

_NAME = re.compile(r"^[a-z0-9_]+$")
# One pass over the text, so that a filled-in value is never read again as a placeholder:
# /^$name$/ fills a regular-expression literal (Grafana's multi-value form); $name, ${name},
# ${name:format} and [[name]] are Grafana's other variable syntaxes.
_PLACEHOLDER = re.compile(
    r"/\^\$(?P<regex>\w+)\$/|\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)"
)
_BUILTIN_PREFIX = "__"
# Escaped in a value put into a regular-expression literal: RE2's (Go, Rust) metacharacters and
# the literal's delimiter; RE2 rejects escapes of other characters, so re.escape will not do.
_REGEX_META = re.compile(r"[\\.+*?()|\[\]{}^$/]")
_TIME_KEYS = ("timeRangeStart", "timeRangeStop")


def queries_dir() -> Path:
    """The library's folder: ``$NRG_QUERIES_DIR``, else the ``queries`` package installed beside
    :mod:`acquisition` (in a source checkout: its ``queries/``)."""
    env = os.environ.get(ENV_QUERIES_DIR)
    where = Path(env) if env else Path(__file__).resolve().parent.parent / "queries"
    if not where.is_dir():
        raise QueryError(MSG_NO_LIBRARY.format(where=where))
    return where


def available(dialect: str | None = None) -> list[str]:
    """Names of the library's queries (those with both twins when no dialect is given)."""
    where = queries_dir()
    names = [{p.stem for p in where.glob(f"*{_SUFFIX[d]}")} for d in _dialects(dialect)]
    return sorted(set.intersection(*names))


def load_query(name: str, dialect: str) -> str:
    """The text of library query ``name`` in ``dialect`` (``"flux"`` or ``"influxql"``)."""
    (d,) = _dialects(dialect)
    if not _NAME.match(name):
        raise QueryError(MSG_BAD_NAME.format(name=name))
    where = queries_dir()
    path = where / f"{name}{_SUFFIX[d]}"
    if not path.is_file():
        known = ", ".join(available(d)) or "none"
        raise QueryError(MSG_UNKNOWN_QUERY.format(dialect=d, name=name, where=where, known=known))
    return path.read_text(encoding="utf-8")


def describe(query: str) -> str:
    """The one-line description from the query's leading comment."""
    first = query.lstrip().splitlines()[0] if query.strip() else ""
    for prefix in _COMMENT.values():
        if first.startswith(prefix):
            return first[len(prefix) :].strip()
    return ""


def render(query: str, params: Mapping[str, ParamValue], *, dialect: str | None = None) -> str:
    """Fill a library query's Grafana placeholders from ``params``.

    ``timeRangeStart``/``timeRangeStop`` (``datetime`` or Unix ns) bound the query,
    ``windowPeriod`` (an InfluxQL/Flux duration such as ``"10s"``) sets the aggregation window,
    ``bucket`` the Flux bucket (default ``"nrg"``). Any other name fills ``$name``: a string in a
    string literal (quoted safely), a string or list in ``/^$name$/`` (escaped and joined as an
    alternation; :data:`ALL` matches everything).
    """
    (d,) = _dialects(dialect or _guess_dialect(query))
    text = _PLACEHOLDER.sub(lambda m: _fill(m, params, d), query)
    return _with_v_record(text, params) if d == "flux" else text


def server_dialect(url: str, *, timeout: float = 5.0) -> Dialect:
    """``"flux"`` for InfluxDB 2.x, ``"influxql"`` for 1.x and 3.x, from ``GET {url}/ping``."""
    base = url.rstrip("/")
    request = urllib.request.Request(f"{base}/ping", method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            version = response.headers.get("X-Influxdb-Version", "")
    except urllib.error.HTTPError as e:  # some servers answer /ping with an error status
        version = e.headers.get("X-Influxdb-Version", "")
        if not version:
            raise QueryError(MSG_PING_FAILED.format(url=base, error=e)) from e
    except (urllib.error.URLError, OSError) as e:
        raise QueryError(MSG_PING_FAILED.format(url=base, error=e)) from e
    return _dialect_of_version(base, version)


def _dialect_of_version(url: str, version: str) -> Dialect:
    v = version.strip().lower().lstrip("v")
    if v.startswith(("1.", "3.")) or v in ("1", "3"):
        return "influxql"
    if v.startswith("2.") or v == "2" or "cloud" in v:
        return "flux"
    raise QueryError(MSG_UNKNOWN_VERSION.format(url=url, version=version))


def _dialects(dialect: str | None) -> tuple[Dialect, ...]:
    if dialect is None:
        return DIALECTS
    for d in DIALECTS:
        if d == dialect:
            return (d,)
    raise QueryError(MSG_BAD_DIALECT.format(dialect=dialect))


def _guess_dialect(query: str) -> str:
    head = query.lstrip()
    if head.startswith("--") or head[:6].upper() in ("SELECT", "SHOW T", "SHOW M", "SHOW F"):
        return "influxql"
    return "flux"


def _param(name: str, params: Mapping[str, ParamValue]) -> ParamValue:
    if name not in params:
        raise QueryError(MSG_MISSING_PARAM.format(name=name, given=", ".join(sorted(params))))
    return params[name]


def _regex_slot(name: str, params: Mapping[str, ParamValue]) -> str:
    value = _param(name, params)
    values = [value] if isinstance(value, str | int | float) else list(value)  # type: ignore[arg-type]
    if any(v == ALL for v in values) or not values:
        return "/^.*$/"
    escaped = [_REGEX_META.sub(r"\\\g<0>", str(v)) for v in values]
    return "/^(" + "|".join(escaped) + ")$/"


def _fill(match: re.Match[str], params: Mapping[str, ParamValue], dialect: str) -> str:
    if match.group("regex"):
        return _regex_slot(match.group("regex"), params)
    name = match.group("braced") or match.group("old") or match.group("plain")
    if name == "timeFilter" and dialect == "influxql":
        return _time_filter(params)
    if name in ("__interval", "interval"):
        return _duration(params)
    if name.startswith(_BUILTIN_PREFIX):
        return match.group(0)
    value = _param(name, params)
    if isinstance(value, datetime):
        value = _rfc3339(value)
    if not isinstance(value, str | int | float):
        raise QueryError(MSG_LIST_IN_STRING.format(name=name))
    text = str(value).replace("\\", "\\\\")
    return text.replace('"', '\\"') if dialect == "flux" else text.replace("'", "\\'")


def _duration(params: Mapping[str, ParamValue]) -> str:
    value = params.get("windowPeriod", "1m")
    if isinstance(value, int | float):
        return f"{max(1, round(value * 1000))}ms"
    if not isinstance(value, str) or not re.fullmatch(r"(\d+(ns|us|µs|ms|s|m|h|d|w))+", value):
        raise QueryError(f"windowPeriod must be a duration such as '10s', not {value!r}")
    return value


def _instant(params: Mapping[str, ParamValue], key: str) -> str:
    value = _param(key, params)
    if isinstance(value, datetime):
        return _rfc3339(value)
    if isinstance(value, int) and not isinstance(value, bool):
        seconds, ns = divmod(value, 1_000_000_000)
        stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{stamp}.{ns:09d}Z"
    raise QueryError(f"{key} must be a datetime or Unix nanoseconds, not {value!r}")


def _rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        raise QueryError(f"naive datetime {value!r}: give a timezone")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time_filter(params: Mapping[str, ParamValue]) -> str:
    start, stop = (_instant(params, k) for k in _TIME_KEYS)
    return f"time >= '{start}' AND time <= '{stop}'"


def _with_v_record(text: str, params: Mapping[str, ParamValue]) -> str:
    start, stop = (_instant(params, k) for k in _TIME_KEYS)
    bucket = str(params.get("bucket", "nrg")).replace("\\", "\\\\").replace('"', '\\"')
    record = (
        f"v = {{timeRangeStart: {start}, timeRangeStop: {stop}, "
        f'windowPeriod: {_duration(params)}, defaultBucket: "{bucket}"}}'
    )
    lines = text.split("\n")
    after_imports = max(
        (i + 1 for i, line in enumerate(lines) if line.lstrip().startswith("import ")), default=0
    )
    lines.insert(after_imports, record)
    return "\n".join(lines)
