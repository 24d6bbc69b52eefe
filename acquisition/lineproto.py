"""InfluxDB line protocol: a pure encoder (Point → text) and a strict decoder (text → Point).

Format: ``measurement[,tag=value...] field=value[,field=value...] timestamp_ns``.

Escaping, as InfluxDB 1.x/2.x/3.x parse it:
- measurement: comma, space and backslash are backslash-escaped;
- tag keys, tag values, field keys: comma, equals sign, space and backslash;
- newline, carriage return and tab, anywhere (also in string fields), become the two-character
  escapes ``\\n``, ``\\r``, ``\\t`` so one point stays one line;
- string field values are double-quoted, with ``"`` and ``\\`` escaped.
Integers get the ``i`` suffix, booleans are ``true``/``false``, floats use ``repr`` (shortest
round-trip form). NaN and ±inf, integers outside the signed 64-bit range, timestamps outside
InfluxDB's range (±9223372036854775806 ns, 1677-09-21 to 2262-04-11), an empty field set, empty
names and a measurement starting with ``#`` (a comment line) are rejected with
:class:`LineProtocolError` naming the field and the value, by the encoder and by the decoder
alike: a server would drop such a point without a word. Tags with an empty value are left out
(InfluxDB rejects them). Tag keys are sorted, as InfluxDB recommends.

The encoder caches the escaped ``measurement,tags`` prefix of each series (least recently used
first out, at most :data:`SERIES_CACHE_SIZE` series, so a long run whose pids come and go keeps a
flat memory) and the escaped form of each field key, which is what makes it several times faster
than building lines from scratch. A point of the same series as the point before it in a batch
reuses that entry at once; a tags dict that a collector keeps for its series finds its entry by
the dict's identity (an index of at most as many dicts as the series cache holds series).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from acquisition.errors import LineProtocolError, LineProtocolRangeError
from acquisition.point import FieldValue, Point

__all__ = [
    "INT_RANGE_ERROR",
    "MAX_INT",
    "MAX_TIME_NS",
    "MIN_INT",
    "MIN_TIME_NS",
    "SERIES_CACHE_SIZE",
    "TIME_RANGE_ERROR",
    "LineEncoder",
    "decode_line",
    "encode_lines",
    "encode_point",
]

_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESC_MEASUREMENT = str.maketrans({"\\": "\\\\", ",": "\\,", " ": "\\ ", **_CONTROL})
_ESC_KEY = str.maketrans({"\\": "\\\\", ",": "\\,", "=": "\\=", " ": "\\ ", **_CONTROL})
_ESC_STRING = str.maketrans({"\\": "\\\\", '"': '\\"', **_CONTROL})
_UNESCAPE_CONTROL = {"n": "\n", "r": "\r", "t": "\t"}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)

_MAX_CACHE = 4_096
"""Field keys remembered in escaped form (every collector's together are a few hundred; new ones
past this are escaped anew)."""

_MAX_SHAPES = 1_024
"""Compiled field formatters an encoder keeps (one per set of field keys and types)."""

_ID_BUDGET = 1_024
"""Insertions into the by-identity series index an encoder makes beyond the hits it has had."""

_ID_PROBE = 16
"""Insertions into the by-identity index each batch earns whatever its hits."""

SERIES_CACHE_SIZE = 16_384
"""Series (measurement + tag set) whose escaped prefix an encoder keeps, least recently used out:
about 300 bytes each, so at most ~5 MB."""

MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
"""Integer fields are signed 64-bit in line protocol (``i`` suffix)."""
MIN_TIME_NS = -9_223_372_036_854_775_806
MAX_TIME_NS = 9_223_372_036_854_775_806
"""InfluxDB's valid timestamps (ns since the Unix epoch): 1677-09-21 to 2262-04-11."""

