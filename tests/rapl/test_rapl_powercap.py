"""The powercap backend against captured sysfs trees stepped through successive ticks."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import pytest

from acquisition.errors import ConfigError, NoData
from collectors.rapl import RaplCollector, RaplConfig, RaplIO, permission_guidance
from tests.rapl.scenarios import (
    FIXTURES,
    POWERCAP_SCENARIOS,
    SteppedIO,
    bump,
    context,
    install_tree,
    lines,
    run_powercap,
)

VM_MESSAGE = (
    "unavailable: no powercap zones in {root}/sys/class/powercap, no MSR device, no power PMU"
)


def test_every_scenario_is_covered() -> None:
    assert POWERCAP_SCENARIOS == [
        "amd-zen",
        "gnr-tpmi",
        "laptop-psys-mmio",
        "multi-die",
        "read-failure",
        "wrap",
        "xeon-2s-dram",
    ]


@pytest.mark.parametrize("scenario", POWERCAP_SCENARIOS)
async def test_scenario_emits_expected_line_protocol(scenario: str, tmp_path: Path) -> None:
    points, _ = await run_powercap(scenario, tmp_path)
    assert lines(points) == (FIXTURES / scenario / "expected.lp").read_text()


async def test_two_socket_xeon_first_tick_by_hand(tmp_path: Path) -> None:
    points, collector = await run_powercap("xeon-2s-dram", tmp_path)
    first = points[0]
    assert first.measurement == "rapl"
    assert dict(first.tags) == {"socket": "0", "domain": "package"}
    # 184799780118 - 184612530118 µJ over exactly 1 s
    assert dict(first.fields) == {"energy_joules": 187.25, "power_watts": 187.25}
    assert first.time_ns == 1763884801000000000
    assert collector.backend == "powercap"
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )
    assert collector.stats() == {"read_errors": 0, "wraps": 0}


async def test_laptop_psys_is_found_by_name_and_mmio_is_skipped(tmp_path: Path) -> None:
    points, collector = await run_powercap("laptop-psys-mmio", tmp_path)
    assert collector.describe() == (
        "powercap: package (socket 0), core (socket 0), uncore (socket 0), psys (socket 0)"
    )
    # One package series, though intel-rapl-mmio:0 also says package-0.
    packages = [p for p in points if p.tags["domain"] == "package"]
    assert len(packages) == 2
    assert [p.fields["power_watts"] for p in points if p.tags["domain"] == "psys"] == [22.25, 12.0]


async def test_wraps_are_counted(tmp_path: Path) -> None:
    points, collector = await run_powercap("wrap", tmp_path)
    assert collector.stats() == {"read_errors": 0, "wraps": 2}
    package = [p.fields for p in points if p.tags["domain"] == "package"]
    # 262143000000 µJ at open, 65671150 µJ at tick 1: +66 J across the wrap, not -262077 J.
    assert package[0] == {"energy_joules": 66.0, "power_watts": 66.0}


async def test_failed_read_emits_nothing_and_resumes_from_last_good_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    points, collector = await run_powercap("read-failure", tmp_path)
    per_tick = {}
    for p in points:
        per_tick.setdefault(p.time_ns, []).append(p.tags["domain"])
    assert per_tick == {
        1763884801000000000: ["package", "core", "dram"],
        1763884802000000000: ["package", "core"],  # dram: EIO
        1763884803000000000: ["core", "dram"],  # package: EIO
        1763884804000000000: ["package", "core", "dram"],
    }
    dram = [p.fields for p in points if p.tags["domain"] == "dram"]
    # 10.75 J over the 2 s since its last good read: no zero, no wrap, no lost energy.
    assert dram[1] == {"energy_joules": 16.0, "power_watts": 5.375}
    assert collector.stats() == {"read_errors": 2, "wraps": 0}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "intel-rapl:0:1/energy_uj" in warnings[0]
    assert "Input/output error" in warnings[0]
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("reads again" in m for m in recovered)


async def test_unparsable_energy_is_a_failed_read_not_a_wrap(tmp_path: Path) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    io = SteppedIO()
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    io.now = 1_000_000_000
    await collector.open()
    dram0 = Path(os.path.realpath(root / "sys/class/powercap/intel-rapl:0:0/energy_uj"))
    dram0.write_text("\n")  # a torn read: empty
    for zone in ("intel-rapl:0", "intel-rapl:1", "intel-rapl:1:0"):
        bump(root, zone, 1_000_000)  # the others measure: they moved
    io.now = 2_000_000_000
    tick1: list = []
    await collector.collect(tick1.append, 1)
    assert [(p.tags["socket"], p.tags["domain"]) for p in tick1] == [
        ("0", "package"),
        ("1", "package"),
        ("1", "dram"),
    ]
    dram0.write_text("40141235906\n")  # +24 J since open
    io.now = 3_000_000_000
    tick2: list = []
    await collector.collect(tick2.append, 2)
    fields = [p.fields for p in tick2 if p.tags == {"socket": "0", "domain": "dram"}]
    assert fields == [{"energy_joules": 24.0, "power_watts": 12.0}]


async def _first_tick_without_dram1(root: Path, io: SteppedIO, collector: RaplCollector) -> None:
    """A second on: every zone but socket 1's dram (whose first good read was at this tick, its
    baseline) gives its power."""
    for zone in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1"):
        bump(root, zone, 1_000_000)
    io.now = 1_000_000_000
    tick1: list = []
    await collector.collect(tick1.append, 1)
    assert [p.tags["domain"] + p.tags["socket"] for p in tick1] == ["package0", "dram0", "package1"]


async def test_zone_failing_at_open_starts_at_its_first_good_read(tmp_path: Path) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    io = SteppedIO()
    io.fail = {"intel-rapl:1:0/energy_uj": errno.EIO}
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    await collector.open()
    assert collector.describe().endswith("dram (socket 1)")
    io.fail = {}
    await _first_tick_without_dram1(root, io, collector)
    dram1 = Path(os.path.realpath(root / "sys/class/powercap/intel-rapl:1:0/energy_uj"))
    dram1.write_text(f"{int(dram1.read_text()) + 20_000_000}\n")
    io.now = 2_000_000_000
    tick2: list = []
    await collector.collect(tick2.append, 2)
    assert [p.fields for p in tick2 if p.tags["socket"] == "1" and p.tags["domain"] == "dram"] == [
        {"energy_joules": 20.0, "power_watts": 20.0}
    ]


async def test_a_zone_unparsable_at_open_is_a_counted_failed_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: an ``energy_uj`` that reads as no number at open (a torn, empty read) is a failed
    read like an I/O error: counted in ``read_errors``, said once as a warning naming the file
    and the text read, then "reads again" once it reads; its first good read is its baseline."""
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    root = install_tree("xeon-2s-dram", tmp_path)
    dram1 = Path(os.path.realpath(root / "sys/class/powercap/intel-rapl:1:0/energy_uj"))
    good = dram1.read_text()
    dram1.write_text("\n")
    io = SteppedIO()
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    await collector.open()
    assert collector.stats() == {"read_errors": 1, "wraps": 0}
    label = str(root / "sys/class/powercap/intel-rapl:1:0/energy_uj")
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "collectors.rapl"]
    assert (
        logging.WARNING,
        f"rapl: cannot read {label} ([Errno 5] not an unsigned 64-bit integer: '\\n'); "
        "no point for it until it reads again",
    ) in said
    dram1.write_text(good)
    await _first_tick_without_dram1(root, io, collector)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "collectors.rapl"]
    assert [m for lvl, m in said if lvl == logging.INFO] == [f"rapl: {label} reads again"]
    assert collector.stats() == {"read_errors": 1, "wraps": 0}


