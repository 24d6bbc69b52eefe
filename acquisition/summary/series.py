"""A source's energy over any interval in O(log n): its readings as a cumulative energy curve.

A counter (``energy_joules``, made continuous across restarts) is the curve itself, linear
between samples; power readings are integrated by trapezoids, the power linear between samples.
An interval is clipped to the samples' span (energy outside it is not known).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

from acquisition.processors.energy import shaped_energy

__all__ = [
    "Cumulative",
    "at",
    "clip",
    "continuous",
    "counter_edges",
    "shaped_counter",
    "trapezoid",
]

_NS = 1e9


class Cumulative:
    """Cumulative energy (J) of one source against time (Unix ns)."""

    __slots__ = ("_cum", "_power", "_times")

    def __init__(self, times: list[int], cum: list[float], power: Sequence[float] | None) -> None:
        self._times = times
        self._cum = cum
        self._power = power
        """The power readings when the curve integrates them (None: a counter)."""

    @classmethod
    def counter(cls, samples: list[tuple[int, float]]) -> Cumulative:
        """From a continuous counter's (time, J) samples, in time order."""
        return cls([t for t, _ in samples], [v for _, v in samples], None)

    @classmethod
    def power(cls, samples: list[tuple[int, float]]) -> Cumulative:
        """From (time, W) readings in time order, integrated by trapezoids."""
        times = [t for t, _ in samples]
        watts = [w for _, w in samples]
        cum = [0.0]
        for (t0, w0), (t1, w1) in itertools.pairwise(samples):
            cum.append(cum[-1] + (w0 + w1) / 2 * (t1 - t0) / _NS)
        return cls(times, cum, watts)

    def _at(self, t: int) -> float:
        times, cum = self._times, self._cum
        i = bisect.bisect_right(times, t) - 1
        if i >= len(times) - 1:
            return cum[-1]
        t0, t1 = times[i], times[i + 1]
        if t1 == t0:
            return cum[i]
        frac = (t - t0) / (t1 - t0)
        if self._power is None:
            return cum[i] + (cum[i + 1] - cum[i]) * frac
        w0, w1 = self._power[i], self._power[i + 1]
        wt = w0 + (w1 - w0) * frac
        return cum[i] + (w0 + wt) / 2 * (t - t0) / _NS

    def energy(self, start: int, end: int) -> float | None:
        """Joules in [start, end] clipped to the samples' span; None when they do not meet."""
        if len(self._times) < 2:
            return None
        a, b = max(start, self._times[0]), min(end, self._times[-1])
        if b <= a:
            return None
        return self._at(b) - self._at(a)


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


def at(series: list[tuple[int, float]], t: int) -> float:
    """Linear interpolation inside the series (``t`` within its span)."""
    i = bisect.bisect_left(series, (t, -math.inf))
    if i < len(series) and series[i][0] == t:
        return series[i][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def clip(series: list[tuple[int, float]], start: int, end: int) -> list[tuple[int, float]] | None:
    """The series inside [start, end], with interpolated points at the edges it brackets."""
    a, b = max(start, series[0][0]), min(end, series[-1][0])
    if b <= a:
        return None
    inner = [(t, v) for t, v in series if a < t < b]
    return [(a, at(series, a)), *inner, (b, at(series, b))]


def trapezoid(series: list[tuple[int, float]]) -> float:
    """Joules of (time ns, W) readings, the power linear between them."""
    return sum((v0 + v1) / 2 * (t1 - t0) / _NS for (t0, v0), (t1, v1) in itertools.pairwise(series))


def shaped_counter(
    counter: list[tuple[int, float]],
    samples: list[tuple[int, float]],
    a: int,
    b: int,
    linear: float,
) -> float:
    """The counter's gain over [a, b] with an edge inside a reading interval given that
    interval's energy in proportion to the power samples' energy there, not to its time (a
    GPU going idle at the window's end); ``linear`` without samples covering it."""
    if not samples:
        return linear
    samples.sort()
    times, joules = [t for t, _ in counter], [v for _, v in counter]
    st, sw = [t for t, _ in samples], [w for _, w in samples]
    shaped = shaped_energy(times, joules, st, sw, a, b)
    return linear if shaped is None else shaped


def counter_edges(
    power: list[tuple[int, float]], data: list[tuple[int, float]], window: tuple[int, int]
) -> tuple[float, float, float]:
    """The window's parts outside the counter readings' span (a counter read less often than
    power, as NVML's energy counter is): their energy from the power readings there (J), the
    seconds those cover, and an error bar (J): the readings' relative error against the counter
    over the counter's span, applied to that energy."""
    if len(power) < 2:
        return 0.0, 0.0, 0.0
    (first, first_j), (last, last_j) = data[0], data[-1]
    energy = covered = 0.0
    for a, b in ((window[0], first), (last, window[1])):
        part = clip(power, a, b) if b > a else None
        if part is not None:
            energy += trapezoid(part)
            covered += (part[-1][0] - part[0][0]) / _NS
    if not covered:
        return 0.0, 0.0, 0.0
    reference = clip(power, first, last)
    counted = last_j - first_j
    relative = abs(trapezoid(reference) / counted - 1) if reference and counted > 0 else 1.0
    return energy, covered, relative * energy