INT_RANGE_ERROR = "field {key!r} of {measurement!r} is {value}, outside the 64-bit integer range"
"""Raised (formatted) for an integer field below ``MIN_INT`` or above ``MAX_INT``."""
TIME_RANGE_ERROR = (
    "timestamp of {measurement!r} is {value}, outside InfluxDB's range "
    "(-9223372036854775806 to 9223372036854775806 ns)"
)
"""Raised (formatted) for a timestamp outside ``MIN_TIME_NS`` … ``MAX_TIME_NS``."""


def _escape_measurement(name: str) -> str:
    if not name:
        raise LineProtocolError("measurement name is empty")
    if name[0] == "#":
        raise LineProtocolError(f"measurement {name!r} starts with '#', which marks a comment line")
    return name.translate(_ESC_MEASUREMENT)


def _escape_key(key: str, what: str) -> str:
    if not key:
        raise LineProtocolError(f"{what} is empty")
    return key.translate(_ESC_KEY)


def _int_error(measurement: str, key: str, value: int) -> LineProtocolError:
    return LineProtocolRangeError(
        INT_RANGE_ERROR.format(key=key, measurement=measurement, value=value)
    )


def _encode_value(measurement: str, key: str, value: FieldValue) -> str:
    kind = type(value)
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise LineProtocolError(
                f"field {key!r} is {value!r}; NaN and infinity cannot be written"
            )
        return repr(value)
    if kind is int:
        if not MIN_INT <= value <= MAX_INT:  # type: ignore[operator]
            raise _int_error(measurement, key, value)  # type: ignore[arg-type]
        return f"{value}i"
    if kind is bool:
        return "true" if value else "false"
    if kind is str:
        return '"' + value.translate(_ESC_STRING) + '"'  # type: ignore[union-attr]
    # Subclasses (numpy scalars, IntEnum...) take the slow path; bool has none.
    if isinstance(value, int):
        return _encode_value(measurement, key, int(value))
    if isinstance(value, float):
        return _encode_value(measurement, key, float(value))
    if isinstance(value, str):
        return _encode_value(measurement, key, str(value))
    raise LineProtocolError(f"field {key!r} has unsupported type {kind.__name__}")


def _check_time(measurement: str, t: object) -> int:
    if type(t) is not int:
        raise LineProtocolError(f"timestamp of {measurement!r} is not an int: {t!r}")
    if not MIN_TIME_NS <= t <= MAX_TIME_NS:
        raise LineProtocolRangeError(TIME_RANGE_ERROR.format(measurement=measurement, value=t))
    return t


class _Miss(Exception):
    """A point does not fit its series' compiled formatter; the general path encodes it."""


Formatter = Callable[[Mapping[str, FieldValue], int, str], str]
OnError = Callable[[Point, LineProtocolError], None]
"""Receives each point of a batch that cannot be written, with the reason."""


def _compile_formatter(fields: Mapping[str, FieldValue], escaped_keys: list[str]) -> Formatter:
    """A function writing one line for points whose fields have exactly these keys and types.

    It checks what the general path checks (types, finite floats, int64 and timestamp bounds)
    and raises :class:`_Miss` where a point differs, so its output is the general path's. The
    source holds only variable names and ``repr``'d keys; the escaped texts are bound as default
    arguments, so no field name can change the code.
    """
    env: dict[str, object] = {
        "_miss": _Miss,
        "_esc": _ESC_STRING,
        "_q": '"',
        "_lo": MIN_INT,
        "_hi": MAX_INT,
        "_tlo": MIN_TIME_NS,
        "_thi": MAX_TIME_NS,
    }
    body = [f"    if len(f) != {len(fields)}: raise _miss"]
    pieces = ["{prefix}"]
    for i, ((key, value), ek) in enumerate(zip(fields.items(), escaped_keys, strict=True)):
        env[f"k{i}"] = ("," if i else " ") + ek
        body.append(f"    v{i} = f[{key!r}]")
        kind = type(value)
        if kind is float:
            body.append(f"    if type(v{i}) is not float or v{i} - v{i} != 0.0: raise _miss")
            pieces.append(f"{{k{i}}}{{v{i}!r}}")
        elif kind is int:
            body.append(f"    if type(v{i}) is not int or not _lo <= v{i} <= _hi: raise _miss")
            pieces.append(f"{{k{i}}}{{v{i}}}i")
        elif kind is bool:
            body.append(f"    if type(v{i}) is not bool: raise _miss")
            pieces.append(f"{{k{i}}}{{'true' if v{i} else 'false'}}")
        else:  # str (the caller compiles only these four types)
            body.append(f"    if type(v{i}) is not str: raise _miss")
            pieces.append(f"{{k{i}}}{{_q}}{{v{i}.translate(_esc)}}{{_q}}")
    body.append("    if type(t) is not int or not _tlo <= t <= _thi: raise _miss")
    body.append('    return f"' + "".join(pieces) + ' {t}\\n"')
    params = ", ".join(f"{name}={name}" for name in env)
    source = f"def fmt(f, t, prefix, {params}):\n" + "\n".join(body)
    exec(source, dict(env), env)  # generated from names and repr'd keys only
    return env["fmt"]  # type: ignore[return-value]


