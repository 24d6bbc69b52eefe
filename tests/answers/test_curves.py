"""A source's cumulative-energy curve (:class:`acquisition.summary.series.Cumulative`): the
energies of many spans at once, as a distributed run's summary asks for every global step, are
exactly the energy of each span asked one by one."""

from __future__ import annotations

import itertools
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition.point import Point
from acquisition.summary.columns import DriverSamples
from acquisition.summary.series import Cumulative
from acquisition.summary.source_energy import Series, _rough_integral, readings_by_source

NS = 1_000_000_000

times = st.lists(st.integers(0, 50 * NS), min_size=0, max_size=12, unique=True).map(sorted)
loose = st.lists(st.tuples(st.integers(-5 * NS, 60 * NS), st.integers(-5 * NS, 60 * NS)))
cuts = st.lists(st.integers(-5 * NS, 60 * NS)).map(sorted)
chained = cuts.map(lambda c: list(itertools.pairwise(c)))
"""Global steps: each span starts where the last one ended (the curve reuses that figure)."""
spans = st.one_of(loose, chained, st.tuples(chained, loose).map(lambda two: two[0] + two[1]))


@given(times, st.lists(st.floats(0, 500), min_size=12, max_size=12), spans, st.booleans())
def test_energies_of_many_spans_equal_each_span_alone(
    at: list[int], values: list[float], asked: list[tuple[int, int]], counter: bool
) -> None:
    """Guards: a counter's and a power curve's figures per span, clipped to the samples, None
    where a span misses them (before, after, empty or reversed), bit for bit the same."""
    samples = list(zip(at, values, strict=False))
    if counter:
        running, total = [], 0.0
        for t, v in samples:
            total += v
            running.append((t, total))
        curve = Cumulative.counter(running)
    else:
        curve = Cumulative.power(samples)
    assert curve.energies(asked) == [curve.energy(a, b) for a, b in asked]


