"""EnergyAttribution with sources at their real cadences, the RAPL sub-zones, the epoch tag and
the module detail: each expectation computed here from the power profile fed in."""

from __future__ import annotations

import pytest

from acquisition.point import Point
from tests.attribution.test_processor import (
    MS,
    RUN,
    T0,
    Harness,
    counter,
    module,
    run_event,
    step,
)

WALL_BASE_W = 300.0
WALL_SLOPE_W_PER_S = 2.0
PACKAGE_W = 40.0
DRAM_W = 6.0
STEP_MS = 500


def wall_watts(t_ms: int) -> float:
    """The wall meter's power: a ramp, so its trapezoids are exact between any two samples."""
    return WALL_BASE_W + WALL_SLOPE_W_PER_S * t_ms / 1000


def wall_energy(a_ms: int, b_ms: int) -> float:
    """∫ wall_watts over [a, b] (J): 300 (b − a) + 2 (b² − a²) / 2, times in s."""
    a, b = a_ms / 1000, b_ms / 1000
    return WALL_BASE_W * (b - a) + WALL_SLOPE_W_PER_S * (b * b - a * a) / 2


def wall(t_ms: int, node: str = "5") -> Point:
    return Point("emonpi", {"node": node}, {"power1_watts": wall_watts(t_ms)}, T0 + t_ms * MS)


def timeline(wall_every_ms: int, until_ms: int, wall_from_ms: int = 0) -> list[Point]:
    """What the bus sees, in time order: RAPL package and dram every 100 ms, the wall meter every
    ``wall_every_ms``, a 500 ms training step ending every 500 ms (its module point, then the
    step point, sent at its end)."""
    events: list[tuple[int, int, Point]] = []
    for p in counter("package", PACKAGE_W, 0, until_ms) + counter("dram", DRAM_W, 0, until_ms):
        events.append((p.time_ns, 0, p))
    for t in range(wall_from_ms, until_ms + 1, wall_every_ms):
        events.append((T0 + t * MS, 0, wall(t)))
    for n, end in enumerate(range(STEP_MS, until_ms + 1, STEP_MS)):
        at = T0 + end * MS
        events.append((at, 1, module(n, "fc", "forward", 0.1, end)))
        events.append((at, 2, step(n, end - STEP_MS, end)))
    events.sort(key=lambda e: (e[0], e[1]))
    return [p for _, _, p in events]


