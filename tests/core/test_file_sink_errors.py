"""What the file sink says when the disk refuses a write: a full disk (or quota, or file size
limit) is named as such, any other error by the system's own words."""

from __future__ import annotations

import errno
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