_COMPILABLE = (float, int, bool, str)


class LineEncoder:
    """Encodes points to line protocol, caching each series' escaped prefix.

    ``default_tags`` (``host``, ``experiment``, ``run``...) are added to every point that does not
    carry the same tag itself. ``series_cache`` bounds the prefixes kept (least recently used
    out); a series that falls out is escaped again when it comes back.

    A series seen a second time also gets a compiled formatter for its fields' keys and types
    (shared by every series of that shape): one call writes the line, the same text the general
    path writes, except that a later point holding the same fields in another order gets them in
    the order of the formatter its series last used (the same point to any reader). A series
    whose fields change shape (a field present on some ticks only) switches to the formatter of
    the new shape.
    """

    def __init__(
        self,
        default_tags: Mapping[str, str] | None = None,
        *,
        series_cache: int = SERIES_CACHE_SIZE,
    ) -> None:
        self._default_tags = {k: v for k, v in (default_tags or {}).items() if v}
        self._series: Callable[[tuple[object, ...]], list[Any]] = functools.lru_cache(series_cache)(
            self._series_entry
        )
        self._field_keys: dict[str, str] = {}
        # Series entries by the identity of the tags dict (kept alive here, so its id stays its
        # own), with a copy of its items to notice a dict changed since: collectors that keep
        # one tags dict per series skip building the cache key. Fresh dicts never hit; each
        # insertion spends the budget and each hit earns it back, so they stop paying for it.
        self._by_id: dict[int, list[Any]] = {}  # [tags, measurement, copy, entry, hit]
        self._by_id_size = series_cache
        self._id_budget = _ID_BUDGET
        self._shapes: dict[tuple[object, ...], Formatter | None] = {}

    @property
    def cached_series(self) -> int:
        """How many series prefixes the encoder holds now."""
        return self._series.cache_info().currsize  # type: ignore[attr-defined, no-any-return]

    def _series_entry(self, series: tuple[object, ...]) -> list[Any]:
        """``[prefix, formatter or None, seen, the formatter's number of fields]`` for a
        ``(measurement, *tags.items())`` key."""
        measurement: str = series[0]  # type: ignore[assignment]
        return [self._prefix(measurement, dict(series[1:])), None, False, -1]  # type: ignore[arg-type]

    def _formatter(self, fields: Mapping[str, FieldValue]) -> Formatter | None:
        """The compiled formatter of this shape of fields (None: the general path)."""
        kinds = tuple(map(type, fields.values()))
        shape = (*fields, *kinds)
        if shape in self._shapes:
            return self._shapes[shape]
        if len(self._shapes) >= _MAX_SHAPES:
            return None  # a stream of ever-new shapes: the general path, nothing more kept
        fmt: Formatter | None = None
        if fields and all(k in _COMPILABLE for k in kinds):
            fmt = _compile_formatter(fields, [_escape_key(k, "field key") + "=" for k in fields])
        self._shapes[shape] = fmt
        return fmt

    def _prefix(self, measurement: str, tags: Mapping[str, str]) -> str:
        merged = dict(self._default_tags)
        merged.update(tags)
        parts = [_escape_measurement(measurement)]
        for k in sorted(merged):
            v = merged[k]
            if v == "" or v is None:
                continue
            if not isinstance(v, str):
                raise LineProtocolError(f"tag {k!r} of {measurement!r} is not a string: {v!r}")
            parts.append(f"{_escape_key(k, 'tag key')}={v.translate(_ESC_KEY)}")
        return ",".join(parts)

    def _field_key(self, key: str) -> str:
        """``key=`` escaped, remembered while there are few keys."""
        ek = _escape_key(key, "field key") + "="
        if len(self._field_keys) < _MAX_CACHE:
            self._field_keys[key] = ek
        return ek

    def encode(self, point: Point) -> str:
        """One line, without the trailing newline."""
        return self.encode_many((point,))[:-1]

    def encode_many(self, points: Iterable[Point], on_error: OnError | None = None) -> str:
        """Newline-terminated lines for a batch (the hot path).

        A point of a series seen before goes through its compiled formatter; the first point of
        a series, and any point its formatter does not fit, through :meth:`_general`. A point of
        the same series as the point before it (same measurement, equal tags) reuses that
        point's cache entry without building the cache key.

        A point that cannot be written raises :class:`LineProtocolError`; with ``on_error``, it
        is handed to ``on_error(point, error)`` instead (to count, log and keep) and the rest of
        the batch is encoded.
        """
        series = self._series
        out: list[str] = []
        put = out.append
        general = self._general
        # The previous point's series: a run of points of one series skips the cache's key.
        # Compared by value (``==``), so equal tags in fresh dicts count as the same series.
        last_tags: object = None
        last_measurement: object = None
        entry: list[Any] = []
        by_id = self._by_id
        use_id = self._id_budget > 0
        hits = 0
        for point in points:
            try:
                tags = point.tags
                measurement = point.measurement
                if measurement != last_measurement or (tags is not last_tags and tags != last_tags):
                    rec = by_id.get(id(tags)) if use_id else None
                    if (
                        rec is not None
                        and rec[0] is tags
                        and rec[1] == measurement
                        and tags == rec[2]
                    ):
                        entry = rec[3]
                        rec[4] = True
                        hits += 1
                    else:
                        entry = series((measurement, *tags.items()))
                        if use_id:
                            use_id = self._remember(measurement, tags, entry)
                    last_tags = tags
                    last_measurement = measurement
                fmt = entry[1]
                if fmt is not None:
                    fields = point.fields
                    # Another number of fields would only raise _Miss in the formatter: go
                    # straight to the formatter of this shape (no exception raised and caught).
                    if len(fields) == entry[3]:
                        try:
                            put(fmt(fields, point.time_ns, entry[0]))
                            continue
                        except (_Miss, KeyError):
                            pass
                    # Another shape of fields (a field present only on some ticks): the
                    # formatter of this shape, if it has one, serves the series from now on.
                    other = self._formatter(fields)
                    if other is not None and other is not fmt:
                        entry[1] = other
                        entry[3] = len(fields)
                        try:
                            put(other(fields, point.time_ns, entry[0]))
                            continue
                        except (_Miss, KeyError):
                            pass
                elif entry[2] is False:
                    entry[2] = True
                else:
                    entry[1] = self._formatter(point.fields)
                    entry[3] = len(point.fields)
                put(general(entry[0], point))
            except LineProtocolError as exc:
                if on_error is None:
                    raise
                on_error(point, exc)
        # Hits earn insertions back; a few more each batch keep probing after a dry spell.
        self._id_budget = min(self._id_budget + hits + _ID_PROBE, _ID_BUDGET)
        return "".join(out)

    def _remember(self, measurement: str, tags: Mapping[str, str], entry: list[Any]) -> bool:
        """Index ``entry`` by the identity of ``tags``; whether the budget allows another."""
        by_id = self._by_id
        if len(by_id) >= self._by_id_size:
            # Full: keep those used since the last time (their series stay cached even where
            # the series cache, which these hits bypass, has let them go), drop the rest.
            used = [(k, r) for k, r in by_id.items() if r[4]]
            by_id.clear()
            if len(used) < self._by_id_size // 2:
                for k, r in used:
                    r[4] = False
                    by_id[k] = r
        by_id[id(tags)] = [tags, measurement, dict(tags), entry, False]
        self._id_budget -= 1
        return self._id_budget > 0

    def _general(self, prefix: str, point: Point) -> str:
        """One line, field by field, with every check and its clear error."""
        measurement = point.measurement
        fields = point.fields
        if not fields:
            raise LineProtocolError(f"point of {measurement!r} has no fields")
        keys = self._field_keys
        parts = [prefix]
        put = parts.append
        sep = " "
        for k, v in fields.items():
            ek = keys.get(k)
            if ek is None:
                ek = self._field_key(k)
            kind = type(v)
            if kind is float:
                r = repr(v)
                if r[-1] > "9":  # 'nan', 'inf': every finite repr ends in a digit
                    _encode_value(measurement, k, v)  # raises the clear error
                put(f"{sep}{ek}{r}")
            elif kind is int:
                if not MIN_INT <= v <= MAX_INT:  # type: ignore[operator]
                    raise _int_error(measurement, k, v)  # type: ignore[arg-type]
                put(f"{sep}{ek}{v}i")
            else:
                put(f"{sep}{ek}{_encode_value(measurement, k, v)}")
            sep = ","
        t = point.time_ns
        if type(t) is not int or not MIN_TIME_NS <= t <= MAX_TIME_NS:
            _check_time(measurement, t)
        put(f" {t}\n")
        return "".join(parts)


