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
from collections.abc import Sequence
from dataclasses import dataclass, field

from acquisition.summary.model import SourceEnergy

__all__ = ["Series", "continuous", "pieces", "source_energy"]

_NS = 1e9


@dataclass
class Series:
    """One (host, source)'s readings: a cumulative counter, or power readings."""

    counter: list[tuple[int, float]] = field(default_factory=list)
    power: list[tuple[int, float]] = field(default_factory=list)
    readings: list[tuple[int, float]] = field(default_factory=list)
    """Instantaneous power readings (``power_watts``) beside a counter, for the peak."""


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
    if i < len(series) and series[i][0] == t:
        return series[i][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _clip(series: list[tuple[int, float]], start: int, end: int) -> list[tuple[int, float]] | None:
    """The series inside [start, end], with interpolated points at the edges it brackets."""
    a, b = max(start, series[0][0]), min(end, series[-1][0])
    if b <= a:
        return None
    inner = [(t, v) for t, v in series if a < t < b]
    return [(a, _at(series, a)), *inner, (b, _at(series, b))]


def _trapezoid(series: list[tuple[int, float]]) -> float:
    return sum((v0 + v1) / 2 * (t1 - t0) / _NS for (t0, v0), (t1, v1) in itertools.pairwise(series))


def source_energy(
    host: str, name: str, series: Series, pieces: Sequence[tuple[int, int]]
) -> SourceEnergy | None:
    use_counter = len(series.counter) >= 2
    raw = continuous(series.counter) if use_counter else sorted(series.power)
    if len(raw) < 2:
        return None
    energy = span = 0.0
    peaks = []
    for start, end in pieces:
        data = _clip(raw, start, end)
        if data is not None:
            joules, peak = _piece(series, data, (start, end), use_counter)
            energy, span = energy + joules, span + (data[-1][0] - data[0][0]) / _NS
            peaks.append(peak)
    if not peaks:
        return None
    origin = (
        "energy_joules counter, differenced"
        if use_counter
        else "power readings, integrated by trapezoids"
    )
    mean = energy / span if span > 0 else None
    uncovered = max(sum(b - a for a, b in pieces) / _NS - span, 0.0)
    error = mean * uncovered if mean is not None else None
    return SourceEnergy(name, energy, mean, max(peaks), error, host, True, origin)


def _piece(
    series: Series, data: list[tuple[int, float]], window: tuple[int, int], use_counter: bool
) -> tuple[float, float]:
    """Energy and peak power of one clipped stretch of a series. The peak is the largest power
    seen: an instant reading inside, or the mean power between two consecutive samples (so
    it is never below the mean over the stretch, which those intervals make up)."""
    start, end = window
    if not use_counter:
        return _trapezoid(data), max(v for _, v in data)
    deltas = [(v1 - v0) / ((t1 - t0) / _NS) for (t0, v0), (t1, v1) in itertools.pairwise(data)]
    inside = [w for t, w in series.readings if start <= t <= end]
    return data[-1][1] - data[0][1], max([*inside, *deltas])


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
