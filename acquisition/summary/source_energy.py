"""Each source's energy over a span: a counter differenced, or power readings integrated.

A span is one or more stretches of time (the run less what it leaves out, e.g. a Tracker's own
waits); the energy, the sampled time and the peak add up over the stretches. Mean power =
energy ÷ sampled time; peak power = the largest power seen, an instant reading or the mean power
between two consecutive samples, so never below the mean; ``error_j`` = mean power × the part
of the span no two samples bracket.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from acquisition.point import Point
from acquisition.processors.energy import (
    all_numbers,
    as_numbers,
    is_number,
    shaped_energy,
    source_fields,
)
from acquisition.summary.columns import DriverSamples, strictly_increasing
from acquisition.summary.model import SourceEnergy

__all__ = [
    "Series",
    "continuous",
    "counter_edges",
    "pieces",
    "readings_by_source",
    "shaped_counter",
    "source_energy",
]

_NS = 1e9
Columns = tuple["array[int]", "array[float]"]
"""A series as (times, values)."""


@dataclass
class Series:
    """One (host, source)'s readings: a cumulative counter, or power readings."""

    counter: list[tuple[int, float]] = field(default_factory=list)
    power: list[tuple[int, float]] = field(default_factory=list)
    readings: list[tuple[int, float]] = field(default_factory=list)
    """Instantaneous power readings (``power_watts``) beside a counter, for the peak."""
    samples: list[tuple[int, float]] = field(default_factory=list)
    """The driver's power samples (``gpu_sample``): they shape a counter between readings."""
    sample_columns: list[DriverSamples] = field(default_factory=list)
    """More of them, read as columns."""
    _joined: Columns | None = field(default=None, repr=False)
    _continuous: list[tuple[int, float]] | None = field(default=None, repr=False)
    _extra: list[tuple[int, float]] | None = field(default=None, repr=False)

    def continuous_counter(self) -> list[tuple[int, float]]:
        """:func:`continuous` of the counter readings, worked out once (the energy and the curve
        both read it; neither changes it)."""
        if self._continuous is None:
            self._continuous = continuous(self.counter)
        return self._continuous

    def driver_samples(self) -> Columns:
        """Every driver sample in time order, as (times, watts): the columns as they are when
        their times only grow (tens of thousands per GPU-hour: no object per sample)."""
        if self._joined is None:
            times, watts = array("q"), array("d")
            for part in self.sample_columns:
                times.extend(part.time)
                watts.extend(part.watts)
            if self.samples or not _increasing(self.sample_columns, times):
                pairs = sorted([*self.samples, *zip(times, watts, strict=True)])
                times, watts = array("q", [t for t, _ in pairs]), array("d", [w for _, w in pairs])
            self._joined = (times, watts)
        return self._joined

    def power_around(self, a: int, b: int) -> Columns:
        """The power readings and samples in time order (at one time by power), as (times,
        watts), from the last time at or before ``a`` to the first at or after ``b``: what any
        clip within [a, b] reads (the edges of a run, not its whole length of samples)."""
        times, watts = self.driver_samples()
        if self._extra is None:
            self._extra = sorted(self.power + self.readings)
        extra = self._extra
        lo = max(_last_at_or_before(times, a), _last_at_or_before(extra, a, _TIME))
        hi = min(_first_at_or_after(times, b), _first_at_or_after(extra, b, _TIME))
        i, j = bisect.bisect_left(times, lo), bisect.bisect_right(times, hi)
        near = extra[
            bisect.bisect_left(extra, lo, key=_TIME) : bisect.bisect_right(extra, hi, key=_TIME)
        ]
        return _merged_in(times[i:j], watts[i:j], near) if near else (times[i:j], watts[i:j])


_TIME = operator.itemgetter(0)


def _last_at_or_before(series: Sequence[Any], t: int, key: Any = None) -> float:
    """The last time at or before ``t`` of a series in time order (``key``: an item's time),
    -inf when none is."""
    k = bisect.bisect_right(series, t, key=key)
    return (key(series[k - 1]) if key else series[k - 1]) if k else -math.inf


def _first_at_or_after(series: Sequence[Any], t: int, key: Any = None) -> float:
    """The first time at or after ``t`` (+inf when none is)."""
    k = bisect.bisect_left(series, t, key=key)
    return (key(series[k]) if key else series[k]) if k < len(series) else math.inf


