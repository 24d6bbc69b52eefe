"""The MSR backend (files laid out like /dev/cpu/N/msr) and the perf power-PMU backend."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from acquisition.errors import NoData
from acquisition.point import Point
from collectors.rapl import RaplCollector, RaplConfig, RaplIO
from tests.rapl.scenarios import (
    FIXTURES,
    MSR_SCENARIOS,
    SteppedIO,
    context,
    install_tree,
    lines,
    run_msr,
    write_msr_files,
)


def test_every_msr_scenario_is_covered() -> None:
    assert MSR_SCENARIOS == ["msr-amd-zen", "msr-skx-2s", "msr-spr-psys"]


@pytest.mark.parametrize("scenario", MSR_SCENARIOS)
async def test_msr_scenario_emits_expected_line_protocol(scenario: str, tmp_path: Path) -> None:
    points, collector = await run_msr(scenario, tmp_path)
    assert collector.backend == "msr"
    assert lines(points) == (FIXTURES / scenario / "expected.lp").read_text()
    await collector.aclose()


async def test_msr_skylake_server_domains_units_and_wrap(tmp_path: Path) -> None:
    points, collector = await run_msr("msr-skx-2s", tmp_path)
    # PP0 reads 0 (absent, as the kernel decides); PP1 and platform lie past the end (EIO).
    assert collector.describe() == (
        "msr: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )
    by = {(p.tags["socket"], p.tags["domain"], p.time_ns): p.fields for p in points}
    # 2457600 ticks of 2^-14 J across the 32-bit wrap of package 0.
    assert by[("0", "package", 1763884801000000000)] == {
        "energy_joules": 150.0,
        "power_watts": 150.0,
    }
    # DRAM ignores the unit register on Skylake-X: 1200000 ticks of 15.3 µJ.
    assert by[("0", "dram", 1763884801000000000)] == {"energy_joules": 18.36, "power_watts": 18.36}
    # Reserved bits 63:32 of package 1 change between steps; masking keeps 131 W.
    assert by[("1", "package", 1763884802000000000)]["power_watts"] == 131.0
    assert collector.stats() == {"read_errors": 0, "wraps": 1}
    await collector.aclose()


async def test_msr_reads_one_cpu_per_package(tmp_path: Path) -> None:
    opened: list[str] = []

    class Recording(SteppedIO):
        def open_msr(self, path: str) -> int:
            opened.append(Path(path).parent.name)
            return super().open_msr(path)

    _, collector = await run_msr("msr-skx-2s", tmp_path, Recording())
    assert opened == ["0", "1"]  # cpu0 leads package 0, cpu1 package 1 (interleaved numbering)
    await collector.aclose()


async def test_an_offline_cpu_is_passed_over_and_the_cpus_after_it_read(tmp_path: Path) -> None:
    """Guards: a CPU without topology (offline) is passed over, not the end of the scan: with
    cpu1 offline, package 1 is read through cpu3 (its registers those of cpu1), and the points
    are the fixture's."""
    opened: list[str] = []

    class Recording(SteppedIO):
        def open_msr(self, path: str) -> int:
            opened.append(Path(path).parent.name)
            return super().open_msr(path)

    def offline_cpu1(root: Path) -> None:
        shutil.rmtree(root / "sys/devices/system/cpu/cpu1/topology")

    points, collector = await run_msr("msr-skx-2s", tmp_path, Recording(), prepare=offline_cpu1)
    assert opened == ["0", "3"]
    assert lines(points) == (FIXTURES / "msr-skx-2s" / "expected.lp").read_text()
    await collector.aclose()


def _like_a_real_cpu_directory(root: Path) -> None:
    """The entries Linux keeps beside cpu0…cpuN in /sys/devices/system/cpu."""
    cpus = root / "sys/devices/system/cpu"
    for name in ("cpufreq/policy0", "cpuidle", "hotplug", "power", "smt", "vulnerabilities"):
        (cpus / name).mkdir(parents=True)
    for name, text in (("online", "0-3"), ("possible", "0-3"), ("kernel_max", "8191")):
        (cpus / name).write_text(f"{text}\n")
    (cpus / "cpufreq/policy0/scaling_cur_freq").write_text("2100000\n")


