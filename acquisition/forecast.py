"""The run forecast: how long the rest of a training run takes and how much energy it uses,
predicted from the epochs (or steps) seen so far, with a 95 % prediction interval.

The model: the epochs still to run are like the ones already seen. For a figure ``x`` (an
epoch's duration, or its energy from one source) seen ``n`` times with mean ``x̄`` and sample
standard deviation ``s``, the sum of ``m`` future values is predicted as ``m·x̄`` with the
Student-t prediction interval ``m·x̄ ± t(0.975, n−1) · s · √(m + m²/n)``: ``m`` for the spread of
the future values themselves, ``m²/n`` for the uncertainty of the mean.

- From the third finished epoch on, ``x`` is a whole epoch (basis ``epochs``): slow and fast
  epochs, evaluation and checkpoints are all in the spread.
- After one or two epochs, ``x`` is a step (basis ``steps``): the remaining ``m·M`` steps (``M``
  steps per epoch, from the plan or the last epoch) are predicted from the steps seen, and the
  time outside steps (evaluation, data loading between steps) is added as the mean of what the
  finished epochs spent outside their steps, without an interval of its own.

Pure functions on plain numbers; the processor that feeds them is
``acquisition.processors.forecast``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "EPOCH_BASIS_FROM",
    "LEVEL",
    "TOTAL",
    "EpochFigures",
    "Estimate",
    "Forecast",
    "forecast_run",
    "forecast_status",
    "format_forecast",
    "predict_sum",
    "t_quantile",
]

LEVEL = 0.95
"""The prediction intervals' coverage."""
EPOCH_BASIS_FROM = 3
"""Finished epochs from which whole epochs (not steps) are the basis."""
TOTAL = "total"
"""The ``source`` of the sum of the counted sources."""
J_PER_KWH = 3.6e6

# Two-sided 95 %: the 0.975 quantile of Student's t with df = 1 … 30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` ≥ 1 degrees of freedom (a table to 30, then
    the Cornish-Fisher expansion, within 1e-4 of the exact value)."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Estimate:
    """A predicted figure and its prediction interval (low ≤ value ≤ high)."""

    value: float
    low: float
    high: float

    def shifted(self, by: float) -> Estimate:
        return Estimate(self.value + by, self.low + by, self.high + by)

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, self.low * factor, self.high * factor)

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.value + other.value, self.low + other.low, self.high + other.high)


def predict_sum(seen: Sequence[float], count: float) -> Estimate:
    """The sum of ``count`` future values like ``seen``, with its prediction interval.

    One value seen: no spread is known, so the interval is the prediction itself. The low end
    is never below zero."""
    if count <= 0 or not seen:
        return Estimate(0.0, 0.0, 0.0)
    n = len(seen)
    mean = math.fsum(seen) / n
    value = count * mean
    if n < 2:
        return Estimate(value, value, value)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in seen) / (n - 1))
    half = t_quantile(n - 1) * sd * math.sqrt(count + count * count / n)
    return Estimate(value, max(value - half, 0.0), value + half)


@dataclass
class EpochFigures:
    """What one finished epoch took: its wall time and energy per source, and its steps'."""

    duration_s: float
    energy_j: dict[str, float]
    step_durations_s: list[float] = field(default_factory=list)
    step_energy_j: dict[str, list[float]] = field(default_factory=dict)
    """Per source, one energy per step (steps the source covered)."""
    steps: int = 0
    """Steps in the epoch (0: as many as ``step_durations_s`` holds)."""


@dataclass
class Forecast:
    """The run's predicted remaining and total duration, energy per source and CO₂e."""

    epochs_done: int
    epochs: int
    basis: str
    """``epochs`` or ``steps`` (see the module's docstring)."""
    elapsed_s: float
    remaining_s: Estimate
    total_s: Estimate
    energy_spent_j: dict[str, float]
    energy_remaining_j: dict[str, Estimate]
    energy_total_j: dict[str, Estimate]
    """Per source, and the counted sources' sum under ``TOTAL``."""
    carbon_intensity_g_per_kwh: float
    co2e_g: Estimate
    level: float = LEVEL

    def to_dict(self) -> dict[str, object]:
        def est(e: Estimate) -> dict[str, float]:
            return {"value": e.value, "low": e.low, "high": e.high}

        return {
            "epochs_done": self.epochs_done,
            "epochs": self.epochs,
            "basis": self.basis,
            "level": self.level,
            "elapsed_s": self.elapsed_s,
            "remaining_s": est(self.remaining_s),
            "total_s": est(self.total_s),
            "energy_j": {k: est(v) for k, v in sorted(self.energy_total_j.items())},
            "co2e_g": est(self.co2e_g),
            "carbon_intensity_g_per_kwh": self.carbon_intensity_g_per_kwh,
        }


def _outside(epochs: Sequence[EpochFigures], source: str | None) -> float:
    """Mean per epoch of what the epochs spent outside their steps (s, or J of ``source``)."""
    values = []
    for e in epochs:
        if source is None:
            values.append(e.duration_s - math.fsum(e.step_durations_s))
        else:
            values.append(e.energy_j.get(source, 0.0) - math.fsum(e.step_energy_j.get(source, [])))
    return max(math.fsum(values) / len(values), 0.0)


