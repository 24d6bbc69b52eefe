"""A step index's reading lines as columns: what the agent's collectors sample every second.

Most lines an agent writes are readings: ``measurement,tags field=number,... time``, the same
fields on every line of a series (a GPU's driver samples, RAPL counters, the process tree). In a
step index (:mod:`acquisition.store_index`) each series of such lines is kept as columns: the
lines' times, their places among the file's other lines, and one column per field. A report then
makes their points without parsing text. Lines of any other shape (strings, booleans, escapes,
a series met only a few times) stay text, in blocks between them, and reading merges both back
into file order: a reader gets the same points, in the same order, as from the text.

A line becomes a column row only when :class:`acquisition.store.FastDecoder` (what reading the
text uses) decodes it into int and finite float fields: its row gives back that very point.
"""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from acquisition.errors import LineProtocolError
from acquisition.lineproto import decode_line
from acquisition.point import Point

__all__ = [
    "MIN_LINES",
    "ReadingSeries",
    "Readings",
    "build_points",
    "merged_points",
    "points_of",
    "series_tags",
    "split",
]

MIN_LINES = 16
"""A series with fewer lines in a file stays text (a column costs a header entry)."""
_STEP_MEASUREMENTS = (b"nrg_step,", b"nrg_energy,")
"""Step lines are the step columns' or text: never readings."""
_INT64 = (-(2**63), 2**63 - 1)
_HEAD = re.compile(rb"([A-Za-z][^ \\\n]*+(?:\\.[^ \\\n]*+)*+) ")
"""A line's ``measurement,tags`` up to the first space not escaped (a GPU's ``name`` tag has
escaped spaces)."""


@dataclass
class ReadingSeries:
    """One series of reading lines: its head (``measurement,tags`` as written), its fields'
    names and kinds (``q``: int, ``d``: float) and its columns (empty when not loaded)."""

    head: bytes
    keys: tuple[str, ...]
    kinds: str
    n: int
    time: array[int] = field(default_factory=lambda: array("q"))
    place: array[int] = field(default_factory=lambda: array("q"))
    """Each line's place among the file's other lines (text and readings), from 0."""
    values: list[array[Any]] = field(default_factory=list)
    bounds: tuple[int, int] | None = None
    """Its earliest and latest time, as its index records them."""
    increasing: bool = False
    """Whether its times only grow, as its index records it (False: not known)."""


@dataclass
class Readings:
    """A file's other lines: reading series as columns, the rest as text blocks."""

    series: list[ReadingSeries]
    text: bytes
    """The lines kept as text, each ending with a newline, in file order."""
    blocks: array[int]
    """Per run of consecutive text lines: its first line's place, its line count, its bytes."""
    lines: int
    """Other lines in all (text and readings)."""

    @classmethod
    def all_text(cls, text: bytes) -> Readings:
        """Every other line as text (an index written before readings were kept as columns)."""
        lines = text.count(b"\n")
        return cls([], text, array("q", [0, lines, len(text)] if lines else []), lines)


@functools.lru_cache(maxsize=65_536)
def series_tags(head: bytes) -> tuple[str, Mapping[str, str]] | None:
    """A head's measurement and tags (decoded once per report), None when it does not decode."""
    try:
        point = decode_line(f"{head.decode('utf-8')} x=0i 0")
    except (LineProtocolError, UnicodeDecodeError):
        return None
    return point.measurement, point.tags


def _row(point: Point) -> tuple[tuple[str, ...], str, list[int | float]] | None:
    """A decoded line's field names, kinds and values, None unless all are ints and finite
    floats."""
    kinds = []
    values: list[int | float] = []
    for value in point.fields.values():
        if type(value) is int and _INT64[0] <= value <= _INT64[1]:
            kinds.append("q")
        elif type(value) is float and math.isfinite(value):
            kinds.append("d")
        else:
            return None
        values.append(value)
    return tuple(point.fields), "".join(kinds), values


class _Building:
    """The rows of one series as lines are met."""

    def __init__(self, head: bytes, keys: tuple[str, ...], kinds: str) -> None:
        self.series = ReadingSeries(head, keys, kinds, 0)
        self.series.values = [array(k) for k in kinds]

    def add(self, place: int, time_ns: int, values: list[int | float]) -> None:
        s = self.series
        s.time.append(time_ns)
        s.place.append(place)
        for column, value in zip(s.values, values, strict=True):
            column.append(value)
        s.n += 1


