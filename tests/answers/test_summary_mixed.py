"""A run with a wall meter, RAPL (package and DRAM) and a GPU at known constant powers: every
joule counted once, in the totals, epochs, modules, peaks and compare's error bars.

Powers: wall 200 W (it contains everything else), RAPL package 25 W, DRAM 5 W, GPU 100 W.
The run (see :class:`tests.answers.runs.KnownRun`): 3 epochs of 4 steps of 0.2 s, 0.5 s of
evaluation after each epoch, modules fc1 (0.1 s) and fc2 (0.05 s) of exclusive time per step.
Expected values are worked out by hand below, from these numbers only.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from acquisition.point import Point
from acquisition.report.compare import compare
from acquisition.summary import (
    REST_OF_SYSTEM,
    RunSummary,
    SourceEnergy,
    SummaryOptions,
    summarize,
)
from tests.answers.runs import NS, KnownRun

WALL_W, PACKAGE_W, DRAM_W, GPU_W = 200.0, 25.0, 5.0, 100.0
DURATION_S = 3 * 4 * 0.2 + 3 * 0.5  # 12 steps of 0.2 s + 3 evaluations of 0.5 s = 3.9 s
STEP_S = 0.2
EPOCH_STEP_S = 4 * 0.2  # 0.8 s of steps per epoch
N_STEPS = 12
REL = 1e-6


@dataclasses.dataclass
class MixedRun(KnownRun):
    """:class:`KnownRun` plus one GPU (``gpu`` energy counter and power reading), its modules
    with as much GPU time as exclusive time."""

    gpu_w: float = GPU_W

    def source_points(self) -> list[Point]:
        out = super().source_points()
        tick = round(self.tick_s * NS)
        t = self.t0
        while t <= self.last_sample + tick:
            seconds = (t - self.t0) / NS
            fields = {"energy_joules": self.gpu_w * seconds, "power_watts": self.gpu_w}
            out.append(Point("gpu", {**self.tags(), "gpu": "0"}, fields, t))
            t += tick
        return out

    def job_points(self) -> list[Point]:
        """The modules' GPU time equals their exclusive CPU time (GPU energy is split by it)."""
        return [
            Point(
                p.measurement,
                p.tags,
                {**p.fields, "gpu_seconds": p.fields["exclusive_seconds"]},
                p.time_ns,
            )
            if p.measurement == "nrg_module"
            else p
            for p in super().job_points()
        ]


def mixed(wall_w: float | None = WALL_W, **kw: float) -> MixedRun:
    return MixedRun(package_w=PACKAGE_W, dram_w=DRAM_W, wall_w=wall_w, **kw)  # type: ignore[arg-type]


def by_source(s: RunSummary) -> dict[str, object]:
    return {src.source: src for src in s.energy.sources}


def test_wall_rapl_and_gpu_each_joule_counted_once() -> None:
    """Guards: with a wall meter only the wall is counted (not the GPU inside it too); an
    epoch's and a module's energy sum the counted sources only (not wall + RAPL + GPU); the
    rest of system is wall − (package + DRAM + GPU)."""
    s = summarize(mixed().points())
    src = by_source(s)
    assert s.duration_s == pytest.approx(DURATION_S)
    # total: the wall alone, 200 W × 3.9 s = 780 J
    assert s.energy.total_j == pytest.approx(200.0 * 3.9, rel=REL)
    assert [name for name, e in src.items() if e.counted] == ["emonpi:5"]  # type: ignore[attr-defined]
    assert src["nvml:0"].energy_j == pytest.approx(100.0 * 3.9, rel=REL)  # type: ignore[attr-defined]
    # rest of system: (200 − 25 − 5 − 100) W × 3.9 s = 70 × 3.9 = 273 J
    assert src[REST_OF_SYSTEM].energy_j == pytest.approx(273.0, rel=REL)  # type: ignore[attr-defined]
    # a step: 200 W × 0.2 s = 40 J; an epoch: 4 steps = 160 J
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx(40.0, rel=REL)
    assert [e.energy_j for e in s.epochs] == pytest.approx([160.0] * 3, rel=REL)
    # the epoch's per-source breakdown still shows each source: GPU 100 W × 0.8 s = 80 J
    assert s.epochs[0].sources["nvml:0"] == pytest.approx(80.0, rel=REL)
    # modules: 200 W × exclusive time × 12 steps: fc1 200 × 0.1 × 12 = 240 J, fc2 120 J;
    # shares of the 12 × 40 = 480 J inside steps: 0.5 and 0.25
    mods = {m.module: m for m in s.modules}
    assert mods["fc1"].energy_j == pytest.approx(240.0, rel=REL)
    assert mods["fc2"].energy_j == pytest.approx(120.0, rel=REL)
    assert mods["fc1"].share == pytest.approx(0.5, rel=REL)
    # outside steps: 780 − 480 = 300 J (the three evaluations, 1.5 s × 200 W)
    assert s.energy.outside_steps_j == pytest.approx(300.0, rel=REL)
    # peak: the wall's own, 200 W (the GPU's 100 W is inside it)
    assert s.energy.peak_w == pytest.approx(200.0)
    assert s.energy.mean_w == pytest.approx(200.0, rel=REL)


