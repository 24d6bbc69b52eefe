"""Step statistics of the run summary on steps of unequal energy, written as storage holds
them (``nrg_step`` and the attribution's ``nrg_energy`` points), each figure by hand."""

from __future__ import annotations

import math

import pytest

from acquisition.point import Point
from acquisition.report.compare import compare
from acquisition.summary import format_text, summarize
from tests.answers.runs import KnownRun

S = 1_000_000_000
T0 = 1_764_000_000 * S
TAGS = {"host": "h1", "run": "r1", "experiment": "e1"}
# per step: package J, dram J, samples; totals 1, 2 and 6 J
STEPS = [(0.8, 0.2, 10), (1.5, 0.5, 10), (5.0, 1.0, 20)]


def points(epochs: tuple[int, ...] = (0, 0, 0), scale: float = 1.0) -> list[Point]:
    """The steps of STEPS (energies × ``scale``) in ``epochs``, and the model's forward FLOPs."""
    out = [Point("nrg_model", {**TAGS, "module": "(root)"}, {"flops": 1000}, T0)]
    for n, (package, dram, samples) in enumerate(STEPS):
        start, end = T0 + n * S, T0 + (n + 1) * S
        fields = {"step": n, "start_time_ns": start, "end_time_ns": end, "samples": samples}
        epoch = str(epochs[n])
        out.append(Point("nrg_step", {**TAGS, "epoch": epoch}, fields, end))
        for source, joules, error in (
            ("rapl:package-0", package, 0.1),
            ("rapl:dram-0", dram, 0.05),
        ):
            tags = {**TAGS, "epoch": epoch, "source": source, "scope": "step"}
            energy = {"step": n, "energy_joules": joules * scale, "error_joules": error}
            out.append(Point("nrg_energy", tags, energy, end))
    return out


def test_step_statistics_of_unequal_steps() -> None:
    """Guards: the sample standard deviation (n − 1), the quantiles' interpolation, the energy
    per sample over all samples, and the steps' error bars summed over sources and steps.

    Totals 1, 2, 6 J: mean 3; sd √(((1−3)² + (2−3)² + (6−3)²) / 2) = √7; p50 the middle, 2 J;
    p95 at position 0.95 × 2 = 1.9: 2 + (6 − 2) × 0.9 = 5.6 J. Per sample 9 J / 40 = 0.225 J.
    Error 3 steps × (0.1 + 0.05) = 0.45 J."""
    s = summarize(points())
    assert s.steps.count == 3
    assert s.steps.energy_j == pytest.approx(
        {"mean": 3.0, "sd": math.sqrt(7), "p50": 2.0, "p95": 5.6}, rel=1e-12
    )
    assert s.steps.samples == 40
    assert s.steps.energy_per_sample_j == pytest.approx(0.225, rel=1e-12)
    assert s.steps.error_j == pytest.approx(0.45, rel=1e-12)
    # the epoch: 3 s from the first start to the last end, 9 J
    (epoch,) = s.epochs
    assert (epoch.steps, epoch.duration_s) == (3, 3.0)
    assert epoch.energy_j == pytest.approx(9.0, rel=1e-12)


def test_compare_error_bars_of_unequal_steps_and_epochs() -> None:
    """Guards: the per-step error bar is sd/√n over steps, the per-epoch one sd/√n over epochs,
    the energy per FLOP is the step's energy ÷ FLOPs; a difference is other − base and its ratio
    is relative to the base.

    Steps 1, 2, 6 J: per step 3 J ± √7/√3 ≈ 1.5275 J. Epochs {1 + 2, 6} = {3, 6} J: per epoch
    4.5 J ± stdev(3, 6)/√2 = 2.1213/1.4142 = 1.5 J. Per FLOP 3 J / 1000 = 0.003 J. The other
    run has every step twice as large: per step 6 J, a difference of +3 J, ratio +1.0."""
    base = summarize(points(epochs=(0, 0, 1)))
    other = summarize(points(epochs=(0, 0, 1), scale=2.0))
    figures = {f.name: f for f in compare(["a", "b"], [[base], [other]]).figures}
    step = figures["energy per step"].values
    assert step[0].value == pytest.approx(3.0, rel=1e-12)
    assert step[0].error == pytest.approx(math.sqrt(7) / math.sqrt(3), rel=1e-12)
    assert step[1].diff == pytest.approx(3.0, rel=1e-12)
    assert step[1].diff_ratio == pytest.approx(1.0, rel=1e-12)
    epoch = figures["energy per epoch"].values[0]
    assert epoch.value == pytest.approx(4.5, rel=1e-12)
    assert epoch.error == pytest.approx(1.5, rel=1e-12)
    flop = figures["energy per forward FLOP"].values[0]
    assert flop.value == pytest.approx(0.003, rel=1e-12)
    assert flop.error == pytest.approx(math.sqrt(7) / math.sqrt(3) / 1000, rel=1e-12)


