"""``Follower``: the points of a directory an agent keeps writing, read incrementally, equal at
every step to a full read of the same files."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from acquisition.errors import NrgError
from acquisition.follow import CLOCK_SLACK_NS, Follower
from acquisition.store import Query, Store

T0 = (time.time_ns() // 1_000_000_000 - 3600) * 1_000_000_000  # an hour ago: files are newer
S = 1_000_000_000


def line(i: int, measurement: str = "rapl") -> str:
    return f"{measurement},domain=package-0 energy_j={i}.5,power_w={i % 7}i {T0 + i * S}\n"


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def full_read(directory: Path, query: Query) -> list[tuple[str, int, object]]:
    return [
        (p.measurement, p.time_ns, p.fields["energy_j"])
        for p in Store(directory).query(query)
        if p.measurement == "rapl"
    ]


def seen(points: list) -> list[tuple[str, int, object]]:  # type: ignore[type-arg]
    return [(p.measurement, p.time_ns, p.fields["energy_j"]) for p in points]


def test_each_read_takes_only_what_was_appended(tmp_path: Path) -> None:
    live = tmp_path / "nrg-1.lp"
    append(live, "".join(line(i) for i in range(50)) + line(50)[:17])  # a line being written
    query = Query.of(["rapl"], start_ns=T0 + 10 * S)
    follower = Follower(tmp_path, query)
    first = follower.points()
    assert seen(first) == full_read(tmp_path, query)
    assert [p.time_ns for p in first] == [T0 + i * S for i in range(10, 50)]
    read_before = follower.stats.bytes

    rest = line(50)[17:] + "".join(line(i) + line(i, "cpu") for i in range(51, 60))
    append(live, rest)
    second = follower.points()
    assert seen(second) == full_read(tmp_path, query)
    assert [p.time_ns for p in second][-10:] == [T0 + i * S for i in range(50, 60)]
    assert follower.stats.bytes - read_before == len(rest.encode())  # nothing read twice
    assert follower.points() == second and follower.stats.bytes - read_before == len(rest)


def test_rotation_keeps_each_file_read_once_and_in_time_order(tmp_path: Path) -> None:
    live = tmp_path / "nrg-1.lp"
    append(live, "".join(line(i) for i in range(20)))
    query = Query.of(["rapl"], start_ns=T0)
    follower = Follower(tmp_path, query)
    follower.points()
    live.rename(tmp_path / "nrg-1.20270101T000000Z.lp")  # the sink's rotation: same inode
    append(tmp_path / "nrg-1.20270101T000000Z.lp", line(20))  # its last batch, after rename
    append(tmp_path / "nrg-2.lp", "".join(line(i) for i in range(21, 30)))
    before = follower.stats.bytes
    points = follower.points()
    assert seen(points) == full_read(tmp_path, query)
    assert [p.time_ns for p in points] == [T0 + i * S for i in range(30)]
    assert follower.stats.bytes - before == len(line(20)) + sum(len(line(i)) for i in range(21, 30))


def test_a_file_last_changed_before_the_window_is_never_opened(tmp_path: Path) -> None:
    old = tmp_path / "nrg-0.lp"
    append(old, "".join(line(i) for i in range(100)))
    start = time.time_ns() - 10 * S
    stale = (start - CLOCK_SLACK_NS - 5 * S) / S
    os.utime(old, (stale, stale))
    fresh = tmp_path / "nrg-1.lp"
    first = (start - T0) // S + 1
    append(fresh, "".join(line(i) for i in range(first, first + 3)))
    follower = Follower(tmp_path, Query.of(["rapl"], start_ns=start))
    assert [p.time_ns for p in follower.points()] == [T0 + i * S for i in range(first, first + 3)]
    assert follower.stats.bytes == fresh.stat().st_size  # the old file was not read
    # A window that reaches back to the old file's time reads it.
    assert len(Follower(tmp_path, Query.of(["rapl"], start_ns=T0)).points()) == 103
    assert len(Follower(tmp_path, Query.of(["rapl"])).points()) == 103


def test_compressed_rotation_replaces_the_plain_file_without_duplicates(tmp_path: Path) -> None:
    rotated = tmp_path / "nrg-1.20270101T000000Z.lp"
    append(rotated, "".join(line(i) for i in range(10)))
    append(tmp_path / "nrg-2.lp", "".join(line(i) for i in range(10, 15)))
    query = Query.of(["rapl"], start_ns=T0)
    follower = Follower(tmp_path, query)
    before = seen(follower.points())
    packed = rotated.with_name(rotated.name + ".gz")
    packed.write_bytes(gzip.compress(rotated.read_bytes())[:40])  # being compressed
    assert seen(follower.points()) == before
    packed.write_bytes(gzip.compress(rotated.read_bytes()))
    rotated.unlink()
    after = seen(follower.points())
    assert after == before == full_read(tmp_path, query)


def test_a_file_that_shrank_is_read_again(tmp_path: Path) -> None:
    live = tmp_path / "nrg-1.lp"
    append(live, "".join(line(i) for i in range(10)))
    follower = Follower(tmp_path, Query.of(["rapl"]))
    assert len(follower.points()) == 10
    live.write_text("".join(line(i) for i in range(100, 103)))  # truncated and rewritten
    assert [p.time_ns for p in follower.points()] == [T0 + i * S for i in range(100, 103)]


def test_a_directory_without_files_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NrgError, match="no line-protocol files"):
        Follower(tmp_path, Query.of(["rapl"])).points()
    with pytest.raises(NrgError, match="cannot read"):
        Follower(tmp_path / "missing", Query.of(["rapl"])).points()