def test_without_the_wall_rapl_and_gpu_add_up() -> None:
    """Guards: the run's peak is the sum of the counted sources' peaks (25 + 5 + 100 = 130 W),
    not the largest of them (100 W); totals, epochs and modules add package, DRAM and GPU."""
    s = summarize(mixed(wall_w=None).points())
    inside_w = 25.0 + 5.0 + 100.0  # 130 W
    assert s.energy.total_j == pytest.approx(inside_w * 3.9, rel=REL)  # 507 J
    assert s.energy.peak_w == pytest.approx(130.0)
    assert [e.energy_j for e in s.epochs] == pytest.approx([130.0 * 0.8] * 3, rel=REL)  # 104 J
    mods = {m.module: m for m in s.modules}
    assert mods["fc1"].energy_j == pytest.approx(130.0 * 0.1 * 12, rel=REL)  # 156 J
    assert REST_OF_SYSTEM not in by_source(s)


def test_compare_error_bars_of_one_run() -> None:
    """Guards: a run's energy error bar is the sum of its counted sources' error bars (the wall's
    only, RAPL and GPU are inside it), and none when a counted source has none; the per-epoch
    and per-step error bars are the standard error over epochs and steps (0 here, not none)."""
    run = mixed()
    # a window that starts 2 s before the first sample: each source misses 2 s of the run,
    # so its error bar is its mean power × 2 s; the wall's is 200 × 2 = 400 J
    window = (run.t0 - 2 * NS, run.job_end)
    s = summarize(run.points(), window_ns=window)
    assert by_source(s)["emonpi:5"].error_j == pytest.approx(400.0, rel=REL)  # type: ignore[attr-defined]
    figures = {f.name: f for f in compare(["a"], [[s]]).figures}
    assert figures["energy"].values[0].error == pytest.approx(400.0, rel=REL)
    assert figures["energy nvml:0"].values[0].error == pytest.approx(100.0 * 2, rel=REL)
    # all epochs have the same energy: standard error 0.0 (an error bar, not a missing one)
    assert figures["energy per epoch"].values[0].error == 0.0
    assert figures["energy per step"].values[0].error == 0.0

    # RAPL and GPU counted (no wall): 25 × 2 + 5 × 2 + 100 × 2 = 260 J
    s2 = summarize(mixed(wall_w=None).points(), window_ns=window)
    energy = next(f for f in compare(["b"], [[s2]]).figures if f.name == "energy")
    assert energy.values[0].error == pytest.approx(260.0, rel=REL)
    # one counted source without an error bar: the total has none
    sources = [
        dataclasses.replace(e, error_j=None) if e.source == "nvml:0" else e
        for e in s2.energy.sources
    ]
    s3 = dataclasses.replace(s2, energy=dataclasses.replace(s2.energy, sources=sources))
    energy = next(f for f in compare(["c"], [[s3]]).figures if f.name == "energy")
    # sampled from the first sample to the job's end: 1 s of start-up + 3.9 s = 4.9 s × 130 W
    assert energy.values[0].value == pytest.approx(130.0 * 4.9, rel=REL)
    assert energy.values[0].error is None


