"""The file sink's size limit: a file may hold up to ``max_bytes``, not one byte less; a rotated
or closed file is closed; its counts of rotations and deleted files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from sinks.file import FileConfig, FileSink


def ctx(tmp_path: Path) -> PluginContext:
    return PluginContext(
        "h1", 1.0, tmp_path / "state", tmp_path / "data", tmp_path / "run", tags={"host": "h1"}
    )


async def test_a_file_is_filled_up_to_max_bytes_exactly(tmp_path: Path) -> None:
    """Guards: two batches that together make exactly ``max_bytes`` share one file; the third
    starts the next file."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    sink = FileSink(FileConfig(dir=str(tmp_path), max_bytes=2 * size, fsync="never"), ctx(tmp_path))
    await sink.open()
    await sink.write(batch)
    await sink.write(batch)
    assert [f.stat().st_size for f in tmp_path.glob("nrg-*.lp")] == [2 * size]
    await sink.write(batch)
    await sink.aclose()
    assert sorted(f.stat().st_size for f in tmp_path.glob("nrg-*.lp")) == [size, 2 * size]


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_rotated_and_closed_files_are_closed(tmp_path: Path) -> None:
    """Guards: every output file is closed when the sink moves to the next one and at close:
    after five files (one batch each, four rotations) and close, the process holds as many open
    files as before (a long run would otherwise run out of file descriptors)."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    before = open_files()
    sink = FileSink(FileConfig(dir=str(tmp_path), max_bytes=size, fsync="never"), ctx(tmp_path))
    await sink.open()
    for _ in range(5):
        await sink.write(batch)
    await sink.aclose()
    assert len(list(tmp_path.glob("nrg-*.lp"))) == 5
    assert open_files() == before


async def test_the_sink_counts_its_rotations_and_deleted_files(tmp_path: Path) -> None:
    """Guards: the sink's figures (reported in the agent's own ``nrg_collect`` points) say what
    it did: five batches of one file each make four rotations; keeping three files deletes the
    oldest two (at the third and fourth rotation); the file being written holds one batch."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    config = FileConfig(dir=str(tmp_path), max_bytes=size, max_files=3, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    idle = {"indexes_started": 0, "index_failures": 0}  # no step lines: no file worth an index
    assert sink.stats() == {"file_bytes": 0, "rotations": 0, "deleted_files": 0, **idle}
    for _ in range(5):
        await sink.write(batch)
    await sink.aclose()
    assert sink.stats() == {"file_bytes": size, "rotations": 4, "deleted_files": 2, **idle}
    assert len(list(tmp_path.glob("nrg-*.lp"))) == 3


@pytest.mark.parametrize(("max_total", "deleted"), [(5524, 1), (5523, 2), (7024, 0)])
async def test_the_total_size_counts_each_file_with_its_index(
    tmp_path: Path, max_total: int, deleted: int
) -> None:
    """Guards: ``max_total_bytes`` bounds the files and their step indexes together. An earlier
    run left four 1,000-byte files, each with a 500-byte index; the new file counts as full
    (``max_bytes`` 1,024). Total at open: 4 × 1,500 + 1,024 = 7,024 bytes: a limit of 7,024
    keeps all; 5,524 deletes the oldest file and its index (7,024 − 1,500 = 5,524, exactly the
    limit); 5,523 deletes the two oldest (4,024). Counting the files alone (5,024) would delete
    none."""
    for i in range(4):
        data = tmp_path / f"nrg-20250101T00000{i}Z.lp"
        data.write_bytes(b"m v=1i 1\n".ljust(1000, b"#"))
        data.with_name(data.name + ".idx").write_bytes(b"i" * 500)
        os.utime(data, (1000 + i, 1000 + i))
    config = FileConfig(dir=str(tmp_path), max_bytes=1024, max_total_bytes=max_total)
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.aclose()
    left = sorted(p.name for p in tmp_path.glob("nrg-2025*"))
    kept = [f"nrg-20250101T00000{i}Z.lp" for i in range(deleted, 4)]
    assert left == sorted([*kept, *(name + ".idx" for name in kept)])
    assert sink.stats()["deleted_files"] == deleted


