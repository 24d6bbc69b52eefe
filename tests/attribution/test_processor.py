"""EnergyAttribution fed literal bus points: what it emits, when, and that energy is conserved."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.bus import Bus
from acquisition.config import PluginSpec
from acquisition.errors import ConfigError
from acquisition.point import Point
from acquisition.processors.attribution import AttributionConfig, EnergyAttribution
from acquisition.registry import build_plugin

S = 1_000_000_000
MS = 1_000_000
T0 = 1_763_000_000 * S  # an epoch second: all times below are offsets from it
RUN = {"experiment": "e1", "run": "r1", "rank": "0", "host": "h"}


def context() -> PluginContext:
    return PluginContext(
        host="h", interval_s=0.1, state_dir=Path("/"), data_dir=Path("/"), runtime_dir=Path("/")
    )


class Harness:
    def __init__(self, **options: object) -> None:
        self.proc = EnergyAttribution(AttributionConfig(**options), context())  # type: ignore[arg-type]
        self.out: list[Point] = []

    def feed(self, points: Iterable[Point]) -> None:
        for p in points:
            self.proc.process(p, self.out.append)

    def rows(self) -> list[tuple[object, ...]]:
        """(source, scope, module, phase, step, joules, seconds) per emitted point, in order."""
        return [
            (
                p.tags["source"],
                p.tags["scope"],
                p.tags.get("module", ""),
                p.tags.get("phase", ""),
                p.fields["step"],
                pytest.approx(p.fields["energy_joules"], rel=1e-9, abs=1e-12),
                pytest.approx(p.fields["duration_seconds"], rel=1e-9, abs=1e-12),
            )
            for p in self.out
        ]


def counter(
    domain: str, watts: float, t_from_ms: int, t_to_ms: int, every_ms: int = 100
) -> list[Point]:
    """RAPL samples of a constant ``watts`` from T0 (counter 0 at T0)."""
    return [
        Point(
            "rapl",
            {"socket": "0", "domain": domain},
            {"energy_joules": watts * t / 1000, "power_watts": watts},
            T0 + t * MS,
        )
        for t in range(t_from_ms, t_to_ms + 1, every_ms)
    ]


def restarted_counter(watts: float) -> list[Point]:
    """RAPL package samples after the collector restarted at 500 ms: its counter counts from 0
    again, every 100 ms from 600 to 1000 ms, at a constant ``watts`` (no power field)."""
    return [
        Point(
            "rapl",
            {"socket": "0", "domain": "package"},
            {"energy_joules": watts * t / 1000},
            T0 + (500 + t) * MS,
        )
        for t in range(100, 501, 100)
    ]


def step(
    n: int,
    start_ms: int,
    end_ms: int,
    epoch: int = 0,
    tags: dict[str, str] = RUN,
    epoch_as_field: bool = False,
) -> Point:
    """An ``nrg_step`` point: ``epoch`` a tag, or the integer field older jobs wrote."""
    fields: dict[str, int | float] = {
        "step": n,
        "start_time_ns": T0 + start_ms * MS,
        "end_time_ns": T0 + end_ms * MS,
        "duration_seconds": (end_ms - start_ms) / 1000,
    }
    if epoch_as_field:
        fields["epoch"] = epoch
    else:
        tags = {**tags, "epoch": str(epoch)}
    return Point("nrg_step", tags, fields, T0 + end_ms * MS)


def module(
    n: int, name: str, phase: str, excl: float, end_ms: int, gpu: float | None = None
) -> Point:
    fields: dict[str, float | int] = {
        "step": n,
        "calls": 1,
        "inclusive_seconds": excl,
        "exclusive_seconds": excl,
    }
    if gpu is not None:
        fields["gpu_seconds"] = gpu
    tags = {**RUN, "epoch": "0", "module": name, "phase": phase}
    return Point("nrg_module", tags, fields, T0 + end_ms * MS)


def run_event(event: str, at_ms: int) -> Point:
    return Point("nrg_run", RUN, {"event": event, "pid": 1, "graph_path": ""}, T0 + at_ms * MS)


STEP0_MODULES = [
    module(0, "fc1", "forward", 0.1, 550),
    module(0, "fc2", "backward", 0.05, 550),
]


def test_modules_first_then_step_completed_by_run_end() -> None:
    h = Harness()
    h.feed(
        [run_event("start", 0), *counter("package", 10.0, 0, 200), *counter("dram", 2.0, 0, 200)]
    )
    h.feed([*STEP0_MODULES, step(0, 250, 550)])
    h.feed(counter("package", 10.0, 300, 600) + counter("dram", 2.0, 300, 600))
    assert h.out == []  # data is there, but more modules of step 0 could still come
    h.feed([run_event("end", 700)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "module", "fc1", "forward", 0, 1.0, 0.1),
        ("rapl:package-0", "module", "fc2", "backward", 0, 0.5, 0.05),
        ("rapl:package-0", "unattributed", "", "", 0, 1.5, 0.15),
        ("rapl:dram-0", "step", "", "", 0, 0.6, 0.3),
        ("rapl:dram-0", "module", "fc1", "forward", 0, 0.2, 0.1),
        ("rapl:dram-0", "module", "fc2", "backward", 0, 0.1, 0.05),
        ("rapl:dram-0", "unattributed", "", "", 0, 0.3, 0.15),
    ]
    first = h.out[0]
    assert first.measurement == "nrg_energy"
    assert first.tags == {
        "experiment": "e1",
        "run": "r1",
        "rank": "0",
        "epoch": "0",
        "source": "rapl:package-0",
        "scope": "step",
    }
    assert first.fields == {
        "step": 0,
        "energy_joules": pytest.approx(3.0, rel=1e-12),
        "duration_seconds": pytest.approx(0.3, rel=1e-12),
        "mean_power_watts": pytest.approx(10.0, rel=1e-12),
        # constant power, no swing: 2 × 10 W × RAPL's 1 ms update period
        "error_joules": pytest.approx(0.02, rel=1e-9),
        # each edge: 10 W × 1 ms; a run of adjacent steps is off by its two outer edges only
        "error_start_joules": pytest.approx(0.01, rel=1e-9),
        "error_end_joules": pytest.approx(0.01, rel=1e-9),
    }
    assert first.time_ns == T0 + 550 * MS
    assert first.fields["mean_power_watts"] == pytest.approx(10.0, rel=1e-9)
    assert h.out[1].tags["module"] == "fc1" and h.out[1].tags["phase"] == "forward"
    assert h.proc.stats()["steps_attributed"] == 1
    assert h.proc.stats()["steps_pending"] == 0


def test_points_emitted_counts_the_points_written() -> None:
    """Guards: ``points_emitted`` is the number of points the attribution wrote: 0 before the
    first step completes, then 2 sources × (step, 2 modules, unattributed) = 8."""
    h = Harness()
    h.feed([run_event("start", 0), *counter("package", 10.0, 0, 600)])
    h.feed([*counter("dram", 2.0, 0, 600), *STEP0_MODULES, step(0, 250, 550)])
    assert (h.out, h.proc.stats()["points_emitted"]) == ([], 0)
    h.feed([run_event("end", 700)])
    assert (len(h.out), h.proc.stats()["points_emitted"]) == (8, 8)


def test_step_first_then_modules_completed_by_the_next_step_and_sources() -> None:
    h = Harness()
    h.feed(counter("package", 10.0, 0, 200))
    h.feed([step(0, 250, 550), *STEP0_MODULES, module(1, "fc1", "forward", 0.1, 900)])
    assert h.out == []  # step 0 is complete, but the source has not passed its end yet
    h.feed(counter("package", 10.0, 300, 500))
    assert h.out == []
    h.feed(counter("package", 10.0, 600, 600))
    assert [r[:4] for r in h.rows()] == [
        ("rapl:package-0", "step", "", ""),
        ("rapl:package-0", "module", "fc1", "forward"),
        ("rapl:package-0", "module", "fc2", "backward"),
        ("rapl:package-0", "unattributed", "", ""),
    ]
    assert h.rows()[1][5] == pytest.approx(1.0)


def test_grace_on_the_data_clock_emits_a_step_nothing_completes() -> None:
    h = Harness(grace=1.0)
    h.feed(counter("package", 10.0, 0, 600))
    h.feed([*STEP0_MODULES, step(0, 250, 550)])  # arrives at data clock 600 ms
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 1599 * MS)])
    assert h.out == []
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 1600 * MS)])
    assert len(h.out) == 4
    assert sum(p.fields["energy_joules"] for p in h.out[1:]) == pytest.approx(3.0)  # type: ignore[misc]


def test_conservation_per_source_and_step() -> None:
    h = Harness()
    mods = [module(0, f"layer{i}", "forward", 0.013 * (i + 1), 970) for i in range(7)]
    h.feed([*counter("package", 37.3, 0, 1000, every_ms=50), *mods, step(0, 123, 970)])
    h.feed([run_event("end", 1000)])
    by_scope: dict[str, float] = {}
    for p in h.out:
        by_scope[p.tags["scope"]] = by_scope.get(p.tags["scope"], 0.0) + p.fields["energy_joules"]  # type: ignore[operator]
    assert by_scope["step"] == pytest.approx(37.3 * 0.847, rel=1e-12)
    # Module i ran 0.013 × (i + 1) s at the step's mean power, 37.3 W: 0.013 × 28 s in all.
    assert by_scope["module"] == pytest.approx(37.3 * 0.013 * 28, rel=1e-12)
    assert by_scope["unattributed"] == pytest.approx(37.3 * (0.847 - 0.013 * 28), rel=1e-12)
    assert math.isclose(
        by_scope["module"] + by_scope["unattributed"], by_scope["step"], rel_tol=1e-12
    )


def test_gpu_split_by_gpu_time_and_rest_of_system() -> None:
    h = Harness()
    gpu = [
        Point(
            "gpu",
            {"gpu": "0", "uuid": "GPU-1", "name": "H100"},
            {"energy_joules": 300.0 * t / 1000, "power_watts": 300.0},
            T0 + t * MS,
        )
        for t in range(0, 1001, 100)
    ]
    wall = [
        Point("emonpi", {"node": "5"}, {"power1_watts": 500.0}, T0 + t * MS)
        for t in range(0, 1001, 250)
    ]
    mods = [
        module(0, "conv", "forward", 0.1, 800, gpu=0.3),
        module(0, "fc", "forward", 0.05, 800, gpu=0.1),
    ]
    h.feed([*counter("package", 100.0, 0, 1000), *counter("dram", 20.0, 0, 1000), *gpu, *wall])
    h.feed([*mods, step(0, 200, 800), run_event("end", 1000)])
    rows = h.rows()
    assert ("nvml:0", "step", "", "", 0, 180.0, 0.6) in rows
    assert ("nvml:0", "module", "conv", "forward", 0, 90.0, 0.3) in rows
    assert ("nvml:0", "module", "fc", "forward", 0, 30.0, 0.1) in rows
    assert ("nvml:0", "unattributed", "", "", 0, 60.0, 0.2) in rows
    assert ("rapl:package-0", "module", "conv", "forward", 0, 10.0, 0.1) in rows
    assert ("emonpi:5", "step", "", "", 0, 300.0, 0.6) in rows
    # wall 300 J − package 60 J − dram 12 J − gpu 180 J
    assert ("emonpi:5", "rest_of_system", "", "", 0, 48.0, 0.6) in rows
    assert len(rows) == 4 * 4 + 1


def test_gpu_without_gpu_times_is_all_unattributed() -> None:
    h = Harness()
    gpu = [Point("gpu", {"gpu": "1"}, {"power_watts": 50.0}, T0 + t * MS) for t in (0, 1000)]
    h.feed([*gpu, *STEP0_MODULES, step(0, 250, 550), run_event("end", 1000)])
    assert h.rows() == [
        ("nvml:1", "step", "", "", 0, 15.0, 0.3),
        ("nvml:1", "unattributed", "", "", 0, 15.0, 0.3),
    ]


def test_sources_that_cannot_bracket_the_step_are_left_out() -> None:
    h = Harness()
    late = [
        Point("gpu", {"gpu": "0"}, {"energy_joules": float(t)}, T0 + t * MS) for t in (400, 900)
    ]
    h.feed([*counter("package", 10.0, 0, 1000), *late])
    h.feed([step(0, 250, 550), run_event("end", 1000)])
    assert {p.tags["source"] for p in h.out} == {"rapl:package-0"}
    # No source at all: nothing to emit, counted.
    h2 = Harness()
    h2.feed([step(0, 250, 550), run_event("end", 1000)])
    h2.proc.flush(h2.out.append)
    assert h2.out == []
    assert h2.proc.stats()["steps_without_source"] == 1


def test_a_lagging_source_is_waited_for() -> None:
    h = Harness(grace=2.0)
    h.feed([*counter("package", 10.0, 0, 1000), *counter("dram", 2.0, 0, 500)])
    h.feed([step(0, 250, 550), run_event("end", 1000)])
    assert h.out == []  # dram has not passed the step's end yet
    h.feed(counter("dram", 2.0, 600, 600))
    assert {p.tags["source"] for p in h.out} == {"rapl:package-0", "rapl:dram-0"}


def test_duplicates_late_modules_and_flush() -> None:
    h = Harness()
    h.feed([*counter("package", 10.0, 0, 1000), step(0, 250, 550), run_event("end", 1000)])
    assert len(h.out) == 2  # step and unattributed: no modules reported
    h.feed([step(0, 250, 550), module(0, "fc1", "forward", 0.1, 550)])
    assert len(h.out) == 2
    stats = h.proc.stats()
    assert stats["steps_duplicate"] == 1
    assert stats["modules_late"] == 1
    # flush() emits what is pending (shutdown), with the data there is.
    h.feed([step(1, 600, 900)])
    h.proc.flush(h.out.append)
    assert [p.fields["step"] for p in h.out] == [0, 0, 1, 1]


def test_counter_reset_drops_the_old_base() -> None:
    h = Harness()
    h.feed(counter("package", 10.0, 0, 500))
    # The RAPL collector restarted at 500 ms: its counter starts again from 0.
    h.feed(restarted_counter(10.0))
    h.feed([step(0, 250, 550), step(1, 700, 900), run_event("end", 1000)])
    assert h.proc.stats()["counter_resets"] == 1
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 1, 2.0, 0.2),
        ("rapl:package-0", "unattributed", "", "", 1, 2.0, 0.2),
    ]
    assert h.proc.stats()["steps_without_source"] == 1


def test_a_late_sample_is_skipped_not_taken_for_a_counter_reset() -> None:
    h = Harness()
    samples = counter("package", 10.0, 0, 1000)
    h.feed(samples[:6])
    h.feed([samples[2]])  # arrives again, late: older time, smaller value
    h.feed([*samples[6:], step(0, 250, 550), run_event("end", 1000)])
    stats = h.proc.stats()
    assert stats["samples_out_of_order"] == 1
    assert stats["counter_resets"] == 0
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "unattributed", "", "", 0, 3.0, 0.3),
    ]


def test_a_restarted_run_is_attributed_again() -> None:
    h = Harness()
    h.feed([*counter("package", 10.0, 0, 2000), run_event("start", 0), step(0, 100, 300)])
    h.feed([run_event("start", 1000), step(0, 1100, 1400), run_event("end", 1500)])
    assert [(p.fields["step"], p.time_ns - T0) for p in h.out if p.tags["scope"] == "step"] == [
        (0, 300 * MS),
        (0, 1400 * MS),
    ]


def test_a_restarted_runs_first_step_that_never_ends_is_dropped_after_history() -> None:
    """Guards: after a restart the run's step numbers start afresh, also when the new first
    step has the number of the old last one (step 0 both times): the new step 0 whose modules
    came but whose step point never did (the job died in it) is dropped once ``history``
    (600 s) has passed since its first point (at exactly 600 s, not a point later), like any
    such step, not kept pending forever."""
    h = Harness()
    h.feed([*counter("package", 10.0, 0, 1000), run_event("start", 0), step(0, 100, 300)])
    h.feed([run_event("start", 1000), module(0, "fc1", "forward", 0.1, 1200)])
    # first seen at 1.2 s: dropped when the data clock reaches 1.2 + 600 = 601.2 s
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 601_100 * MS)])
    assert (h.proc.stats()["steps_pending"], h.proc.stats()["steps_dropped"]) == (1, 0)
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 601_200 * MS)])  # exactly 600 s on
    assert (h.proc.stats()["steps_pending"], h.proc.stats()["steps_dropped"]) == (0, 1)
    assert [p.fields["step"] for p in h.out if p.tags["scope"] == "step"] == [0]  # the old one


def test_a_late_start_event_is_not_a_restart() -> None:
    """An ingested fallback file brings the run's start and first steps after the later ones."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 2000))
    h.feed([step(2, 500, 700), step(3, 700, 900), run_event("end", 950)])
    h.feed([run_event("start", 0), step(0, 100, 300), step(1, 300, 500)])
    h.feed([step(3, 700, 900)])  # a replay of a step already attributed
    scopes = [p for p in h.out if p.tags["scope"] == "step"]
    assert [p.fields["step"] for p in scopes] == [2, 3, 0, 1]
    assert h.proc.stats()["steps_duplicate"] == 1


