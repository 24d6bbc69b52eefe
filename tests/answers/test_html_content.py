"""What the HTML report holds, read from the page itself (the browser checks are in
test_html.py): every table of the text summary, the time charts limited to the run."""

from __future__ import annotations

import html
import re

import pytest

from acquisition.point import Point
from acquisition.report.html import fmt, in_run, report_html, resource_rows
from acquisition.summary import summarize
from tests.answers.runs import NS, KnownRun

pytest.importorskip("matplotlib")


def table_rows(page: str) -> dict[str, list[str]]:
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page):
        cells = [html.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", row)]
        if cells:
            rows[cells[0]] = cells[1:]
    return rows


def known_points() -> list[Point]:
    run = KnownRun()
    memory = [
        Point(
            "memory", {"host": run.host}, {"used_bytes": 2_000_000_000, "total_bytes": 8 * 10**9}, t
        )
        for t in range(run.t0, run.t0 + 6 * NS, NS // 2)
    ]
    return run.points() + memory


def test_every_table_of_the_text_summary_is_on_the_page() -> None:
    points = known_points()
    s = summarize(points)
    rows = table_rows(report_html([s], [points]))
    assert rows["energy per step, p50 (J)"] == [fmt(s.steps.energy_j["p50"])]
    for figure, value in resource_rows(s.resources):
        assert rows[figure] == [value]
    titles = {figure.split(":")[0] for figure, _ in resource_rows(s.resources)}
    assert titles == {
        "Max RAM",
        "Max GPU RAM",
        "CPU utilization",
        "GPU utilization",
        "Compute time",
    }
    assert rows["Max RAM: system (gigabytes)"] == [fmt(2.0)]
    assert rows["Compute time: time (hours)"] == [fmt(s.resources["compute_time"]["time"])]


def test_time_charts_keep_to_the_run() -> None:
    s = summarize(KnownRun().points())
    times = [s.start_ns - 3 * NS, s.start_ns, (s.start_ns + s.end_ns) // 2, s.end_ns, s.end_ns + NS]
    xs, ys = in_run(times, [1.0, 2.0, 3.0, 4.0, 5.0], s)
    assert xs == [0.0, (s.end_ns - s.start_ns) // 2 / NS, (s.end_ns - s.start_ns) / NS]
    assert ys == [2.0, 3.0, 4.0]
