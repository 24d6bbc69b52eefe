"""The file sink's fsync: at rotation and close whatever the policy but ``never``, and on its interval."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import sinks.file as file_sink
from acquisition.api import PluginContext
from acquisition.point import Point
from sinks.file import FileConfig, FileSink


def ctx(tmp_path: Path) -> PluginContext:
    return PluginContext(
        "h1", 1.0, tmp_path / "state", tmp_path / "data", tmp_path / "run", tags={"host": "h1"}
    )


def pts(n: int, start: int = 0) -> list[Point]:
    return [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(start, start + n)]


@pytest.mark.parametrize("policy", ["interval", "always", "never"])
async def test_a_file_is_synced_when_it_is_rotated_out_and_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """Guards: under ``fsync = "interval"`` (an interval of an hour, so no timed sync happens
    here) each file is synced once as it is rotated out and the last one at close, so a
    finished file is on disk; ``never`` syncs nothing; ``always`` syncs after every batch."""
    synced: list[int] = []  # inode of each file synced, in order
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    config = FileConfig(dir=str(tmp_path), max_bytes=2048, max_files=100, fsync=policy)
    config.fsync_interval = 3600.0
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    batches = 20
    for i in range(batches):
        await sink.write(pts(10, start=i * 10))
    await sink.aclose()
    files = list(tmp_path.glob("nrg-*.lp"))
    inodes = sorted(f.stat().st_ino for f in files)
    assert len(files) > 2  # it rotated
    if policy == "interval":
        assert sorted(synced) == inodes  # each file once: at its rotation, the last at close
    elif policy == "always":
        assert len(synced) >= batches and set(synced) == set(inodes)
    else:
        assert synced == []


class SinkTime:
    """The file sink's view of :mod:`time` with a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


async def test_interval_fsync_counts_from_the_last_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: under ``fsync = "interval"`` (10 s) a batch is synced when 10 s or more have
    passed since the last sync (or the open), and the clock restarts at each sync. Opened at
    t=0, batches at 1, 10, 12, 19.9, 20 and 35 s: syncs at 10 (10 ≥ 10), 20 (20 − 10 = 10)
    and 35 (15 s after); none at 1, 12 or 19.9 (2 s and 9.9 s after the sync at 10)."""
    clock = SinkTime()
    monkeypatch.setattr(file_sink, "time", clock)
    synced_at: list[float] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced_at.append(clock.now - 1000.0)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    config = FileConfig(dir=str(tmp_path), max_bytes=1 << 30, fsync="interval")
    config.fsync_interval = 10.0
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    for i, t in enumerate((1.0, 10.0, 12.0, 19.9, 20.0, 35.0)):
        clock.now = 1000.0 + t
        await sink.write(pts(1, start=i))
    assert synced_at == [10.0, 20.0, 35.0]
    await sink.aclose()