def test_replayed_steps_keep_their_modules() -> None:
    """Old steps ingested after the run ended (step point first, then its modules): each is
    complete only when a later step's point arrives after it, or after grace."""
    h = Harness(grace=1.0)
    h.feed(counter("package", 10.0, 0, 3000))
    h.feed([step(2, 500, 700), step(3, 700, 900), run_event("end", 950)])
    h.feed([run_event("start", 0), step(0, 100, 300), module(0, "fc1", "forward", 0.1, 300)])
    h.feed([step(1, 300, 500), module(1, "fc1", "forward", 0.05, 500)])
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 4000 * MS)])  # grace passes for step 1
    modules = [p for p in h.out if p.tags["scope"] == "module"]
    assert [p.fields["step"] for p in modules] == [0, 1]
    assert [p.fields["energy_joules"] for p in modules] == pytest.approx([1.0, 0.5])
    assert h.proc.stats()["modules_late"] == 0


def test_runs_and_ranks_are_kept_apart() -> None:
    h = Harness()
    other = {**RUN, "rank": "1"}
    h.feed([*counter("package", 10.0, 0, 1000), step(0, 100, 300), step(0, 100, 400, tags=other)])
    h.feed([step(1, 300, 500)])  # completes rank 0's step 0 only
    assert {p.tags["rank"] for p in h.out} == {"0"}


