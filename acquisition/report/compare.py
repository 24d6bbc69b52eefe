"""Runs and experiments side by side, each figure against the first (the baseline).

Per run a figure has an error bar where one is known: the sources' ``error_j`` for energies,
the standard error of the mean (sd ÷ √n) over steps or epochs for per-step and per-epoch
energy. An experiment is the mean of its runs' figures, with their standard deviation and n;
its error bar is twice the standard error over runs (≈ a 95 % interval). A difference is
*outside the error bars* when it exceeds the two error bars added (a conservative test); where
either has no error bar that is not decided (``null``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from acquisition.summary import RAM_UNITS, RunSummary

__all__ = ["Comparison", "Figure", "Value", "compare"]


@dataclass
class Value:
    value: float | None
    error: float | None = None
    sd: float | None = None
    n: int = 1
    diff: float | None = None
    diff_ratio: float | None = None
    significant: bool | None = None


@dataclass
class Figure:
    name: str
    unit: str
    values: list[Value]


@dataclass
class Comparison:
    labels: list[str]
    figures: list[Figure]
    carbon_sources: list[list[str]] = field(default_factory=list)
    """Per label, where its runs' carbon intensities come from (each source once)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": "nrg.compare/1",
            "labels": self.labels,
            "figures": [asdict(f) for f in self.figures],
            "carbon_sources": self.carbon_sources,
        }


def _sem(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def _total_error(s: RunSummary) -> float | None:
    errors = [src.error_j for src in s.energy.sources if src.counted]
    if not errors or any(e is None for e in errors):
        return None
    return sum(e for e in errors if e is not None)


def _per_epoch(s: RunSummary) -> tuple[float | None, float | None]:
    values = [e.energy_j for e in s.epochs if e.energy_j is not None]
    return (statistics.fmean(values), _sem(values)) if values else (None, None)


def _per_step(s: RunSummary) -> tuple[float | None, float | None]:
    e = s.steps.energy_j
    if e is None:
        return None, None
    n = s.steps.count
    return e["mean"], (e["sd"] / math.sqrt(n) if n > 1 else None)


def _peak_rss(s: RunSummary) -> tuple[float | None, float | None]:
    ram = s.resources.get("max_ram", {})
    value = ram.get("combined", {}).get("total_rss")
    if value is None:
        return None, None
    return value * RAM_UNITS[ram.get("unit", "bytes")] / 1e6, None  # megabytes


def _per_flop(s: RunSummary) -> tuple[float | None, float | None]:
    mean, err = _per_step(s)
    if mean is None or not s.flops:
        return None, None
    return mean / s.flops, (err / s.flops if err is not None else None)


Extract = Callable[[RunSummary], tuple[float | None, float | None]]

_FIGURES: list[tuple[str, str, Extract]] = [
    ("duration", "s", lambda s: (s.duration_s, None)),
    (
        "energy",
        "J",
        lambda s: (s.energy.total_j if not s.no_energy_reason else None, _total_error(s)),
    ),
    ("mean power", "W", lambda s: (s.energy.mean_w, None)),
    ("energy per epoch", "J", _per_epoch),
    ("energy per step", "J", _per_step),
    ("energy per sample", "J", lambda s: (s.steps.energy_per_sample_j, None)),
    ("energy outside steps", "J", lambda s: (s.energy.outside_steps_j, None)),
    ("peak memory (combined RSS)", "MB", _peak_rss),
    ("CO2e", "g", lambda s: (s.co2e_g if not s.no_energy_reason else None, None)),
    ("carbon intensity", "g/kWh", lambda s: (s.carbon_intensity_g_per_kwh, None)),
    ("energy per forward FLOP", "J", _per_flop),
]


def _source_figures(groups: Sequence[Sequence[RunSummary]]) -> list[tuple[str, str, Extract]]:
    names = sorted({src.source for runs in groups for s in runs for src in s.energy.sources})

    def extract(name: str) -> Extract:
        def get(s: RunSummary) -> tuple[float | None, float | None]:
            found = [src for src in s.energy.sources if src.source == name]
            if not found:
                return None, None
            errors = [f.error_j for f in found]
            err = (
                None if any(e is None for e in errors) else sum(e for e in errors if e is not None)
            )
            return sum(f.energy_j for f in found), err

        return get

    return [(f"energy {name}", "J", extract(name)) for name in names]


def _value(runs: Sequence[RunSummary], extract: Extract) -> Value:
    pairs = [extract(s) for s in runs]
    values = [v for v, _ in pairs if v is not None]
    if not values:
        return Value(None, n=0)
    if len(runs) == 1:
        return Value(values[0], pairs[0][1])
    sd = statistics.stdev(values) if len(values) > 1 else None
    err = 2 * sd / math.sqrt(len(values)) if sd is not None else None
    return Value(statistics.fmean(values), err, sd, len(values))


def _against(base: Value, other: Value) -> None:
    if base.value is None or other.value is None:
        return
    other.diff = other.value - base.value
    other.diff_ratio = other.diff / base.value if base.value else None
    if base.error is not None and other.error is not None:
        other.significant = abs(other.diff) > base.error + other.error


def compare(labels: Sequence[str], groups: Sequence[Sequence[RunSummary]]) -> Comparison:
    """``groups[i]`` holds the summaries of ``labels[i]`` (one run, or an experiment's runs)."""
    figures = []
    for name, unit, extract in _FIGURES[:3] + _source_figures(groups) + _FIGURES[3:]:
        values = [_value(runs, extract) for runs in groups]
        for v in values[1:]:
            _against(values[0], v)
        figures.append(Figure(name, unit, values))
    sources = [list(dict.fromkeys(s.carbon_intensity_source for s in runs)) for runs in groups]
    return Comparison(list(labels), figures, sources)
