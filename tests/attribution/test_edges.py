"""EnergyAttribution at its edges: modules longer than their step, a repeated counter value,
history against grace, the pending-step limit, and the error bar of steps that end on a
sample, between samples, or start where they end. Each expectation is worked out here from
the 10 W counter fed in (1 J every 100 ms)."""

from __future__ import annotations

import pytest

from acquisition.point import Point
from acquisition.processors.energy import Series
from tests.attribution.test_processor import (
    MS,
    T0,
    Harness,
    counter,
    module,
    run_event,
    step,
)


def read_late(samples: list[Point], at_ms: int, joules: float) -> list[Point]:
    """``samples`` with the one at ``at_ms`` reading ``joules`` (a sample read a little late)."""
    return [
        Point(p.measurement, p.tags, {"energy_joules": joules}, p.time_ns)
        if p.time_ns == T0 + at_ms * MS
        else p
        for p in samples
    ]


def step_point(h: Harness, scope: str = "step") -> Point:
    [point] = [p for p in h.out if p.tags["scope"] == scope]
    return point


def test_modules_longer_than_their_step_leave_no_negative_unattributed_time() -> None:
    """Guards: when the modules' exclusive times add up to more than the step (0.25 + 0.15 =
    0.4 s in a 0.3 s step), the unattributed time is 0 s, not −0.1 s; the 3 J of the step are
    split over 0.4 s: fc1 3 × 0.25 / 0.4 = 1.875 J, fc2 3 × 0.15 / 0.4 = 1.125 J."""
    h = Harness()
    mods = [module(0, "fc1", "forward", 0.25, 550), module(0, "fc2", "forward", 0.15, 550)]
    h.feed([*counter("package", 10.0, 0, 1000), *mods, step(0, 250, 550), run_event("end", 1000)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "module", "fc1", "forward", 0, 1.875, 0.25),
        ("rapl:package-0", "module", "fc2", "forward", 0, 1.125, 0.15),
        ("rapl:package-0", "unattributed", "", "", 0, 0.0, 0.0),
    ]


def test_a_repeated_counter_value_is_not_a_reset() -> None:
    """Guards: a counter that reads the same value twice (idle DRAM; NVML read faster than it
    updates) is not taken for a collector restart: no reset counted, history kept. The 300 ms
    sample repeats 2.0 J; C(250) = 2.0 (between two 2.0 J samples), C(550) = 5.5: 3.5 J."""
    h = Harness()
    h.feed(read_late(counter("package", 10.0, 0, 1000), 300, 2.0))
    h.feed([step(0, 250, 550), run_event("end", 1000)])
    assert h.proc.stats()["counter_resets"] == 0
    assert step_point(h).fields["energy_joules"] == pytest.approx(3.5, rel=1e-12)


def test_history_not_grace_decides_how_far_back_samples_are_kept() -> None:
    """Guards: samples are pruned to ``history`` (12 s) behind the newest, not ``grace`` (1 s):
    a step 10 s behind the newest sample still finds its energy, 10 W × 0.5 s = 5 J."""
    h = Harness(grace=1.0, history=12.0)
    h.feed(counter("package", 10.0, 0, 25_000))  # pruned once, at 24.1 s, to 12.1 s
    h.feed([step(0, 15_000, 15_500), run_event("end", 25_000)])
    assert step_point(h).fields["energy_joules"] == pytest.approx(5.0, rel=1e-9)
    assert h.proc.stats()["steps_without_source"] == 0


def test_samples_far_older_than_history_are_let_go() -> None:
    """Guards: the source history held in memory is bounded by ``history`` (12 s here), over a
    run of any length. 100 s of a 10 W counter: a step 10 s behind the newest sample, within
    history, gets 10 W × 0.5 s = 5 J; a step 90 s behind it, far older than history (its
    samples were let go), gets no energy and is counted in ``steps_without_source``."""
    h = Harness(grace=1.0, history=12.0)
    h.feed(counter("package", 10.0, 0, 100_000))
    h.feed([step(0, 10_000, 10_500), step(1, 90_000, 90_500), run_event("end", 100_000)])
    (point,) = [p for p in h.out if p.tags["scope"] == "step"]
    assert point.fields["step"] == 1
    assert point.fields["energy_joules"] == pytest.approx(5.0, rel=1e-9)
    assert h.proc.stats()["steps_without_source"] == 1


def test_a_module_point_without_its_step_or_exclusive_time_is_ignored() -> None:
    """Guards: a module point that lacks its ``step`` or its ``exclusive_seconds`` (a job that
    wrote it incompletely) is skipped; the step and its whole module are attributed as if it
    never came: 10 W over [250, 550] ms = 3 J, fc1 all of its 0.1 s: 1 J."""
    bad = [
        Point("nrg_module", p.tags, {k: v for k, v in p.fields.items() if k != drop}, p.time_ns)
        for p, drop in (
            (module(0, "fc2", "forward", 0.05, 550), "exclusive_seconds"),
            (module(0, "fc3", "forward", 0.05, 550), "step"),
        )
    ]
    h = Harness()
    h.feed([*counter("package", 10.0, 0, 1000), step(0, 250, 550)])
    h.feed([module(0, "fc1", "forward", 0.1, 550), *bad, run_event("end", 1000)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "module", "fc1", "forward", 0, 1.0, 0.1),
        ("rapl:package-0", "unattributed", "", "", 0, 2.0, 0.2),
    ]


