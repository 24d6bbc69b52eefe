"""RAPL energy counters: CPU package, core, uncore (PP1), DRAM and platform (psys) energy.

Three backends, tried in this order (``backend = "auto"``):

- **powercap** sysfs: every zone and subzone of the ``intel-rapl`` (Intel, AMD, Hygon) and
  ``intel-rapl-tpmi`` control types under ``<root>/sys/class/powercap/``; ``intel-rapl-mmio`` is
  skipped (it duplicates package 0). Zones are identified by their ``name`` file (``package-N``,
  ``package-N-die-D``, ``core``, ``uncore``, ``dram``, ``psys``, ``psys-N``), never by index.
  ``name`` and ``max_energy_range_uj`` are read once, ``energy_uj`` (µJ) every tick. A range that
  reads 0 (some firmware) is taken as the 32-bit µJ wrap, and ``list`` says so.
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

Every system access goes through :class:`RaplIO`, the seam tests use to inject EACCES/EIO. The
self-stats (``wraps``, ``read_errors``) count for the agent's whole life: closing the collector
keeps them, so the final ``nrg_collect`` point still has them. Modules: :mod:`.parse` (pure),
:mod:`.sysio` (the seam), :mod:`.backends`, this one (config and collector).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from acquisition.advancing import WINDOW_S, Advance, busy_cpu_seconds, not_advancing
from acquisition.api import Emit, PluginContext
from acquisition.config import option
from acquisition.errors import ConfigError, NoData
from acquisition.point import Point

from .backends import (
    COUNTER_RANGE,
    MSG_RANGE_ZERO,
    Counter,
    Unavailable,
    open_msr,
    open_perf,
    open_powercap,
)
from .parse import (
    MAX_CPUS,
    CpuModel,
    ZoneName,
    counter_delta,
    energy_unit_exponent,
    parse_cpu_list,
    parse_cpuinfo,
    parse_perf_event,
    parse_uint,
    parse_zone_name,
    permission_guidance,
)
from .sysio import RaplIO

__all__ = [
    "BACKENDS",
    "COUNTER_RANGE",
    "MAX_CPUS",
    "MEASUREMENT",
    "MSG_RANGE_ZERO",
    "WHY_FIRMWARE",
    "WHY_PERF",
    "WHY_VM",
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
_DOMAIN_ORDER = {"package": 0, "core": 1, "uncore": 2, "dram": 3, "psys": 4}
_Counter = Counter  # the name tests use

WHY_VM = "a virtual machine: its hypervisor does not pass RAPL through"
WHY_PERF = "the perf power PMU counts nothing on this machine"
WHY_FIRMWARE = "the firmware does not update this counter"
PROBE_BURN_S = 0.05
"""``list``: CPU-seconds of work done between two probe readings, so that the rule can judge."""


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
        self._counters: list[Counter] = []
        self._fds: list[int] = []
        # Counts of counters closed or replaced: stats stay cumulative for the agent's life.
        self._closed_errors = 0
        self._closed_wraps = 0

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
            except Unavailable as exc:
                self._close_fds()
                reasons.append(exc.reason)
                guidance = guidance or exc.guidance
                continue
            if guidance:
                log.warning("rapl: using the %s backend; %s", backend, guidance)
            self.backend = backend
            self._retire_counters()
            self._counters = counters
            why = self._why_still(backend)
            for c in counters:
                c.advance = Advance("rapl", _where(c), why)
            self._warn_about_wraps()
            return
        message = "unavailable: " + ", ".join(reasons)
        raise NoData(message + ("\n" + guidance if guidance else ""))

    def _open_backend(self, backend: str) -> list[Counter]:
        if backend == "powercap":
            counters = open_powercap(self._root, self.io)
        elif backend == "msr":
            counters = open_msr(self._root, self.io, self._fds)
        else:
            counters = open_perf(self._root, self.io, self._fds)
        if self.config.domains:
            counters = [c for c in counters if c.tags["domain"] in self.config.domains]
            if not counters:
                raise Unavailable(f"{backend}: none of the domains {self.config.domains}")
        denied: list[Counter] = []
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
                raise Unavailable("powercap energy_uj is readable by root only", text)
            log.warning("rapl: cannot read %s; %s", ", ".join(zones), text)
            counters = [c for c in counters if c not in denied]
        elif denied and len(denied) == len(counters):
            raise Unavailable(f"{backend}: permission denied reading {denied[0].label}")
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

    def _why_still(self, backend: str) -> str:
        """The likely reason a counter of this backend would not move here."""
        try:
            cpuinfo = self.io.read_text(str(self._root / "proc/cpuinfo"))
        except OSError:
            cpuinfo = ""
        flags = next((ln for ln in cpuinfo.splitlines() if ln.startswith("flags")), "")
        if "hypervisor" in flags.split():
            return WHY_VM
        return WHY_PERF if backend == "perf" else WHY_FIRMWARE

    async def collect(self, emit: Emit, now_ns: int) -> None:
        # A handful of small sysfs reads (or preads): cheaper inline than through a thread.
        io = self.io
        work = self._work()
        for c in self._counters:
            fields = c.sample(io, work, now_ns)
            if fields is None:
                continue
            if c.still_ns is not None:  # its first move: it starts at its last still reading
                emit(Point(MEASUREMENT, c.tags, {"energy_joules": 0.0}, c.still_ns))
                c.still_ns = None
            emit(Point(MEASUREMENT, c.tags, fields, now_ns))

    def _work(self) -> float | None:
        """The machine's busy CPU-seconds while a counter has yet to prove that it moves."""
        for c in self._counters:
            if c.advance is not None and c.advance.pending:
                return busy_cpu_seconds(self._root)
        return None

    async def probe(self) -> str:
        """For ``list``: read until every counter moved or was judged not advancing (doing
        some CPU work between readings); NoData when none measures."""
        # The seam's clock, the one the rule's window is measured on (a fake clock drives both).
        deadline = self.io.monotonic_ns() + int(WINDOW_S * 2 * 1e9)
        while self.io.monotonic_ns() < deadline and any(
            c.advance is not None and c.advance.pending for c in self._counters
        ):
            _burn(PROBE_BURN_S)
            await asyncio.sleep(0)
            work = self._work()
            for c in self._counters:
                c.sample(self.io, work)
        reason = self.not_advancing()
        if reason is not None:
            raise NoData(reason)
        return self.describe()

    def not_advancing(self) -> str | None:
        """``not advancing: …`` when no counter of this collector measures; else None."""
        return not_advancing([c.advance for c in self._counters if c.advance is not None])

    async def aclose(self) -> None:
        """Close the descriptors; the counters (and their stats) stay for the final report."""
        self._close_fds()

    def _retire_counters(self) -> None:
        self._closed_errors += sum(c.errors for c in self._counters)
        self._closed_wraps += sum(c.wraps for c in self._counters)
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
            if c.assumed_range:
                where += ", max_energy_range_uj reads 0: 32-bit µJ wrap assumed"
            stuck = c.advance is not None and c.advance.reason() is not None
            parts.append(f"{c.tags['domain']} ({where})" + (" not advancing" if stuck else ""))
        return f"{self.backend}: " + ", ".join(parts)

    def stats(self) -> dict[str, float | int]:
        return {
            "read_errors": self._closed_errors + sum(c.errors for c in self._counters),
            "wraps": self._closed_wraps + sum(c.wraps for c in self._counters),
        }


def _where(c: Counter) -> str:
    """``psys (socket 0)``: a counter as the log names it."""
    where = f"socket {c.tags.get('socket', '?')}"
    if "die" in c.tags:
        where += f" die {c.tags['die']}"
    return f"{c.tags['domain']} ({where})"


def _burn(cpu_s: float) -> None:
    """Use ``cpu_s`` of this thread's CPU time (for ``list``'s probe: the rule needs work)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass
