from __future__ import annotations

import asyncio
import io
import os
import resource
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.bus import Bus
from acquisition.errors import WriteError
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.running import SinkRunner
from sinks.file import FileConfig, FileSink
from sinks.stdout import StdoutConfig, StdoutSink


def ctx(tmp_path: Path) -> PluginContext:
    return PluginContext(
        "h1", 1.0, tmp_path / "state", tmp_path / "data", tmp_path / "run", tags={"host": "h1"}
    )


def pts(n: int, start: int = 0) -> list[Point]:
    return [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(start, start + n)]


class FlakySink:
    """Fails the first ``fail`` writes with a retryable error, then records batches."""

    name = "flaky"

    def __init__(self, fail: int = 0, retryable: bool = True) -> None:
        self.fail = fail
        self.retryable = retryable
        self.batches: list[list[int]] = []
        self.spilled: list[int] = []

    async def write(self, batch: Sequence[Point]) -> None:
        if self.fail:
            self.fail -= 1
            raise WriteError("server down", retryable=self.retryable, retry_after_s=0.001)
        self.batches.append([int(p.fields["n"]) for p in batch])

    def spill(self, points: Sequence[Point]) -> None:
        self.spilled.extend(int(p.fields["n"]) for p in points)


async def test_batches_are_cut_at_batch_size_and_flushed_in_order() -> None:
    sink = FlakySink()
    runner = SinkRunner("t", sink, batch_size=4, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    for p in pts(10):
        runner.offer(p)
    await asyncio.sleep(0.05)
    task.cancel()
    assert sink.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert runner.stats.points_written == 10


async def test_retryable_errors_are_retried_until_written() -> None:
    sink = FlakySink(fail=3)
    runner = SinkRunner("t", sink, batch_size=5, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(5):
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)
    assert sink.batches == [[0, 1, 2, 3, 4]]
    assert (runner.stats.retries, runner.stats.write_errors, runner.state) == (3, 3, "ok")


async def test_permanent_rejection_counts_the_batch() -> None:
    sink = FlakySink(fail=1, retryable=False)
    runner = SinkRunner("t", sink, batch_size=5, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(5):
        runner.offer(p)
    await runner.write(runner.take_batch(), deadline=None)
    assert runner.stats.rejected_points == 5 and sink.batches == []


async def test_full_queue_spills_oldest_first_to_the_sink_spool() -> None:
    sink = FlakySink()
    runner = SinkRunner("t", sink, batch_size=3, flush_interval_s=10, buffer_limit=6)  # type: ignore[arg-type]
    for p in pts(10):
        runner.offer(p)
    assert sink.spilled == [0, 1, 2, 3, 4, 5]
    assert [int(p.fields["n"]) for p in runner.queue] == [6, 7, 8, 9]
    assert runner.stats.dropped_points == 0 and runner.stats.spilled_points == 6


async def test_full_queue_without_spool_drops_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    class NoSpool:
        name = "nospool"

        async def write(self, batch: Sequence[Point]) -> None: ...

    runner = SinkRunner("t", NoSpool(), batch_size=2, flush_interval_s=10, buffer_limit=4)  # type: ignore[arg-type]
    for p in pts(9):
        runner.offer(p)
    assert runner.stats.dropped_points == 6
    assert [int(p.fields["n"]) for p in runner.queue] == [6, 7, 8]
    assert sum("dropped" in r.getMessage() for r in caplog.records) == 1  # once per episode


async def test_close_flushes_and_spills_what_misses_the_deadline() -> None:
    sink = FlakySink(fail=10**6)
    runner = SinkRunner("t", sink, batch_size=2, flush_interval_s=10, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(5):
        runner.offer(p)
    await runner.close(deadline=time.monotonic() + 0.05)
    assert sorted(sink.spilled) == [0, 1, 2, 3, 4]
    assert runner.stats.dropped_points == 0


def test_bus_fans_out_and_processors_do_not_see_their_own_output() -> None:
    bus = Bus()
    a: list[str] = []
    b: list[str] = []
    bus.add_sink(lambda p: a.append(p.measurement))
    bus.add_sink(lambda p: b.append(p.measurement))
    seen: list[str] = []

    class Doubler:
        name = "d"

        def process(self, point: Point, emit: object) -> None:
            seen.append(point.measurement)
            if point.measurement == "m":
                emit(Point("derived", {}, {"v": 1}, point.time_ns))  # type: ignore[operator]

    class Broken:
        name = "b"

        def process(self, point: Point, emit: object) -> None:
            raise ZeroDivisionError

    bus.add_processor("d", Doubler())
    broken = bus.add_processor("b", Broken())
    bus.emit(Point("m", {}, {"v": 1}, 0))
    assert a == b == ["derived", "m"]
    assert seen == ["m"]
    assert broken.errors == 2


async def test_file_sink_writes_replayable_line_protocol_and_rotates(tmp_path: Path) -> None:
    sink = FileSink(FileConfig(dir=str(tmp_path), max_bytes=2048, max_files=3), ctx(tmp_path))
    await sink.open()
    for i in range(20):
        await sink.write(pts(10, start=i * 10))
    await sink.aclose()
    files = sorted(tmp_path.glob("nrg-*.lp"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 3 and all(f.stat().st_size <= 2048 for f in files)
    lines = [ln for f in files for ln in f.read_text().splitlines()]
    values = [decode_line(ln).fields["n"] for ln in lines]
    assert values == list(range(200 - len(values), 200))  # newest kept, in order, whole lines
    assert decode_line(lines[0]).tags == {"host": "h1", "k": "v"}


async def test_file_sink_write_is_all_or_nothing_when_the_disk_is_full(tmp_path: Path) -> None:
    sink = FileSink(FileConfig(path=str(tmp_path / "out.lp")), ctx(tmp_path))
    await sink.open()
    await sink.write(pts(3))
    size = (tmp_path / "out.lp").stat().st_size
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))  # a "disk" that is nearly full
    try:
        with pytest.raises(WriteError) as info:
            await sink.write(pts(50, start=3))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert info.value.retryable
    assert (tmp_path / "out.lp").stat().st_size == size  # the partial batch was truncated away
    await sink.write(pts(2, start=3))
    await sink.aclose()
    values = [decode_line(ln).fields["n"] for ln in (tmp_path / "out.lp").read_text().splitlines()]
    assert values == [0, 1, 2, 3, 4]


async def test_stdout_sink_filters_measurements(tmp_path: Path) -> None:
    out = io.StringIO()
    sink = StdoutSink(StdoutConfig(measurements=["a"]), ctx(tmp_path), stream=out)
    await sink.write([Point("a", {}, {"v": 1}, 1), Point("b", {}, {"v": 2}, 2)])
    assert out.getvalue() == "a,host=h1 v=1i 1\n"


def test_file_sink_default_dir_is_the_data_dir(tmp_path: Path) -> None:
    sink = FileSink(FileConfig(), ctx(tmp_path))
    assert sink.dir == tmp_path / "data"
    assert os.path.basename(sink.where()) == "data"


async def test_stop_lets_the_write_in_progress_finish_and_never_writes_twice() -> None:
    class SlowSink:
        name = "slow"

        def __init__(self) -> None:
            self.written: list[int] = []

        async def write(self, batch: Sequence[Point]) -> None:
            await asyncio.sleep(0.05)  # e.g. a file write finishing in a worker thread
            self.written.extend(int(p.fields["n"]) for p in batch)

    sink = SlowSink()
    runner = SinkRunner("t", sink, batch_size=3, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    for p in pts(7):
        runner.offer(p)
    await asyncio.sleep(0.02)  # the first batch is being written
    runner.stop()
    await asyncio.wait_for(task, 1)
    await runner.close(deadline=time.monotonic() + 1)
    assert sink.written == list(range(7))


async def test_stop_cuts_a_retry_backoff_short_and_close_keeps_the_batch() -> None:
    sink = FlakySink(fail=10**6)
    runner = SinkRunner("t", sink, batch_size=5, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    for p in pts(5):
        runner.offer(p)
    await asyncio.sleep(0.05)
    runner.stop()
    await asyncio.wait_for(task, 1)
    await runner.close(deadline=time.monotonic() + 0.05)
    assert sorted(sink.spilled) == [0, 1, 2, 3, 4]


def test_bus_flushes_processors_that_hold_points_back() -> None:
    bus = Bus()
    out: list[str] = []
    bus.add_sink(lambda p: out.append(p.measurement))

    class Holder:
        name = "holder"

        def __init__(self) -> None:
            self.held: list[Point] = []

        def process(self, point: Point, emit: object) -> None:
            if point.measurement == "step":
                self.held.append(point)

        def flush(self, emit: object) -> None:
            for p in self.held:
                emit(Point("energy", {}, {"j": 1.0}, p.time_ns))  # type: ignore[operator]

    bus.add_processor("holder", Holder())
    bus.emit(Point("step", {}, {"n": 1}, 5))
    assert out == ["step"]
    bus.flush_processors()
    assert out == ["step", "energy"]