def test_a_run_of_one_step_has_no_spread() -> None:
    """Guards: the step energy figures of a run with a single step: its energy is the mean,
    both quantiles and has no spread (sd 0 J). RAPL 25 + 5 = 30 W over the step's 0.2 s: 6 J."""
    s = summarize(KnownRun(epochs=1, steps=1).points())
    assert s.steps.count == 1
    e = s.steps.energy_j
    assert e is not None
    assert (e["mean"], e["p50"], e["p95"]) == (pytest.approx(6.0),) * 3
    assert e["sd"] == 0.0


def test_forward_flops_are_the_whole_models() -> None:
    """Guards: the run's forward FLOPs are the whole model's (its ``(root)`` module), not those a
    submodule reports beside it (fc1: 400): 1000 FLOPs, and per FLOP the mean step's
    3 J / 1000 = 0.003 J."""
    fc1 = Point("nrg_model", {**TAGS, "module": "fc1"}, {"flops": 400}, T0)
    s = summarize([fc1, *points(), fc1])
    assert s.flops == 1000
    flop = next(f for f in compare(["a"], [[s]]).figures if f.name == "energy per forward FLOP")
    assert flop.values[0].value == pytest.approx(0.003, rel=1e-12)


def steps_of(totals: list[float | None], with_step_points: bool = True) -> list[Point]:
    """One-second steps of the given package energies (``None``: a step the attribution gave no
    energy), each with its ``nrg_step`` point unless ``with_step_points`` is False."""
    out = []
    for n, joules in enumerate(totals):
        end = T0 + (n + 1) * S
        if with_step_points:
            fields = {"step": n, "start_time_ns": end - S, "end_time_ns": end, "samples": 10}
            out.append(Point("nrg_step", {**TAGS, "epoch": "0"}, fields, end))
        if joules is not None:
            tags = {**TAGS, "epoch": "0", "source": "rapl:package-0", "scope": "step"}
            out.append(Point("nrg_energy", tags, {"step": n, "energy_joules": joules}, end))
    return out


def test_median_of_an_even_number_of_steps_is_between_the_middle_two() -> None:
    """Guards: the median of an even number of step energies interpolates between the two
    middle values, not towards the largest.

    Steps 9, 1, 4, 2 J (ordered 1, 2, 4, 9): p50 at position 0.5 × 3 = 1.5, halfway between
    2 and 4: 3 J; p95 at 0.95 × 3 = 2.85: 4 + (9 − 4) × 0.85 = 8.25 J; mean 16 / 4 = 4 J."""
    e = summarize(steps_of([9.0, 1.0, 4.0, 2.0])).steps.energy_j
    assert e is not None
    assert (e["p50"], e["p95"], e["mean"]) == pytest.approx((3.0, 8.25, 4.0), rel=1e-12)


def test_steps_without_energy_are_counted() -> None:
    """Guards: the step count is the steps the run recorded, including those without energy;
    it comes from the energies only when no step points were stored.

    Five steps, the third without energy: 5 steps, the statistics over the four with energy
    (1, 2, 4, 9 J: mean 16 / 4 = 4 J). Without step points: the four with energy."""
    s = summarize(steps_of([1.0, 2.0, None, 4.0, 9.0]))
    assert s.steps.count == 5
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx(4.0, rel=1e-12)
    assert summarize(steps_of([1.0, 2.0, None, 4.0, 9.0], with_step_points=False)).steps.count == 4