_default_encoder = LineEncoder()


def encode_point(point: Point) -> str:
    """One line for ``point`` (module-level encoder, no default tags)."""
    return _default_encoder.encode(point)


def encode_lines(points: Iterable[Point]) -> str:
    """Newline-terminated lines for ``points``."""
    return _default_encoder.encode_many(points)


# --- decoding ---------------------------------------------------------------------------------


def _split_unescaped(text: str, sep: str, *, strings: bool = False) -> list[str]:
    """Split on ``sep`` where it is not backslash-escaped; with ``strings``, also not inside a
    double-quoted field value (a quote right after an unescaped ``=``)."""
    out: list[str] = []
    cur: list[str] = []
    i, n, quoted = 0, len(text), False
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            cur.append(text[i : i + 2])
            i += 2
            continue
        if strings and c == '"' and (quoted or (cur and cur[-1] == "=")):
            quoted = not quoted
        elif c == sep and not quoted:
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if quoted:
        raise LineProtocolError("unterminated string field")
    out.append("".join(cur))
    return out


def _split_sections(line: str) -> list[str]:
    """``series``, ``fields`` and the optional timestamp: the first unescaped space ends the
    series (quotes mean nothing there); in the fields, spaces inside string values do not count."""
    series = _split_unescaped(line, " ")
    head = series[0]
    rest = " ".join(series[1:])
    return [head, *_split_unescaped(rest, " ", strings=True)] if len(series) > 1 else [head]


