"""Per-process CPU and DRAM power: RAPL power shared out by each tracked tree's CPU and memory share.

A bus processor (AIPowerMeter's ``per_process_cpu_power`` / ``per_process_dram_power`` model). It
keeps the latest ``power_watts`` of every ``rapl`` series (tags ``socket``, ``die``, ``domain``)
and, for each ``process`` point of a tracked tree (tags ``tree``, ``scope``; scopes ``main``,
``descendants``, ``combined`` by default), emits a ``process_power`` point with the same tags:

- ``cpu_power_watts`` = ``cpu_busy_share_ratio`` × Σ package power over all sockets (W), the
  tree's share of all busy CPU time in the procfs interval times the machine's CPU power;
- ``dram_power_watts`` = ``memory_used_share_ratio`` × Σ DRAM power (W), its share of used memory
  (RSS ÷ (MemTotal − MemAvailable)) times the DRAM power;
- ``cpu_energy_joules`` / ``dram_energy_joules``: those powers integrated over the time between
  the series' successive process points (J, cumulative since the processor first saw the series).

A RAPL series contributes while its latest power is at most ``max_age`` older (or newer) than
the process point; a field whose inputs are missing is left out, and the interval it covers
adds no energy. Until a RAPL point with ``power_watts`` has been seen (none on a VM) process points
are passed over at once, and a series starts at its first process point after that. Per-process
points (``scope=pid``, tags ``pid`` and ``comm``, one series per process) are opt-in through
``scopes``. The model's limits (idle and uncore power given to busy processes, SMT, VMs, shared
caches) are in docs/model/process-power.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.errors import ConfigError
from acquisition.point import FieldValue, Point

__all__ = [
    "MEASUREMENT",
    "PowerTable",
    "ProcessPowerConfig",
    "ProcessPowerShare",
]

MEASUREMENT = "process_power"
_RAPL = "rapl"
_PROCESS = "process"
_PRUNE_EVERY = 1024


class PowerTable:
    """Latest ``power_watts`` of each RAPL series, by domain; sums the ones recent enough.

    Reusable by other processors (energy attribution) that need "the machine's package power
    around time t"."""

    def __init__(self, domains: tuple[str, ...], max_age_ns: int) -> None:
        self.max_age_ns = max_age_ns
        self.seen = False
        """True once any series of our domains has carried power."""
        self._latest: dict[str, dict[tuple[str, str], tuple[float, int]]] = {d: {} for d in domains}

    def update(self, point: Point) -> bool:
        """Take a ``rapl`` point; True when it was one of our domains and carried power."""
        series = self._latest.get(point.tags.get("domain", ""))
        if series is None:
            return False
        watts = point.fields.get("power_watts")
        if type(watts) is not float and type(watts) is not int:
            return False
        key = (point.tags.get("socket", ""), point.tags.get("die", ""))
        series[key] = (float(watts), point.time_ns)
        self.seen = True
        return True

    def total(self, domain: str, time_ns: int) -> float | None:
        """Σ watts of the domain's series within ``max_age`` of ``time_ns``; None if none is."""
        series = self._latest.get(domain)
        if not series:
            return None
        total = 0.0
        found = False
        limit = self.max_age_ns
        for watts, at in series.values():
            if -limit <= time_ns - at <= limit:
                total += watts
                found = True
        return total if found else None


_VALID_SCOPES = ("main", "descendants", "combined", "pid")


@dataclass
class ProcessPowerConfig:
    """``[[processors.process_power]]``: which RAPL domains to share out, and by what."""

    cpu_domain: Literal["package", "core", "psys"] = option(
        "package", "RAPL domain shared out by CPU time (package = cores + uncore)"
    )
    dram_domain: str = option("dram", "RAPL domain shared out by memory use")
    scopes: list[str] = field(
        default_factory=lambda: ["main", "descendants", "combined"],
        metadata={"doc": "process scopes that get a process_power point (add pid for each one)"},
    )
    max_age: float = duration(5.0, "RAPL power further than this from a process point is unused")
    cpu_share_field: str = option(
        "cpu_busy_share_ratio", "process field giving the CPU share (or cpu_utilization_ratio)"
    )
    memory_share_field: str = option(
        "memory_used_share_ratio", "process field giving the memory share"
    )

    def validate(self) -> None:
        """Raise ValueError on a bad value (the core turns it into a ConfigError)."""
        if self.cpu_domain not in ("package", "core", "psys"):
            raise ValueError(f"cpu_domain: {self.cpu_domain!r} is not package, core or psys")
        bad = sorted(set(self.scopes) - set(_VALID_SCOPES))
        if bad:
            raise ValueError(f"scopes: unknown {bad}; known: " + ", ".join(_VALID_SCOPES))
        if not self.max_age > 0:
            raise ValueError(f"max_age must be positive, got {self.max_age}")


