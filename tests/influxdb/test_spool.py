"""The durable spool on a real filesystem: order, recovery across restarts, torn records, quota."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinks.influxdb.spool import (
    HEADER,
    MAGIC,
    FsyncPolicy,
    Spool,
    encode_record,
    parse_fsync_policy,
    parse_segment,
)
from tests.influxdb.helpers import (
    appends_after_the_cut,
    drain,
    fill,
    lines,
    open_segments,
    small_disk,
)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.nrgspool"))


# --- pure parts --------------------------------------------------------------------------------


def test_encode_record_layout() -> None:
    rec = encode_record(b"m v=1i 5\n", 1, 1_700_000_000_000_000_000)
    length, crc, points, at = struct.unpack(">IIIQ", rec[:20])
    assert (length, points, at) == (9, 1, 1_700_000_000_000_000_000)
    assert crc == zlib.crc32(struct.pack(">IQ", 1, 1_700_000_000_000_000_000) + b"m v=1i 5\n")
    assert rec[20:] == b"m v=1i 5\n"
    assert HEADER.size == 20


def test_parse_segment_stops_at_a_torn_tail() -> None:
    a = encode_record(b"a x=1i 1\n", 1, 10)
    b = encode_record(b"b x=2i 2\nb x=3i 3\n", 2, 20)
    data = MAGIC + a + b
    records, end, bad = parse_segment(data, 7)
    assert [(r.seq, r.offset, r.size, r.points, r.spooled_at_ns) for r in records] == [
        (7, 8, len(a), 1, 10),
        (7, 8 + len(a), len(b), 2, 20),
    ]
    assert (end, bad) == (len(data), False)
    # Cut inside the second record's payload, inside its header, and flip a payload byte.
    for broken in (data[:-3], data[: 8 + len(a) + 5], data[:-2] + b"X\n"):
        records, end, bad = parse_segment(broken, 7)
        assert [r.points for r in records] == [1]
        assert (end, bad) == (8 + len(a), True)


def test_a_record_longer_than_the_segment_is_torn_whatever_its_checksum() -> None:
    """Guards: a record whose header claims more bytes than the segment holds is torn, even when
    the bytes that are there pass its checksum (a header rewritten, its body cut: the checksum
    of what is left is no proof the record is whole)."""
    a = encode_record(b"a x=1i 1\n", 1, 10)
    b = encode_record(b"b x=2i 2\n", 1, 20)
    _, crc, points, at = HEADER.unpack_from(b)
    claims_more = HEADER.pack(len(b) - HEADER.size + 100, crc, points, at) + b[HEADER.size :]
    records, end, bad = parse_segment(MAGIC + a + claims_more, 7)
    assert [r.spooled_at_ns for r in records] == [10]
    assert (end, bad) == (8 + len(a), True)


@pytest.mark.parametrize(
    ("text", "interval", "said"),
    [
        ("always", 0.0, "always"),
        ("batch", 0.0, "always"),
        (0, 0.0, "always"),
        ("0ms", 0.0, "always"),
        ("never", None, "never"),
        ("1s", 1.0, "every 1s"),
        ("250ms", 0.25, "every 0.25s"),
        ("2m", 120.0, "every 120s"),
        (0.5, 0.5, "every 0.5s"),
    ],
)
def test_parse_fsync_policy(text: str | float, interval: float | None, said: str) -> None:
    """Guards: each way of writing the policy, and the words the sink's log gives it."""
    assert parse_fsync_policy(text) == FsyncPolicy(interval)
    assert parse_fsync_policy(text).describe() == said


@pytest.mark.parametrize("text", ["sometimes", "-1s", "1h", ""])
def test_parse_fsync_policy_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="fsync"):
        parse_fsync_policy(text)


# --- on disk -----------------------------------------------------------------------------------