async def test_cpufreq_and_cpuidle_beside_the_cpus_change_nothing(tmp_path: Path) -> None:
    """Guards: only ``cpu<N>`` entries are CPUs; ``cpufreq``, ``cpuidle``, ``online`` and the
    rest of a real /sys/devices/system/cpu are passed over: one MSR device per package is read
    (cpu0 and cpu1) and the points are the fixture's."""
    opened: list[str] = []

    class Recording(SteppedIO):
        def open_msr(self, path: str) -> int:
            opened.append(Path(path).parent.name)
            return super().open_msr(path)

    points, collector = await run_msr(
        "msr-skx-2s", tmp_path, Recording(), prepare=_like_a_real_cpu_directory
    )
    assert collector.backend == "msr"
    assert opened == ["0", "1"]
    assert lines(points) == (FIXTURES / "msr-skx-2s" / "expected.lp").read_text()
    await collector.aclose()


async def test_an_entry_listed_before_cpu0_is_passed_over(tmp_path: Path) -> None:
    """Guards: an entry that sorts before ``cpu0`` in /sys/devices/system/cpu (``amd_pstate``, on
    an AMD machine whose kernel drives the CPU clock with it) is passed over, not the end of the
    scan: cpu0 leads the package and the points are the fixture's."""

    def amd_pstate(root: Path) -> None:
        (root / "sys/devices/system/cpu/amd_pstate").mkdir()
        (root / "sys/devices/system/cpu/amd_pstate/status").write_text("active\n")

    points, collector = await run_msr("msr-amd-zen", tmp_path, prepare=amd_pstate)
    assert collector.backend == "msr"
    assert lines(points) == (FIXTURES / "msr-amd-zen" / "expected.lp").read_text()
    await collector.aclose()


async def test_msr_reads_one_cpu_per_die_on_multi_die_intel(tmp_path: Path) -> None:
    """Cascade Lake-AP keeps a package energy counter per die: read each die's first CPU."""
    root = install_tree("msr-skx-2s", tmp_path)
    for cpu in (2, 3):
        (root / f"sys/devices/system/cpu/cpu{cpu}/topology/die_id").write_text("1\n")
    spec = tomllib.loads((FIXTURES / "msr-skx-2s" / "msr.toml").read_text())
    write_msr_files(root, spec["registers"])
    opened: list[str] = []

    class Recording(SteppedIO):
        def open_msr(self, path: str) -> int:
            opened.append(Path(path).parent.name)
            return super().open_msr(path)

    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=Recording())
    await collector.open()
    assert opened == ["0", "2", "1", "3"]  # (package, die) = (0, 0), (0, 1), (1, 0), (1, 1)
    assert collector.describe() == (
        "msr: package (socket 0 die 0), dram (socket 0 die 0), package (socket 0 die 1), "
        "dram (socket 0 die 1), package (socket 1 die 0), dram (socket 1 die 0), "
        "package (socket 1 die 1), dram (socket 1 die 1)"
    )
    await collector.aclose()


async def test_msr_fds_are_closed(tmp_path: Path) -> None:
    fds: list[int] = []

    class Recording(SteppedIO):
        def open_msr(self, path: str) -> int:
            fds.append(super().open_msr(path))
            return fds[-1]

    _, collector = await run_msr("msr-spr-psys", tmp_path, Recording())
    assert len(fds) == 1
    os.fstat(fds[0])
    await collector.aclose()
    with pytest.raises(OSError) as info:
        os.fstat(fds[0])
    assert info.value.errno == errno.EBADF


def _msr_root(tmp_path: Path) -> Path:
    root = install_tree("msr-spr-psys", tmp_path)
    spec = tomllib.loads((FIXTURES / "msr-spr-psys" / "msr.toml").read_text())
    write_msr_files(root, spec["registers"])
    return root


async def test_msr_not_readable_says_so(tmp_path: Path) -> None:
    root = _msr_root(tmp_path)

    class Denied(SteppedIO):
        def open_msr(self, path: str) -> int:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=Denied())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == (
        f"unavailable: no powercap zones in {root}/sys/class/powercap, MSR device not readable (Permission denied: needs root "
        "with CAP_SYS_RAWIO), no power PMU"
    )