_KINDS = ("cpu", "dram")


@dataclass(slots=True)
class _Series:
    last_ns: int
    joules: list[float] = field(default_factory=lambda: [0.0, 0.0])
    """Cumulative cpu and dram energy (J), in the order of _KINDS."""
    seen: list[bool] = field(default_factory=lambda: [False, False])
    """Whether an interval with power has been integrated yet, per kind."""


class ProcessPowerShare:
    """Joins RAPL power with procfs CPU and memory shares into ``process_power`` points."""

    name: ClassVar[str] = "process_power"
    config_class: ClassVar[type] = ProcessPowerConfig

    def __init__(self, config: ProcessPowerConfig | None, context: PluginContext) -> None:
        self.config = cfg = config or ProcessPowerConfig()
        try:
            cfg.validate()
        except ValueError as exc:
            raise ConfigError(f"[processors.process_power] {exc}") from exc
        self.context = context
        self.power = PowerTable((cfg.cpu_domain, cfg.dram_domain), round(cfg.max_age * 1e9))
        self._scopes = frozenset(cfg.scopes)
        self._inputs = (
            (cfg.cpu_share_field, cfg.cpu_domain),
            (cfg.memory_share_field, cfg.dram_domain),
        )
        self._series: dict[tuple[tuple[str, str], ...], _Series] = {}
        self._processed = 0
        self.emitted = 0
        self.missing_power = 0

    def process(self, point: Point, emit: Emit) -> None:
        measurement = point.measurement
        if measurement == _RAPL:
            self.power.update(point)
            return
        # Until some RAPL power has been seen (none on a VM) there is nothing to share out.
        if measurement != _PROCESS or not self.power.seen:
            return
        if point.tags.get("scope") not in self._scopes:
            return
        t = point.time_ns
        series, dt_ns = self._advance(point, t)
        fields, wanted = self._fields(point.fields, series, t, dt_ns)
        if not fields:
            if wanted:
                self.missing_power += 1
            return
        self.emitted += 1
        emit(Point(MEASUREMENT, point.tags, fields, t))

    def _advance(self, point: Point, t: int) -> tuple[_Series, int]:
        """The point's series and the time (ns) since its previous point; 0 for a new series."""
        key = tuple(sorted(point.tags.items()))
        series = self._series.get(key)
        self._processed += 1
        if self._processed % _PRUNE_EVERY == 0:
            self._prune(t)
        if series is None:
            # The first point only marks where this series' intervals start.
            self._series[key] = _Series(t)
            return self._series[key], 0
        dt_ns = t - series.last_ns
        if dt_ns > 0:
            series.last_ns = t
        return series, dt_ns

    def _fields(
        self, values: Mapping[str, FieldValue], series: _Series, t: int, dt_ns: int
    ) -> tuple[dict[str, FieldValue], bool]:
        """The output fields, and whether the point carried any share at all."""
        fields: dict[str, FieldValue] = {}
        wanted = False
        for i, (share_field, domain) in enumerate(self._inputs):
            share = values.get(share_field)
            if type(share) is not float and type(share) is not int:
                continue
            wanted = True
            total = self.power.total(domain, t)
            if total is None:
                continue
            kind = _KINDS[i]
            watts = float(share) * total
            fields[f"{kind}_power_watts"] = watts
            if dt_ns > 0:
                series.joules[i] += watts * (dt_ns / 1e9)
                series.seen[i] = True
            if series.seen[i]:
                fields[f"{kind}_energy_joules"] = series.joules[i]
        return fields, wanted

    def _prune(self, now_ns: int) -> None:
        """Forget series (exited processes) silent for 100 × max_age."""
        horizon = now_ns - 100 * self.power.max_age_ns
        stale = [k for k, s in self._series.items() if s.last_ns < horizon]
        for k in stale:
            del self._series[k]

    def stats(self) -> dict[str, float | int]:
        # The bus already counts points in and out; this says why some process points gave none.
        return {"missing_power": self.missing_power}