def test_energy_outside_steps_only_with_both_steps_and_sources() -> None:
    """Guards: "outside steps" (the run's energy less its steps') is given only for a run that
    has both. KnownRun draws RAPL 25 + 5 = 30 W; its job lasts 3.9 s: 3 epochs of 4 steps of
    0.2 s (2.4 s) and an evaluation of 0.5 s after each epoch (1.5 s)."""
    run = KnownRun()
    full = summarize(run.points())
    assert full.energy.total_j == pytest.approx(30 * 3.9)  # 117 J
    assert full.energy.outside_steps_j == pytest.approx(30 * 1.5)  # 117 − 30 × 2.4 = 45 J
    assert "  outside steps: 45.000 J" in format_text(full).splitlines()
    # A job that reported no steps: 117 J in all, and no "outside steps" (not all 117 J).
    stepless = [p for p in run.points() if p.measurement not in ("nrg_step", "nrg_energy")]
    s = summarize(stepless)
    assert s.energy.total_j == pytest.approx(117.0)
    assert s.energy.outside_steps_j is None
    assert not any("outside steps" in line for line in format_text(s).splitlines())
    # Steps with energy (1 + 2 + 6 J) but no source reading stored: none (not 0 − 9 = −9 J).
    s = summarize(points())
    assert (s.energy.total_j, s.energy.outside_steps_j) == (0.0, None)


@pytest.mark.parametrize(
    ("fields", "source"),
    [
        ({"energy_joules": 100.0}, "rapl:package-0"),  # no step
        ({"step": 1.0, "energy_joules": 100.0}, "rapl:package-0"),  # a step that is no integer
        ({"step": 1}, "rapl:package-0"),  # no energy
        ({"step": 1, "energy_joules": "n/a"}, "rapl:package-0"),  # an energy that is no number
        ({"step": 1, "energy_joules": 100.0}, ""),  # no source
    ],
    ids=["no step", "float step", "no energy", "text energy", "no source"],
)
def test_an_incomplete_energy_point_is_left_out(fields: dict[str, object], source: str) -> None:
    """Guards: a step's energy point without its step number, its energy or its source (a line
    written by hand or by another tool) is left out, and the points after it are still read:
    stored first or last, the three steps stay 1, 2 and 6 J (mean 3 J, p50 2 J, 9 J in all),
    not a fourth step or a 100 J one, nor none."""
    tags = {**TAGS, "epoch": "0", "scope": "step"}
    if source:
        tags["source"] = source
    stray = Point("nrg_energy", tags, fields, T0 + 2 * S)  # type: ignore[arg-type]
    for stored in ([stray, *points()], [*points(), stray]):
        s = summarize(stored)
        assert s.steps.count == 3
        assert s.steps.energy_j is not None
        assert s.steps.energy_j["mean"] == pytest.approx(3.0, rel=1e-12)
        assert s.steps.energy_j["p50"] == pytest.approx(2.0, rel=1e-12)
        (epoch,) = s.epochs
        assert epoch.energy_j == pytest.approx(9.0, rel=1e-12)


def fc_energy(joules: float) -> Point:
    """Step 0's energy of the module ``fc`` from RAPL package."""
    return Point(
        "nrg_energy",
        {**TAGS, "epoch": "0", "source": "rapl:package-0", "scope": "module", "module": "fc"},
        {"step": 0, "energy_joules": joules},
        T0 + S,
    )


def test_module_shares_are_zero_when_the_steps_used_no_energy() -> None:
    """Guards: steps whose sources did not move (0 J in every step, an idle counter) give their
    modules a share of 0 %, not 100 %: a share of nothing is none."""
    module_energy = fc_energy(0.0)
    s = summarize([*points(scale=0.0), module_energy])
    assert [(m.module, m.energy_j, m.share) for m in s.modules] == [("fc", 0.0, 0.0)]
    (line,) = [row for row in format_text(s).splitlines() if row.strip().startswith("fc ")]
    assert line.split() == ["fc", "0.000", "J", "0.0", "%"]


def test_module_shares_of_steps_under_a_joule() -> None:
    """Guards: a module's share of the steps' energy is taken however small that energy is (an
    idle CPU, a tiny model): not 0 % below some threshold. Steps of 1, 2 and 6 J scaled by
    0.05: 0.05 + 0.1 + 0.3 = 0.45 J; the module ``fc`` 0.09 J of RAPL package: 0.09 / 0.45 =
    20 %."""
    module_energy = fc_energy(0.09)
    s = summarize([*points(scale=0.05), module_energy])
    ((module, energy, share),) = [(m.module, m.energy_j, m.share) for m in s.modules]
    assert (module, energy) == ("fc", pytest.approx(0.09, rel=1e-12))
    assert share == pytest.approx(0.2, rel=1e-12)


