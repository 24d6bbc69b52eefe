"""Step indexes (``<file>.lp.idx``): a report reads a finished file's step lines from its index
and gets exactly what reading the text gives; an index that no longer matches its file, or is
damaged, is passed over for the text, and nothing is lost either way."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from acquisition.cli import main as cli_main
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.report.formats import summaries_json
from acquisition.report.runs import find_runs, load_run_columns
from acquisition.store import Query, Store
from acquisition.store_columns import read_columns
from acquisition.store_index import index_files, index_path
from acquisition.summary import summarize
from tests.answers.cluster import ClusterRun
from tests.influxdb.helpers import fill, small_disk

ODD = [
    # a step line of another shape (escaped tag value): read as a point, from the index too
    'nrg_step,experiment=x,host=h\\ 3,rank=0,run=odd step=0i,samples=1i,note="a b" 1',
    "rapl,domain=package,host=h1,socket=0 energy_joules=1.5 2",
    "# a comment",
]


def write(tmp: Path, points: list[Point], extra: list[str] = ODD) -> Path:
    path = tmp / "nrg-1.lp"
    text = LineEncoder().encode_many(points) + "".join(line + "\n" for line in extra)
    path.write_text(text, encoding="utf-8")
    return path


def report(where: Path, use_index: bool) -> str:
    """The summary JSON of the store's ``ddp`` run, as ``report --data`` reads it."""
    store = Store(where, chunk_bytes=4096, use_index=use_index)
    (run,) = [r for r in find_runs(store) if r.run == "ddp"]
    points, columns = load_run_columns(store, run)
    return summaries_json([summarize(points, columns=columns)])


def everything(where: Path, use_index: bool) -> tuple[list[Point], list[Point]]:
    """Every point of the store (step lines from the columns, in file order)."""
    points, columns = read_columns(Store(where, use_index=use_index), Query())
    return points, columns.to_points()


def test_a_report_from_the_index_is_the_report_from_the_text(tmp_path: Path) -> None:
    """Guards: the index holds every line of its file (the step lines as columns, the rest as
    text), so points, columns and the summary are the same both ways; and it is what is read
    while it matches: the file's bytes replaced by as many blanks still report the run."""
    path = write(tmp_path, ClusterRun(gpus=4).points())
    text = report(tmp_path, use_index=False)
    points = everything(tmp_path, use_index=False)
    assert index_files([tmp_path]) == (1, 0)
    assert report(tmp_path, use_index=True) == text
    assert everything(tmp_path, use_index=True) == points
    assert any(p.tags.get("host") == "h 3" for p in points[0])  # the odd line came back
    size = path.stat().st_size
    path.write_bytes(b" " * (size - 1) + b"\n")
    assert report(tmp_path, use_index=True) == text
    assert index_files([tmp_path]) == (0, 1)  # still valid: nothing to do


def test_a_file_changed_since_is_read_as_text(tmp_path: Path) -> None:
    """Guards: a file that grew after it was indexed (another step appended) is read as text:
    the report has the new step; with the stale index it would not."""
    run = ClusterRun(gpus=2)
    path = write(tmp_path, run.points())
    index_files([tmp_path])
    before = report(tmp_path, use_index=True)
    last = [p for p in run.points() if p.measurement == "nrg_step"][-1]
    more = Point("nrg_step", last.tags, {**last.fields, "step": 99}, last.time_ns + 1)
    with path.open("a", encoding="utf-8") as f:
        f.write(LineEncoder().encode_many([more]))
    after = report(tmp_path, use_index=True)
    assert after == report(tmp_path, use_index=False) != before


