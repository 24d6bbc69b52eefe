from __future__ import annotations

import asyncio
import gzip
import io
import math
import os
import resource
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.bus import Bus
from acquisition.errors import PartialWriteError, WriteError
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.sinking import SinkRunner
from sinks.file import DIRECT_WRITE_MAX, FileConfig, FileSink
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


# Appends up to DIRECT_WRITE_MAX bytes are made from the loop, larger ones from a thread: the
# disk-full guarantees hold on both paths (0 sends every write through the thread).
write_paths = pytest.mark.parametrize("direct_max", [DIRECT_WRITE_MAX, 0], ids=["direct", "thread"])


@write_paths
async def test_file_sink_write_is_all_or_nothing_when_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_max: int
) -> None:
    monkeypatch.setattr("sinks.file.DIRECT_WRITE_MAX", direct_max)
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
    assert sink.lines_written == 3  # nothing of the refused batch counted
    await sink.write(pts(2, start=3))
    await sink.aclose()
    values = [decode_line(ln).fields["n"] for ln in (tmp_path / "out.lp").read_text().splitlines()]
    assert values == [0, 1, 2, 3, 4]
    assert sink.lines_written == 5


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


# --- first batch, partial writes, abort, shutdown deadline, retry bounds -------------------------


async def test_the_first_point_is_written_at_once_not_after_a_flush_interval() -> None:
    sink = FlakySink()
    runner = SinkRunner("t", sink, batch_size=100, flush_interval_s=3600, buffer_limit=1000)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0)
    for p in pts(3):  # one tick's points
        runner.offer(p)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0, 1, 2]]
    runner.offer(pts(1, start=3)[0])  # later points wait for the flush interval as usual
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0, 1, 2]]
    runner.stop()
    await asyncio.wait_for(task, 5)


class PartialSink:
    """Writes ``room`` points of a batch, then reports the rest as failed, like a disk with
    that much space; then writes everything."""

    name = "partial"

    def __init__(self, room: list[int]) -> None:
        self.room = room
        self.written: list[int] = []

    async def write(self, batch: Sequence[Point]) -> None:
        if self.room:
            n = self.room.pop(0)
            self.written.extend(int(p.fields["n"]) for p in batch[:n])
            raise PartialWriteError("disk full", written=n)
        self.written.extend(int(p.fields["n"]) for p in batch)


async def test_a_partial_write_is_never_written_twice() -> None:
    sink = PartialSink([3, 0, 4])
    runner = SinkRunner("t", sink, batch_size=10, flush_interval_s=1, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(10):
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)
    assert sink.written == list(range(10))
    assert runner.stats.points_written == 10


