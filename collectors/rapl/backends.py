"""The three RAPL backends (powercap sysfs, MSR, perf power PMU) and the counter they share.

Each ``open_*`` returns the domains it can read as :class:`Counter` objects, or raises
:class:`Unavailable` with the reason (and, for permissions, the guidance) for ``list`` and the log.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from acquisition.advancing import ADVANCING, Advance

from .parse import (
    _ZONE_DIR_RE,
    CpuModel,
    ZoneName,
    energy_unit_exponent,
    parse_cpu_list,
    parse_cpuinfo,
    parse_perf_event,
    parse_uint,
    parse_zone_name,
)
from .sysio import RaplIO

__all__ = [
    "COUNTER_RANGE",
    "NO_ZONES",
    "Counter",
    "Unavailable",
    "open_msr",
    "open_perf",
    "open_powercap",
]

log = logging.getLogger("collectors.rapl")

NO_ZONES = "no powercap zones in {where}"
"""The powercap backend's reason when the class directory lists no RAPL zone (or is absent)."""
MSG_RANGE_ZERO = "rapl: powercap zone %s: max_energy_range_uj reads 0; assuming it wraps at %d µJ"

# powercap control types that carry RAPL zones; intel-rapl-mmio duplicates package 0 of intel-rapl.
_POWERCAP_TYPES = ("intel-rapl", "intel-rapl-tpmi")
# -- MSR addresses (Intel SDM vol. 3B section 14.9, AMD PPR family 17h+) ----------------------------------
MSR_INTEL_POWER_UNIT = 0x606
MSR_AMD_POWER_UNIT = 0xC0010299
_INTEL_ENERGY_MSRS: tuple[tuple[str, int], ...] = (
    ("package", 0x611),
    ("core", 0x639),  # PP0
    ("uncore", 0x641),  # PP1, the client GPU; powercap calls it "uncore"
    ("dram", 0x619),
    ("psys", 0x64D),  # MSR_PLATFORM_ENERGY_STATUS
)
_AMD_ENERGY_MSRS: tuple[tuple[str, int], ...] = (
    ("package", 0xC001029B),
    ("core", 0xC001029A),  # per core: this reads the core of the CPU we picked, as powercap does
)
_ENERGY_MASK = 0xFFFF_FFFF
COUNTER_RANGE = 1 << 32

# Intel family-6 models whose DRAM domain ignores the unit register: 15.3 µJ fixed (the value the
# powercap driver uses; perf uses 2^-16 J, 0.27 % less). Haswell-X, Broadwell-X, Broadwell-D,
# Skylake-X (Cascade/Cooper Lake), Ice Lake-X, Ice Lake-D, Xeon Phi KNL and KNM.
_DRAM_FIXED_UNIT_MODELS = frozenset({0x3F, 0x4F, 0x56, 0x55, 0x6A, 0x6C, 0x57, 0x85})
_DRAM_FIXED_UNIT = Fraction(15300, 10**9)
# Sapphire Rapids and Emerald Rapids count psys in whole joules.
_PSYS_1J_MODELS = frozenset({0x8F, 0xCF})

# -- perf power PMU ----------------------------------------------------------------------------
_PERF_EVENT_DOMAINS = {
    "energy-pkg": "package",
    "energy-cores": "core",
    "energy-gpu": "uncore",
    "energy-ram": "dram",
    "energy-psys": "psys",
}

