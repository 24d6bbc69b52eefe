"""Durable on-disk spool: append-only segment files of checksummed line-protocol records.

A sink puts batches here when its server is down or slower than the collectors, and replays them
oldest first when the server is back; what one run of the agent leaves, the next one replays.

Layout of ``directory``:
- ``seg-<20-digit sequence>.nrgspool``: an 8-byte magic ``NRGSPL01`` then records, each a 20-byte
  big-endian header ``length u32 | crc32 u32 | points u32 | spooled_at_ns u64`` and ``length``
  bytes of newline-terminated line protocol (UTF-8). The CRC-32 covers ``points``,
  ``spooled_at_ns`` and the payload. Only the newest segment is ever appended to; each run starts
  a new one, so a record torn by a power loss can only be the last of a segment.
- ``cursor``: ``<sequence> <offset>`` of the oldest record not yet replayed, replaced atomically
  (write, fsync per policy, rename) after each replayed batch. Replay is at least once: a crash
  between the server's answer and the cursor update sends that batch again on the next start.

All file I/O runs on one writer thread (a single-worker executor), in submission order, so the
event loop never blocks and a read always sees every earlier append. The index of records (where
each one is, how many points, when it was spooled) lives on the loop side, which is what lets
:meth:`Spool.append_nowait` decide on the quota and return at once.

Units: sizes in bytes, ages in seconds, times in Unix-epoch nanoseconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "HEADER",
    "MAGIC",
    "FsyncPolicy",
    "Spool",
    "SpoolBatch",
    "SpoolRecord",
    "encode_record",
    "parse_fsync_policy",
    "parse_segment",
]

log = logging.getLogger(__name__)

MAGIC = b"NRGSPL01"
HEADER = struct.Struct(">IIIQ")
_SEGMENT_RE = re.compile(r"^seg-(\d{20})\.nrgspool$")
_MAX_RECORD = 1 << 31
_T = TypeVar("_T")


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
            or not parse_segment(data[: after + _peek(data, after)], seq, after)[0]
        ):
            return records, end, True, skipped, skipped_bytes
        skipped += 1
        skipped_bytes += after - end
        pos = after


def _peek(data: bytes, pos: int) -> int:
    """Size of the record that starts at ``pos`` (its header's length plus the header)."""
    if len(data) - pos < HEADER.size:
        return 0
    return HEADER.size + int(HEADER.unpack_from(data, pos)[0])


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` on ``loop`` from the writer thread (not at all once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _segment_name(seq: int) -> str:
    return f"seg-{seq:020d}.nrgspool"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _SegmentBroken(OSError):
    """A record not written because an earlier one of its segment failed."""


class _Files:
    """The file side of the spool; only ever used from the writer thread."""

    def __init__(self, directory: Path, policy: FsyncPolicy) -> None:
        self.directory = directory
        self.policy = policy
        self.active_seq = -1
        self.active_fd = -1
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
            start = cursor_off if seq == cursor_seq and cursor_off >= len(MAGIC) else len(MAGIC)
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
        try:
            text = (self.directory / "cursor").read_text()
        except FileNotFoundError:
            return -1, 0
        try:
            seq_s, off_s = text.split()
            return int(seq_s), int(off_s)
        except ValueError:
            log.warning("spool cursor %s is unreadable; replaying every segment", self.directory)
            return -1, 0

    def append(self, seq: int, offset: int, record: bytes) -> None:
        """Write one record at the end of segment ``seq``; on an error (disk full) undo the
        partial write and refuse every later record of that segment (their offsets assumed this
        one), so the loop side can drop exactly the records that failed."""
        if seq in self.broken:
            self.failed.add((seq, offset))
            raise _SegmentBroken(f"an earlier write to segment {seq} failed")
        try:
            if seq != self.active_seq:
                self._open_segment(seq)
            view = memoryview(record)
            while view:
                view = view[os.write(self.active_fd, view) :]
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

    def _open_segment(self, seq: int) -> None:
        self._close_active()
        fd = os.open(self.path(seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.active_fd, self.active_seq = fd, seq
        os.write(fd, MAGIC)
        if self.policy.interval_s is not None:
            _fsync_dir(self.directory)

    def _undo(self, seq: int, offset: int) -> None:
        """Cut a failed write back off (a segment without even its magic goes)."""
        try:
            if self.active_seq == seq and self.active_fd >= 0:
                if offset <= len(MAGIC):
                    os.ftruncate(self.active_fd, 0)
                else:
                    os.ftruncate(self.active_fd, offset)
            self._close_active()
            if offset <= len(MAGIC):
                self.path(seq).unlink(missing_ok=True)
        except OSError as exc:
            log.error("spool %s: cannot undo a failed write: %s", self.directory, exc)

    def sync(self) -> None:
        if self.dirty and self.active_fd >= 0:
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
        fd, fd_seq = -1, -1
        try:
            for rec in records:
                if (rec.seq, rec.offset) in self.failed:
                    continue
                if rec.seq != fd_seq:
                    if fd >= 0:
                        os.close(fd)
                    fd, fd_seq = os.open(self.path(rec.seq), os.O_RDONLY), rec.seq
                data = os.pread(fd, rec.size, rec.offset)
                found, _, bad = parse_segment(data, rec.seq, 0)
                if bad or len(found) != 1:
                    corrupt.append(rec)
                    continue
                out.append(data[HEADER.size :])
        finally:
            if fd >= 0:
                os.close(fd)
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
        if self.active_fd >= 0:
            if self.dirty and self.policy.interval_s is not None:
                os.fsync(self.active_fd)
            os.close(self.active_fd)
            self.dirty = False
        self.active_fd, self.active_seq = -1, -1


class Spool:
    """A bounded, durable FIFO of line-protocol batches.

    ``max_bytes`` bounds the records not yet replayed (headers included); the disk also holds at
    most one more segment of already replayed records until it is deleted. An append that would
    pass the quota is dropped, counted and logged once per episode.
    """

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int,
        segment_bytes: int = 16 << 20,
        fsync: FsyncPolicy | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("spool max_bytes must be positive")
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = max(segment_bytes, 4096)
        self.policy = fsync or FsyncPolicy(0.0)
        self._clock_ns = clock_ns
        self._files = _Files(directory, self.policy)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._index: deque[SpoolRecord] = deque()
        self._bytes = 0
        self._points = 0
        self._seq = 0
        self._seq_size = 0
        self._last: concurrent.futures.Future[Any] | None = None
        self._sync_handle: asyncio.TimerHandle | None = None
        self._dropping = False
        self._failing = False
        self.failed_points = 0
        """Points handed to :meth:`append_nowait` whose write failed (disk full): lost."""
        self.failed_records = 0
        self.corrupt_points = 0
        self.dropped_points = 0
        self.dropped_records = 0
        self.torn_records = 0
        self.corrupt_records = 0
        self.discarded_bytes = 0
        self.recovered_points = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the directory and index what earlier runs left (in the writer thread)."""
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="nrg-spool"
        )
        records, next_seq, torn, discarded = await self._call(self._files.recover)
        self._index.extend(records)
        self._bytes = sum(r.size for r in records)
        self._points = sum(r.points for r in records)
        self.recovered_points = self._points
        self._seq, self._seq_size = next_seq, 0
        self.torn_records += torn
        self.discarded_bytes += discarded
        if torn:
            log.warning(
                "spool %s: skipped %d torn record(s) (%d bytes) left by an interrupted write",
                self.directory,
                torn,
                discarded,
            )

    async def close(self) -> None:
        """Write out and fsync (per policy) everything appended, then stop the writer thread."""
        if self._executor is None:
            return
        if self._sync_handle is not None:
            self._sync_handle.cancel()
            self._sync_handle = None
        try:
            await self._call(self._files.close)
        finally:
            self._executor.shutdown(wait=True)
            self._executor = None

    # --- appending ---------------------------------------------------------------------------

    def append_nowait(self, payload: bytes, points: int) -> bool:
        """Queue one record for the writer thread and return at once.

        False when the quota would be passed: the points are dropped and counted. A record whose
        write fails later (disk full) is taken out of the spool again and its points are counted
        in ``failed_points``; the spool keeps working, and the next append tries again.
        """
        return self._enqueue(payload, points, owned=False) is not None

    async def append(self, payload: bytes, points: int) -> bool:
        """Append and wait until the writer thread has written it (and fsynced, per policy).

        Raises OSError when the write failed: the record is not in the spool and the caller
        still owns the points (they are not counted as failed here).
        """
        fut = self._enqueue(payload, points, owned=True)
        if fut is None:
            return False
        try:
            await asyncio.wrap_future(fut)
        except OSError as exc:
            raise OSError(exc.errno, f"spool {self.directory} cannot write: {exc}") from None
        return True

    def _enqueue(
        self, payload: bytes, points: int, *, owned: bool
    ) -> concurrent.futures.Future[None] | None:
        if not payload:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        now_ns = self._clock_ns()
        record = encode_record(payload, points, now_ns)
        if self._bytes + len(record) > self.max_bytes:
            self._note_quota_drop(points)
            return None
        if self._seq_size and self._seq_size + len(record) > self.segment_bytes:
            self._seq += 1
            self._seq_size = 0
        offset = self._seq_size or len(MAGIC)
        self._seq_size = offset + len(record)
        rec = SpoolRecord(self._seq, offset, len(record), points, now_ns)
        self._index.append(rec)
        self._bytes += rec.size
        self._points += points
        fut = self._submit(self._files.append, rec.seq, rec.offset, record)
        self._last = fut
        loop = asyncio.get_running_loop()
        fut.add_done_callback(lambda f: _call_soon(loop, self._append_done, rec, f, owned))
        self._schedule_sync()
        return fut

    def _note_quota_drop(self, points: int) -> None:
        self.dropped_points += points
        self.dropped_records += 1
        if not self._dropping:
            self._dropping = True
            log.error(
                "spool %s reached its quota of %d bytes: dropping new points until replay "
                "frees space (counted in dropped_points)",
                self.directory,
                self.max_bytes,
            )

    def _append_done(
        self, rec: SpoolRecord, fut: concurrent.futures.Future[None], owned: bool
    ) -> None:
        """On the loop: forget a record whose write failed, and log the episode once."""
        exc = fut.exception()
        if exc is None:
            if self._failing:
                self._failing = False
                log.warning(
                    "spool %s writes again; %d point(s) could not be spooled meanwhile",
                    self.directory,
                    self.failed_points,
                )
            return
        if rec in self._index:
            self._index.remove(rec)
            self._bytes -= rec.size
            self._points -= rec.points
        if rec.seq == self._seq:  # later appends go to a fresh segment
            self._seq += 1
            self._seq_size = 0
        if not owned:
            self.failed_points += rec.points
        self.failed_records += 1
        if not self._failing and not isinstance(exc, _SegmentBroken):
            self._failing = True
            log.error(
                "spool %s cannot write: %s (counted in failed_points; logged once until "
                "it writes again)",
                self.directory,
                exc,
            )

    async def flush(self) -> None:
        """Wait for every queued append (a failed one is already accounted for)."""
        last = self._last
        if last is not None:
            with contextlib.suppress(OSError):
                await asyncio.wrap_future(last)
            await asyncio.sleep(0)  # let its done-callback run on the loop

    async def sync(self) -> None:
        """fsync the active segment now (whatever the policy)."""
        await self._call(self._files.sync)

    # --- replaying ---------------------------------------------------------------------------

    async def read(self, max_bytes: int) -> SpoolBatch:
        """The oldest records, up to ``max_bytes`` (at least one), without removing them.

        A record that fails its checksum is counted once in ``corrupt_records`` /
        ``corrupt_points`` and taken out of the spool at once, so a retry never counts it again.
        """
        chosen: list[SpoolRecord] = []
        total = 0
        for rec in self._index:
            if chosen and total + rec.size > max_bytes:
                break
            chosen.append(rec)
            total += rec.size
        if not chosen:
            return SpoolBatch(0, 0, b"")
        payloads, corrupt = await self._call(self._files.read, chosen)
        if corrupt:
            self._forget_corrupt(corrupt)
        good = tuple(r for r in chosen if r not in set(corrupt) and r in self._index)
        return SpoolBatch(len(good), sum(r.points for r in good), b"".join(payloads), good)

    def _forget_corrupt(self, corrupt: list[SpoolRecord]) -> None:
        for rec in corrupt:
            if rec in self._index:
                self._index.remove(rec)
                self._bytes -= rec.size
                self._points -= rec.points
            self.corrupt_records += 1
            self.corrupt_points += rec.points
        log.warning(
            "spool %s: %d record(s) (%d point(s)) failed their checksum and were skipped "
            "(counted in corrupt_points)",
            self.directory,
            len(corrupt),
            sum(r.points for r in corrupt),
        )

    async def commit(self, batch: SpoolBatch) -> None:
        """Forget the records of ``batch`` (the oldest ones): the server has them."""
        members = set(batch.members)
        removed = 0
        while self._index and self._index[0] in members:
            rec = self._index.popleft()
            self._bytes -= rec.size
            self._points -= rec.points
            removed += 1
        if self._dropping and removed:
            # The episode ends when replay frees space, not when a small record happens to fit.
            self._dropping = False
            log.warning(
                "spool %s has room again; %d points dropped so far",
                self.directory,
                self.dropped_points,
            )
        if self._index:
            head = self._index[0]
            cursor = (head.seq, head.offset)
        else:
            cursor = (self._seq, self._seq_size or len(MAGIC))
        await self._call(self._files.commit, cursor, cursor[0])

    # --- accounting --------------------------------------------------------------------------

    @property
    def records(self) -> int:
        return len(self._index)

    @property
    def points(self) -> int:
        return self._points

    @property
    def bytes(self) -> int:
        return self._bytes

    def oldest_age_s(self) -> float:
        """Seconds since the oldest unreplayed record was spooled; 0 when empty."""
        if not self._index:
            return 0.0
        return max(0.0, (self._clock_ns() - self._index[0].spooled_at_ns) / 1e9)

    # --- internals ---------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
        if self._executor is None:
            raise RuntimeError("spool is not open")
        return self._executor.submit(fn, *args)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.wrap_future(self._submit(fn, *args))

    def _schedule_sync(self) -> None:
        interval = self.policy.interval_s
        if not interval or self._sync_handle is not None:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._sync_handle = None
            if self._executor is not None:
                self._submit(self._files.sync)

        self._sync_handle = loop.call_later(interval, fire)