async def test_domains_filter(tmp_path: Path) -> None:
    points, _ = await run_powercap("xeon-2s-dram", tmp_path, RaplConfig(domains=["dram"]))
    assert {p.tags["domain"] for p in points} == {"dram"}
    assert len(points) == 6


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"\[collectors.rapl\] backend: 'rapl' is not one of"):
        RaplCollector(RaplConfig(backend="rapl"), context())
    with pytest.raises(ConfigError, match=r"domains: unknown \['gpu'\]"):
        RaplCollector(RaplConfig(domains=["package", "gpu"]), context())


async def test_vm_fixture_says_why_rapl_is_unavailable() -> None:
    root = FIXTURES / "vm-none" / "tree"
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == VM_MESSAGE.format(root=root)


async def test_empty_powercap_class_dir_is_no_zones(tmp_path: Path) -> None:
    (tmp_path / "sys/class/powercap").mkdir(parents=True)
    collector = RaplCollector(RaplConfig(root=str(tmp_path)), context())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == VM_MESSAGE.format(root=tmp_path)


def _machine_has_rapl() -> bool:
    return (
        any(Path("/sys/class/powercap").glob("intel-rapl*:*"))
        or any(Path("/dev/cpu").glob("*/msr"))
        or Path("/sys/bus/event_source/devices/power").is_dir()
    )


