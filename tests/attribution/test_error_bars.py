"""Error bars through the real attribution and summary: a known GPU power profile with noise,
read the way NVML reads it (samples every 20 ms, an energy counter that updates every 100 ms and
is read every second); every true error inside its bar, and the bar of a sum of adjacent steps
bounded at its two edges."""

from __future__ import annotations

import random
from itertools import accumulate

import pytest

from acquisition.point import Point
from acquisition.summary import summarize
from tests.attribution.test_processor import MS, RUN, T0, Harness, S, run_event

GPU = {"gpu": "0", "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3"}
RUN_MS = 20_000
LEVELS = ((0, 320.0), (4_013, 650.0), (9_507, 450.0), (15_251, 610.0))
"""(from ms, W): the training's phases; each ms adds uniform noise of ±NOISE_W."""
NOISE_W = 40.0
UPDATE_MS, UPDATE_PHASE_MS = 100, 37
"""The driver updates the energy counter every 100 ms, at 37 ms past each 100 ms."""


def profile(seed: int) -> list[float]:
    """The true power in each millisecond of the run (W)."""
    rng = random.Random(seed)
    out = []
    for t in range(RUN_MS + 1):
        level = next(w for start, w in reversed(LEVELS) if t >= start)
        out.append(level + rng.uniform(-NOISE_W, NOISE_W))
    return out


class Truth:
    def __init__(self, power: list[float]) -> None:
        self.power = power
        self.cum = [0.0, *accumulate(w / 1000 for w in power)]

    def at(self, t_ns: int) -> float:
        """True energy from 0 to t (J)."""
        ms, rest = divmod(t_ns - T0, MS)
        return self.cum[ms] + self.power[ms] * rest / 1e9

    def counter(self, t_ms: int) -> float:
        """What the counter reads at t: the energy at its latest update."""
        last = (t_ms - UPDATE_PHASE_MS) // UPDATE_MS * UPDATE_MS + UPDATE_PHASE_MS
        return self.at(T0 + max(last, 0) * MS)


def stored(bus: list[Point], out: list[Point]) -> list[Point]:
    """The run's points as a store holds them: the agent tags every point with its host."""
    energy = [
        Point(p.measurement, {**p.tags, "host": RUN["host"]}, p.fields, p.time_ns) for p in out
    ]
    return [p for p in bus if p.measurement == "nrg_step"] + energy


