"""GPU energy per step on the GPU's own timeline, shaped by the driver's power samples between
readings of the energy counter: expectations computed by hand from the power profile fed in."""

from __future__ import annotations

import pytest

from acquisition.point import Point
from tests.attribution.test_processor import MS, RUN, T0, Harness, counter, run_event

GPU = {"gpu": "0", "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3"}
LOW_W, HIGH_W = 300.0, 600.0
RAMP_MS = (1000, 1020)
"""The power steps from LOW_W to HIGH_W between these two sample times."""
SAMPLE_MS = 20
TICK_MS = 100
COUNTER_MS = 1000
STEP_MS = 37
QUEUE_MS = 30
"""The GPU runs each step this much later than the CPU launched it."""
PACKAGE_W = 40.0


def watts(t_ms: float) -> float:
    """The GPU's power: LOW_W, a linear ramp over RAMP_MS, then HIGH_W."""
    a, b = RAMP_MS
    if t_ms <= a:
        return LOW_W
    if t_ms >= b:
        return HIGH_W
    return LOW_W + (HIGH_W - LOW_W) * (t_ms - a) / (b - a)


def joules(t_ms: float) -> float:
    """∫ watts from 0 to t (J), by hand: the constant parts and the ramp's trapezoid."""
    a, b = RAMP_MS
    if t_ms <= a:
        return LOW_W * t_ms / 1000
    if t_ms <= b:
        return LOW_W * a / 1000 + (LOW_W + watts(t_ms)) / 2 * (t_ms - a) / 1000
    return LOW_W * a / 1000 + (LOW_W + HIGH_W) / 2 * (b - a) / 1000 + HIGH_W * (t_ms - b) / 1000


def bus(until_ms: int, steps: list[tuple[float, float]]) -> list[Point]:
    """What the agent's bus carries, in order: per 100 ms tick the driver's samples since the last
    tick, then the ``gpu`` point (the counter only every second); RAPL every tick; each step's
    point when the CPU finished it, carrying its GPU interval."""
    points: list[tuple[float, int, Point]] = []
    for t in range(0, until_ms + 1, SAMPLE_MS):
        points.append((t, 0, Point("gpu_sample", GPU, {"power_watts": watts(t)}, T0 + t * MS)))
    for t in range(0, until_ms + 1, TICK_MS):
        fields: dict[str, float] = {"power_watts": watts(t)}
        if t % COUNTER_MS == 0:
            fields["energy_joules"] = joules(t)
        points.append((t, 1, Point("gpu", GPU, fields, T0 + t * MS)))
    for p in counter("package", PACKAGE_W, 0, until_ms):
        points.append((p.time_ns / MS - T0 / MS, 1, p))
    for n, (start, end) in enumerate(steps):
        fields = {
            "step": n,
            "start_time_ns": T0 + round(start * MS),
            "end_time_ns": T0 + round(end * MS),
            "gpu_start_time_ns": T0 + round((start + QUEUE_MS) * MS),
            "gpu_end_time_ns": T0 + round((end + QUEUE_MS) * MS),
        }
        points.append(
            (end, 2, Point("nrg_step", {**RUN, "epoch": "0"}, fields, T0 + round(end * MS)))
        )
    points.sort(key=lambda e: (e[0], e[1]))
    return [p for _, _, p in points]


def step_points(h: Harness, source: str) -> dict[int, Point]:
    return {
        p.fields["step"]: p  # type: ignore[misc]
        for p in h.out
        if p.tags["source"] == source and p.tags["scope"] == "step"
    }


