"""Everything every plugin needs, written once: scheduling, timeouts, retries, counting, logging.

- :class:`CollectorRunner` ticks a polled collector on absolute monotonic deadlines (no drift),
  optionally aligned to wall-clock multiples of the interval; a collect that overruns its tick makes
  the runner skip the ticks it missed (counted), and a timeout cancels it (counted).
- :class:`StreamRunner` keeps a stream collector's ``run`` alive, restarting it with backoff.
- :class:`FailureLog` logs once when a source starts failing and once when it recovers.

A sink's queue, batching, flushes and retries are :mod:`acquisition.sinking`'s; the clocks the
runners tick on are in :mod:`acquisition.clock`, the retry and logging helpers in
:mod:`acquisition.flow` (both re-exported here).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from types import CoroutineType

from acquisition.api import Collector, Emit, StreamCollector
from acquisition.clock import Clock, SystemClock, Timer
from acquisition.flow import FailureLog, Resumed, backoff_delay
from acquisition.point import Point

__all__ = [
    "Clock",
    "CollectorRunner",
    "FailureLog",
    "RunnerStats",
    "StreamRunner",
    "SystemClock",
    "backoff_delay",
    "last_readings",
    "share_grid",
]

log = logging.getLogger("nrg.running")


@dataclass
class RunnerStats:
    """Cumulative counters of one collector; published as ``nrg_collect`` self-stats."""

    runs: int = 0
    errors: int = 0
    timeouts: int = 0
    skipped_ticks: int = 0
    points: int = 0
    duration_ns_total: int = 0
    duration_ns_max: int = 0
    lateness_ns_max: int = 0
    lateness_ns: deque[int] = field(default_factory=lambda: deque(maxlen=4096))
    """The most recent lateness samples (for benchmarks), bounded."""
    last_error: str = ""


class CollectorRunner:
    """Runs one polled collector on a fixed grid of monotonic deadlines."""

    def __init__(
        self,
        name: str,
        collector: Collector,
        emit: Emit,
        *,
        interval_s: float,
        timeout_s: float | None = None,
        align: bool = False,
        clock: Clock | None = None,
        after_tick: Callable[[float], None] | None = None,
    ) -> None:
        """``after_tick(interval_s)`` is called once each tick's points are emitted: the agent
        flushes its sinks and publishes self-stats there when they are due, in the same
        wake-up."""
        self.name = name
        self.collector = collector
        self.interval_s = interval_s
        self.after_tick = after_tick
        self.interval_ns = max(1, round(interval_s * 1e9))
        self.timeout_s = timeout_s if timeout_s is not None else interval_s * 5
        self.align = align
        self.clock: Clock = clock or SystemClock()
        self.stats = RunnerStats()
        self._emit_downstream = emit
        self._failure = FailureLog(log, f"collector {name}")
        self.first_ns: int | None = None
        """The monotonic ns of the first tick when set (shared by the agent's runners, so that
        their ticks fall in the same wake-up); else the first tick is when :meth:`run` starts."""
        self._deadline = 0
        """Monotonic ns of the tick :meth:`run` waits for."""
        self._timer: Timer | None = None
        self._pending: asyncio.Future[None] | None = None
        """The rest of a tick whose collect suspended."""
        self._done: asyncio.Future[None] | None = None
        self._in_task = False
        """Run each tick in a task (the collect failed outside one); see :meth:`run`."""

    def _emit(self, point: Point) -> None:
        self.stats.points += 1
        self._emit_downstream(point)

    def first_deadline(self) -> int:
        now = self.clock.monotonic_ns()
        if not self.align:
            first = self.first_ns
            if first is None or first >= now:
                return now if first is None else first
            # Started late on the shared grid: its latest point, no tick counted as skipped.
            return first + (now - first) // self.interval_ns * self.interval_ns
        # Next wall-clock multiple of the interval, expressed on the monotonic clock.
        return now + (-self.clock.time_ns()) % self.interval_ns

    async def tick(self) -> None:
        """One collection with timeout, counting and once-per-outage logging."""
        start = self.clock.monotonic_ns()
        coro = self._start_collect(start)
        if coro is not None:
            await self._finish_collect(*coro)

    def _start_collect(self, start: int) -> tuple[Awaitable[None], float, int] | None:
        """Run ``collect`` until it first suspends. A collect that returns without suspending
        (reading files, as most do) cannot be interrupted by a timeout anyway: it is run to its
        end here and counted (None is returned). One that suspends is returned with its timeout
        deadline (loop time, counted from the start of the collect) for
        :meth:`_finish_collect`."""
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        try:
            coro = self.collector.collect(self._emit, self.clock.time_ns())
            if type(coro) is not CoroutineType:  # some other awaitable: the general way
                return coro, deadline, start
            try:
                first = coro.send(None)
            except StopIteration:
                self._counted(None, start)
                return None
        except Exception as exc:
            if isinstance(exc, RuntimeError) and asyncio.current_task() is None:
                self._in_task = True  # e.g. asyncio.timeout() needs a task: give it one
            self._counted(exc, start)
            return None
        return Resumed(coro, first), deadline, start

    async def _finish_collect(self, rest: Awaitable[None], deadline: float, start: int) -> None:
        """The rest of a collect that suspended, under its timeout; then counted."""
        try:
            async with asyncio.timeout_at(deadline):
                await rest
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._counted(exc, start)
        else:
            self._counted(None, start)

    def _counted(self, exc: Exception | None, start: int) -> None:
        """Count one finished collect (and log the first failure of an outage, or recovery)."""
        stats = self.stats
        if exc is None:
            self._failure.ok()
        else:
            if isinstance(exc, TimeoutError):
                stats.timeouts += 1
                stats.last_error = f"timed out after {self.timeout_s:g} s"
            else:
                stats.errors += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
            self._failure.failed(stats.last_error)
        elapsed = self.clock.monotonic_ns() - start
        stats.runs += 1
        stats.duration_ns_total += elapsed
        stats.duration_ns_max = max(stats.duration_ns_max, elapsed)

    async def run(self) -> None:
        """Tick until cancelled. Deadlines are ``first + k·interval``; missed ones are skipped.

        Each tick is a timer callback of the clock, not a task woken from a sleep: a collect that
        never suspends, the emits, ``after_tick`` and the next timer all run in that callback,
        one pass of the event loop per tick. A collect that suspends finishes in a task of its
        own, and the next tick is timed when it ends. A collect that raised RuntimeError outside
        a task (``asyncio.timeout()`` needs one) has every later tick run in a task.
        """
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._deadline = self.first_deadline()
        self._timer = self.clock.call_at(self._deadline, self._on_deadline)
        try:
            await self._done
        finally:
            self._timer.cancel()
            pending, self._pending = self._pending, None
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending

    def _on_deadline(self) -> None:
        """The timer of one tick: collect, count, ``after_tick``, time the next tick. Anything
        escaping (a bug, never a collect's error) ends :meth:`run` with it."""
        try:
            start = self.clock.monotonic_ns()
            late = max(start - self._deadline, 0)
            stats = self.stats
            stats.lateness_ns.append(late)
            if late > stats.lateness_ns_max:
                stats.lateness_ns_max = late
            if self._in_task:
                self._pending = asyncio.ensure_future(self._tick_in_task(start))
                return
            suspended = self._start_collect(start)
            if suspended is None:
                self._tick_ended()
            else:
                self._pending = asyncio.ensure_future(self._tick_in_task(start, suspended))
        except BaseException as exc:
            self._fail(exc)

    async def _tick_in_task(
        self, start: int, suspended: tuple[Awaitable[None], float, int] | None = None
    ) -> None:
        """The rest of a tick, in a task: the rest of a collect that ``suspended``, or a whole
        collect that cannot start outside a task (it raised RuntimeError there, as
        ``asyncio.timeout()`` does); then ``after_tick`` and the next timer."""
        try:
            if suspended is None:
                suspended = self._start_collect(start)
            if suspended is not None:
                await self._finish_collect(*suspended)
            self._pending = None
            self._tick_ended()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(exc)

    def _tick_ended(self) -> None:
        """``after_tick``, then the timer of the next deadline; the deadlines that fell inside
        an overrunning collect are skipped and counted."""
        if self.after_tick is not None:
            self.after_tick(self.interval_s)
        interval = self.interval_ns
        done = self.clock.monotonic_ns()
        self._deadline += interval
        if done >= self._deadline:
            missed = (done - self._deadline) // interval + 1
            self.stats.skipped_ticks += missed
            self._deadline += missed * interval
        self._timer = self.clock.call_at(self._deadline, self._on_deadline)

    def _fail(self, exc: BaseException) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)