def test_on_the_real_bus_derived_points_reach_the_sinks() -> None:
    bus = Bus()
    sunk: list[Point] = []
    bus.add_sink(sunk.append)
    stats = bus.add_processor("attribution", Harness().proc)
    for p in [
        *counter("package", 10.0, 0, 1000),
        *STEP0_MODULES,
        step(0, 250, 550),
        run_event("end", 900),
    ]:
        bus.emit(p)
    energy = [p for p in sunk if p.measurement == "nrg_energy"]
    assert len(energy) == 4
    assert stats.points_out == 4 and stats.errors == 0


def test_config_through_the_registry() -> None:
    proc = build_plugin(PluginSpec("processors", "attribution", {"grace": "500ms"}), context())
    assert isinstance(proc, EnergyAttribution)
    assert proc._config.grace == 0.5
    with pytest.raises(ConfigError, match="history"):
        build_plugin(
            PluginSpec("processors", "attribution", {"history": "1s", "grace": "2s"}), context()
        )


def test_no_rest_of_system_without_a_rapl_package() -> None:
    h = Harness()
    wall = [Point("emonpi", {"node": "5"}, {"power1_watts": 500.0}, T0 + t * MS) for t in (0, 1000)]
    h.feed([*wall, *counter("dram", 20.0, 0, 1000), step(0, 200, 800), run_event("end", 1000)])
    assert {(p.tags["source"], p.tags["scope"]) for p in h.out} == {
        ("emonpi:5", "step"),
        ("emonpi:5", "unattributed"),
        ("rapl:dram-0", "step"),
        ("rapl:dram-0", "unattributed"),
    }