async def test_this_machine() -> None:
    """The real root: on a VM without RAPL the exact message; on a RAPL host real points."""
    collector = RaplCollector(RaplConfig(), context())
    if not _machine_has_rapl():
        with pytest.raises(NoData) as info:
            await collector.open()
        assert str(info.value) == VM_MESSAGE.format(root="")
        return
    try:
        await collector.open()
    except NoData as exc:  # a RAPL host where this user may not read it: must say how to fix
        assert "unavailable:" in str(exc)
        return
    points: list = []
    await collector.collect(points.append, 1)
    await collector.aclose()
    for p in points:
        assert p.fields["energy_joules"] >= 0.0
        assert p.fields["power_watts"] >= 0.0


async def test_non_root_gets_exact_guidance(tmp_path: Path) -> None:
    """Kernels since 5.10 make energy_uj 0400: reading it as a user fails with EACCES."""
    root = install_tree("laptop-psys-mmio", tmp_path)
    io = SteppedIO()
    io.fail = {"/energy_uj": errno.EACCES}
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == (
        "unavailable: powercap energy_uj is readable by root only, no MSR device, no power PMU\n"
        + permission_guidance(["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"])
    )


async def test_partly_readable_zones_run_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    io = SteppedIO()
    io.fail = {"intel-rapl:0:0/energy_uj": errno.EACCES, "intel-rapl:1:0/energy_uj": errno.EACCES}
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    await collector.open()
    assert collector.describe() == "powercap: package (socket 0), package (socket 1)"
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert messages == [
        "rapl: cannot read intel-rapl:0:0, intel-rapl:1:0; "
        + permission_guidance(["intel-rapl:0:0", "intel-rapl:1:0"])
    ]


async def test_explicit_backend_reports_only_its_own_reason(tmp_path: Path) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    collector = RaplCollector(RaplConfig(root=str(root), backend="msr"), context())
    with pytest.raises(NoData) as info:
        await collector.open()
    assert str(info.value) == "unavailable: no MSR device"


