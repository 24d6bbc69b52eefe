from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator
from typing import Any

import pytest

from acquisition.api import Emit
from acquisition.flow import Resumed
from acquisition.point import Point
from acquisition.running import CollectorRunner, FailureLog, SystemClock, backoff_delay
from tests.core.fakeclock import FakeClock

MS = 1_000_000


class Recorder:
    """A collector whose collect takes ``busy_ns`` of fake time and may fail on chosen ticks."""

    name = "rec"

    def __init__(self, clock: FakeClock, busy_ns: int = 0, fail_on: set[int] | None = None):
        self.clock = clock
        self.busy_ns = busy_ns
        self.fail_on = fail_on or set()
        self.starts: list[int] = []
        self.stamps: list[int] = []

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def collect(self, emit: Emit, now_ns: int) -> None:
        n = len(self.starts)
        self.starts.append(self.clock.mono)
        self.stamps.append(now_ns)
        self.clock.mono += self.busy_ns
        if n in self.fail_on:
            raise OSError(5, "Input/output error")
        emit(Point("m", {}, {"n": n}, now_ns))


def _runner(clock: FakeClock, rec: Recorder, interval_s: float, **kw: object) -> CollectorRunner:
    out: list[Point] = []
    return CollectorRunner("rec", rec, out.append, interval_s=interval_s, clock=clock, **kw)  # type: ignore[arg-type]


async def test_ticks_stay_on_absolute_deadlines_without_drift() -> None:
    clock = FakeClock()
    rec = Recorder(clock, busy_ns=3 * MS)  # every collect costs 3 ms of a 10 ms interval
    runner = _runner(clock, rec, 0.01)
    t0 = clock.mono
    task = asyncio.create_task(runner.run())
    await clock.run_until(t0 + 1000 * MS)
    task.cancel()
    assert len(rec.starts) == 101
    assert rec.starts == [t0 + k * 10 * MS for k in range(101)]  # no accumulated 3 ms drift
    assert runner.stats.skipped_ticks == 0
    assert runner.stats.points == 101


async def test_overrunning_collect_skips_missed_ticks_and_counts_them() -> None:
    clock = FakeClock()
    rec = Recorder(clock, busy_ns=25 * MS)  # longer than two 10 ms intervals
    runner = _runner(clock, rec, 0.01, timeout_s=1.0)
    t0 = clock.mono
    task = asyncio.create_task(runner.run())
    await clock.run_until(t0 + 90 * MS)
    task.cancel()
    # starts at 0, 30, 60, 90 ms; each overran to +25 ms, so ticks 10,20 / 40,50 / 70,80 /
    # 100,110 (inside the last collect) were skipped
    assert rec.starts == [t0, t0 + 30 * MS, t0 + 60 * MS, t0 + 90 * MS]
    assert runner.stats.skipped_ticks == 8


async def test_alignment_to_wall_clock_multiples() -> None:
    clock = FakeClock(wall_start_ns=1_700_000_000_123_456_789)
    rec = Recorder(clock)
    runner = _runner(clock, rec, 1.0, align=True)
    task = asyncio.create_task(runner.run())
    await clock.run_until(clock.mono + 3_000 * MS)
    task.cancel()
    assert rec.stamps and all(s % 1_000_000_000 == 0 for s in rec.stamps)


async def test_failures_are_counted_and_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="nrg.running")
    clock = FakeClock()
    rec = Recorder(clock, fail_on={2, 3, 4, 7})
    runner = _runner(clock, rec, 0.01)
    task = asyncio.create_task(runner.run())
    await clock.run_until(clock.mono + 95 * MS)
    task.cancel()
    assert runner.stats.errors == 4
    assert runner.stats.points == 10 - 4
    messages = [r.getMessage() for r in caplog.records]
    failing = [m for m in messages if "failing" in m]
    recovered = [m for m in messages if "recovered" in m]
    assert len(failing) == 2 and "Input/output error" in failing[0]
    assert len(recovered) == 2 and "after 3 failure(s)" in recovered[0]


async def test_timeout_cancels_a_hung_collect() -> None:
    class Hung:
        name = "hung"

        async def collect(self, emit: Emit, now_ns: int) -> None:
            await asyncio.sleep(3600)

    runner = CollectorRunner("hung", Hung(), lambda p: None, interval_s=0.01, timeout_s=0.02)  # type: ignore[arg-type]
    await runner.tick()
    assert runner.stats.timeouts == 1
    assert "timed out after 0.02 s" in runner.stats.last_error


def test_backoff_grows_and_is_capped() -> None:
    assert all(0.25 <= backoff_delay(0) <= 0.5 for _ in range(50))
    assert all(backoff_delay(20, cap=30) <= 30 for _ in range(50))
    assert max(backoff_delay(6) for _ in range(200)) > 8


