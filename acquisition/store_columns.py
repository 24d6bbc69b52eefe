"""Reading a run's step lines from ``.lp`` files into columns
(:class:`acquisition.summary.columns.StepColumns`), every other line into points.

One compiled regex runs over each chunk (C speed) and sorts its lines three ways: a plain
``nrg_step`` line (``step``, ``samples``, ``start_time_ns``, ``end_time_ns``,
``duration_seconds``, as the training library writes them), a plain step-scope ``nrg_energy``
line (``step``, ``energy_joules`` and the attribution's optional fields in its order), or any
other line. A step line's series (``measurement,tags``) is decoded once, when first met, and
checked against the query's tags once; its values are only split off the line by the regex, and
turned into numbers column by column at the end of each chunk. Any line of another shape (other
fields or field order, escapes, strings, a value that is not a plain number) is an other line:
it is decoded as a point by :class:`acquisition.store.Scanner`, as :class:`acquisition.store.Store`
reads every line, so nothing is lost, only read the slow way.
"""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acquisition import store_readings
from acquisition.errors import LineProtocolError
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.processors.energy import parse_gpu_sample
from acquisition.store import (
    CHUNK_BYTES,
    BuiltReadings,
    FastDecoder,
    Query,
    Scanner,
    ScanStats,
    Store,
    other_lines,
    scan_file,
)
from acquisition.store_index import FileIndex, IndexedSeries, read_index
from acquisition.store_readings import ReadingSeries
from acquisition.summary.columns import (
    NONE_INT,
    DriverSamples,
    Series,
    StepColumns,
    step_series,
)

__all__ = ["LINES", "ColumnScanner", "build_index", "read_columns", "skip_pattern"]

_INT = rb"(-?\d+)i"
_FLOAT = rb"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_END = rb" (\d+)(?![^\n])"
_STEP = (
    rb"nrg_step,([^ \n\\\"]+) step="
    + _INT
    + rb"(?:,samples="
    + _INT
    + rb")?,start_time_ns="
    + _INT
    + rb",end_time_ns="
    + _INT
    + rb",duration_seconds="
    + _FLOAT
    + _END
)
_ENERGY = (
    rb"nrg_energy,([^ \n\\\"]*?,scope=step,[^ \n\\\"]*) step="
    + _INT
    + rb",energy_joules="
    + _FLOAT
    + rb"(?:,duration_seconds="
    + _FLOAT
    + rb")?(?:,mean_power_watts="
    + _FLOAT
    + rb")?(?:,error_joules="
    + _FLOAT
    + rb",error_start_joules="
    + _FLOAT
    + rb",error_end_joules="
    + _FLOAT
    + rb")?"
    + _END
)
LINES = re.compile(rb"\n(?:" + _STEP + rb"|" + _ENERGY + rb"|([^\n]*))")
"""Groups: ``nrg_step`` 1–7 (head, step, samples, start, end, duration, time), ``nrg_energy``
8–16 (head, step, energy, duration, mean power, error, error at start, at end, time), other 17."""


def lines_pattern(measurements: frozenset[str] | None, steps: bool = True) -> re.Pattern[bytes]:
    """:data:`LINES` for the lines of ``measurements`` only (None: all): the others match
    nothing, so they cost no Python call; without ``steps``, neither do plain ``nrg_step``
    lines (read already)."""
    if measurements is None and steps:
        return LINES
    names = b"|".join(re.escape(m.encode()) for m in sorted(measurements or ()))
    wanted = b"(?:" + names + b")[ ,]" if measurements is not None else b""
    step = _STEP if steps and "nrg_step" in (measurements or {"nrg_step"}) else b"(?!)" + _STEP
    on = measurements is None or "nrg_energy" in measurements
    energy = _ENERGY if on else b"(?!)" + _ENERGY
    plain_step = b"" if steps else b"(?!" + re.sub(rb"\((?!\?)", b"(?:", _STEP) + b")"
    other = (
        b"(" + plain_step + wanted + b"[^\n]*)"
        if names or measurements is None
        else b"(?!)([^\n]*)"
    )
    return re.compile(b"\n(?:" + step + b"|" + energy + b"|" + other + b")")


_OTHER = 16


