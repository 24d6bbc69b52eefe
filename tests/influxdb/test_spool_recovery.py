"""The spool after damage or a failed write: an unreadable cursor, a corrupt record followed by a
torn header shorter than a header or by a good record whatever its checksum, a record written
after one the disk refused."""

from __future__ import annotations

import errno
import logging
import os
import threading
import zlib
from pathlib import Path

import pytest

from sinks.influxdb.segments import FsyncPolicy
from sinks.influxdb.spool import MAGIC, Spool, encode_record
from tests.influxdb.helpers import appends_after_the_cut, drain, lines


def spooled_at_for_crc(payload: bytes, points: int, crc: int) -> int:
    """A spool time (ns) that gives a record of ``payload`` and ``points`` the checksum ``crc``:
    CRC-32 is affine in the message bits, so the 64 bits of the time solve 32 linear
    equations over GF(2) (Gaussian elimination)."""

    def crc_of(at: int) -> int:
        return zlib.crc32(payload, zlib.crc32(points.to_bytes(4, "big") + at.to_bytes(8, "big")))

    base = crc_of(0)
    rows = [(crc_of(1 << i) ^ base, 1 << i) for i in range(64)]  # (effect on the crc, bits)
    want, at = base ^ crc, 0
    for bit in range(32):
        pivot = next((r for r in rows if r[0] >> bit & 1), None)
        if pivot is None:
            continue
        rows.remove(pivot)
        rows = [(e ^ pivot[0], b ^ pivot[1]) if e >> bit & 1 else (e, b) for e, b in rows]
        if want >> bit & 1:
            want, at = want ^ pivot[0], at ^ pivot[1]
    assert want == 0 and crc_of(at) == crc
    return at


async def test_a_corrupt_record_is_stepped_over_whatever_the_next_ones_checksum(
    tmp_path: Path,
) -> None:
    """Guards: a record whose checksum fails, followed by a good record, costs that record only,
    whatever the good record's own checksum: here 0, a number below its length. 10 good points, 5 corrupt (20 + 5 × 19 = 115 bytes discarded,
    one torn record), then the 5 after them replayed: 15 points in 2 records."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.close()
    (seg,) = tmp_path.glob("seg-*.nrgspool")
    bad = bytearray(encode_record(lines(10, 5), 5, 0))
    bad[-2] ^= 0x20  # a flipped payload byte: its checksum fails, its length still fits
    after = encode_record(lines(15, 5), 5, spooled_at_for_crc(lines(15, 5), 5, 0))
    assert after[4:8] == bytes(4)  # the header's checksum field: 0
    seg.write_bytes(seg.read_bytes() + bytes(bad) + after)

    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.torn_records) == (2, 15, 1)
    assert again.discarded_bytes == 115
    assert await drain(again) == lines(0, 10) + lines(15, 5)
    await again.close()


@pytest.mark.parametrize("cursor", ["garbage\n", "7\n", "1 2 3\n", ""])
async def test_an_unreadable_cursor_replays_every_record_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cursor: str
) -> None:
    """Guards: a damaged cursor file (not two numbers) must not keep the spool from opening;
    every record on disk is replayed again (sent twice rather than lost) and a warning says so."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    for k in range(3):
        await spool.append(lines(10 * k, 10), 10)
    await spool.commit(await spool.read(1))  # the first record replayed: the cursor moves on
    await spool.close()
    assert (tmp_path / "cursor").read_text() != cursor  # it was a readable cursor
    (tmp_path / "cursor").write_text(cursor)

    caplog.set_level(logging.WARNING)
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    # 3 records of 10 points: the one replayed before is replayed again
    assert (again.records, again.points, again.torn_records) == (3, 30, 0)
    assert await drain(again) == lines(0, 30)
    await again.close()
    assert "cursor" in caplog.text and "unreadable" in caplog.text