def test_compare_experiments_error_bars_and_significance() -> None:
    """Guards: an experiment's error bar is 2·sd/√n over its runs, and a difference is outside
    the error bars only when it exceeds the two bars added (not the larger of them)."""
    base = [summarize(mixed(wall_w=w).points()) for w in (200.0, 204.0, 208.0)]
    other = [summarize(mixed(wall_w=w).points()) for w in (206.0, 210.0, 214.0)]
    energy = next(f for f in compare(["a", "b"], [base, other]).figures if f.name == "energy")
    a, b = energy.values
    # totals w × 3.9 s: 780, 795.6, 811.2 J; mean 795.6; deviations ±15.6, 0:
    # sd = √((15.6² + 0 + 15.6²) / 2) = 15.6; error = 2 × 15.6 / √3 ≈ 18.013 J
    assert a.value == pytest.approx(795.6, rel=REL)
    assert a.sd == pytest.approx(15.6, rel=REL)
    assert a.error == pytest.approx(2 * 15.6 / math.sqrt(3), rel=REL)
    assert b.error == pytest.approx(2 * 15.6 / math.sqrt(3), rel=REL)
    # difference: 6 W × 3.9 s = 23.4 J; bars added 36.03 J > 23.4 J: not outside them
    # (the larger bar alone, 18.01 J, would call it significant)
    assert b.diff == pytest.approx(23.4, rel=REL)
    assert b.significant is False
    # 12 W apart: 46.8 J > 36.03 J
    far = [summarize(mixed(wall_w=w).points()) for w in (212.0, 216.0, 220.0)]
    energy = next(f for f in compare(["a", "c"], [base, far]).figures if f.name == "energy")
    assert energy.values[1].significant is True


def test_two_counter_restarts_keep_both_offsets() -> None:
    """Guards: a second collector restart keeps the offset of the first (the counter is made
    continuous across every restart, losing one tick of energy per restart)."""
    run = KnownRun(startup_s=0.0, eval_s=0.0, tail_s=0.0)
    pts = [p for p in run.points() if p.measurement == "rapl" and p.tags["domain"] == "package"]
    third = len(pts) // 3
    cuts = (third, 2 * third)

    def restarted(i: int, p: Point) -> Point:
        # after each cut the counter starts again near 1 J (a new collector's open)
        base = max((c for c in cuts if c <= i), default=None)
        if base is None:
            return p
        value = float(p.fields["energy_joules"]) - float(pts[base].fields["energy_joules"]) + 1.0
        return Point(p.measurement, p.tags, {"energy_joules": value}, p.time_ns)

    s = summarize([restarted(i, p) for i, p in enumerate(pts)])
    # 25 W over the sampled span, less one 0.05 s tick (1.25 J) lost at each of two restarts
    span_s = (pts[-1].time_ns - pts[0].time_ns) / NS
    assert s.energy.total_j == pytest.approx(25.0 * span_s - 2 * 25.0 * 0.05, rel=1e-9)


def test_rapl_core_is_reported_not_added() -> None:
    """Guards: RAPL core (inside the package) is reported but not counted: the total stays
    package + DRAM + GPU = 130 W × 3.9 s = 507 J, not 507 + 15 × 3.9."""
    run = mixed(wall_w=None)
    pts = run.points()
    core = [
        Point(
            "rapl",
            {**p.tags, "domain": "core"},
            {"energy_joules": 15.0 / 25.0 * float(p.fields["energy_joules"])},
            p.time_ns,
        )
        for p in pts
        if p.measurement == "rapl" and p.tags["domain"] == "package"
    ]
    s = summarize(pts + core)
    core_source = by_source(s)["rapl:core-0"]
    assert not core_source.counted  # type: ignore[attr-defined]
    assert core_source.energy_j == pytest.approx(15.0 * 3.9, rel=REL)  # type: ignore[attr-defined]
    assert s.energy.total_j == pytest.approx(130.0 * 3.9, rel=REL)


def test_a_run_without_energy_has_no_power_figures() -> None:
    """Guards: with no source at all, mean and peak power and the energy outside steps are
    unknown (None), not 0 W."""
    pts = [
        p for p in mixed().points() if p.measurement not in ("rapl", "gpu", "emonpi", "nrg_energy")
    ]
    s = summarize(pts)
    assert s.energy.total_j == 0.0
    assert (s.energy.mean_w, s.energy.peak_w, s.energy.outside_steps_j) == (None, None, None)


