"""RAPL energy counters: CPU package, core, uncore (PP1), DRAM and platform (psys) energy.

Three backends, tried in this order (``backend = "auto"``):

- **powercap** sysfs: every zone and subzone of the ``intel-rapl`` (Intel, AMD, Hygon) and
  ``intel-rapl-tpmi`` control types under ``<root>/sys/class/powercap/``; ``intel-rapl-mmio`` is
  skipped (it duplicates package 0). Zones are identified by their ``name`` file (``package-N``,
  ``package-N-die-D``, ``core``, ``uncore``, ``dram``, ``psys``, ``psys-N``), never by index.
  ``name`` and ``max_energy_range_uj`` are read once, ``energy_uj`` (µJ) every tick.
- **MSR**: ``<root>/dev/cpu/N/msr``, one CPU per package (``topology/physical_package_id``); the
  energy unit from ``MSR_RAPL_POWER_UNIT`` (Intel 0x606, AMD 0xC0010299) once per package, the
  32-bit energy status registers every tick (Intel package 0x611, PP0 0x639, PP1 0x641, DRAM 0x619,
  platform 0x64D; AMD package 0xC001029B, core 0xC001029A), with the fixed 15.3 µJ DRAM unit of
  the Haswell-X..Ice Lake-X server parts and the 1 J psys unit of Sapphire/Emerald Rapids.
- **perf** ``power`` PMU: ``<root>/sys/bus/event_source/devices/power/{type,cpumask,events/}``,
  one system-wide ``perf_event_open`` per event and package; 64-bit counts of 2^-32 J that never
  wrap. Not affected by the root-only ``energy_uj`` change.

Emits one ``rapl`` point per domain and tick, tagged ``socket``, ``domain`` (and ``die`` on
multi-die packages): ``energy_joules`` (cumulative since open, wraparound corrected) and
``power_watts`` (energy delta over the monotonic interval between the two reads). A read that
fails emits nothing for that domain on that tick: never a zero, never a fake wrap.

Every system access goes through :class:`RaplIO`, the seam tests use to inject EACCES/EIO.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import re
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import ClassVar, Literal

from acquisition.api import Emit, PluginContext
from acquisition.config import option
from acquisition.errors import ConfigError, NoData
from acquisition.point import Point

__all__ = [
    "BACKENDS",
    "MEASUREMENT",
    "CpuModel",
    "RaplCollector",
    "RaplConfig",
    "RaplIO",
    "ZoneName",
    "counter_delta",
    "energy_unit_exponent",
    "parse_cpu_list",
    "parse_cpuinfo",
    "parse_perf_event",
    "parse_uint",
    "parse_zone_name",
    "permission_guidance",
]

log = logging.getLogger(__name__)

MEASUREMENT = "rapl"
BACKENDS = ("auto", "powercap", "msr", "perf")

# powercap control types that carry RAPL zones; intel-rapl-mmio duplicates package 0 of intel-rapl.
_POWERCAP_TYPES = ("intel-rapl", "intel-rapl-tpmi")

# -- MSR addresses (Intel SDM vol. 3B §14.9, AMD PPR family 17h+) ----------------------------------
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
_COUNTER_RANGE = 1 << 32

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
_PERF_FLAG_FD_CLOEXEC = 8
_PERF_ATTR_SIZE_VER0 = 64
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "amd64": 298, "i386": 336, "i686": 336, "aarch64": 241}

_DOMAIN_ORDER = {"package": 0, "core": 1, "uncore": 2, "dram": 3, "psys": 4}

_ZONE_RE = re.compile(r"^package-(\d+)(?:-die-(\d+))?$")
_PSYS_RE = re.compile(r"^psys(?:-(\d+))?$")
_ZONE_DIR_RE = re.compile(r"^([a-z0-9-]+):([0-9a-f]+(?::[0-9a-f]+)*)$")
_EVENT_RE = re.compile(r"(?:^|,)event=(0x[0-9a-fA-F]+|\d+)(?:,|$)")


# -- pure parsing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZoneName:
    """What a powercap zone ``name`` says: its domain, and its socket/die when it names them."""

    domain: str
    socket: int | None = None
    die: int | None = None


def parse_zone_name(text: str) -> ZoneName:
    """``package-1`` → package of socket 1; ``package-0-die-1``; ``psys`` (socket 0) and ``psys-N``
    (the kernel names the platform domain of package N > 0 so); anything else (``core``,
    ``uncore``, ``dram``) is a subzone domain whose socket comes from its parent zone."""
    name = text.strip()
    if not name:
        raise ValueError("empty zone name")
    m = _ZONE_RE.match(name)
    if m:
        return ZoneName("package", int(m.group(1)), int(m.group(2)) if m.group(2) else None)
    m = _PSYS_RE.match(name)
    if m:
        return ZoneName("psys", int(m.group(1)) if m.group(1) else 0)
    return ZoneName(name)


def parse_uint(text: str) -> int:
    """A sysfs unsigned integer such as ``energy_uj``; ValueError for anything else."""
    s = text.strip()
    if not s.isdigit():
        raise ValueError(f"not an unsigned integer: {text!r}")
    return int(s)


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list (``0,18`` or ``0-3,8``) → sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(lo))
    return sorted(cpus)


def parse_perf_event(text: str) -> int:
    """The config value of a PMU event description such as ``event=0x02``."""
    m = _EVENT_RE.search(text.strip())
    if not m:
        raise ValueError(f"no event= term in {text!r}")
    return int(m.group(1), 0)


@dataclass(frozen=True, slots=True)
class CpuModel:
    """x86 vendor id string, family and model, as /proc/cpuinfo reports them."""

    vendor: str
    family: int
    model: int


def parse_cpuinfo(text: str) -> CpuModel:
    """Vendor, family and model of the first processor in ``/proc/cpuinfo``."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if found:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            found.setdefault(key.strip(), value.strip())
    try:
        return CpuModel(found["vendor_id"], int(found["cpu family"]), int(found["model"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"no vendor_id/cpu family/model in cpuinfo: {exc}") from exc


def energy_unit_exponent(power_unit_msr: int) -> int:
    """ESU of ``MSR_RAPL_POWER_UNIT``: the energy unit is 1/2^ESU J (bits 12:8)."""
    return (power_unit_msr >> 8) & 0x1F


def counter_delta(previous: int, current: int, modulus: int | None) -> tuple[int, bool]:
    """Increase of a counter between two reads and whether it wrapped.

    A counter that went down wrapped once (the poll period is kept under half a wrap); a
    counter without ``modulus`` never wraps, so going down is an error (ValueError)."""
    d = current - previous
    if d >= 0:
        return d, False
    if modulus is None:
        raise ValueError(f"counter went backwards from {previous} to {current}")
    return d + modulus, True


def permission_guidance(zones: Iterable[str]) -> str:
    """How to let a non-root agent read powercap ``energy_uj`` (zones: ``intel-rapl:0`` …)."""
    names = list(zones)
    conf = "\n".join(f"      mode class/powercap/{z}/energy_uj = 0444" for z in names)
    paths = " ".join(f"/sys/class/powercap/{z}/energy_uj" for z in names)
    return (
        "RAPL energy counters are readable by root only (Linux >= 5.10 and its stable backports "
        "made energy_uj mode 0400, CVE-2020-8694). As root, do one of:\n"
        "  1. udev rule (persistent): create /etc/udev/rules.d/99-nrg-rapl.rules containing\n"
        '      SUBSYSTEM=="powercap", ACTION=="add", KERNEL=="intel-rapl:*|intel-rapl-tpmi:*", '
        'RUN+="/bin/chgrp nrg /sys%p/energy_uj", RUN+="/bin/chmod g+r /sys%p/energy_uj"\n'
        "    then run: groupadd -f nrg && usermod -aG nrg $USER && udevadm control --reload-rules "
        "&& udevadm trigger --action=add --subsystem-match=powercap  (log in again for the group)\n"
        "  2. sysfsutils (persistent): add to /etc/sysfs.conf\n"
        f"{conf}\n"
        "    then run: systemctl restart sysfsutils\n"
        f"  3. until the next reboot: chmod a+r {paths}\n"
        "  4. in a container: grant access on the host (1 or 2), run the agent as root, and "
        "bind-mount the host's tree read-only: -v /sys/class/powercap:/host/sys/class/powercap:ro "
        "-v /sys/devices/virtual/powercap:/host/sys/devices/virtual/powercap:ro, with "
        'root = "/host" in [[collectors.rapl]]\n'
        "  or use the perf backend, which this change does not affect: "
        "sysctl kernel.perf_event_paranoid=0 (or give the agent CAP_PERFMON)."
    )


# -- the I/O seam ------------------------------------------------------------------------------


class RaplIO:
    """Every access the RAPL backends make to the machine; tests subclass it to inject errors.

    Methods raise ``OSError`` as the underlying calls do (EACCES, EIO, ENOENT...)."""

    def __init__(self) -> None:
        self._syscall: Callable[..., int] | None = None

    def read_text(self, path: str) -> str:
        """A whole (small) sysfs or procfs file."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 65536)
            # A sysfs attribute arrives in one read; only a big file (cpuinfo) needs more.
            if len(data) == 65536:
                chunks = [data]
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
                data = b"".join(chunks)
        finally:
            os.close(fd)
        return data.decode("ascii", "replace")

    def open_msr(self, path: str) -> int:
        """An fd for ``/dev/cpu/N/msr``."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def pread_msr(self, fd: int, address: int) -> int:
        """The 64-bit little-endian register at ``address``; EIO where the CPU has none."""
        data = os.pread(fd, 8, address)
        if len(data) != 8:
            raise OSError(errno.EIO, f"short read of MSR {address:#x}")
        return int.from_bytes(data, "little")

    def perf_event_open(self, pmu_type: int, config: int, cpu: int) -> int:
        """A system-wide (pid -1) counting event on ``cpu``; returns its fd."""
        if self._syscall is None:
            nr = _SYS_PERF_EVENT_OPEN.get(platform.machine().lower())
            if nr is None:
                raise OSError(errno.ENOSYS, f"perf_event_open: unknown arch {platform.machine()}")
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syscall
            fn.restype = ctypes.c_long
            self._syscall = lambda *args: int(fn(ctypes.c_long(nr), *args))
        attr = struct.pack(
            "<IIQQQQQIIQ", pmu_type, _PERF_ATTR_SIZE_VER0, config, 0, 0, 0, 0, 0, 0, 0
        )
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = self._syscall(
            buf,
            ctypes.c_int(-1),
            ctypes.c_int(cpu),
            ctypes.c_int(-1),
            ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC),
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(
                err,
                f"perf_event_open(type={pmu_type}, config={config:#x}, cpu={cpu}): "
                f"{os.strerror(err)}",
            )
        return fd

    def read_counter(self, fd: int) -> int:
        """The 64-bit count of a perf event fd."""
        data = os.read(fd, 8)
        if len(data) != 8:
            raise OSError(errno.EIO, "short read of a perf counter")
        return int.from_bytes(data, "little")

    def close(self, fd: int) -> None:
        os.close(fd)

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


# -- one energy counter ------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Counter:
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
    num: int = 0  # unit as an integer ratio, for exact arithmetic on the hot path
    den: int = 1

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

    def sample(self, io: RaplIO) -> dict[str, float] | None:
        """Read once; the fields to emit, or None (failed read, or this is the baseline)."""
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


class _Unavailable(Exception):
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


def _zone_key(entry: str) -> tuple[int, tuple[int, ...]]:
    m = _ZONE_DIR_RE.match(entry)
    assert m is not None
    return _POWERCAP_TYPES.index(m.group(1)), tuple(int(i, 16) for i in m.group(2).split(":"))


def _open_powercap(root: Path, io: RaplIO) -> list[_Counter]:
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
        raise _Unavailable("no powercap zones")

    counters: list[_Counter] = []
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
        if modulus <= 0:
            log.warning("rapl: skipping powercap zone %s: max_energy_range_uj is 0", zone)
            continue
        names[zone] = zname
        socket, die = zname.socket, zname.die
        if socket is None:
            parent = names.get(zone.rsplit(":", 1)[0])
            if parent is None or zone.count(":") < 2:
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
            _Counter(
                tags,
                str(class_dir / zone / "energy_uj"),
                read,
                Fraction(1, 10**6),
                modulus,
                zone=zone,
            )
        )
    if not counters:
        raise _Unavailable("no readable powercap zones")
    return counters


def _topology(root: Path, io: RaplIO, cpu: int, name: str) -> int:
    """``topology/<name>`` of one CPU (physical_package_id, die_id); ValueError/OSError."""
    return int(io.read_text(str(root / f"sys/devices/system/cpu/cpu{cpu}/topology/{name}")))


def _lead_cpus(root: Path, io: RaplIO, per_die: bool) -> dict[tuple[int, int], int]:
    """(package, die) → its lowest-numbered online CPU; die is 0 unless ``per_die``."""
    try:
        entries = os.listdir(root / "sys/devices/system/cpu")
    except OSError:
        return {}
    leads: dict[tuple[int, int], int] = {}
    for entry in entries:
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


def _open_msr(root: Path, io: RaplIO, fds: list[int]) -> list[_Counter]:
    msr_paths = sorted(root.glob("dev/cpu/*/msr"))
    if not msr_paths:
        raise _Unavailable("no MSR device")
    try:
        cpu = parse_cpuinfo(io.read_text(str(root / "proc/cpuinfo")))
    except (OSError, ValueError) as exc:
        raise _Unavailable(f"MSR: cannot identify the CPU ({exc})") from exc
    if cpu.vendor == "GenuineIntel":
        unit_msr, registers = MSR_INTEL_POWER_UNIT, _INTEL_ENERGY_MSRS
    elif cpu.vendor in ("AuthenticAMD", "HygonGenuine"):
        unit_msr, registers = MSR_AMD_POWER_UNIT, _AMD_ENERGY_MSRS
    else:
        raise _Unavailable(f"MSR: no RAPL registers known for {cpu.vendor}")
    # Intel's package counter is per die (Cascade Lake-AP has two per package); AMD's per package.
    leads = _lead_cpus(root, io, per_die=cpu.vendor == "GenuineIntel")
    if not leads:
        raise _Unavailable("MSR: no CPU topology under sys/devices/system/cpu")
    multi_die = len(leads) > len({pkg for pkg, _ in leads})
    intel = cpu.vendor == "GenuineIntel" and cpu.family == 6
    counters: list[_Counter] = []
    for (socket, die), lead in sorted(leads.items()):
        path = str(root / f"dev/cpu/{lead}/msr")
        try:
            fd = io.open_msr(path)
        except FileNotFoundError:
            raise _Unavailable(f"no MSR device for cpu{lead}") from None
        except PermissionError as exc:
            raise _Unavailable(
                f"MSR device not readable ({exc.strerror}: needs root with CAP_SYS_RAWIO)"
            ) from exc
        fds.append(fd)
        try:
            esu = energy_unit_exponent(io.pread_msr(fd, unit_msr))
        except OSError as exc:
            raise _Unavailable(
                f"MSR: no RAPL unit register {unit_msr:#x} ({exc.strerror or exc})"
            ) from exc
        for domain, address in registers:
            unit = Fraction(1, 1 << esu)
            if intel and domain == "dram" and cpu.model in _DRAM_FIXED_UNIT_MODELS:
                unit = _DRAM_FIXED_UNIT
            elif intel and domain == "psys" and cpu.model in _PSYS_1J_MODELS:
                unit = Fraction(1)
            pread = io.pread_msr

            def read(
                fd: int = fd, address: int = address, pread: Callable[[int, int], int] = pread
            ) -> int:
                return pread(fd, address) & _ENERGY_MASK

            try:
                probe = read()
            except OSError:
                continue  # no such register on this part
            if probe == 0:
                continue  # the kernel treats a zero counter as an absent domain; so do we
            label = f"{path} register {address:#x}"
            tags = _tags(socket, domain, die if multi_die else None)
            counters.append(_Counter(tags, label, read, unit, _COUNTER_RANGE))
    if not counters:
        raise _Unavailable("MSR: no RAPL energy counter reads non-zero")
    return counters


def _open_perf(root: Path, io: RaplIO, fds: list[int]) -> list[_Counter]:
    pmu = root / "sys/bus/event_source/devices/power"
    if not pmu.is_dir():
        raise _Unavailable("no power PMU")
    try:
        pmu_type = parse_uint(io.read_text(str(pmu / "type")))
        cpus = parse_cpu_list(io.read_text(str(pmu / "cpumask")))
        events = sorted(os.listdir(pmu / "events"))
    except (OSError, ValueError) as exc:
        raise _Unavailable(f"power PMU unreadable ({exc})") from exc
    counters: list[_Counter] = []
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
                raise _Unavailable(
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
            counters.append(_Counter(_tags(socket, domain), label, read, scale, None))
    if not counters:
        raise _Unavailable("power PMU has no usable energy events")
    return counters


# -- the collector -----------------------------------------------------------------------------


@dataclass
class RaplConfig:
    """``[[collectors.rapl]]``: where to read RAPL and how."""

    root: str = option("/", "directory holding sys/, dev/ and proc/ (/host in a container)")
    backend: Literal["auto", "powercap", "msr", "perf"] = option(
        "auto", "auto: powercap, else MSR, else the perf power PMU"
    )
    max_power_watts: float = option(
        500.0, "plausible peak power of one domain, for the warning about counter wraps"
    )
    domains: list[str] = field(
        default_factory=list,
        metadata={"doc": "only these of package, core, uncore, dram, psys (empty: all)"},
    )

    def validate(self) -> None:
        """Raise ValueError on a bad value (the core turns it into a ConfigError)."""
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: {self.backend!r} is not one of " + ", ".join(BACKENDS))
        unknown = sorted(set(self.domains) - set(_DOMAIN_ORDER))
        if unknown:
            raise ValueError(f"domains: unknown {unknown}; known: " + ", ".join(_DOMAIN_ORDER))
        if not self.max_power_watts > 0:
            raise ValueError(f"max_power_watts must be positive, got {self.max_power_watts}")


class RaplCollector:
    """Polls RAPL energy counters and emits ``rapl`` points."""

    name: ClassVar[str] = "rapl"
    config_class: ClassVar[type] = RaplConfig

    def __init__(
        self, config: RaplConfig | None, context: PluginContext, *, io: RaplIO | None = None
    ) -> None:
        self.config = config or RaplConfig()
        try:
            self.config.validate()
        except ValueError as exc:
            raise ConfigError(f"[collectors.rapl] {exc}") from exc
        self.context = context
        self.io = io or RaplIO()
        self.backend: str | None = None
        self._root = Path(self.config.root)
        self._counters: list[_Counter] = []
        self._fds: list[int] = []

    async def open(self) -> None:
        """Pick the first backend that works here; NoData with every reason when none does."""
        wanted = (
            ("powercap", "msr", "perf") if self.config.backend == "auto" else (self.config.backend,)
        )
        reasons: list[str] = []
        guidance: str | None = None
        for backend in wanted:
            try:
                counters = self._open_backend(backend)
            except _Unavailable as exc:
                self._close_fds()
                reasons.append(exc.reason)
                guidance = guidance or exc.guidance
                continue
            if guidance:
                log.warning("rapl: using the %s backend; %s", backend, guidance)
            self.backend = backend
            self._counters = counters
            self._warn_about_wraps()
            return
        message = "unavailable: " + ", ".join(reasons)
        raise NoData(message + ("\n" + guidance if guidance else ""))

    def _open_backend(self, backend: str) -> list[_Counter]:
        if backend == "powercap":
            counters = _open_powercap(self._root, self.io)
        elif backend == "msr":
            counters = _open_msr(self._root, self.io, self._fds)
        else:
            counters = _open_perf(self._root, self.io, self._fds)
        if self.config.domains:
            counters = [c for c in counters if c.tags["domain"] in self.config.domains]
            if not counters:
                raise _Unavailable(f"{backend}: none of the domains {self.config.domains}")
        denied: list[_Counter] = []
        for c in counters:
            err = c.first(self.io)
            if isinstance(err, PermissionError):
                denied.append(c)
            elif err is not None:
                # Not fatal: the zone is read again every tick and starts once it reads.
                c._failed(err)
        if denied and backend == "powercap":
            zones = [c.zone for c in denied]
            text = permission_guidance(zones)
            if len(denied) == len(counters):
                raise _Unavailable("powercap energy_uj is readable by root only", text)
            log.warning("rapl: cannot read %s; %s", ", ".join(zones), text)
            counters = [c for c in counters if c not in denied]
        elif denied and len(denied) == len(counters):
            raise _Unavailable(f"{backend}: permission denied reading {denied[0].label}")
        return counters

    def _warn_about_wraps(self) -> None:
        interval = self.context.interval_s
        for c in self._counters:
            if c.modulus is None:
                continue
            range_j = float(c.modulus * c.unit)
            wrap_s = range_j / self.config.max_power_watts
            if interval > wrap_s / 2:
                log.warning(
                    "rapl: %s wraps every %.0f s at %g W (range %.0f J); an interval of %g s "
                    "cannot tell one wrap from two: poll at least every %.0f s",
                    c.label,
                    wrap_s,
                    self.config.max_power_watts,
                    range_j,
                    interval,
                    wrap_s / 2,
                )

    async def collect(self, emit: Emit, now_ns: int) -> None:
        # A handful of small sysfs reads (or preads): cheaper inline than through a thread.
        io = self.io
        for c in self._counters:
            fields = c.sample(io)
            if fields is not None:
                emit(Point(MEASUREMENT, c.tags, fields, now_ns))

    async def aclose(self) -> None:
        self._close_fds()
        self._counters = []

    def _close_fds(self) -> None:
        while self._fds:
            fd = self._fds.pop()
            try:
                self.io.close(fd)
            except OSError:
                pass

    def describe(self) -> str:
        parts = []
        for c in self._counters:
            where = f"socket {c.tags.get('socket', '?')}"
            if "die" in c.tags:
                where += f" die {c.tags['die']}"
            parts.append(f"{c.tags['domain']} ({where})")
        return f"{self.backend}: " + ", ".join(parts)

    def stats(self) -> dict[str, float | int]:
        return {
            "read_errors": sum(c.errors for c in self._counters),
            "wraps": sum(c.wraps for c in self._counters),
        }