def run_points(truth: Truth, seed: int) -> tuple[list[Point], list[tuple[int, int]]]:
    """The bus of the run, and the steps' GPU intervals (ns): steps of 30-45 ms back to back,
    the CPU 20-40 ms ahead of the GPU."""
    rng = random.Random(seed + 1)
    events: list[tuple[int, int, Point]] = []
    for t in range(0, RUN_MS + 1, 20):
        w = truth.power[t]
        events.append((t * MS, 0, Point("gpu_sample", GPU, {"power_watts": w}, T0 + t * MS)))
    for t in range(0, RUN_MS + 1, 100):
        fields = {"power_watts": truth.power[t]}
        if t % 1000 == 0:
            fields["energy_joules"] = truth.counter(t)
        events.append((t * MS, 1, Point("gpu", GPU, fields, T0 + t * MS)))
    steps = []
    t = 200 * MS + 123_456
    n = 0
    while t < (RUN_MS - 300) * MS:
        end = t + rng.randint(30_000, 45_000) * 1000
        lead = rng.randint(20_000, 40_000) * 1000
        fields = {
            "step": n,
            "start_time_ns": T0 + t - lead,
            "end_time_ns": T0 + end - lead,
            "gpu_start_time_ns": T0 + t,
            "gpu_end_time_ns": T0 + end,
        }
        epoch = str(n // 150)
        point = Point("nrg_step", {**RUN, "epoch": epoch}, fields, T0 + end - lead)
        events.append((end - lead, 2, point))
        steps.append((T0 + t, T0 + end))
        t, n = end, n + 1
    events.sort(key=lambda e: (e[0], e[1]))
    return [p for _, _, p in events], steps


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_true_error_lies_inside_its_bar(seed: int) -> None:
    truth = Truth(profile(seed))
    bus, steps = run_points(truth, seed)
    h = Harness(module_detail="off")
    h.feed(bus)
    h.feed([run_event("end", RUN_MS)])
    got = {p.fields["step"]: p for p in h.out if p.tags["scope"] == "step"}
    assert sorted(got) == list(range(len(steps)))
    for n, (start, end) in enumerate(steps):
        fields = got[n].fields
        error = abs(fields["energy_joules"] - (truth.at(end) - truth.at(start)))  # type: ignore[operator]
        assert error <= fields["error_joules"], (n, error, fields)  # type: ignore[operator]
    # Any run of adjacent steps: off by at most its first start's and last end's bounds.
    rng = random.Random(seed)
    for _ in range(200):
        i = rng.randrange(len(steps))
        j = rng.randrange(i, len(steps))
        estimate = sum(got[k].fields["energy_joules"] for k in range(i, j + 1))  # type: ignore[misc]
        true = truth.at(steps[j][1]) - truth.at(steps[i][0])
        bar = got[i].fields["error_start_joules"] + got[j].fields["error_end_joules"]  # type: ignore[operator]
        assert abs(estimate - true) <= bar, (i, j, estimate, true, bar)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_summary_bar_of_the_steps_is_bounded_at_the_edges(seed: int) -> None:
    truth = Truth(profile(seed))
    bus, steps = run_points(truth, seed)
    h = Harness(module_detail="off")
    h.feed(bus)
    h.feed([run_event("end", RUN_MS)])
    summary = summarize(stored(bus, h.out))
    inside = summary.steps.error_j
    assert inside is not None
    true = truth.at(steps[-1][1]) - truth.at(steps[0][0])
    total = sum(p.fields["energy_joules"] for p in h.out)  # type: ignore[misc]
    assert abs(total - true) <= inside
    assert inside <= 0.05 * total  # the goal for a run's steps
    first = next(p for p in h.out if p.fields["step"] == 0)
    last = next(p for p in h.out if p.fields["step"] == len(steps) - 1)
    assert inside == pytest.approx(
        first.fields["error_start_joules"] + last.fields["error_end_joules"],
        rel=1e-12,  # type: ignore[operator]
    )
    summed = sum(p.fields["error_joules"] for p in h.out)  # type: ignore[misc]
    assert summed > 10 * inside  # what the summary stated before: the steps' bars added up
    # Each epoch: its own two edges, and its true error inside.
    for epoch in summary.epochs:
        keys = [n for n in range(len(steps)) if n // 150 == epoch.epoch]
        start, end = steps[keys[0]][0], steps[keys[-1]][1]
        assert epoch.error_j is not None and epoch.energy_j is not None
        assert abs(epoch.energy_j - (truth.at(end) - truth.at(start))) <= epoch.error_j
        assert epoch.error_j <= 0.1 * epoch.energy_j


def test_a_gap_between_steps_keeps_both_of_its_edges() -> None:
    truth = Truth(profile(5))
    bus, steps = run_points(truth, 5)
    drop = 40  # leave one step out: the steps before and after it are no longer adjacent
    bus = [p for p in bus if not (p.measurement == "nrg_step" and p.fields["step"] == drop)]
    h = Harness(module_detail="off")
    h.feed(bus)
    h.feed([run_event("end", RUN_MS)])
    by_step = {p.fields["step"]: p.fields for p in h.out}
    summary = summarize(stored(bus, h.out))
    last = len(steps) - 1
    expected = (
        by_step[0]["error_start_joules"]
        + by_step[drop - 1]["error_end_joules"]
        + by_step[drop + 1]["error_start_joules"]
        + by_step[last]["error_end_joules"]
    )
    assert summary.steps.error_j == pytest.approx(expected, rel=1e-12)


def test_a_sample_after_the_counters_reading_leaves_an_edges_bar_alone() -> None:
    """Guards: the swing at a step's edge is taken over the driver samples that shaped the
    counter's interval holding it, up to the counter's next reading, not one sample past it:
    a GPU's counter read at 0 and 1 s (300 J: 300 W), samples every 20 ms at 300 W to 1 s, then
    one at 1.02 s of 900 W. A step from 0.9 to 0.99 s: its end edge's bar is the same with and
    without that later sample (the samples around 0.99 s, 0.96 to 1 s, are all 300 W)."""
    from acquisition.processors.energy import Source

    def source(later: bool) -> Source:
        gpu = Source("nvml:0", "gpu", "")
        gpu.counter.add(0, 0.0)
        gpu.counter.add(S, 300.0)
        for t in range(0, 1001, 20):
            gpu.samples.add(t * MS, 300.0)
        if later:
            gpu.samples.add(1020 * MS, 900.0)
        return gpu

    start, end = 900 * MS, 990 * MS
    without, with_later = source(False), source(True)
    assert with_later.bounds(start, end, 27.0) == without.bounds(start, end, 27.0)


def test_a_wall_meters_counter_has_no_staleness_in_its_edge_bars() -> None:
    """Guards: only RAPL and NVML counters lag their readings (an update period each); a wall
    meter sending an energy counter (``wall_counter``) has none, so at a constant 200 W its
    step edges' bars are 0 J, not 200 W × 1 s."""
    from acquisition.processors.energy import Source

    wall = Source("emonpi:1", "wall", "")
    for second in range(4):
        wall.counter.add(second * S, 200.0 * second)
    assert wall.bounds(1500 * MS, 2500 * MS, 200.0) == (0.0, 0.0, 0.0)