def test_a_source_on_two_hosts_has_an_error_bar_only_if_both_have_one() -> None:
    """Guards: a per-source figure adds the source's hosts (GPU 0 here, 100 W × 4.9 s = 490 J,
    plus 10 J on a second host) and has no error bar when one of them has none."""
    run = mixed(wall_w=None)
    s = summarize(run.points(), window_ns=(run.t0 - 2 * NS, run.job_end))
    other_host = SourceEnergy("nvml:0", 10.0, None, None, None, "h2", True)
    s2 = dataclasses.replace(
        s, energy=dataclasses.replace(s.energy, sources=[*s.energy.sources, other_host])
    )
    gpu = next(f for f in compare(["a"], [[s2]]).figures if f.name == "energy nvml:0")
    assert gpu.values[0].value == pytest.approx(100.0 * 4.9 + 10.0, rel=REL)
    assert gpu.values[0].error is None
    gpu = next(f for f in compare(["a"], [[s]]).figures if f.name == "energy nvml:0")
    assert gpu.values[0].error == pytest.approx(100.0 * 2, rel=REL)  # one host: its own bar


def test_window_edges_between_samples_are_interpolated() -> None:
    """Guards: a window whose edges fall between samples (every 50 ms) takes the counters'
    values interpolated there: 25 + 5 + 100 W over the 1.23 s from 0.01 s to 1.24 s = 159.9 J,
    and the per-host energy counts the counted sources only (the wall's 200 W × 3.9 s = 780 J
    with a wall meter, not 780 + the 507 J inside it)."""
    run = mixed(wall_w=None)
    window = (run.t0 + 10_000_000, run.t0 + 1_240_000_000)
    s = summarize(run.points(), window_ns=window)
    assert s.energy.total_j == pytest.approx(130.0 * 1.23, rel=REL)
    walled = summarize(mixed().points())
    assert walled.per_host[0]["energy_j"] == pytest.approx(200.0 * 3.9, rel=REL)


def test_a_run_that_ended_twice_ends_at_its_last_end() -> None:
    """Guards: with two ``nrg_run`` end events (a job that ended, was resumed and ended again)
    the window ends at the last one: 3.9 s + 1 s = 4.9 s."""
    run = mixed()
    pts = run.points()
    (end,) = [p for p in pts if p.measurement == "nrg_run" and p.fields["event"] == "end"]
    later = Point(end.measurement, end.tags, end.fields, end.time_ns + NS)
    s = summarize([*pts, later])
    assert s.duration_s == pytest.approx(4.9)


def test_rest_of_system_error_bar_adds_every_part() -> None:
    """Guards: the rest of system (wall − package − DRAM − GPU) carries the error bars of all
    four parts, not the wall's alone. The window starts 2 s before the first sample, so each
    source's bar is its power × 2 s: wall 400 J, package 50 J, DRAM 10 J, GPU 200 J; the rest's
    400 + 50 + 10 + 200 = 660 J. Its energy over the 4.9 s sampled: (200 − 130) W × 4.9 s."""
    run = mixed()
    s = summarize(run.points(), window_ns=(run.t0 - 2 * NS, run.job_end))
    src = by_source(s)
    errors = {name: src[name].error_j for name in src}  # type: ignore[attr-defined]
    assert errors["emonpi:5"] == pytest.approx(400.0, rel=REL)
    assert errors["rapl:package-0"] == pytest.approx(50.0, rel=REL)
    assert errors["rapl:dram-0"] == pytest.approx(10.0, rel=REL)
    assert errors["nvml:0"] == pytest.approx(200.0, rel=REL)
    assert errors[REST_OF_SYSTEM] == pytest.approx(660.0, rel=REL)
    assert src[REST_OF_SYSTEM].energy_j == pytest.approx(70.0 * 4.9, rel=REL)  # type: ignore[attr-defined]
    assert not src[REST_OF_SYSTEM].counted  # type: ignore[attr-defined]