def test_failure_log_quiet_between_first_failure_and_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    fl = FailureLog(logging.getLogger("t"), "thing")
    fl.ok()
    for _ in range(5):
        fl.failed("down")
    fl.ok()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "thing failing: down",
        "thing recovered after 5 failure(s) over 0.0 s",
    ]


async def test_after_tick_follows_each_tick_once_its_points_are_emitted() -> None:
    clock = FakeClock()
    rec = Recorder(clock, busy_ns=2 * MS, fail_on={2})
    out: list[Point] = []
    seen: list[tuple[int, float]] = []  # (points emitted when called, interval given)
    runner = CollectorRunner(
        "rec",
        rec,  # type: ignore[arg-type]
        out.append,
        interval_s=0.01,
        clock=clock,  # type: ignore[arg-type]
        after_tick=lambda interval: seen.append((len(out), interval)),
    )
    task = asyncio.create_task(runner.run())
    await clock.run_until(clock.mono + 45 * MS)
    task.cancel()
    # Ticks at 0, 10, 20, 30, 40 ms; the third failed (no point) and is followed all the same.
    assert seen == [(1, 0.01), (2, 0.01), (2, 0.01), (3, 0.01), (4, 0.01)]


class Suspending:
    """A collect that suspends on futures the test resolves, with what ``await`` gives back."""

    name = "suspending"

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[int]] = []
        self.added = asyncio.Event()
        self.finished = False

    async def next_future(self) -> asyncio.Future[int]:
        await self.added.wait()
        self.added.clear()
        return self.futures[-1]

    async def collect(self, emit: Emit, now_ns: int) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        try:
            for _ in range(2):
                fut: asyncio.Future[int] = loop.create_future()
                self.futures.append(fut)
                self.added.set()
                try:
                    value = await fut
                except ValueError as exc:  # thrown in at the suspension, handled here
                    value = len(str(exc))
                emit(Point("m", {}, {"v": value}, now_ns))
        finally:
            self.finished = True


async def test_a_collect_that_suspends_gets_sent_values_and_thrown_errors() -> None:
    out: list[Point] = []
    col = Suspending()
    runner = CollectorRunner("s", col, out.append, interval_s=1.0, timeout_s=5.0)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.tick())
    (await col.next_future()).set_result(41)
    (await col.next_future()).set_exception(ValueError("four"))
    await task
    assert [p.fields["v"] for p in out] == [41, 4]
    assert runner.stats.points == 2 and runner.stats.errors == 0 and runner.stats.timeouts == 0


async def test_an_error_after_a_suspension_is_counted() -> None:
    class Late:
        name = "late"

        async def collect(self, emit: Emit, now_ns: int) -> None:
            await asyncio.sleep(0)
            raise OSError(5, "Input/output error")

    runner = CollectorRunner("late", Late(), lambda p: None, interval_s=1.0)  # type: ignore[arg-type]
    await runner.tick()
    assert runner.stats.errors == 1 and "Input/output error" in runner.stats.last_error


async def test_the_timeout_counts_from_the_start_of_the_collect() -> None:
    reached: list[bool] = []

    class SlowThenHung:
        name = "slow"

        async def collect(self, emit: Emit, now_ns: int) -> None:
            time.sleep(0.25)  # longer than the whole timeout, before the first suspension
            await asyncio.sleep(0)  # the deadline has passed: cancelled here
            reached.append(True)
            await asyncio.sleep(3600)

    runner = CollectorRunner("slow", SlowThenHung(), lambda p: None, interval_s=1.0, timeout_s=0.2)  # type: ignore[arg-type]
    await runner.tick()
    assert runner.stats.timeouts == 1
    assert not reached  # not a fresh 0.2 s counted from the first suspension


async def test_cancelling_the_runner_reaches_a_suspended_collect() -> None:
    col = Suspending()
    runner = CollectorRunner("s", col, lambda p: None, interval_s=1.0, timeout_s=5.0)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.tick())
    await col.next_future()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert col.finished and runner.stats.timeouts == 0


async def test_a_collect_returning_another_awaitable_runs_under_the_timeout() -> None:
    class Awaitable:
        def __await__(self) -> Generator[Any, None, None]:
            yield from asyncio.sleep(3600).__await__()

    class Plain:
        name = "plain"

        def collect(self, emit: Emit, now_ns: int) -> Awaitable:
            return Awaitable()

    runner = CollectorRunner("plain", Plain(), lambda p: None, interval_s=0.01, timeout_s=0.02)  # type: ignore[arg-type]
    await runner.tick()
    assert runner.stats.timeouts == 1


