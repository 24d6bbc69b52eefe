"""The integration and interpolation of the attribution against an exact oracle: a piecewise
linear curve through the samples, integrated in fractions over every breakpoint. Held energy
extends the curve flat beyond its first and last sample; the other functions refuse there.

Times are ns, powers W, energies J (W·ns / 10⁹)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from acquisition.processors.energy import (
    counter_energy,
    held_energy,
    interpolate,
    shaped_energy,
    split_energy,
    trapezoid_energy,
)

NS = 10**9


def value_at(times: list[int], values: list[int], t: int) -> Fraction:
    """The curve at ``t``, flat before the first and after the last sample."""
    if t <= times[0]:
        return Fraction(values[0])
    if t >= times[-1]:
        return Fraction(values[-1])
    i = next(i for i in range(1, len(times)) if times[i] >= t)
    t0, t1, v0, v1 = times[i - 1], times[i], values[i - 1], values[i]
    return v0 + Fraction(v1 - v0) * (t - t0) / (t1 - t0)


def integral(times: list[int], watts: list[int], start: int, end: int) -> Fraction:
    """∫ power dt over [start, end] in J: trapezoids between every breakpoint are exact on a
    piecewise-linear curve."""
    if end <= start:
        return Fraction(0)
    cuts = sorted({start, end, *(t for t in times if start < t < end)})
    total = Fraction(0)
    for a, b in itertools.pairwise(cuts):
        total += (value_at(times, watts, a) + value_at(times, watts, b)) / 2 * (b - a)
    return total / NS


@st.composite
def curves(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Strictly increasing times (ns, 1 ms to 2 s apart) and integer powers (W)."""
    n = draw(st.integers(1, 8))
    gaps = draw(st.lists(st.integers(10**6, 2 * NS), min_size=n - 1, max_size=n - 1))
    times = [5 * NS]
    for g in gaps:
        times.append(times[-1] + g)
    watts = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n))
    return times, watts


def close(got: float | None, want: Fraction) -> bool:
    return got is not None and math.isclose(got, float(want), rel_tol=1e-9, abs_tol=1e-9)


@given(curves(), st.integers(0, 30 * NS), st.integers(0, 30 * NS))
@example(([5 * NS, 6 * NS], [100, 300]), 8 * NS, 9 * NS)  # wholly after the last sample: 300 J
@example(([5 * NS, 6 * NS], [100, 300]), 1 * NS, 2 * NS)  # wholly before the first: 100 J
def test_held_energy_is_the_integral_of_the_held_curve(
    curve: tuple[list[int], list[int]], start: int, end: int
) -> None:
    """Guards: held energy is exactly the integral of the samples' curve held flat at its first
    and last values, for a window anywhere (before, across or after the samples), and 0 for an
    empty or reversed window."""
    times, watts = curve
    got = held_energy(times, [float(w) for w in watts], start, end)
    assert close(got, integral(times, watts, start, end))


@given(curves(), st.integers(0, 30 * NS), st.integers(0, 30 * NS))
def test_trapezoids_inside_the_samples_and_none_outside(
    curve: tuple[list[int], list[int]], a: int, b: int
) -> None:
    """Guards: the trapezoid energy of a window the samples bracket is the integral of their
    curve (the pieces at both edges included); a window reaching outside gives None."""
    times, watts = curve
    start, end = min(a, b), max(a, b)
    got = trapezoid_energy(times, [float(w) for w in watts], start, end)
    if start < times[0] or end > times[-1]:
        assert got is None
    else:
        assert close(got, integral(times, watts, start, end))


