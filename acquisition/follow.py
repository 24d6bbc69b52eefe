"""Following a directory of ``.lp`` files that a running agent keeps writing: each read takes only
what was appended since the last one, and the files that are new since.

A :class:`Follower` remembers, per file (by device and inode, so a file renamed by rotation keeps
its place), how far it has read and the matching points so far. A file last modified well before
the start of the query (``start_ns`` less a minute of slack for a clock step) is never opened:
nothing in it can be that recent. A file that shrank was replaced and is read again from its
start; a compressed ``.lp.gz`` is read whole, once per size, and not while the ``.lp`` it is made
from still exists (the same lines would be read twice).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from acquisition.errors import NrgError
from acquisition.point import Point
from acquisition.store import (
    CHUNK_BYTES,
    NO_FILES,
    SUFFIXES,
    Query,
    Scanner,
    ScanStats,
    complete_lines,
    first_stamp,
    gzip_chunks,
)

__all__ = ["Follower"]

CLOCK_SLACK_NS = 60 * 1_000_000_000
"""How much older than the query's start a file's last change may be and still be read."""


@dataclass
class _Tail:
    """What has been read of one file."""

    path: Path
    offset: int = 0
    carry: bytes = b"\n"
    """The start of a line still being written (after the newline that ended the one before)."""
    points: list[Point] = field(default_factory=list)
    first_ns: int = 2**63
    """The timestamp of the file's first complete line: files are listed in this order."""
    signature: tuple[int, int] = (0, 0)
    """(size, mtime) of a compressed file when it was read."""


class Follower:
    """The points of ``directory`` that match ``query``, read incrementally by :meth:`points`."""

    def __init__(
        self, directory: str | os.PathLike[str], query: Query, *, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self.directory = Path(directory).expanduser()
        self.query = query
        self.chunk_bytes = chunk_bytes
        self.stats = ScanStats()
        self._scanner = Scanner(query, self.stats)
        self._tails: dict[tuple[int, int], _Tail] = {}
        self._oldest_ns = None if query.start_ns is None else query.start_ns - CLOCK_SLACK_NS

    def points(self) -> list[Point]:
        """Every matching point so far: files in time order, lines in file order."""
        seen: dict[tuple[int, int], _Tail] = {}
        for entry in self._entries():
            st = entry.stat()
            key = (st.st_dev, st.st_ino)
            tail = self._tails.get(key) or _Tail(Path(entry.path))
            tail.path = Path(entry.path)
            if entry.name.endswith(".gz"):
                self._read_compressed(tail, (st.st_size, st.st_mtime_ns))
            else:
                self._read_appended(tail, st.st_size)
            seen[key] = tail
        self._tails = seen
        ordered = sorted(seen.values(), key=lambda t: (t.first_ns, t.path.name))
        return [p for tail in ordered for p in tail.points]

    def _entries(self) -> Iterator[os.DirEntry[str]]:
        """The directory's line-protocol files worth reading."""
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.endswith(SUFFIXES)]
        except OSError as exc:
            raise NrgError(f"cannot read {self.directory}: {exc.strerror or exc}") from exc
        if not entries:
            raise NrgError(NO_FILES.format(where=self.directory))
        names = {e.name for e in entries}
        for entry in entries:
            if entry.name.endswith(".gz") and entry.name[:-3] in names:
                continue  # still being compressed from the .lp beside it
            try:
                if not entry.is_file():
                    continue
                if self._oldest_ns is not None and entry.stat().st_mtime_ns < self._oldest_ns:
                    continue
            except OSError:  # removed meanwhile (rotation, retention)
                continue
            yield entry

    def _read_appended(self, tail: _Tail, size: int) -> None:
        if size < tail.offset:  # truncated or replaced: read it again
            tail.offset, tail.carry, tail.points, tail.first_ns = 0, b"\n", [], 2**63
        if size == tail.offset:
            return
        try:
            with tail.path.open("rb") as f:
                f.seek(tail.offset)
                while data := f.read(self.chunk_bytes):
                    tail.offset += len(data)
                    self._feed(tail, data)
        except OSError:  # removed meanwhile: what was read stays until it is gone from the list
            return

    def _read_compressed(self, tail: _Tail, signature: tuple[int, int]) -> None:
        if signature == tail.signature:
            return
        fresh = _Tail(tail.path)
        try:
            with tail.path.open("rb") as f:
                for data in gzip_chunks(f, self.chunk_bytes, tail.path):
                    self._feed(fresh, data)
        except OSError:
            return
        tail.points, tail.first_ns, tail.signature = fresh.points, fresh.first_ns, signature

    def _feed(self, tail: _Tail, data: bytes) -> None:
        """Decode the complete lines of ``data`` after what ``tail`` carried over."""
        self.stats.bytes += len(data)
        buf, last, tail.carry = complete_lines(tail.carry, data)
        if not last:
            return
        if tail.first_ns == 2**63:
            tail.first_ns = first_stamp(buf[1 : last + 1])
        self._scanner.where = str(tail.path)
        tail.points.extend(self._scanner.points(buf, last))