def test_a_damaged_index_is_passed_over_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: an index cut short (a full disk, a copy interrupted) is logged and the file read
    as text: the same report, no exception."""
    write(tmp_path, ClusterRun(gpus=2).points())
    text = report(tmp_path, use_index=False)
    index_files([tmp_path])
    idx = index_path(tmp_path / "nrg-1.lp")
    idx.write_bytes(idx.read_bytes()[: idx.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger="nrg.store"):
        assert report(tmp_path, use_index=True) == text
    assert "unreadable step index" in caplog.text


def test_an_index_serves_the_gzipped_file(tmp_path: Path) -> None:
    """Guards: a file compressed after it was indexed (``compress = "gzip"``) keeps its index
    (matched by the size in the gzip trailer): blanks of the same size, compressed, still
    report the run."""
    path = write(tmp_path, ClusterRun(gpus=2).points())
    text = report(tmp_path, use_index=False)
    index_files([tmp_path])
    size = path.stat().st_size
    path.unlink()
    with gzip.open(tmp_path / "nrg-1.lp.gz", "wb") as f:
        f.write(b" " * (size - 1) + b"\n")
    assert report(tmp_path, use_index=True) == text


def test_a_query_without_step_lines_reads_the_index_other_lines(tmp_path: Path) -> None:
    """Guards: reading power or events only (``--list``, a run's untagged samples) takes the
    index's other lines and never the step columns: the same points as from the text."""
    path = write(tmp_path, ClusterRun(gpus=2).points())
    wanted = ["rapl", "gpu", "nrg_run"]
    text = list(Store(tmp_path, use_index=False).points(wanted))
    index_files([tmp_path])
    path.write_bytes(b" " * (path.stat().st_size - 1) + b"\n")
    assert list(Store(tmp_path).points(wanted)) == text
    assert len(text) > 10


def test_nrg_collect_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Guards: ``nrg-collect index DIR`` indexes the files without a valid index, says how many,
    and leaves valid ones alone; a directory without data is an error, not a traceback."""
    write(tmp_path, ClusterRun(gpus=2).points())
    assert cli_main(["index", str(tmp_path)]) == 0
    assert "indexed 1 file(s); 0 already indexed" in capsys.readouterr().out
    assert index_path(tmp_path / "nrg-1.lp").exists()
    assert cli_main(["index", str(tmp_path)]) == 0
    assert "indexed 0 file(s); 1 already indexed" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["index", str(empty)]) == 1
    assert "no line-protocol files" in capsys.readouterr().err


def test_nrg_collect_index_says_which_file_it_could_not_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guards: on a full disk (a real small tmpfs, filled) the index cannot be written: an error
    naming the file, no half-written index left behind, and the file still reports as text."""
    with small_disk(tmp_path / "disk", 2 * 1024 * 1024) as disk:
        write(disk, ClusterRun(gpus=2).points())
        text = report(disk, use_index=False)
        filler = fill(disk)
        assert cli_main(["index", str(disk)]) == 1
        assert f"cannot index {disk / 'nrg-1.lp'}" in capsys.readouterr().err
        filler.unlink()
        assert sorted(p.name for p in disk.iterdir()) == ["nrg-1.lp"]
        assert report(disk, use_index=True) == text


def test_columns_without_any_value_are_left_out_and_come_back(tmp_path: Path) -> None:
    """Guards: step-energy lines with ``step`` and ``energy_joules`` only (as other writers send
    them) leave their error and power columns empty: the index does not store those columns,
    and a report from it is still the report from the text (the absent values come back as
    absent, not as zeros)."""
    plain = {"step", "energy_joules"}
    points = [
        Point(p.measurement, p.tags, {k: v for k, v in p.fields.items() if k in plain}, p.time_ns)
        if p.measurement == "nrg_energy" and p.tags.get("scope") == "step"
        else p
        for p in ClusterRun(gpus=2).points()
    ]
    write(tmp_path, points)
    text = report(tmp_path, use_index=False)
    index_files([tmp_path])
    idx = index_path(tmp_path / "nrg-1.lp").read_bytes()
    n = int.from_bytes(idx[8:12], "little")
    header = json.loads(idx[12 : 12 + n])
    energy = [s for s in header["series"] if s["kind"] == 1]
    assert energy and all(s["absent"] == [4, 5, 6, 7, 8] for s in energy)
    assert report(tmp_path, use_index=True) == text


def test_the_step_time_range_from_indexes_and_text_alike(tmp_path: Path) -> None:
    """Guards: the run's step-time range (its window when no event ends it) is the same from
    indexes (which record each series' earliest and latest time) as from the text, with the
    run split over two files: both indexed, the first only (a series then continues in text
    after its indexed part), or neither."""
    run = ClusterRun(epochs=1, steps=10)  # one epoch: each rank's series in both files
    points = sorted(run.points(), key=lambda p: p.time_ns)
    half = len(points) // 2
    first, second = write(tmp_path, points[:half], extra=[]), tmp_path / "nrg-2.lp"
    second.write_text(LineEncoder().encode_many(points[half:]), encoding="utf-8")

    def time_range(use_index: bool) -> tuple[int, int] | None:
        return read_columns(Store(tmp_path, use_index=use_index), Query())[1].time_range()

    text = time_range(False)
    steps = [p.time_ns for p in points if p.measurement in ("nrg_step", "nrg_energy")]
    assert text == (min(steps), max(steps))
    index_files([first])
    assert time_range(True) == text  # the first file indexed, the second read as text
    index_files([second])
    assert time_range(True) == text
