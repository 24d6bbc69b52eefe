"""The per-process power share processor: RAPL power × procfs CPU/memory shares."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from acquisition.bus import Bus
from acquisition.errors import ConfigError
from acquisition.point import Point
from acquisition.processors.process_power import PowerTable, ProcessPowerConfig, ProcessPowerShare
from collectors.procfs import ProcfsCollector, ProcfsConfig
from collectors.rapl import RaplCollector, RaplConfig
from tests.rapl.scenarios import SteppedIO, context, install_tree

S = 1_000_000_000
T0 = 1_763_884_800 * S


def rapl(t: int, socket: str, domain: str, watts: float, die: str | None = None) -> Point:
    tags = {"socket": socket, "domain": domain}
    if die is not None:
        tags["die"] = die
    return Point("rapl", tags, {"energy_joules": 1000.0, "power_watts": watts}, t)


def proc(
    t: int,
    scope: str = "combined",
    cpu: float | None = None,
    mem: float | None = None,
    **extra: str,
) -> Point:
    fields: dict[str, float | int] = {"cpu_seconds": 12.5, "rss_bytes": 1 << 30}
    if cpu is not None:
        fields["cpu_busy_share_ratio"] = cpu
    if mem is not None:
        fields["memory_used_share_ratio"] = mem
    return Point("process", {"tree": "4242", "scope": scope, **extra}, fields, t)


def burn_cpu(seconds: float = 0.05) -> None:
    """Use this much CPU time (several USER_HZ ticks, whatever the machine's load)."""
    start = time.process_time()
    x = 0
    while time.process_time() - start < seconds:
        for i in range(10_000):
            x += i * i


class Recorder:
    def __init__(self, config: ProcessPowerConfig | None = None) -> None:
        self.proc = ProcessPowerShare(config, context())
        self.out: list[Point] = []

    def feed(self, *points: Point) -> list[Point]:
        start = len(self.out)
        for p in points:
            self.proc.process(p, self.out.append)
        return self.out[start:]


def two_sockets(t: int, pkg: tuple[float, float], dram: tuple[float, float]) -> list[Point]:
    return [
        rapl(t, "0", "package", pkg[0]),
        rapl(t, "0", "dram", dram[0]),
        rapl(t, "1", "package", pkg[1]),
        rapl(t, "1", "dram", dram[1]),
    ]


def test_shares_of_machine_power_and_cumulative_joules() -> None:
    r = Recorder()
    # procfs' first tick has no shares yet: it only starts the series' first interval.
    assert r.feed(*two_sockets(T0, (140.0, 100.0), (18.0, 14.0)), proc(T0)) == []
    out = r.feed(
        *two_sockets(T0 + S, (150.0, 100.0), (20.0, 12.0)), proc(T0 + S, cpu=0.25, mem=0.125)
    )
    assert out == [
        Point(
            "process_power",
            {"tree": "4242", "scope": "combined"},
            {
                "cpu_power_watts": 62.5,  # 0.25 × (150 + 100) W
                "cpu_energy_joules": 62.5,  # over 1 s
                "dram_power_watts": 4.0,  # 0.125 × (20 + 12) W
                "dram_energy_joules": 4.0,
            },
            T0 + S,
        )
    ]
    out = r.feed(
        *two_sockets(T0 + 3 * S, (200.0, 200.0), (16.0, 16.0)), proc(T0 + 3 * S, cpu=0.5, mem=0.25)
    )
    assert [dict(p.fields) for p in out] == [
        {
            "cpu_power_watts": 200.0,
            "cpu_energy_joules": 462.5,  # + 200 W × 2 s
            "dram_power_watts": 8.0,
            "dram_energy_joules": 20.0,  # + 8 W × 2 s
        }
    ]
    assert r.proc.stats() == {"missing_power": 0}
    assert r.proc.emitted == 2


def test_scopes_and_tags() -> None:
    r = Recorder()
    r.feed(*two_sockets(T0, (100.0, 100.0), (10.0, 10.0)))
    out = r.feed(
        proc(T0, "main", cpu=0.5),
        proc(T0, "descendants", cpu=0.25),
        proc(T0, "pid", cpu=0.5, pid="4242", comm="python"),
    )
    assert [(dict(p.tags), dict(p.fields)) for p in out] == [
        ({"tree": "4242", "scope": "main"}, {"cpu_power_watts": 100.0}),
        ({"tree": "4242", "scope": "descendants"}, {"cpu_power_watts": 50.0}),
    ]
    r = Recorder(ProcessPowerConfig(scopes=["pid"]))
    r.feed(*two_sockets(T0, (100.0, 100.0), (10.0, 10.0)))
    out = r.feed(
        proc(T0, "main", cpu=0.5), proc(T0, "pid", cpu=0.5, pid="4243", comm="pt_data_worker")
    )
    assert [dict(p.tags) for p in out] == [
        {"tree": "4242", "scope": "pid", "pid": "4243", "comm": "pt_data_worker"}
    ]


def test_stale_or_missing_rapl_power_leaves_fields_out() -> None:
    r = Recorder(ProcessPowerConfig(max_age=2.0))
    # No RAPL at all (a VM): nothing to share out, and no work done or state kept.
    assert r.feed(proc(T0), proc(T0 + S, cpu=0.5, mem=0.5)) == []
    assert r.proc.stats() == {"missing_power": 0}
    assert r.proc._series == {}
    # The first process point after RAPL power appeared starts the series.
    assert r.feed(rapl(T0 + S, "0", "package", 90.0), proc(T0 + S)) == []
    # Package power 3 s older than the process point: too old; DRAM is fresh.
    r.feed(rapl(T0 + 4 * S, "0", "dram", 6.0))
    out = r.feed(proc(T0 + 4 * S, cpu=0.5, mem=0.5))
    # dram's first power: 3 W for the 3 s since the last process point.
    assert [dict(p.fields) for p in out] == [{"dram_power_watts": 3.0, "dram_energy_joules": 9.0}]
    out = r.feed(rapl(T0 + 5 * S, "0", "package", 80.0), proc(T0 + 5 * S, cpu=0.5, mem=0.5))
    # The CPU interval that had no power added no energy; this one adds 40 W × 1 s.
    assert [dict(p.fields) for p in out] == [
        {
            "cpu_power_watts": 40.0,
            "cpu_energy_joules": 40.0,
            "dram_power_watts": 3.0,
            "dram_energy_joules": 12.0,
        }
    ]
    # Every power older than max_age: a point with shares and no field is counted.
    assert r.feed(proc(T0 + 8 * S, cpu=0.5, mem=0.5)) == []
    assert r.proc.stats() == {"missing_power": 1}


def test_rapl_power_newer_than_max_age_is_not_used() -> None:
    """Power read after the process point counts only within max_age of it, as older power does:
    a value from far in the future describes another interval."""
    r = Recorder(ProcessPowerConfig(max_age=2.0))
    r.feed(rapl(T0, "0", "dram", 4.0), proc(T0))
    r.feed(rapl(T0 + 4 * S, "0", "package", 90.0))  # 3 s after the next process point
    out = r.feed(proc(T0 + S, cpu=0.5, mem=0.5))
    assert [dict(p.fields) for p in out] == [{"dram_power_watts": 2.0, "dram_energy_joules": 2.0}]
    r.feed(rapl(T0 + 3 * S, "0", "package", 60.0))  # 1 s after the next one: within max_age
    out = r.feed(proc(T0 + 2 * S, cpu=0.5))
    assert [dict(p.fields) for p in out] == [{"cpu_power_watts": 30.0, "cpu_energy_joules": 30.0}]


def test_a_socket_missing_one_tick_uses_its_last_power() -> None:
    r = Recorder()
    r.feed(*two_sockets(T0, (100.0, 80.0), (10.0, 10.0)), proc(T0))
    # socket 1 failed to read at T0+1s: its 80 W from T0 still counts (within max_age).
    r.feed(rapl(T0 + S, "0", "package", 120.0))
    out = r.feed(proc(T0 + S, cpu=0.5))
    assert [dict(p.fields) for p in out] == [{"cpu_power_watts": 100.0, "cpu_energy_joules": 100.0}]


def test_multi_die_packages_are_summed() -> None:
    r = Recorder()
    r.feed(
        rapl(T0, "0", "package", 170.0, die="0"),
        rapl(T0, "0", "package", 166.0, die="1"),
        rapl(T0, "1", "package", 175.0, die="0"),
        rapl(T0, "1", "package", 169.0, die="1"),
    )
    out = r.feed(proc(T0, cpu=0.5))
    assert [dict(p.fields) for p in out] == [{"cpu_power_watts": 340.0}]


def test_core_domain() -> None:
    r = Recorder(ProcessPowerConfig(cpu_domain="core"))
    out = r.feed(rapl(T0, "0", "package", 20.0), rapl(T0, "0", "core", 12.0), proc(T0, cpu=0.75))
    assert [dict(p.fields) for p in out] == [{"cpu_power_watts": 9.0}]


def test_power_table() -> None:
    table = PowerTable(("package",), 5 * S)
    assert table.total("package", T0) is None
    assert table.update(rapl(T0, "0", "package", 10.0))
    assert not table.update(rapl(T0, "0", "dram", 10.0))
    assert not table.update(
        Point("rapl", {"socket": "1", "domain": "package"}, {"energy_joules": 1.0}, T0)
    )
    assert table.update(rapl(T0 + S, "1", "package", 20.0))
    assert table.total("package", T0 + S) == 30.0
    assert table.total("package", T0 + 6 * S) == 20.0  # socket 0's value is 6 s old
    assert table.total("package", T0 + 7 * S) is None
    assert table.total("dram", T0) is None


def test_bad_config() -> None:
    with pytest.raises(ConfigError, match="cpu_domain: 'gpu'"):
        ProcessPowerShare(ProcessPowerConfig(cpu_domain="gpu"), context())
    with pytest.raises(ConfigError, match=r"scopes: unknown \['tree'\]"):
        ProcessPowerShare(ProcessPowerConfig(scopes=["tree"]), context())
    with pytest.raises(ConfigError, match="max_age must be positive"):
        ProcessPowerShare(ProcessPowerConfig(max_age=0.0), context())


async def test_real_procfs_and_rapl_fixture_through_the_bus(tmp_path: Path) -> None:
    """Real procfs of this machine (tracking this test process) and the RAPL collector on the
    two-socket fixture, joined on the real bus."""
    root = install_tree("xeon-2s-dram", tmp_path)
    io = SteppedIO()
    rapl_c = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    procfs = ProcfsCollector(ProcfsConfig(per_core=False, per_process=False), context())
    bus = Bus()
    bus.add_processor("process_power", ProcessPowerShare(None, context()))
    seen: list[Point] = []
    bus.add_sink(seen.append)
    io.now = 0
    await rapl_c.open()
    await procfs.open()
    await procfs.collect(bus.emit, T0)
    burn_cpu()  # so this tree has a busy share
    for zone, uj in (
        ("intel-rapl:0", 184_799_780_118),
        ("intel-rapl:0:0", 40_140_715_906),
        ("intel-rapl:1", 179_146_718_744),
        ("intel-rapl:1:0", 38_521_012_170),
    ):
        (Path(str(root / "sys/class/powercap" / zone)) / "energy_uj").write_text(f"{uj}\n")
    io.now = S
    await rapl_c.collect(bus.emit, T0 + S)
    await procfs.collect(bus.emit, T0 + S)
    # A third tick: every zone gains 100 J in 1 s, so package and DRAM read 2 × 100 W.
    for zone, uj in (
        ("intel-rapl:0", 184_899_780_118),
        ("intel-rapl:0:0", 40_240_715_906),
        ("intel-rapl:1", 179_246_718_744),
        ("intel-rapl:1:0", 38_621_012_170),
    ):
        (Path(str(root / "sys/class/powercap" / zone)) / "energy_uj").write_text(f"{uj}\n")
    burn_cpu()
    io.now = 2 * S
    await rapl_c.collect(bus.emit, T0 + 2 * S)
    await procfs.collect(bus.emit, T0 + 2 * S)
    await procfs.aclose()
    await rapl_c.aclose()

    derived = [p for p in seen if p.measurement == "process_power"]
    combined = [p for p in seen if p.measurement == "process" and p.tags["scope"] == "combined"]
    assert [p.tags["scope"] for p in derived] == ["main", "descendants", "combined"] * 2
    share = combined[-2].fields["cpu_busy_share_ratio"]
    mem = combined[-2].fields["memory_used_share_ratio"]
    assert isinstance(share, float) and share > 0.0
    assert isinstance(mem, float)
    # The first tick after RAPL's first power only starts the series: no energy yet.
    out = derived[-4]
    assert out.tags == combined[-2].tags
    assert out.time_ns == T0 + S
    # Package 187.25 + 142.5 W, DRAM 23.48 + 19.02 W (the fixture's first tick).
    assert out.fields == {
        "cpu_power_watts": share * (0.0 + 187.25 + 142.5),
        "dram_power_watts": mem * (0.0 + 23.48 + 19.02),
    }
    out = derived[-1]
    share = combined[-1].fields["cpu_busy_share_ratio"]
    mem = combined[-1].fields["memory_used_share_ratio"]
    assert isinstance(share, float) and isinstance(mem, float)
    assert out.time_ns == T0 + 2 * S
    assert out.fields == {
        "cpu_power_watts": share * (0.0 + 100.0 + 100.0),
        "cpu_energy_joules": share * (0.0 + 100.0 + 100.0),  # over 1 s
        "dram_power_watts": mem * (0.0 + 100.0 + 100.0),
        "dram_energy_joules": mem * (0.0 + 100.0 + 100.0),
    }


def test_series_of_exited_processes_are_forgotten() -> None:
    """Per-pid series come and go: state for one silent for 100 × max_age is dropped."""
    r = Recorder(ProcessPowerConfig(scopes=["pid"], max_age=1.0))
    r.feed(rapl(T0, "0", "package", 50.0))
    for i in range(2048):
        r.feed(proc(T0 + i * S, "pid", pid=str(10_000 + i), comm="worker"))
    # Pruned at the 2048th point (t = 2047 s): only the last 100 s of series remain.
    assert len(r.proc._series) == 101