def _merged_in(times: array[int], watts: array[float], extra: list[tuple[int, float]]) -> Columns:
    """``times``/``watts`` (in (time, watts) order) with the ``extra`` readings (sorted) in their
    places, as sorting all the pairs puts them: the runs of samples between two readings are
    copied whole (a GPU's readings are a second apart, its driver samples 20 ms)."""
    out_t, out_w = array("q"), array("d")
    at = 0
    for t, w in extra:
        k = bisect.bisect_left(times, t, at)
        while k < len(times) and times[k] == t and watts[k] < w:
            k += 1  # at one time, by power
        out_t += times[at:k]
        out_w += watts[at:k]
        out_t.append(t)
        out_w.append(w)
        at = k
    out_t += times[at:]
    out_w += watts[at:]
    return out_t, out_w


def readings_by_source(
    points: Iterable[Point], wall_channel: int, samples: Iterable[DriverSamples] = ()
) -> dict[tuple[str, str], Series]:
    """Each (host, source)'s readings from ``points`` (and the driver ``samples`` read as
    columns). Points are taken series by series (the points of a stored series share one tags
    mapping, whose source is worked out once); every consumer sorts a source's readings."""
    series: dict[tuple[str, str], Series] = defaultdict(Series)
    groups: dict[tuple[str, int], tuple[Mapping[str, str], list[Point]]] = {}
    for p in points:
        if p.measurement in _READINGS:
            of = (p.measurement, id(p.tags))  # the points keep their tags alive meanwhile
            if (group := groups.get(of)) is None:
                group = groups[of] = (p.tags, [])
            group[1].append(p)
    for (measurement, _), (tags, pts) in groups.items():
        host = tags.get("host", "")
        if measurement == "gpu_sample":
            power = [(p.time_ns, p.fields.get("power_watts")) for p in pts]
            if found := [(t, float(w)) for t, w in power if is_number(w)]:  # type: ignore[arg-type]
                series[(host, _gpu(tags))].samples.extend(found)
        elif source := source_fields(measurement, tags, wall_channel):
            _readings(series, (host, source.source), pts, source.counter, source.power)
    for d in samples:
        series[(d.tags.get("host", ""), _gpu(d.tags))].sample_columns.append(d)
    return series


def _gpu(tags: Mapping[str, str]) -> str:
    """The source a GPU's driver samples shape: its ``gpu`` points' (``nvml:<index>``)."""
    return source_fields("gpu", tags).source  # type: ignore[union-attr]


_READINGS = frozenset(("rapl", "gpu", "emonpi", "gpu_sample"))


def _readings(
    series: dict[tuple[str, str], Series],
    key: tuple[str, str],
    points: list[Point],
    counter: str | None,
    power: str | None,
) -> None:
    """One series' points into its source's counter readings (with the power beside them) or,
    without a counter reading, its power readings."""
    if counter is not None and _every_counter(series, key, points, counter):
        return
    counted, readings, powers = [], [], []
    for p in points:
        fields, t = p.fields, p.time_ns
        if counter is not None and is_number(joules := fields.get(counter)):
            counted.append((t, float(joules)))  # type: ignore[arg-type]
            if is_number(reading := fields.get("power_watts")):
                readings.append((t, float(reading)))  # type: ignore[arg-type]
        elif power is not None and is_number(watts := fields.get(power)):
            powers.append((t, float(watts)))  # type: ignore[arg-type]
    if counted or powers:
        s = series[key]
        s.counter += counted
        s.readings += readings
        s.power += powers


def _every_counter(
    series: dict[tuple[str, str], Series], key: tuple[str, str], points: list[Point], counter: str
) -> bool:
    """:func:`_readings` of a series whose every point has its counter (a collector's series):
    column by column, at C speed; False (nothing taken) otherwise."""
    joules = [p.fields.get(counter) for p in points]
    if not joules or not all_numbers(joules):
        return False
    times = [p.time_ns for p in points]
    watts = as_numbers([p.fields.get("power_watts") for p in points])
    s = series[key]
    s.counter += zip(times, map(float, joules), strict=True)  # type: ignore[arg-type]
    s.readings += [(t, w) for t, w in zip(times, watts, strict=True) if w is not None]
    return True


def _increasing(parts: Sequence[DriverSamples], times: Sequence[int]) -> bool:
    """Whether ``times`` (the parts' joined) only grow: at the parts' joins alone when each part
    is known to (an index records it), else by a pass."""
    if not all(p.increasing for p in parts):
        return strictly_increasing(times)
    ends = [(p.time[0], p.time[-1]) for p in parts if len(p.time)]
    return all(end < start for (_, end), (start, _) in itertools.pairwise(ends))


