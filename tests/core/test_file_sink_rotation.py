"""The file sink's size limit: a file may hold up to ``max_bytes``, not one byte less; a rotated
or closed file is closed; its counts of rotations and deleted files."""

from __future__ import annotations

import asyncio
import errno
import gzip
import logging
import os
import time
from pathlib import Path

import pytest

import sinks.file as file_sink
from acquisition.api import PluginContext
from acquisition.errors import WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from sinks.file import FileConfig, FileSink
from tests.influxdb.helpers import fill, small_disk


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


async def test_a_file_without_an_index_counts_its_own_size_alone(tmp_path: Path) -> None:
    """Guards: a finished file without a step index counts only its own bytes towards
    ``max_total_bytes``: four 1,000-byte files of an earlier run and the new file counted full
    (``max_bytes`` 1,024): 4 × 1,000 + 1,024 = 5,024 bytes, kept whole under a limit of 5,024."""
    for i in range(4):
        data = tmp_path / f"nrg-20250101T00000{i}Z.lp"
        data.write_bytes(b"m v=1i 1\n".ljust(1000, b"#"))
        os.utime(data, (1000 + i, 1000 + i))
    config = FileConfig(dir=str(tmp_path), max_bytes=1024, max_total_bytes=5024)
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.aclose()
    assert len(list(tmp_path.glob("nrg-2025*.lp"))) == 4
    assert sink.stats()["deleted_files"] == 0


async def test_max_files_1_keeps_only_the_file_being_written(tmp_path: Path) -> None:
    """Guards: ``max_files = 1`` counts the file being written, so no finished file stays: the
    two files an earlier run left are deleted as the sink opens, and the file rotated out is
    deleted at the rotation."""
    for name in ("nrg-a.lp", "nrg-b.lp"):
        (tmp_path / name).write_text("m n=1i 1\n")
    config = FileConfig(
        dir=str(tmp_path), max_bytes=len(line(0)), max_files=1, max_total_bytes=1 << 30
    )
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    assert sink.stats()["deleted_files"] == 2
    for i in range(2):
        await sink.write(one_line(i))
    await sink.aclose()
    (left,) = tmp_path.glob("nrg-*.lp")
    assert left.read_text() == line(1)
    assert sink.stats()["deleted_files"] == 3


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


class _StoppedUtc:
    """The file sink's ``time`` with its UTC clock stopped at 1,764,000,000 s (20,416 days and
    57,600 s after 1970: 2025-11-24 16:00:00), so that every name it makes falls in one second;
    its other clocks run."""

    STAMP = "20251124T160000Z"

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def gmtime(self, seconds: float | None = None) -> time.struct_time:
        return time.gmtime(1_764_000_000)


def one_line(i: int) -> list[Point]:
    return [Point("m", {}, {"n": i}, 1_000 + i)]


def line(i: int) -> str:
    return f"m,host=h1 n={i}i {1_000 + i}\n"