_TAGS = rb"(?>(?:[^ ,\n]*+,)*?"
"""Any tags up to the one named after it (tags are sorted), tag by tag, in an atomic group
closed after that tag's name: a tag is met once, so a later mismatch does not look again."""
_PLAIN = re.compile(r"[^ ,=\\\"]+")


def skip_pattern(owners: Mapping[tuple[str, str], tuple[str, str]]) -> re.Pattern[bytes] | None:
    """A regex for the step-energy lines of a rank on ``nvml`` sources other than its own GPU
    (``owners``: (host, rank) → (its GPU's source, UUID)): the join of a host with several ranks
    counts each GPU from its own rank only. None when there is nothing to skip."""
    by_host: dict[str, list[bytes]] = {}
    for (host, rank), (source, _) in sorted(owners.items()):
        kind, _, gpu = source.partition(":")
        if kind != "nvml" or not all(_PLAIN.fullmatch(v) for v in (host, rank, gpu)):
            continue
        by_host.setdefault(host, []).append(
            re.escape(rank.encode())
            + b","
            + _TAGS
            + b"scope=step,source=nvml:)(?!"
            + re.escape(gpu.encode())
            + b"[ ,])"
        )
    if not by_host:
        return None
    hosts = [
        re.escape(host.encode()) + b"," + _TAGS + b"rank=)(?:" + b"|".join(ranks) + b")"
        for host, ranks in by_host.items()
    ]
    return re.compile(b"\nnrg_energy," + _TAGS + b"host=)(?:" + b"|".join(hosts) + b")[^\n]*")


_SAMPLE_FIELDS = ("power_watts",)
"""What the summary reads of a driver sample, beside its time."""


class _Samples:
    """A run's driver samples (``gpu_sample`` with a power) into :class:`DriverSamples`
    columns."""

    def __init__(self, columns: StepColumns) -> None:
        self.columns = columns
        self._of: dict[int, tuple[Mapping[str, str], DriverSamples]] = {}

    def series(self, s: ReadingSeries, measurement: str, tags: Mapping[str, str]) -> bool:
        """An indexed series, whole (its every line has a power, or none has)."""
        if measurement != "gpu_sample" or "power_watts" not in s.keys:
            return False
        k = s.keys.index("power_watts")
        watts = s.values[k] if s.kinds[k] == "d" else array("d", map(float, s.values[k]))
        self.columns.add_samples(DriverSamples(tags, s.time, watts, s.bounds, s.increasing))
        return True

    def points(self, points: Iterable[Point]) -> Iterator[Point]:
        """``points`` less the driver samples with a power, which are kept."""
        for p in points:
            if p.measurement != "gpu_sample" or (found := parse_gpu_sample(p)) is None:
                yield p
                continue
            tags = p.tags
            known = self._of.get(id(tags))
            if known is None or known[0] is not tags:
                known = self._of[id(tags)] = (tags, DriverSamples(tags, array("q"), array("d")))
                self.columns.samples.append(known[1])
            known[1].time.append(p.time_ns)
            known[1].watts.append(found[1])
            self.columns.lines += 1


def _int_or_none(values: tuple[bytes, ...]) -> list[int]:
    if all(values):
        return list(map(int, values))
    return [int(v) if v else NONE_INT for v in values]


def _float_or_nan(values: tuple[bytes, ...]) -> list[float]:
    if all(values):
        return list(map(float, values))
    return [float(v) if v else math.nan for v in values]


