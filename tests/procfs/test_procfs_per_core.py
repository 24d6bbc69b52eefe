"""What the agent does per core: one ``cpu`` point per core every ``core_interval`` (``cpu=total``
every tick), with the values of the ``/proc/stat`` line, built without per-tick work that only
grows with the core count (a fresh tags dict per core, the summary recorder tagging points it
lets go). Work is counted, never timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.errors import ConfigError
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


def write_busy(root: Path, busy: list[int], tick: int) -> None:
    """A /proc/stat whose core i has spent ``busy[i]`` user ticks of ``tick * 10`` (10 a tick)."""
    lines = [f"cpu  {sum(busy)} 0 0 {tick * 10 * CORES - sum(busy)} 0 0 0 0 0 0"]
    lines += [f"cpu{i} {b} 0 0 {tick * 10 - b} 0 0 0 0 0 0" for i, b in enumerate(busy)]
    lines += ["intr 0", "ctxt 0", "btime 0", "processes 1", ""]
    (root / "proc" / "stat").write_text("\n".join(lines))


async def _ticks_at_100ms(tmp_path: Path, ticks: int, **options: object) -> list[list[Point]]:
    """``ticks`` collects 100 ms apart (jittered by up to 3 ms); core i is busy on the ticks
    whose number is a multiple of i + 1, so each core's load changes from tick to tick."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    busy = [0] * CORES
    write_busy(tmp_path, busy, 0)
    context = PluginContext(host="t", interval_s=0.1, state_dir=tmp_path, data_dir=tmp_path,
                            runtime_dir=tmp_path)  # fmt: skip
    config = ProcfsConfig(
        root=str(tmp_path), track_self=False, clock_ticks=100, page_size=4096, **options
    )
    collector = ProcfsCollector(config, context)
    await collector.open()
    out: list[list[Point]] = []
    try:
        for tick in range(1, ticks + 1):
            busy = [b + (10 if tick % (i + 1) == 0 else 0) for i, b in enumerate(busy)]
            write_busy(tmp_path, busy, tick)
            out.append([])
            jitter = (tick * 7919) % 7 - 3
            await collector.collect(out[-1].append, tick * 100_000_000 + jitter * 1_000_000)
    finally:
        await collector.aclose()
    return out


async def test_per_core_points_every_core_interval_totals_every_tick(tmp_path: Path) -> None:
    ticks = await _ticks_at_100ms(tmp_path, 25)
    totals = [[p for p in t if p.tags.get("cpu") == "total"] for t in ticks]
    assert all(len(t) == 1 for t in totals)  # every tick
    with_cores = [n for n, t in enumerate(ticks, 1) if any(p.tags.get("cpu") == "cpu0" for p in t)]
    assert with_cores == [1, 11, 21]  # the first tick, then every second (10 ticks of 100 ms)
    for n in with_cores:
        cores = [p for p in ticks[n - 1] if p.measurement == "cpu" and p.tags["cpu"] != "total"]
        assert [p.tags["cpu"] for p in cores] == [f"cpu{i}" for i in range(CORES)]


async def test_per_core_points_lose_none_of_the_cores_time(tmp_path: Path) -> None:
    """Each per-core point averages the whole time since the previous one: their ratios times
    their spans add up to each core's busy time, exactly as the counters say."""
    ticks = await _ticks_at_100ms(tmp_path, 21)
    for i in range(CORES):
        points = [p for t in ticks for p in t if p.tags.get("cpu") == f"cpu{i}"]
        spans = [1, 10, 10]  # ticks each point covers: since open, then since the last point
        busy = sum(
            p.fields["utilization_ratio"] * 10 * n for p, n in zip(points, spans, strict=True)
        )
        assert busy == pytest.approx(sum(10 for t in range(1, 22) if t % (i + 1) == 0))
        assert points[2].fields["utilization_ratio"] == pytest.approx(
            sum(1 for t in range(12, 22) if t % (i + 1) == 0) / 10
        )


async def test_core_interval_zero_emits_every_core_every_tick(tmp_path: Path) -> None:
    ticks = await _ticks_at_100ms(tmp_path, 5, core_interval=0.0)
    assert [sum(p.measurement == "cpu" for p in t) for t in ticks] == [CORES + 1] * 5