def test_sink_retries_are_capped_and_retry_after_is_clamped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acquisition import sinking

    delays: list[float] = []

    class Forever:
        name = "forever"

        def __init__(self) -> None:
            self.calls = 0

        async def write(self, batch: Sequence[Point]) -> None:
            self.calls += 1
            if self.calls < 30:
                raise WriteError("down", retryable=True, retry_after_s=math.inf)

    async def pause(self: SinkRunner, delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(SinkRunner, "_pause", pause)
    runner = SinkRunner("t", Forever(), batch_size=2, flush_interval_s=1, buffer_limit=10)  # type: ignore[arg-type]
    for p in pts(2):
        runner.offer(p)
    assert asyncio.run(runner.write(runner.take_batch(), deadline=None))
    assert len(delays) == 29
    assert max(delays) == sinking.SINK_RETRY_MAX_S


async def test_abort_flush_stops_retrying_and_keeps_the_rest_in_the_spool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = FlakySink(fail=10**6)
    aborted: list[bool] = []
    sink.abort = lambda: aborted.append(True)  # type: ignore[attr-defined]
    runner = SinkRunner("t", sink, batch_size=2, flush_interval_s=10, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(6):
        runner.offer(p)
    closing = asyncio.create_task(runner.close(deadline=time.monotonic() + 3600))
    await asyncio.sleep(0.05)
    runner.abort_flush()
    await asyncio.wait_for(closing, 5)
    assert aborted == [True]
    assert sorted(sink.spilled) == list(range(6))
    assert "final flush was cut short" in caplog.text


async def test_a_write_still_running_at_the_deadline_is_counted_not_lost() -> None:
    class Hung:
        name = "hung"

        async def write(self, batch: Sequence[Point]) -> None:
            await asyncio.Event().wait()

    runner = SinkRunner("t", Hung(), batch_size=2, flush_interval_s=10, buffer_limit=100)  # type: ignore[arg-type]
    for p in pts(5):
        runner.offer(p)
    await asyncio.wait_for(runner.close(deadline=time.monotonic() + 0.1), 5)
    assert runner.stats.dropped_points == 5


async def test_unexpected_errors_are_not_retried_forever() -> None:
    class Buggy:
        name = "buggy"
        calls = 0

        async def write(self, batch: Sequence[Point]) -> None:
            Buggy.calls += 1
            raise KeyError("bug")

    runner = SinkRunner("t", Buggy(), batch_size=2, flush_interval_s=10, buffer_limit=100)  # type: ignore[arg-type]
    runner._pause = lambda delay: asyncio.sleep(0)  # type: ignore[method-assign]
    for p in pts(2):
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)
    assert (Buggy.calls, runner.stats.dropped_points) == (SinkRunner.MAX_UNEXPECTED_ATTEMPTS, 2)


# --- file sink: disk full, bounds, compression ----------------------------------------------------


@write_paths
async def test_file_sink_writes_what_fits_on_whole_lines_when_the_disk_fills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_max: int
) -> None:
    monkeypatch.setattr("sinks.file.DIRECT_WRITE_MAX", direct_max)
    from tests.influxdb.helpers import fill, small_disk

    with small_disk(tmp_path / "disk", 512 * 1024) as disk:
        sink = FileSink(FileConfig(path=str(disk / "out.lp"), fsync="never"), ctx(tmp_path))
        await sink.open()
        runner = SinkRunner("file", sink, batch_size=20000, flush_interval_s=1, buffer_limit=10**6)
        filler = fill(disk)
        with open(filler, "r+b") as f:  # free ~40 KB: room for part of the batch only
            f.truncate(filler.stat().st_size - 40 * 1024)
        for p in pts(5000):
            runner.offer(p)
        batch = runner.take_batch()
        with pytest.raises(PartialWriteError) as info:
            await sink.write(batch)
        written = info.value.written
        assert 0 < written < 5000
        assert sink.lines_written == written  # the whole lines kept are counted as written
        text = (disk / "out.lp").read_text()
        assert text.endswith("\n")
        assert [decode_line(ln).fields["n"] for ln in text.splitlines()] == list(range(written))
        filler.unlink()
        # The core retries only the rest: every point once, in order.
        runner.queue.extendleft(reversed(batch[written:]))
        assert await runner.write(runner.take_batch(), deadline=None)
        await sink.aclose()
        values = [decode_line(ln).fields["n"] for ln in (disk / "out.lp").read_text().splitlines()]
        assert values == list(range(5000))
        assert sink.lines_written == 5000  # each line counted once, across the two writes


async def test_file_sink_keeps_max_files_also_across_restarts(tmp_path: Path) -> None:
    for i in range(6):  # files an earlier run left
        (tmp_path / f"nrg-20250101T00000{i}Z.lp").write_text("m v=1i 1\n")
        os.utime(tmp_path / f"nrg-20250101T00000{i}Z.lp", (1000 + i, 1000 + i))
    sink = FileSink(FileConfig(dir=str(tmp_path), max_bytes=2048, max_files=3), ctx(tmp_path))
    await sink.open()
    await sink.write(pts(5))
    files = sorted(p.name for p in tmp_path.glob("nrg-*.lp"))
    assert len(files) == 3  # the one being written and the newest two, never max_files + 1
    assert files[:2] == ["nrg-20250101T000004Z.lp", "nrg-20250101T000005Z.lp"]
    for i in range(40):
        await sink.write(pts(10, start=i * 10))
    await sink.aclose()
    assert len(list(tmp_path.glob("nrg-*.lp"))) == 3