def test_a_worked_example() -> None:
    """Guards the figures themselves: a counter of 0, 100, 300 J at 0, 1, 2 s; [0.5 s, 1.5 s]
    holds 50 J + 100 J = 150 J (linear within each second); a span past the end is clipped to
    2 s; one wholly after the samples has none."""
    curve = Cumulative.counter([(0, 0.0), (NS, 100.0), (2 * NS, 300.0)])
    spans = [(NS // 2, 3 * NS // 2), (NS, 5 * NS), (3 * NS, 4 * NS)]
    assert curve.energies(spans) == [150.0, 200.0, None]


pairs = st.lists(st.tuples(st.integers(0, 100), st.floats(0, 500)), max_size=6)


@given(st.lists(pairs, max_size=4), pairs)
def test_driver_samples_come_joined_in_time_order(parts: list, points: list) -> None:  # type: ignore[type-arg]
    """Guards: a GPU's driver samples, read as columns in parts (one per file) and as points,
    come back as one series in time order (ties by power), as sorting every (time, W) pair
    gives: kept as they are when the parts' times only grow, sorted otherwise."""
    columns = [
        DriverSamples({}, array("q", [t for t, _ in p]), array("d", [w for _, w in p]))
        for p in parts
    ]
    series = Series(samples=list(points), sample_columns=columns)
    times, watts = series.driver_samples()
    assert list(zip(times, watts, strict=True)) == sorted(points + [x for p in parts for x in p])


def test_driver_samples_in_growing_parts_are_joined_as_they_are() -> None:
    """Guards: parts whose times only grow are joined as they are: 0..2 s then 3..4 s."""
    series = Series(
        sample_columns=[DriverSamples({}, array("q", [0, 1, 2]), array("d", [5, 1, 2]))]
    )
    series.sample_columns.append(DriverSamples({}, array("q", [3, 4]), array("d", [0.5, 9.0])))
    times, watts = series.driver_samples()
    assert (list(times), list(watts)) == ([0, 1, 2, 3, 4], [5.0, 1.0, 2.0, 0.5, 9.0])


def test_driver_samples_at_one_time_are_ordered_by_power() -> None:
    """Guards: two samples at the same time (a re-read) come by power, as sorting the pairs
    puts them, whichever came first."""
    series = Series(
        sample_columns=[DriverSamples({}, array("q", [0, 1, 1, 2]), array("d", [3, 5, 2, 1]))]
    )
    times, watts = series.driver_samples()
    assert (list(times), list(watts)) == ([0, 1, 1, 2], [3.0, 2.0, 5.0, 1.0])


def test_parts_known_to_grow_are_still_sorted_where_they_meet_out_of_order() -> None:
    """Guards: parts an index records as growing (each alone) are trusted inside, not at their
    joins: 0..3 s then 2..4 s (an agent restarted with its clock set back) come sorted; a join
    at the same time (3 s after 3 s) is out of order too."""
    for second in ([2, 4], [3, 4]):
        first = DriverSamples({}, array("q", [0, 1, 3]), array("d", [5, 1, 2]), increasing=True)
        later = DriverSamples({}, array("q", second), array("d", [0.5, 9.0]), increasing=True)
        times, watts = Series(sample_columns=[first, later]).driver_samples()
        pairs = sorted([(0, 5.0), (1, 1.0), (3, 2.0), (second[0], 0.5), (second[1], 9.0)])
        assert list(zip(times, watts, strict=True)) == pairs


@given(st.lists(st.tuples(st.integers(1, 10**9), st.floats(0, 700)), min_size=2, max_size=30))
def test_the_rough_integral_of_driver_samples_is_the_trapezoids(gaps: list) -> None:  # type: ignore[type-arg]
    """Guards: the error estimate's integral of many samples (each reading times its two
    neighbours' span) is the trapezoids' sum, ends included, within rounding."""
    times = list(itertools.accumulate(g for g, _ in gaps))
    watts = [w for _, w in gaps]
    by_hand = sum(
        (w0 + w1) / 2 * (t1 - t0) / NS
        for (t0, w0), (t1, w1) in itertools.pairwise(zip(times, watts, strict=True))
    )
    assert _rough_integral(times, watts) == pytest.approx(by_hand, rel=1e-12, abs=1e-12)


class Watts(float):
    """A float subclass (as numpy's float64 is): a number, not a plain float."""


def test_a_sources_readings_are_taken_whatever_the_fields_types() -> None:
    """Guards: a GPU's counter readings and the power beside them are taken in order, each
    as a float, whether every point has plain numbers (a collector's series, taken column by
    column) or not: a reading without a power, a power of a float subclass, a bool that is
    no number, a point without its counter (its power then counts as a power reading)."""
    tags = {"host": "h", "gpu": "0", "uuid": "GPU-1"}
    plain = [
        Point("gpu", tags, {"energy_joules": 10 * k, "power_watts": 5.0 * k}, k) for k in (1, 2)
    ]
    got = readings_by_source(plain, wall_channel=1)[("h", "nvml:0")]
    assert (got.counter, got.readings, got.power) == (
        [(1, 10.0), (2, 20.0)],
        [(1, 5.0), (2, 10.0)],
        [],
    )
    assert all(type(v) is float for _, v in got.counter)
    a, b = dict(tags), dict(tags)  # two stored series of one GPU (each its own mapping)
    mixed = [
        Point("gpu", a, {"energy_joules": 10, "power_watts": Watts(5.5)}, 1),
        Point("gpu", a, {"energy_joules": 20.0}, 2),
        Point("gpu", a, {"energy_joules": 30, "power_watts": True}, 3),
        Point("gpu", b, {"energy_joules": Watts(40.0), "power_watts": 6}, 4),
        Point("gpu", b, {"power_watts": 7.0}, 5),
    ]
    got = readings_by_source(mixed, wall_channel=1)[("h", "nvml:0")]
    assert got.counter == [(1, 10.0), (2, 20.0), (3, 30.0), (4, 40.0)]
    assert got.readings == [(1, 5.5), (4, 6.0)]
    assert got.power == [(5, 7.0)]
    assert {type(v) for _, v in got.counter + got.readings + got.power} == {float}


@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from([1.0, 2.0, 3.0])), max_size=30),
    st.lists(st.tuples(st.integers(-5, 45), st.sampled_from([1.5, 2.0, 3.5])), max_size=12),
)
def test_power_readings_go_among_the_driver_samples_as_sorting_puts_them(
    samples: list[tuple[int, float]], readings: list[tuple[int, float]]
) -> None:
    """Guards: a GPU's power readings (a second apart) put among its driver samples give the
    series sorting every pair would: in time order, at one time by power, before the first
    sample and after the last too, none lost."""
    series = Series(samples=list(samples), readings=list(readings))
    times, watts = series.power_around(-10, 50)  # beyond every time
    assert list(zip(times, watts, strict=True)) == sorted(samples + readings)


@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from([1.0, 2.0])), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(-5, 45), st.sampled_from([1.5, 2.0])), max_size=12),
    st.integers(-8, 48),
    st.integers(0, 20),
)
def test_the_power_around_a_window_is_all_its_clips_read(
    samples: list[tuple[int, float]], readings: list[tuple[int, float]], a: int, width: int
) -> None:
    """Guards: the power a clip of [a, b] reads is the sorted readings and samples from the last
    time at or before a to the first at or after b, every pair at those two times included (at
    one time the first by power is the one a clip interpolates from): nothing inside left out,
    whichever kind comes nearer to each edge."""
    b = a + width
    series = Series(samples=list(samples), readings=list(readings))
    every = sorted(samples + readings)
    times = [t for t, _ in every]
    lo = max([t for t in times if t <= a], default=times[0])
    hi = min([t for t in times if t >= b], default=times[-1])
    got = series.power_around(a, b)
    assert list(zip(*got, strict=True)) == [(t, w) for t, w in every if lo <= t <= hi]