async def test_fifo_and_commit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    for k in range(5):
        assert spool.append_nowait(lines(10 * k, 10), 10)
    assert (spool.records, spool.points) == (5, 50)
    batch = await spool.read(1)  # at least one record, whatever the limit
    assert (batch.records, batch.points, batch.payload) == (1, 10, lines(0, 10))
    await spool.commit(batch)
    assert await drain(spool) == lines(10, 40)
    assert (spool.records, spool.points, spool.bytes) == (0, 0, 0)
    await spool.close()


async def test_next_start_replays_what_is_left(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    for k in range(4):
        await spool.append(lines(10 * k, 10), 10)
    await spool.commit(await spool.read(1))  # first record delivered
    await spool.close()

    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.recovered_points, again.torn_records) == (
        3,
        30,
        30,
        0,
    )
    again.append_nowait(lines(40, 10), 10)
    assert await drain(again) == lines(10, 40)
    await again.close()

    third = Spool(tmp_path, max_bytes=1 << 20)
    await third.open()
    assert third.records == 0
    await third.close()


async def torn_last_of_two(directory: Path) -> Path:
    """A spool's one segment holding two records of 10 points, its last write 7 bytes short
    (power lost halfway through it)."""
    spool = Spool(directory, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.append(lines(10, 10), 10)
    await spool.close()
    (seg,) = segments(directory)
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 7)
    return seg


async def test_torn_last_record_is_skipped_and_counted(tmp_path: Path) -> None:
    seg = await torn_last_of_two(tmp_path)

    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.torn_records) == (1, 10, 1)
    assert again.discarded_bytes == len(encode_record(lines(10, 10), 10, 0)) - 7
    assert seg.stat().st_size == len(MAGIC) + len(encode_record(lines(0, 10), 10, 0))
    await appends_after_the_cut(again)


@pytest.mark.parametrize("damage", ["flip", "zeros", "no-magic"])
async def test_damaged_tail_never_crashes(tmp_path: Path, damage: str) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 3), 3)
    await spool.close()
    (seg,) = segments(tmp_path)
    data = bytearray(seg.read_bytes())
    if damage == "flip":
        data[-2] ^= 0x20
    elif damage == "zeros":
        data += bytes(4096)  # the filesystem extended the file but the data never landed
    else:
        data = bytearray(b"\0" * 5)
    seg.write_bytes(bytes(data))

    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert again.torn_records == 1
    assert again.points == (3 if damage == "zeros" else 0)
    await again.close()


async def test_quota_drops_new_points_and_counts_them(tmp_path: Path) -> None:
    quota = sum(len(encode_record(lines(10 * k, 10), 10, 0)) for k in range(3))
    spool = Spool(tmp_path, max_bytes=quota)
    await spool.open()
    accepted = [spool.append_nowait(lines(10 * k, 10), 10) for k in range(5)]
    assert accepted == [True, True, True, False, False]
    assert (spool.points, spool.dropped_points, spool.dropped_records) == (30, 20, 2)
    await spool.commit(await spool.read(1))
    assert spool.append_nowait(lines(50, 10), 10)
    assert spool.dropped_points == 20
    assert await drain(spool) == lines(10, 20) + lines(50, 10)
    await spool.close()


async def test_segments_roll_and_replayed_ones_are_deleted(tmp_path: Path) -> None:
    """Guards: segments roll at ``segment_bytes``, each closed when the next one starts (only
    the segment written to stays open, and none after close), and replayed ones are deleted."""
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await spool.open()
    payload = lines(0, 50)  # 970-byte records: 4 per segment
    for _ in range(10):
        spool.append_nowait(payload, 50)
    await spool.flush()
    assert [p.stat().st_size for p in segments(tmp_path)] == [8 + 4 * 970, 8 + 4 * 970, 8 + 2 * 970]
    assert open_segments(tmp_path) == 1
    batch = await spool.read(4096)
    assert batch.records == 4
    await spool.commit(batch)
    assert len(segments(tmp_path)) == 2
    await drain(spool)
    assert len(segments(tmp_path)) == 1  # the active segment stays
    await spool.close()
    assert open_segments(tmp_path) == 0
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    await reopened.open()
    assert reopened.records == 0
    await reopened.close()