def test_the_shutdown_warning_counts_a_sources_missed_steps_out_of_every_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guards: at shutdown the warning about a source that missed steps gives their number out
    of every step measured: RAPL read from 0 to 0.6 s, steps at 0.1–0.2, 0.3–0.4 and 0.8–0.9 s:
    the third step is missed, 1 of 3 steps (not "of 2", the steps that got energy, which the
    missed step is not one of)."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 600))
    h.feed([step(0, 100, 200), step(1, 300, 400), step(2, 800, 900)])
    h.proc.flush(h.out.append)
    stats = h.proc.stats()
    assert (stats["steps_attributed"], stats["steps_without_source"]) == (2, 1)
    assert stats["steps_missing:rapl:package-0"] == 1
    said = [r.getMessage() for r in caplog.records if "had no data around" in r.getMessage()]
    assert said == ["attribution: source rapl:package-0 had no data around 1 of 3 steps"]


def test_a_source_missing_steps_is_told_once_at_its_first_missed_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guards: the first step a source cannot bracket is told at once, naming the source and the
    figure that counts such steps, and only once however many follow: RAPL read from 0 to
    0.6 s, steps at 0.1–0.2, 0.8–0.9 and 1.0–1.1 s: the last two missed, one warning, 2
    counted."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 600))
    told = [
        "attribution: source rapl:package-0 has no samples around a step; such steps get no "
        "energy from it (counted in steps_missing:rapl:package-0)"
    ]
    h.feed([step(0, 100, 200), step(1, 800, 900)])
    h.proc.flush(h.out.append)
    assert h.proc.stats()["steps_missing:rapl:package-0"] == 1  # the first missed: told now
    said = [r.getMessage() for r in caplog.records if "no samples around" in r.getMessage()]
    assert said == told
    h.feed([step(2, 1000, 1100)])
    h.proc.flush(h.out.append)
    assert h.proc.stats()["steps_missing:rapl:package-0"] == 2
    said = [r.getMessage() for r in caplog.records if "no samples around" in r.getMessage()]
    assert said == told


