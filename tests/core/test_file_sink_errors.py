"""What the file sink says when the disk refuses a write: a full disk (or quota, or file size
limit) is named as such, any other error by the system's own words."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.errors import WriteError
from acquisition.point import Point
from sinks.file import FileConfig, FileSink


def ctx(tmp_path: Path) -> PluginContext:
    return PluginContext(
        "h1", 1.0, tmp_path / "state", tmp_path / "data", tmp_path / "run", tags={"host": "h1"}
    )


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (errno.ENOSPC, "disk full"),
        (errno.EDQUOT, "disk full"),
        (errno.EFBIG, "disk full"),
        (errno.EIO, "Input/output error"),
        (errno.EBADF, "Bad file descriptor"),
    ],
)
async def test_a_refused_write_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, why: str
) -> None:
    """Guards: a write the disk refuses before any line reached the file is a retryable error
    naming the file and why: "disk full" for no space, a quota or a file size limit (what to
    free), the system's message for anything else (a failing disk is not a full one)."""
    sink = FileSink(FileConfig(path=str(tmp_path / "out.lp"), fsync="never"), ctx(tmp_path))
    await sink.open()
    real_write = os.write

    def refusing(fd: int, data: bytes) -> int:
        if bytes(data).startswith(b"m,"):  # the sink's lines; nothing else is refused
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refusing)
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(3)]
    with pytest.raises(WriteError) as info:
        await sink.write(batch)
    monkeypatch.undo()
    await sink.aclose()
    assert str(info.value) == f"cannot write {tmp_path / 'out.lp'}: {why}"
    assert info.value.retryable
    assert (tmp_path / "out.lp").read_bytes() == b""
    assert sink.lines_written == 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
async def test_a_failed_write_that_cannot_be_undone_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: when the sink cannot cut a failed write back off (its ``path`` a device that
    takes no truncation: ``/dev/full``, which refuses every write as a full disk), it says so
    as an error, naming the file and why, and the write still fails as one to retry."""
    sink = FileSink(FileConfig(path="/dev/full", fsync="never"), ctx(tmp_path))
    await sink.open()
    with pytest.raises(WriteError) as info:
        await sink.write([Point("m", {"k": "v"}, {"n": 1}, 1_000)])
    await sink.aclose()
    assert str(info.value) == "cannot write /dev/full: disk full"
    assert info.value.retryable
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert said == ["cannot truncate /dev/full after a failed write: [Errno 22] Invalid argument"]
