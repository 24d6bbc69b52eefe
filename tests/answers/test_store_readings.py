"""Reading lines in step indexes: the collectors' samples come back from columns as the very
points, in the very order, that reading the text gives; lines of any other shape stay text."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from acquisition.point import Point
from acquisition.store import Query, Store
from acquisition.store_columns import build_index, read_columns
from acquisition.store_index import MAGIC, index_files, index_path, read_index
from acquisition.store_readings import MIN_LINES

T0 = 1_764_000_000_000_000_000
S = 1_000_000_000


def agent_file(tmp: Path) -> Path:
    """Two GPUs' samples and driver samples interleaved with lines that must stay text: a sample with one more
    field, string and boolean fields, an escaped tag, a series of few lines, a comment, a step
    line, an int beyond int64 (unsigned) and an empty line."""
    lines = []
    for k in range(MIN_LINES + 4):
        t = T0 + k * S
        lines.append(f"gpu,gpu=0,host=h energy_joules={k * 301.5},power_watts=301.5 {t}")
        extra = ",temperature_c=61i" if k == 7 else ""
        lines.append(f"gpu,gpu=1,host=h energy_joules={k * 99.25},util_pct={k}i{extra} {t + 1}")
        # a driver sample: the GPU's name has escaped spaces (still a reading)
        lines.append(f"gpu_sample,gpu=0,host=h,name=NVIDIA\\ H100\\,\\ 80GB power_watts={k}.0 {t}")
        if k % 5 == 0:
            lines.append(f'proc,host=h,pid=7 cmd="train py",rss_bytes={k}i {t + 2}')
            lines.append(f"nrg_run,host=h,run=r event_ok=true,pid=7i {t + 3}")
            lines.append(f"rapl,domain=package,host=h\\ 2,socket=0 energy_joules={k}.5 {t + 4}")
            lines.append(f"emonpi,host=h,node=5 power1_watts=-0.0,vrms=231.5 {t + 5}")
        if k == 3:
            lines += ["# a comment", "", f"big,host=h n=18446744073709551615u {t + 6}"]
            lines.append(f"nrg_step,host=h,rank=0,run=r step=1i,samples=2i {t + 7}")
    path = tmp / "nrg-1.lp"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def everything(where: Path, use_index: bool, **query: object) -> tuple[list[Point], int]:
    """The points of ``query`` as a report reads them: measurements named, through the plain
    reader; none named, through the column reader (step lines as columns)."""
    store = Store(where, use_index=use_index)
    if "measurements" in query:
        points = list(store.points(**query))  # type: ignore[arg-type]
    else:
        points, columns = read_columns(store, Query.of(**query))  # type: ignore[arg-type]
        points += columns.to_points()
    return points, store.stats.points


def kinds(points: list[Point]) -> list[list[type]]:
    return [[type(v) for v in p.fields.values()] for p in points]


def test_reading_lines_come_back_from_columns_in_file_order(tmp_path: Path) -> None:
    """Guards: the samples of the two GPUs become reading columns (their one odd line and every
    line of another shape stay text), and reading the index gives the same points, with the
    same int and float fields, in the same order, counted the same, as the text; blanking the
    file proves the index is what is read."""
    path = agent_file(tmp_path)
    text, counted = everything(tmp_path, use_index=False)
    index = build_index(path)
    heads = sorted(s.head for s in index.other.series)
    sample = b"gpu_sample,gpu=0,host=h,name=NVIDIA\\ H100\\,\\ 80GB"
    assert heads == [b"gpu,gpu=0,host=h", b"gpu,gpu=1,host=h", sample]
    # 20 lines of GPU 0, 19 of GPU 1 (its line with a temperature is a series of one: text)
    assert [s.n for s in index.other.series] == [MIN_LINES + 4, MIN_LINES + 3, MIN_LINES + 4]
    assert index_files([tmp_path]) == (1, 0)
    path.write_bytes(b" " * (path.stat().st_size - 1) + b"\n")
    got, got_counted = everything(tmp_path, use_index=True)
    assert got == text and kinds(got) == kinds(text)
    assert got_counted == counted == len(text)
    assert len(text) > 2 * (MIN_LINES + 4)


def test_a_reading_query_takes_its_series_times_and_tags(tmp_path: Path) -> None:
    """Guards: a query for some measurements, a time range and tags (a run's untagged samples
    within its window) gets from the columns exactly what the text gives: the window is
    [start, end), the tag filter is exact; a store asked again answers the same."""
    path = agent_file(tmp_path)
    queries: list[dict[str, object]] = [
        {"measurements": ["gpu"], "start_ns": T0 + 3 * S, "end_ns": T0 + 9 * S + 1},
        {"measurements": ["gpu", "emonpi"], "tags": {"gpu": "1"}},
        {
            "measurements": ["gpu", "proc", "nrg_run"],
            "tags": {"host": "h"},
            "start_ns": T0 + 10 * S,
        },
    ]
    texts = [everything(tmp_path, use_index=False, **q) for q in queries]
    index_files([tmp_path])
    path.write_bytes(b" " * (path.stat().st_size - 1) + b"\n")
    for q, text in zip(queries, texts, strict=True):
        assert everything(tmp_path, use_index=True, **q) == text
    # one store asked every query in turn (it keeps the points it built for the next reads)
    store = Store(tmp_path)
    for q, text in zip(queries * 2, texts * 2, strict=True):
        assert list(store.points(**q)) == text[0]  # type: ignore[arg-type]
    # GPU 0 at 3..9 s, GPU 1 at 3..9 s + 1 ns: the end (9 s + 1 ns) keeps 9 s, not 9 s + 1 ns
    assert len(texts[0][0]) == 7 + 6
    assert {p.tags["gpu"] for p in texts[1][0]} == {"1"}


def test_an_index_without_reading_columns_is_still_read(tmp_path: Path) -> None:
    """Guards: an index written before reading columns existed (version 1: every other line
    text) still serves its file, with the same points as the text."""
    path = agent_file(tmp_path)
    text, _ = everything(tmp_path, use_index=False)
    index = build_index(path)
    header = {
        "version": 1,
        "source": path.name,
        "content_bytes": index.content_bytes,
        "step_lines": index.step_lines,
        "byteorder": __import__("sys").byteorder,
        "torn": False,
        "series": [{"kind": s.kind, "head": s.head.decode(), "n": len(s)} for s in index.series],
    }
    head = json.dumps(header).encode()
    body = b"".join(a.tobytes() for s in index.series for a in s.arrays)
    assert index.step_lines == 0  # the odd step line is an other line: all lines are text
    lines = path.read_bytes()
    index_path(path).write_bytes(
        MAGIC + struct.pack("<I", len(head)) + head + body + zlib.compress(lines)
    )
    path.write_bytes(b" " * (path.stat().st_size - 1) + b"\n")
    assert everything(tmp_path, use_index=True)[0] == text


def test_driver_samples_kept_as_columns_are_read_for_their_times_and_power_only(
    tmp_path: Path,
) -> None:
    """Guards: a report's read of an index takes of each driver sample series its times and
    power (the same columns as from the text) and leaves its other fields' columns unread; a
    series without a power, and any read of points, still get every column."""
    lines = []
    for k in range(MIN_LINES + 4):
        t = T0 + k * S
        lines.append(f"gpu_sample,gpu=0,host=h power_watts={k}.5,utilization_ratio=0.25 {t}")
        lines.append(f"gpu_sample,gpu=1,host=h utilization_ratio={k}.0 {t + 1}")
    path = tmp_path / "nrg-1.lp"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    _, from_text = read_columns(Store(tmp_path, use_index=False), Query(), samples=True)
    index_files([tmp_path])
    index = read_index(path, readings=lambda head: ("power_watts",))
    assert index is not None
    with_power, without = index.other.series
    assert len(with_power.time) == MIN_LINES + 4 and not with_power.place
    assert [len(v) for v in with_power.values] == [MIN_LINES + 4, 0]
    assert [len(v) for v in without.values] == [MIN_LINES + 4] and len(without.place)
    store = Store(tmp_path)
    points, columns = read_columns(store, Query(), samples=True)
    (samples,) = columns.samples
    expected = [(t, w) for d in from_text.samples for t, w in zip(d.time, d.watts, strict=True)]
    assert list(zip(samples.time, samples.watts, strict=True)) == expected
    assert len(expected) == MIN_LINES + 4
    assert [p.tags["gpu"] for p in points] == ["1"] * (MIN_LINES + 4)
    assert [p.fields for p in store.points(["gpu_sample"])][:1] == [
        {"power_watts": 0.5, "utilization_ratio": 0.25}
    ]