def test_a_step_without_an_epoch_is_in_epoch_0() -> None:
    """Guards: a step point that names no epoch (no ``epoch`` tag, no integer ``epoch`` field;
    a writer other than the training library) is in epoch 0, the library's first, beside the
    steps tagged 0; an integer ``epoch`` field still names its epoch.

    Steps of 1 s and 1, 2 and 6 J: the first tagged epoch 0, the second untagged, the third
    with the field ``epoch=2``. Epoch 0: 2 steps, 0 → 2 s, 1 + 2 = 3 J; epoch 2: 1 step, 6 J."""
    epochs: list[dict[str, str]] = [{"epoch": "0"}, {}, {}]
    fields: list[dict[str, int]] = [{}, {}, {"epoch": 2}]
    out = []
    for n, joules in enumerate((1.0, 2.0, 6.0)):
        end = T0 + (n + 1) * S
        step = {"step": n, "start_time_ns": end - S, "end_time_ns": end, **fields[n]}
        out.append(Point("nrg_step", {**TAGS, **epochs[n]}, step, end))
        tags = {**TAGS, **epochs[n], "source": "rapl:package-0", "scope": "step"}
        out.append(Point("nrg_energy", tags, {"step": n, "energy_joules": joules}, end))
    s = summarize(out)
    got = [(e.epoch, e.steps, e.duration_s, e.energy_j) for e in s.epochs]
    assert got == [(0, 2, 2.0, pytest.approx(3.0)), (2, 1, 1.0, pytest.approx(6.0))]


def test_step_energy_of_a_source_of_unknown_kind_is_listed_not_added() -> None:
    """Guards: stored step energies of a source whose kind the summary does not know (another
    writer's, or a newer collector's: ``amdsmi:0``) are listed in their epoch, and neither
    added to the steps' energy nor to their error bars (it may overlap what is counted), and
    do not stop the summary.

    Two steps of 1 s: RAPL package 1 and 2 J (± 0.1 J each), the other source 5 J each. Steps:
    mean (1 + 2) / 2 = 1.5 J, error bar 0.1 + 0.1 = 0.2 J; the epoch: 3 J, and the other
    source's 5 + 5 = 10 J beside RAPL's 3 J."""
    out = []
    for n, package in enumerate((1.0, 2.0)):
        end = T0 + (n + 1) * S
        fields = {"step": n, "start_time_ns": end - S, "end_time_ns": end}
        out.append(Point("nrg_step", {**TAGS, "epoch": "0"}, fields, end))
        for source, joules in (("rapl:package-0", package), ("amdsmi:0", 5.0)):
            tags = {**TAGS, "epoch": "0", "source": source, "scope": "step"}
            energy = {"step": n, "energy_joules": joules, "error_joules": 0.1}
            out.append(Point("nrg_energy", tags, energy, end))
    s = summarize(out)
    assert s.steps.count == 2
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx(1.5, rel=1e-12)
    assert s.steps.error_j == pytest.approx(0.2, rel=1e-12)
    (epoch,) = s.epochs
    assert epoch.energy_j == pytest.approx(3.0, rel=1e-12)
    assert epoch.error_j == pytest.approx(0.2, rel=1e-12)
    assert epoch.sources == {"rapl:package-0": pytest.approx(3.0), "amdsmi:0": pytest.approx(10.0)}


@pytest.mark.parametrize("edge", ["error_start_joules", "error_end_joules"])
def test_a_step_with_one_edge_bound_keeps_its_own_error_bar(edge: str) -> None:
    """Guards: a step energy point that gives the bound at only one of its edges (another
    writer's, or a field lost) is bounded by its own error, not by that one edge and nothing
    at the other. One step of 1 J, ± 0.5 J, 0.1 J at one edge: 0.5 J."""
    tags = {**TAGS, "epoch": "0", "source": "rapl:package-0", "scope": "step"}
    step = {"step": 0, "start_time_ns": T0, "end_time_ns": T0 + S}
    energy = {"step": 0, "energy_joules": 1.0, "error_joules": 0.5, edge: 0.1}
    s = summarize(
        [
            Point("nrg_step", {**TAGS, "epoch": "0"}, step, T0 + S),
            Point("nrg_energy", tags, energy, T0 + S),
        ]
    )
    assert s.steps.error_j == pytest.approx(0.5, rel=1e-12)
    assert [e.error_j for e in s.epochs] == [pytest.approx(0.5, rel=1e-12)]