def test_each_step_gets_the_energy_of_its_gpu_interval() -> None:
    steps = [(500 + STEP_MS * k + 0.25, 500 + STEP_MS * (k + 1) + 0.25) for k in range(60)]
    h = Harness(module_detail="off")
    h.feed(bus(3000, steps))
    h.feed([run_event("end", 3000)])
    gpu = step_points(h, "nvml:0")
    assert sorted(gpu) == list(range(len(steps)))
    crossed = 0
    for n, (start, end) in enumerate(steps):
        g0, g1 = start + QUEUE_MS, end + QUEUE_MS
        expected = joules(g1) - joules(g0)
        assert gpu[n].fields["energy_joules"] == pytest.approx(expected, rel=1e-9), n
        assert gpu[n].fields["duration_seconds"] == pytest.approx((g1 - g0) / 1000, rel=1e-9)
        on_cpu = joules(end) - joules(start)
        if abs(on_cpu - expected) > 0.1:
            crossed += 1  # the steps around the power step tell the two timelines apart
    assert crossed >= 2
    # The CPU's sources keep the CPU interval.
    package = step_points(h, "rapl:package-0")
    for n, (start, end) in enumerate(steps):
        assert package[n].fields["energy_joules"] == pytest.approx(
            PACKAGE_W * (end - start) / 1000, rel=1e-9
        )


def test_the_steps_gpu_energy_adds_up_to_the_counter_over_their_union() -> None:
    # Steps cross the counter's readings at 1 s and 2 s; the union ends on no sample.
    steps = [(900 + STEP_MS * k, 900 + STEP_MS * (k + 1)) for k in range(40)]
    h = Harness(module_detail="off")
    h.feed(bus(3000, steps))
    h.feed([run_event("end", 3000)])
    gpu = step_points(h, "nvml:0")
    total = sum(p.fields["energy_joules"] for p in gpu.values())  # type: ignore[misc]
    union = (steps[0][0] + QUEUE_MS, steps[-1][1] + QUEUE_MS)
    assert total == pytest.approx(joules(union[1]) - joules(union[0]), rel=1e-12)


def test_without_samples_the_counter_is_interpolated_linearly() -> None:
    steps = [(1200.0, 1237.0)]
    h = Harness(module_detail="off")
    h.feed([p for p in bus(3000, steps) if p.measurement != "gpu_sample"])
    h.feed([run_event("end", 3000)])
    (point,) = step_points(h, "nvml:0").values()
    # Linear between the readings at 1 s and 2 s: the second's mean power times the duration.
    mean_w = (joules(2000) - joules(1000)) / 1.0
    assert point.fields["energy_joules"] == pytest.approx(mean_w * 0.037, rel=1e-9)


def without_counter(points: list[Point]) -> list[Point]:
    """The bus of a GPU without an energy counter (older GPUs): its ``gpu`` points carry power
    only, every 100 ms; the driver's samples every 20 ms."""
    return [
        Point(p.measurement, p.tags, {"power_watts": p.fields["power_watts"]}, p.time_ns)
        if p.measurement == "gpu"
        else p
        for p in points
    ]


def test_without_a_counter_the_driver_samples_give_each_steps_energy() -> None:
    """Guards: a GPU without an energy counter gets each step's energy from the driver's power
    samples (20 ms), not from its coarser power readings (100 ms): the steps across the ramp
    get the profile's energy exactly (it is linear between samples). The step on the GPU from
    1005 to 1042 ms: the ramp from 375 W at 1005 ms to 600 W at 1020 ms, then 600 W:
    (375 + 600) / 2 × 0.015 + 600 × 0.022 = 7.3125 + 13.2 = 20.5125 J (the 100 ms readings,
    300 W at 1000 ms to 600 W at 1100 ms, would give 370.5 W × 0.037 s = 13.7085 J). Its error
    bar, the power swing around each edge times the sample interval: 300 W × 20 ms = 6 J at
    its start (on the ramp), 0 at its end (600 W on both sides)."""
    steps = [(975.0 + STEP_MS * k, 975.0 + STEP_MS * (k + 1)) for k in range(-3, 4)]
    h = Harness(module_detail="off")
    h.feed(without_counter(bus(3000, steps)))
    h.feed([run_event("end", 3000)])
    gpu = step_points(h, "nvml:0")
    assert sorted(gpu) == list(range(len(steps)))
    for n, (start, end) in enumerate(steps):
        expected = joules(end + QUEUE_MS) - joules(start + QUEUE_MS)
        assert gpu[n].fields["energy_joules"] == pytest.approx(expected, rel=1e-9), n
    ramp = gpu[3].fields
    assert ramp["energy_joules"] == pytest.approx(20.5125, rel=1e-9)
    assert ramp["error_joules"] == pytest.approx(6.0, rel=1e-9)