async def test_msr_device_without_rapl_registers(tmp_path: Path) -> None:
    """A hypervisor that loads msr but traps the RAPL registers: every read is EIO."""
    root = install_tree("msr-spr-psys", tmp_path)
    write_msr_files(root, {"0": {}, "1": {}})  # empty files: every pread is short → EIO
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == (
        f"unavailable: no powercap zones in {root}/sys/class/powercap, MSR: no RAPL unit register 0x606 (short read of MSR "
        "0x606), no power PMU"
    )


async def test_msr_read_failure_emits_nothing_for_that_domain(tmp_path: Path) -> None:
    class Failing(SteppedIO):
        fail_address: int | None = None

        def pread_msr(self, fd: int, address: int) -> int:
            if address == self.fail_address:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return super().pread_msr(fd, address)

    root = _msr_root(tmp_path)
    io = Failing()
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    io.now = 1_000_000_000
    await collector.open()
    io.fail_address = 0x619
    write_msr_files(
        root,
        {
            "0": {
                "0x611": 0x3A5F1200 + 16384 * 100,
                "0x619": 0x08810044 + 16384 * 40,
                "0x64d": 0x7D15A + 600,
            }
        },
    )
    io.now = 2_000_000_000
    points: list[Point] = []
    await collector.collect(points.append, 7)
    assert [(p.tags["domain"], dict(p.fields)) for p in points] == [
        ("package", {"energy_joules": 100.0, "power_watts": 100.0}),
        ("psys", {"energy_joules": 600.0, "power_watts": 600.0}),
    ]
    assert collector.stats()["read_errors"] == 1
    io.fail_address = None
    io.now = 3_000_000_000
    points = []
    await collector.collect(points.append, 8)
    # DRAM's 40 J since open arrive with the next good read, spread over its 2 s.
    assert [dict(p.fields) for p in points if p.tags["domain"] == "dram"] == [
        {"energy_joules": 40.0, "power_watts": 20.0}
    ]
    await collector.aclose()


# -- perf -------------------------------------------------------------------------------------


class FakePerfIO(SteppedIO):
    """The real files; perf_event_open and the counter reads replaced by a table, since this
    machine has no power PMU. Mirrors the kernel: counts start near 0 at open, 64-bit."""

    def __init__(self, counts: dict[str, dict[str, int]], configs: dict[int, str]) -> None:
        super().__init__()
        self.counts = counts
        self.configs = configs
        self.opened: list[tuple[int, int, int]] = []
        self.fds: dict[int, tuple[str, str]] = {}
        self.closed: list[int] = []

    def perf_event_open(self, pmu_type: int, config: int, cpu: int) -> int:
        self.opened.append((pmu_type, config, cpu))
        fd = 1000 + len(self.opened)
        self.fds[fd] = (self.configs[config], str(cpu))
        return fd

    def read_counter(self, fd: int) -> int:
        event, cpu = self.fds[fd]
        return self.counts[event][cpu]

    def close(self, fd: int) -> None:
        assert fd in self.fds
        self.closed.append(fd)


async def _run_perf(
    tmp_path: Path, config: RaplConfig | None = None, prepare: Any = None
) -> tuple[list[Point], RaplCollector, FakePerfIO]:
    """The perf-2s fixture opened and stepped; ``prepare(root)`` may change its tree first."""
    spec: dict[str, Any] = tomllib.loads((FIXTURES / "perf-2s" / "perf.toml").read_text())
    root = install_tree("perf-2s", tmp_path)
    if prepare is not None:
        prepare(root)
    io = FakePerfIO(
        {k: dict(v) for k, v in spec["counts"].items()}, {2: "energy-pkg", 3: "energy-ram"}
    )
    cfg = config or RaplConfig()
    cfg.root = str(root)
    collector = RaplCollector(cfg, context(), io=io)
    io.now = spec["open_monotonic_ns"]
    await collector.open()
    points: list[Point] = []
    for step in spec["step"]:
        for event, per_cpu in step["counts"].items():
            io.counts[event].update(per_cpu)
        io.now = step["monotonic_ns"]
        await collector.collect(points.append, step["time_ns"])
    return points, collector, io