def test_a_restart_writes_the_old_steps_still_waiting_and_keeps_the_new_ones() -> None:
    """Guards: a run restarted (its job died and came back) while its last step still waits
    for a slow meter: that step is written at the restart with what brackets it (RAPL), the
    meter counted missing for it, and the new incarnation's step of the same number is a step
    of its own, not a duplicate of the old one (lost). RAPL 10 W read every 100 ms, a wall
    meter at 300 W read every 2 s (0, 2, 4 s). Old steps 0: [0, 1] s, 1: [1, 2.5] s; the restart
    at 2.6 s; new steps 0: [2.6, 2.8] s, 1: [2.8, 3] s. Old step 0: RAPL 10 J, wall 300 J; old
    step 1 (the wall's last reading, 2 s, is before its end): RAPL 10 × 1.5 = 15 J, no wall;
    new steps: RAPL 10 × 0.2 = 2 J and wall 300 × 0.2 = 60 J each. The old step 2, whose
    modules came but not its end (the job died in it), can never end: dropped at the restart."""
    h = Harness()
    rapl = counter("package", 10.0, 0, 4000)
    walls = [
        Point("emonpi", {"node": "5"}, {"power1_watts": 300.0}, T0 + t * MS)
        for t in (0, 2000, 4000)
    ]
    jobs = [
        run_event("start", 0),
        step(0, 0, 1000),
        step(1, 1000, 2500),
        module(2, "fc1", "forward", 0.05, 2550),  # the job died inside step 2
        run_event("start", 2600),
        step(0, 2600, 2800),
        step(1, 2800, 3000),
        run_event("end", 3000),
    ]
    h.feed(sorted([*rapl, *walls, *jobs], key=lambda p: p.time_ns))
    got = [
        (p.fields["step"], p.tags["source"], pytest.approx(p.fields["energy_joules"]))
        for p in h.out
        if p.tags["scope"] == "step"
    ]
    assert got == [
        (0, "rapl:package-0", 10.0),
        (0, "emonpi:5", 300.0),
        (1, "rapl:package-0", 15.0),
        (0, "rapl:package-0", 2.0),
        (0, "emonpi:5", 60.0),
        (1, "rapl:package-0", 2.0),
        (1, "emonpi:5", 60.0),
    ]
    stats = h.proc.stats()
    assert (stats["steps_attributed"], stats["steps_duplicate"]) == (4, 0)
    assert stats["steps_missing:emonpi:5"] == 1
    assert (stats["steps_dropped"], stats["steps_pending"]) == (1, 0)  # the old step 2