async def test_file_sink_bounds_the_total_size_oldest_first(tmp_path: Path) -> None:
    sink = FileSink(
        FileConfig(dir=str(tmp_path), max_bytes=2048, max_total_bytes=6 * 1024), ctx(tmp_path)
    )
    await sink.open()
    for i in range(60):
        await sink.write(pts(10, start=i * 10))
    await sink.aclose()
    files = sorted(tmp_path.glob("nrg-*.lp"), key=lambda p: p.stat().st_mtime)
    assert sum(f.stat().st_size for f in files) <= 6 * 1024
    values = [decode_line(ln).fields["n"] for f in files for ln in f.read_text().splitlines()]
    assert values == list(range(600 - len(values), 600))  # the newest, whole and in order
    assert sink.stats()["deleted_files"] > 0


async def test_file_sink_default_total_is_a_quarter_of_the_free_space(tmp_path: Path) -> None:
    """Guards: without ``max_total_bytes`` the files together are bounded by a quarter of the
    free space when the sink opens (give or take 1 % for what else the disk is doing)."""
    sink = FileSink(FileConfig(dir=str(tmp_path)), ctx(tmp_path))
    await sink.open()
    free = shutil.disk_usage(tmp_path).free
    assert abs(sink.max_total - free / 4) <= 0.01 * free
    await sink.aclose()


async def test_file_sink_gzips_rotated_files(tmp_path: Path) -> None:
    sink = FileSink(FileConfig(dir=str(tmp_path), max_bytes=2048, compress="gzip"), ctx(tmp_path))
    await sink.open()
    for i in range(20):
        await sink.write(pts(10, start=i * 10))
    await sink.aclose()
    gz = sorted(tmp_path.glob("nrg-*.lp.gz"), key=lambda p: p.stat().st_mtime)
    plain = list(tmp_path.glob("nrg-*.lp"))
    assert gz and len(plain) == 1  # only the last file stays uncompressed
    text = "".join(gzip.decompress(p.read_bytes()).decode() for p in gz) + plain[0].read_text()
    assert [decode_line(ln).fields["n"] for ln in text.splitlines()] == list(range(200))


async def test_a_point_line_protocol_cannot_carry_is_dropped_alone_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = FileSink(FileConfig(path=str(tmp_path / "out.lp")), ctx(tmp_path))
    await sink.open()
    runner = SinkRunner("file", sink, batch_size=10, flush_interval_s=0.01, buffer_limit=100)
    batch = pts(5)
    batch[2] = Point("m", {}, {"n": 2**64}, batch[2].time_ns)  # beyond int64
    batch[3] = Point("m", {}, {"n": math.nan}, batch[3].time_ns)
    for p in batch:
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)
    await sink.aclose()
    lines = (tmp_path / "out.lp").read_text().splitlines()
    assert [int(decode_line(line).fields["n"]) for line in lines] == [0, 1, 4]
    assert runner.stats.unencodable_points == 2
    assert runner.stats.points_written == 3
    logged = [r for r in caplog.records if "cannot be written as line protocol" in r.getMessage()]
    assert len(logged) == 1 and "18446744073709551616" in logged[0].getMessage()


# --- sample.toml of every sink --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["file", "influxdb", "stdout"])
def test_sample_toml_parses_uncommented_and_lists_exactly_the_config_keys(name: str) -> None:
    import dataclasses
    import re
    import tomllib

    from acquisition.config import build_dataclass
    from acquisition.registry import load_class

    root = Path(__file__).resolve().parents[2]
    text = (root / "sinks" / name / "sample.toml").read_text()
    assert tomllib.loads(text) == {"sinks": {name: [{}]}}  # valid as it stands
    uncommented = re.sub(r"(?m)^# (\w+ = )", r"\1", text)
    (table,) = tomllib.loads(uncommented)["sinks"][name]
    cls = load_class("sinks", name)
    # A key without a default (None) is shown as prose only: TOML has no null.
    fields = [f.name for f in dataclasses.fields(cls.config_class) if f.default is not None]
    assert list(table) == fields
    built = build_dataclass(cls.config_class, table, f"sinks.{name}[0]")
    assert built == cls.config_class()