async def test_perf_backend(tmp_path: Path) -> None:
    points, collector, io = await _run_perf(tmp_path)
    assert collector.backend == "perf"
    # type from power/type, config from events/energy-*, one CPU per package from cpumask
    assert io.opened == [(13, 2, 0), (13, 2, 1), (13, 3, 0), (13, 3, 1)]
    assert lines(points) == (FIXTURES / "perf-2s" / "expected.lp").read_text()
    await collector.aclose()
    assert sorted(io.closed) == [1001, 1002, 1003, 1004]


@pytest.mark.parametrize(
    ("event", "other_config", "other_domain"),
    [("energy-ram", 2, "package"), ("energy-pkg", 3, "dram")],
)
async def test_a_perf_event_without_its_scale_is_skipped_with_a_warning(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    event: str,
    other_config: int,
    other_domain: str,
) -> None:
    """Guards: an event whose scale cannot be read (DRAM's, listed last; the package's, listed
    first) is skipped with a warning that names it and why; the other event is still read on
    both CPUs."""

    def no_scale(root: Path) -> None:
        (root / f"sys/bus/event_source/devices/power/events/{event}.scale").unlink()

    caplog.set_level(logging.WARNING, logger="collectors.rapl")
    points, collector, io = await _run_perf(tmp_path, prepare=no_scale)
    assert io.opened == [(13, other_config, 0), (13, other_config, 1)]
    assert {p.tags["domain"] for p in points} == {other_domain}
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"skipping perf event {event}" in warning and f"{event}.scale" in warning
    await collector.aclose()