@pytest.mark.parametrize(
    ("every_ms", "seconds", "most", "after_prune"),
    [
        # 10 Hz: the 65th sample (6.4 s) is the first past 64, long after 2 × history (2 s)
        (100, 20, 64, 11),
        # 100 Hz: 64 samples come in 0.64 s; the span decides: the 202nd spans 2.01 s
        (10, 5, 201, 101),
    ],
)
def test_a_sources_samples_are_kept_for_history_and_bounded(
    every_ms: int, seconds: int, most: int, after_prune: int
) -> None:
    """Guards memory and what is kept: a source's samples are pruned once there are more than
    64 of them and they span more than twice ``history`` (1 s here), back to the last
    ``history`` (the sample exactly ``history`` before the newest included): never fewer."""
    h = Harness(history=1.0, grace=0.5)
    held = []
    for p in counter("package", 10.0, 0, seconds * 1000, every_ms):
        h.feed([p])
        held.append(len(h.proc._sources["rapl:package-0"].counter.times))
    assert max(held) == most
    drops = [b for a, b in itertools.pairwise(held) if b < a]
    assert drops and set(drops) == {after_prune}


def test_a_long_epochs_module_sums_are_written_every_1000_steps() -> None:
    """Guards memory and delivery: with module detail per epoch, a long epoch's module sums are
    written after every 1,000 steps (not held until the epoch ends), and the parts add up to
    the whole. 2,100 steps of 100 ms at 10 W, "fc" 50 ms of each: parts of 1,000, 1,000 and
    100 steps, fc 0.5 J per step (10 W × 0.05 s)."""
    h = Harness(module_detail="epoch")
    h.feed(counter("package", 10.0, 0, 2_100 * 100 + 1000, 1000))
    written_at = []
    for n in range(2_100):
        seen = len(h.out)
        h.feed([module(n, "fc", "forward", 0.05, n * 100 + 100), step(n, n * 100, n * 100 + 100)])
        if any(p.tags.get("scope") == "module" for p in h.out[seen:]):
            written_at.append(n)
    h.feed([run_event("end", 2_100 * 100 + 200)])
    sums = [p for p in h.out if p.tags.get("scope") == "module"]
    assert [(p.tags["module"], p.fields["steps"], p.fields["step"]) for p in sums] == [
        ("fc", 1_000, 999),
        ("fc", 1_000, 1_999),
        ("fc", 100, 2_099),
    ]
    assert written_at[:2] == [1_000, 2_000]  # the 1,000th step attributed as the next begins
    assert [p.fields["energy_joules"] for p in sums] == pytest.approx([500.0, 500.0, 50.0])
    assert [p.fields["duration_seconds"] for p in sums] == pytest.approx([50.0, 50.0, 5.0])


