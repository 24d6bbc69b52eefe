"""A sink's side of the agent: :class:`SinkRunner` owns a sink's bounded queue, batching, flush
timing, retries with exponential backoff and jitter, spilling overflow to the sink's disk spool
when it has one, and the final flush."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from acquisition.api import Sink
from acquisition.errors import LineProtocolError, PartialWriteError, WriteError
from acquisition.flow import FailureLog, backoff_delay
from acquisition.lineproto import LineEncoder
from acquisition.point import Point

__all__ = ["SinkRunner", "SinkStats"]

SINK_RETRY_INITIAL_S = 0.25
"""First wait before a sink's failed write is tried again."""
SINK_RETRY_MAX_S = 2.0
"""The longest wait between two tries of a sink's write (a server's Retry-After included), so
that a disk with room again or a server that answers again is found within seconds."""

log = logging.getLogger("nrg.running")

_FLUSH_GRACE_S = 0.25
"""How long past a due flush the fallback timer waits for a collector's tick to do it."""


@dataclass
class SinkStats:
    """Cumulative counters of one sink; published as ``nrg_collect`` self-stats."""

    points_in: int = 0
    points_written: int = 0
    batches_written: int = 0
    write_errors: int = 0
    retries: int = 0
    spilled_points: int = 0
    dropped_points: int = 0
    rejected_points: int = 0
    unencodable_points: int = 0
    queue_max: int = 0
    write_ns_total: int = 0
    last_error: str = ""