def continuous(samples: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """A counter made continuous across collector restarts (a decrease starts from 0 again:
    the interval of the restart itself is lost, not counted negative)."""
    samples.sort()
    out: list[tuple[int, float]] = []
    offset = 0.0
    prev = None
    for t, v in samples:
        if prev is not None and v < prev:
            offset = out[-1][1] - v
        if out and t <= out[-1][0]:
            continue
        out.append((t, v + offset))
        prev = v
    return out


def _at(series: list[tuple[int, float]], t: int) -> float:
    """Linear interpolation inside the series (``t`` within its span)."""
    i = bisect.bisect_left(series, (t, -math.inf))
    if series[i][0] == t:
        return series[i][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _at_columns(times: Sequence[int], watts: Sequence[float], t: int) -> float:
    """:func:`_at` of a series as columns."""
    i = bisect.bisect_left(times, t)
    if times[i] == t:
        return watts[i]
    t0, t1, w0, w1 = times[i - 1], times[i], watts[i - 1], watts[i]
    return w0 + (w1 - w0) * (t - t0) / (t1 - t0)


def _clip_columns(times: array[int], watts: array[float], start: int, end: int) -> Columns | None:
    """:func:`_clip` of a series as columns (arrays: a clip of a GPU's driver samples is tens of
    thousands of them, copied without an object each)."""
    a, b = max(start, times[0]), min(end, times[-1])
    if b <= a:
        return None
    lo = bisect.bisect_right(times, a)
    hi = bisect.bisect_left(times, b, lo)
    at = _at_columns
    edges = array("d", [at(times, watts, a), at(times, watts, b)])
    clipped_t = array("q", [a]) + times[lo:hi] + array("q", [b])
    return clipped_t, edges[:1] + watts[lo:hi] + edges[1:]


def _clip(series: list[tuple[int, float]], start: int, end: int) -> list[tuple[int, float]] | None:
    """The series inside [start, end], with interpolated points at the edges it brackets."""
    a, b = max(start, series[0][0]), min(end, series[-1][0])
    if b <= a:
        return None
    lo = bisect.bisect_right(series, (a, math.inf))  # the series is in time order
    hi = bisect.bisect_left(series, (b, -math.inf), lo)
    return [(a, _at(series, a)), *series[lo:hi], (b, _at(series, b))]


def _trapezoid(series: list[tuple[int, float]]) -> float:
    return _trapezoid_columns([t for t, _ in series], [v for _, v in series])


def _rough_integral(times: Sequence[int], watts: Sequence[float]) -> float:
    """:func:`_trapezoid_columns` summed as Σ v_i × (t_i+1 − t_i−1) (each reading times the
    span of its two neighbours; the ends with their one), halved and scaled once at the end:
    two passes instead of five, its rounding differs in the last bits. For an error estimate
    (a minute of driver samples beside an edge), never for an energy figure. At least two readings (a
    clip of them, which has its two edges)."""
    inner: float = sum(map(operator.mul, watts[1:-1], map(operator.sub, times[2:], times)))
    ends = watts[0] * (times[1] - times[0]) + watts[-1] * (times[-1] - times[-2])
    return (inner + ends) / 2 / _NS


def _trapezoid_columns(times: Sequence[int], watts: Sequence[float]) -> float:
    """Σ (v0 + v1) / 2 × (t1 − t0) / 1e9 over consecutive readings, in order (``map`` over
    columns: a GPU's driver samples are hundreds of thousands)."""
    halves = map(operator.truediv, map(operator.add, watts, watts[1:]), repeat(2))
    spans = map(operator.sub, times[1:], times)
    total: float = sum(map(operator.truediv, map(operator.mul, halves, spans), repeat(_NS)))
    return total


def source_energy(
    host: str, name: str, series: Series, pieces: Sequence[tuple[int, int]]
) -> SourceEnergy | None:
    use_counter = len(series.counter) >= 2
    raw = series.continuous_counter() if use_counter else sorted(series.power)
    if len(raw) < 2:
        return None
    energy = span = 0.0
    edges = [0.0, 0.0, 0.0]  # J, s and error bar (J) of the parts beyond the counter's readings
    peaks = []
    for start, end in pieces:
        data = _clip(raw, start, end)
        if data is not None:
            joules, peak = _piece(series, raw, data, (start, end), use_counter)
            energy, span = energy + joules, span + (data[-1][0] - data[0][0]) / _NS
            peaks.append(peak)
            if use_counter and (start < data[0][0] or data[-1][0] < end):
                more = counter_edges(series.power_around, data, (start, end))
                edges = [x + y for x, y in zip(edges, more, strict=True)]
    if not peaks:
        return None
    origin = (
        "energy_joules counter, differenced"
        if use_counter
        else "power readings, integrated by trapezoids"
    )
    mean = energy / span  # span > 0: there is a clip (peaks), and a clip's two ends differ
    uncovered = max(sum(b - a for a, b in pieces) / _NS - span - edges[1], 0.0)
    error = mean * uncovered + edges[2]
    if edges[1]:
        origin += ", power readings beyond it"
        mean = (energy + edges[0]) / (span + edges[1])
    return SourceEnergy(name, energy + edges[0], mean, max(peaks), error, host, True, origin)


def _piece(
    series: Series,
    raw: list[tuple[int, float]],
    data: list[tuple[int, float]],
    window: tuple[int, int],
    use_counter: bool,
) -> tuple[float, float]:
    """Energy and peak power of one clipped stretch of a series. The peak is the largest power
    seen: an instant reading inside, or the mean power between two consecutive samples (so
    it is never below the mean over the stretch, which those intervals make up)."""
    start, end = window
    if not use_counter:
        return _trapezoid(data), max(v for _, v in data)
    deltas = [(v1 - v0) / ((t1 - t0) / _NS) for (t0, v0), (t1, v1) in itertools.pairwise(data)]
    inside = [w for t, w in series.readings if start <= t <= end]
    linear = data[-1][1] - data[0][1]
    peak = max([*inside, *deltas])
    return shaped_counter(raw, series.driver_samples(), data[0][0], data[-1][0], linear), peak


def shaped_counter(
    counter: list[tuple[int, float]],
    samples: tuple[Sequence[int], Sequence[float]],
    a: int,
    b: int,
    linear: float,
) -> float:
    """The counter's gain over [a, b] with an edge inside a reading interval given that
    interval's energy in proportion to the power samples' energy there, not to its time (a
    GPU going idle at the window's end); ``linear`` without samples covering it."""
    st, sw = samples
    if not st:
        return linear
    times, joules = [t for t, _ in counter], [v for _, v in counter]
    shaped = shaped_energy(times, joules, st, sw, a, b)
    return linear if shaped is None else shaped


def counter_edges(
    power_around: Callable[[int, int], Columns],
    data: list[tuple[int, float]],
    window: tuple[int, int],
) -> tuple[float, float, float]:
    """The window's parts outside the counter readings' span (a counter read less often than
    power, as NVML's energy counter is): their energy from the power readings there (J), the
    seconds those cover, and an error bar (J): each part's energy times the readings' relative
    error against the counter over the counter readings next to it (up to a minute of them:
    what the readings miss where the part is, at a cost that does not grow with the run).
    ``power_around(a, b)``: the power readings that clips within [a, b] read
    (:meth:`Series.power_around`)."""
    first, last = data[0][0], data[-1][0]
    energy = covered = error = 0.0
    for a, b, beside in (
        (window[0], first, _beside(data, 0)),
        (last, window[1], _beside(data, -1)),
    ):
        power = power_around(min(a, beside[0][0]), max(b, beside[1][0]))
        if not len(power[0]):  # no power readings (one brackets nothing: no clip either)
            continue
        if (part := _clip_columns(*power, a, b)) is not None:  # None where b <= a too
            joules = _trapezoid_columns(*part)
            energy += joules
            covered += (part[0][-1] - part[0][0]) / _NS
            error += _relative_error(power, beside) * joules
    if not covered:
        return 0.0, 0.0, 0.0
    return energy, covered, error


_BESIDE_NS = 60 * 10**9
"""How much of the counter's readings next to an edge its power readings are checked against."""


def _beside(
    data: list[tuple[int, float]], edge: int
) -> tuple[tuple[int, float], tuple[int, float]]:
    """The counter readings (first, last) of up to :data:`_BESIDE_NS` from the first
    (``edge`` 0) or the last reading (-1) of ``data`` inward, ending on a reading."""
    if edge == 0:
        k = bisect.bisect_left(data, (data[0][0] + _BESIDE_NS, -math.inf))
        return data[0], data[min(k, len(data) - 1)]
    k = bisect.bisect_right(data, (data[-1][0] - _BESIDE_NS, math.inf)) - 1
    return data[max(k, 0)], data[-1]


def _relative_error(power: Columns, readings: tuple[tuple[int, float], tuple[int, float]]) -> float:
    """How far the power readings' integral strays from the counter between two of its
    readings, relative to the counter's gain (1 when that cannot be told)."""
    (first, first_j), (last, last_j) = readings
    reference = _clip_columns(*power, first, last)
    counted = last_j - first_j
    if reference is None or counted <= 0:
        return 1.0
    return abs(_rough_integral(*reference) / counted - 1)


def pieces(window: tuple[int, int], exclude: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``window`` less the ``exclude`` intervals: the stretches of it that count."""
    start, end = window
    out = []
    for a, b in sorted(exclude):
        a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        if a > start:
            out.append((start, a))
        start = b
    if end > start:
        out.append((start, end))
    return out
