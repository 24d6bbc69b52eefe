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
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sinks.influxdb.segments import (
    HEADER,
    MAGIC,
    FsyncPolicy,
    SegmentBroken,
    SegmentFiles,
    SpoolBatch,
    SpoolRecord,
    encode_record,
    parse_fsync_policy,
    parse_segment,
)

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

_T = TypeVar("_T")


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` on ``loop`` from the writer thread (not at all once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


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
        self._files = SegmentFiles(directory, self.policy)
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
            why = exc.strerror or str(exc)
            raise OSError(exc.errno, f"spool {self.directory} cannot write: {why}") from None
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
        if not self._failing and not isinstance(exc, SegmentBroken):
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

    async def sync_barrier(self) -> None:
        """Wait until the writer thread has done everything submitted so far."""
        await self._call(lambda: None)

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

    def roll(self) -> None:
        """Start a new segment for the next append (the current one may be damaged)."""
        if self._seq_size:
            self._seq += 1
            self._seq_size = 0

    def oldest(self) -> SpoolRecord | None:
        """The oldest record not yet replayed."""
        return self._index[0] if self._index else None

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