async def test_an_earlier_runs_first_segment_is_deleted_once_replayed(tmp_path: Path) -> None:
    """Guards: after a restart, the segments an earlier run left are deleted as they are
    replayed, the first one (segment 0) included, before anything new is appended: 10 records
    of 970 bytes in segments of 4, 4 and 2; replaying the first 4 leaves 2 segment files."""
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await spool.open()
    for _ in range(10):
        spool.append_nowait(lines(0, 50), 50)
    await spool.close()
    assert len(segments(tmp_path)) == 3
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await again.open()
    batch = await again.read(4096)
    assert batch.records == 4
    await again.commit(batch)
    assert [p.stat().st_size for p in segments(tmp_path)] == [8 + 4 * 970, 8 + 2 * 970]
    await again.close()


@pytest.mark.parametrize("policy", ["always", "never", "50ms"])
async def test_every_fsync_policy_keeps_data_across_restart(tmp_path: Path, policy: str) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=parse_fsync_policy(policy))
    await spool.open()
    for k in range(3):
        spool.append_nowait(lines(k, 1), 1)
    await asyncio.sleep(0.1)  # lets the interval policy's timer fire; harmless for the others
    await spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert await drain(again) == lines(0, 3)
    await again.close()


async def test_oldest_age_uses_the_spool_time(tmp_path: Path) -> None:
    now = [1_000_000_000_000]
    spool = Spool(tmp_path, max_bytes=1 << 20, clock_ns=lambda: now[0])
    await spool.open()
    assert spool.oldest_age_s() == 0.0
    spool.append_nowait(lines(0, 1), 1)
    now[0] += 2_500_000_000
    spool.append_nowait(lines(1, 1), 1)
    now[0] += 1_000_000_000
    assert spool.oldest_age_s() == 3.5
    await spool.commit(await spool.read(1))
    assert spool.oldest_age_s() == 1.0
    await spool.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 20)),
        st.tuples(st.just("commit"), st.integers(1, 3)),
        st.tuples(st.just("reopen"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_spool_behaves_like_a_fifo_across_restarts(script: list[tuple[str, int]]) -> None:
    async def run(directory: Path) -> None:
        model: list[bytes] = []
        counter = 0
        spool = Spool(directory, max_bytes=1 << 20, segment_bytes=4096)
        await spool.open()
        for op, arg in script:
            if op == "append":
                payload = lines(counter, arg)
                counter += arg
                spool.append_nowait(payload, arg)
                model.append(payload)
            elif op == "commit":
                for _ in range(arg):
                    if not spool.records:
                        break
                    batch = await spool.read(1)
                    assert batch.payload == model.pop(0)
                    await spool.commit(batch)
            else:
                await spool.close()
                spool = Spool(directory, max_bytes=1 << 20, segment_bytes=4096)
                await spool.open()
            assert spool.records == len(model)
            assert spool.points == sum(p.count(b"\n") for p in model)
        assert await drain(spool) == b"".join(model)
        await spool.close()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(Path(d)))


# --- disk full, corruption, fsync --------------------------------------------------------------


async def test_disk_full_drops_only_the_failed_record_and_the_spool_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_disk(tmp_path / "disk", 256 * 1024) as disk:
        spool = Spool(disk / "spool", max_bytes=1 << 30, segment_bytes=1 << 20)
        await spool.open()
        assert spool.append_nowait(lines(0, 10), 10)
        await spool.flush()
        filler = fill(disk)
        # Records larger than a page: they need new blocks, which the full disk refuses.
        assert spool.append_nowait(lines(10, 500), 500)  # queued; its write fails
        assert spool.append_nowait(lines(510, 500), 500)
        # a replay read asked before the loop has heard of either failure: both records are
        # skipped (the one the disk refused and the one its segment then refused), not read
        # back as damaged
        assert (await spool.read(1 << 30)).payload == lines(0, 10)
        await spool.flush()
        assert (spool.points, spool.failed_points, spool.failed_records) == (10, 1000, 2)
        errors = [r for r in caplog.records if "cannot write" in r.getMessage()]
        assert len(errors) == 1  # once per episode
        filler.unlink()
        assert spool.append_nowait(lines(1010, 500), 500)  # the error state does not stick
        await spool.flush()
        assert any("writes again" in r.getMessage() for r in caplog.records)
        out = await drain(spool)
        assert out == lines(0, 10) + lines(1010, 500)
        # The record that failed is never read back nor counted again as damaged.
        assert (spool.corrupt_records, spool.failed_points) == (0, 1000)
        await spool.close()
        again = Spool(disk / "spool", max_bytes=1 << 30)
        await again.open()
        assert (again.records, again.torn_records) == (0, 0)
        await again.close()


async def test_a_write_cut_short_by_a_full_disk_is_cut_back_off(tmp_path: Path) -> None:
    """Guards: a record whose write stopped part-way (the disk had 8 KiB left for a 38 KB
    record) is truncated back off its segment: the segment keeps exactly what it had, and a
    restart finds no torn record."""
    with small_disk(tmp_path / "disk", 256 * 1024) as disk:
        spool = Spool(disk / "spool", max_bytes=1 << 30, segment_bytes=1 << 20)
        await spool.open()
        assert await spool.append(lines(0, 10), 10)
        (seg,) = segments(disk / "spool")
        before = seg.stat().st_size  # MAGIC + one record of 10 lines
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - 8192)  # two pages free again
        big = lines(10, 2000)  # 2000 lines of 19 bytes = 38,000 bytes
        assert len(big) == 38_000
        assert spool.append_nowait(big, 2000)  # queued; its write fails part-way
        # queued behind it, placed after it: refused too, though it would fit once cut back
        assert spool.append_nowait(lines(2010, 1), 1)
        await spool.flush()
        assert (spool.failed_records, spool.failed_points) == (2, 2001)
        assert seg.stat().st_size == before
        filler.unlink()
        await spool.close()
        again = Spool(disk / "spool", max_bytes=1 << 30)
        await again.open()
        assert (again.records, again.points, again.torn_records) == (1, 10, 0)
        assert await drain(again) == lines(0, 10)
        await again.close()