def _unescaped(m: re.Match[str]) -> str:
    c = m.group(1)
    return _UNESCAPE_CONTROL.get(c, c)


def _unescape(text: str) -> str:
    """Each backslash and the character after it, left to right, as that character (``n``,
    ``r``, ``t``: the control character); a lone backslash at the end stays."""
    if "\\" not in text:
        return text
    return _ESCAPED.sub(_unescaped, text)


def _split_pair(item: str, what: str) -> tuple[str, str]:
    parts = _split_unescaped(item, "=")
    if len(parts) < 2 or not parts[0]:
        raise LineProtocolError(f"{what} {item!r} is not key=value")
    return parts[0], "=".join(parts[1:])


def _decode_int(raw: str, what: str) -> int:
    """Digits with an optional minus sign, as line protocol writes them (``int()`` alone would
    also take ``_``, ``+``, spaces and non-ASCII digits)."""
    digits = raw[1:] if raw[:1] == "-" else raw
    if not (digits.isascii() and digits.isdigit()):
        raise LineProtocolError(f"bad {what} {raw!r}")
    return int(raw)


def _decode_value(measurement: str, key: str, raw: str) -> FieldValue:
    if not raw:
        raise LineProtocolError(f"field {key!r} has an empty value")
    if raw[0] == '"':
        if len(raw) < 2 or raw[-1] != '"':
            raise LineProtocolError(f"bad string field {raw!r}")
        return _unescape(raw[1:-1])
    suffix = raw[-1]
    if suffix in "iu" and len(raw) > 1:
        value = _decode_int(raw[:-1], f"integer field {key!r}:")
        # Unsigned values are kept as nrg's (signed) integers: the same 64-bit bound holds.
        if not MIN_INT <= value <= MAX_INT or (suffix == "u" and value < 0):
            raise _int_error(measurement, key, value)
        return value
    low = raw.lower()
    if low in ("t", "true"):
        return True
    if low in ("f", "false"):
        return False
    try:
        value_f = float(raw)
    except ValueError as exc:
        raise LineProtocolError(f"bad field value {raw!r}") from exc
    if not math.isfinite(value_f):
        raise LineProtocolError(f"non-finite field value {raw!r}")
    return value_f


