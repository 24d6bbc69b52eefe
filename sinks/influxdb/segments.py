"""The spool's files: segment records, their checksums, the cursor, and the writer thread's side.

Layout of a spool directory:
- ``seg-<20-digit sequence>.nrgspool``: an 8-byte magic ``NRGSPL01`` then records, each a 20-byte
  big-endian header ``length u32 | crc32 u32 | points u32 | spooled_at_ns u64`` and ``length``
  bytes of newline-terminated line protocol (UTF-8). The CRC-32 covers ``points``,
  ``spooled_at_ns`` and the payload.
- ``cursor``: ``<sequence> <offset>`` of the oldest record not yet replayed, replaced atomically
  (write, fsync per policy, rename).

Everything here but the pure functions runs on the spool's single writer thread.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HEADER",
    "MAGIC",
    "FsyncPolicy",
    "SegmentBroken",
    "SegmentFiles",
    "SpoolBatch",
    "SpoolRecord",
    "encode_record",
    "parse_fsync_policy",
    "parse_segment",
]

log = logging.getLogger("sinks.influxdb.spool")

MAGIC = b"NRGSPL01"
HEADER = struct.Struct(">IIIQ")
_SEGMENT_RE = re.compile(r"^seg-(\d{20})\.nrgspool$")
_MAX_RECORD = 1 << 31


@dataclass(frozen=True, slots=True)
class FsyncPolicy:
    """When appends reach the disk: ``interval_s`` 0 = after every record, None = never (the OS
    decides), > 0 = at most that long after an append."""

    interval_s: float | None

    def describe(self) -> str:
        if self.interval_s is None:
            return "never"
        if self.interval_s == 0:
            return "always"
        return f"every {self.interval_s:g}s"


def parse_fsync_policy(value: str | float | int) -> FsyncPolicy:
    """``"always"``, ``"never"``, a number of seconds or a duration such as ``"500ms"``/``"2s"``."""
    if isinstance(value, bool):
        raise ValueError(f"fsync must be 'always', 'never' or a duration, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        if text in ("always", "batch"):
            return FsyncPolicy(0.0)
        if text == "never":
            return FsyncPolicy(None)
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?", text)
        if match is None:
            raise ValueError(f"fsync must be 'always', 'never' or a duration, not {value!r}")
        scale = {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]
        seconds = float(match.group(1)) * scale
    if seconds < 0:
        raise ValueError(f"fsync interval must not be negative: {value!r}")
    return FsyncPolicy(seconds)


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """Where one record lies and what it holds."""

    seq: int
    offset: int
    size: int
    """Header plus payload, in bytes."""
    points: int
    spooled_at_ns: int


@dataclass(frozen=True, slots=True)
class SpoolBatch:
    """The oldest records, read for replay; :meth:`Spool.commit` removes them once delivered."""

    records: int
    points: int
    payload: bytes
    """Concatenated line protocol of the records that passed their checksum."""
    members: tuple[SpoolRecord, ...] = ()
    """The records read; :meth:`Spool.commit` removes exactly these from the head."""


def encode_record(payload: bytes, points: int, spooled_at_ns: int) -> bytes:
    """Header and payload of one record."""
    if len(payload) >= _MAX_RECORD:
        raise ValueError(f"record of {len(payload)} bytes is too large")
    tail = struct.pack(">IQ", points, spooled_at_ns)
    crc = zlib.crc32(payload, zlib.crc32(tail))
    return HEADER.pack(len(payload), crc, points, spooled_at_ns) + payload


def parse_segment(
    data: bytes, seq: int, start: int = len(MAGIC)
) -> tuple[list[SpoolRecord], int, bool]:
    """Valid records of a segment's bytes from ``start``.

    Returns the records, the offset where the valid data ends and whether a torn or corrupt
    record follows there (a short header, a length past the end, or a checksum mismatch).
    """
    records: list[SpoolRecord] = []
    pos = start
    end = len(data)
    while pos < end:
        if end - pos < HEADER.size:
            return records, pos, True
        length, crc, points, spooled_at = HEADER.unpack_from(data, pos)
        body_start = pos + HEADER.size
        if body_start + length > end:
            return records, pos, True
        view = memoryview(data)[body_start - 12 : body_start + length]
        if zlib.crc32(view) != crc:
            return records, pos, True
        records.append(SpoolRecord(seq, pos, HEADER.size + length, points, spooled_at))
        pos = body_start + length
    return records, pos, False


def _parse_skipping(
    data: bytes, seq: int, start: int
) -> tuple[list[SpoolRecord], int, bool, int, int]:
    """:func:`parse_segment`, stepping over a record whose checksum fails but whose length
    stays inside the segment when a valid record follows it (a flipped byte costs that record
    only). Also returns how many records and bytes were stepped over."""
    records: list[SpoolRecord] = []
    skipped = skipped_bytes = 0
    pos = start
    while True:
        found, end, bad = parse_segment(data, seq, pos)
        records.extend(found)
        if not bad:
            return records, end, False, skipped, skipped_bytes
        length = HEADER.unpack_from(data, end)[0] if len(data) - end >= HEADER.size else -1
        after = end + HEADER.size + length
        if (
            length < 0
            or after >= len(data)
            or not parse_segment(data, seq, after)[0]  # no valid record starts there
        ):
            return records, end, True, skipped, skipped_bytes
        skipped += 1
        skipped_bytes += after - end
        pos = after


def _segment_name(seq: int) -> str:
    return f"seg-{seq:020d}.nrgspool"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentBroken(OSError):
    """A record not written because an earlier one of its segment failed."""


class SegmentFiles:
    """The file side of the spool; only ever used from the writer thread."""

    def __init__(self, directory: Path, policy: FsyncPolicy) -> None:
        self.directory = directory
        self.policy = policy
        self.active_seq = -1
        self.active_fd: int | None = None
        self.dirty = False
        self.last_sync = time.monotonic()
        self.broken: set[int] = set()
        """Segments where a write failed: nothing more is appended to them."""
        self.failed: set[tuple[int, int]] = set()
        """(segment, offset) of records whose write failed: never read."""

    def path(self, seq: int) -> Path:
        return self.directory / _segment_name(seq)

    def recover(self) -> tuple[list[SpoolRecord], int, int, int]:
        """Index of unreplayed records, the next sequence, torn records and bytes discarded."""
        self.directory.mkdir(parents=True, exist_ok=True)
        cursor_seq, cursor_off = self._read_cursor()
        seqs = sorted(
            int(m.group(1)) for p in self.directory.iterdir() if (m := _SEGMENT_RE.match(p.name))
        )
        records: list[SpoolRecord] = []
        torn = 0
        discarded = 0
        for seq in seqs:
            path = self.path(seq)
            if seq < cursor_seq:
                path.unlink()
                continue
            data = path.read_bytes()
            if data[: len(MAGIC)] != MAGIC:
                # A segment created just before a crash may not even hold its magic yet.
                if data:
                    torn += 1
                    discarded += len(data)
                path.unlink()
                continue
            # From the cursor in its segment (never before the first record), else the start.
            start = max(cursor_off, len(MAGIC)) if seq == cursor_seq else len(MAGIC)
            found, good_end, bad, skipped, skipped_bytes = _parse_skipping(data, seq, start)
            torn += skipped
            discarded += skipped_bytes
            if bad:
                torn += 1
                discarded += len(data) - good_end
                with open(path, "r+b") as f:
                    f.truncate(good_end)
                    os.fsync(f.fileno())
            if found:
                records.extend(found)
            else:
                path.unlink()
        # Never reuse the cursor's segment: appends there could land before the cursor offset.
        next_seq = max(seqs[-1] + 1 if seqs else 0, cursor_seq + 1)
        return records, next_seq, torn, discarded

    def _read_cursor(self) -> tuple[int, int]:
        """The last replayed (segment, offset); without one, before every segment."""
        try:
            text = (self.directory / "cursor").read_text()
        except FileNotFoundError:
            return -1, len(MAGIC)
        try:
            seq_s, off_s = text.split()
            return int(seq_s), int(off_s)
        except ValueError:
            log.warning("spool cursor %s is unreadable; replaying every segment", self.directory)
            return -1, len(MAGIC)

    def append(self, seq: int, offset: int, record: bytes) -> None:
        """Write one record at the end of segment ``seq``; on an error (disk full) undo the
        partial write and refuse every later record of that segment (their offsets assumed this
        one), so the loop side can drop exactly the records that failed."""
        if seq in self.broken:
            self.failed.add((seq, offset))
            raise SegmentBroken(f"an earlier write to segment {seq} failed")
        try:
            fd = self.active_fd if seq == self.active_seq else None
            if fd is None:
                fd = self._open_segment(seq)
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            self.broken.add(seq)
            self.failed.add((seq, offset))
            self._undo(seq, offset)
            raise
        self.dirty = True
        if self.policy.interval_s == 0:
            self.sync()
        else:
            self.sync_if_due()

    def _open_segment(self, seq: int) -> int:
        """Start segment ``seq`` (its magic written): the descriptor to append to."""
        self._close_active()
        fd = os.open(self.path(seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.active_fd, self.active_seq = fd, seq
        os.write(fd, MAGIC)
        if self.policy.interval_s is not None:
            _fsync_dir(self.directory)
        return fd

    def _undo(self, seq: int, offset: int) -> None:
        """Cut a failed write back off; a segment left without a record goes."""
        empty = offset <= len(MAGIC)
        try:
            if not empty:  # a record was written before: the segment is open
                assert self.active_fd is not None
                os.ftruncate(self.active_fd, offset)
            self._close_active()
            if empty:
                self.path(seq).unlink(missing_ok=True)
        except OSError as exc:
            log.error("spool %s: cannot undo a failed write: %s", self.directory, exc)

    def sync(self) -> None:
        if self.dirty and self.active_fd is not None:
            os.fsync(self.active_fd)
        self.dirty = False
        self.last_sync = time.monotonic()

    def sync_if_due(self) -> None:
        interval = self.policy.interval_s
        if interval is not None and time.monotonic() - self.last_sync >= interval:
            self.sync()

    def read(self, records: list[SpoolRecord]) -> tuple[list[bytes], list[SpoolRecord]]:
        """Payloads of ``records`` that pass their checksum, and the records that did not
        (records whose write failed are skipped without a word: they were never spooled)."""
        out: list[bytes] = []
        corrupt: list[SpoolRecord] = []
        current: tuple[int, int] | None = None
        """The segment open for reading and its descriptor."""
        try:
            for rec in records:
                if (rec.seq, rec.offset) in self.failed:
                    continue
                if current is None or current[0] != rec.seq:
                    if current is not None:
                        os.close(current[1])
                        current = None
                    current = (rec.seq, os.open(self.path(rec.seq), os.O_RDONLY))
                data = os.pread(current[1], rec.size, rec.offset)
                found, _, bad = parse_segment(data, rec.seq, 0)
                if bad or len(found) != 1:
                    corrupt.append(rec)
                    continue
                out.append(data[HEADER.size :])
        finally:
            if current is not None:
                os.close(current[1])
        return out, corrupt

    def commit(self, cursor: tuple[int, int], delete_below: int) -> None:
        seq, offset = cursor
        tmp = self.directory / "cursor.tmp"
        with open(tmp, "w") as f:
            f.write(f"{seq} {offset}\n")
            if self.policy.interval_s is not None:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.directory / "cursor")
        for p in self.directory.iterdir():
            m = _SEGMENT_RE.match(p.name)
            if m and int(m.group(1)) < delete_below and int(m.group(1)) != self.active_seq:
                p.unlink()
        self.failed = {f for f in self.failed if f[0] >= delete_below}
        self.broken = {b for b in self.broken if b >= delete_below}

    def close(self) -> None:
        self._close_active()

    def _close_active(self) -> None:
        if self.active_fd is not None:
            if self.dirty and self.policy.interval_s is not None:
                os.fsync(self.active_fd)
            os.close(self.active_fd)
            self.dirty = False
        self.active_fd, self.active_seq = None, -1