def test_resumed_closes_the_coroutine_when_closed() -> None:
    closed: list[bool] = []

    async def job() -> None:
        try:
            await asyncio.sleep(0)
        finally:
            closed.append(True)

    coro = job()
    first = coro.send(None)
    waiter = Resumed(coro, first).__await__()
    assert next(waiter) is first
    waiter.close()
    assert closed == [True]


async def test_a_tick_whose_collect_suspends_is_finished_before_the_next_is_timed() -> None:
    clock = FakeClock()
    col = Suspending()
    seen: list[int] = []
    runner = CollectorRunner(
        "s",
        col,  # type: ignore[arg-type]
        lambda p: None,
        interval_s=0.01,
        timeout_s=5.0,
        clock=clock,  # type: ignore[arg-type]
        after_tick=lambda interval: seen.append(clock.mono),
    )
    t0 = clock.mono
    task = asyncio.create_task(runner.run())
    await clock.run_until(t0)
    (await col.next_future()).set_result(1)
    clock.mono = t0 + 25 * MS  # the collect ends 25 ms in: ticks at 10 and 20 ms are missed
    (await col.next_future()).set_result(2)
    await clock.run_until(t0 + 30 * MS)
    assert seen == [t0 + 25 * MS]  # after_tick once, after the suspended collect ended
    assert runner.stats.runs == 1 and runner.stats.skipped_ticks == 2
    await col.next_future()  # the tick at 30 ms started a new collect
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert col.finished  # the cancellation reached the suspended collect


async def test_an_error_escaping_a_tick_ends_run_with_it() -> None:
    clock = FakeClock()

    def broken_after_tick(interval: float) -> None:
        raise RuntimeError("after_tick bug")

    runner = _runner(clock, Recorder(clock), 0.01, after_tick=broken_after_tick)
    task = asyncio.create_task(runner.run())
    await clock.run_until(clock.mono + 5 * MS)
    with pytest.raises(RuntimeError, match="after_tick bug"):
        await task


@pytest.mark.parametrize("precise", [False, True])
async def test_ticks_on_the_system_clock_come_at_their_deadlines(precise: bool) -> None:
    """The real timer path: each tick at or after its deadline, on the grid."""
    rec = Recorder(FakeClock())  # its clock only counts; the runner's is the system clock
    starts: list[int] = []
    runner = CollectorRunner(
        "rec",
        rec,  # type: ignore[arg-type]
        lambda p: starts.append(time.monotonic_ns()),
        interval_s=0.02,
        clock=SystemClock(precise=precise),
    )
    first = runner.first_deadline()
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0.11)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(starts) >= 4
    deadlines = [first + k * 20 * MS for k in range(len(starts))]
    assert all(s >= d for s, d in zip(starts, deadlines, strict=True))
    assert runner.stats.lateness_ns_max < 20 * MS


async def test_a_collect_that_needs_a_task_gets_one_from_its_second_tick() -> None:
    """``asyncio.timeout()`` cannot be entered outside a task: the first tick counts the error,
    every later one runs in a task and works."""
    clock = FakeClock()
    out: list[Point] = []

    class OwnTimeout:
        name = "own-timeout"

        async def collect(self, emit: Emit, now_ns: int) -> None:
            async with asyncio.timeout(1.0):
                await asyncio.sleep(0)
                emit(Point("m", {}, {"v": 1}, now_ns))

    runner = CollectorRunner("own", OwnTimeout(), out.append, interval_s=0.01, clock=clock)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    await clock.run_until(clock.mono + 35 * MS)
    task.cancel()
    assert runner.stats.runs == 4 and runner.stats.errors == 1
    assert "inside a task" in runner.stats.last_error
    assert len(out) == 3


async def test_runners_on_a_shared_grid_tick_at_the_same_instants() -> None:
    """A runner started 35 ms after another, on the other's grid (``first_ns``), ticks when the
    other does (one wake-up of the agent for both), with no tick counted as skipped."""
    clock = FakeClock()
    first, second = Recorder(clock), Recorder(clock)
    t0 = clock.mono
    runner_a = _runner(clock, first, 0.01)
    runner_a.first_ns = t0
    task_a = asyncio.create_task(runner_a.run())
    await clock.run_until(t0 + 35 * MS)
    runner_b = _runner(clock, second, 0.01)
    runner_b.first_ns = t0
    task_b = asyncio.create_task(runner_b.run())
    await clock.run_until(t0 + 100 * MS)
    task_a.cancel()
    task_b.cancel()
    assert second.starts[0] == t0 + 35 * MS  # at once, on the grid's latest point (30 ms)
    assert second.starts[1:] == first.starts[4:]
    assert second.starts[1:] == [t0 + k * 10 * MS for k in range(4, 11)]
    assert runner_b.stats.skipped_ticks == 0