def test_steps_after_the_last_counter_reading_are_carried_by_the_samples_at_shutdown() -> None:
    # The agent stops at 2.95 s: its last counter reading was at 2 s, its samples reach 2.94 s.
    steps = [(1900 + STEP_MS * k, 1900 + STEP_MS * (k + 1)) for k in range(25)]
    h = Harness(module_detail="off")
    h.feed([p for p in bus(2950, steps) if p.time_ns <= T0 + 2950 * MS])
    h.proc.flush(h.out.append)
    gpu = step_points(h, "nvml:0")
    assert sorted(gpu) == list(range(len(steps)))
    for n, (start, end) in enumerate(steps):
        expected = joules(end + QUEUE_MS) - joules(start + QUEUE_MS)
        assert gpu[n].fields["energy_joules"] == pytest.approx(expected, rel=1e-9), n
        assert gpu[n].fields["error_joules"] >= 0.0  # type: ignore[operator]


def shutdown_step(gpu_end_ms: int, gpu_start_ms: int = 2930) -> Harness:
    """The agent stops at 2.94 s, its last driver sample (600 W); the counter was last read at
    2 s. One step ran on the GPU from ``gpu_start_ms`` to ``gpu_end_ms``, launched 30 ms
    earlier."""
    h = Harness(module_detail="off")
    h.feed([*bus(2940, []), gpu_step(gpu_start_ms, gpu_end_ms)])
    h.proc.flush(h.out.append)
    return h


def test_a_step_ending_up_to_100_ms_after_the_last_sample_is_carried_at_its_power() -> None:
    """Guards: past the counter's last reading the driver's samples carry a step's GPU energy up
    to 100 ms beyond the newest sample, that limit included (the driver's newest sample is up to
    one period older than the step's end): the step ending exactly 100 ms after the last sample
    gets its energy; one ending 1 ms later gets none, and is counted as missing the GPU."""
    carried = step_points(shutdown_step(3040), "nvml:0")
    # 2.93 s to 3.04 s at 600 W (the sample at 2.94 s held for its last 100 ms): 600 × 0.11 J
    assert carried[0].fields["energy_joules"] == pytest.approx(600.0 * 0.11, rel=1e-12)
    assert carried[0].fields["duration_seconds"] == pytest.approx(0.11, rel=1e-12)
    late = shutdown_step(3041)
    assert step_points(late, "nvml:0") == {}
    assert late.proc.stats()["steps_missing:nvml:0"] == 1


def test_the_error_bar_of_a_step_across_the_last_counter_reading() -> None:
    """Guards: a step on the GPU from 1.99 s to 2.03 s, across the counter's last reading
    (2 s) at shutdown, gets its energy from the counter up to 2 s and from the driver's samples
    after it, and an error bar with the counter's staleness at both edges: the power is flat
    at 600 W there (no swing), so each edge adds its power × the counter's 0.1 s update
    period: at its start the counter's last interval's, 597 J over 1 to 2 s (the ramp from
    300 W in its first 20 ms, (300 + 600) / 2 × 0.02 = 9 J, then 600 W × 0.98 s = 588 J),
    597 W × 0.1 s = 59.7 J; at its end the samples' that carry it, 600 W × 0.1 s = 60 J:
    119.7 J. A step wholly after the last reading (2.93 to 3.04 s) has no counter edge to be
    stale: 0 J."""
    across = step_points(shutdown_step(2030, gpu_start_ms=1990), "nvml:0")[0].fields
    assert across["energy_joules"] == pytest.approx(600.0 * 0.04, rel=1e-9)  # 24 J
    assert across["error_joules"] == pytest.approx(597.0 * 0.1 + 600.0 * 0.1, rel=1e-9)
    after = step_points(shutdown_step(3040), "nvml:0")[0].fields
    assert after["error_joules"] == pytest.approx(0.0, abs=1e-9)