async def test_a_fixed_file_rotated_twice_within_a_second_keeps_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a fixed ``path`` is renamed aside when it rotates, with the second in its name,
    and a later rotation within that second takes the next free name instead of replacing the
    first: four one-line files (``max_bytes`` one line) leave ``out.lp`` with the last line and
    ``out.<second>.lp``, ``out.<second>-1.lp``, ``out.<second>-2.lp`` with the three before."""
    monkeypatch.setattr(file_sink, "time", _StoppedUtc())
    config = FileConfig(path=str(tmp_path / "out.lp"), max_bytes=len(line(0)), fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    for i in range(4):
        await sink.write(one_line(i))
    await sink.aclose()
    stamp = _StoppedUtc.STAMP
    assert {p.name: p.read_text() for p in tmp_path.glob("out*")} == {
        f"out.{stamp}.lp": line(0),
        f"out.{stamp}-1.lp": line(1),
        f"out.{stamp}-2.lp": line(2),
        "out.lp": line(3),
    }
    assert sink.stats()["rotations"] == 3


async def test_no_file_takes_the_name_of_a_compressed_file_of_the_same_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: an earlier run that stopped within the same second left ``<name>.lp.gz`` (its
    ``.lp`` compressed and removed); a new file, or a fixed file rotated aside, takes the next
    name, and compressing it leaves the earlier ``.lp.gz`` as it was."""
    monkeypatch.setattr(file_sink, "time", _StoppedUtc())
    stamp = _StoppedUtc.STAMP
    dated, fixed = tmp_path / "dated", tmp_path / "fixed"
    for earlier in (dated / f"nrg-{stamp}.lp.gz", fixed / f"out.{stamp}.lp.gz"):
        earlier.parent.mkdir()
        earlier.write_bytes(gzip.compress(b"earlier run\n"))
    for config in (
        FileConfig(dir=str(dated), max_bytes=len(line(0)), compress="gzip", fsync="never"),
        FileConfig(path=str(fixed / "out.lp"), max_bytes=len(line(0)), compress="gzip"),
    ):
        sink = FileSink(config, ctx(tmp_path))
        await sink.open()
        for i in range(2):
            await sink.write(one_line(i))
        await sink.aclose()
    assert {p.name: gzip.decompress(p.read_bytes()) for p in dated.glob("*.gz")} == {
        f"nrg-{stamp}.lp.gz": b"earlier run\n",
        f"nrg-{stamp}-1.lp.gz": line(0).encode(),
    }
    assert (dated / f"nrg-{stamp}-2.lp").read_text() == line(1)
    assert {p.name: gzip.decompress(p.read_bytes()) for p in fixed.glob("*.gz")} == {
        f"out.{stamp}.lp.gz": b"earlier run\n",
        f"out.{stamp}-1.lp.gz": line(0).encode(),
    }
    assert (fixed / "out.lp").read_text() == line(1)


async def test_pruning_goes_on_past_a_file_it_cannot_remove(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: an old file that cannot be removed (here a directory named like one) is said,
    with the file and why, and pruning goes on with the next oldest: three old ``nrg-*.lp``
    (``a`` the oldest, the directory) and ``max_files = 2``: the new file and one old one stay,
    so two go; ``a`` cannot, so ``b`` goes and ``c`` stays; one file deleted."""
    (tmp_path / "nrg-a.lp").mkdir()
    for name in ("nrg-b.lp", "nrg-c.lp"):
        (tmp_path / name).write_text("m n=1i 1\n")
    for i, name in enumerate(("nrg-a.lp", "nrg-b.lp", "nrg-c.lp")):
        os.utime(tmp_path / name, (1_000 + i, 1_000 + i))
    config = FileConfig(dir=str(tmp_path), max_files=2, max_total_bytes=1 << 30, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.aclose()
    assert (tmp_path / "nrg-a.lp").is_dir() and (tmp_path / "nrg-c.lp").exists()
    assert not (tmp_path / "nrg-b.lp").exists()
    assert sink.stats()["deleted_files"] == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"cannot remove old output file {tmp_path / 'nrg-a.lp'}: Is a directory"]


@pytest.mark.parametrize("fixed", [False, True], ids=["dated", "fixed"])
async def test_a_new_file_the_disk_refuses_is_made_at_the_next_write(
    tmp_path: Path, fixed: bool
) -> None:
    """Guards: when the disk has no room for the next file at a rotation (here a filesystem
    with room for no more files), the write fails as one to retry, saying why, and the next
    write, once there is room, makes the file and writes to it, without rotating again: two
    files, one line each, one rotation; dated files and a fixed ``path`` alike."""
    with small_disk(tmp_path / "disk", 64 * 1024, inodes=4) as disk:
        where = {"path": str(disk / "nrg-out.lp")} if fixed else {"dir": str(disk)}
        config = FileConfig(
            **where,  # type: ignore[arg-type]
            max_bytes=len(line(0)),
            max_total_bytes=1 << 20,
            fsync="never",
        )
        sink = FileSink(config, ctx(tmp_path))
        await sink.open()
        await sink.write(one_line(0))
        fillers = []
        while True:  # take every file the disk has left
            try:
                fillers.append(disk / f"filler{len(fillers)}")
                fillers[-1].touch()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                fillers.pop()
                break
        with pytest.raises(WriteError) as refused:
            await sink.write(one_line(1))
        assert refused.value.retryable
        assert "No space left on device" in str(refused.value)
        fillers[0].unlink()
        await sink.write(one_line(1))
        await sink.aclose()
        written = sorted(p.read_text() for p in disk.glob("nrg-*.lp"))
    assert written == [line(0), line(1)]
    assert sink.stats()["rotations"] == 1


async def test_a_file_the_disk_has_no_room_to_compress_is_kept_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: with ``compress = "gzip"`` on a full disk, a rotated file that cannot be
    compressed is kept as it is, whole, the failure said with the file and why, and no half
    ``.lp.gz.tmp`` left taking space."""
    with small_disk(tmp_path / "disk", 64 * 1024) as disk:
        config = FileConfig(
            dir=str(disk), max_bytes=len(line(0)), max_total_bytes=1 << 20, compress="gzip"
        )
        sink = FileSink(config, ctx(tmp_path))
        await sink.open()
        await sink.write(one_line(0))
        first = sink.current
        filler = fill(disk)
        with pytest.raises(WriteError):  # rotates, then no room for the line either
            await sink.write(one_line(1))
        await sink.aclose()
        filler.unlink()
        assert first is not None and sink.current is not None
        assert first.read_text() == line(0)
        assert sorted(p.name for p in disk.iterdir()) == sorted([first.name, sink.current.name])
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"cannot compress {first} (kept as it is): [Errno 28] No space left on device"]