async def test_a_corrupt_record_before_a_torn_short_header_is_cut_off_with_it(
    tmp_path: Path,
) -> None:
    """Guards: a record whose checksum fails, followed by the first 13 bytes of a header (a
    write cut by a power loss), is not stepped over (no valid record follows it): the segment
    is cut back to the good record, both count as one torn record, and their bytes as
    discarded; the spool opens and appends after the good record."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.close()
    (seg,) = tmp_path.glob("seg-*.nrgspool")
    good = seg.read_bytes()
    assert len(good) == 8 + 20 + 10 * 19  # magic, header, 10 lines of 19 bytes: 218
    bad = bytearray(encode_record(lines(10, 5), 5, 0))  # 20 + 5 * 19 = 115 bytes
    bad[-2] ^= 0x20  # a flipped payload byte: its checksum fails, its length still fits
    torn = encode_record(lines(15, 5), 5, 0)[:13]
    seg.write_bytes(good + bytes(bad) + torn)

    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.torn_records) == (1, 10, 1)
    assert again.discarded_bytes == 115 + 13
    assert seg.read_bytes() == good
    await appends_after_the_cut(again)
    assert good.startswith(MAGIC)


async def test_a_record_after_one_the_disk_refused_is_read_before_it_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards against losing points: a replay read chosen while a refused write is not yet
    reported holds a record the disk refused (300 points) between two good ones; the batch
    carries both good records' lines and counts exactly them (10 + 10 points), so committing it
    after delivery forgets nothing that was not sent. Segments of 4 KiB: the 5,720-byte record
    (20-byte header, 300 lines of 19 bytes) and the next one each start a segment of their own;
    the disk refuses any write over 4 KiB (a full disk that still takes small writes)."""
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await spool.open()
    assert await spool.append(lines(0, 10), 10)
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if threading.current_thread().name.startswith("nrg-spool") and len(data) > 4096:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    assert spool.append_nowait(lines(10, 300), 300)  # refused by the disk
    assert spool.append_nowait(lines(310, 10), 10)  # the next segment: written
    batch = await spool.read(1 << 20)
    assert batch.payload == lines(0, 10) + lines(310, 10)
    assert (batch.records, batch.points) == (2, 10 + 10)
    await spool.commit(batch)
    assert (spool.records, spool.points, spool.failed_points) == (0, 0, 300)
    await spool.close()


async def test_a_segment_cut_before_its_magic_is_counted_as_torn_and_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards the counts of a crash right after a segment was created: a segment holding only
    the first 3 bytes of its 8-byte magic is one torn record of 3 discarded bytes, and an empty
    segment is nothing torn (the warning says so); both files go, and the good record before
    them (10 points) is replayed. Opened again, nothing more is torn."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.close()
    (good,) = tmp_path.glob("seg-*.nrgspool")
    cut, empty = tmp_path / f"seg-{1:020d}.nrgspool", tmp_path / f"seg-{2:020d}.nrgspool"
    cut.write_bytes(MAGIC[:3])
    empty.write_bytes(b"")

    caplog.set_level(logging.WARNING)
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.torn_records, again.discarded_bytes) == (1, 10, 1, 3)
    assert "skipped 1 torn record(s) (3 bytes)" in caplog.text
    assert not cut.exists() and not empty.exists() and good.exists()
    await again.close()
    third = Spool(tmp_path, max_bytes=1 << 20)
    await third.open()
    assert (third.torn_records, third.discarded_bytes) == (0, 0)
    assert await drain(third) == lines(0, 10)
    await third.close()


def test_a_segment_whose_write_failed_stays_refused_after_a_commit_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: once a write to a segment failed, the later records queued for it (their
    offsets assumed the failed one) are refused even after a commit whose cursor still lies in
    that segment (its first record not replayed yet): segment 0 keeps only its magic and its
    first record; a commit past it (segments below 1 forgotten) lets segment 1 be written."""
    from sinks.influxdb.segments import FsyncPolicy, SegmentBroken, SegmentFiles, parse_segment

    files = SegmentFiles(tmp_path, FsyncPolicy(None))
    files.recover()
    first, failed, queued = (encode_record(lines(i, 1), 1, 0) for i in range(3))
    files.append(0, len(MAGIC), first)
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        files.append(0, len(MAGIC) + len(first), failed)
    monkeypatch.setattr(os, "write", real_write)
    files.commit((0, len(MAGIC)), 0)  # the first record is not replayed yet
    with pytest.raises(SegmentBroken):
        files.append(0, len(MAGIC) + 2 * len(first), queued)
    data = files.path(0).read_bytes()
    assert data == MAGIC + first
    found, end, bad = parse_segment(data, 0)
    assert ([r.points for r in found], end, bad) == ([1], len(MAGIC) + len(first), False)
    files.commit((1, len(MAGIC)), 1)  # segment 0 replayed and removed
    files.append(1, len(MAGIC), queued)
    files.close()
    assert not files.path(0).exists()
    assert files.path(1).read_bytes() == MAGIC + queued


async def test_segments_left_behind_the_cursor_are_removed_and_the_later_ones_replayed(
    tmp_path: Path,
) -> None:
    """Guards: a segment wholly behind the cursor (replayed, its removal cut short by a crash)
    is removed at the next open and the segments after it are still read: three records of
    250 lines (4,750 bytes, one segment each), the first two replayed, the first segment back
    on disk: the third record alone is replayed, once."""
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await spool.open()
    for k in range(3):
        await spool.append(lines(250 * k, 250), 250)
    first = sorted(tmp_path.glob("seg-*.nrgspool"))[0]
    kept = first.read_bytes()
    assert len(list(tmp_path.glob("seg-*.nrgspool"))) == 3
    await spool.commit(await spool.read(10_000))  # the first two records, 9,500 bytes
    await spool.close()
    assert not first.exists()
    first.write_bytes(kept)  # as if the crash came before it was removed

    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    await again.open()
    assert not first.exists()
    assert (again.records, again.points, again.torn_records) == (1, 250, 0)
    assert await drain(again) == lines(500, 250)
    await again.close()


async def test_a_last_record_torn_inside_its_header_is_cut_off(tmp_path: Path) -> None:
    """Guards: a power cut that left only the first 13 bytes of a record's 20-byte header (no
    payload) costs that record alone: the spool opens with the good record before it, counts
    one torn record of 13 bytes, cuts them off and appends after the good record."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.close()
    (seg,) = tmp_path.glob("seg-*.nrgspool")
    with seg.open("ab") as f:
        f.write(encode_record(lines(10, 10), 10, 0)[:13])
    again = Spool(tmp_path, max_bytes=1 << 20)
    await again.open()
    assert (again.records, again.points, again.torn_records) == (1, 10, 1)
    assert again.discarded_bytes == 13
    await appends_after_the_cut(again)