def test_the_pending_step_limit_is_the_number_of_steps_kept() -> None:
    """Guards: ``max_pending_steps = 3`` keeps 3 waiting steps; the 4th drops the oldest."""
    h = Harness(max_pending_steps=3)
    h.feed([module(n, "fc1", "forward", 0.1, 100 * n) for n in range(3)])  # steps not in yet
    assert h.proc.stats()["steps_dropped"] == 0
    h.feed([module(3, "fc1", "forward", 0.1, 300)])
    assert h.proc.stats()["steps_dropped"] == 1


def test_a_step_ending_on_the_newest_sample_has_the_swing_of_the_interval_before() -> None:
    """Guards: a step that ends exactly on a sample takes the power swing of the interval that
    ends there. The 400 ms sample reads 4.02 J: 300–400 ms 10.2 W, 400–500 ms 9.8 W, a swing of
    0.4 W over 0.1 s = 0.04 J at the 500 ms end; none at the 150 ms start (10 W around it).
    Energy C(500) − C(150) = 5.0 − 1.5 = 3.5 J over 0.35 s = 10 W; plus 2 × 10 W × 1 ms."""
    h = Harness()
    h.feed(read_late(counter("package", 10.0, 0, 500), 400, 4.02))  # 500 ms: the newest
    h.feed([step(0, 150, 500), run_event("end", 500)])
    point = step_point(h)
    assert point.fields["energy_joules"] == pytest.approx(3.5, rel=1e-12)
    assert point.fields["error_joules"] == pytest.approx(0.04 + 2 * 10.0 * 0.001, rel=1e-9)


def test_samples_after_a_step_do_not_change_its_error_bar() -> None:
    """Guards: the error bar uses the samples up to the first at or after the step's end only.
    The 600 ms sample reads 6.02 J (a swing after the 450 ms end): the step [150, 450] ms has
    10 W around both edges, so only 2 × (3.0 J / 0.3 s) × 1 ms = 0.02 J."""
    h = Harness()
    h.feed(read_late(counter("package", 10.0, 0, 1000), 600, 6.02))
    h.feed([step(0, 150, 450), run_event("end", 1000)])
    point = step_point(h)
    assert point.fields["energy_joules"] == pytest.approx(3.0, rel=1e-12)
    assert point.fields["error_joules"] == pytest.approx(2 * 10.0 * 0.001, rel=1e-9)


def test_a_zero_length_step_is_attributed_without_dividing_by_zero() -> None:
    """Guards: a step that starts where it ends (a clock that did not move) gets 0 J, a 0 s
    duration and the edge swing only (0 here: 10 W throughout), not a division by zero."""
    h = Harness()
    h.feed([*counter("package", 10.0, 0, 1000), step(0, 300, 300), run_event("end", 1000)])
    point = step_point(h)
    assert point.fields["energy_joules"] == 0.0
    assert point.fields["duration_seconds"] == 0.0
    assert point.fields["error_joules"] == 0.0


def test_a_sample_sent_again_at_the_same_time_replaces_the_first() -> None:
    """Guards: a sample with the time of the newest one (sent again, corrected) replaces it; it is
    neither dropped as out of order nor kept beside it. The 300 ms sample first reads 2.5 J,
    then 3.0 J: C(250) = (2.0 + 3.0) / 2 = 2.5, C(550) = 5.5: 3.0 J (the first would give
    C(250) = 2.25, C(550) = 5.5: 3.25 J)."""
    samples = counter("package", 10.0, 0, 1000)
    h = Harness()
    h.feed(samples[:3])
    h.feed(read_late(samples[3:4], 300, 2.5))
    h.feed(samples[3:])
    h.feed([step(0, 250, 550), run_event("end", 1000)])
    assert h.proc.stats()["samples_out_of_order"] == 0
    assert step_point(h).fields["energy_joules"] == pytest.approx(3.0, rel=1e-12)


def test_pruning_keeps_the_sample_that_brackets_the_cut() -> None:
    """Guards: pruning samples older than 250 ms keeps the one at 200 ms (the last before the
    cut), so a step starting at 250 ms can still be interpolated; the ones before it go."""
    series = Series()
    for t in range(0, 1001, 100):
        series.add(t, t / 100)
    series.prune(250)
    assert series.times == list(range(200, 1001, 100))
    assert series.values[0] == 2.0
    series.prune(400)  # a sample exactly at the cut is the one kept
    assert series.times[0] == 400
