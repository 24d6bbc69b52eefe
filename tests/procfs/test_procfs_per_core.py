"""What the agent does per core on every tick: one ``cpu`` point per core, with the values of the
``/proc/stat`` line, built without per-tick work that only grows with the core count (a fresh
tags dict per core, the summary recorder tagging points it lets go). Work is counted, never
timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from acquisition.report.recorder import SummaryRecorder
from collectors.procfs import ProcfsCollector, ProcfsConfig

CORES = 16
MEMINFO = "MemTotal: 16000000 kB\nMemFree: 10000000 kB\nMemAvailable: 12000000 kB\n"


def write_stat(root: Path, tick: int) -> None:
    """A /proc/stat of CORES cores; core i spent i+1 more user ticks each tick, 100 in all."""
    lines = [f"cpu  {tick * 136} 0 0 {tick * (100 * CORES - 136)} 0 0 0 0 0 0"]
    for i in range(CORES):
        lines.append(f"cpu{i} {tick * (i + 1)} 0 0 {tick * (99 - i)} 0 0 0 0 0 0")
    lines += ["intr 0", "ctxt 0", "btime 0", "processes 1", ""]
    (root / "proc" / "stat").write_text("\n".join(lines))


async def test_a_core_keeps_one_tags_dict_and_its_own_values(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    write_stat(tmp_path, 0)
    context = PluginContext(host="t", interval_s=1.0, state_dir=tmp_path, data_dir=tmp_path,
                            runtime_dir=tmp_path)  # fmt: skip
    config = ProcfsConfig(root=str(tmp_path), track_self=False, clock_ticks=100, page_size=4096)
    collector = ProcfsCollector(config, context)
    await collector.open()
    ticks: list[list[Point]] = []
    try:
        for tick in (1, 2, 3):
            write_stat(tmp_path, tick)
            ticks.append([])
            await collector.collect(ticks[-1].append, tick * 1_000_000_000)
    finally:
        await collector.aclose()
    cores = [[p for p in points if p.measurement == "cpu"] for points in ticks]
    assert all(len(points) == CORES + 1 for points in cores)
    for first, later in zip(cores[0], cores[2], strict=True):
        assert later.tags is first.tags  # the sinks know the series by the dict itself
    for i, point in enumerate(cores[2][1:]):
        assert point.tags == {"cpu": f"cpu{i}"}
        assert point.fields["utilization_ratio"] == pytest.approx((i + 1) / 100)
        assert point.fields["user_ratio"] == pytest.approx((i + 1) / 100)


def test_the_summary_recorder_tags_only_what_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[Point] = []
    with_tags = Point.with_tags

    def counted(self: Point, extra: dict[str, str]) -> Point:
        copies.append(self)
        return with_tags(self, extra)

    monkeypatch.setattr(Point, "with_tags", counted)
    recorder = SummaryRecorder(tags={"host": "h1", "run": "r1"})
    fields = {"utilization_ratio": 0.5}
    for i in range(CORES):
        recorder.offer(Point("cpu", {"cpu": f"cpu{i}"}, fields, 1))
    recorder.offer(Point("process", {"tree": "1", "scope": "pid", "pid": "7"}, fields, 1))
    assert copies == [] and len(recorder.cores) == CORES
    total = Point("cpu", {"cpu": "total"}, fields, 1)
    recorder.offer(total)
    assert copies == [total]
    assert recorder.sampled[0].tags == {"cpu": "total", "host": "h1", "run": "r1"}