def _timestamp(measurement: str, sections: list[str], default_time_ns: int | None) -> int:
    if len(sections) == 3:
        return _check_time(measurement, _decode_int(sections[2], "timestamp"))
    if default_time_ns is not None:
        return default_time_ns
    raise LineProtocolError("line has no timestamp")


def _decode_plain(line: str, default_time_ns: int | None) -> Point:
    """The fast path for lines without escapes or strings (nearly all): plain ``str.split``."""
    sections = line.split(" ")
    if len(sections) not in (2, 3) or not all(sections):
        raise LineProtocolError(f"expected 'series fields [timestamp]', got {len(sections)} parts")
    measurement, *tag_items = sections[0].split(",")
    if not measurement:
        raise LineProtocolError("empty measurement")
    tags: dict[str, str] = {}
    for item in tag_items:
        k, eq, v = item.partition("=")
        if not eq or not k or "=" in v:
            raise LineProtocolError(f"tag {item!r} is not key=value")
        if not v:
            raise LineProtocolError(f"tag {k!r} has an empty value")
        tags[k] = v
    fields: dict[str, FieldValue] = {}
    for item in sections[1].split(","):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise LineProtocolError(f"field {item!r} is not key=value")
        fields[k] = _decode_value(measurement, k, v)
    return Point(measurement, tags, fields, _timestamp(measurement, sections, default_time_ns))


def decode_line(line: str, *, default_time_ns: int | None = None) -> Point:
    """Parse one line of line protocol into a Point.

    A line without a timestamp takes ``default_time_ns``; without that it is an error.
    """
    line = line.rstrip("\r\n")
    if not line or line.startswith("#"):
        raise LineProtocolError("empty or comment line")
    if "\\" not in line and '"' not in line:
        return _decode_plain(line, default_time_ns)
    sections = _split_sections(line)
    if len(sections) not in (2, 3) or not all(sections):
        raise LineProtocolError(f"expected 'series fields [timestamp]', got {len(sections)} parts")
    series = _split_unescaped(sections[0], ",")
    measurement = _unescape(series[0])
    if not measurement:
        raise LineProtocolError("empty measurement")
    tags: dict[str, str] = {}
    for item in series[1:]:
        k, v = _split_pair(item, "tag")
        if not v:
            raise LineProtocolError(f"tag {k!r} has an empty value")
        tags[_unescape(k)] = _unescape(v)
    fields: dict[str, FieldValue] = {}
    for item in _split_unescaped(sections[1], ",", strings=True):
        k, v = _split_pair(item, "field")
        key = _unescape(k)
        fields[key] = _decode_value(measurement, key, v)
    return Point(measurement, tags, fields, _timestamp(measurement, sections, default_time_ns))
