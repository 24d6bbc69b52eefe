"""Pure parsing of what the RAPL backends read: zone names, sysfs integers, CPU lists, perf
event descriptions, ``/proc/cpuinfo``; the unit and wrap arithmetic; the permission guidance.

Every parser raises only ``ValueError`` on text it cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MAX_CPUS",
    "CpuModel",
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

MAX_CPUS = 8192
"""The kernel's largest ``CONFIG_NR_CPUS``: no CPU list names a CPU at or above it."""
MSG_CPU_LIST = "CPU list {text!r}: {why}"

_ZONE_RE = re.compile(r"^package-(\d+)(?:-die-(\d+))?$")
_PSYS_RE = re.compile(r"^psys(?:-(\d+))?$")
_ZONE_DIR_RE = re.compile(r"^([a-z0-9-]+):([0-9a-f]+(?::[0-9a-f]+)*)$")
_EVENT_RE = re.compile(r"(?:^|,)event=(0x[0-9a-fA-F]+|\d+)(?:,|$)")


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
    if not s.isascii() or not s.isdigit() or len(s) > 20:
        raise ValueError(f"not an unsigned 64-bit integer: {text[:80]!r}")
    value = int(s)
    if value >= 1 << 64:
        raise ValueError(f"not an unsigned 64-bit integer: {text[:80]!r}")
    return value


def parse_cpu_list(text: str, max_cpus: int = MAX_CPUS) -> list[int]:
    """A kernel CPU list (``0,18`` or ``0-3,8``) → sorted CPU numbers.

    ValueError for a CPU number at or above ``max_cpus`` (the machine's CPU count, at most
    :data:`MAX_CPUS`) or a range that runs backwards, so that time and memory stay bounded.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first = _cpu_number(lo, text, max_cpus)
        last = _cpu_number(hi, text, max_cpus) if sep else first
        if last < first:
            raise ValueError(
                MSG_CPU_LIST.format(text=text[:80], why=f"range {part} runs backwards")
            )
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def _cpu_number(token: str, text: str, max_cpus: int) -> int:
    token = token.strip()
    if not token.isascii() or not token.isdigit():
        raise ValueError(
            MSG_CPU_LIST.format(text=text[:80], why=f"{token[:20]!r} is not a CPU number")
        )
    value = int(token[:12])  # more digits than that is beyond any CPU count anyway
    if len(token) > 12 or value >= max_cpus:
        raise ValueError(
            MSG_CPU_LIST.format(
                text=text[:80], why=f"CPU {token[:20]} is beyond the {max_cpus} CPUs"
            )
        )
    return value


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