def test_a_negative_core_interval_is_refused(tmp_path: Path) -> None:
    context = PluginContext(host="t", interval_s=0.1, state_dir=tmp_path, data_dir=tmp_path,
                            runtime_dir=tmp_path)  # fmt: skip
    with pytest.raises(ConfigError, match="core_interval"):
        ProcfsCollector(ProcfsConfig(core_interval=-1.0), context)


async def test_a_first_tick_too_soon_for_per_core_ratios_leaves_them_to_the_next(
    tmp_path: Path,
) -> None:
    """A tick right after open, when no core's counters have moved, has no per-core points:
    the next tick has them (not a whole ``core_interval`` later), so a short run knows its
    cores."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    write_busy(tmp_path, [0] * CORES, 0)
    context = PluginContext(host="t", interval_s=0.05, state_dir=tmp_path, data_dir=tmp_path,
                            runtime_dir=tmp_path)  # fmt: skip
    config = ProcfsConfig(root=str(tmp_path), track_self=False, clock_ticks=100, page_size=4096)
    collector = ProcfsCollector(config, context)
    await collector.open()
    ticks: list[list[Point]] = [[], []]
    try:
        await collector.collect(ticks[0].append, 1_000_000)  # the counters as at open
        write_busy(tmp_path, [5] * CORES, 1)
        await collector.collect(ticks[1].append, 51_000_000)
    finally:
        await collector.aclose()
    assert [p for p in ticks[0] if p.measurement == "cpu"] == []
    cores = [p for p in ticks[1] if p.measurement == "cpu" and p.tags["cpu"] != "total"]
    assert len(cores) == CORES
    assert all(p.fields["utilization_ratio"] == pytest.approx(0.5) for p in cores)


def write_moved(root: Path, busy: list[int | None]) -> None:
    """A /proc/stat whose core i has spent ``busy[i]`` user ticks, nothing else (None: all 0)."""
    lines = [f"cpu{i} {b or 0} 0 0 0 0 0 0 0 0 0" for i, b in enumerate(busy)]
    total = f"cpu  {sum(b or 0 for b in busy)} 0 0 0 0 0 0 0 0 0"
    (root / "proc" / "stat").write_text("\n".join([total, *lines, "intr 0", "btime 0", ""]))


async def _per_core_after_open(
    tmp_path: Path, ticks: list[tuple[int, list[int | None]]]
) -> list[Point]:
    """Open on an idle /proc/stat, then a tick at each ``(time_ns, busy)``; the per-core
    points, in order."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    write_moved(tmp_path, [0] * CORES)
    context = PluginContext(host="t", interval_s=0.05, state_dir=tmp_path, data_dir=tmp_path,
                            runtime_dir=tmp_path)  # fmt: skip
    config = ProcfsConfig(root=str(tmp_path), track_self=False, clock_ticks=100, page_size=4096)
    collector = ProcfsCollector(config, context)
    await collector.open()
    points: list[Point] = []
    try:
        for now_ns, busy in ticks:
            write_moved(tmp_path, busy)
            await collector.collect(points.append, now_ns)
    finally:
        await collector.aclose()
    return [p for p in points if p.measurement == "cpu" and p.tags["cpu"] != "total"]


async def test_per_core_points_wait_until_every_core_has_moved(tmp_path: Path) -> None:
    """A tick right after open where only some cores' counters moved (a core's time moves in
    whole clock ticks) has no per-core points; the next tick has every core's, each since open:
    a short run knows all its cores."""
    some: list[int | None] = [5, 5] + [0] * (CORES - 2)
    cores = await _per_core_after_open(tmp_path, [(50_000_000, some), (100_000_000, [10] * CORES)])
    assert [p.tags["cpu"] for p in cores] == [f"cpu{i}" for i in range(CORES)]
    assert {p.time_ns for p in cores} == {100_000_000}
    assert all(p.fields["utilization_ratio"] == pytest.approx(1.0) for p in cores)


async def test_per_core_points_go_without_a_still_core_after_a_second(tmp_path: Path) -> None:
    """A core whose counters stand still (offline) holds the others' points back for a second,
    no longer: they then come without it."""
    moving = [*([5] * (CORES - 1)), None]
    later = [*([10] * (CORES - 1)), None]
    ticks = [(50_000_000, moving), (900_000_000, later), (1_050_000_000, later)]
    cores = await _per_core_after_open(tmp_path, ticks)
    assert {p.time_ns for p in cores} == {1_050_000_000}  # 1 s after the first wait, at 50 ms
    assert [p.tags["cpu"] for p in cores] == [f"cpu{i}" for i in range(CORES - 1)]
