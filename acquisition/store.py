"""Reading stored points back: the file sink's ``.lp`` files (rotated and gzip-rotated included).

Source: every ``*.lp`` and ``*.lp.gz`` file of a directory (the file sink's ``dir``, by default the
per-user data directory), or the files named. Files are read in time order (by their first
timestamp), each from start to end, in 8 MiB chunks.

Scanning is fast because lines are filtered on raw bytes before anything is decoded: the wanted
measurements are found with ``bytes.find`` on ``"\\n<measurement>"`` (C speed), the time range is
checked on the line's trailing timestamp, and a tag filter on the ``key=value`` bytes; only lines
that pass are decoded (:func:`acquisition.lineproto.decode_line`) and checked exactly.

A last line without its newline is a line still being written (or torn by a crash): it is left
out and counted in ``torn_lines``. A line that does not decode is counted in ``bad_lines`` and
logged once per file. Times are Unix-epoch nanoseconds.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from acquisition.errors import LineProtocolError, NrgError
from acquisition.lineproto import decode_line
from acquisition.point import FieldValue, Point
from acquisition.store_index import FileIndex, read_index
from acquisition.store_readings import (
    ReadingSeries,
    build_points,
    merged_points,
    points_of,
    series_tags,
)

__all__ = [
    "CHUNK_BYTES",
    "NO_FILES",
    "SUFFIXES",
    "FastDecoder",
    "Query",
    "QueryStore",
    "ScanStats",
    "Scanner",
    "Store",
    "complete_lines",
    "first_stamp",
    "gzip_chunks",
    "lp_files",
    "other_lines",
    "read_points",
    "scan_file",
]

log = logging.getLogger("nrg.store")

CHUNK_BYTES = 8 * 1024 * 1024
DECODED_MAX = 250_000
"""Decoded lines a :class:`Store` remembers for its next reads (a report reads a run's power
and event lines twice: to find the run, then to load it)."""
NO_FILES = "no line-protocol files (*.lp, *.lp.gz) in {where}"
SUFFIXES = (".lp", ".lp.gz")
_SPECIAL = frozenset(' ,=\\"')
_NUMBER_START = frozenset("0123456789-+.")


@dataclass(frozen=True)
class Query:
    """What to read: measurements (None: all), a time range [start_ns, end_ns) and tags that
    must match exactly (a tag may list several accepted values)."""

    measurements: frozenset[str] | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    tags: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @staticmethod
    def of(
        measurements: Iterable[str] | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        tags: Mapping[str, str | Collection[str]] | None = None,
    ) -> Query:
        wanted = None if measurements is None else frozenset(measurements)
        norm = {
            k: frozenset([v]) if isinstance(v, str) else frozenset(v)
            for k, v in (tags or {}).items()
        }
        return Query(wanted, start_ns, end_ns, norm)

    def wants_series(self, measurement: str, tags: Mapping[str, str]) -> bool:
        """Whether the lines of a series (measurement and tags) may match, times aside."""
        if self.measurements is not None and measurement not in self.measurements:
            return False
        for k, vs in self.tags.items():  # noqa: SIM110 (a loop, as in matches)
            if tags.get(k) not in vs:
                return False
        return True

    def matches(self, point: Point) -> bool:
        if self.measurements is not None and point.measurement not in self.measurements:
            return False
        if self.start_ns is not None and point.time_ns < self.start_ns:
            return False
        if self.end_ns is not None and point.time_ns >= self.end_ns:
            return False
        tags = point.tags
        for k, vs in self.tags.items():  # noqa: SIM110 (a loop: no generator per point)
            if tags.get(k) not in vs:
                return False
        return True


@dataclass
class ScanStats:
    """Counts of one read: what was scanned, decoded, and left out (and why)."""

    files: int = 0
    bytes: int = 0
    lines_decoded: int = 0
    points: int = 0
    bad_lines: int = 0
    torn_lines: int = 0


def _is_lp(path: Path) -> bool:
    return path.name.endswith(SUFFIXES) and path.is_file()


def _first_time(path: Path) -> int:
    """The timestamp of a file's first complete line (files without one sort last)."""
    try:
        with path.open("rb") as f:
            head = b""
            chunks = (
                gzip_chunks(f, 65536, path) if path.name.endswith(".gz") else iter([f.read(65536)])
            )
            for data in chunks:
                head += data
                if b"\n" in head or len(head) > 65536:
                    break
    except OSError:
        return 2**63
    return first_stamp(head)


def first_stamp(head: bytes) -> int:
    """The timestamp of the first complete line of ``head`` that has one (else 2**63)."""
    for raw in head.split(b"\n")[:-1]:
        stamp = raw.rstrip().rpartition(b" ")[2]
        if stamp.isdigit():
            return int(stamp)
    return 2**63


