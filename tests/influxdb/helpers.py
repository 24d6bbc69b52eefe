"""Small helpers shared by the InfluxDB sink tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from acquisition.api import PluginContext
from acquisition.point import Point
from sinks.influxdb import InfluxDBConfig, InfluxDBSink
from sinks.influxdb.spool import Spool

__all__ = [
    "T0_NS",
    "appends_after_the_cut",
    "drain",
    "fill",
    "lines",
    "make_points",
    "make_sink",
    "open_segments",
    "small_disk",
    "until",
]

T0_NS = 1_763_000_000_000_000_000
"""A fixed, millisecond-aligned start time (VictoriaMetrics keeps milliseconds)."""


def make_points(start: int, n: int, measurement: str = "m") -> list[Point]:
    """Points ``start..start+n-1``: one series, 1 ms apart, ``v`` = index (float), ``n`` = int."""
    return [
        Point(measurement, {"k": "a"}, {"v": float(i), "n": i}, T0_NS + i * 1_000_000)
        for i in range(start, start + n)
    ]


def lines(start: int, n: int) -> bytes:
    """``n`` line-protocol lines of 19 bytes each (``m v=000007i 000007\\n``), for the spool."""
    return b"".join(b"m v=%06di %06d\n" % (i, i) for i in range(start, start + n))


async def drain(spool: Spool, max_bytes: int = 1 << 20) -> bytes:
    """Every record's payload, oldest first, each committed once read."""
    out = b""
    while spool.records:
        batch = await spool.read(max_bytes)
        out += batch.payload
        await spool.commit(batch)
    return out


async def appends_after_the_cut(spool: Spool) -> None:
    """``spool`` was opened on a segment whose damaged tail was cut after ``lines(0, 10)``:
    an append there lands after the good record, and the next open reads both, nothing torn."""
    await spool.append(lines(20, 5), 5)
    await spool.close()
    third = Spool(spool.directory, max_bytes=1 << 20)
    await third.open()
    assert (third.torn_records, third.points) == (0, 15)
    assert await drain(third) == lines(0, 10) + lines(20, 5)
    await third.close()


def make_sink(context: PluginContext, url: str, **options: Any) -> InfluxDBSink:
    config = replace(
        InfluxDBConfig(url=url, bucket="nrg", retry_initial=0.05, retry_max=0.5, fsync="never"),
        **options,
    )
    return InfluxDBSink(config, context)


async def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``cond`` (a hang guard, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.contextmanager
def small_disk(where: Path, size_bytes: int, inodes: int = 0) -> Iterator[Path]:
    """A real tmpfs of ``size_bytes`` mounted at ``where`` (skips unless root may mount); with
    ``inodes``, room for that many files and directories, its own root included."""
    import pytest

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a small tmpfs needs root (mount -t tmpfs); disk-full paths not exercised")
    where.mkdir(parents=True, exist_ok=True)
    limit = f",nr_inodes={inodes}" if inodes else ""
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}{limit}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` up to the last byte; returns the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, chunk)  # a short write takes the last bytes, then ENOSPC
            except OSError:
                break
    finally:
        os.close(fd)
    return filler


def open_segments(directory: Path) -> int:
    """How many of ``directory``'s segment files this process holds open (deleted ones too)."""
    fds = os.listdir("/proc/self/fd")
    targets = [
        os.readlink(f"/proc/self/fd/{fd}") for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")
    ]
    return sum(t.startswith(f"{directory}/seg-") for t in targets)