def test_a_late_driver_sample_is_skipped_and_counted() -> None:
    """Guards: a driver power sample older than the newest one already seen (delivered late)
    is skipped, not slotted into the power profile, and counted in ``samples_out_of_order``;
    here a wild 10 kW sample stamped 1.49 s arrives after the one at 1.5 s: the steps' GPU
    energy is still the profile's, by hand."""
    steps = [(1400 + STEP_MS * k, 1400 + STEP_MS * (k + 1)) for k in range(5)]
    late = Point("gpu_sample", GPU, {"power_watts": 10_000.0}, T0 + 1490 * MS)
    points = bus(3000, steps)
    at = next(i for i, p in enumerate(points) if p.time_ns == T0 + 1500 * MS)
    h = Harness(module_detail="off")
    h.feed([*points[: at + 1], late, *points[at + 1 :], run_event("end", 3000)])
    assert h.proc.stats()["samples_out_of_order"] == 1
    gpu = step_points(h, "nvml:0")
    for n, (start, end) in enumerate(steps):
        # after the ramp (1.02 s) the GPU draws 600 W: 600 W × 37 ms = 22.2 J per step
        assert gpu[n].fields["energy_joules"] == pytest.approx(600.0 * 0.037, rel=1e-9), n
        assert joules(end + QUEUE_MS) - joules(start + QUEUE_MS) == pytest.approx(22.2), n


@pytest.mark.parametrize(
    ("gpu_start_ms", "gpu_end_ms", "last_sample_ms", "expected_j"),
    [
        (995, 1032, 3000, 17.7),
        (900, 1032, 3000, 46.2),
        (899, 1032, 3000, 41.436),
        (995, 1032, 1020, 17.7),
        (995, 1032, 1000, 12.636),
        (995, 1120, 1020, 70.5),
        (995, 1121, 1020, 59.1),
    ],
)
def test_driver_samples_that_begin_just_after_a_step_starts_still_give_its_energy(
    gpu_start_ms: int, gpu_end_ms: int, last_sample_ms: int, expected_j: float
) -> None:
    """Guards: a GPU without an energy counter whose driver samples begin after a step started,
    within the 100 ms slack, takes the step's energy from the samples, the first one's power held
    back to the step's start. Samples from 1000 ms only (300 W there, the ramp to 600 W at
    1020 ms); the step on the GPU ends at 1032 ms. From 995 ms: 300 W × 0.005 s + (300 + 600) /
    2 × 0.02 s + 600 W × 0.012 s = 1.5 + 9 + 7.2 = 17.7 J. From 900 ms (the first sample exactly
    100 ms later): 30 + 9 + 7.2 = 46.2 J. From 899 ms (101 ms: beyond the slack) the 100 ms
    readings: 300 W × 0.101 s, then 300 W at 1000 ms to 396 W at 1032 ms (on the way to 600 W
    at 1100 ms): 30.3 + (300 + 396) / 2 × 0.032 = 30.3 + 11.136 = 41.436 J.

    At the other end and in number: two samples (1000 and 1020 ms), the fewest that span a
    step, still give 17.7 J (the last, 600 W, held to the end); one sample (1000 ms) spans
    nothing: the readings, 300 W × 0.005 s + (300 + 396) / 2 × 0.032 s = 12.636 J. Samples up to
    1020 ms and the step ending exactly 100 ms later (1120 ms): the samples, 1.5 + 9 + 600 W ×
    0.1 s = 70.5 J; ending at 1121 ms (101 ms: beyond the slack) the readings, 1.5 + (300 + 600)
    / 2 × 0.1 s + 600 W × 0.021 s = 1.5 + 45 + 12.6 = 59.1 J."""
    cpu = (gpu_start_ms - QUEUE_MS + 0.0, gpu_end_ms - QUEUE_MS + 0.0)
    h = Harness(module_detail="off")
    samples = (T0 + 1000 * MS, T0 + last_sample_ms * MS)
    late = [
        p
        for p in without_counter(bus(3000, [cpu]))
        if p.measurement != "gpu_sample" or samples[0] <= p.time_ns <= samples[1]
    ]
    h.feed(late)
    h.feed([run_event("end", 3000)])
    (point,) = step_points(h, "nvml:0").values()
    assert point.fields["energy_joules"] == pytest.approx(expected_j, rel=1e-9)