async def test_a_perf_event_that_cannot_open_on_one_cpu_is_read_on_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: perf_event_open failing for one event on one CPU (ENODEV, not a permission) is
    warned about with the event, the CPU and why, and passes over that CPU only: the package is
    read on cpu1 (socket 1) and DRAM on both."""

    class NoPkgOnCpu0(FakePerfIO):
        def perf_event_open(self, pmu_type: int, config: int, cpu: int) -> int:
            if (config, cpu) == (2, 0):
                raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
            return super().perf_event_open(pmu_type, config, cpu)

    spec: dict[str, Any] = tomllib.loads((FIXTURES / "perf-2s" / "perf.toml").read_text())
    io = NoPkgOnCpu0(
        {k: dict(v) for k, v in spec["counts"].items()}, {2: "energy-pkg", 3: "energy-ram"}
    )
    caplog.set_level(logging.WARNING, logger="collectors.rapl")
    collector = RaplCollector(
        RaplConfig(root=str(install_tree("perf-2s", tmp_path))), context(), io=io
    )
    await collector.open()
    assert collector.backend == "perf"
    assert io.opened == [(13, 2, 1), (13, 3, 0), (13, 3, 1)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["rapl: perf event energy-pkg on cpu0: [Errno 19] No such device"]
    # 2^-32 J per count: 121 J = 121 * 4294967296 = 519691042816 counts in 1 s.
    io.counts["energy-pkg"]["1"] = 519691042816
    io.counts["energy-ram"] = {"0": 18 * 4294967296, "1": 16 * 4294967296}
    io.now = 1_000_000_000
    points: list[Point] = []
    await collector.collect(points.append, 1)
    assert [(p.tags["domain"], p.tags["socket"], dict(p.fields)) for p in points] == [
        ("package", "1", {"energy_joules": 121.0, "power_watts": 121.0}),
        ("dram", "0", {"energy_joules": 18.0, "power_watts": 18.0}),
        ("dram", "1", {"energy_joules": 16.0, "power_watts": 16.0}),
    ]
    await collector.aclose()


async def test_perf_used_when_energy_uj_is_root_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """powercap present but EACCES (non-root), perf permitted: perf runs, the log says how to
    open powercap."""
    spec: dict[str, Any] = tomllib.loads((FIXTURES / "perf-2s" / "perf.toml").read_text())
    root = install_tree("perf-2s", tmp_path)
    laptop = install_tree("laptop-psys-mmio", tmp_path / "l")
    (root / "sys/class").mkdir()
    os.rename(laptop / "sys/class/powercap", root / "sys/class/powercap")
    os.rename(laptop / "sys/devices/virtual", root / "sys/devices/virtual")
    io = FakePerfIO(
        {k: dict(v) for k, v in spec["counts"].items()}, {2: "energy-pkg", 3: "energy-ram"}
    )
    io.fail = {"/energy_uj": errno.EACCES}
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    await collector.open()
    assert collector.backend == "perf"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= 30]
    assert len(warnings) == 1
    assert warnings[0].startswith("rapl: using the perf backend; RAPL energy counters are readable")


async def test_perf_not_permitted(tmp_path: Path) -> None:
    root = install_tree("perf-2s", tmp_path)

    class Paranoid(SteppedIO):
        def perf_event_open(self, pmu_type: int, config: int, cpu: int) -> int:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=Paranoid())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == (
        f"unavailable: no powercap zones in {root}/sys/class/powercap, no MSR device, power PMU not permitted "
        "(perf_event_paranoid must be <= 0, or CAP_PERFMON: Permission denied)"
    )


async def test_perf_counter_going_backwards_is_a_failed_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: a perf count that goes down (the event restarted) gives no point at that tick,
    is counted in ``read_errors`` and said once as a warning naming both counts; the next
    reading goes on from the new count (said once too, at info), with no negative energy."""
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    _, collector, io = await _run_perf(tmp_path)
    before = io.counts["energy-pkg"]["0"]
    assert collector.stats()["read_errors"] == 0
    io.counts["energy-pkg"]["0"] = 5  # the PMU was re-registered and the event restarted
    io.now += 1_000_000_000
    after: list[Point] = []
    await collector.collect(after.append, 9)
    assert [(p.tags["domain"], p.tags["socket"]) for p in after] == [
        ("package", "1"),
        ("dram", "0"),
        ("dram", "1"),
    ]
    io.counts["energy-pkg"]["0"] = 5 + (100 << 32)
    io.now += 1_000_000_000
    again: list[Point] = []
    await collector.collect(again.append, 10)
    # Continues from the restart value: 313 J before, +100 J after; no negative step.
    assert again[0].fields == {"energy_joules": 413.0, "power_watts": 100.0}
    assert collector.stats()["read_errors"] == 1
    said = [r.getMessage() for r in caplog.records if r.name.startswith("collectors.rapl")]
    warned = [m for m in said if "went backwards" in m]
    assert len(warned) == 1, said
    assert f"counter went backwards from {before} to 5" in warned[0]
    assert [m for m in said if m.endswith("on cpu0 reads again")] == [
        "rapl: perf power/energy-pkg/ on cpu0 reads again"
    ], said


def test_real_perf_event_open_syscall() -> None:
    """The ctypes syscall wrapper itself, on a PMU every Linux has (software cpu-clock)."""
    io = RaplIO()
    try:
        fd = io.perf_event_open(1, 0, 0)  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, cpu 0
    except PermissionError:
        pytest.skip("perf_event_open of a system-wide event is not permitted for this user")
    try:
        first = io.read_counter(fd)
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            pass
        assert io.read_counter(fd) > first
    finally:
        io.close(fd)
    with pytest.raises(OSError) as info:
        io.perf_event_open(0x7FFF_0000, 0, 0)  # no such PMU
    assert info.value.errno in (errno.ENOENT, errno.EINVAL)


class ModelIO(SteppedIO):
    """The scenario's CPUs (Intel family-6 model ``was``) reported as another ``model``."""

    def __init__(self, model: int, was: int = 0x55) -> None:
        super().__init__()
        self.model, self.was = model, was

    def read_text(self, path: str) -> str:
        text = super().read_text(path)
        if path.endswith("proc/cpuinfo"):
            text = text.replace(f"model\t\t: {self.was}\n", f"model\t\t: {self.model}\n")
        return text


