"""Pure parts of the energy attribution: power-source readings, interpolation, integration, the
module split, and the time series a source keeps.

Units: times are Unix-epoch ns (int), energies J, powers W, durations s.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from acquisition.point import FieldValue, Point

__all__ = [
    "Source",
    "SourceSample",
    "counter_energy",
    "edge_error",
    "interpolate",
    "parse_source",
    "split_energy",
    "trapezoid_energy",
]

_NS = 1_000_000_000
UPDATE_PERIOD_S = {"rapl": 0.001, "gpu": 0.1}
"""How often a kind of source updates its energy counter (s): the staleness term of the error
bar. Power series (a GPU without a counter, the wall meter) have none: their swing covers it."""
_GAPS_KEPT = 8
"""Recent sample gaps a source remembers to tell "late" from "silent"."""


@dataclass(frozen=True, slots=True)
class SourceSample:
    """One reading of a power source, as :func:`parse_source` finds it on a point."""

    source: str
    """``rapl:package-0``, ``rapl:dram-0``, ``rapl:package-0-die-1``, ``nvml:0``, ``emonpi:5``."""
    kind: str
    """``rapl``, ``gpu`` or ``wall``."""
    domain: str
    """RAPL domain (``package``, ``dram``...), else ``""``."""
    counter: bool
    """True: ``value`` is a cumulative energy counter in J; False: a power in W."""
    value: float


def parse_source(
    point: Point, wall_channel: int = 1, wall_counter: bool = False
) -> SourceSample | None:
    """The power-source reading ``point`` carries, or None when it carries none."""
    tags, fields = point.tags, point.fields
    m = point.measurement
    if m == "rapl":
        domain = tags.get("domain", "")
        name = f"rapl:{domain}-{tags.get('socket', '0')}"
        if tags.get("die"):
            name += f"-die-{tags['die']}"
        return _reading(name, "rapl", domain, fields, "energy_joules", None)
    if m == "gpu":
        name = f"nvml:{tags.get('gpu', '0')}"
        return _reading(name, "gpu", "", fields, "energy_joules", "power_watts")
    if m == "emonpi":
        name = f"emonpi:{tags.get('node', '0')}"
        counter = f"energy{wall_channel}_joules" if wall_counter else None
        return _reading(name, "wall", "", fields, counter, f"power{wall_channel}_watts")
    return None


def _reading(
    name: str,
    kind: str,
    domain: str,
    fields: Mapping[str, FieldValue],
    energy_field: str | None,
    power_field: str | None,
) -> SourceSample | None:
    energy = fields.get(energy_field) if energy_field else None
    if is_number(energy):
        return SourceSample(name, kind, domain, True, float(energy))  # type: ignore[arg-type]
    if power_field is not None:
        power = fields.get(power_field)
        if is_number(power):
            return SourceSample(name, kind, domain, False, float(power))  # type: ignore[arg-type]
    return None


def is_number(value: object) -> bool:
    """An int or float field value, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def interpolate(times: list[int], values: list[float], t: int) -> float | None:
    """``values`` linearly interpolated at ``t``; None outside ``[times[0], times[-1]]``.

    ``times`` is strictly increasing (ns).
    """
    if not times or t < times[0] or t > times[-1]:
        return None
    i = bisect.bisect_left(times, t)
    if times[i] == t:
        return values[i]
    t0, t1 = times[i - 1], times[i]
    v0, v1 = values[i - 1], values[i]
    return v0 + (v1 - v0) * ((t - t0) / (t1 - t0))


def counter_energy(times: list[int], joules: list[float], start: int, end: int) -> float | None:
    """Energy (J) a cumulative counter gained over [start, end]; None unless samples bracket it."""
    e0 = interpolate(times, joules, start)
    e1 = interpolate(times, joules, end)
    if e0 is None or e1 is None:
        return None
    return e1 - e0


def trapezoid_energy(times: list[int], watts: list[float], start: int, end: int) -> float | None:
    """Energy (J) of a power series over [start, end] by trapezoids; None unless bracketed."""
    p0 = interpolate(times, watts, start)
    p1 = interpolate(times, watts, end)
    if p0 is None or p1 is None:
        return None
    lo = bisect.bisect_right(times, start)
    hi = bisect.bisect_left(times, end)
    total = 0.0
    prev_t, prev_p = start, p0
    for i in range(lo, hi):
        total += (times[i] - prev_t) * (prev_p + watts[i]) / 2
        prev_t, prev_p = times[i], watts[i]
    total += (end - prev_t) * (prev_p + p1) / 2
    return total / _NS