def lp_files(where: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The ``.lp``/``.lp.gz`` files of a directory (or the files given), in time order."""
    items = [where] if isinstance(where, str | os.PathLike) else list(where)
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            files.extend(p for p in path.iterdir() if _is_lp(p))
        elif path.is_file():
            files.append(path)
        else:
            raise NrgError(f"{path}: no such file or directory")
    if not files:
        raise NrgError(NO_FILES.format(where=", ".join(str(i) for i in items)))
    firsts = {p: _first_time(p) for p in files}
    return sorted(files, key=lambda p: (firsts[p], p.name))


def _tag_needles(tags: Mapping[str, frozenset[str]]) -> list[tuple[bytes, ...]]:
    """Byte strings one of which each wanted line must contain, per tag (empty: no prefilter
    for values that line protocol would escape)."""
    out = []
    for key, values in tags.items():
        if any(c in _SPECIAL for c in key) or any(c in _SPECIAL for v in values for c in v):
            continue
        out.append(tuple(f",{key}={v}".encode() for v in values))
    return out


def _has_needles(line: bytes, needles: list[tuple[bytes, ...]]) -> bool:
    """Whether ``line`` holds one needle of each tuple (loops: cheaper than generators)."""
    for one_of in needles:
        for needle in one_of:
            if needle in line:
                break
        else:
            return False
    return True


class Scanner:
    """Finds and decodes the wanted lines of one buffer that starts with a newline."""

    def __init__(
        self,
        query: Query,
        stats: ScanStats,
        decoded: dict[bytes, Point] | None = None,
        built: BuiltReadings | None = None,
    ) -> None:
        self.query = query
        self.stats = stats
        self.decoded = decoded
        """Lines already decoded by this scanner's store (a report reads some lines twice)."""
        self.built = built
        """Reading points already built by this scanner's store, per file and series."""
        # One regex scan for every wanted measurement: the engine finds the literal newline
        # with memchr, so this runs at several GB/s (one bytes.find pass per name is slower).
        self.pattern = (
            None
            if query.measurements is None
            else re.compile(
                b"\\n((?:"
                + b"|".join(re.escape(m.encode()) for m in sorted(query.measurements))
                + b")[ ,][^\\n]*)"
            )
        )
        self.tag_needles = _tag_needles(query.tags)
        self.fast = FastDecoder()
        self.where = ""
        self.bad_logged = False

    def lines(self, buf: bytes, limit: int) -> Iterator[bytes]:
        """The candidate lines of ``buf[:limit]``, in file order."""
        if self.pattern is None:
            yield from buf[1:limit].split(b"\n")
            return
        for m in self.pattern.finditer(buf, 0, limit):
            yield m.group(1)

    def points(self, buf: bytes, limit: int) -> Iterator[Point]:
        return self.wanted(self.lines(buf, limit))

    def indexed(self, path: Path) -> Iterator[Point] | None:
        """A query without step lines reads only the other lines of a file's step index
        (:mod:`acquisition.store_index`); None: read the file."""
        wanted = self.query.measurements
        if wanted is None or "nrg_step" in wanted or "nrg_energy" in wanted:
            return None
        index = read_index(path, lambda kind, head: False, self.wants_reading)
        return None if index is None else other_lines(self, index)

    def keeps(self, s: ReadingSeries, measurement: str, tags: Mapping[str, str]) -> bool:
        return False

    def wants_reading(self, head: bytes) -> bool:
        """Whether the query may want lines of a reading series (:mod:`acquisition.store_readings`)."""
        found = series_tags(head)
        return found is not None and self.query.wants_series(*found)

    def wanted(self, lines: Iterable[bytes]) -> Iterator[Point]:
        """The points of ``lines`` that the query wants."""
        q = self.query
        start_ns, end_ns = q.start_ns, q.end_ns
        timed = start_ns is not None or end_ns is not None
        tag_needles = self.tag_needles
        for line in lines:
            if not line or line[0] == 35:  # '#'
                continue
            if tag_needles and not _has_needles(line, tag_needles):
                continue
            if timed:
                stamp = line.rpartition(b" ")[2]
                if stamp.isdigit():
                    t = int(stamp)
                    if (start_ns is not None and t < start_ns) or (
                        end_ns is not None and t >= end_ns
                    ):
                        continue
            point = self.decode(line)
            if point is not None and q.matches(point):
                self.stats.points += 1
                yield point

    def decode(self, line: bytes) -> Point | None:
        decoded = self.decoded
        if decoded is not None and (known := decoded.get(line)) is not None:
            return known
        self.stats.lines_decoded += 1
        try:
            point = self.fast.decode(line.decode("utf-8"))
            if decoded is not None and len(decoded) < DECODED_MAX:
                decoded[line] = point
            return point
        except (LineProtocolError, UnicodeDecodeError) as exc:
            self.stats.bad_lines += 1
            if not self.bad_logged:
                self.bad_logged = True
                log.warning(
                    "%s: skipped a line that is not line protocol (%s); further ones in this "
                    "file are only counted",
                    self.where,
                    exc,
                )
            return None


class FastDecoder:
    """:func:`~acquisition.lineproto.decode_line`, faster on the lines nrg writes.

    A series (``measurement,tags``) repeats on every line of it: it is decoded once by
    ``decode_line`` and remembered (up to ``max_series``); then only fields and timestamp are
    split. Anything but a line with int (``i``) and float fields (escapes outside the series,
    strings, booleans, a missing timestamp, anything malformed) goes through ``decode_line``
    itself, so both give the same points and the same errors. The points of one series after
    the first share one tags mapping (read-only, as :class:`Point` types it): a run's step
    and energy points are most of what a report reads, and a dict per point was a quarter of
    their memory."""

    def __init__(self, max_series: int = 100_000) -> None:
        self.max_series = max_series
        self._series: dict[str, tuple[str, dict[str, str]]] = {}

    def decode(self, line: str) -> Point:
        parts = _sections(line)
        if parts is None:
            return decode_line(line)
        series, text, stamp = parts
        head = self._series.get(series)
        if head is None or not stamp.isdigit():
            point = decode_line(line)
            if len(self._series) < self.max_series:
                self._series[series] = (point.measurement, dict(point.tags))
            return point
        fields = _plain_fields(text)
        if fields is None:
            return decode_line(line)
        return Point(head[0], head[1], fields, int(stamp))


_ESCAPED_HEAD = re.compile(r"(?=[^ ])([^ \\]*+(?:\\.[^ \\]*+)*+) ")
"""``measurement,tags`` up to the first space not escaped (a GPU's name has escaped spaces): a
backslash escapes the character after it, as :func:`acquisition.lineproto.decode_line` reads."""


def _sections(line: str) -> tuple[str, str, str] | None:
    """(series, fields, timestamp) of a line whose escapes (if any) are in its series only,
    else None."""
    if '"' in line:
        return None
    if "\\" not in line:
        parts = line.split(" ")
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None
    found = _ESCAPED_HEAD.match(line)
    if found is None:
        return None
    rest = line[found.end() :].split(" ")
    if len(rest) != 2 or "\\" in rest[0]:
        return None
    return found.group(1), rest[0], rest[1]


def _plain_fields(text: str) -> dict[str, FieldValue] | None:
    """Int (``i``) and finite float fields, None for anything else."""
    fields: dict[str, FieldValue] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not key or not value:
            return None
        try:
            if value[-1] == "i":
                fields[key] = int(value[:-1])
            elif value[0] in _NUMBER_START:
                x = float(value)
                if x - x != 0.0:  # inf or nan
                    return None
                fields[key] = x
            else:
                return None
        except ValueError:
            return None
    return fields


def _plain_chunks(f: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    while data := f.read(chunk_bytes):
        yield data


def gzip_chunks(f: BinaryIO, chunk_bytes: int, path: Path) -> Iterator[bytes]:
    """Decompressed data as it comes: a file cut short (still being compressed, or torn) yields
    everything before the cut; concatenated gzip members are read one after the other."""
    d = zlib.decompressobj(wbits=31)
    while raw := f.read(chunk_bytes // 4):
        while raw:
            try:
                out = d.decompress(raw)
            except zlib.error as exc:
                log.warning("%s: corrupt compressed data (%s); read what was before it", path, exc)
                return
            if out:
                yield out
            raw = b""
            if d.eof:
                raw, d = d.unused_data, zlib.decompressobj(wbits=31)
    if not d.eof and (tail := d.flush()):
        yield tail


def complete_lines(carry: bytes, data: bytes) -> tuple[bytes, int, bytes]:
    """A chunk after what the last one left over: (``carry + data``, where its complete lines
    end, 0 when none does yet; what to carry over to the next chunk, from that newline on)."""
    buf = carry + data
    last = buf.rfind(b"\n")
    if last <= 0:
        return buf, 0, buf
    return buf, last, buf[last:]


class ChunkReader(Protocol):
    """What reads the complete lines of one chunk (``buf[:limit]``, starting with a newline)."""

    stats: ScanStats
    where: str
    bad_logged: bool

    query: Query
    built: BuiltReadings | None

    def points(self, buf: bytes, limit: int) -> Iterator[Point]: ...

    def keeps(self, s: ReadingSeries, measurement: str, tags: Mapping[str, str]) -> bool:
        """Whether a reading series of an index is kept otherwise than as points."""
        ...

    def indexed(self, path: Path) -> Iterator[Point] | None:
        """What :meth:`points` would read of ``path``, from its step index; None: no index."""
        ...


def other_lines(scanner: ChunkReader, index: FileIndex) -> Iterator[Point]:
    """What ``scanner`` reads of the lines a step index keeps as readings and text, in file
    order (counted as its file's)."""
    scanner.stats.bytes += index.content_bytes
    scanner.stats.torn_lines += index.torn
    readings, q, stats = index.other, scanner.query, scanner.stats
    loaded = [
        (k, s)
        for k, s in enumerate(readings.series)
        if len(s.time) and not scanner.keeps(s, *series_tags(s.head) or ("", {}))
    ]
    rows = (
        row
        for k, s in loaded
        for row in points_of(s, _built(scanner.built, index, k), q.start_ns, q.end_ns)
    )

    def text(block: bytes) -> Iterator[Point]:
        buf = b"\n" + block
        return scanner.points(buf, len(buf) - 1)

    def counted(n: int) -> None:
        stats.points += n

    if not loaded:
        return text(readings.text)
    return merged_points(readings, rows, text, counted)


BuiltReadings = dict[tuple[str, int, int], list[Point]]
"""Per (data file, its size, reading series of its index), the points of its rows."""
BUILT_MAX = 1_000_000
"""Reading points a :class:`Store` keeps built for its next reads."""


def _built(built: BuiltReadings | None, index: FileIndex, k: int) -> list[Point]:
    """The points of reading series ``k`` of ``index``, built once per store."""
    key = (index.where, index.content_bytes, k)
    if built is not None and (known := built.get(key)) is not None:
        return known
    points = build_points(index.other.series[k])
    if built is not None and sum(map(len, built.values())) + len(points) <= BUILT_MAX:
        built[key] = points
    return points


def scan_file(path: Path, scanner: ChunkReader, chunk_bytes: int) -> Iterator[Point]:
    stats = scanner.stats
    scanner.where = str(path)
    scanner.bad_logged = False
    carry = b"\n"
    try:
        f = path.open("rb")
    except OSError as exc:
        raise NrgError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with f:
        chunks = (
            gzip_chunks(f, chunk_bytes, path)
            if path.name.endswith(".gz")
            else _plain_chunks(f, chunk_bytes)
        )
        for data in chunks:
            stats.bytes += len(data)
            buf, last, carry = complete_lines(carry, data)
            if last:
                yield from scanner.points(buf, last)
    if carry.strip():
        stats.torn_lines += 1


class QueryStore:
    """Where stored points are read with a :class:`Query`: ``points(...)`` builds the query and
    hands it to the subclass's :meth:`query`."""

    def points(
        self,
        measurements: Iterable[str] | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        tags: Mapping[str, str | Collection[str]] | None = None,
    ) -> Iterator[Point]:
        """The points of ``measurements`` (None: all) in [start_ns, end_ns) whose tags match."""
        return self.query(Query.of(measurements, start_ns=start_ns, end_ns=end_ns, tags=tags))

    def query(self, query: Query) -> Iterator[Point]:
        raise NotImplementedError


class Store(QueryStore):
    """Points of a directory of ``.lp`` files (or of the files given)."""

    def __init__(
        self,
        where: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *,
        chunk_bytes: int = CHUNK_BYTES,
        use_index: bool = True,
    ) -> None:
        self.where = where
        self.chunk_bytes = chunk_bytes
        self.use_index = use_index
        """Read a file's step index instead of the file when it has a valid one."""
        self.decoded: dict[bytes, Point] = {}
        self.built: BuiltReadings = {}
        self.stats = ScanStats()

    def files(self) -> list[Path]:
        return lp_files(self.where)

    def query(self, query: Query) -> Iterator[Point]:
        """Decoded points that match, file by file in time order, lines in file order."""
        return self.scan(Scanner(query, self.stats, self.decoded, self.built))

    def scan(self, scanner: ChunkReader) -> Iterator[Point]:
        """What ``scanner`` reads of every file, file by file in time order."""
        for path in self.files():
            self.stats.files += 1
            scanner.where, scanner.bad_logged = str(path), False
            indexed = scanner.indexed(path) if self.use_index else None
            if indexed is not None:
                yield from indexed
            else:
                yield from scan_file(path, scanner, self.chunk_bytes)


def read_points(
    where: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    measurements: Iterable[str] | None = None,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    tags: Mapping[str, str | Collection[str]] | None = None,
) -> list[Point]:
    """Every matching point of ``where`` as a list (see :class:`Store`)."""
    return list(Store(where).points(measurements, start_ns=start_ns, end_ns=end_ns, tags=tags))
