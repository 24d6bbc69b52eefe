"""The stored-points reader over real files as the file sink writes them (rotated, gzip-rotated,
torn, growing), checked against decoding every line of the same files."""

from __future__ import annotations

import gzip
import random
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition.errors import LineProtocolError, NrgError
from acquisition.lineproto import LineEncoder, decode_line
from acquisition.point import Point
from acquisition.store import NO_FILES, FastDecoder, Query, Store, lp_files, read_points

T0 = 1_764_000_000_000_000_000
MEASUREMENTS = ("rapl", "gpu", "gpu_process", "memory", "nrg_energy", "nrg_step")


def make_points(n: int, seed: int, t0: int = T0) -> list[Point]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m = rng.choice(MEASUREMENTS)
        tags = {"host": rng.choice(["a", "b"]), "run": rng.choice(["r1", "r2", "r 3"])}
        fields: dict[str, float | int | bool | str] = {
            "energy_joules": rng.random() * 100,
            "n": rng.randrange(1000),
        }
        if rng.random() < 0.1:
            fields["note"] = rng.choice(['a "quoted", value', "x=y z"])
        out.append(Point(m, tags, fields, t0 + i * 1000))
    return out


def write(path: Path, points: list[Point]) -> None:
    text = LineEncoder().encode_many(points)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)


def brute(points: list[Point], query: Query) -> list[Point]:
    return [p for p in points if query.matches(p)]


@pytest.fixture
def rotated(tmp_path: Path) -> list[Point]:
    """Three files as a sink with gzip rotation leaves them: oldest compressed, then a rotated
    plain file, then the current one (names in an order that differs from time order)."""
    pts = make_points(3000, seed=1)
    write(tmp_path / "nrg-20251124T000000Z.lp.gz", pts[:1000])
    write(tmp_path / "nrg.20251124T010000Z.lp", pts[1000:2000])
    write(tmp_path / "nrg-20251123T000000Z.lp", pts[2000:])  # newest data, oldest-looking name
    (tmp_path / "notes.txt").write_text("not line protocol\n")
    return pts


def test_reads_every_file_in_time_order(tmp_path: Path, rotated: list[Point]) -> None:
    names = [p.name for p in lp_files(tmp_path)]
    assert names == [
        "nrg-20251124T000000Z.lp.gz",
        "nrg.20251124T010000Z.lp",
        "nrg-20251123T000000Z.lp",
    ]
    assert read_points(tmp_path) == rotated


@pytest.mark.parametrize(
    "query",
    [
        Query.of(["gpu"]),
        Query.of(["rapl", "nrg_energy"]),
        Query.of(["gpu_process"], tags={"host": "a"}),
        Query.of(None, tags={"run": "r 3"}),
        Query.of(["nrg_step", "memory"], tags={"run": ["r1", "r2"], "host": "b"}),
        Query.of(None, start_ns=T0 + 500_000, end_ns=T0 + 2_500_000),
        Query.of(["rapl"], start_ns=T0 + 1_000_000, tags={"run": "r2"}),
        Query.of(["nope"]),
    ],
)
def test_filters_equal_decoding_everything(
    tmp_path: Path, rotated: list[Point], query: Query
) -> None:
    store = Store(tmp_path, chunk_bytes=4096)  # many chunk boundaries
    got = list(store.query(query))
    assert got == brute(rotated, query)
    assert store.stats.files == 3
    assert store.stats.bad_lines == 0


def test_measurement_names_are_not_prefixes(tmp_path: Path) -> None:
    pts = [
        Point("gpu", {"gpu": "0"}, {"x": 1}, T0),
        Point("gpu_process", {"gpu": "0"}, {"x": 2}, T0 + 1),
        Point("gpux", {}, {"x": 3}, T0 + 2),
    ]
    write(tmp_path / "a.lp", pts)
    assert read_points(tmp_path, ["gpu"]) == pts[:1]


def test_torn_last_line_is_left_out_and_counted(tmp_path: Path) -> None:
    pts = make_points(50, seed=2)
    text = LineEncoder().encode_many(pts)
    (tmp_path / "x.lp").write_text(text + text.splitlines()[0][:17])
    store = Store(tmp_path)
    assert list(store.points()) == pts
    assert store.stats.torn_lines == 1


def test_bad_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    good = make_points(20, seed=3)
    lines = LineEncoder().encode_many(good).splitlines()
    lines.insert(5, "rapl,host=a energy_joules=oops 17")
    lines.insert(9, "rapl this is not line protocol")
    (tmp_path / "x.lp").write_text("\n".join(lines) + "\n")
    store = Store(tmp_path)
    assert list(store.points()) == good
    assert store.stats.bad_lines == 2


