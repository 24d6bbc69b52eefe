"""The per-event energy model on hand-made series: exact energies at constant power, self and
total energy of nested events, a thread's conservation, kernels split by overlap, error estimates,
and events the samples do not bracket."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition.point import Point
from acquisition.profiler.energy import NO_CPU_SOURCE, Span, compute_energy
from acquisition.profiler.series import EnergySeries, build_series

MS = 1_000_000
T0 = 1_790_000_000_000_000_000


def rapl_points(watts: dict[str, float], n: int = 101, period_ms: int = 10) -> list[Point]:
    """Cumulative RAPL counters at constant power, one sample every ``period_ms``."""
    points = []
    for k in range(n):
        t = T0 + k * period_ms * MS
        for domain, w in watts.items():
            joules = 1000.0 + w * k * period_ms / 1000  # counters do not start at 0
            tags = {"socket": "0", "domain": domain}
            points.append(Point("rapl", tags, {"energy_joules": joules}, t))
    return points


def cpu(start_ms: float, end_ms: float, thread: int = 1) -> Span:
    return Span(("cpu", thread), T0 + round(start_ms * MS), T0 + round(end_ms * MS))


def kernel(start_ms: float, end_ms: float, device: int = 0) -> Span:
    return Span(("gpu", device), T0 + round(start_ms * MS), T0 + round(end_ms * MS))


def test_series_from_points_names_sources_like_the_attribution() -> None:
    series = build_series(rapl_points({"package": 20.0, "dram": 5.0, "core": 12.0}))
    assert sorted(series) == ["rapl:core-0", "rapl:dram-0", "rapl:package-0"]
    s = series["rapl:package-0"]
    assert s.joules[0] == 0.0
    assert s.energy(T0 + 5 * MS, T0 + 505 * MS) == pytest.approx((10.0, 0.0))
    assert [w for _, w in s.power()] == pytest.approx([20.0] * 100)


def test_constant_power_gives_power_times_time_per_event() -> None:
    series = build_series(rapl_points({"package": 20.0, "dram": 5.0}))
    spans = [cpu(3.3, 207.9), cpu(250, 251.5)]
    result = compute_energy(spans, series)
    for span, energy in zip(spans, result.events, strict=True):
        seconds = (span.end_ns - span.start_ns) / 1e9
        assert energy.total_j == pytest.approx(25.0 * seconds, rel=1e-9)
        assert energy.by_source["rapl:package-0"] == pytest.approx(20.0 * seconds, rel=1e-9)
        assert energy.error_j == pytest.approx(0.0, abs=1e-9)
    assert result.unmeasured == 0


def test_core_and_psys_are_not_charged_to_cpu_operators() -> None:
    series = build_series(rapl_points({"package": 20.0, "dram": 5.0, "core": 12.0, "psys": 50.0}))
    (energy,) = compute_energy([cpu(10, 110)], series).events
    assert set(energy.by_source) == {"rapl:package-0", "rapl:dram-0"}
    assert energy.total_j == pytest.approx(2.5)


def test_cpu_events_with_only_psys_sampled_say_no_cpu_source_was_sampled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    series = build_series(rapl_points({"psys": 50.0}))
    result = compute_energy([cpu(10, 110), cpu(20, 30)], series)
    assert result.unmeasured == 2
    assert [e.total_j for e in result.events] == [None, None]
    assert [r.msg for r in caplog.records] == [NO_CPU_SOURCE]
    assert caplog.records[0].getMessage() == NO_CPU_SOURCE % (2, 2, "rapl:psys-0")
    assert "no source sampled their interval" not in caplog.text


def test_nested_self_energies_sum_to_the_parent_total() -> None:
    series = build_series(rapl_points({"package": 40.0}))
    # parent [0, 100] with children [10, 30] (itself with a child [12, 20]) and [50, 90]
    spans = [cpu(0, 100), cpu(10, 30), cpu(12, 20), cpu(50, 90)]
    ev = compute_energy(spans, series).events
    assert [e.parent for e in ev] == [None, 0, 1, 0]
    assert ev[0].total_j == pytest.approx(4.0)
    assert ev[0].self_j == pytest.approx(40.0 * (0.100 - 0.020 - 0.040))
    assert ev[1].self_j == pytest.approx(40.0 * (0.020 - 0.008))
    assert sum(e.self_j or 0.0 for e in ev) == pytest.approx(ev[0].total_j, rel=1e-12)


def test_a_threads_self_energies_and_its_time_outside_events_make_the_window() -> None:
    series = build_series(rapl_points({"package": 30.0, "dram": 6.0}))
    spans = [cpu(10, 40), cpu(15, 20), cpu(60, 70), cpu(20, 80, thread=2)]
    window = (T0, T0 + 100 * MS)
    result = compute_energy(spans, series, window)
    tracks = {t.track: t for t in result.tracks}
    main = tracks[("cpu", 1)]
    assert main.window_j == pytest.approx(36.0 * 0.1)
    assert main.events_j == pytest.approx(36.0 * 0.040)  # 30 ms + 10 ms inside events
    assert main.outside_j == pytest.approx(36.0 * 0.060)
    # every thread sees the machine's joules: the second thread's account is its own
    assert tracks[("cpu", 2)].events_j == pytest.approx(36.0 * 0.060)


def test_overlapping_kernels_split_each_interval_equally() -> None:
    points = [
        Point("gpu_sample", {"gpu": "0"}, {"power_watts": 100.0}, T0 + k * MS) for k in range(0, 21)
    ]
    series = build_series(points)
    spans = [kernel(0, 10), kernel(5, 15)]
    result = compute_energy(spans, series, (T0, T0 + 20 * MS))
    a, b = result.events
    assert a.total_j == pytest.approx(0.5 + 0.25)  # 5 ms alone, 5 ms shared, at 100 W
    assert b.total_j == pytest.approx(0.25 + 0.5)
    (gpu,) = result.tracks
    assert gpu.window_j == pytest.approx(2.0)
    assert gpu.outside_j == pytest.approx(0.5)  # idle 15..20 ms


def test_gpu_power_samples_are_integrated_by_trapezoids() -> None:
    # power ramps 100 W → 200 W over 100 ms: energy over [0, 100 ms] = 15 J
    points = [
        Point("gpu_sample", {"gpu": "1"}, {"power_watts": 100.0 + k}, T0 + k * MS)
        for k in range(101)
    ]
    series = build_series(points)
    assert series["nvml:1"].energy(T0, T0 + 100 * MS) == pytest.approx((15.0, 0.0), abs=1e-9)
    (energy,) = compute_energy([kernel(20, 60, device=1)], series).events
    assert energy.total_j == pytest.approx((120 + 160) / 2 * 0.040)


def test_gpu_samples_win_over_the_coarse_energy_counter() -> None:
    points = [
        Point("gpu", {"gpu": "0"}, {"energy_joules": k * 30.0}, T0 + k * 100 * MS) for k in range(3)
    ]
    points += [
        Point("gpu_sample", {"gpu": "0"}, {"power_watts": 250.0}, T0 + k * 10 * MS)
        for k in range(21)
    ]
    series = build_series(points)
    assert series["nvml:0"].energy(T0, T0 + 100 * MS)[0] == pytest.approx(25.0)  # type: ignore[index]


def test_error_estimate_is_zero_at_constant_power_and_covers_a_step() -> None:
    # 10 W up to 45 ms, 50 W after; samples every 10 ms: the step lies inside [40, 50]
    times = [T0 + k * 10 * MS for k in range(11)]

    def truth(t: int) -> float:
        switch = T0 + 45 * MS
        return 10.0 * (min(t, switch) - T0) / 1e9 + 50.0 * max(0, t - switch) / 1e9

    series = EnergySeries("rapl:package-0", "rapl", "package", times, [truth(t) for t in times])
    for edge_ms in (41, 43, 47, 49):
        t = T0 + edge_ms * MS
        value, error = series.at(t)  # type: ignore[misc]
        assert error > 0.0
        assert abs(value - truth(t)) <= error
    _, flat = series.at(T0 + 15 * MS)  # type: ignore[misc]
    assert flat == pytest.approx(0.0, abs=1e-12)


def test_events_outside_the_samples_get_no_energy_and_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    series = build_series(rapl_points({"package": 20.0}, n=11))  # 0..100 ms
    result = compute_energy([cpu(50, 90), cpu(90, 150), kernel(0, 10)], series)
    assert result.events[0].total_j == pytest.approx(0.8)
    assert result.events[1].total_j is None
    assert result.events[2].total_j is None  # no GPU source
    assert result.unmeasured == 2
    assert "2 of 3 profiler events got no energy" in caplog.text


def test_a_child_without_energy_leaves_its_parent_without_self_energy() -> None:
    series = build_series(rapl_points({"package": 20.0}, n=11))
    result = compute_energy([cpu(50, 200), cpu(60, 150)], series)
    assert result.events[0].self_j is None


@st.composite
def nested_spans(draw: st.DrawFn) -> list[Span]:
    """Properly nested spans on one thread inside [0, 1000] ms."""
    spans: list[Span] = []

    def fill(lo: int, hi: int, depth: int) -> None:
        t = lo
        while depth < 4 and t < hi - 2 and draw(st.booleans()):
            start = draw(st.integers(t, hi - 2))
            end = draw(st.integers(start + 1, hi))
            spans.append(cpu(start, end))
            fill(start, end, depth + 1)
            t = end
        return None

    fill(0, 1000, 0)
    return spans


@given(nested_spans(), st.floats(1.0, 500.0))
def test_conservation_on_any_nesting(spans: list[Span], watts: float) -> None:
    series = build_series(rapl_points({"package": watts}, n=101))
    result = compute_energy(spans, series, (T0, T0 + 1000 * MS))
    total_self = sum(e.self_j for e in result.events if e.self_j is not None)
    for t in result.tracks:
        assert math.isclose(t.events_j + t.outside_j, t.window_j, rel_tol=1e-9)
        assert math.isclose(total_self, t.events_j, rel_tol=1e-9, abs_tol=1e-9)
    for e in result.events:
        assert e.self_j is not None and e.self_j >= -1e-9