async def test_a_run_task_cancelled_at_the_deadline_keeps_its_batch_for_close() -> None:
    """The agent cancels a sink task whose write hangs past the deadline: the batch goes back
    to the queue, and close() spills it (or counts it) instead of losing it silently."""
    release = asyncio.Event()

    class HungWithSpool(FlakySink):
        async def write(self, batch: Sequence[Point]) -> None:
            await release.wait()

    sink = HungWithSpool()
    runner = SinkRunner("t", sink, batch_size=3, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    for p in pts(5):
        runner.offer(p)
    await asyncio.sleep(0.05)  # a write is hanging
    runner.stop()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await runner.close(deadline=time.monotonic())
    assert sorted(sink.spilled) == [0, 1, 2, 3, 4]
    assert runner.stats.spilled_points == 5


class NoSpoolSink:
    """Records batches; has no spool, so a full queue drops."""

    name = "nospool"

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def write(self, batch: Sequence[Point]) -> None:
        self.batches.append([int(p.fields["n"]) for p in batch])


async def test_a_drop_episode_is_logged_once_until_the_queue_has_caught_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = SinkRunner("t", NoSpoolSink(), batch_size=2, flush_interval_s=10, buffer_limit=4)  # type: ignore[arg-type]
    points = pts(20)
    for p in points[:6]:  # 2 dropped
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)  # written, queue not empty
    for p in points[6:12]:  # 4 more dropped: the same episode
        runner.offer(p)
    while runner.queue:
        assert await runner.write(runner.take_batch(), deadline=None)
    for p in points[12:18]:  # a new episode: 2 dropped
        runner.offer(p)
    assert runner.stats.dropped_points == 8
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "dropped 2 point(s): in-memory queue full" in m] == [
        "sink t: dropped 2 point(s): in-memory queue full (buffer_limit reached) (counted in "
        "nrg_collect dropped_points; logged once per episode)"
    ] * 2
    assert [m for m in messages if "caught up" in m] == [
        "sink t: caught up; 6 point(s) were dropped in that episode"
    ]


class EncodingFailsSink:
    """Raises LineProtocolError for every batch although each point encodes on its own (as a
    sink whose own tags cannot be written would)."""

    name = "badtags"

    def __init__(self) -> None:
        self.calls = 0

    async def write(self, batch: Sequence[Point]) -> None:
        from acquisition.errors import LineProtocolError

        self.calls += 1
        raise LineProtocolError("tag key of the sink is empty")


async def test_an_encoding_failure_of_the_sink_itself_is_bounded_not_a_loop() -> None:
    sink = EncodingFailsSink()
    runner = SinkRunner("t", sink, batch_size=5, flush_interval_s=0.01, buffer_limit=100)  # type: ignore[arg-type]
    runner._pause = _no_pause  # type: ignore[method-assign]
    for p in pts(5):
        runner.offer(p)
    assert await runner.write(runner.take_batch(), deadline=None)
    assert sink.calls == SinkRunner.MAX_UNEXPECTED_ATTEMPTS
    assert runner.stats.dropped_points == 5 and runner.stats.unencodable_points == 0


async def _no_pause(delay: float) -> None:
    return None


# --- flushing in the wake-up of a collector's tick; small writes without a thread ---------------


async def test_a_tick_flushes_its_points_when_the_flush_is_due_and_not_before() -> None:
    sink = FlakySink()
    runner = SinkRunner("t", sink, batch_size=100, flush_interval_s=3600, buffer_limit=1000)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0)
    runner.offer(pts(1)[0])  # the first point is written at once
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0]]
    for p in pts(2, start=1):
        runner.offer(p)
    runner.tick_ended(1.0)  # a tick long before the flush is due: nothing written
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0]]
    assert runner._timer is not None  # the fallback flush waits for them meanwhile
    runner._last_flush -= 3600 - 0.4  # the flush falls due within half a tick of now
    runner.tick_ended(1.0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0], [1, 2]]
    assert runner._timer is None  # flushed by the tick: the fallback timer never fires
    runner.stop()
    await asyncio.wait_for(task, 5)


