"""Which energy sources a run has, why one is missing and how to fix it, and the power and energy
so far per source for the live line.

Energy sources are the collectors ``rapl`` (CPU package and DRAM, from powercap sysfs, MSR or
perf), ``nvml`` (NVIDIA GPUs) and ``emonpi`` (a wall meter on a serial port). Their points carry
cumulative ``energy*_joules`` (since the collector opened) and ``power*_watts``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from acquisition.errors import install_hint
from acquisition.forecast import forecast_status
from acquisition.point import Point

__all__ = [
    "ENERGY_COLLECTORS",
    "FIX_EMONPI",
    "FIX_EMONPI_PORT",
    "FIX_EMONPI_ZEROS",
    "FIX_NVML",
    "FIX_RAPL_ABSENT",
    "FIX_RAPL_PERMISSION",
    "FIX_RAPL_STUCK",
    "NOT_CONFIGURED",
    "NO_ENERGY",
    "NO_ENERGY_STILL",
    "EnergyTotals",
    "energy_problems",
    "no_energy_message",
    "no_energy_still",
    "say_when_still",
]

ENERGY_COLLECTORS = ("rapl", "nvml", "emonpi")
"""Collectors that measure energy; a run with none of them open measures no energy."""

NO_ENERGY = (
    "nrg: no energy source is readable here; this run records time and resources, no joules."
)
NO_ENERGY_STILL = (
    "nrg: no energy source measures here: every energy counter stands still, so this run records "
    "time and resources, no joules."
)
FIX_RAPL_PERMISSION = (
    "RAPL counters are readable by root only (Linux 5.10 and later). Grant read access with a "
    "udev rule, e.g. /etc/udev/rules.d/99-nrg-rapl.rules containing\n"
    '      SUBSYSTEM=="powercap", ACTION=="add", RUN+="/bin/chmod o+r %S%p/energy_uj"\n'
    "    or until the next reboot: sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj "
    "/sys/class/powercap/intel-rapl:*:*/energy_uj ; or run the agent as root"
)
FIX_RAPL_ABSENT = (
    "this machine exposes no RAPL counters (a virtual machine, a container without /sys, or a "
    "CPU without RAPL): run on the host, or add a wall meter ([[collectors.emonpi]])"
)
FIX_NVML = (
    "no NVIDIA GPU is readable: install the NVIDIA driver (it provides libnvidia-ml.so.1) and "
    f"{install_hint('nvml')}"
)
FIX_EMONPI = (
    "no wall meter: connect an emonPi and set its port in [[collectors.emonpi]] "
    'port = "/dev/ttyUSB0"'
)


FIX_RAPL_STUCK = (
    "run on the host (bare metal, or a cloud instance that passes RAPL through), or add a wall "
    "meter ([[collectors.emonpi]])"
)
FIX_EMONPI_PORT = "check the emonPi's cable and its port in [[collectors.emonpi]] port"
FIX_EMONPI_ZEROS = "put the emonPi's CT clamp on the supply cable of this machine"
NOT_CONFIGURED = "not configured"
STILL_CHECK_S = 0.5
"""How often a run whose energy collectors opened looks whether all of them stand still."""


def _fix(name: str, reason: str) -> tuple[int, str]:
    """(rank, fix) of one source: rank 0 is what a user fixes with a command, the highest what
    needs hardware this machine does not have. The fix is empty where the reason already says
    how (RAPL's permission guidance)."""
    lowered = reason.lower()
    if name == "rapl":
        if "udev" in lowered:
            return 0, ""
        if "permission" in lowered or "root only" in lowered:
            return 0, FIX_RAPL_PERMISSION
        return 2, FIX_RAPL_STUCK if lowered.startswith("not advancing") else FIX_RAPL_ABSENT
    if name == "emonpi":
        if lowered.startswith("not advancing"):
            return 1, FIX_EMONPI_ZEROS
        if reason == NOT_CONFIGURED or "no serial port configured" in lowered:
            return 3, FIX_EMONPI
        return 1, FIX_EMONPI_PORT
    if name == "nvml":
        return 4, FIX_NVML
    return 5, ""


def energy_problems(unavailable: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(source, why it measures nothing, the fix that applies) for every energy collector, the
    ones a user can fix first; a collector absent from ``unavailable`` is not configured."""
    reasons: dict[str, str] = {}
    for label, reason in unavailable:
        reasons.setdefault(label.split("-")[0], reason)
    rows = []
    for name in ENERGY_COLLECTORS:
        reason = reasons.get(name, NOT_CONFIGURED).strip()
        rank, fix = _fix(name, reason)
        rows.append((rank, name, reason, fix))
    return [(name, reason, fix) for _, name, reason, fix in sorted(rows)]


def no_energy_message(open_labels: Iterable[str], unavailable: Iterable[tuple[str, str]]) -> str:
    """Empty when an energy collector is open; else NO_ENERGY with, per energy collector (the
    ones a user can fix first), why it is unavailable here and what to do."""
    if any(label.split("-")[0] in ENERGY_COLLECTORS for label in open_labels):
        return ""
    return _with_problems(NO_ENERGY, unavailable)


def no_energy_still(open_labels: Iterable[str], unavailable: Iterable[tuple[str, str]]) -> str:
    """NO_ENERGY_STILL with every source's reason and fix (as :func:`no_energy_message`) once
    every open energy collector is judged not advancing (``unavailable`` has its ``not
    advancing: …`` reason); empty while one measures or may still (or none is open)."""
    rows = list(unavailable)
    still = {label for label, reason in rows if reason.strip().startswith("not advancing")}
    energy = [label for label in open_labels if label.split("-")[0] in ENERGY_COLLECTORS]
    if not energy or any(label not in still for label in energy):
        return ""
    return _with_problems(NO_ENERGY_STILL, rows)


async def say_when_still(
    open_labels: Iterable[str],
    unavailable: Callable[[], Iterable[tuple[str, str]]],
    say: Callable[[str], None],
) -> None:
    """Say :func:`no_energy_still` once, as soon as every open energy collector is judged not
    advancing (``unavailable()``: the agent's reasons so far); runs until cancelled."""
    labels = list(open_labels)
    while True:
        await asyncio.sleep(STILL_CHECK_S)
        message = no_energy_still(labels, unavailable())
        if message:
            say(message)
            return


def _with_problems(sentence: str, unavailable: Iterable[tuple[str, str]]) -> str:
    lines = [sentence]
    for name, reason, fix in energy_problems(unavailable):
        lines.append(f"  {name}: {reason}")
        if fix:
            lines.append(f"    fix: {fix}")
    return "\n".join(lines)


@dataclass
class _Reading:
    power_w: float | None = None
    energy_j: float | None = None


class EnergyTotals:
    """Power now and energy so far per source, fed every point (a bus sink)."""

    def __init__(self) -> None:
        self.sources: dict[str, _Reading] = {}
        self.forecast = ""
        """The latest run forecast, as the live line shows it (empty before the first)."""

    def offer(self, point: Point) -> None:
        m = point.measurement
        if m != "rapl" and m != "gpu" and m != "emonpi":
            if m == "nrg_forecast" and point.tags.get("source") == "total":
                self.forecast = forecast_status(point.fields)
            return
        tags = point.tags
        if m == "rapl":
            where = tags.get("socket")
            name = f"{tags.get('domain', '?')}" + (f"-{where}" if where is not None else "")
        elif m == "gpu":
            name = f"gpu{tags.get('gpu', '?')}"
        else:
            name = f"wall:{tags.get('node', '?')}"
        reading = self.sources.setdefault(name, _Reading())
        for key, value in point.fields.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if key.startswith("energy") and key.endswith("_joules"):
                reading.energy_j = float(value)
                break
        for key, value in point.fields.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if key.startswith("power") and key.endswith("_watts"):
                reading.power_w = float(value)
                break

    def summary(self) -> str:
        """``package-0 35.2 W 1.2 kJ · gpu0 250 W 12.0 kJ`` (empty without sources)."""
        parts = []
        for name, r in sorted(self.sources.items()):
            power = f"{r.power_w:.1f} W" if r.power_w is not None else "– W"
            parts.append(f"{name} {power} {_joules(r.energy_j)}")
        if parts and self.forecast:
            parts.append(self.forecast)
        return " · ".join(parts)


def _joules(value: float | None) -> str:
    if value is None:
        return "– J"
    for scale, unit in ((1e6, "MJ"), (1e3, "kJ")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.1f} J"