def test_a_start_older_than_the_latest_step_is_no_restart() -> None:
    """Guards: a run's start stamped before the latest of its steps seen (a start arriving late,
    e.g. from an ingested fallback file) is not a restart, even when it is newer than its
    earlier steps: the steps seen stay the run's, so a step sent again is a duplicate. Steps
    end at 1, 2 and 3 s; the start is stamped 2.5 s."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 5000))
    h.feed([step(0, 0, 1000), step(1, 1000, 2000), step(2, 2000, 3000)])
    h.feed([run_event("start", 2500), step(2, 2000, 3000)])
    assert h.proc.stats()["steps_duplicate"] == 1
    h.feed([run_event("start", 3500), step(0, 3500, 4000)])  # newer than every step: a restart
    h.feed([run_event("end", 5000)])
    assert h.proc.stats()["steps_duplicate"] == 1
    assert [p.fields["step"] for p in h.out if p.tags.get("scope") == "step"] == [0, 1, 2, 0]


def test_a_late_module_point_completes_the_steps_whose_point_came_before_it() -> None:
    """Guards: a point of a later step completes the steps whose point came before it, also a
    module point too late for its own step (already written, counted late). Replayed steps
    arriving out of order, grace 2 s: step 5 (0.8–0.9 s) comes at data clock 1 s and is
    written when grace has passed (3 s); step 3 (0.6–0.7 s) comes next, its grace ending at
    5 s; then a module point of step 5: step 3 is written at once, 10 W × 0.1 s = 1 J."""
    h = Harness(grace=2.0)
    h.feed(counter("package", 10.0, 0, 1000))
    h.feed([step(5, 800, 900), Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 3000 * MS)])
    h.feed([step(3, 600, 700)])
    assert [r[1:5] for r in h.rows()] == [("step", "", "", 5), ("unattributed", "", "", 5)]
    h.feed([module(5, "fc1", "forward", 0.05, 900)])
    assert h.rows()[2:] == [
        ("rapl:package-0", "step", "", "", 3, 1.0, 0.1),
        ("rapl:package-0", "unattributed", "", "", 3, 1.0, 0.1),
    ]
    assert h.proc.stats()["modules_late"] == 1


def test_another_runs_start_writes_a_step_whose_grace_has_passed() -> None:
    """Guards: a step waiting for late module points is written as soon as the data clock
    passes its grace, whatever point moves it, here another run's start event: grace 1 s, step
    0 of run r1 (0.25–0.55 s, 10 W) arrives at data clock 0.6 s; run r2 starts at 1.6 s: the
    step's 3 J, fc1's 10 W × 0.1 s = 1 J, fc2's 10 W × 0.05 s = 0.5 J, 1.5 J unattributed."""
    h = Harness(grace=1.0)
    h.feed(counter("package", 10.0, 0, 600))
    h.feed([*STEP0_MODULES, step(0, 250, 550)])
    tags = {**RUN, "run": "r2"}
    h.feed([Point("nrg_run", tags, {"event": "start", "pid": 2}, T0 + 1599 * MS)])
    assert h.out == []
    h.feed([Point("nrg_run", tags, {"event": "start", "pid": 2}, T0 + 1600 * MS)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "module", "fc1", "forward", 0, 1.0, 0.1),
        ("rapl:package-0", "module", "fc2", "backward", 0, 0.5, 0.05),
        ("rapl:package-0", "unattributed", "", "", 0, 1.5, 0.15),
    ]