def split(lines: Iterable[bytes], decode: Callable[[str], Point]) -> Readings:
    """Other lines (without their newlines, in file order) into reading columns and text;
    ``decode`` is the text reader's decoder (a line it cannot decode stays text)."""
    building: dict[tuple[bytes, tuple[str, ...], str], _Building] = {}
    kept: list[tuple[int, bytes, _Building | None]] = []
    for place, line in enumerate(lines):
        kept.append((place, line, _reading(place, line, decode, building)))
    series = [b.series for b in building.values() if b.series.n >= MIN_LINES]
    columns = {id(b) for b in building.values() if b.series.n >= MIN_LINES}
    text, blocks = _text(kept, columns)
    series.sort(key=lambda s: s.place[0])
    return Readings(series, text, blocks, len(kept))


def _reading(
    place: int,
    line: bytes,
    decode: Callable[[str], Point],
    building: dict[tuple[bytes, tuple[str, ...], str], _Building],
) -> _Building | None:
    """The series ``line`` joins as a row, None when it stays text."""
    found = _HEAD.match(line)
    if found is None or line.startswith(_STEP_MEASUREMENTS):
        return None
    head = found.group(1)
    rest = line[found.end() :]
    if b"\\" in rest or b'"' in rest or series_tags(head) is None:
        return None
    try:
        point = decode(line.decode("utf-8"))
    except (LineProtocolError, UnicodeDecodeError):
        return None
    row = _row(point)
    if row is None:
        return None
    keys, kinds, values = row
    b = building.get((head, keys, kinds))
    if b is None:
        b = building[(head, keys, kinds)] = _Building(head, keys, kinds)
    b.add(place, point.time_ns, values)
    return b


def _text(
    kept: list[tuple[int, bytes, _Building | None]], columns: set[int]
) -> tuple[bytes, array[int]]:
    """The lines not kept as columns, and their blocks."""
    parts: list[bytes] = []
    blocks = array("q")
    for place, line, b in kept:
        if b is not None and id(b) in columns:
            continue
        if blocks and blocks[-3] + blocks[-2] == place:
            blocks[-2] += 1
            blocks[-1] += len(line) + 1
        else:
            blocks.extend((place, 1, len(line) + 1))
        parts.append(line + b"\n")
    return b"".join(parts), blocks


def build_points(s: ReadingSeries) -> list[Point]:
    """The point of each row of ``s`` (its series' points share one tags mapping, as the text
    reader's do)."""
    found = series_tags(s.head)
    if found is None:  # never indexed so: a head that does not decode stays text
        raise ValueError(f"reading series {s.head!r} does not decode")
    rows = zip(*s.values, strict=True)  # a value per key on each: the index's columns
    fields = map(dict, map(zip, repeat(s.keys), rows))
    return list(map(Point, repeat(found[0]), repeat(found[1]), fields, s.time))


def points_of(
    s: ReadingSeries, points: list[Point], start: int | None, end: int | None
) -> Iterable[tuple[int, Point]]:
    """(place, point) of each row of ``s`` in [start, end) (``points``: its rows' points)."""
    if start is None and end is None:
        return zip(s.place, points, strict=True)
    lo = -(2**63) if start is None else start
    hi = 2**63 if end is None else end
    return (
        (place, point)
        for t, place, point in zip(s.time, s.place, points, strict=True)
        if lo <= t < hi
    )


def merged_points(
    readings: Readings,
    rows: Iterable[tuple[int, Point]],
    text_points: Callable[[bytes], Iterator[Point]],
    counted: Callable[[int], object],
) -> Iterator[Point]:
    """The points of ``rows`` (place, point) and of the text blocks (``text_points`` reads a
    block), in file order; ``counted`` is told how many rows there were."""
    slots: list[Point | None] = [None] * readings.lines
    n = 0
    for place, point in rows:
        slots[place] = point
        n += 1
    counted(n)
    text, blocks = readings.text, readings.blocks
    at = offset = 0
    for k in range(0, len(blocks), 3):
        place, count, size = blocks[k], blocks[k + 1], blocks[k + 2]
        yield from filter(None, slots[at:place])
        yield from text_points(text[offset : offset + size])
        offset += size
        at = place + count
    yield from filter(None, slots[at:])
