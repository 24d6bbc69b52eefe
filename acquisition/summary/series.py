"""A source's energy over any interval in O(log n): its readings as a cumulative energy curve.

A counter (``energy_joules``, made continuous across restarts) is the curve itself, linear
between samples; power readings are integrated by trapezoids, the power linear between samples.
An interval is clipped to the samples' span (energy outside it is not known).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

__all__ = ["Cumulative"]

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

    def energies(self, spans: Sequence[tuple[int, int]]) -> list[float | None]:
        """:meth:`energy` of each span, in one call (a distributed run asks for every global
        step)."""
        times = self._times
        if len(times) < 2:
            return [None] * len(spans)
        first, last, at, cum, power = times[0], times[-1], self._at, self._cum, self._power
        out: list[float | None] = []
        known_t, known = None, 0.0  # the last span's end: most spans start there
        i, top = 0, len(times) - 1  # times[i] <= the span's end: ends mostly grow, so i walks
        for start, end in spans:
            a, b = max(start, first), min(end, last)
            if b <= a:
                out.append(None)
                continue
            begin = known if a == known_t else at(a)
            if times[i] > b:
                i = bisect.bisect_right(times, b) - 1
            while i < top and times[i + 1] <= b:
                i += 1
            if i == top:  # :meth:`_at` inlined from here: the same figure, without a call
                known = cum[-1]
            else:
                t0 = times[i]
                frac = (b - t0) / (times[i + 1] - t0)
                if power is None:
                    known = cum[i] + (cum[i + 1] - cum[i]) * frac
                else:
                    w0 = power[i]
                    known = cum[i] + (w0 + (w0 + (power[i + 1] - w0) * frac)) / 2 * (b - t0) / _NS
            known_t = b
            out.append(known - begin)
        return out