class ColumnScanner:
    """A :class:`acquisition.store.ChunkReader` that keeps the step lines of ``query`` in
    ``columns`` and yields the other lines' points."""

    def __init__(
        self,
        query: Query,
        stats: ScanStats,
        skip: re.Pattern[bytes] | None = None,
        steps: bool = True,
        decoded: dict[bytes, Point] | None = None,
        built: BuiltReadings | None = None,
        samples: bool = False,
    ) -> None:
        self.query = query
        self.skip = skip
        self.pattern = lines_pattern(query.measurements, steps)
        self.stats = stats
        self.where = ""
        self.bad_logged = False
        self.others = Scanner(query, stats, decoded, built)
        self.built = built
        self.steps = steps
        self.columns = StepColumns(skipped=skip is not None)
        self.samples = _Samples(self.columns) if samples else None
        """Driver samples go into ``columns.samples``, not points."""
        self.next_order = 0
        """The file order of the next step line (counting the lines of indexed files)."""
        self._heads: tuple[dict[bytes, _Pending], dict[bytes, _Pending]] = ({}, {})

    def points(self, buf: bytes, limit: int) -> Iterator[Point]:
        self.others.where, self.others.bad_logged = self.where, self.bad_logged
        other: list[bytes] = []
        n = first = self.next_order
        if self.skip is not None:  # at C speed: no Python call per line left out
            buf = self.skip.sub(b"", buf[:limit])
            limit = len(buf)
        steps, energy = self._heads
        for groups in self.pattern.findall(buf, 0, limit):
            head = groups[0]
            if head:
                pending = steps.get(head) or self._pending(0, head)
            elif head := groups[7]:
                pending = energy.get(head) or self._pending(1, head)
            else:
                other.append(groups[_OTHER])
                continue
            if pending is not _SKIP:
                pending.rows.append(groups)
                pending.order.append(n)
                n += 1
        self.columns.lines += n - first
        self.next_order = n
        if n > first:
            self._flush()
        points = self.others.wanted(other)
        yield from points if self.samples is None else self.samples.points(points)
        self.bad_logged = self.others.bad_logged

    def keeps(self, s: ReadingSeries, measurement: str, tags: Mapping[str, str]) -> bool:
        """Whether a reading series of an index goes into the columns instead of points."""
        q = self.query
        if self.samples is None or q.start_ns is not None or q.end_ns is not None:
            return False
        if not self.samples.series(s, measurement, tags):
            return False
        self.stats.points += s.n
        return True

    def indexed(self, path: Path) -> Iterator[Point] | None:
        """What :meth:`points` reads of ``path``, from its step index (None: no valid one)."""
        index = read_index(path, self._wants, self._wants_reading)
        return None if index is None else self._from_index(index)

    def _wants_reading(self, head: bytes) -> bool | tuple[str, ...]:
        """Whether the query may want lines of an indexed reading series; of driver samples
        kept as columns (:meth:`keeps`), their times and power only."""
        if not self.others.wants_reading(head):
            return False
        q = self.query
        if self.samples is None or q.start_ns is not None or q.end_ns is not None:
            return True
        found = store_readings.series_tags(head)
        return _SAMPLE_FIELDS if found is not None and found[0] == "gpu_sample" else True

    def _wants(self, kind: int, head: bytes) -> bool:
        """Whether the query keeps an indexed series (as the text's regexes would)."""
        if kind == 0 and not self.steps:
            return False
        known = self._heads[kind].get(head)
        if known is not None:
            return known is not _SKIP
        if kind == 1 and self.skip is not None and self.skip.match(b"\nnrg_energy," + head + b" "):
            return False
        return self._pending(kind, head) is not _SKIP

    def _from_index(self, index: FileIndex) -> Iterator[Point]:
        base = self.next_order
        for indexed in index.series:
            if len(indexed) and self._wants(indexed.kind, indexed.head):
                _extend(self._heads[indexed.kind][indexed.head].series, indexed, base)
                self.columns.lines += len(indexed)
                self.stats.points += len(indexed)
        self.next_order = base + index.step_lines
        yield from other_lines(self, index)

    def _pending(self, kind: int, head: bytes) -> _Pending:
        series = self._series(kind, head)
        pending = _SKIP if series is None else _Pending(series)
        self._heads[kind][head] = pending
        return pending

    def _series(self, kind: int, head: bytes) -> Series | None:
        """A new series of step lines, or None when the query does not want it."""
        measurement = ("nrg_step", "nrg_energy")[kind]
        q = self.query
        if q.measurements is not None and measurement not in q.measurements:
            return None  # before decoding its tags: a run's step-energy heads are thousands
        tags = _head_tags(measurement, head)
        if tags is None or not q.wants_series(measurement, tags):
            return None
        return self.columns.add(step_series(measurement, tags))

    def _flush(self) -> None:
        """The chunk's rows into their series' columns."""
        for pending in (*self._heads[0].values(), *self._heads[1].values()):
            if pending is _SKIP or not pending.rows:
                continue
            series, rows = pending.series, pending.rows
            series.bounds = None  # times read from text: worked out when asked
            cols = list(zip(*rows, strict=True))
            series.order.extend(pending.order)
            if series.measurement == "nrg_step":
                series.step.extend(map(int, cols[1]))
                for ints, values in zip(series.ints, cols[2:5], strict=True):
                    ints.extend(_int_or_none(values))
                series.floats[0].extend(map(float, cols[5]))
                series.time.extend(map(int, cols[6]))
            else:
                series.step.extend(map(int, cols[8]))
                for floats, values in zip(series.floats, cols[9:15], strict=True):
                    floats.extend(_float_or_nan(values))
                series.time.extend(map(int, cols[15]))
            self.stats.points += len(rows)
            pending.rows = []
            pending.order = array("q")