async def test_a_new_segment_never_takes_the_cursors_number(tmp_path: Path) -> None:
    """Guards: records appended after restarts land in a segment numbered after the cursor's,
    even once the cursor's own segment is gone, so the next start reads them all: one record
    replayed (cursor at its end in segment 0); a start that finds segment 0 fully replayed
    removes it; the start after that appends two records; the start after that finds both."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.commit(await spool.read(1 << 20))
    await spool.close()
    for _ in range(2):  # the first start removes the replayed segment; the second finds none
        again = Spool(tmp_path, max_bytes=1 << 20)
        await again.open()
        await again.close()
    assert list(tmp_path.glob("seg-*.nrgspool")) == []
    writer = Spool(tmp_path, max_bytes=1 << 20)
    await writer.open()
    await writer.append(lines(10, 5), 5)
    await writer.append(lines(15, 5), 5)
    await writer.close()
    reader = Spool(tmp_path, max_bytes=1 << 20)
    await reader.open()
    assert (reader.records, reader.points, reader.torn_records) == (2, 10, 0)
    assert await drain(reader) == lines(10, 10)
    await reader.close()


async def test_a_replay_across_many_segments_reads_each_record_from_its_own(
    tmp_path: Path,
) -> None:
    """Guards: one read across 48 segments of one record each (a long outage's backlog)
    gives every record from its own segment file, in order, none counted corrupt, whatever
    descriptor numbers the files get. A record of 110 lines is 20 + 110 × 19 = 2,110 bytes: two
    do not fit in a segment of 4,096."""
    never = FsyncPolicy(None)  # no sync per segment: only the reading is checked here
    spool = Spool(tmp_path, max_bytes=1 << 23, segment_bytes=4096, fsync=never)
    await spool.open()
    for i in range(48):
        spool.append_nowait(lines(110 * i, 110), 110)
    await spool.flush()
    assert len(list(tmp_path.glob("seg-*.nrgspool"))) == 48
    batch = await spool.read(1 << 23)
    assert (batch.records, spool.corrupt_records) == (48, 0)
    assert batch.payload == lines(0, 48 * 110)
    await spool.close()


async def test_records_gone_from_under_the_spool_are_counted_corrupt(tmp_path: Path) -> None:
    """Guards: records whose bytes are no longer in their segment file when they are read
    (the file cut back to its magic by something else) are counted corrupt and skipped, not
    replayed as empty: two records of 10 points: 2 corrupt records, 20 points, nothing read."""
    spool = Spool(tmp_path, max_bytes=1 << 20)
    await spool.open()
    await spool.append(lines(0, 10), 10)
    await spool.append(lines(10, 10), 10)
    await spool.flush()
    (seg,) = tmp_path.glob("seg-*.nrgspool")
    os.truncate(seg, len(MAGIC))
    batch = await spool.read(1 << 20)
    assert (batch.records, batch.payload) == (0, b"")
    assert (spool.corrupt_records, spool.corrupt_points, spool.records) == (2, 20, 0)
    await spool.close()


def test_a_record_whose_write_failed_is_never_read_after_a_commit_inside_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a record the disk refused was never spooled, so reading it later (it may still
    be queued for replay when the failure is heard of) skips it without a word, even after a
    commit whose cursor lies in its segment: segment 100 holds one 39-byte record (20 + 19)
    at offset 8; the next, at offset 8 + 39 = 47, fails; after a commit at (100, 8) a read of
    it gives nothing and no corrupt record."""
    from sinks.influxdb.segments import FsyncPolicy, SegmentFiles, SpoolRecord

    files = SegmentFiles(tmp_path, FsyncPolicy(None))
    files.recover()
    first, failed = (encode_record(lines(i, 1), 1, 0) for i in range(2))
    files.append(100, len(MAGIC), first)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        files.append(100, len(MAGIC) + len(first), failed)
    monkeypatch.undo()
    files.commit((100, len(MAGIC)), 100)  # the first record is not replayed yet
    assert files.read([SpoolRecord(100, 47, len(failed), 1, 0)]) == ([], [])
    files.close()