def by_step(h: Harness, source: str, scope: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in h.out:
        if p.tags["source"] == source and p.tags["scope"] == scope:
            step_n = p.fields["step"]
            assert isinstance(step_n, int) and step_n not in out
            out[step_n] = p.fields["energy_joules"]  # type: ignore[assignment]
    return out


@pytest.mark.parametrize("wall_every_ms", [5000, 10_000])
def test_a_wall_meter_at_emonpi_cadence_covers_every_step_it_brackets(wall_every_ms: int) -> None:
    until = 40_000
    h = Harness()  # the default grace (2 s) is shorter than the meter's interval
    h.feed(timeline(wall_every_ms, until))
    h.feed([run_event("end", until)])
    steps = until // STEP_MS
    # The last wall sample is at `until`: every step ends at or before it, so every one is covered.
    walls = by_step(h, "emonpi:5", "step")
    assert sorted(walls) == list(range(steps))
    rest = by_step(h, "emonpi:5", "rest_of_system")
    for n in range(steps):
        a, b = n * STEP_MS, (n + 1) * STEP_MS
        assert walls[n] == pytest.approx(wall_energy(a, b), rel=1e-12)
        inside = (PACKAGE_W + DRAM_W) * (b - a) / 1000
        assert rest[n] == pytest.approx(wall_energy(a, b) - inside, rel=1e-12)
    stats = h.proc.stats()
    assert stats["steps_attributed"] == steps
    assert "steps_missing:emonpi:5" not in stats


def test_a_wall_meter_is_not_waited_for_past_its_own_silence() -> None:
    """The meter stops at 10 s: steps after its last sample are written without it once it has
    been silent for 3 of its intervals (10 + 3 × 5 = 25 s, that instant included), and each is
    counted against it."""
    h = Harness()
    events = [
        p
        for p in timeline(5000, 40_000)
        if p.measurement != "emonpi" or p.time_ns <= T0 + 10_000 * MS
    ]
    cut = T0 + (10_000 + 3 * 5000) * MS  # the meter is overdue from here on
    h.feed(p for p in events if p.time_ns < cut)
    written = by_step(h, "rapl:package-0", "step")
    assert sorted(written) == list(range(20))  # steps 0..19 end by 10 s: the meter covers them
    # Exactly at 25 s (the points stamped then) the meter is overdue: steps 20..48 (ending at
    # 10.5 .. 24.5 s) are written without it; step 49, ending at 25 s, waits for its grace.
    h.feed(p for p in events if p.time_ns == cut)
    assert sorted(by_step(h, "rapl:package-0", "step")) == list(range(49))
    h.feed(p for p in events if p.time_ns > cut)
    h.feed([run_event("end", 40_000)])
    assert sorted(by_step(h, "rapl:package-0", "step")) == list(range(80))
    assert sorted(by_step(h, "emonpi:5", "step")) == list(range(20))
    assert h.proc.stats()["steps_missing:emonpi:5"] == 60
    assert h.proc.missing_by_source() == {"emonpi:5": 60}


def test_a_source_that_starts_late_is_counted_for_the_steps_before_it() -> None:
    h = Harness()
    h.feed(timeline(5000, 20_000, wall_from_ms=5000))
    h.feed([run_event("end", 20_000)])
    # Steps 0..9 started before the meter's first sample (5 s): none can have wall energy.
    assert sorted(by_step(h, "emonpi:5", "step")) == list(range(10, 40))
    # Steps 0..7 were written before the meter was known; steps 8 and 9 (ending at 4.5 s and
    # 5 s) waited for the next step's points, by then the meter had sent its first sample.
    assert h.proc.stats()["steps_missing:emonpi:5"] == 2
    assert h.proc.stats()["steps_attributed"] == 40


def test_at_shutdown_a_step_the_source_has_not_reached_is_written_and_counted() -> None:
    h = Harness()
    h.feed(timeline(5000, 12_000))  # the wall meter's last sample is at 10 s
    assert sorted(by_step(h, "rapl:package-0", "step")) == list(range(20))
    h.proc.flush(h.out.append)
    assert sorted(by_step(h, "rapl:package-0", "step")) == list(range(24))
    assert h.proc.stats()["steps_missing:emonpi:5"] == 4


def test_rest_of_system_subtracts_package_and_dram_only() -> None:
    """core and uncore are inside package, psys is the whole platform: none is subtracted."""
    h = Harness()
    h.feed(
        [
            *counter("package", 40.0, 0, 1000),
            *counter("core", 25.0, 0, 1000),
            *counter("uncore", 5.0, 0, 1000),
            *counter("psys", 70.0, 0, 1000),
            *counter("dram", 6.0, 0, 1000),
            *(wall(t) for t in (0, 500, 1000)),
        ]
    )
    h.feed([step(0, 200, 700), run_event("end", 1000)])
    rest = by_step(h, "emonpi:5", "rest_of_system")
    # wall ∫ over [0.2, 0.7] s − (40 + 6) W × 0.5 s
    assert rest == {0: pytest.approx(wall_energy(200, 700) - 23.0, rel=1e-12)}
    assert by_step(h, "rapl:core-0", "step") == {0: pytest.approx(12.5, rel=1e-12)}
    assert by_step(h, "rapl:psys-0", "step") == {0: pytest.approx(35.0, rel=1e-12)}


def test_epoch_is_a_tag_read_from_the_tag_or_the_older_field() -> None:
    h = Harness()
    h.feed(counter("package", 10.0, 0, 2000))
    h.feed([step(0, 100, 300, epoch=3), step(1, 300, 500, epoch=4, epoch_as_field=True)])
    h.feed([step(2, 500, 700, epoch_as_field=True), run_event("end", 2000)])
    epochs = {(p.fields["step"], p.tags["epoch"]) for p in h.out}
    assert epochs == {(0, "3"), (1, "4"), (2, "0")}
    assert all("epoch" not in p.fields for p in h.out)


def many_modules(n_step: int, count: int, end_ms: int) -> list[Point]:
    return [module(n_step, f"layer{i}", "forward", 0.001, end_ms) for i in range(count)]


def test_module_detail_epoch_sums_modules_over_each_epoch() -> None:
    h = Harness(module_detail="epoch")
    h.feed(counter("package", 10.0, 0, 3000))
    for n, epoch in enumerate((0, 0, 1)):
        end = 300 * (n + 1)
        h.feed([*many_modules(n, 2, end), step(n, end - 200, end, epoch=epoch)])
    # Step 1 (epoch 0) is complete once step 2's points arrive; epoch 0 ends when a step of
    # epoch 1 is written.
    h.feed([run_event("end", 3000)])
    modules = [p for p in h.out if p.tags["scope"] == "module"]
    got = {
        (p.tags["epoch"], p.tags["module"]): (p.fields["steps"], p.fields["step"], p.time_ns - T0)
        for p in modules
    }
    assert got == {
        ("0", "layer0"): (2, 1, 600 * MS),
        ("0", "layer1"): (2, 1, 600 * MS),
        ("1", "layer0"): (1, 2, 900 * MS),
        ("1", "layer1"): (1, 2, 900 * MS),
    }
    # 10 W × 1 ms per module per step
    energies = {(p.tags["epoch"], p.tags["module"]): p.fields["energy_joules"] for p in modules}
    assert energies == {
        ("0", "layer0"): pytest.approx(0.02, rel=1e-12),
        ("0", "layer1"): pytest.approx(0.02, rel=1e-12),
        ("1", "layer0"): pytest.approx(0.01, rel=1e-12),
        ("1", "layer1"): pytest.approx(0.01, rel=1e-12),
    }
    # Per step: step and unattributed points still come, and still add up with the modules.
    steps = by_step(h, "rapl:package-0", "step")
    rest = by_step(h, "rapl:package-0", "unattributed")
    assert steps == {n: pytest.approx(2.0, rel=1e-12) for n in range(3)}
    assert rest == {n: pytest.approx(2.0 - 0.02, rel=1e-12) for n in range(3)}


def test_module_detail_off_writes_steps_only() -> None:
    h = Harness(module_detail="off")
    h.feed([*counter("package", 10.0, 0, 1000), *many_modules(0, 3, 300), step(0, 100, 300)])
    h.feed([run_event("end", 1000)])
    assert [(p.tags["scope"], p.fields["energy_joules"]) for p in h.out] == [
        ("step", pytest.approx(2.0, rel=1e-12))
    ]


@pytest.mark.parametrize(("count", "per_step"), [(50, True), (51, False)])
def test_module_detail_auto_sums_per_epoch_above_fifty_modules(count: int, per_step: bool) -> None:
    h = Harness()
    h.feed(counter("package", 10.0, 0, 2000))
    h.feed([*many_modules(0, count, 300), step(0, 100, 300)])
    h.feed([*many_modules(1, count, 600), step(1, 300, 600)])
    h.feed([run_event("end", 2000)])
    modules = [p for p in h.out if p.tags["scope"] == "module"]
    assert len(modules) == (2 * count if per_step else count)
    assert {p.fields.get("steps") for p in modules} == ({None} if per_step else {2})


def test_epoch_sums_of_an_ended_run_wait_for_its_last_step() -> None:
    """The run ends while its last step still waits for a lagging source; the epoch's sums are
    written with that step, not before."""
    h = Harness(module_detail="epoch")
    h.feed([*counter("package", 10.0, 0, 500), wall(0)])
    h.feed([*many_modules(0, 2, 400), step(0, 100, 400), run_event("end", 500)])
    assert h.out == []  # the wall meter has not reached the step's end
    h.feed([wall(1000)])
    modules = [p for p in h.out if p.tags["scope"] == "module"]
    assert {(p.tags["source"], p.tags["module"]) for p in modules} == {
        (s, m) for s in ("rapl:package-0", "emonpi:5") for m in ("layer0", "layer1")
    }
    assert all(p.fields["steps"] == 1 for p in modules)


def test_at_shutdown_the_current_epochs_module_sums_are_written() -> None:
    """Guards: the agent stopping in the middle of an epoch (no run end) writes that epoch's
    module sums so far: steps 0 (0.1–0.3 s) and 1 (0.3–0.6 s) at 10 W, "fc" 50 ms of each:
    2 steps, 10 W × 0.05 s × 2 = 1 J over 0.1 s, stamped at step 1's end."""
    h = Harness(module_detail="epoch")
    h.feed(counter("package", 10.0, 0, 1000))
    h.feed([module(0, "fc", "forward", 0.05, 300), step(0, 100, 300)])
    h.feed([module(1, "fc", "forward", 0.05, 600), step(1, 300, 600)])
    h.proc.flush(h.out.append)
    (fc,) = [p for p in h.out if p.tags["scope"] == "module"]
    assert (fc.tags["module"], fc.fields["steps"], fc.fields["step"]) == ("fc", 2, 1)
    assert fc.time_ns == T0 + 600 * MS
    assert fc.fields["energy_joules"] == pytest.approx(1.0, rel=1e-12)
    assert fc.fields["duration_seconds"] == pytest.approx(0.1, rel=1e-12)
    assert h.proc.stats()["points_emitted"] == len(h.out) == 2 * 2 + 1


def test_a_restart_writes_the_old_incarnations_epoch_sums_apart_from_the_new_ones() -> None:
    """Guards: a run restarted in the middle of an epoch has the old incarnation's module sums
    written at the restart; the new incarnation's steps of the same epoch are summed on their
    own, not added to them. 10 W; steps 0 (0.1–0.3 s) and 1 (0.3–0.6 s), "fc" 50 ms of each;
    the restart at 1 s, then its step 0 (1.1–1.4 s), "fc" 50 ms: 10 W × 0.05 s × 2 = 1 J over
    2 steps stamped at 0.6 s, then 10 W × 0.05 s = 0.5 J over 1 step stamped at 1.4 s."""
    h = Harness(module_detail="epoch")
    h.feed(counter("package", 10.0, 0, 2000))
    h.feed([run_event("start", 0), module(0, "fc", "forward", 0.05, 300), step(0, 100, 300)])
    h.feed([module(1, "fc", "forward", 0.05, 600), step(1, 300, 600)])
    h.feed([run_event("start", 1000), module(0, "fc", "forward", 0.05, 1400)])
    h.feed([step(0, 1100, 1400), run_event("end", 2000)])
    sums = [
        (p.fields["steps"], p.fields["step"], p.time_ns - T0, p.fields["energy_joules"])
        for p in h.out
        if p.tags["scope"] == "module"
    ]
    assert sums == [
        (2, 1, 600 * MS, pytest.approx(1.0, rel=1e-12)),
        (1, 0, 1400 * MS, pytest.approx(0.5, rel=1e-12)),
    ]


def test_module_detail_auto_stays_per_epoch_once_a_runs_step_had_over_fifty_modules() -> None:
    """Guards: with ``module_detail = "auto"``, once a step of a run reports more than 50
    modules every later step of the run is summed per epoch too, also one reporting fewer (a
    run's module points are all of one kind): step 0 with 51 modules, step 1 with 2 of them;
    one sum per module over the epoch's 2 steps, layer0 and layer1 10 W × 1 ms × 2 = 0.02 J,
    the 49 others 0.01 J (step 0 only), and no module point per step."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 2000))
    h.feed([*many_modules(0, 51, 300), step(0, 100, 300)])
    h.feed([*many_modules(1, 2, 600), step(1, 300, 600)])
    h.feed([run_event("end", 2000)])
    modules = [p for p in h.out if p.tags["scope"] == "module"]
    assert [p.fields.get("steps") for p in modules] == [2] * 51
    energy = {p.tags["module"]: p.fields["energy_joules"] for p in modules}
    assert energy == {
        f"layer{i}": pytest.approx(0.02 if i < 2 else 0.01, rel=1e-12) for i in range(51)
    }


def test_module_detail_is_checked() -> None:
    from acquisition.processors.attribution import AttributionConfig

    with pytest.raises(ValueError, match="module_detail"):
        AttributionConfig(module_detail="sometimes").validate()  # type: ignore[arg-type]
    assert RUN["run"] == "r1"


def test_settings_are_checked_at_their_limits() -> None:
    """Guards: the attribution's settings are refused just past their limits and taken at them:
    ``history`` must exceed ``grace`` (2 s and 2 s refused, 2.001 s taken), the wall meter's CT
    channel counts from 1 (0 refused: there is no ``power0_watts``), at least one step may wait
    (0 refused), and each of the four module details is taken."""
    from acquisition.processors.attribution import AttributionConfig

    refused = {
        "history must be longer than grace": {"grace": 2.0, "history": 2.0},
        "wall_channel must be >= 1": {"wall_channel": 0},
        "max_pending_steps must be >= 1": {"max_pending_steps": 0},
    }
    for message, settings in refused.items():
        with pytest.raises(ValueError, match=message):
            AttributionConfig(**settings).validate()  # type: ignore[arg-type]
    AttributionConfig(grace=2.0, history=2.001, wall_channel=1, max_pending_steps=1).validate()
    for detail in ("auto", "step", "epoch", "off"):
        AttributionConfig(module_detail=detail).validate()  # type: ignore[arg-type]


def test_the_error_bar_of_a_step_comes_from_the_power_swing_at_its_edges() -> None:
    """10 W sampled every 100 ms, but the 300 ms sample read 2 ms late (counter 3.02 J): the
    intervals around the 250 ms edge read 10, 10.2 and 9.8 W, a swing of 0.4 W over 100 ms."""
    samples = counter("package", 10.0, 0, 1000)
    samples[3] = Point(
        samples[3].measurement, samples[3].tags, {"energy_joules": 3.02}, samples[3].time_ns
    )
    h = Harness()
    h.feed([*samples, step(0, 250, 550), run_event("end", 1000)])
    [point] = [p for p in h.out if p.tags["scope"] == "step"]
    # C(550 ms) − C(250 ms) = 5.5 − (2.0 + 3.02) / 2 = 2.99 J, 0.01 J below the truth.
    assert point.fields["energy_joules"] == pytest.approx(2.99, rel=1e-12)
    # 0.4 W × 0.1 s at the start edge, nothing at the end, plus 2 × (2.99 J / 0.3 s) × 1 ms.
    assert point.fields["error_joules"] == pytest.approx(0.04 + 2 * 2.99 / 0.3 * 0.001, rel=1e-9)
    assert abs(point.fields["energy_joules"] - 3.0) <= point.fields["error_joules"]  # type: ignore[operator]
    assert all("error_joules" not in p.fields for p in h.out if p.tags["scope"] != "step")


def test_a_gpu_step_inside_one_counter_interval_has_its_share_of_the_staleness() -> None:
    """Guards the error bar of a GPU counter shaped by the driver's samples (300 W throughout,
    sampled every 20 ms; the counter read at 0, 1 and 2 s: 0, 300 and 600 J; it updates every
    100 ms, so each edge reads up to 300 W × 0.1 s = 30 J stale). Step 0, 100–400 ms, lies in
    one counter interval: 300 W × 0.3 s = 90 J, and the staleness moves it only by its share of
    that interval, 2 × 300 W × 0.1 s × 0.3 = 18 J (not the two edges' 30 + 30 J). Step 1,
    800–1300 ms, spans a reading: 150 J, bar 30 + 30 = 60 J. No swing: the power is flat."""
    gpu = {"gpu": "0", "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3"}
    samples = [
        (t, Point("gpu_sample", gpu, {"power_watts": 300.0}, T0 + t * MS))
        for t in range(0, 2001, 20)
    ]
    readings = [
        (t, Point("gpu", gpu, {"energy_joules": 0.3 * t, "power_watts": 300.0}, T0 + t * MS))
        for t in (0, 1000, 2000)
    ]
    h = Harness(module_detail="off")
    h.feed(p for _, p in sorted(samples + readings, key=lambda e: e[0]))
    h.feed([step(0, 100, 400), step(1, 800, 1300), run_event("end", 2000)])
    got = {p.fields["step"]: p.fields for p in h.out if p.tags["scope"] == "step"}
    assert got[0]["energy_joules"] == pytest.approx(90.0, rel=1e-12)
    assert got[0]["error_joules"] == pytest.approx(18.0, rel=1e-12)
    assert got[1]["energy_joules"] == pytest.approx(150.0, rel=1e-12)
    assert got[1]["error_joules"] == pytest.approx(60.0, rel=1e-12)
    for n in (0, 1):  # each edge alone: 30 J of staleness, for sums of adjacent steps
        assert (got[n]["error_start_joules"], got[n]["error_end_joules"]) == pytest.approx(
            (30.0, 30.0), rel=1e-12
        )


def test_a_reading_that_arrives_again_is_not_an_interval_of_its_source() -> None:
    """Guards: a reading that arrives again with the same time (a batch sent again) is no new
    sample interval: a wall meter read every 5 s whose readings each arrive 9 times is still
    waited for up to 3 × 5 s = 15 s, so each 500 ms step gets its wall energy (80 steps over
    40 s, none missing). Taken as 8 intervals of 0 s, the meter would look silent 2 s (the
    grace) after each reading and the steps up to its next reading be written without it."""
    h = Harness()
    events = timeline(5000, 40_000)
    h.feed(q for p in events for q in ([p] * 9 if p.measurement == "emonpi" else [p]))
    h.feed([run_event("end", 40_000)])
    walls = by_step(h, "emonpi:5", "step")
    assert sorted(walls) == list(range(80))
    assert walls[79] == pytest.approx(wall_energy(39_500, 40_000), rel=1e-12)
    assert "steps_missing:emonpi:5" not in h.proc.stats()


@pytest.mark.parametrize(("short_gaps", "waited_s"), [(7, 30), (8, 3)])
def test_a_source_is_waited_for_by_its_last_eight_sample_intervals(
    short_gaps: int, waited_s: int
) -> None:
    """Guards: a source is waited for up to 3 × the longest of its last 8 sample intervals
    (at least grace, 2 s) after its last reading: a wall meter read at 0 s, 10 s later, then
    every second ``short_gaps`` times, then silent; a step ends 0.5 s after its last reading.
    After 7 one-second intervals the 10 s one is still among the last 8: the step waits
    3 × 10 = 30 s past the reading; after 8 it is forgotten: 3 × 1 = 3 s. Then the step is
    written with RAPL alone, the meter counted missing for it."""
    h = Harness()
    last = 10_000 + short_gaps * 1000
    walls = [wall(0), *(wall(t) for t in range(10_000, last + 1, 1000))]
    events = sorted(
        [*counter("package", PACKAGE_W, 0, last + 40_000), *walls, step(0, last - 500, last + 500)],
        key=lambda p: p.time_ns,
    )
    due = T0 + (last + waited_s * 1000) * MS
    h.feed(p for p in events if p.time_ns < due)
    assert h.out == []
    h.feed(p for p in events if p.time_ns == due)
    assert by_step(h, "rapl:package-0", "step") == {0: pytest.approx(PACKAGE_W, rel=1e-12)}
    assert h.proc.stats()["steps_missing:emonpi:5"] == 1


def test_by_default_a_step_waits_2_s_for_late_module_points() -> None:
    """Guards: the default ``grace`` is 2 s on the data clock: a step point that arrives at
    0.6 s with nothing completing it is written at 2.6 s, not before."""
    h = Harness()
    h.feed(counter("package", 10.0, 0, 600))
    h.feed([module(0, "fc", "forward", 0.1, 550), step(0, 250, 550)])
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 2599 * MS)])
    assert h.out == []
    h.feed([Point("cpu", {}, {"busy_ratio": 0.5}, T0 + 2600 * MS)])
    assert len(h.out) == 3  # the step, fc and the unattributed rest


def test_a_wall_meter_read_twice_bounds_a_step_by_its_one_interval() -> None:
    """Guards: with two readings, the fewest that bracket a step, the error bar of each edge
    is the power swing over the one interval between them, also for an edge on the second
    reading (the interval that ends there) and one in the first interval: a wall meter at
    100 W at 0 s and 300 W at 1 s, a step from 0.5 to 1 s: (200 + 300) / 2 W × 0.5 s = 125 J;
    each edge (300 − 100) W × 1 s = 200 J, the step 400 J (a power series: no counter to be
    stale)."""
    h = Harness()
    h.feed(
        Point("emonpi", {"node": "5"}, {"power1_watts": w}, T0 + t * MS)
        for t, w in [(0, 100.0), (1000, 300.0)]
    )
    h.feed([step(0, 500, 1000), run_event("end", 1000)])
    (f,) = [p.fields for p in h.out if p.tags["scope"] == "step"]
    assert f["energy_joules"] == pytest.approx(125.0, rel=1e-12)
    bars = (f["error_joules"], f["error_start_joules"], f["error_end_joules"])
    assert bars == pytest.approx((400.0, 200.0, 200.0), rel=1e-12)