async def test_wrap_warning_when_the_interval_is_too_long(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    collector = RaplCollector(RaplConfig(root=str(root)), context(interval_s=120.0))
    await collector.open()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # DRAM (fixed 15.3 µJ): 65713 J wraps every 131 s at 500 W; packages: 524 s.
    assert len(messages) == 2
    assert "intel-rapl:0:0/energy_uj wraps every 131 s at 500 W (range 65713 J)" in messages[0]
    assert "poll at least every 66 s" in messages[0]
    assert "intel-rapl:1:0/energy_uj" in messages[1]
    caplog.clear()
    quiet = RaplCollector(RaplConfig(root=str(root)), context(interval_s=1.0))
    await quiet.open()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_duplicate_zone_names_are_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tpmi zone naming the same package as an intel-rapl zone would make a second series
    with the same tags: only the first is read, and a warning names both zones and the tags."""
    root = install_tree("xeon-2s-dram", tmp_path)
    devices = root / "sys/devices/virtual/powercap"
    shutil.copytree(
        devices / "intel-rapl/intel-rapl:0",
        devices / "intel-rapl-tpmi/intel-rapl-tpmi:0",
        ignore=shutil.ignore_patterns("intel-rapl:0:0"),
    )
    os.symlink(
        "../../devices/virtual/powercap/intel-rapl-tpmi/intel-rapl-tpmi:0",
        root / "sys/class/powercap/intel-rapl-tpmi:0",
    )
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    await collector.open()
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "rapl: powercap zone intel-rapl-tpmi:0 duplicates intel-rapl:0 "
        "({'domain': 'package', 'socket': '0'}); reading intel-rapl:0 only"
    ]


async def test_a_zone_linked_twice_ahead_of_others_leaves_them_read(tmp_path: Path) -> None:
    """Guards: a second link to a zone already read is passed over, not the end of the scan:
    a link ``intel-rapl:0:5`` to package 0's directory sorts before package 1, whose package
    and DRAM are still read."""
    root = install_tree("xeon-2s-dram", tmp_path)
    links = root / "sys/class/powercap"
    os.symlink(os.readlink(links / "intel-rapl:0"), links / "intel-rapl:0:5")
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    await collector.open()
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )


async def test_a_duplicate_zone_ahead_of_others_leaves_them_read(tmp_path: Path) -> None:
    """Guards: a zone whose tags another zone already has is passed over, not the end of the
    scan: a copy of package 0 as ``intel-rapl:0:5`` sorts before package 1, whose package and
    DRAM are still read."""
    root = install_tree("xeon-2s-dram", tmp_path)
    devices = root / "sys/devices/virtual/powercap/intel-rapl"
    shutil.copytree(
        devices / "intel-rapl:0",
        devices / "intel-rapl:0" / "intel-rapl:0:5",
        ignore=shutil.ignore_patterns("intel-rapl:0:*"),
    )
    os.symlink(
        "../../devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:5",
        root / "sys/class/powercap/intel-rapl:0:5",
    )
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    await collector.open()
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )


async def test_zones_are_read_in_the_numeric_order_of_their_hexadecimal_names(
    tmp_path: Path,
) -> None:
    """Guards: the kernel numbers zones in hexadecimal (``intel-rapl:a`` is the eleventh
    package); they are read 9, a, 10 (9, 10, 16), not in the text order 10, 9, a."""
    root = install_tree("xeon-2s-dram", tmp_path)
    devices = root / "sys/devices/virtual/powercap/intel-rapl"
    for number, socket in (("10", 16), ("a", 10), ("9", 9)):
        zone = devices / f"intel-rapl:{number}"
        shutil.copytree(
            devices / "intel-rapl:1", zone, ignore=shutil.ignore_patterns("intel-rapl:1:*")
        )
        (zone / "name").write_text(f"package-{socket}\n")
        os.symlink(
            f"../../devices/virtual/powercap/intel-rapl/intel-rapl:{number}",
            root / f"sys/class/powercap/intel-rapl:{number}",
        )
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    await collector.open()
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1),"
        " package (socket 9), package (socket 10), package (socket 16)"
    )


async def test_a_zone_linked_twice_is_read_once_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: two links in the class directory to one zone directory are one zone, read once
    and without a warning (it is not a duplicate of another zone, it is the same one)."""
    root = install_tree("xeon-2s-dram", tmp_path)
    links = root / "sys/class/powercap"
    os.symlink(os.readlink(links / "intel-rapl:0"), links / "intel-rapl-tpmi:0")
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    collector = RaplCollector(RaplConfig(root=str(root)), context())
    await collector.open()
    assert collector.describe() == (
        "powercap: package (socket 0), dram (socket 0), package (socket 1), dram (socket 1)"
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_default_reader_reads_the_real_files(tmp_path: Path) -> None:
    root = install_tree("amd-zen", tmp_path)
    io = RaplIO()
    zone = root / "sys/class/powercap/intel-rapl:0"
    assert io.read_text(str(zone / "name")) == "package-0\n"
    assert io.read_text(str(zone / "max_energy_range_uj")) == "65532610987\n"
    with pytest.raises(FileNotFoundError):
        io.read_text(str(zone / "power_uw"))  # RAPL has no instantaneous power


async def test_stats_survive_aclose_for_the_final_report(tmp_path: Path) -> None:
    # The agent emits the final nrg_collect point after closing its collectors.
    _, collector = await run_powercap("wrap", tmp_path)
    await collector.aclose()
    assert collector.stats() == {"read_errors": 0, "wraps": 2}
    _, failing = await run_powercap("read-failure", tmp_path / "b")
    await failing.aclose()
    assert failing.stats() == {"read_errors": 2, "wraps": 0}


async def test_zero_max_energy_range_means_the_32_bit_microjoule_wrap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Firmware that reports max_energy_range_uj = 0: the zone is read, wrapping at 2^32 µJ."""
    from collectors.rapl import MSG_RANGE_ZERO

    caplog.set_level(logging.INFO, logger="collectors.rapl")
    root = install_tree("xeon-2s-dram", tmp_path)
    zones = ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1", "intel-rapl:1:0")
    for zone in zones:
        real = Path(os.path.realpath(root / "sys/class/powercap" / zone))
        (real / "max_energy_range_uj").write_text("0\n")
        (real / "energy_uj").write_text("4294000000\n")  # 967296 µJ below 2^32
    io = SteppedIO()
    collector = RaplCollector(RaplConfig(root=str(root)), context(1.0), io=io)
    io.now = 1_000_000_000
    await collector.open()
    for zone in zones:
        real = Path(os.path.realpath(root / "sys/class/powercap" / zone))
        (real / "energy_uj").write_text("1000000\n")  # wrapped past 2^32
    io.now = 2_000_000_000
    points: list = []
    await collector.collect(points.append, 5)
    # 2^32 - 4294000000 + 1000000 = 967296 + 1000000 = 1967296 µJ in 1 s.
    assert [p.fields for p in points] == [{"energy_joules": 1.967296, "power_watts": 1.967296}] * 4
    assert collector.stats() == {"read_errors": 0, "wraps": 4}
    assert collector.describe().count("max_energy_range_uj reads 0: 32-bit µJ wrap assumed") == 4
    assert len([r for r in caplog.records if r.msg == MSG_RANGE_ZERO]) == 4


async def test_a_zone_that_cannot_be_described_is_skipped_and_the_zones_after_it_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: a zone whose ``max_energy_range_uj`` cannot be read at open (here socket 0's DRAM,
    the second of four zones) is skipped with a warning naming it, and every zone after it is
    still read: no package or DRAM energy of the other socket is lost with it."""
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    io = SteppedIO()
    io.fail = {"intel-rapl:0:0/max_energy_range_uj": errno.EIO}
    points, collector = await run_powercap("xeon-2s-dram", tmp_path, io=io)
    assert (
        collector.describe() == "powercap: package (socket 0), package (socket 1), dram (socket 1)"
    )
    first = {(p.tags["domain"], p.tags["socket"]): p.fields for p in points[:3]}
    assert first == {
        # 184799780118 - 184612530118 = 187250000 µJ over 1 s
        ("package", "0"): {"energy_joules": 187.25, "power_watts": 187.25},
        # 179146718744 - 179004218744 = 142500000 µJ
        ("package", "1"): {"energy_joules": 142.5, "power_watts": 142.5},
        # 38521012170 - 38501992170 = 19020000 µJ
        ("dram", "1"): {"energy_joules": 19.02, "power_watts": 19.02},
    }
    assert len(points) == 3 * 3  # three zones, three ticks
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "skipping powercap zone intel-rapl:0:0" in warnings[0]


async def test_a_subzone_whose_package_cannot_be_described_is_skipped_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: when a package zone cannot be described at open (socket 0's
    ``max_energy_range_uj`` unreadable), its DRAM subzone, which takes its socket from it, is
    skipped with a warning saying so, and the other socket's zones are read as before."""
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    io = SteppedIO()
    io.fail = {"intel-rapl:0/max_energy_range_uj": errno.EIO}
    points, collector = await run_powercap("xeon-2s-dram", tmp_path, io=io)
    assert collector.describe() == "powercap: package (socket 1), dram (socket 1)"
    first = {(p.tags["domain"], p.tags["socket"]): p.fields for p in points[:2]}
    assert first == {
        # 179146718744 - 179004218744 = 142500000 µJ over 1 s
        ("package", "1"): {"energy_joules": 142.5, "power_watts": 142.5},
        # 38521012170 - 38501992170 = 19020000 µJ
        ("dram", "1"): {"energy_joules": 19.02, "power_watts": 19.02},
    }
    assert len(points) == 2 * 3  # two zones, three ticks
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith("rapl: skipping powercap zone intel-rapl:0: ")
    assert warnings[1] == "rapl: skipping powercap zone intel-rapl:0:0 (dram): no parent package"
