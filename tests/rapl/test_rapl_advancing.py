"""A RAPL counter proves that it measures (acquisition.advancing): a perf PMU and a powercap
tree whose counters never move are *not advancing*, with the reason, write no point, and join
when they start moving."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from acquisition.advancing import MIN_WORK_S, MSG_JOINS, WINDOW_S, busy_cpu_seconds
from acquisition.errors import NoData
from acquisition.point import Point
from collectors.rapl import WHY_FIRMWARE, WHY_PERF, WHY_VM, RaplCollector, RaplConfig
from tests.rapl.scenarios import SteppedIO, bump, context, install_tree
from tests.rapl.test_rapl_msr_perf import FakePerfIO

S = 1_000_000_000
PSYS = {"energy-psys": {"0": 0}}


def write_stat(root: Path, busy_s: float) -> None:
    """``<root>/proc/stat`` with ``busy_s`` CPU-seconds busy (user) and a fixed idle time."""
    (root / "proc").mkdir(exist_ok=True)
    user = round(busy_s * 100)
    (root / "proc/stat").write_text(f"cpu  {user} 0 0 90000 0 0 0 0 0 0\n")


def test_busy_cpu_seconds_reads_the_busy_columns(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    # user nice system idle iowait irq softirq steal guest guest_nice
    (tmp_path / "proc/stat").write_text("cpu  100 20 30 9000 400 5 6 7 0 0\ncpu0 1 2 3 4\n")
    assert busy_cpu_seconds(tmp_path) == pytest.approx(1.68)  # idle and iowait left out
    assert busy_cpu_seconds(tmp_path / "none") is None
    (tmp_path / "proc/stat").write_text("intr 1 2 3\n")
    assert busy_cpu_seconds(tmp_path) is None


async def _perf_vm(tmp_path: Path) -> tuple[RaplCollector, FakePerfIO, Path]:
    root = install_tree("perf-vm-psys", tmp_path)
    io = FakePerfIO({k: dict(v) for k, v in PSYS.items()}, {5: "energy-psys"})
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    io.now = 10 * S
    await collector.open()
    return collector, io, root


async def _tick(collector: RaplCollector, io: SteppedIO, at_s: float) -> list[Point]:
    io.now = round(at_s * S)
    points: list[Point] = []
    await collector.collect(points.append, io.now)
    return points


async def test_perf_psys_that_never_moves_is_not_advancing_then_joins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Firecracker-VM case: the perf PMU offers energy-psys, whose count stays 0 however
    busy the CPUs are."""
    collector, io, root = await _perf_vm(tmp_path)
    assert collector.backend == "perf"
    write_stat(root, 10.0)
    points = await _tick(collector, io, 10.5)  # the window starts at the first reading
    write_stat(root, 10.0 + 4 * MIN_WORK_S)
    points += await _tick(collector, io, 10 + WINDOW_S)
    assert collector.not_advancing() is None  # not yet: the window has not passed
    points += await _tick(collector, io, 10.5 + WINDOW_S)
    assert points == []  # no zero-power point, ever
    reason = collector.not_advancing()
    assert reason == (
        f"not advancing: psys (socket 0) did not move in {WINDOW_S:.1f} s while the CPUs "
        f"did {4 * MIN_WORK_S:.1f} CPU-s of work ({WHY_VM})"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"rapl: {reason}"]
    assert collector.describe() == "perf: psys (socket 0) not advancing"

    # It starts counting: it joins, says so, and its energy and power are the real ones; its
    # series starts at its last reading that stood still (0 J since open then, energy only).
    io.counts["energy-psys"]["0"] = 30 << 32  # 30 J since open
    joined = await _tick(collector, io, 11.5 + WINDOW_S)
    assert [(p.time_ns, p.fields) for p in joined] == [
        (round((10.5 + WINDOW_S) * S), {"energy_joules": 0.0}),
        (round((11.5 + WINDOW_S) * S), {"energy_joules": 30.0, "power_watts": 30.0}),
    ]
    assert collector.not_advancing() is None
    assert MSG_JOINS % ("rapl", "psys (socket 0)") in caplog.messages
    io.counts["energy-psys"]["0"] = 30 << 32  # a tick without a move is a real 0 W now
    assert [p.fields for p in await _tick(collector, io, 12.5 + WINDOW_S)] == [
        {"energy_joules": 30.0, "power_watts": 0.0}
    ]


async def test_an_idle_machine_is_not_judged(tmp_path: Path) -> None:
    """The rule needs work: with less than MIN_WORK_S CPU-seconds used, a still counter may
    just be a coarse one; it stays pending (and writes nothing)."""
    collector, io, root = await _perf_vm(tmp_path)
    write_stat(root, 10.0)
    await _tick(collector, io, 11)
    write_stat(root, 10.0 + MIN_WORK_S / 2)
    assert await _tick(collector, io, 11 + 3 * WINDOW_S) == []
    assert collector.not_advancing() is None
    write_stat(root, 10.0 + 1.5 * MIN_WORK_S)
    await _tick(collector, io, 12 + 3 * WINDOW_S)
    assert (collector.not_advancing() or "").startswith("not advancing: psys (socket 0)")


