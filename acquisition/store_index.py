"""Step indexes: a finished ``.lp`` file's step lines as columns, beside the file.

A distributed run writes about eleven step lines per rank and step (``nrg_step`` and its
step-scope ``nrg_energy`` per source); reading them back as text costs most of a report's time.
The file sink writes, for each file it has finished, ``<name>.lp.idx``: the plain step lines
(those :data:`acquisition.store_columns.LINES` reads as columns) as binary arrays per series,
the file's reading lines (the collectors' samples: :mod:`acquisition.store_readings`) as columns
too, and every other line as text (zlib-compressed). A report reads the index instead of
the file, and gets the same points and columns (:class:`acquisition.store_columns.ColumnScanner`).

The ``.lp`` file stays the data; the index is a cache of it. It is used only while it matches
the file (the file's size when indexed; for a ``.lp.gz`` file, the size recorded in its gzip
trailer), else ignored (the file is read as text). Deleting indexes loses nothing;
``nrg-collect index DIR`` writes them for files written elsewhere.

Layout: ``NRGIDX1\\n``, a 4-byte little-endian header length, the JSON header, then each
series' arrays (``step``, ``time``, ``order``, then its int and float columns; 8 bytes per value,
in the byte order of the machine that wrote it: another machine reads the file instead), each
reading series' arrays (``time``, ``place``, then one per field), the text blocks (3 values
each), then the text lines. Version 1 (no reading columns) is still read.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import mmap
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acquisition.store_readings import Readings, ReadingSeries
from acquisition.summary.columns import strictly_increasing

__all__ = [
    "INDEX_SUFFIX",
    "FileIndex",
    "IndexedSeries",
    "data_size",
    "index_files",
    "index_path",
    "main",
    "read_index",
    "write_index",
]

log = logging.getLogger("nrg.store")

MAGIC = b"NRGIDX1\n"
INDEX_SUFFIX = ".idx"
_HEAD = struct.Struct("<I")
ARRAYS = (7, 9)
"""Arrays per series, by kind: ``nrg_step`` (step, time, order, 3 ints, 1 float) and step
energy (step, time, order, 6 floats)."""
INTS = (6, 3)
"""Of those, how many hold ints (typecode ``q``); the rest hold floats (``d``)."""


@dataclass
class IndexedSeries:
    """One series of step lines: its kind (0: ``nrg_step``, 1: step energy), its line head
    (``measurement,tags`` after the measurement's comma, as bytes) and its columns."""

    kind: int
    head: bytes
    arrays: list[array[Any]] = field(default_factory=list)
    bounds: tuple[int, int] | None = None
    """Its earliest and latest time (recorded by the writer: no pass over them to read)."""

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0


@dataclass
class FileIndex:
    """What an index holds of one data file."""

    content_bytes: int
    """The data's size, uncompressed, when it was indexed."""
    step_lines: int
    """Plain step lines in the file (the ``order`` values run from 0 to this)."""
    series: list[IndexedSeries]
    other: Readings
    """Every other line: reading columns and text."""
    torn: bool = False
    """The file ended in a line without its newline (left out, as reading it does)."""
    where: str = ""
    """The data file's path, when read from its index."""


def index_path(data: Path) -> Path:
    """The index of ``data`` (``x.lp`` and ``x.lp.gz`` both: ``x.lp.idx``)."""
    return data.with_name(data.name.removesuffix(".gz") + INDEX_SUFFIX)


def data_size(data: Path) -> int | None:
    """The size of ``data``'s content: its size, or for gzip the trailer's (modulo 2**32)."""
    try:
        if not data.name.endswith(".gz"):
            return data.stat().st_size
        with data.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            return int(struct.unpack("<I", f.read(4))[0])
    except (OSError, struct.error):
        return None


def _matches(recorded: int, data: Path) -> bool:
    size = data_size(data)
    if size is None:
        return False
    return size == (recorded % 2**32 if data.name.endswith(".gz") else recorded)


def write_index(data: Path, index: FileIndex) -> Path:
    """Write ``index`` beside ``data``, aside then renamed (a reader never sees half of it)."""
    absent = [_absent(s) for s in index.series]
    other = index.other
    header = {
        "version": 2,
        "source": data.name,
        "content_bytes": index.content_bytes,
        "step_lines": index.step_lines,
        "byteorder": sys.byteorder,
        "torn": index.torn,
        "series": [
            {
                "kind": s.kind,
                "head": s.head.decode("utf-8"),
                "n": len(s),
                "absent": gone,
                **({"lo": min(s.arrays[1]), "hi": max(s.arrays[1])} if len(s) else {}),
            }
            for s, gone in zip(index.series, absent, strict=True)
        ],
        "readings": [_reading_entry(r) for r in other.series],
        "other_lines": other.lines,
        "blocks": len(other.blocks) // 3,
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    target = index_path(data)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            f.write(MAGIC + _HEAD.pack(len(head)) + head)
            for s, gone in zip(index.series, absent, strict=True):
                for k, a in enumerate(s.arrays):
                    if k not in gone:
                        a.tofile(f)
            for r in other.series:
                for a in (r.time, r.place, *r.values):
                    a.tofile(f)
            other.blocks.tofile(f)
            f.write(zlib.compress(other.text, 1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


_NONE = (array("q", [-(2**63)]), array("d", [math.nan]))
"""An absent value in an int and a float column (as :mod:`acquisition.summary.columns` has it)."""


def _absent(s: IndexedSeries) -> list[int]:
    """The columns of ``s`` with no value on any line (not written: filled in when read)."""
    n = len(s)
    return [
        k
        for k, a in enumerate(s.arrays)
        if k >= 3 and n and a.tobytes() == _NONE[a.typecode == "d"].tobytes() * n
    ]


def read_index(data: Path, wanted: Any = None, readings: Any = None) -> FileIndex | None:
    """The index of ``data`` when there is one and it matches the file, else None (a damaged
    one is logged). ``wanted(kind, head)`` says which step series to load and
    ``readings(head)`` which reading series (default: all), or which of its fields (a collection
    of names: its times and those only, when it has them all); the others come back empty."""
    path = index_path(data)
    try:
        st = path.stat()
        header = _header(str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        if not _matches(header.content_bytes, data):
            return None  # the file changed since it was indexed: read it as text
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            index = _body(mm, header, wanted, readings)
        index.where = str(data)
        return index
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, struct.error, zlib.error) as exc:
        log.warning("%s: unreadable step index, reading the file itself (%s)", path, exc)
        return None


@dataclass
class _Entry:
    kind: int
    head: bytes
    n: int
    absent: list[int]
    bounds: tuple[int, int] | None


@dataclass
class _Header:
    content_bytes: int
    step_lines: int
    torn: bool
    entries: list[_Entry]
    readings: list[ReadingSeries]
    """The reading series, without their columns."""
    other_lines: int | None
    """None: a version 1 index (its other lines all text)."""
    blocks: int
    start: int
    """Where the arrays begin."""


@functools.lru_cache(maxsize=256)
def _header(path: str, ino: int, size: int, mtime_ns: int) -> _Header:
    """An index's header, parsed once per version of the file (a report reads it several
    times)."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + _HEAD.size)
        if head[: len(MAGIC)] != MAGIC:
            raise ValueError("not an nrg step index")
        (n,) = _HEAD.unpack(head[len(MAGIC) :])
        header = json.loads(f.read(n))
    if header["version"] not in (1, 2):
        raise ValueError(f"index version {header['version']} (this nrg reads 1 and 2)")
    if header["byteorder"] != sys.byteorder:
        raise ValueError(f"written on a {header['byteorder']}-endian machine")
    return _Header(
        int(header["content_bytes"]),
        int(header["step_lines"]),
        bool(header["torn"]),
        [_entry(e) for e in header["series"]],
        [_reading(r) for r in header.get("readings", [])],
        header.get("other_lines"),
        int(header.get("blocks", 0)),
        len(head) + n,
    )


def _entry(e: dict[str, Any]) -> _Entry:
    absent = [int(k) for k in e.get("absent", [])]
    bounds = (int(e["lo"]), int(e["hi"])) if "lo" in e and "hi" in e else None
    entry = _Entry(int(e["kind"]), str(e["head"]).encode("utf-8"), int(e["n"]), absent, bounds)
    if entry.kind not in (0, 1) or entry.n < 0:
        raise ValueError(f"bad series entry {e!r}")
    return entry


def _reading_entry(r: ReadingSeries) -> dict[str, Any]:
    """A reading series' header entry: with its earliest and latest time and whether its times
    only grow, so that a reader knows them without a pass."""
    entry = {"head": r.head.decode("utf-8"), "keys": r.keys, "kinds": r.kinds, "n": r.n}
    if len(r.time):
        entry |= {"lo": min(r.time), "hi": max(r.time), "up": strictly_increasing(r.time)}
    return entry


def _reading(r: dict[str, Any]) -> ReadingSeries:
    keys, kinds = tuple(str(k) for k in r["keys"]), str(r["kinds"])
    if len(keys) != len(kinds) or set(kinds) - {"q", "d"} or int(r["n"]) < 0:
        raise ValueError(f"bad reading series {r!r}")
    series = ReadingSeries(str(r["head"]).encode("utf-8"), keys, kinds, int(r["n"]))
    if "lo" in r and "hi" in r:
        series.bounds = (int(r["lo"]), int(r["hi"]))
    series.increasing = r.get("up") is True
    return series


def _body(mm: mmap.mmap, header: _Header, wanted: Any, readings: Any) -> FileIndex:
    pos = header.start
    series = []
    for s in header.entries:
        stored = (ARRAYS[s.kind] - len(s.absent)) * s.n * 8
        if pos + stored > len(mm):
            raise ValueError("cut short")
        if wanted is not None and not wanted(s.kind, s.head):  # left unread: an empty series
            series.append(IndexedSeries(s.kind, s.head))
        else:
            series.append(IndexedSeries(s.kind, s.head, _arrays(s, mm, pos), s.bounds))
        pos += stored
    other, pos = _readings(mm, header, pos, readings)
    other.text = zlib.decompress(mm[pos:])
    if header.other_lines is None:
        other = Readings.all_text(other.text)
    return FileIndex(header.content_bytes, header.step_lines, series, other, header.torn)


def _readings(mm: mmap.mmap, header: _Header, pos: int, wanted: Any) -> tuple[Readings, int]:
    """The reading series (those ``wanted(head)`` loaded, the others empty) and text blocks
    stored from ``pos`` on, and where the text begins."""
    series = []
    for r in header.readings:
        stored = (2 + len(r.kinds)) * r.n * 8
        if pos + stored > len(mm):
            raise ValueError("cut short")
        s = ReadingSeries(r.head, r.keys, r.kinds, r.n, bounds=r.bounds, increasing=r.increasing)
        want = True if wanted is None else wanted(r.head)
        if want:
            _load(s, mm, pos, want)
        series.append(s)
        pos += stored
    blocks = _column(mm, pos, 3 * header.blocks, "q")
    pos += len(blocks) * 8
    return Readings(series, b"", blocks, header.other_lines or 0), pos


def _load(s: ReadingSeries, mm: mmap.mmap, pos: int, want: Any) -> None:
    """The columns of ``s`` stored from ``pos`` on; ``want`` naming fields that ``s`` has: its
    times and those fields' columns only (the others, and its places, left empty: a run's
    driver samples are read for their power alone)."""
    kinds = "qq" + s.kinds
    only = None if want is True else set(want)
    if only is None or not only <= set(s.keys):
        s.time, s.place, *s.values = (
            _column(mm, pos + k * s.n * 8, s.n, kind) for k, kind in enumerate(kinds)
        )
        return
    s.time = _column(mm, pos, s.n, "q")
    s.values = [
        _column(mm, pos + k * s.n * 8, s.n, kinds[k]) if key in only else array(kinds[k])
        for k, key in enumerate(s.keys, start=2)
    ]


def _column(mm: mmap.mmap, pos: int, n: int, kind: str) -> array[Any]:
    if pos + n * 8 > len(mm):
        raise ValueError("cut short")
    a: array[Any] = array(kind)
    a.frombytes(mm[pos : pos + n * 8])
    return a


def _arrays(s: _Entry, mm: mmap.mmap, pos: int) -> list[array[Any]]:
    """The columns of one series stored from ``pos`` on."""
    arrays = []
    for k in range(ARRAYS[s.kind]):
        none = _NONE[k >= INTS[s.kind]]
        if k in s.absent:
            arrays.append(none * s.n)
            continue
        a: array[Any] = array(none.typecode)
        a.frombytes(mm[pos : pos + s.n * 8])
        pos += s.n * 8
        arrays.append(a)
    return arrays


def _nothing(*_: Any) -> bool:
    return False


def index_files(where: Sequence[str | os.PathLike[str]], force: bool = False) -> tuple[int, int]:
    """Index every ``.lp``/``.lp.gz`` file of ``where`` (directories or files) that has no
    valid index yet (``force``: all of them); (indexed, already indexed)."""
    from acquisition.store import lp_files
    from acquisition.store_columns import build_index

    done = skipped = 0
    for data in lp_files(where):
        if not force and read_index(data, _nothing, _nothing) is not None:
            skipped += 1
            continue
        try:
            write_index(data, build_index(data))
        except OSError as exc:
            raise OSError(f"cannot index {data}: {exc.strerror or exc}") from exc
        done += 1
    return done, skipped


def main(argv: Sequence[str] | None = None) -> int:
    """``nrg-collect index [PATH ...] [--force]``."""
    from acquisition.errors import NrgError
    from acquisition.paths import data_dir

    ap = argparse.ArgumentParser(
        prog="nrg-collect index",
        description="Write step indexes beside .lp files (the file sink does so for the files it "
        "finishes): reports of distributed runs read them instead of the text.",
    )
    ap.add_argument("paths", nargs="*", help="directories or files (default: the data directory)")
    ap.add_argument("--force", action="store_true", help="rewrite indexes that are still valid")
    ap.add_argument("--nice", action="store_true", help=argparse.SUPPRESS)  # the file sink's
    args = ap.parse_args(argv)
    if args.nice:
        os.nice(10)
    try:
        done, skipped = index_files(args.paths or [data_dir()], args.force)
    except (NrgError, OSError) as exc:
        print(f"nrg-collect index: {exc}", file=sys.stderr)
        return 1
    print(f"indexed {done} file(s); {skipped} already indexed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