# The server models whose DRAM domain counts in 15.3 µJ whatever the unit register says
# (Intel's datasheets; Linux's intel_rapl driver has the same list): Haswell-X 0x3F,
# Broadwell-X 0x4F, Broadwell-D 0x56, Skylake-X 0x55, Ice Lake-X 0x6A, Ice Lake-D 0x6C,
# Xeon Phi KNL 0x57 and KNM 0x85. Sandy Bridge-EP (0x2D) follows the register.
@pytest.mark.parametrize(
    ("model", "dram_j"),
    [(m, 18.36) for m in (0x3F, 0x4F, 0x56, 0x55, 0x6A, 0x6C, 0x57, 0x85)] + [(0x2D, 73.2421875)],
)
async def test_dram_unit_per_cpu_model(tmp_path: Path, model: int, dram_j: float) -> None:
    """Guards: every server model whose DRAM ignores the unit register reads its 1,200,000
    DRAM ticks (in 1 s) as 1,200,000 × 15.3 µJ = 18.36 J; another model reads them in the
    register's 2^-14 J: 1,200,000 / 16,384 = 73.2421875 J."""
    points, collector = await run_msr("msr-skx-2s", tmp_path, ModelIO(model))
    by = {(p.tags["socket"], p.tags["domain"], p.time_ns): p.fields for p in points}
    assert by[("0", "dram", 1763884801000000000)]["energy_joules"] == pytest.approx(dram_j)
    await collector.aclose()


# Sapphire Rapids (0x8F) and Emerald Rapids (0xCF) count the platform (psys) domain in whole
# joules whatever the unit register says (Linux's intel_rapl driver: the same two models);
# others, such as Ice Lake-X (0x6A), follow the register.
@pytest.mark.parametrize(
    ("model", "psys_j"), [(0x8F, 652.0), (0xCF, 652.0), (0x6A, 0.039794921875)]
)
async def test_psys_unit_per_cpu_model(tmp_path: Path, model: int, psys_j: float) -> None:
    """Guards: the 652 psys ticks of the fixture's first second (0x7D3E6 − 0x7D15A) read as
    652 J on the two models that count psys in joules, and as 652 × 2^-14 J = 0.039794921875 J
    (the register's energy unit, 0xA0E03 bits 8–12 = 14) on another."""
    points, collector = await run_msr("msr-spr-psys", tmp_path, ModelIO(model, was=0x8F))
    by = {(p.tags["domain"], p.time_ns): p.fields for p in points}
    assert by[("psys", 1763884801000000000)]["energy_joules"] == pytest.approx(psys_j)
    await collector.aclose()


async def test_a_client_cpus_core_and_uncore_domains_each_read_from_their_register(
    tmp_path: Path,
) -> None:
    """Guards: on an Intel client CPU (Alder Lake-P, model 0x9A) the package (0x611), cores
    (PP0, 0x639), client GPU (PP1, 0x641, "uncore") and platform (0x64D) counters are each read
    from their own register in the unit register's 2^-14 J; DRAM (0x619) reads 0 there and is
    left out. Ticks in one second: 30, 20, 5 and 45 J times 16,384."""
    root = install_tree("msr-spr-psys", tmp_path)
    write_msr_files(root, {"0": {}, "1": {}})  # the devices exist; the table holds the registers
    io = ModelIO(0x9A, was=0x8F)
    start = {0x611: 1000, 0x639: 500, 0x641: 100, 0x64D: 2000}  # joules since boot
    regs = {0x606: 0xA0E03, 0x619: 0, **{a: j * 16384 for a, j in start.items()}}
    io.msr_table = {0: dict(regs), 1: dict(regs)}
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    io.now = 1_000_000_000
    await collector.open()
    assert collector.describe() == (
        "msr: package (socket 0), core (socket 0), uncore (socket 0), psys (socket 0)"
    )
    for address, joules in {0x611: 30, 0x639: 20, 0x641: 5, 0x64D: 45}.items():
        io.msr_table[0][address] += joules * 16384
    io.now = 2_000_000_000
    points: list[Point] = []
    await collector.collect(points.append, 7)
    assert [(p.tags, dict(p.fields)) for p in points] == [
        ({"domain": d, "socket": "0"}, {"energy_joules": j, "power_watts": j})
        for d, j in (("package", 30.0), ("core", 20.0), ("uncore", 5.0), ("psys", 45.0))
    ]
    await collector.aclose()