class SinkRunner:
    """A sink's bounded queue, batching, flush timing, retries and final flush.

    ``offer`` is what the bus calls: O(1), never blocks. When the queue holds ``buffer_limit``
    points, the oldest ``batch_size`` points go to ``sink.spill`` (a durable spool) when the sink
    has one, else they are dropped and counted; order is kept because the oldest leave first.
    """

    MAX_UNEXPECTED_ATTEMPTS = 5

    def __init__(
        self,
        name: str,
        sink: Sink,
        *,
        batch_size: int,
        flush_interval_s: float,
        buffer_limit: int,
    ) -> None:
        self.name = name
        self.sink = sink
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.buffer_limit = max(buffer_limit, batch_size)
        self.queue: deque[Point] = deque()
        self.stats = SinkStats()
        self.state = "ok"
        self._spill: Callable[[Sequence[Point]], None] | None = getattr(sink, "spill", None)
        self._wake: asyncio.Event | None = None
        self._failure = FailureLog(log, f"sink {name}")
        self._drop_logged = False
        self._dropped_before_episode = 0
        self._unencodable_logged = False
        self._stopping = False
        self._aborting = False
        self._flushed_once = False
        self._stopped = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_flush = 0.0
        """Monotonic time (s) the last flush began."""
        self._timer: asyncio.TimerHandle | None = None
        """The fallback flush, armed while points wait and no collector tick has flushed them."""

    # -- bus side -----------------------------------------------------------------------------

    def offer(self, point: Point) -> None:
        queue = self.queue
        self.stats.points_in += 1
        if len(queue) >= self.buffer_limit:
            self._overflow()
        queue.append(point)
        n = len(queue)
        if n > self.stats.queue_max:
            self.stats.queue_max = n
        if (n >= self.batch_size or not self._flushed_once) and self._wake is not None:
            self._wake.set()  # a full batch, or the very first point: flush at once
        elif self._timer is None and self._loop is not None:
            self._arm_timer()

    def _overflow(self) -> None:
        chunk = [self.queue.popleft() for _ in range(min(self.batch_size, len(self.queue)))]
        if self._spill is not None:
            try:
                try:
                    self._spill(chunk)
                except LineProtocolError:
                    chunk = self._without_unencodable(chunk)
                    self._spill(chunk)
                self.stats.spilled_points += len(chunk)
                return
            except Exception as exc:
                self.stats.last_error = f"spill failed: {exc!r}"
        self._drop(chunk, "in-memory queue full (buffer_limit reached)")

    def _drop(self, points: Sequence[Point], why: str) -> None:
        if not self._drop_logged:
            self._drop_logged = True
            self._dropped_before_episode = self.stats.dropped_points
            log.error(
                "sink %s: dropped %d point(s): %s (counted in nrg_collect "
                "dropped_points; logged once per episode)",
                self.name,
                len(points),
                why,
            )
        self.stats.dropped_points += len(points)

    def _without_unencodable(self, points: Sequence[Point]) -> list[Point]:
        """``points`` less those line protocol cannot carry (an integer beyond int64, a NaN, a
        tag that is not text): each is counted, the first is logged with its reason, the rest
        of the batch is written as usual."""
        probe = LineEncoder({})
        kept: list[Point] = []
        for point in points:
            try:
                probe.encode(point)
            except LineProtocolError as exc:
                self.stats.unencodable_points += 1
                if not self._unencodable_logged:
                    self._unencodable_logged = True
                    log.error(
                        "sink %s: dropped a point that cannot be written as line protocol: %s "
                        "(counted in nrg_collect unencodable_points; further ones are only counted)",
                        self.name,
                        exc,
                    )
            else:
                kept.append(point)
        return kept

    # -- loop side ----------------------------------------------------------------------------

    def status(self) -> str:
        custom = getattr(self.sink, "status", None)
        if callable(custom):
            try:
                return str(custom())
            except Exception:  # status must never break the live line
                pass
        return self.state

    def take_batch(self) -> list[Point]:
        queue = self.queue
        return [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]

    def tick_ended(self, interval_s: float) -> None:
        """A collector's tick is over (its points are in the queue): flush now when the next
        flush is due, give or take half a tick (``interval_s``), so that a tick's points are
        written in the wake-up that collected them, without a flush timer of its own."""
        if not self.queue or self._wake is None or self._stopping:
            return
        slack = min(interval_s, self.flush_interval_s) / 2
        if time.monotonic() >= self._last_flush + self.flush_interval_s - slack:
            self._wake.set()

    def _arm_timer(self) -> None:
        """The fallback for points no collector tick flushes (a stream's, or ticks that stopped):
        a flush ``flush_interval`` after the last one, plus a margin that lets a tick falling
        due at about the same time flush first (then this timer is cancelled, never woken)."""
        assert self._loop is not None
        grace = min(self.flush_interval_s / 2, _FLUSH_GRACE_S)
        when = max(self._last_flush + self.flush_interval_s + grace, self._loop.time())
        self._timer = self._loop.call_at(when, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        if self._wake is not None:
            self._wake.set()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def run(self) -> None:
        """Flush when a collector's tick finds the flush due (:meth:`tick_ended`), as soon as a
        batch is full, or else ``flush_interval`` after the last flush, until ``stop()``. The
        first points are written at once (a new file or dashboard shows data right away)."""
        self._loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        self._last_flush = time.monotonic()
        if self.queue:
            wake.set()
        try:
            while not self._stopping:
                if len(self.queue) < self.batch_size:
                    if self.queue and self._timer is None:
                        self._arm_timer()
                    await wake.wait()
                    if not self._flushed_once:
                        await asyncio.sleep(0)  # the rest of the first tick joins the first batch
                wake.clear()
                self._cancel_timer()
                if not self.queue:
                    continue
                self._flushed_once = True
                self._last_flush = time.monotonic()
                while self.queue and not self._stopping:
                    batch = self.take_batch()
                    await self.write(batch, deadline=None)
                    if len(self.queue) < self.batch_size:
                        break
        finally:
            self._cancel_timer()
            self._loop = None

    def stop(self) -> None:
        """Ask ``run`` to return after the write in progress (never cancel a write: a file or
        HTTP write that completes after its caller was cancelled would be written twice)."""
        self._stopping = True
        self._stopped.set()
        if self._wake is not None:
            self._wake.set()

    def abort_flush(self) -> None:
        """Cut the final flush short (the agent calls this on a second Ctrl-C or SIGTERM): no
        further batch is written nor retried, the sink's own wait (a post in flight, draining
        its spool) is cut short through ``sink.abort()`` when it has one, and what is left goes
        to the sink's spool, or is counted as dropped."""
        self._aborting = True
        self.stop()
        abort = getattr(self.sink, "abort", None)
        if callable(abort):
            try:
                abort()
            except Exception as exc:
                log.error("sink %s: abort failed: %r", self.name, exc)

    async def write(self, batch: list[Point], deadline: float | None) -> bool:
        """Write one batch, retrying retryable errors; False when ``deadline`` (monotonic s)
        would pass first or the flush was aborted (the caller then spills or counts the batch,
        which is back at the head of the queue)."""
        attempt = 0
        unexpected = 0
        stats = self.stats
        while True:
            t0 = time.monotonic_ns()
            try:
                await self.sink.write(batch)
            except asyncio.CancelledError:
                # Keep the batch: put it back at the head so the final flush still sees it.
                self.queue.extendleft(reversed(batch))
                raise
            except WriteError as exc:
                batch = self._count_partial(batch, exc)
                if not batch:
                    return True
                stats.write_errors += 1
                stats.last_error = str(exc)
                if not exc.retryable:
                    stats.rejected_points += len(batch)
                    log.error(
                        "sink %s: batch of %d point(s) rejected: %s", self.name, len(batch), exc
                    )
                    return True
                delay = backoff_delay(attempt, SINK_RETRY_INITIAL_S, SINK_RETRY_MAX_S)
                if exc.retry_after_s is not None:  # at least what the server asked, up to the cap
                    delay = max(delay, min(exc.retry_after_s, SINK_RETRY_MAX_S))
            except Exception as exc:
                if isinstance(exc, LineProtocolError):
                    kept = self._without_unencodable(batch)
                    if len(kept) < len(batch):  # the rest of the batch is written at once
                        if not kept:
                            return True
                        batch = kept
                        continue
                    # Every point encodes on its own: the sink failed otherwise, retried as below.
                stats.write_errors += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
                unexpected += 1
                if unexpected >= self.MAX_UNEXPECTED_ATTEMPTS:
                    self._drop(batch, f"sink raised {stats.last_error} {unexpected} times")
                    return True
                delay = backoff_delay(attempt, SINK_RETRY_INITIAL_S, SINK_RETRY_MAX_S)
            else:
                self._count_written(batch, t0)
                return True
            self.state = "retrying"
            self._failure.failed(stats.last_error)
            attempt += 1
            stats.retries += 1
            if self._aborting or (deadline is not None and time.monotonic() + delay > deadline):
                self.queue.extendleft(reversed(batch))
                return False
            if deadline is None and self._stopping:  # shutdown: close() takes over the batch
                self.queue.extendleft(reversed(batch))
                return False
            await self._pause(delay)

    def _count_written(self, batch: Sequence[Point], t0: int) -> None:
        stats = self.stats
        stats.write_ns_total += time.monotonic_ns() - t0
        stats.points_written += len(batch)
        stats.batches_written += 1
        self.state = "ok"
        if self._drop_logged and not self.queue:  # caught up: the drop episode is over
            self._drop_logged = False
            log.warning(
                "sink %s: caught up; %d point(s) were dropped in that episode",
                self.name,
                stats.dropped_points - self._dropped_before_episode,
            )
        self._failure.ok()

    def _count_partial(self, batch: list[Point], exc: WriteError) -> list[Point]:
        """The part of ``batch`` still to write after a :class:`PartialWriteError`."""
        if not isinstance(exc, PartialWriteError) or exc.written <= 0:
            return batch
        written = min(exc.written, len(batch))
        self.stats.points_written += written
        return batch[written:]

    async def _pause(self, delay: float) -> None:
        """Sleep between retries; ``stop()`` cuts it short."""
        try:
            async with asyncio.timeout(delay):
                await self._stopped.wait()
        except TimeoutError:
            pass

    async def close(self, deadline: float) -> None:
        """Final flush before ``deadline`` (monotonic s); spill or count what is left. A write
        still running at the deadline is cancelled and its batch spilled or counted."""
        while self.queue and time.monotonic() < deadline and not self._aborting:
            batch = self.take_batch()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    done = await self.write(batch, deadline=deadline)
            except TimeoutError:  # write() put the batch back when it was cancelled
                log.warning(
                    "sink %s: a write was still running at the shutdown deadline", self.name
                )
                break
            if not done:
                break
        if self.queue:
            self._keep_rest()

    async def close_sink(self, deadline: float) -> None:
        """``sink.aclose()``, cut short at ``deadline`` (monotonic s) through ``sink.abort()``
        when the sink has one (a post waiting for a hung server, a spool still draining)."""
        task = asyncio.ensure_future(self.sink.aclose())
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
        abort = getattr(self.sink, "abort", None)
        if not done and callable(abort):
            log.warning(
                "sink %s: closing passed the shutdown deadline; cutting it short", self.name
            )
            abort()
        await task

    def _keep_rest(self) -> None:
        rest = list(self.queue)
        self.queue.clear()
        why = "the final flush was cut short" if self._aborting else "not flushed by the deadline"
        if self._spill is not None:
            try:
                self._spill(rest)
                self.stats.spilled_points += len(rest)
                log.warning(
                    "sink %s: %s; %d point(s) were kept in the spool for the next start",
                    self.name,
                    why,
                    len(rest),
                )
                return
            except Exception as exc:
                log.error("sink %s: spill at shutdown failed: %r", self.name, exc)
        self._drop(rest, why)