async def test_a_failed_write_that_cannot_be_cut_back_is_logged_and_found_torn_next_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: when a record's write stopped part-way and cutting it back fails too (the disk
    refuses the truncation), an error says so, naming the spool and why; the next start finds
    the torn record, cuts it off and replays the good one before it."""
    with small_disk(tmp_path / "disk", 256 * 1024) as disk:
        spool = Spool(disk / "spool", max_bytes=1 << 30, segment_bytes=1 << 20)
        await spool.open()
        assert await spool.append(lines(0, 10), 10)
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - 8192)  # two pages free again

        def refuse(fd: int, length: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "ftruncate", refuse)
        caplog.set_level(logging.ERROR, logger="sinks.influxdb")
        assert spool.append_nowait(lines(10, 2000), 2000)  # 38,000 bytes: stops part-way
        await spool.flush()
        monkeypatch.undo()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        (undo,) = [e for e in errors if "cannot undo a failed write" in e]
        assert str(disk / "spool") in undo and "Input/output error" in undo
        assert any("No space left on device" in e for e in errors)  # the write's own error
        filler.unlink()
        await spool.close()
        again = Spool(disk / "spool", max_bytes=1 << 30)
        await again.open()
        assert (again.records, again.points, again.torn_records) == (1, 10, 1)
        assert await drain(again) == lines(0, 10)
        await again.close()


async def test_awaited_append_raises_and_leaves_the_points_to_the_caller(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 128 * 1024) as disk:
        spool = Spool(disk / "spool", max_bytes=1 << 30)
        await spool.open()
        filler = fill(disk)
        with pytest.raises(OSError, match="cannot write"):
            await spool.append(lines(0, 100), 100)
        assert (spool.records, spool.points, spool.failed_points) == (0, 0, 0)
        filler.unlink()
        assert await spool.append(lines(0, 100), 100)
        assert await drain(spool) == lines(0, 100)
        await spool.close()


async def test_a_failed_first_record_leaves_no_segment_file(tmp_path: Path) -> None:
    """Guards: when the first record of a new segment cannot be written (disk full), the
    segment file it opened is removed, not left behind empty; the next record, once there is
    room, starts a segment of its own that holds exactly it."""
    with small_disk(tmp_path / "disk", 128 * 1024) as disk:
        spool = Spool(disk / "spool", max_bytes=1 << 30)
        await spool.open()
        filler = fill(disk)
        with pytest.raises(OSError, match="cannot write"):
            await spool.append(lines(0, 100), 100)
        assert segments(disk / "spool") == []
        filler.unlink()
        assert await spool.append(lines(100, 3), 3)
        (seg,) = segments(disk / "spool")
        assert seg.read_bytes().startswith(MAGIC)
        assert await drain(spool) == lines(100, 3)
        await spool.close()


async def test_corruption_found_at_replay_is_counted_once_and_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    for k in range(3):
        spool.append_nowait(lines(10 * k, 10), 10)
    await spool.flush()
    (seg,) = segments(tmp_path)
    data = bytearray(seg.read_bytes())
    second = len(MAGIC) + len(encode_record(lines(0, 10), 10, 0)) + HEADER.size + 5
    data[second] ^= 0x01  # a flipped bit inside the second record's payload
    seg.write_bytes(bytes(data))
    first = await spool.read(1 << 20)  # e.g. a replay whose post then fails: read again later
    again = await spool.read(1 << 20)
    assert first.payload == again.payload == lines(0, 10) + lines(20, 10)
    assert (spool.corrupt_records, spool.corrupt_points, spool.points) == (1, 10, 20)
    await spool.commit(again)
    assert spool.records == 0
    await spool.close()


async def test_corruption_in_the_middle_costs_one_record_at_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    for k in range(3):
        spool.append_nowait(lines(10 * k, 10), 10)
    await spool.close()
    (seg,) = segments(tmp_path)
    data = bytearray(seg.read_bytes())
    data[len(MAGIC) + len(encode_record(lines(0, 10), 10, 0)) + HEADER.size + 5] ^= 0x01
    seg.write_bytes(bytes(data))
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert again.torn_records == 1
    # the skipped record's bytes are reported: its 20-byte header and 10 lines of 19 bytes
    assert again.discarded_bytes == 20 + 10 * 19
    assert await drain(again) == lines(0, 10) + lines(20, 10)
    await again.close()


async def test_a_read_across_segments_leaves_no_file_open(tmp_path: Path) -> None:
    """Guards: a read that spans several segment files closes each of them: records of 300
    lines (5,700 bytes) with 4,096-byte segments take one segment each; reading the three
    leaves the process holding as many open files as before."""
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await spool.open()
    for k in range(3):
        spool.append_nowait(lines(300 * k, 300), 300)
    await spool.flush()
    assert len(segments(tmp_path)) == 3
    before = len(os.listdir("/proc/self/fd"))
    batch = await spool.read(1 << 20)
    assert batch.payload == lines(0, 900)
    assert len(os.listdir("/proc/self/fd")) == before
    await spool.commit(batch)
    await spool.close()


@pytest.mark.parametrize("policy", ["always", "never", "60m"])
async def test_fsync_per_policy_on_segments_and_cursor_before_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """Spy on os.fsync and os.replace: "always" syncs every append and the cursor before its
    rename; a duration syncs the segment once its timer fires, and the cursor before its rename;
    "never" syncs nothing, at close neither. With a policy that syncs, a new segment file's
    directory is synced as the file is created (its name survives a power cut), and the
    directory's descriptor is closed again: after close the process holds the files it held
    before the spool opened.

    The interval's timer is the event loop's: the test moves the loop's clock past it (an hour
    in no time) and waits for the sync itself, so no real time has to pass and none decides."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    loop = asyncio.get_running_loop()
    segment_synced = asyncio.Event()
    real_time = loop.time
    ahead_s = [0.0]

    def fsync(fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        events.append("fsync " + target)
        real_fsync(fd)
        if target.startswith("seg-"):
            loop.call_soon_threadsafe(segment_synced.set)  # fsync runs on the writer thread

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append(f"rename {Path(src).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(loop, "time", lambda: real_time() + ahead_s[0])
    open_before = len(os.listdir("/proc/self/fd"))
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=parse_fsync_policy(policy))
    await spool.open()
    events.clear()
    await spool.append(lines(0, 1), 1)
    seg_name = segments(tmp_path)[0].name
    appended = list(events)
    events.clear()
    segment_synced.clear()
    if policy == "60m":
        ahead_s[0] = 3600.0  # the interval's timer is due now
        await asyncio.wait_for(segment_synced.wait(), 60)  # a hang guard, not a timing
    await spool.sync_barrier()
    timed = list(events)
    events.clear()
    await spool.commit(await spool.read(1 << 20))
    committed = list(events)
    events.clear()
    await spool.close()
    closed = list(events)
    assert len(os.listdir("/proc/self/fd")) == open_before
    # at close the segment is synced already (always, the timer) or never to be (never)
    assert not [e for e in closed if e.startswith("fsync")]
    synced_segment = f"fsync {seg_name}"
    if policy == "always":
        assert appended[0] == f"fsync {tmp_path.name}"  # the directory, as the file is created
        assert synced_segment in appended and timed == []
        assert committed[:2] == ["fsync cursor.tmp", "rename cursor.tmp"]
    elif policy == "60m":
        assert appended == [f"fsync {tmp_path.name}"]
        assert synced_segment not in appended and timed == [synced_segment]
        assert committed[:2] == ["fsync cursor.tmp", "rename cursor.tmp"]
    else:
        assert not [e for e in appended + timed + committed if e.startswith("fsync")]
        assert committed == ["rename cursor.tmp"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=8),
    st.data(),
)
def test_a_flipped_byte_in_any_payload_costs_exactly_that_record(
    sizes: list[int], data: st.DataObject
) -> None:
    async def run(directory: Path) -> None:
        spool = Spool(directory, max_bytes=1 << 20)
        await spool.open()
        payloads = []
        start = 0
        for n in sizes:
            payloads.append(lines(start, n))
            spool.append_nowait(payloads[-1], n)
            start += n
        await spool.close()
        (seg,) = segments(directory)
        raw = bytearray(seg.read_bytes())
        k = data.draw(st.integers(0, len(payloads) - 1), label="record")
        offset = len(MAGIC) + sum(len(encode_record(p, 1, 0)) for p in payloads[:k])
        at = offset + HEADER.size + data.draw(st.integers(0, len(payloads[k]) - 1), label="byte")
        raw[at] ^= data.draw(st.integers(1, 255), label="flip")
        seg.write_bytes(bytes(raw))
        again = Spool(directory, max_bytes=1 << 20)
        await again.open()
        assert again.torn_records == 1
        assert await drain(again) == b"".join(p for i, p in enumerate(payloads) if i != k)
        await again.close()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(Path(d)))