def gpu_step(gpu_start_ms: int, gpu_end_ms: int) -> Point:
    """Step 0, on the GPU from ``gpu_start_ms`` to ``gpu_end_ms`` (launched 30 ms earlier)."""
    fields = {
        "step": 0,
        "start_time_ns": T0 + (gpu_start_ms - QUEUE_MS) * MS,
        "end_time_ns": T0 + (gpu_end_ms - QUEUE_MS) * MS,
        "gpu_start_time_ns": T0 + gpu_start_ms * MS,
        "gpu_end_time_ns": T0 + gpu_end_ms * MS,
    }
    return Point("nrg_step", {**RUN, "epoch": "0"}, fields, T0 + (gpu_end_ms - QUEUE_MS) * MS)


def test_a_step_from_the_counters_only_reading_is_carried_by_the_samples() -> None:
    """Guards: the agent read the GPU's counter once, at 2 s, and stopped at 2.14 s; a step ran
    on the GPU from exactly 2 s to 2.1 s at 600 W (a sample every 20 ms): the samples carry
    it, 600 W × 0.1 s = 60 J. Its bar is the samples' swing alone, 0 J at a constant power
    (the counter's one reading cancels out of the step's energy); its start edge, on that
    reading, has no counter interval whose power could be stale: 0 J; its end edge, as for
    any step carried past the last reading, the samples' 600 W × the counter's 0.1 s update
    period: 60 J."""
    h = Harness(module_detail="off")
    h.feed([Point("gpu", GPU, {"energy_joules": 1000.0}, T0 + 2000 * MS)])
    h.feed(
        Point("gpu_sample", GPU, {"power_watts": 600.0}, T0 + t * MS) for t in range(2000, 2141, 20)
    )
    h.feed([gpu_step(2000, 2100)])
    h.proc.flush(h.out.append)
    f = step_points(h, "nvml:0")[0].fields
    assert f["energy_joules"] == pytest.approx(600.0 * 0.1, rel=1e-12)
    bars = (f["error_joules"], f["error_start_joules"], f["error_end_joules"])
    assert bars == pytest.approx((0.0, 0.0, 600.0 * 0.1), rel=1e-12, abs=1e-12)


def test_samples_that_begin_after_a_step_leave_its_bar_to_the_counter() -> None:
    """Guards: the driver's samples of a GPU began after the step (at 2.5 s), so they shape
    none of its counter's intervals: the step is measured and bounded by the counter alone.
    The counter reads 0, 100, 300.5 and 400 J at 0, 1, 2 and 3 s (100, 200.5, 99.5 W); the
    step ran on the GPU from 1.2 to 1.8 s: 200.5 W × 0.6 s = 120.3 J. Each edge's swing is
    over the counter's intervals around it up to its next reading (2 s, the last a step is
    sure to have): (200.5 − 100) W × 1 s = 100.5 J, plus the 200.5 W interval's staleness,
    200.5 W × 0.1 s = 20.05 J: 120.55 J per edge. Both edges in one counter interval, the
    step's bar is the two swings plus the staleness on its 0.6 share of that interval:
    100.5 + 100.5 + 2 × 200.5 W × 0.1 s × 0.6 = 225.06 J (under the edges' 241.1 J)."""
    h = Harness(module_detail="off")
    readings = [(0, 0.0), (1000, 100.0), (2000, 300.5), (3000, 400.0)]
    h.feed(Point("gpu", GPU, {"energy_joules": j}, T0 + t * MS) for t, j in readings)
    h.feed(
        Point("gpu_sample", GPU, {"power_watts": 100.0}, T0 + t * MS) for t in range(2500, 3001, 20)
    )
    h.feed([gpu_step(1200, 1800), run_event("end", 3000)])
    f = step_points(h, "nvml:0")[0].fields
    assert f["energy_joules"] == pytest.approx(200.5 * 0.6, rel=1e-12)
    bars = (f["error_joules"], f["error_start_joules"], f["error_end_joules"])
    assert bars == pytest.approx((225.06, 120.55, 120.55), rel=1e-12)