async def last_readings(runners: Iterable[object], kinds: Collection[str]) -> None:
    """One more tick of each polled collector of these ``kinds`` (collector names) once its
    task has stopped, so that a span that ends now ends on a reading instead of up to an
    interval after the last one. A collector that reads some things less often than every tick
    (NVML's energy counter and sample buffers) reads everything in it: it is asked first
    through ``read_all_next()``."""
    for runner in runners:
        if isinstance(runner, CollectorRunner) and runner.collector.name in kinds:
            read_all_next = getattr(runner.collector, "read_all_next", None)
            if read_all_next is not None:
                read_all_next()
            await runner.tick()


def share_grid(runners: Iterable[object], first_ns: int) -> None:
    """Start every polled runner's ticks at ``first_ns`` (monotonic): their deadlines then
    coincide wherever their intervals' multiples do, and the event loop runs their ticks in
    one wake-up (one pass over its due timers) instead of one wake-up each."""
    for runner in runners:
        if isinstance(runner, CollectorRunner):
            runner.first_ns = first_ns


class StreamRunner:
    """Keeps a stream collector's ``run`` going; restarts it with backoff when it fails."""

    def __init__(self, name: str, collector: StreamCollector, emit: Emit) -> None:
        self.name = name
        self.collector = collector
        self.stats = RunnerStats()
        self._emit_downstream = emit
        self._failure = FailureLog(log, f"collector {name}")

    def _emit(self, point: Point) -> None:
        self.stats.points += 1
        self._emit_downstream(point)

    async def run(self) -> None:
        attempt = 0
        while True:
            self.stats.runs += 1
            try:
                await self.collector.run(self._emit)
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.stats.errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                self._failure.failed(self.stats.last_error)
                attempt += 1
            await asyncio.sleep(backoff_delay(attempt, base=1.0, cap=30.0))