def test_truncated_gzip_yields_what_is_there(tmp_path: Path) -> None:
    pts = make_points(2000, seed=4)
    path = tmp_path / "x.lp.gz"
    write(path, pts)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    got = read_points(tmp_path)
    assert 0 < len(got) < len(pts)
    assert got == pts[: len(got)]


def test_file_being_written_while_read(tmp_path: Path) -> None:
    """A writer appends in pieces that cut lines anywhere; every read sees whole points only,
    and always a prefix of what was written."""
    pts = make_points(4000, seed=5)
    data = LineEncoder().encode_many(pts).encode()
    path = tmp_path / "live.lp"
    path.write_bytes(b"")
    done = threading.Event()

    def writer() -> None:
        rng = random.Random(6)
        with path.open("ab", buffering=0) as f:
            pos = 0
            while pos < len(data):
                step = rng.randrange(1, 3000)
                f.write(data[pos : pos + step])
                pos += step
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = []
    while not done.is_set():
        reads.append(list(Store(path, chunk_bytes=1024).points()))
    thread.join()
    reads.append(read_points(path))
    for got in reads:
        assert got == pts[: len(got)]
    assert reads[-1] == pts


def test_ten_thousand_runs_in_one_directory(tmp_path: Path) -> None:
    for i in range(10_000):
        p = Point("nrg_run", {"run": f"r{i}", "host": "h"}, {"event": "start"}, T0 + i)
        (tmp_path / f"nrg-{i:05d}.lp").write_text(LineEncoder().encode(p) + "\n")
    store = Store(tmp_path)
    got = list(store.points(["nrg_run"], tags={"run": "r4321"}))
    assert [p.tags["run"] for p in got] == ["r4321"]
    assert store.stats.files == 10_000
    assert store.stats.lines_decoded == 1  # the other files were filtered on raw bytes
    every = read_points(tmp_path, ["nrg_run"])
    assert [p.time_ns - T0 for p in every] == list(range(10_000))


def test_no_files(tmp_path: Path) -> None:
    with pytest.raises(NrgError) as info:
        read_points(tmp_path)
    assert str(info.value) == NO_FILES.format(where=tmp_path)
    with pytest.raises(NrgError, match="no such file"):
        read_points(tmp_path / "missing")


def test_decoded_like_the_decoder(tmp_path: Path) -> None:
    pts = make_points(300, seed=7)
    write(tmp_path / "x.lp", pts)
    lines = (tmp_path / "x.lp").read_text().splitlines()
    assert read_points(tmp_path) == [decode_line(line) for line in lines]


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
_value = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    _text,
)


@given(
    st.lists(
        st.builds(
            Point,
            st.sampled_from(["rapl", "gpu", "a b", "c,d"]),
            st.dictionaries(st.sampled_from(["host", "run", "x y", "k=v"]), _text, max_size=3),
            st.dictionaries(
                st.sampled_from(["energy_joules", "n", "s p", "b\\"]), _value, min_size=1
            ),
            st.integers(0, 2**62),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_fast_decoder_equals_decode_line(points: list[Point]) -> None:
    """Same series twice (the cached path), any values: the same points as decode_line."""
    fast = FastDecoder()
    for line in LineEncoder().encode_many(points + points).split("\n")[:-1]:
        assert fast.decode(line) == decode_line(line)


def test_fast_decoder_shares_a_series_tags() -> None:
    fast = FastDecoder()
    first, second, third = (fast.decode(f"nrg_step,host=a,run=r step={n}i {n}") for n in range(3))
    assert first.tags == second.tags == {"host": "a", "run": "r"}
    assert second.tags is third.tags  # one mapping per series, not a dict per point
    assert fast.decode("nrg_step,host=b,run=r step=1i 1").tags == {"host": "b", "run": "r"}


@pytest.mark.parametrize(
    "line",
    [
        "rapl,host=a x=1i 5",  # primes the series cache
        "rapl,host=a x=inf 5",
        "rapl,host=a x=nan 5",
        "rapl,host=a x=1.5.5 5",
        "rapl,host=a x= 5",
        "rapl,host=a =1 5",
        "rapl,host=a x=1i,x 5",
        "rapl,host=a x=12ii 5",
        "rapl,host=a x=1u 5",
        "rapl,host=a x=T 5",
        "rapl,host=a x=1 -5",
        "rapl,host=a x=1",
    ],
)
def test_fast_decoder_same_errors(line: str) -> None:
    fast = FastDecoder()
    fast.decode("rapl,host=a x=1i 5")

    def outcome(decode: object) -> object:
        try:
            return decode(line)  # type: ignore[operator]
        except LineProtocolError as exc:
            return str(exc)

    assert outcome(fast.decode) == outcome(decode_line)