async def test_points_no_tick_flushes_are_written_by_the_fallback_timer() -> None:
    class Counting(FlakySink):
        def __init__(self) -> None:
            super().__init__()
            self.four = asyncio.Event()

        async def write(self, batch: Sequence[Point]) -> None:
            await super().write(batch)
            if sum(map(len, self.batches)) >= 4:
                self.four.set()

    sink = Counting()
    runner = SinkRunner("t", sink, batch_size=100, flush_interval_s=0.01, buffer_limit=1000)  # type: ignore[arg-type]
    task = asyncio.create_task(runner.run())
    for p in pts(3):
        runner.offer(p)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.batches == [[0, 1, 2]]  # the first points, at once
    runner.offer(pts(1, start=3)[0])  # no tick_ended() ever comes
    await asyncio.wait_for(sink.four.wait(), 5)
    assert sink.batches == [[0, 1, 2], [3]]
    runner.stop()
    await asyncio.wait_for(task, 5)


async def test_file_sink_appends_a_small_batch_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = FileSink(FileConfig(path=str(tmp_path / "out.lp"), fsync="never"), ctx(tmp_path))
    await sink.open()

    def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a small append went through a thread")

    # asyncio.to_thread and aiofiles both hand their work to the loop's executor.
    monkeypatch.setattr(asyncio.get_running_loop(), "run_in_executor", no_thread)
    await sink.write(pts(3))
    monkeypatch.undo()
    await sink.aclose()
    values = [decode_line(ln).fields["n"] for ln in (tmp_path / "out.lp").read_text().splitlines()]
    assert values == [0, 1, 2]


def _threads_started(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The functions the file sink runs on a thread from now on (``asyncio.to_thread`` counted)."""
    import sinks.file

    threaded: list[object] = []
    to_thread = asyncio.to_thread

    async def counting(func: Any, /, *args: object) -> object:
        threaded.append(func)
        return await to_thread(func, *args)

    monkeypatch.setattr(sinks.file.asyncio, "to_thread", counting)
    return threaded


async def test_file_sink_appends_batches_up_to_256_kib_from_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the documented threshold: a batch of exactly 256 KiB (262,144 bytes) is appended
    from the event loop itself, one of a byte more from a thread."""
    out = tmp_path / "out.lp"
    sink = FileSink(FileConfig(path=str(out), fsync="never"), ctx(tmp_path))
    await sink.open()
    threaded = _threads_started(monkeypatch)

    def point(payload: int, t: int) -> Point:
        return Point("m", {}, {"s": "x" * payload}, t)

    await sink.write([point(1, 0)])
    overhead = out.stat().st_size - 1  # the line's bytes beside its payload
    await sink.write([point(262_144 - overhead, 1)])
    assert threaded == [] and out.stat().st_size == 1 + overhead + 262_144
    await sink.write([point(262_145 - overhead, 2)])
    assert threaded == [os.write] and out.stat().st_size == 1 + overhead + 262_144 + 262_145
    monkeypatch.undo()
    await sink.aclose()


async def test_file_sink_writes_a_large_batch_through_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sinks.file

    monkeypatch.setattr(sinks.file, "DIRECT_WRITE_MAX", 64)
    sink = FileSink(FileConfig(path=str(tmp_path / "out.lp"), fsync="never"), ctx(tmp_path))
    await sink.open()
    threaded = _threads_started(monkeypatch)
    await sink.write(pts(1))  # one short line: direct
    assert threaded == []
    await sink.write(pts(50, start=1))  # over DIRECT_WRITE_MAX: from a thread
    assert threaded == [os.write]
    monkeypatch.undo()
    await sink.aclose()
    values = [decode_line(ln).fields["n"] for ln in (tmp_path / "out.lp").read_text().splitlines()]
    assert values == list(range(51))