def test_a_gpu_without_a_counter_is_bounded_by_its_readings_where_samples_miss_the_step() -> None:
    """Guards: a GPU without an energy counter whose driver samples begin after a step (at
    2.5 s) takes the step's energy and its error bars from its power readings alone: 100,
    300 and 100 W at 0, 1 and 2 s, a step on the GPU from 0.5 to 1.5 s: (200 + 300) / 2 W ×
    0.5 s twice = 250 J; each edge, the swing over the readings around it, (300 − 100) W ×
    1 s = 200 J, the step 400 J (a power series: no counter to be stale)."""
    h = Harness(module_detail="off")
    readings = [(0, 100.0), (1000, 300.0), (2000, 100.0)]
    h.feed(Point("gpu", GPU, {"power_watts": w}, T0 + t * MS) for t, w in readings)
    h.feed(
        Point("gpu_sample", GPU, {"power_watts": 100.0}, T0 + t * MS) for t in range(2500, 3001, 20)
    )
    h.feed([gpu_step(500, 1500), run_event("end", 3000)])
    f = step_points(h, "nvml:0")[0].fields
    assert f["energy_joules"] == pytest.approx(250.0, rel=1e-12)
    bars = (f["error_joules"], f["error_start_joules"], f["error_end_joules"])
    assert bars == pytest.approx((400.0, 200.0, 200.0), rel=1e-12)


@pytest.mark.parametrize(("late_ns", "carried"), [(0, True), (1, False)])
def test_samples_beginning_up_to_100_ms_after_the_last_counter_reading_carry_it(
    late_ns: int, carried: bool
) -> None:
    """Guards: past the counter's last reading (2 s) the driver's samples carry it when they
    begin at most 100 ms after it, that limit included (their first power held back to the
    reading); a step on the GPU from 2.1 to 2.2 s, samples at 612.5 W every 20 ms from 2.1 s:
    612.5 W × 0.1 s = 61.25 J. Its bar: no swing, no counter reading inside it to be stale:
    0 J; each edge, the power carrying it there × the counter's 0.1 s update period, 612.5 W
    × 0.1 s = 61.25 J. Samples from 1 ns later (beyond the slack): no GPU energy for the
    step, counted as missing it."""
    h = Harness(module_detail="off")
    h.feed(Point("gpu", GPU, {"energy_joules": 600.0 * t}, T0 + t * 1000 * MS) for t in (1, 2))
    h.feed(
        Point("gpu_sample", GPU, {"power_watts": 612.5}, T0 + (2100 + 20 * k) * MS + late_ns)
        for k in range(10)
    )
    h.feed([gpu_step(2100, 2200)])
    h.proc.flush(h.out.append)
    got = step_points(h, "nvml:0")
    if not carried:
        assert (got, h.proc.stats()["steps_missing:nvml:0"]) == ({}, 1)
        return
    f = got[0].fields
    assert f["energy_joules"] == pytest.approx(612.5 * 0.1, rel=1e-12)
    bars = (f["error_joules"], f["error_start_joules"], f["error_end_joules"])
    assert bars == pytest.approx((0.0, 612.5 * 0.1, 612.5 * 0.1), rel=1e-12, abs=1e-12)


def test_a_driver_sample_sent_again_at_the_same_time_replaces_the_first() -> None:
    """Guards: a driver power sample sent again with the time of the newest one is no late
    sample (not counted in ``samples_out_of_order``): it replaces that one. Samples at 300 W
    every 20 ms to 1 s, then the one at 1 s again at 600 W; a step on the GPU from 0.9 to
    1 s: 300 W × 0.08 s + (300 + 600) / 2 W × 0.02 s = 24 + 9 = 33 J."""
    h = Harness(module_detail="off")
    h.feed(
        Point("gpu_sample", GPU, {"power_watts": 300.0}, T0 + t * MS) for t in range(0, 1001, 20)
    )
    h.feed([Point("gpu_sample", GPU, {"power_watts": 600.0}, T0 + 1000 * MS)])
    h.feed([gpu_step(900, 1000), run_event("end", 1000)])
    assert h.proc.stats()["samples_out_of_order"] == 0
    f = step_points(h, "nvml:0")[0].fields
    assert f["energy_joules"] == pytest.approx(33.0, rel=1e-12)