def test_a_host_without_steps_has_no_step_energy() -> None:
    """Guards: the per-host figures of a host that measured energy but ran no step (a second
    host's package counter, 25 W): its energy 25 W × 3.9 s = 97.5 J, 0 J in steps and no ranks;
    the first host keeps its wall's 200 W × 3.9 s = 780 J, 200 W × 12 × 0.2 s = 480 J in steps."""
    pts = mixed().points()
    h2 = [
        Point(p.measurement, {**p.tags, "host": "h2"}, p.fields, p.time_ns)
        for p in pts
        if p.measurement == "rapl" and p.tags["domain"] == "package"
    ]
    s = summarize(pts + h2)
    rows = {row["host"]: row for row in s.per_host}
    assert sorted(rows) == ["h1", "h2"]
    assert rows["h2"]["energy_j"] == pytest.approx(25.0 * 3.9, rel=REL)
    assert rows["h2"]["steps_energy_j"] == 0.0
    assert rows["h2"]["ranks"] == []
    assert rows["h1"]["energy_j"] == pytest.approx(200.0 * 3.9, rel=REL)
    assert rows["h1"]["steps_energy_j"] == pytest.approx(200.0 * 12 * 0.2, rel=REL)


def test_mean_power_of_short_windows() -> None:
    """Guards: the mean power of a window of a second or less (a short run, or a short slice of
    one) is its energy over its duration: the wall's 200 W over 0.5 s (100 J) and over 1 s
    (200 J); a window of no length has no mean power (0 J over 0 s)."""
    run = mixed()
    pts = run.points()
    for seconds in (0.5, 1.0):
        start = run.t0 + NS
        s = summarize(pts, window_ns=(start, start + round(seconds * NS)))
        assert s.duration_s == pytest.approx(seconds)
        assert s.energy.total_j == pytest.approx(200.0 * seconds, rel=REL)
        assert s.energy.mean_w == pytest.approx(200.0, rel=REL)
    empty = summarize(pts, window_ns=(run.t0 + NS, run.t0 + NS))
    assert (empty.duration_s, empty.energy.total_j, empty.energy.mean_w) == (0.0, 0.0, None)


def test_the_rest_of_system_needs_the_cpu_package_measured() -> None:
    """Guards: the rest of system (the wall less what is measured inside it) is given only when
    the CPU package is among what is measured: with the wall and the GPU alone it would hold the
    CPU, so there is none; with the wall and the package alone it is (200 − 25) W × 3.9 s =
    682.5 J."""
    points = mixed().points()
    without_rapl = [p for p in points if p.measurement != "rapl"]
    assert REST_OF_SYSTEM not in by_source(summarize(without_rapl))
    package_only = [
        p
        for p in points
        if p.measurement != "gpu" and not (p.measurement == "rapl" and p.tags["domain"] == "dram")
    ]
    rest = by_source(summarize(package_only))[REST_OF_SYSTEM]
    assert rest.energy_j == pytest.approx((200.0 - 25.0) * 3.9, rel=REL)  # type: ignore[attr-defined]


def test_an_epoch_of_steps_without_their_start_times_lasts_0_s() -> None:
    """Guards: steps that give their end but not their start (a writer that left the field
    out) make an epoch of no known length, 0 s, and the summary is still made."""
    points = [
        Point(
            p.measurement,
            p.tags,
            {k: v for k, v in p.fields.items() if k != "start_time_ns"},
            p.time_ns,
        )
        if p.measurement == "nrg_step"
        else p
        for p in mixed().points()
    ]
    s = summarize(points)
    assert [e.duration_s for e in s.epochs] == [0.0, 0.0, 0.0]
    assert [e.steps for e in s.epochs] == [4, 4, 4]


def test_the_summary_lists_the_top_modules_asked_for() -> None:
    """Guards: ``top_modules`` is how many modules the summary lists, the most energy first:
    of fc1 (0.1 s a step) and fc2 (0.05 s), 1 gives fc1 alone, 2 both, 0 none."""
    points = mixed().points()
    listed = [
        [m.module for m in summarize(points, SummaryOptions(top_modules=n)).modules]
        for n in (0, 1, 2)
    ]
    assert listed == [[], ["fc1"], ["fc1", "fc2"]]