def test_after_a_counter_reset_a_step_is_measured_from_the_new_readings_alone() -> None:
    """Guards: a counter reset drops the old readings, their times and their values alike: 10 W
    until 0.5 s (5 J), then the collector restarts and counts from 0 at 40 W (4, 8, 12, 16,
    20 J at 0.6 to 1 s): step 1 (0.7–0.9 s) gets 16 − 8 = 8 J (40 W × 0.2 s), not a mix of
    the old readings' values with the new ones' times."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 500))
    h.feed(restarted_counter(40.0))
    h.feed([step(1, 700, 900), run_event("end", 1000)])
    assert h.proc.stats()["counter_resets"] == 1
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 1, 8.0, 0.2),
        ("rapl:package-0", "unattributed", "", "", 1, 8.0, 0.2),
    ]


def test_a_run_restarted_again_before_a_step_drops_the_step_its_job_died_in() -> None:
    """Guards: a run restarted again before the restarted job finished a step (it died in its
    first step, after sending a module point) is restarted again: that step, which can never
    end, is dropped, not merged into the next incarnation's step of the same number; the
    restart's start event sent twice is one restart. 10 W; step 0 (0–1 s); a restart at 2 s,
    "fc2" of its step 0 sent at 2.1 s, then the job died; a restart at 3 s, its step 0 (3–3.5
    s) with "fc1" 0.1 s: 10 W × 0.5 s = 5 J, fc1 10 W × 0.1 s = 1 J, 4 J unattributed."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 5000))
    h.feed([run_event("start", 0), step(0, 0, 1000)])
    h.feed([run_event("start", 2000), module(0, "fc2", "backward", 0.2, 2100)])
    h.feed([run_event("start", 3000), module(0, "fc1", "forward", 0.1, 3500)])
    h.feed([run_event("start", 3000), step(0, 3000, 3500), run_event("end", 4000)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 10.0, 1.0),
        ("rapl:package-0", "unattributed", "", "", 0, 10.0, 1.0),
        ("rapl:package-0", "step", "", "", 0, 5.0, 0.5),
        ("rapl:package-0", "module", "fc1", "forward", 0, 1.0, 0.1),
        ("rapl:package-0", "unattributed", "", "", 0, 4.0, 0.4),
    ]
    stats = h.proc.stats()
    assert (stats["steps_dropped"], stats["steps_pending"]) == (1, 0)


def test_a_lone_sample_before_a_silence_is_let_go_at_the_first_prune() -> None:
    """Guards: a prune goes back to the last ``history`` (1 s here) whatever lies before it,
    also a single older sample: RAPL read at 0 and 1 s, then every 10 ms from 1.5 s. At 2.12 s
    there are 2 + 63 = 65 samples spanning 2.12 s (over 64 and over 2 × history): everything
    before the last sample at or before 2.12 − 1 = 1.12 s (the one at 1 s) goes, the sample at
    0 s alone: 64 left, from 1 s."""
    h = Harness(history=1.0, grace=0.5)
    samples = counter("package", 10.0, 0, 1000, 1000) + counter("package", 10.0, 1500, 2120, 10)
    h.feed(samples[:-1])
    kept = h.proc._sources["rapl:package-0"].counter.times
    assert (len(kept), kept[0]) == (64, T0)
    h.feed(samples[-1:])
    kept = h.proc._sources["rapl:package-0"].counter.times
    assert (len(kept), kept[0]) == (64, T0 + 1000 * MS)


def test_a_source_that_cannot_bracket_a_step_leaves_the_others_measured() -> None:
    """Guards: a source without samples around a step is left out of that step alone; the
    sources seen after it still give theirs. A GPU first seen at 0.4 s, then RAPL read from
    0 s at 10 W; a step from 0.25 to 0.55 s: RAPL's 10 W × 0.3 s = 3 J, the GPU counted as
    missing it."""
    h = Harness()
    late = [
        Point("gpu", {"gpu": "0"}, {"energy_joules": float(t)}, T0 + t * MS) for t in (400, 900)
    ]
    h.feed([*late, *counter("package", 10.0, 0, 1000)])
    h.feed([step(0, 250, 550), run_event("end", 1000)])
    assert h.rows() == [
        ("rapl:package-0", "step", "", "", 0, 3.0, 0.3),
        ("rapl:package-0", "unattributed", "", "", 0, 3.0, 0.3),
    ]
    stats = h.proc.stats()
    assert (stats["steps_attributed"], stats["steps_missing:nvml:0"]) == (1, 1)