@given(curves(), st.integers(0, 30 * NS), st.integers(0, 30 * NS))
def test_a_counter_gains_its_interpolated_difference(
    curve: tuple[list[int], list[int]], a: int, b: int
) -> None:
    """Guards: a cumulative counter's energy over a bracketed window is its value interpolated
    at the end minus at the start (both edges inclusive: a window on the very first or last
    reading is bracketed); None outside."""
    times, steps = curve
    joules: list[int] = []
    for s in steps:  # cumulative: each reading adds a non-negative amount
        joules.append((joules[-1] if joules else 1000) + s)
    start, end = min(a, b), max(a, b)
    got = counter_energy(times, [float(j) for j in joules], start, end)
    if start < times[0] or end > times[-1]:
        assert got is None
    else:
        want = value_at(times, joules, end) - value_at(times, joules, start)
        assert close(got, want)
    # the edges themselves: the counter's first and last readings
    whole = counter_energy(times, [float(j) for j in joules], times[0], times[-1])
    assert whole == joules[-1] - joules[0]


@given(curves(), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_counter_without_power_samples_gains_its_straight_line_difference(
    curve: tuple[list[int], list[int]], a: int, b: int
) -> None:
    """Guards: with no power samples to shape it, a counter's energy over any window inside its
    readings (``a`` and ``b`` in millionths of their span) is the straight line between
    readings: its interpolated value at the end minus at the start."""
    times, steps = curve
    joules: list[int] = []
    for s in steps:
        joules.append((joules[-1] if joules else 1000) + s)
    span = times[-1] - times[0]
    start, end = sorted(times[0] + span * x // 10**6 for x in (a, b))
    got = shaped_energy(times, [float(j) for j in joules], [], [], start, end)
    assert close(got, value_at(times, joules, end) - value_at(times, joules, start))


@settings(max_examples=20)  # the example below is the case that matters; keep it fast
@given(curves(), st.integers(0, 10**6), st.integers(0, 10**6))
@example(([5 * NS, 5 * NS + 10**7], [10, 90]), 0, 500_000)  # an interval of 0.5 J: 0.15 J
def test_a_counter_shaped_by_its_power_samples_gains_their_integral(
    curve: tuple[list[int], list[int]], a: int, b: int
) -> None:
    """Guards: a counter read at each power sample's time, each reading the integral of the
    samples' curve so far, gains over any window inside its readings (``a`` and ``b`` in
    millionths of their span) exactly that integral: between two readings the samples shape
    it, however little energy the interval holds (10 W to 90 W over 10 ms is 0.5 J; its first
    5 ms, from 10 W to 50 W, (10 + 50) / 2 × 0.005 = 0.15 J, not half of 0.5 J)."""
    times, watts = curve
    joules = [float(1000 + integral(times, watts, times[0], t)) for t in times]
    span = times[-1] - times[0]
    start, end = sorted(times[0] + span * x // 10**6 for x in (a, b))
    floats = [float(w) for w in watts]
    got = shaped_energy(times, joules, times, floats, start, end)
    assert close(got, integral(times, watts, start, end))


@given(curves(), st.integers(0, 30 * NS))
def test_interpolate_on_and_between_samples(curve: tuple[list[int], list[int]], t: int) -> None:
    """Guards: interpolation gives each sample's own value at its time (first and last
    included), the straight line between samples, and None outside their span."""
    times, values = curve
    floats = [float(v) for v in values]
    for ti, v in zip(times, floats, strict=True):
        assert interpolate(times, floats, ti) == v
    got = interpolate(times, floats, t)
    if t < times[0] or t > times[-1]:
        assert got is None
    else:
        assert close(got, value_at(times, values, t))


@given(
    st.integers(0, 10_000),
    st.integers(1, 100),
    st.lists(st.integers(0, 100), min_size=1, max_size=5),
)
def test_split_gives_each_module_its_time_at_the_mean_power(
    energy: int, duration: int, times: list[int]
) -> None:
    """Guards: a module's share is the step's energy times its time over the step's duration
    (its time at the step's mean power), or over the modules' summed time when that exceeds the
    step (overlapping calls); the rest is what is left. Durations in tenths of a second."""
    weights = {(f"m{i}", "forward"): t / 10 for i, t in enumerate(times)}
    shares, rest = split_energy(float(energy), duration / 10, weights)
    denom = max(duration, sum(times))
    for i, t in enumerate(times):
        assert close(shares[(f"m{i}", "forward")], Fraction(energy * t, denom))
    assert close(rest, Fraction(energy) - sum(Fraction(energy * t, denom) for t in times))
