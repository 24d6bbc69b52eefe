"""Pure parts of the attribution: source parsing, interpolation, integration, the module split."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from acquisition.point import Point
from acquisition.processors.attribution import (
    SourceSample,
    counter_energy,
    interpolate,
    parse_source,
    split_energy,
    trapezoid_energy,
)
from acquisition.processors.energy import counter_at, edge_error

S = 1_000_000_000
MS = 1_000_000


def test_parse_source_names() -> None:
    rapl = Point("rapl", {"socket": "0", "domain": "package"}, {"energy_joules": 5.0}, 1)
    assert parse_source(rapl) == SourceSample("rapl:package-0", "rapl", "package", True, 5.0)
    die = Point("rapl", {"socket": "1", "domain": "package", "die": "1"}, {"energy_joules": 2}, 1)
    assert parse_source(die) == SourceSample("rapl:package-1-die-1", "rapl", "package", True, 2.0)
    gpu = Point("gpu", {"gpu": "3", "uuid": "GPU-x"}, {"power_watts": 70.5}, 1)
    assert parse_source(gpu) == SourceSample("nvml:3", "gpu", "", False, 70.5)
    gpu_e = Point("gpu", {"gpu": "0"}, {"power_watts": 70.5, "energy_joules": 9.0}, 1)
    assert parse_source(gpu_e) == SourceSample("nvml:0", "gpu", "", True, 9.0)
    wall = Point(
        "emonpi",
        {"node": "5", "layout": "emonpi"},
        {"power1_watts": 120, "power2_watts": 3, "energy1_joules": 7200.0, "energy1_wh": 2},
        1,
    )
    assert parse_source(wall) == SourceSample("emonpi:5", "wall", "", False, 120.0)
    assert parse_source(wall, wall_channel=2) == SourceSample("emonpi:5", "wall", "", False, 3.0)
    assert parse_source(wall, wall_counter=True) == SourceSample(
        "emonpi:5", "wall", "", True, 7200.0
    )
    assert parse_source(Point("rapl", {"domain": "dram"}, {"power_watts": 1.0}, 1)) is None
    assert parse_source(Point("cpu", {}, {"energy_joules": 1.0}, 1)) is None
    assert parse_source(Point("gpu", {"gpu": "0"}, {"power_watts": True}, 1)) is None


def test_interpolate() -> None:
    times, values = [0, 10, 30], [0.0, 1.0, 5.0]
    assert interpolate(times, values, 0) == 0.0
    assert interpolate(times, values, 5) == 0.5
    assert interpolate(times, values, 10) == 1.0
    assert interpolate(times, values, 20) == 3.0
    assert interpolate(times, values, 30) == 5.0
    assert interpolate(times, values, -1) is None
    assert interpolate(times, values, 31) is None
    assert interpolate([], [], 0) is None


def test_counter_energy_interpolates_the_edges() -> None:
    # 10 W constant, sampled every 100 ms: a step from 0.25 s to 0.55 s used exactly 3 J.
    times = [k * S // 10 for k in range(11)]
    joules = [t / S * 10.0 for t in times]
    energy = counter_energy(times, joules, S // 4, 55 * S // 100)
    assert energy is not None and math.isclose(energy, 3.0, rel_tol=1e-12)
    assert counter_energy(times, joules, -1, S) is None
    assert counter_energy(times, joules, 0, S + 1) is None


def test_an_edge_error_spans_the_power_swing_of_both_neighbouring_intervals() -> None:
    """Guards: a step edge's error bar is the largest minus the smallest power over the sample
    interval holding the edge and the intervals on either side, times that interval's length,
    for power samples and for a counter's rates alike.

    Samples each second, power 10, 10, 10, 50, 10 W (a counter: 0, 10, 20, 30, 80, 90 J, rates
    10, 10, 10, 50, 10 W). An edge at 1.5 s lies in [1, 2] s; with its neighbours [0, 1] and
    [2, 3] the power runs from 10 to 50 W: (50 − 10) W × 1 s = 40 J. At 0.5 s the interval
    [0, 1] has one neighbour, [1, 2], all at 10 W: 0 J. The default: every sample."""
    times = [k * S for k in range(5)]
    watts = [10.0, 10.0, 10.0, 50.0, 10.0]
    assert edge_error(times, watts, 3 * S // 2, counter=False) == pytest.approx(40.0)
    assert edge_error(times, watts, S // 2, counter=False) == 0.0
    c_times = [k * S for k in range(6)]
    joules = [0.0, 10.0, 20.0, 30.0, 80.0, 90.0]
    assert edge_error(c_times, joules, 5 * S // 2, counter=True) == pytest.approx(40.0)
    assert edge_error(c_times, joules, S // 2, counter=True) == 0.0
    # An edge on the last sample (4 s; the counter's 5 s) lies in the interval ending there,
    # [3, 4] s, beside [2, 3] s: 10, 50, 10 W (rates 50, 10 W): 40 J; one past it has none: 0.
    # The same with every sample by default, or up to an index at or past the last one (a
    # step that ends after the newest sample).
    for last in (None, len(times), len(c_times), 99):
        assert edge_error(times, watts, 4 * S, False, last) == pytest.approx(40.0)
        assert edge_error(c_times, joules, 5 * S, True, last) == pytest.approx(40.0)
        assert edge_error(times, watts, 9 * S // 2, False, last) == 0.0
        assert edge_error(c_times, joules, 11 * S // 2, True, last) == 0.0


def test_an_edge_error_outside_the_samples_used_is_zero() -> None:
    """Guards: an edge with no sample interval around it has no swing to bound: before the
    first sample, after the last, and after the last of the samples used (``last``); an edge
    exactly on the last sample takes the interval that ends there.

    The same power samples as above (10, 10, 10, 50, 10 W each second): at 4.5 s and −0.5 s,
    0 J; with samples up to index 3 used (3 s), at 3.5 s 0 J although the sample at 4 s
    exists; at 4 s, the interval [3, 4] s and its neighbour [2, 3] s, 10 to 50 W: 40 J. The
    counter (0, 10, 20, 30, 80, 90 J) at 5.5 s and, used up to 4 s, at 4.5 s: 0 J."""
    times = [k * S for k in range(5)]
    watts = [10.0, 10.0, 10.0, 50.0, 10.0]
    assert edge_error(times, watts, 9 * S // 2, counter=False) == 0.0
    assert edge_error(times, watts, -S // 2, counter=False) == 0.0
    assert edge_error(times, watts, 7 * S // 2, counter=False, last=3) == 0.0
    assert edge_error(times, watts, 4 * S, counter=False) == pytest.approx(40.0)
    c_times = [k * S for k in range(6)]
    joules = [0.0, 10.0, 20.0, 30.0, 80.0, 90.0]
    assert edge_error(c_times, joules, 11 * S // 2, counter=True) == 0.0
    assert edge_error(c_times, joules, 9 * S // 2, counter=True, last=4) == 0.0


def test_trapezoid_energy() -> None:
    # Power ramps 0 → 100 W over 1 s: exact integral from 0.2 s to 0.8 s is 50·(0.64 − 0.04) = 30 J;
    # trapezoids are exact on a linear ramp, whatever the sample grid.
    times = [0, S // 4, S]
    watts = [0.0, 25.0, 100.0]
    energy = trapezoid_energy(times, watts, S // 5, 4 * S // 5)
    assert energy is not None and math.isclose(energy, 30.0, rel_tol=1e-12)
    # Between two samples only.
    energy = trapezoid_energy([0, S], [10.0, 10.0], S // 4, S // 2)
    assert energy is not None and math.isclose(energy, 2.5, rel_tol=1e-12)
    assert trapezoid_energy(times, watts, -1, S) is None


def test_split_energy_by_time() -> None:
    shares, rest = split_energy(
        6.0, 0.3, {("fc1", "forward"): 0.1, ("fc1", "backward"): 0.05, ("(root)", "forward"): 0.0}
    )
    assert shares == pytest.approx(
        {("fc1", "forward"): 2.0, ("fc1", "backward"): 1.0, ("(root)", "forward"): 0.0},
        rel=1e-12,
    )
    assert math.isclose(rest, 3.0, rel_tol=1e-12)


def test_split_energy_when_times_exceed_the_step() -> None:
    # Module times summing to more than the interval are scaled to their sum: nothing negative.
    shares, rest = split_energy(4.0, 1.0, {("a", "forward"): 1.5, ("b", "forward"): 0.5})
    assert shares == {("a", "forward"): 3.0, ("b", "forward"): 1.0}
    assert rest == 0.0
    assert split_energy(4.0, 0.0, {}) == ({}, 4.0)


@given(
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    st.floats(min_value=0.0, max_value=100.0, allow_nan=False),
    st.lists(st.floats(min_value=0.0, max_value=10.0, allow_nan=False), max_size=50),
)
@example(1.5, 0.0, [5e-324])  # a subnormal time: an oracle that multiplies first rounds
@example(0.0, 0.0, [0.0])  # no time at all: nothing to split
def test_split_conserves_energy(energy: float, duration: float, times: list[float]) -> None:
    weights = {(f"m{i}", "forward"): t for i, t in enumerate(times)}
    shares, rest = split_energy(energy, duration, weights)
    assert math.isclose(sum(shares.values()) + rest, energy, rel_tol=1e-9, abs_tol=1e-9)
    # Each module: the step's mean power times its time, over the longer of step and module sum.
    denom = max(duration, sum(times))
    # Exact rational arithmetic, so the oracle itself cannot round (subnormal times included).
    expected = (
        {k: float(Fraction(energy) * Fraction(w) / Fraction(denom)) for k, w in weights.items()}
        if denom > 0
        else {}
    )
    assert shares == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert rest >= -1e-9 * max(energy, 1.0)


def test_trapezoids_keep_their_halves_at_the_finest_scale() -> None:
    """Guards: each trapezoid is (Δt × (p0 + p1)) / 2 in true division, not rounded down: a
    0.5 W series over 2 ns (one sample inside) is 2 × (1 ns × 1 W / 2) = 1 nJ."""
    assert trapezoid_energy([0, 1, 2], [0.5, 0.5, 0.5], 0, 2) == pytest.approx(1e-9, rel=1e-12)


def test_samples_shape_a_counter_interval_they_reach_within_the_slack() -> None:
    """Guards the documented slack: driver samples shape a counter interval when they reach
    within 100 ms of both its readings, that limit included: samples to 0.9 s shape the
    interval 0–1 s (100 W to 0.4 s, 300 W from 0.5 s: by 0.5 s 40 + 20 = 60 J of 60 + 120 + 30
    = 210 J, the last sample held to the reading: 2/7 of the interval, not half); samples to
    1 ns short of 0.9 s do not."""
    times, joules = [0, S], [0.0, 200.0]
    for last, shaped in ((900 * MS, True), (900 * MS - 1, False)):
        st = [*range(0, 900 * MS, 100 * MS), last]
        sw = [100.0 if t < 500 * MS else 300.0 for t in st]
        at = counter_at(times, joules, st, sw, 500 * MS)
        assert at is not None and at.shaped is shaped
        assert at.fraction == (pytest.approx(2 / 7, rel=1e-12) if shaped else 0.5)