async def test_probe_says_not_advancing_for_list(tmp_path: Path) -> None:
    """``list``'s probe reads for up to the window (doing work meanwhile) and raises NoData
    with the reason; the tree has no proc/stat, so the window alone decides."""
    collector, io, root = await _perf_vm(tmp_path)
    (root / "proc/stat").unlink(missing_ok=True)
    io.now = 0

    # the fake clock: each read advances it by a tenth of the window
    def monotonic_ns() -> int:
        io.now += int(WINDOW_S * S / 10)
        return io.now

    io.monotonic_ns = monotonic_ns  # type: ignore[method-assign]
    with pytest.raises(NoData) as info:
        await collector.probe()
    assert str(info.value).startswith("not advancing: psys (socket 0) did not move in ")
    assert str(info.value).endswith(f" s ({WHY_VM})")


async def test_perf_without_hypervisor_flag_blames_the_pmu(tmp_path: Path) -> None:
    root = install_tree("perf-vm-psys", tmp_path)
    cpuinfo = (root / "proc/cpuinfo").read_text().replace(" hypervisor", "")
    (root / "proc/cpuinfo").write_text(cpuinfo)
    io = FakePerfIO({k: dict(v) for k, v in PSYS.items()}, {5: "energy-psys"})
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    await collector.open()
    write_stat(root, 1.0)
    await _tick(collector, io, 1)
    write_stat(root, 2.0)
    await _tick(collector, io, 1 + WINDOW_S)
    assert (collector.not_advancing() or "").endswith(f"({WHY_PERF})")


async def test_powercap_zone_that_never_moves_beside_one_that_does(tmp_path: Path) -> None:
    """Package moves, psys stays: package is written, psys is not and is said in the log and
    describe(); the collector measures, so it is not 'not advancing' as a whole."""
    root = install_tree("laptop-psys-mmio", tmp_path)
    io = SteppedIO()
    collector = RaplCollector(
        RaplConfig(root=str(root), domains=["package", "psys"]), context(), io=io
    )
    await collector.open()
    written: list[Point] = []
    for i in range(1, 5):
        bump(root, "intel-rapl:0", 10_000_000)  # 10 J a second
        written += await _tick(collector, io, i)
    assert {p.tags["domain"] for p in written} == {"package"}
    assert [p.fields["power_watts"] for p in written] == [10.0] * 4
    assert collector.not_advancing() is None
    assert collector.describe() == ("powercap: package (socket 0), psys (socket 0) not advancing")
    psys = next(c for c in collector._counters if c.tags["domain"] == "psys")
    assert psys.advance is not None and psys.advance.reason() == (
        f"not advancing: psys (socket 0) did not move in 2.0 s ({WHY_FIRMWARE})"
    )


async def test_a_zone_that_moves_a_tick_late_starts_at_its_last_still_reading(
    tmp_path: Path,
) -> None:
    """Zones are written one after the other (the kernel's and a fixture's alike): a tick can
    read package moved and dram not yet. dram's series then starts at that tick (its last still
    reading, 0 J since open), not one tick after package's: a reader that starts once it has a
    first reading finds every zone's series open from there."""
    root = install_tree("xeon-2s-dram", tmp_path)
    io = SteppedIO()
    collector = RaplCollector(
        RaplConfig(root=str(root), domains=["package", "dram"]), context(), io=io
    )
    await collector.open()
    first = await _tick(collector, io, 1)  # nothing moved since open
    bump(root, "intel-rapl:0", 10_000_000)
    bump(root, "intel-rapl:1", 10_000_000)
    second = await _tick(collector, io, 2)  # the packages moved, the DRAMs not yet
    for zone in ("intel-rapl:0:0", "intel-rapl:1:0", "intel-rapl:0", "intel-rapl:1"):
        bump(root, zone, 2_000_000)
    third = await _tick(collector, io, 3)

    def seen(points: list[Point]) -> list[tuple[str, str, float, dict[str, float]]]:
        return [
            (p.tags["domain"], p.tags["socket"], p.time_ns / S, dict(p.fields))  # type: ignore[arg-type]
            for p in points
        ]

    assert first == []
    assert seen(second) == [
        ("package", "0", 1.0, {"energy_joules": 0.0}),
        ("package", "0", 2.0, {"energy_joules": 10.0, "power_watts": 10.0}),
        ("package", "1", 1.0, {"energy_joules": 0.0}),
        ("package", "1", 2.0, {"energy_joules": 10.0, "power_watts": 10.0}),
    ]
    assert seen(third) == [
        ("package", "0", 3.0, {"energy_joules": 12.0, "power_watts": 2.0}),
        ("dram", "0", 2.0, {"energy_joules": 0.0}),
        ("dram", "0", 3.0, {"energy_joules": 2.0, "power_watts": 2.0}),
        ("package", "1", 3.0, {"energy_joules": 12.0, "power_watts": 2.0}),
        ("dram", "1", 2.0, {"energy_joules": 0.0}),
        ("dram", "1", 3.0, {"energy_joules": 2.0, "power_watts": 2.0}),
    ]
    # Once it has moved, a tick without a move is a real 0 W, written as such (no 0 J again).
    assert seen(await _tick(collector, io, 4))[1] == (
        "dram",
        "0",
        4.0,
        {"energy_joules": 2.0, "power_watts": 0.0},
    )