# -- one energy counter ------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Counter:
    """One domain's raw counter and what it has accumulated since open."""

    tags: dict[str, str]
    label: str  # the file or register, for messages
    read: Callable[[], int]  # raw ticks; raises OSError or ValueError
    unit: Fraction  # joules per tick
    modulus: int | None  # ticks at which the raw value wraps to 0; None: never
    last_raw: int | None = None
    last_ns: int = 0
    total: int = 0  # ticks since open
    wraps: int = 0
    errors: int = 0
    failing: bool = False
    zone: str = ""  # powercap zone id, for the permission message
    assumed_range: bool = False  # max_energy_range_uj read 0: the 32-bit µJ wrap is assumed
    num: int = field(init=False)  # unit as an integer ratio, for exact arithmetic on the hot path
    den: int = field(init=False)
    advance: Advance | None = None  # the proof that it measures (None: not checked)
    still_ns: int | None = None  # its last still reading's stamp, until its first move

    def __post_init__(self) -> None:
        self.num, self.den = self.unit.numerator, self.unit.denominator

    def first(self, io: RaplIO) -> OSError | None:
        """Baseline read at open; returns the error instead of raising."""
        try:
            raw = self.read()
        except OSError as exc:
            return exc
        except ValueError as exc:
            return OSError(errno.EIO, str(exc))
        self.last_raw, self.last_ns = raw, io.monotonic_ns()
        return None

    def sample(
        self, io: RaplIO, work_s: float | None = None, stamp_ns: int | None = None
    ) -> dict[str, float] | None:
        """Read once; the fields to emit, or None (failed read, the baseline, or a counter that
        has not moved since open: see :mod:`acquisition.advancing`). ``work_s``: the machine's
        busy CPU-seconds so far, for that check; ``stamp_ns``: this reading's point time, kept
        in :attr:`still_ns` while the counter has not moved: the collector writes 0 J there
        with its first move, so that its series starts at its last still reading."""
        try:
            raw = self.read()
        except (OSError, ValueError) as exc:
            self._failed(exc)
            return None
        now = io.monotonic_ns()
        if self.failing:
            self.failing = False
            log.info("rapl: %s reads again", self.label)
        prev = self.last_raw
        if prev is None:
            self.last_raw, self.last_ns = raw, now
            return None
        d = raw - prev
        if d < 0:  # counter_delta, inlined: this is the per-tick path
            if self.modulus is None:
                # A 64-bit perf count going down means the event was reset: start from here.
                self.last_raw, self.last_ns = raw, now
                self._failed(ValueError(f"counter went backwards from {prev} to {raw}"))
                return None
            d += self.modulus
            self.wraps += 1
        self.total += d
        dt = now - self.last_ns
        self.last_raw, self.last_ns = raw, now
        watch = self.advance
        if (
            watch is not None
            and watch.state != ADVANCING
            and not watch.observe(d != 0, now, work_s)
        ):
            self.still_ns = stamp_ns
            return None
        # Exact integer ratios, rounded once: the fixture tests compare exact values.
        if dt > 0:
            return {
                "energy_joules": (self.total * self.num) / self.den,
                "power_watts": (d * self.num * 1_000_000_000) / (self.den * dt),
            }
        return {"energy_joules": (self.total * self.num) / self.den}

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        if not self.failing:
            self.failing = True
            log.warning(
                "rapl: cannot read %s (%s); no point for it until it reads again", self.label, exc
            )


# -- backends ----------------------------------------------------------------------------------