@dataclass(eq=False)
class _Pending:
    """A series and the rows of the chunk being read, before they are turned into numbers."""

    series: Series
    rows: list[tuple[bytes, ...]] = field(default_factory=list)
    order: array[int] = field(default_factory=lambda: array("q"))


_SKIP: Any = _Pending(Series("", {}))
"""The rows of a series the query does not want (never kept)."""


@functools.lru_cache(maxsize=65_536)
def _head_tags(measurement: str, head: bytes) -> Mapping[str, str] | None:
    """The tags of a step line's head (decoded once for every read of a report), None when it
    does not decode."""
    try:
        return decode_line(f"{measurement},{head.decode('utf-8')} x=0i 0").tags
    except (LineProtocolError, UnicodeDecodeError):
        return None


def _extend(series: Series, indexed: IndexedSeries, base: int) -> None:
    step, time, order, *values = indexed.arrays
    if not len(series):  # the index's arrays themselves, not a copy
        n_ints = len(series.ints)
        series.step, series.time = step, time
        series.order = array("q", map(base.__add__, order)) if base else order
        series.ints, series.floats = values[:n_ints], values[n_ints:]
        series.bounds = indexed.bounds
        return
    known, new = series.bounds, indexed.bounds
    series.bounds = (min(known[0], new[0]), max(known[1], new[1])) if known and new else None
    series.step.extend(step)
    series.time.extend(time)
    series.order.extend(array("q", map(base.__add__, order)) if base else order)
    n_ints = len(series.ints)
    for ints, more in zip(series.ints, values[:n_ints], strict=True):
        ints.extend(more)
    for floats, more in zip(series.floats, values[n_ints:], strict=True):
        floats.extend(more)


class _Lines:
    """Stands in for a :class:`ColumnScanner`'s other-line reader: keeps the lines as they are."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.where = ""
        self.bad_logged = False

    def wanted(self, lines: Iterable[bytes]) -> Iterator[Point]:
        self.lines.extend(lines)
        return iter(())


def build_index(path: Path) -> FileIndex:
    """The step index of one data file (see :mod:`acquisition.store_index`)."""
    stats = ScanStats()
    scanner = ColumnScanner(Query(), stats)
    lines = _Lines()
    scanner.others = lines  # type: ignore[assignment]
    for _ in scan_file(path, scanner, CHUNK_BYTES):
        pass
    series = [
        IndexedSeries(
            kind,
            head,
            [p.series.step, p.series.time, p.series.order, *p.series.ints, *p.series.floats],
        )
        for kind, heads in enumerate(scanner._heads)
        for head, p in heads.items()
        if p is not _SKIP and len(p.series)
    ]
    series.sort(key=lambda s: s.arrays[2][0])  # by first line, as a text read meets them
    other = store_readings.split(lines.lines, FastDecoder().decode)
    return FileIndex(stats.bytes, scanner.next_order, series, other, stats.torn_lines > 0)


def read_columns(
    store: Store,
    query: Query,
    skip: re.Pattern[bytes] | None = None,
    steps: bool = True,
    samples: bool = False,
) -> tuple[list[Point], StepColumns]:
    """The points of ``query`` in ``store``, less its step lines, and those lines as columns
    (less the lines ``skip`` matches: see :func:`skip_pattern`; without ``steps``, less the
    plain ``nrg_step`` lines too; with ``samples``, the driver samples with a power as columns
    too)."""
    if query.start_ns is not None or query.end_ns is not None:
        return list(store.query(query)), StepColumns()
    scanner = ColumnScanner(query, store.stats, skip, steps, store.decoded, store.built, samples)
    points = list(store.scan(scanner))
    return points, scanner.columns