async def test_a_file_gone_counts_older_than_one_dated_before_1970(tmp_path: Path) -> None:
    """Guards: a finished file whose time cannot be read (gone: a link to nothing) counts as
    older than any other, even one dated 1969-12-31 (86,400 s before 1970): with
    ``max_files = 2`` the new file and one old one stay, so the gone one goes first."""
    (tmp_path / "nrg-1969.lp").write_text("m n=1i 1\n")
    os.utime(tmp_path / "nrg-1969.lp", (-86_400, -86_400))
    (tmp_path / "nrg-gone.lp").symlink_to(tmp_path / "nowhere")
    config = FileConfig(dir=str(tmp_path), max_files=2, max_total_bytes=1 << 30, fsync="never")
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    await sink.aclose()
    assert (tmp_path / "nrg-1969.lp").exists()
    assert not (tmp_path / "nrg-gone.lp").is_symlink()
    assert sink.stats()["deleted_files"] == 1


async def test_compressed_files_are_pruned_as_they_are_made(tmp_path: Path) -> None:
    """Guards: with ``compress = "gzip"`` the sink keeps ``max_files`` as it rotates, counting
    each compressed file once it is made: an earlier run left ``a`` and ``b`` (``a`` older);
    with ``max_files = 2`` opening deletes ``a``, and the first rotation, once its file is
    compressed, deletes ``b``: the compressed file and the one being written stay."""
    for i, name in enumerate(("nrg-a.lp", "nrg-b.lp")):
        (tmp_path / name).write_text("m n=1i 1\n")
        os.utime(tmp_path / name, (1_000 + i, 1_000 + i))
    config = FileConfig(
        dir=str(tmp_path), max_bytes=len(line(0)), max_files=2, compress="gzip", fsync="never"
    )
    sink = FileSink(config, ctx(tmp_path))
    await sink.open()
    assert sorted(p.name for p in tmp_path.glob("nrg-[ab].lp")) == ["nrg-b.lp"]
    for i in range(2):
        await sink.write(one_line(i))
    await sink.aclose()
    (gz,) = tmp_path.glob("nrg-*.lp.gz")
    (plain,) = tmp_path.glob("nrg-*.lp")
    assert (gzip.decompress(gz.read_bytes()).decode(), plain.read_text()) == (line(0), line(1))
    assert sink.stats()["deleted_files"] == 2