@pytest.mark.parametrize(
    "interval", ["10s", "10", " 10 ", 10, "10000ms"], ids=["10s", "bare", "spaced", "int", "ms"]
)
def test_an_interval_policy_syncs_once_the_interval_has_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: str | int
) -> None:
    """Guards: with fsync every 10 s, a record appended when 10 s have passed since the last
    sync is synced at once (no record stays unsynced longer than the interval); earlier ones
    wait. A clock that reads what the test sets: appends at 1, 9.9, 10, 15, 20 and 29.9 s
    since the last sync at 0 s: syncs at 10 and 20 s (10 − 0 ≥ 10, 20 − 10 ≥ 10). The interval
    written in seconds with or without a unit (a bare ``"10"`` is 10 s, not 0 s, which would
    sync at every append) or in ms (10000 × 0.001 = 10 s)."""
    import time

    from sinks.influxdb.segments import SegmentFiles

    now = [0.0]
    synced: list[float] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith("seg-"):
            synced.append(now[0])
        real_fsync(fd)

    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(os, "fsync", fsync)
    files = SegmentFiles(tmp_path, parse_fsync_policy(interval))
    files.recover()
    offset = len(MAGIC)
    for i, at in enumerate([1.0, 9.9, 10.0, 15.0, 20.0, 29.9]):
        now[0] = at
        record = encode_record(lines(i, 1), 1, 0)
        files.append(0, offset, record)
        offset += len(record)
    monkeypatch.undo()
    files.close()
    assert synced == [10.0, 20.0]