def split_energy(
    energy: float, duration_s: float, weights: Mapping[tuple[str, str], float]
) -> tuple[dict[tuple[str, str], float], float]:
    """Split a step's ``energy`` over modules by their time ``weights`` (s).

    Each module gets ``energy × weight / max(duration_s, Σ weights)`` (the step's mean power times
    its time); the remainder is what is left, by subtraction, so modules + remainder == energy.
    """
    total = sum(weights.values())
    denom = max(duration_s, total)
    if denom <= 0.0:
        return {}, energy
    # w / denom first: each fraction is <= 1, so no product can overflow or round above energy
    shares = {key: energy * (w / denom) for key, w in weights.items()}
    return shares, energy - sum(shares.values())


def edge_error(
    times: list[int], values: list[float], t: int, counter: bool, last: int | None = None
) -> float:
    """Error bound (J) of the energy a series gives up to the time ``t`` (ns) of a step's edge.

    The swing of the power (largest minus smallest) over the sample interval holding ``t`` and
    its two neighbours, times that interval's length. Power is ``values`` itself, or the
    counter's rate over each interval when ``counter``. Only samples up to index ``last`` are
    used (default: all). 0 without an interval around ``t``.
    """
    end = len(times) - 1 if last is None else min(last, len(times) - 1)
    k = bisect.bisect_right(times, t, 0, end + 1) - 1
    if k == end and k > 0 and times[k] == t:
        k -= 1  # an edge on the last sample: the interval that ends there
    if k < 0 or k >= end:
        return 0.0
    lo, hi = max(k - 1, 0), min(k + 2, end)
    if counter:
        watts = [
            (values[i + 1] - values[i]) * _NS / (times[i + 1] - times[i]) for i in range(lo, hi)
        ]
    else:
        watts = values[lo : hi + 1]
    return (max(watts) - min(watts)) * (times[k + 1] - times[k]) / _NS


class Series:
    """Time-ordered samples of one quantity of one source."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.values: list[float] = []

    def add(self, t: int, v: float) -> None:
        """Append a sample no older than the last; one at the same time replaces it."""
        if self.times and t == self.times[-1]:
            self.values[-1] = v
            return
        self.times.append(t)
        self.values.append(v)

    def prune(self, before: int) -> None:
        """Drop samples older than ``before``, keeping the last one at or before it."""
        i = bisect.bisect_right(self.times, before) - 1
        if i > 0:
            del self.times[:i]
            del self.values[:i]

    def clear(self) -> None:
        self.times.clear()
        self.values.clear()


@dataclass
class Source:
    """One power source's samples (a counter or a power series) and the pace it sends them at."""

    name: str
    kind: str
    domain: str
    counter: Series = field(default_factory=Series)
    power: Series = field(default_factory=Series)
    gaps: list[int] = field(default_factory=list)
    """The last few intervals between its samples (ns), to know when it is overdue."""

    def series(self) -> Series:
        return self.counter if self.counter.times else self.power

    def first(self) -> int | None:
        times = self.series().times
        return times[0] if times else None

    def last(self) -> int | None:
        times = self.series().times
        return times[-1] if times else None

    def note_gap(self, gap_ns: int) -> None:
        self.gaps.append(gap_ns)
        if len(self.gaps) > _GAPS_KEPT:
            del self.gaps[0]

    def max_gap(self) -> int | None:
        """The longest of its recent sample intervals (ns); None before two samples."""
        return max(self.gaps) if self.gaps else None

    def energy(self, start: int, end: int) -> float | None:
        if self.counter.times:
            return counter_energy(self.counter.times, self.counter.values, start, end)
        return trapezoid_energy(self.power.times, self.power.values, start, end)

    def error(self, start: int, end: int, energy: float) -> float:
        """The documented error bound (J) of ``energy``, this source's energy over [start, end]:
        the power swing times the sample interval at each edge, plus twice the mean power times
        the counter's update period."""
        counter = bool(self.counter.times)
        times, values = self.series().times, self.series().values
        # Samples up to the first at or after the end: all a step is sure to have when written.
        last = bisect.bisect_left(times, end)
        swing = edge_error(times, values, start, counter, last)
        swing += edge_error(times, values, end, counter, last)
        if not counter or end <= start:
            return swing
        mean_w = energy * _NS / (end - start)
        return swing + 2 * abs(mean_w) * UPDATE_PERIOD_S.get(self.kind, 0.0)