async def test_files_take_the_permissions_the_umask_leaves(tmp_path: Path) -> None:
    """Guards: the sink creates its files readable and writable as any file the user creates
    (0o666 less the umask), never executable: 0o666 & ~0o022 = 0o644 (rw-r--r--) under umask
    022, 0o666 & ~0o002 = 0o664 under umask 002; the first file and one made at rotation."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    for umask, mode in ((0o022, 0o644), (0o002, 0o664)):
        d = tmp_path / f"u{umask:o}"
        config = FileConfig(dir=str(d), max_bytes=size, fsync="never")
        old = os.umask(umask)
        try:
            sink = FileSink(config, ctx(tmp_path))
            await sink.open()
            await sink.write(batch)
            await sink.write(batch)  # the second file, at rotation
            await sink.aclose()
        finally:
            os.umask(old)
        files = sorted(d.glob("nrg-*.lp"))
        assert len(files) == 2
        assert [f.stat().st_mode & 0o777 for f in files] == [mode, mode]


async def test_a_file_gone_while_the_files_are_listed_does_not_stop_pruning(
    tmp_path: Path,
) -> None:
    """Guards: a finished file that disappears between the sink listing its files and reading
    their times (removed by hand; here a link to nothing, whose time cannot be read) counts as
    the oldest and pruning goes on. Two files of an earlier run (``a`` older than ``b``) and the
    gone one; with ``max_files = 3``, the first rotation keeps 3 files: the new one, the one it
    rotated and ``b``; the gone one and ``a`` are deleted (2)."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    for name, mtime in (("nrg-a.lp", 1_000_000), ("nrg-b.lp", 2_000_000)):
        (tmp_path / name).write_text("m n=1i 1\n")
        os.utime(tmp_path / name, (mtime, mtime))
    (tmp_path / "nrg-gone.lp").symlink_to(tmp_path / "nowhere")
    config = FileConfig(dir=str(tmp_path), max_bytes=size, max_files=3, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.write(batch)
    await sink.write(batch)  # rotates: 4 finished files, 2 to delete
    await sink.aclose()
    left = sorted(p.name for p in tmp_path.glob("nrg-*.lp"))
    assert len(left) == 3 and "nrg-b.lp" in left
    assert "nrg-a.lp" not in left and not (tmp_path / "nrg-gone.lp").is_symlink()
    assert sink.stats()["deleted_files"] == 2


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_bytes": 1024}, None),  # the smallest file size taken
        ({"max_bytes": 1023}, "max_bytes must be at least 1024"),
        ({"max_files": 0}, None),  # keep no rotated file
        ({"max_files": -1}, "max_files must be >= 0"),
        ({"max_total_bytes": 0}, None),  # no total limit
        ({"max_total_bytes": -1}, "max_total_bytes must be >= 0"),
        ({"max_bytes": 2048, "max_total_bytes": 2048}, None),  # room for one whole file
        ({"max_bytes": 2048, "max_total_bytes": 2047}, "max_total_bytes must be 0 or at least"),
        ({"max_bytes": 2048, "max_total_bytes": 1}, "max_total_bytes must be 0 or at least"),
    ],
)
def test_size_settings_are_refused_just_past_their_limits(
    tmp_path: Path, settings: dict[str, int], error: str | None
) -> None:
    """Guards: each size setting of the file sink is taken at its limit and refused one past
    it, with the message that names it."""
    config = FileConfig(dir=str(tmp_path), **settings)  # type: ignore[arg-type]
    if error is None:
        config.validate()
    else:
        with pytest.raises(ValueError, match=error):
            config.validate()


async def test_gzipped_files_are_compressed_one_after_another(tmp_path: Path) -> None:
    """Guards: with ``compress = "gzip"`` a rotation waits for the compression of the file
    rotated before it, so one file is compressed at a time and close waits for each: three
    files rotated, the first one's compression held until the second rotation has begun; the
    order is start 1, end 1, start 2, end 2, and both rotated files end up ``.lp.gz``."""
    batch = [Point("m", {"k": "v"}, {"n": i}, 1_000 + i) for i in range(10)]
    size = len(LineEncoder({"host": "h1"}).encode_many(batch).encode())
    config = FileConfig(dir=str(tmp_path), max_bytes=max(size, 1024), compress="gzip")
    sink = FileSink(config, ctx(tmp_path))
    events: list[str] = []
    held = asyncio.Event()
    compress, open_file = sink._compress, sink._open_file

    async def compressing(path: Path, worth_index: bool) -> None:
        n = sum(e.startswith("start") for e in events) + 1
        events.append(f"start {n}")
        if n == 1:
            await held.wait()
        await compress(path, worth_index)
        events.append(f"end {n}")

    async def opening() -> None:
        if sink.rotations >= 2:  # the second rotation has begun
            held.set()
        await open_file()

    sink._compress = compressing  # type: ignore[method-assign]
    sink._open_file = opening  # type: ignore[method-assign]
    await sink.open()
    per_file = max(1, 1024 // size)
    for _ in range(3):
        for _ in range(per_file):
            await sink.write(batch)
    await sink.aclose()
    assert sink.rotations == 2
    assert events == ["start 1", "end 1", "start 2", "end 2"]
    assert len(list(tmp_path.glob("*.lp.gz"))) == 2