def _remaining(
    epochs: Sequence[EpochFigures], left: int, steps_per_epoch: int | None, source: str | None
) -> Estimate:
    """The remaining ``left`` epochs' duration (``source`` None) or energy of ``source``."""
    if len(epochs) >= EPOCH_BASIS_FROM:
        seen = [e.duration_s if source is None else e.energy_j.get(source, 0.0) for e in epochs]
        return predict_sum(seen, left)
    per_epoch = steps_per_epoch or epochs[-1].steps or len(epochs[-1].step_durations_s)
    steps: list[float] = []
    for e in epochs:
        steps += e.step_durations_s if source is None else e.step_energy_j.get(source, [])
    if not steps:  # no steps measured: the epochs are all there is
        seen = [e.duration_s if source is None else e.energy_j.get(source, 0.0) for e in epochs]
        return predict_sum(seen, left)
    return predict_sum(steps, left * per_epoch).shifted(left * _outside(epochs, source))


def forecast_run(
    epochs: Sequence[EpochFigures],
    planned: int,
    *,
    elapsed_s: float,
    spent_j: Mapping[str, float],
    counted: Sequence[str],
    steps_per_epoch: int | None = None,
    carbon_intensity_g_per_kwh: float = 0.0,
) -> Forecast:
    """The forecast after ``epochs`` (the finished ones, in order) of a run of ``planned``.

    ``elapsed_s`` and ``spent_j`` (per source) are the time and energy from the run's start
    to the end of the last finished epoch; ``counted`` are the sources whose sum is the run's
    energy (each joule once: the wall meter, else RAPL package + DRAM and the GPUs)."""
    if not epochs:
        raise ValueError("a forecast needs at least one finished epoch")
    left = max(planned - len(epochs), 0)
    remaining = _remaining(epochs, left, steps_per_epoch, None)
    sources = sorted(set(spent_j) | {s for e in epochs for s in e.energy_j})
    rem_j = {s: _remaining(epochs, left, steps_per_epoch, s) for s in sources}
    tot_j = {s: rem_j[s].shifted(spent_j.get(s, 0.0)) for s in sources}
    total = Estimate(0.0, 0.0, 0.0)
    for s in counted:
        if s in tot_j:
            total = total + tot_j[s]
    rem_total = Estimate(0.0, 0.0, 0.0)
    for s in counted:
        if s in rem_j:
            rem_total = rem_total + rem_j[s]
    rem_j[TOTAL], tot_j[TOTAL] = rem_total, total
    spent = dict(spent_j)
    spent[TOTAL] = math.fsum(spent_j.get(s, 0.0) for s in counted)
    return Forecast(
        epochs_done=len(epochs),
        epochs=planned,
        basis="epochs" if len(epochs) >= EPOCH_BASIS_FROM else "steps",
        elapsed_s=elapsed_s,
        remaining_s=remaining,
        total_s=remaining.shifted(elapsed_s),
        energy_spent_j=spent,
        energy_remaining_j=rem_j,
        energy_total_j=tot_j,
        carbon_intensity_g_per_kwh=carbon_intensity_g_per_kwh,
        co2e_g=total.scaled(carbon_intensity_g_per_kwh / J_PER_KWH),
    )


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _energy(joules: float) -> str:
    if joules >= 3.6e6:
        return f"{joules / 3.6e6:.2f} kWh"
    if joules >= 1e3:
        return f"{joules / 1e3:.1f} kJ"
    return f"{joules:.0f} J"


def format_forecast(f: Forecast) -> str:
    """One line: ``forecast after epoch 1/10: 2.3 min left (2.1–2.5), 45.1 kJ (…) …``."""
    e = f.energy_total_j.get(TOTAL, Estimate(0.0, 0.0, 0.0))
    r, c = f.remaining_s, f.co2e_g
    return (
        f"forecast after epoch {f.epochs_done}/{f.epochs}: {_duration(r.value)} left "
        f"({_duration(r.low)}–{_duration(r.high)}), total {_duration(f.total_s.value)}; "
        f"energy {_energy(e.value)} ({_energy(e.low)}–{_energy(e.high)}); "
        f"CO2e {c.value:.3g} g ({c.low:.3g}–{c.high:.3g}) at "
        f"{f.carbon_intensity_g_per_kwh:g} g/kWh; {int(f.level * 100)} % intervals"
    )


def forecast_status(fields: Mapping[str, object]) -> str:
    """The live line's part for an ``nrg_forecast source=total`` point's fields:
    ``epoch 2/10: 4.1 min left (3.9–4.4), 120.3 kJ total``."""

    def num(key: str) -> float:
        value = fields.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    return (
        f"epoch {num('epochs_done'):.0f}/{num('epochs'):.0f}: "
        f"{_duration(num('remaining_seconds'))} left ({_duration(num('remaining_low_seconds'))}"
        f"–{_duration(num('remaining_high_seconds'))}), {_energy(num('energy_joules'))} total"
    )
