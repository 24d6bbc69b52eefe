"""The file sink's fsync at rotation and close, whatever the policy but ``never``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