class Unavailable(Exception):
    """A backend cannot run here; ``reason`` goes into the NoData message."""

    def __init__(self, reason: str, guidance: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.guidance = guidance


def _tags(socket: int | None, domain: str, die: int | None = None) -> dict[str, str]:
    tags = {"domain": domain}
    if socket is not None:
        tags["socket"] = str(socket)
    if die is not None:
        tags["die"] = str(die)
    return tags


def _zone_key(entry: str) -> tuple[int, tuple[tuple[int, str], ...]]:
    """Zones in their numeric order: the kernel names them in hexadecimal without leading
    zeros (``intel-rapl:0:a`` after ``intel-rapl:0:9``), so a shorter number comes first."""
    m = _ZONE_DIR_RE.match(entry)
    assert m is not None
    return _POWERCAP_TYPES.index(m.group(1)), tuple((len(i), i) for i in m.group(2).split(":"))


def open_powercap(root: Path, io: RaplIO) -> list[Counter]:
    class_dir = root / "sys/class/powercap"
    try:
        entries = os.listdir(class_dir)
    except OSError:
        entries = []
    zones = []
    for entry in entries:
        m = _ZONE_DIR_RE.match(entry)
        if m and m.group(1) in _POWERCAP_TYPES:
            zones.append(entry)
    zones.sort(key=_zone_key)
    if not zones:
        raise Unavailable(NO_ZONES.format(where=class_dir))

    counters: list[Counter] = []
    seen_dirs: set[str] = set()
    seen_tags: dict[tuple[tuple[str, str], ...], str] = {}
    names: dict[str, ZoneName] = {}
    for zone in zones:
        # The class directory lists every zone and subzone flat; several links may lead to one
        # zone directory, so count each real directory once.
        real = os.path.realpath(class_dir / zone)
        if real in seen_dirs:
            continue
        seen_dirs.add(real)
        try:
            zname = parse_zone_name(io.read_text(os.path.join(real, "name")))
            modulus = parse_uint(io.read_text(os.path.join(real, "max_energy_range_uj")))
        except (OSError, ValueError) as exc:
            log.warning("rapl: skipping powercap zone %s: %s", zone, exc)
            continue
        assumed = modulus <= 0
        if assumed:
            # Some firmware reports a range of 0; energy_uj is then a 32-bit µJ counter.
            log.info(MSG_RANGE_ZERO, zone, COUNTER_RANGE)
            modulus = COUNTER_RANGE
        names[zone] = zname
        socket, die = zname.socket, zname.die
        if socket is None:
            parent = names.get(zone.rsplit(":", 1)[0])  # a top-level zone has none
            if parent is None:
                log.warning(
                    "rapl: skipping powercap zone %s (%s): no parent package", zone, zname.domain
                )
                continue
            socket, die = parent.socket, parent.die
        tags = _tags(socket, zname.domain, die)
        key = tuple(sorted(tags.items()))
        if key in seen_tags:
            log.warning(
                "rapl: powercap zone %s duplicates %s (%s); reading %s only",
                zone,
                seen_tags[key],
                tags,
                seen_tags[key],
            )
            continue
        seen_tags[key] = zone
        path = os.path.join(real, "energy_uj")
        read_text = io.read_text

        def read(path: str = path, read_text: Callable[[str], str] = read_text) -> int:
            return parse_uint(read_text(path))

        counters.append(
            Counter(
                tags,
                str(class_dir / zone / "energy_uj"),
                read,
                Fraction(1, 10**6),
                modulus,
                zone=zone,
                assumed_range=assumed,
            )
        )
    if not counters:
        raise Unavailable("no readable powercap zones")
    return counters


def _topology(root: Path, io: RaplIO, cpu: int, name: str) -> int:
    """``topology/<name>`` of one CPU (physical_package_id, die_id); ValueError/OSError."""
    return int(io.read_text(str(root / f"sys/devices/system/cpu/cpu{cpu}/topology/{name}")))


def _lead_cpus(root: Path, io: RaplIO, per_die: bool) -> dict[tuple[int, int], int]:
    """(package, die) → its lowest-numbered online CPU; die is 0 unless ``per_die``."""
    try:
        entries = os.listdir(root / "sys/devices/system/cpu")
    except OSError:
        entries = []
    leads: dict[tuple[int, int], int] = {}
    for entry in sorted(entries):  # the same CPUs met in the same order on every start
        if not (entry.startswith("cpu") and entry[3:].isdigit()):
            continue
        cpu = int(entry[3:])
        try:
            pkg = _topology(root, io, cpu, "physical_package_id")
        except (OSError, ValueError):
            continue  # offline CPUs have no topology
        die = 0
        if per_die:
            try:
                die = _topology(root, io, cpu, "die_id")
            except (OSError, ValueError):
                pass  # kernels before 5.2 have no die_id: one die per package
        key = (pkg, die)
        if key not in leads or cpu < leads[key]:
            leads[key] = cpu
    return leads


def open_msr(root: Path, io: RaplIO, fds: list[int]) -> list[Counter]:
    msr_paths = sorted(root.glob("dev/cpu/*/msr"))
    if not msr_paths:
        raise Unavailable("no MSR device")
    try:
        cpu = parse_cpuinfo(io.read_text(str(root / "proc/cpuinfo")))
    except (OSError, ValueError) as exc:
        raise Unavailable(f"MSR: cannot identify the CPU ({exc})") from exc
    if cpu.vendor == "GenuineIntel":
        unit_msr, registers = MSR_INTEL_POWER_UNIT, _INTEL_ENERGY_MSRS
    elif cpu.vendor in ("AuthenticAMD", "HygonGenuine"):
        unit_msr, registers = MSR_AMD_POWER_UNIT, _AMD_ENERGY_MSRS
    else:
        raise Unavailable(f"MSR: no RAPL registers known for {cpu.vendor}")
    # Intel's package counter is per die (Cascade Lake-AP has two per package); AMD's per package.
    leads = _lead_cpus(root, io, per_die=cpu.vendor == "GenuineIntel")
    if not leads:
        raise Unavailable("MSR: no CPU topology under sys/devices/system/cpu")
    multi_die = len(leads) > len({pkg for pkg, _ in leads})
    counters: list[Counter] = []
    for (socket, die), lead in sorted(leads.items()):
        path = str(root / f"dev/cpu/{lead}/msr")
        fd = _open_msr_device(io, path, lead)
        fds.append(fd)
        try:
            esu = energy_unit_exponent(io.pread_msr(fd, unit_msr))
        except OSError as exc:
            raise Unavailable(
                f"MSR: no RAPL unit register {unit_msr:#x} ({exc.strerror or exc})"
            ) from exc
        for domain, address in registers:
            read = _msr_reader(io, fd, address)
            try:
                probe = read()
            except OSError:
                continue  # no such register on this part
            if probe == 0:
                continue  # the kernel treats a zero counter as an absent domain; so do we
            label = f"{path} register {address:#x}"
            tags = _tags(socket, domain, die if multi_die else None)
            unit = _msr_unit(cpu, domain, esu)
            counters.append(Counter(tags, label, read, unit, COUNTER_RANGE))
    if not counters:
        raise Unavailable("MSR: no RAPL energy counter reads non-zero")
    return counters


def _open_msr_device(io: RaplIO, path: str, cpu: int) -> int:
    try:
        return io.open_msr(path)
    except FileNotFoundError:
        raise Unavailable(f"no MSR device for cpu{cpu}") from None
    except PermissionError as exc:
        raise Unavailable(
            f"MSR device not readable ({exc.strerror}: needs root with CAP_SYS_RAWIO)"
        ) from exc


def _msr_reader(io: RaplIO, fd: int, address: int) -> Callable[[], int]:
    pread = io.pread_msr

    def read() -> int:
        return pread(fd, address) & _ENERGY_MASK

    return read


def _msr_unit(cpu: CpuModel, domain: str, esu: int) -> Fraction:
    """Joules per count of one domain: 1/2^ESU, except the fixed DRAM and psys units."""
    intel = cpu.vendor == "GenuineIntel" and cpu.family == 6
    if intel and domain == "dram" and cpu.model in _DRAM_FIXED_UNIT_MODELS:
        return _DRAM_FIXED_UNIT
    if intel and domain == "psys" and cpu.model in _PSYS_1J_MODELS:
        return Fraction(1)
    return Fraction(1, 1 << esu)


def open_perf(root: Path, io: RaplIO, fds: list[int]) -> list[Counter]:
    pmu = root / "sys/bus/event_source/devices/power"
    if not pmu.is_dir():
        raise Unavailable("no power PMU")
    try:
        pmu_type = parse_uint(io.read_text(str(pmu / "type")))
        cpus = parse_cpu_list(io.read_text(str(pmu / "cpumask")))
        events = sorted(os.listdir(pmu / "events"))
    except (OSError, ValueError) as exc:
        raise Unavailable(f"power PMU unreadable ({exc})") from exc
    counters: list[Counter] = []
    for event in events:
        domain = _PERF_EVENT_DOMAINS.get(event)
        if domain is None:
            continue
        try:
            config = parse_perf_event(io.read_text(str(pmu / "events" / event)))
            scale_path = pmu / "events" / f"{event}.scale"
            scale = Fraction(io.read_text(str(scale_path)).strip())
        except (OSError, ValueError) as exc:
            log.warning("rapl: skipping perf event %s: %s", event, exc)
            continue
        for index, cpu in enumerate(cpus):
            try:
                socket = _topology(root, io, cpu, "physical_package_id")
            except (OSError, ValueError):
                socket = index  # cpumask names one CPU per package, in package order
            try:
                fd = io.perf_event_open(pmu_type, config, cpu)
            except PermissionError as exc:
                raise Unavailable(
                    "power PMU not permitted (perf_event_paranoid must be <= 0, or "
                    f"CAP_PERFMON: {exc.strerror})"
                ) from exc
            except OSError as exc:
                log.warning("rapl: perf event %s on cpu%d: %s", event, cpu, exc)
                continue
            fds.append(fd)
            read_counter = io.read_counter

            def read(fd: int = fd, read_counter: Callable[[int], int] = read_counter) -> int:
                return read_counter(fd)

            label = f"perf power/{event}/ on cpu{cpu}"
            counters.append(Counter(_tags(socket, domain), label, read, scale, None))
    if not counters:
        raise Unavailable("power PMU has no usable energy events")
    return counters
