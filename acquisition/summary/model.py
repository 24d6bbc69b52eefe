"""The run summary's typed result: what ``summarize`` returns and the JSON contract ``nrg.summary/1``.

Energies in joules (``*_j``) and kWh, powers in watts (``*_w``), durations in seconds
(``*_s``), CO₂e in grams; memory and time in the units chosen by ``SummaryOptions`` (gpu_tracker's
unit names). ``to_dict()`` gives the JSON form, validated by the schema shipped as
``acquisition/schemas/summary-1.json``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "DEFAULT_CARBON_INTENSITY",
    "DEFAULT_CARBON_SOURCE",
    "RAM_UNITS",
    "SCHEMA",
    "TIME_UNITS",
    "EnergySummary",
    "EpochSummary",
    "ModuleShare",
    "RunSummary",
    "SourceEnergy",
    "StepStats",
    "SummaryOptions",
]

from acquisition.summary_options import (
    DEFAULT_CARBON_INTENSITY,
    DEFAULT_CARBON_SOURCE,
    RAM_UNITS,
    TIME_UNITS,
)

SCHEMA = "nrg.summary/1"
J_PER_KWH = 3.6e6
PROVENANCE: dict[str, str] = {
    "window": "the tracked command's nrg_job spawn and exit and the job's nrg_run start and "
    "end, the widest, else the run's first and last point",
    "energy.sources": "rapl and gpu energy_joules counters differenced; gpu power_watts and "
    "emonpi power<ch>_watts integrated by trapezoids; interpolated at the window's edges",
    "energy.total_j": "per host the wall meter if any, else RAPL package + dram + GPUs",
    "energy.outside_steps_j": "total_j minus the step energies",
    "epochs, steps": "nrg_step (epoch tag, else field; samples field) and nrg_energy scope=step; "
    "the ranks' steps with the same number are one step (energy over all ranks' devices, the "
    "slowest rank's duration, samples summed)",
    "per_rank, stragglers": "each rank's own GPU (CUDA device UUID) plus an equal share of its "
    "host's shared sources; a rank waits from its step end to the slowest rank's",
    "modules": "nrg_energy scope=module summed over steps and phases; with several ranks on "
    "a host, each rank's own GPU and the ranks' mean of the host's shared sources",
    "co2e_g": "total_kwh x carbon_intensity_g_per_kwh",
    "forecast": "the first nrg_forecast source=total point of the run (processors.forecast)",
    "resources": "procfs memory, cpu and process (tree sums) points; nvml gpu and gpu_process",
}


@dataclass(frozen=True)
class SummaryOptions:
    """How to summarise: carbon intensity, how many modules, gpu_tracker's units."""

    carbon_intensity_g_per_kwh: float = DEFAULT_CARBON_INTENSITY
    carbon_intensity_source: str = DEFAULT_CARBON_SOURCE
    carbon_given: bool = False
    """The intensity was given for this summary (``--carbon-intensity``): it overrides the one
    a run recorded (``nrg_carbon``)."""
    top_modules: int = 10
    ram_unit: Literal["bytes", "kilobytes", "megabytes", "gigabytes", "terabytes"] = "gigabytes"
    gpu_ram_unit: Literal["bytes", "kilobytes", "megabytes", "gigabytes"] = "gigabytes"
    time_unit: Literal["seconds", "minutes", "hours", "days"] = "hours"
    tree: str | None = None
    """Process tree (root pid) whose resources to report; default: the run's own job."""
    wall_channel: int = 1
    """emonPi CT channel that measures this machine, as in ``[[processors.attribution]]``."""

    def validate(self) -> None:
        if self.ram_unit not in RAM_UNITS:
            raise ValueError(f"unknown RAM unit; use one of {', '.join(RAM_UNITS)}")
        if self.gpu_ram_unit not in RAM_UNITS or str(self.gpu_ram_unit) == "terabytes":
            raise ValueError(f"unknown GPU RAM unit; use one of {', '.join(RAM_UNITS)}")
        if self.time_unit not in TIME_UNITS:
            raise ValueError(f"unknown time unit; use one of {', '.join(TIME_UNITS)}")
        if self.carbon_intensity_g_per_kwh < 0:
            raise ValueError("carbon intensity must be >= 0")


@dataclass
class SourceEnergy:
    """Energy of one source (a ``source`` tag value of ``nrg_energy``) on one host."""

    source: str
    energy_j: float
    mean_w: float | None
    peak_w: float | None
    error_j: float | None
    host: str = ""
    counted: bool = True
    """Whether ``energy.total_j`` includes it (see ``EnergySummary``)."""
    origin: str = ""
    """Where the figure comes from (measurement and field, how it was integrated)."""


@dataclass
class EnergySummary:
    """Energy of the run. ``total_j`` counts each joule once: per host the wall meter when there
    is one (it contains everything else), else RAPL package + dram of every socket plus every
    GPU; RAPL core/uncore (inside package), psys (the platform) and rest of system are reported
    but not added."""

    total_j: float
    total_kwh: float
    outside_steps_j: float | None
    sources: list[SourceEnergy]
    mean_w: float | None = None
    peak_w: float | None = None


@dataclass
class EpochSummary:
    epoch: int
    steps: int
    duration_s: float
    energy_j: float | None
    sources: dict[str, float] = field(default_factory=dict)
    error_j: float | None = None
    """Error bar of ``energy_j``: bounded at the edges of each run of adjacent steps."""


@dataclass
class StepStats:
    count: int
    energy_j: dict[str, float] | None
    """``mean``, ``p50``, ``p95`` and ``sd`` of the energy of one step (counted sources)."""
    samples: int | None
    energy_per_sample_j: float | None
    error_j: float | None = None
    """Error bar of the steps' summed energy: the bounds at the edges of each run of adjacent
    steps (the energy between is conserved), when the attribution gives them."""


@dataclass
class ModuleShare:
    module: str
    energy_j: float
    share: float
    """Of the energy inside steps."""


@dataclass
class RunSummary:
    """The figures of one run (or time window); ``to_dict`` is the ``nrg.summary/1`` JSON."""

    run: str
    experiment: str
    host: str
    start: str
    end: str
    duration_s: float
    energy: EnergySummary
    co2e_g: float
    carbon_intensity_g_per_kwh: float
    carbon_intensity_source: str
    epochs: list[EpochSummary]
    steps: StepStats
    modules: list[ModuleShare]
    resources: dict[str, Any]
    no_energy_reason: str | None
    exit_code: int | None = None
    hosts: list[str] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)
    per_host: list[dict[str, Any]] = field(default_factory=list)
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    """Per rank of a distributed run: host, rank, GPU, steps, time, energy, waits."""
    stragglers: dict[str, Any] | None = None
    """The slowest rank of the global steps and the energy the others used waiting for it."""
    start_ns: int = 0
    end_ns: int = 0
    flops: int | None = None
    """Forward FLOPs of the model per step (``nrg_model``), when the job reported them."""
    notes: list[str] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    """A Tracker's named windows: name, start_ns, duration_s, energy_j, error_j, sources, waited_s."""
    forecast: dict[str, Any] | None = None
    """The forecast made after the first epoch beside what happened (``nrg_forecast``)."""
    provenance: dict[str, str] = field(default_factory=lambda: dict(PROVENANCE))
    """Where each group of figures comes from."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("start_ns")
        out.pop("end_ns")
        return {"schema": SCHEMA, **out}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def __str__(self) -> str:
        from acquisition.summary.text import format_text

        return format_text(self)