@pytest.mark.parametrize(("policy", "expected"), [("10s", [(0, 2.0), (1, 3.0)]), ("never", [])])
def test_a_segment_with_unsynced_records_is_synced_when_it_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, expected: list[object]
) -> None:
    """Guards: with fsync every 10 s, records appended since the last sync reach the disk when
    their segment is closed, whether the spool moves on to the next segment or closes: one
    record in segment 0 at 1 s and one in segment 1 at 2 s (neither due: 10 s have not passed),
    closing at 3 s: segment 0 synced at 2 s, segment 1 at 3 s. With ``"never"``, no sync."""
    import time

    from sinks.influxdb.segments import SegmentFiles

    now = [0.0]
    synced: list[tuple[int, float]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if name.startswith("seg-"):
            synced.append((int(name[4:24]), now[0]))
        real_fsync(fd)

    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(os, "fsync", fsync)
    files = SegmentFiles(tmp_path, parse_fsync_policy(policy))
    files.recover()
    for seq, at in ((0, 1.0), (1, 2.0)):
        now[0] = at
        files.append(seq, len(MAGIC), encode_record(lines(seq, 1), 1, 0))
    now[0] = 3.0
    files.close()
    assert synced == expected


async def test_segments_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """Guards: a spool segment holds the points as they go to the server, so it is made readable
    and writable by the agent's user only (0o600, whatever the umask lets through)."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 1), 1)
    await spool.close()
    (seg,) = segments(tmp_path)
    assert seg.stat().st_mode & 0o777 == 0o600


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """Each file the spool syncs from now on, with what it holds on disk as it is synced."""
    seen: list[tuple[str, bytes]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        seen.append((path.name, path.read_bytes() if path.is_file() else b""))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


async def test_the_cursor_is_synced_with_its_text_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: the cursor reaches the disk before it replaces the old one: when ``cursor.tmp``
    is synced it already holds ``<segment> <offset>`` (not an empty file still in a buffer):
    one 19-byte line replayed from segment 0 leaves the cursor at 8 + 20 + 19 = 47."""
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=parse_fsync_policy("always"))
    await spool.open()
    await spool.append(lines(0, 1), 1)
    synced = _synced(monkeypatch)
    await spool.commit(await spool.read(1 << 20))
    monkeypatch.undo()
    await spool.close()
    assert [text for name, text in synced if name == "cursor.tmp"] == [b"0 47\n"]


async def test_a_torn_tail_is_cut_off_on_disk_before_the_spool_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: the cut of a torn last record is synced as the spool opens, so a power cut
    cannot bring the torn bytes back under later records: the segment is synced holding its
    magic and the one good record (8 + 20 + 190 bytes)."""
    seg = await torn_last_of_two(tmp_path)
    good = seg.read_bytes()[: 8 + 20 + 190]
    synced = _synced(monkeypatch)
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    monkeypatch.undo()
    await again.close()
    assert (seg.name, good) in synced


def test_a_record_of_2_gib_is_refused(tmp_path: Path) -> None:
    """Guards the record limit: a payload of exactly 2 GiB (2,147,483,648 bytes) is refused with
    its size before anything is read of it (a sparse file mapped, no memory spent)."""
    import mmap

    sparse = tmp_path / "big"
    with sparse.open("wb") as f:
        f.truncate(1 << 31)
    with (
        sparse.open("rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as big,
        pytest.raises(ValueError, match="record of 2147483648 bytes is too large"),
    ):
        encode_record(big, 1, 0)  # type: ignore[arg-type]
