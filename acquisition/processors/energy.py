"""Pure parts of the energy attribution: power-source readings, interpolation, integration, the
module split, and the time series a source keeps.

Units: times are Unix-epoch ns (int), energies J, powers W, durations s.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from acquisition.point import FieldValue, Point

__all__ = [
    "CounterAt",
    "Source",
    "SourceFields",
    "SourceSample",
    "counter_at",
    "counter_energy",
    "edge_error",
    "held_energy",
    "interpolate",
    "parse_gpu_sample",
    "parse_source",
    "shaped_energy",
    "source_fields",
    "split_energy",
    "trapezoid_energy",
]

_NS = 1_000_000_000
UPDATE_PERIOD_S = {"rapl": 0.001, "gpu": 0.1}
"""How often a kind of source updates its energy counter (s): the staleness term of the error
bar. Power series (a GPU without a counter, the wall meter) have none: their swing covers it."""
_GAPS_KEPT = 8
"""Recent sample gaps a source remembers to tell "late" from "silent"."""
SAMPLE_SLACK_NS = 100_000_000
"""How far a GPU's power samples may stop short of either end of a counter interval and still
shape it (the driver's newest sample is up to one sample period older than the counter read);
the missing part is held at the nearest sample's power."""


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


class SourceFields(NamedTuple):
    """What a source's points are, from their measurement and tags alone."""

    source: str
    kind: str
    domain: str
    counter: str | None
    """The field of its cumulative energy counter (J), if it has one."""
    power: str | None
    """The field of its power (W) where it has no counter reading."""


def source_fields(
    measurement: str, tags: Mapping[str, str], wall_channel: int = 1, wall_counter: bool = False
) -> SourceFields | None:
    """The power source the points of ``measurement`` and ``tags`` read, None for none."""
    if measurement == "rapl":
        domain = tags.get("domain", "")
        name = f"rapl:{domain}-{tags.get('socket', '0')}"
        if tags.get("die"):
            name += f"-die-{tags['die']}"
        return SourceFields(name, "rapl", domain, "energy_joules", None)
    if measurement == "gpu":
        return SourceFields(
            f"nvml:{tags.get('gpu', '0')}", "gpu", "", "energy_joules", "power_watts"
        )
    if measurement == "emonpi":
        name = f"emonpi:{tags.get('node', '0')}"
        counter = f"energy{wall_channel}_joules" if wall_counter else None
        return SourceFields(name, "wall", "", counter, f"power{wall_channel}_watts")
    return None


def parse_source(
    point: Point, wall_channel: int = 1, wall_counter: bool = False
) -> SourceSample | None:
    """The power-source reading ``point`` carries, or None when it carries none."""
    found = source_fields(point.measurement, point.tags, wall_channel, wall_counter)
    if found is None:
        return None
    name, kind, domain, counter, power = found
    return _reading(name, kind, domain, point.fields, counter, power)


def parse_gpu_sample(point: Point) -> tuple[str, float] | None:
    """(source name, W) of a ``gpu_sample`` point carrying ``power_watts``, else None."""
    if point.measurement != "gpu_sample":
        return None
    power = point.fields.get("power_watts")
    if not is_number(power):
        return None
    return f"nvml:{point.tags.get('gpu', '0')}", float(power)  # type: ignore[arg-type]


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
    return isinstance(value, _NUMBERS) and not isinstance(value, bool)


_NUMBERS = (int, float)
"""A tuple: ``isinstance`` checks one faster than a union (a summary asks per reading)."""
_PLAIN_NUMBERS = frozenset(_NUMBERS)


def all_numbers(values: Iterable[object]) -> bool:
    """Whether every value is a plain int or float (a decoded field's types), at C speed; False
    leaves values of their subclasses to :func:`is_number`."""
    return set(map(type, values)) <= _PLAIN_NUMBERS


def as_numbers(values: list[object]) -> list[float | None]:
    """Each value as a float, None where it is no number (:func:`is_number`); a column of plain
    numbers (a collector's series) is converted at C speed."""
    if all_numbers(values):
        return list(map(float, values))  # type: ignore[arg-type]
    return [float(v) if is_number(v) else None for v in values]  # type: ignore[arg-type]


def interpolate(times: Sequence[int], values: Sequence[float], t: int) -> float | None:
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


def trapezoid_energy(
    times: Sequence[int], watts: Sequence[float], start: int, end: int
) -> float | None:
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


def held_energy(times: Sequence[int], watts: Sequence[float], start: int, end: int) -> float:
    """Energy (J) of a power series over [start, end] by trapezoids, the power held at the first
    and last samples' values outside their span (0 for no samples)."""
    if not times or end <= start:
        return 0.0
    total = 0.0
    if start < times[0]:
        total += watts[0] * (min(end, times[0]) - start) / _NS
    if end > times[-1]:
        total += watts[-1] * (end - max(start, times[-1])) / _NS
    lo, hi = max(start, times[0]), min(end, times[-1])
    if hi > lo:
        total += trapezoid_energy(times, watts, lo, hi) or 0.0
    return total


class CounterAt(NamedTuple):
    """Where a time falls on a counter: interval ``k`` = [times[k], times[k+1]]."""

    k: int
    joules: float
    """The counter's value at the time: interpolated, shaped by power samples where they cover
    the interval."""
    fraction: float
    """Share of the interval's energy before the time (0..1)."""
    shaped: bool
    """Power samples shaped the interval (or carried the counter past its last reading)."""
    watts: float
    """The interval's mean power (W): counter difference over its length."""


def counter_at(
    times: list[int], joules: list[float], st: Sequence[int], sw: Sequence[float], t: int
) -> CounterAt | None:
    """The counter (``times``, ``joules``) at ``t``, shaped between its samples by the power
    samples (``st``, ``sw``) where they cover the interval holding ``t`` (within
    :data:`SAMPLE_SLACK_NS`); linear otherwise. None outside the counter's span.

    Shaping spreads each interval's counter energy in proportion to the samples' energy, so the
    counter's own values are kept at its sample times and any split of time adds up exactly.
    After the counter's last reading, samples that reach ``t`` carry it on (when the agent stops
    between two readings).
    """
    if times and t > times[-1]:
        return _carried(times, joules, st, sw, t)
    if not times or t < times[0]:
        return None
    if len(times) == 1:
        return CounterAt(0, joules[0], 0.0, False, 0.0)
    k = min(bisect.bisect_right(times, t) - 1, len(times) - 2)
    a, b = times[k], times[k + 1]
    delta = joules[k + 1] - joules[k]
    fraction = (t - a) / (b - a)
    shaped = False
    if st and st[0] <= a + SAMPLE_SLACK_NS and st[-1] >= b - SAMPLE_SLACK_NS:
        whole = held_energy(st, sw, a, b)
        if whole > 0.0:
            fraction, shaped = held_energy(st, sw, a, t) / whole, True
    return CounterAt(k, joules[k] + delta * fraction, fraction, shaped, delta * _NS / (b - a))


def _carried(
    times: list[int], joules: list[float], st: Sequence[int], sw: Sequence[float], t: int
) -> CounterAt | None:
    """The counter after its last reading, carried on by the power samples up to ``t``."""
    last = times[-1]
    if not st or st[0] > last + SAMPLE_SLACK_NS or st[-1] < t - SAMPLE_SLACK_NS:
        return None
    extra = held_energy(st, sw, last, t)
    return CounterAt(len(times) - 1, joules[-1] + extra, 0.0, True, extra * _NS / (t - last))


def shaped_energy(
    times: list[int],
    joules: list[float],
    st: Sequence[int],
    sw: Sequence[float],
    start: int,
    end: int,
) -> float | None:
    """Energy (J) a counter gained over [start, end], shaped by power samples (:func:`counter_at`);
    None unless the counter brackets it."""
    e0 = counter_at(times, joules, st, sw, start)
    e1 = counter_at(times, joules, st, sw, end)
    if e0 is None or e1 is None:
        return None
    return e1.joules - e0.joules


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
    """One power source's samples (a counter or a power series) and the pace it sends them at.

    A GPU also keeps the driver's power samples (``gpu_sample``, tens per second): they shape its
    energy counter between the counter's readings, or stand in for its power series without one.
    """

    name: str
    kind: str
    domain: str
    counter: Series = field(default_factory=Series)
    power: Series = field(default_factory=Series)
    samples: Series = field(default_factory=Series)
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

    def _sampled(self, start: int, end: int) -> bool:
        """Its power samples cover [start, end] (within the slack)."""
        st = self.samples.times
        return len(st) >= 2 and st[0] <= start + SAMPLE_SLACK_NS and st[-1] >= end - SAMPLE_SLACK_NS

    def energy(self, start: int, end: int) -> float | None:
        c, sm = self.counter, self.samples
        if c.times:
            if sm.times:
                return shaped_energy(c.times, c.values, sm.times, sm.values, start, end)
            return counter_energy(c.times, c.values, start, end)
        if self._sampled(start, end):
            return held_energy(sm.times, sm.values, start, end)
        return trapezoid_energy(self.power.times, self.power.values, start, end)

    def error(self, start: int, end: int, energy: float) -> float:
        """The documented error bound (J) of ``energy``, this source's energy over [start, end]:
        the power swing times the sample interval at each edge, plus twice the mean power times
        the counter's update period (see :meth:`bounds` for a counter shaped by samples)."""
        counter = bool(self.counter.times)
        times, values = self._edge_series(start, end)
        # Samples up to the first at or after the end: all a step is sure to have when written.
        last = bisect.bisect_left(times, end)
        swing = edge_error(times, values, start, counter, last)
        swing += edge_error(times, values, end, counter, last)
        if not counter or end <= start:
            return swing
        mean_w = energy * _NS / (end - start)
        return swing + 2 * abs(mean_w) * UPDATE_PERIOD_S.get(self.kind, 0.0)

    def _edge_series(self, start: int, end: int) -> tuple[list[int], list[float]]:
        if not self.counter.times and self._sampled(start, end):
            return self.samples.times, self.samples.values
        series = self.series()
        return series.times, series.values

    def bounds(self, start: int, end: int, energy: float) -> tuple[float, float, float]:
        """(the step's error bound, the bound at its start edge, at its end edge) in J.

        An edge's bound is that of the cumulative energy at that time: a sum of adjacent steps
        (an epoch, a run) is off by at most its first step's start bound plus its last step's
        end bound, since the energy between is conserved.
        """
        c, sm = self.counter, self.samples
        if not c.times or not sm.times:
            return self.error(start, end, energy), self._edge(start, end), self._edge(end, end)
        at0 = counter_at(c.times, c.values, sm.times, sm.values, start)
        at1 = counter_at(c.times, c.values, sm.times, sm.values, end)
        if at0 is None or at1 is None:
            return self.error(start, end, energy), 0.0, 0.0
        u = UPDATE_PERIOD_S.get(self.kind, 0.0)
        swing0, swing1 = self._swing(start, end, at0), self._swing(end, end, at1)
        edge0 = swing0 + abs(at0.watts) * u
        edge1 = swing1 + abs(at1.watts) * u
        step = edge0 + edge1
        if at0.k == at1.k:
            # Both edges in one counter interval: the counter's staleness at its two readings
            # moves the step only by its share of the interval's energy.
            share = max(at1.fraction - at0.fraction, 0.0)
            step = min(step, swing0 + swing1 + 2 * abs(at0.watts) * u * share)
        return step, edge0, edge1

    def _swing(self, t: int, end: int, at: CounterAt) -> float:
        """Power swing × sample interval at ``t``, over the samples that shaped its interval,
        else over the counter."""
        c, sm = self.counter, self.samples
        cut = c.times[min(bisect.bisect_left(c.times, end), len(c.times) - 1)]
        if at.shaped:
            last = bisect.bisect_right(sm.times, cut) - 1
            return edge_error(sm.times, sm.values, t, False, last)
        return edge_error(c.times, c.values, t, True, bisect.bisect_left(c.times, cut))

    def _edge(self, t: int, end: int) -> float:
        """The bound at one edge of a source not shaped by samples: its swing there, plus the
        mean power of the counter interval holding it times the counter's update period."""
        times, values = self._edge_series(t, end)
        counter = bool(self.counter.times)
        swing = edge_error(times, values, t, counter, bisect.bisect_left(times, end))
        if not counter:
            return swing
        at = counter_at(times, values, [], [], t)
        assert at is not None  # the counter brackets the step whose edge this is
        return swing + abs(at.watts) * UPDATE_PERIOD_S.get(self.kind, 0.0)
