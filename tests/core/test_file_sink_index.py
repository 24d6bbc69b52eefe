"""The file sink's step indexes: a finished file with many step lines gets one (written by a
child process), compressed or not, a file with few does not, an index goes when its file is
pruned, and a child's failure is counted and said."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

import sinks.file as file_sink
from acquisition.api import PluginContext
from acquisition.point import Point
from acquisition.store_index import index_path, read_index
from sinks.file import FileConfig, FileSink


def ctx(tmp_path: Path) -> PluginContext:
    return PluginContext(
        "h1", 1.0, tmp_path / "state", tmp_path / "data", tmp_path / "run", tags={"host": "h1"}
    )


def steps(first: int, n: int) -> list[Point]:
    tags = {"run": "r", "rank": "0"}
    return [
        Point("nrg_step", tags, {"step": i, "start_time_ns": i, "end_time_ns": i + 1}, 10 + i)
        for i in range(first, first + n)
    ]


def index_child_is(monkeypatch: pytest.MonkeyPatch, program: str) -> None:
    """Index children run ``program`` (``true``, ``false``) in place of Python."""
    path = shutil.which(program)
    assert path is not None
    monkeypatch.setattr(sys, "executable", path)


def index_child_runs(monkeypatch: pytest.MonkeyPatch, path: Path, script: str) -> None:
    """Index children run the shell ``script`` (written to ``path``) in place of Python."""
    path.write_text(script)
    path.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(path))


async def wait_for(path: Path) -> None:
    """Until the child has renamed the index into place (it runs at low priority)."""
    for _ in range(600):
        if path.exists():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} was not written")


async def test_finished_files_with_step_lines_get_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a rotated file with at least ``INDEX_MIN_STEP_LINES`` step lines is indexed, and
    so is the last file at close; a file with fewer is not (reading its text is quick); the
    index matches its file. Pruning the oldest file takes its index too."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    config = FileConfig(dir=str(tmp_path), max_bytes=1024, max_files=2, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))  # 12 lines of 73-74 bytes: file 1
    first = sink.current
    await sink.write(steps(12, 5))  # does not fit: file 1 rotates, file 2 has 5 lines
    second = sink.current
    assert first is not None and second is not None
    await wait_for(index_path(first))
    assert read_index(first) is not None
    await sink.write(steps(17, 12))  # file 2 rotates unindexed; file 3; file 1 pruned
    third = sink.current
    await sink.aclose()  # waits for the last file's index: a report right after reads it
    assert third is not None and index_path(third).exists()
    assert not first.exists() and not index_path(first).exists()
    assert second.exists() and not index_path(second).exists()
    assert sink.stats()["indexes_started"] == 2


async def test_a_file_of_many_readings_gets_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a finished file with no step lines but at least ``INDEX_MIN_LINES`` lines (a GPU
    host's collectors write hundreds a second) is indexed too, its readings as columns; the
    last file, with fewer, is not. The counting starts afresh with each file."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_LINES", 20)
    config = FileConfig(dir=str(tmp_path), max_bytes=1500, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    readings = [Point("gpu", {"gpu": "0"}, {"power_watts": 300.0}, 10 + i) for i in range(60)]
    await sink.write(readings[:30])  # 30 lines of 39-40 bytes: file 1
    first = sink.current
    await sink.write(readings[30:])  # does not fit: file 1 rotates; file 2 has 30 lines too
    await sink.write(readings[:10])  # does not fit: file 2 rotates; file 3 has 10
    await sink.aclose()
    assert first is not None and read_index(first) is not None
    assert [s.n for s in read_index(first).other.series] == [30]  # type: ignore[union-attr]
    indexed = sorted(p.name for p in tmp_path.glob("*.lp.idx"))
    assert len(indexed) == 2 and len(list(tmp_path.glob("*.lp"))) == 3
    assert sink.stats()["indexes_started"] == 2


async def test_no_index_when_turned_off_and_stale_halves_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: ``index = false`` writes none; at open, the half of an index a stopped child
    left (``.idx.tmp``) and an index whose file is gone are removed."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 1)
    (tmp_path / "nrg-x.lp.idx.tmp").write_bytes(b"half")
    (tmp_path / "nrg-gone.lp.idx").write_bytes(b"orphan")
    (tmp_path / "nrg-kept.lp.gz").write_bytes(b"")
    (tmp_path / "nrg-kept.lp.idx").write_bytes(b"kept")
    config = FileConfig(dir=str(tmp_path), index=False, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 5))
    await sink.aclose()
    left = sorted(p.name for p in tmp_path.iterdir() if ".idx" in p.name)
    assert left == ["nrg-kept.lp.idx"]
    assert sink.stats()["indexes_started"] == 0


async def test_a_gzipped_file_is_indexed_and_the_child_writes_nothing_to_the_agents_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Guards: with ``compress = "gzip"`` a rotated file worth an index gets one once it is
    compressed (``x.lp.gz`` → ``x.lp.idx``, matching the compressed file), and the index child
    writes nothing to the agent's stdout or stderr (run by hand it reports "indexed 1 file(s)"):
    they may be the terminal or a pipe the user reads the run's summary from."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    config = FileConfig(dir=str(tmp_path), max_bytes=1024, compress="gzip", fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))  # 12 step lines: worth an index
    first = sink.current
    await sink.write(steps(12, 5))  # does not fit: file 1 rotates, is compressed, then indexed
    await sink.aclose()  # waits for the compression and the index child
    assert first is not None
    gz = first.with_name(first.name + ".gz")
    assert gz.exists() and not first.exists()
    assert read_index(gz) is not None
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (1, 0)
    assert capfd.readouterr() == ("", "")


async def test_an_index_child_that_fails_is_counted_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: an index child that ends in failure (here ``false`` stands in for the Python the
    sink starts it with: exit status 1) is counted in ``index_failures`` and said once, naming
    the file, which reports then read as text."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    index_child_is(monkeypatch, "false")
    config = FileConfig(dir=str(tmp_path), fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))  # the last file, worth an index at close
    path = sink.current
    await sink.aclose()
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (1, 1)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"indexing {path} failed (exit 1); reports read it as text"]


async def test_an_index_child_that_fails_writes_nothing_to_the_agents_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Guards: what a failing index child prints (a Python traceback on its stderr, here a
    script that writes a line to each of stdout and stderr and exits 2) reaches neither the
    agent's stdout nor its stderr: the child's three standard streams are ``/dev/null``. The
    failure is still counted."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    index_child_runs(
        monkeypatch, tmp_path / "child.sh", "#!/bin/sh\necho out\necho err >&2\nexit 2\n"
    )
    sink = FileSink(FileConfig(dir=str(tmp_path / "out"), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))  # the last file, worth an index at close
    await sink.aclose()
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (1, 1)
    assert capfd.readouterr() == ("", "")


async def test_an_index_child_that_cannot_start_is_said_and_the_sink_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: when the index child cannot even start (no such program), the sink says so,
    naming the file, counts nothing as started, and closes normally (the data is all there)."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    path = sink.current
    await sink.aclose()
    assert sink.stats()["indexes_started"] == 0
    assert f"cannot start indexing {path}" in caplog.text
    assert path is not None and path.read_text().count("\n") == 12


def _still_running(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


async def test_abort_stops_waiting_for_index_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: once the agent's shutdown deadline has passed (``abort()``), closing does not wait
    for an index child that is still running (here one that would take a minute, with the wait
    bound at ten minutes) and leaves it to finish alone: ``aclose`` returns while it runs."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    monkeypatch.setattr(file_sink, "INDEX_WAIT_S", 600.0)
    index_child_runs(monkeypatch, tmp_path / "slow-python", "#!/bin/sh\nexec sleep 60\n")
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    sink.abort()
    await asyncio.wait_for(sink.aclose(), 120)  # not the ten minutes
    (pid,) = sink._indexers
    try:
        assert _still_running(pid)
    finally:
        _stop(pid)


class _FakeSleep:
    """The file sink's ``asyncio`` with a fake ``sleep``: it adds the seconds asked for and
    only yields to the loop, so a wait of seconds takes none."""

    def __init__(self) -> None:
        self.slept = 0.0
        self._real = asyncio.sleep

    def __getattr__(self, name: str) -> object:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.slept += seconds
        await self._real(0)


async def test_closing_waits_for_an_index_child_at_most_30_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: closing waits for an index child that does not end (here one that would take a
    minute) for 30 s and one 50 ms look at most, by the loop's clock, then leaves it to finish
    alone; a child that has ended is not waited for at all."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    index_child_runs(monkeypatch, tmp_path / "slow-python", "#!/bin/sh\nexec sleep 60\n")
    clock = _FakeSleep()
    monkeypatch.setattr(file_sink, "asyncio", clock)
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    await sink.aclose()
    (pid,) = sink._indexers
    try:
        assert _still_running(pid)
    finally:
        _stop(pid)
    assert 30.0 <= clock.slept <= 30.05 + 1e-6
    clock.slept = 0.0
    await sink._wait_indexers()  # the child has ended since: nothing to wait for
    assert (clock.slept, sink._indexers) == (0.0, {})


@pytest.mark.parametrize(("n", "indexed"), [(9_999, 0), (10_000, 1)])
async def test_a_file_of_10_000_step_lines_is_indexed_and_one_fewer_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int, indexed: int
) -> None:
    """Guards: the documented threshold: a finished file holding 10,000 step lines gets an
    index child, 9,999 do not (here ``true`` stands in for the child)."""
    index_child_is(monkeypatch, "true")
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, n))
    await sink.aclose()
    assert sink.stats()["indexes_started"] == indexed


async def test_close_hears_of_an_index_child_that_fails_while_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: closing keeps looking at the index children it waits for, not only once before
    waiting: a child still running at that first look that then fails (here a script that
    exits 1 once told to) is counted in ``index_failures`` and said, and close returns once it
    has ended (not after ``INDEX_WAIT_S``, having never heard of it)."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    go = tmp_path / "go"
    index_child_runs(
        monkeypatch,
        tmp_path / "late-python",
        f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.01; done\nexit 1\n",
    )
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    path = sink.current
    closing = asyncio.create_task(sink.aclose())
    for _ in range(1000):  # until it is started and looked at once: it waits for `go`
        if sink._indexers:
            break
        await asyncio.sleep(0)
    assert sink._indexers
    go.touch()
    await asyncio.wait_for(closing, 120)  # a hang guard
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (1, 1)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"indexing {path} failed (exit 1); reports read it as text"]


def _wait_exited(pid: int) -> None:
    """Until child ``pid`` has ended, leaving it to be reaped (``WNOWAIT``)."""
    for _ in range(500):
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return
        time.sleep(0.01)
    raise AssertionError(f"index child {pid} did not end")


async def test_a_failed_index_child_is_heard_of_at_the_next_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: the sink looks at its earlier index children each time it starts another, so a
    failure is counted and said while the agent runs, not only when it stops: two rotations of
    1 KiB files, the first file's child (``false``) ended before the second rotation."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    index_child_is(monkeypatch, "false")
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never", max_bytes=1024), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    first = sink.current
    await sink.write(steps(12, 12))  # rotates: the first file's index child starts
    (pid,) = list(sink._indexers)
    _wait_exited(pid)
    await sink.write(steps(24, 12))  # rotates again: the ended child is heard of
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (2, 1)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"indexing {first} failed (exit 1); reports read it as text"]
    await sink.aclose()


def _reap(pid: int) -> None:
    """Wait for child ``pid`` and take its exit status, as other code in the process might."""
    os.waitpid(pid, 0)


async def test_an_index_child_reaped_elsewhere_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: an index child whose end the sink cannot hear of because other code in the
    process reaped it first (here the test, with ``waitpid``; ``true`` stands in for the child)
    is let go without a word: not counted in ``index_failures``, nothing said, and close does
    not wait for it."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    index_child_is(monkeypatch, "true")
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never", max_bytes=1024), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))
    await sink.write(steps(12, 5))  # rotates: the first file's index child starts
    (pid,) = list(sink._indexers)
    _reap(pid)  # here, before the sink looks
    await sink.aclose()  # 5 step lines: no index child for the last file
    assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (1, 0)
    assert sink._indexers == {}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(("n", "indexed"), [(19, 0), (20, 1)])
async def test_a_file_of_exactly_index_min_lines_readings_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int, indexed: int
) -> None:
    """Guards the threshold in lines of any kind (here lowered to 20 as ``INDEX_MIN_LINES``): a
    finished file of exactly 20 readings gets an index child, 19 do not (``true`` stands in
    for the child)."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_LINES", 20)
    index_child_is(monkeypatch, "true")
    sink = FileSink(FileConfig(dir=str(tmp_path), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write([Point("gpu", {"gpu": "0"}, {"power_watts": 300.0}, i) for i in range(n)])
    await sink.aclose()
    assert sink.stats()["indexes_started"] == indexed


async def test_a_failed_index_child_is_heard_of_while_an_earlier_one_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: the sink looks at every earlier index child each time it starts another, not
    only up to the first one still running: three rotations; the first file's child runs on
    (it would take a minute), the second file's fails (exit 1) before the third rotation,
    which counts and says that failure."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    out = tmp_path / "out"
    sink = FileSink(FileConfig(dir=str(out), fsync="never", max_bytes=1024), ctx(tmp_path))
    await sink.open()
    index_child_runs(
        monkeypatch,
        tmp_path / "child-python",
        f'#!/bin/sh\n[ "$4" = "{sink.current}" ] && exec sleep 60\nexit 1\n',
    )  # its 4th argument is the file to index
    await sink.write(steps(0, 12))
    await sink.write(steps(12, 12))  # rotates: the first file's child starts, and runs on
    (slow,) = list(sink._indexers)
    await sink.write(steps(24, 12))  # rotates: the second file's child starts, and fails
    try:
        (failing,) = [pid for pid in sink._indexers if pid != slow]
        second = sink._indexers[failing]
        _wait_exited(failing)
        await sink.write(steps(36, 12))  # rotates again: the failure is heard of
        assert (sink.stats()["indexes_started"], sink.stats()["index_failures"]) == (3, 1)
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert said == [f"indexing {second} failed (exit 1); reports read it as text"]
    finally:
        _stop(slow)
    await sink.aclose()


async def test_an_index_child_does_not_hold_the_agents_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: an index child (which may outlive the agent) reads from ``/dev/null``, not from
    the agent's stdin: with the agent's stdin a pipe, the child (a script that notes where its
    stdin leads) finds ``/dev/null`` there, so whatever feeds the agent sees it end when the
    agent does."""
    monkeypatch.setattr(file_sink, "INDEX_MIN_STEP_LINES", 10)
    seen = tmp_path / "stdin-of-child"
    index_child_runs(
        monkeypatch, tmp_path / "child-python", f"#!/bin/sh\nreadlink /proc/self/fd/0 > {seen}\n"
    )
    sink = FileSink(FileConfig(dir=str(tmp_path / "out"), fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(steps(0, 12))  # the last file, worth an index at close
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        await sink.aclose()  # starts the child, waits for it
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert sink.stats()["indexes_started"] == 1
    assert seen.read_text() == "/dev/null\n"
