"""The run summary on runs of known power: every figure against power × time.

The run's points are what storage holds after the real attribution processor ran on the bus
(see ``runs.py``); counters are linear in time, so interpolation is exact and the bounds are
floating-point ones, except where the summary documents an error bar.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from acquisition.energy import FIX_EMONPI, FIX_NVML, FIX_RAPL_ABSENT
from acquisition.point import Point
from acquisition.summary import (
    NO_ENERGY,
    REST_OF_SYSTEM,
    SCHEMA,
    STEPS_WITHOUT_SOURCE,
    SummaryOptions,
    format_text,
    summarize,
)
from tests.answers.runs import NS, KnownRun

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "acquisition/schemas/summary-1.json"
REL = 1e-9


def validate(summary_dict: dict[str, object]) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(summary_dict, schema, cls=jsonschema.Draft202012Validator)


def by_source(summary: object) -> dict[str, object]:
    return {s.source: s for s in summary.energy.sources}  # type: ignore[attr-defined]


def test_rapl_only_run() -> None:
    run = KnownRun()
    s = summarize(run.points())
    assert s.run == "r1" and s.experiment == "e1" and s.host == "h1"
    assert s.duration_s == pytest.approx(run.duration_s, rel=REL)
    # total: package + dram over the job's window (nrg_run start → end)
    assert s.energy.total_j == pytest.approx(run.inside_w * run.duration_s, rel=REL)
    assert s.energy.total_kwh == pytest.approx(s.energy.total_j / 3.6e6, rel=REL)
    assert s.energy.mean_w == pytest.approx(run.inside_w, rel=REL)
    src = by_source(s)
    assert set(src) == {"rapl:package-0", "rapl:dram-0"}
    assert src["rapl:package-0"].energy_j == pytest.approx(run.package_w * run.duration_s)
    assert src["rapl:package-0"].peak_w == pytest.approx(run.package_w, rel=REL)
    assert src["rapl:dram-0"].mean_w == pytest.approx(run.dram_w, rel=REL)
    assert src["rapl:package-0"].error_j == pytest.approx(0.0, abs=1e-9)  # window fully sampled
    # steps: 12 of 0.2 s at 30 W = 6 J each
    n_steps = run.epochs * run.steps
    step_j = run.inside_w * run.step_s
    assert s.steps.count == n_steps
    assert s.steps.energy_j is not None
    for key in ("mean", "p50", "p95"):
        assert s.steps.energy_j[key] == pytest.approx(step_j, rel=1e-6)
    assert s.steps.samples == n_steps * run.samples
    assert s.steps.energy_per_sample_j == pytest.approx(step_j / run.samples, rel=1e-6)
    # outside steps: start-up is outside the window; the evaluations between epochs and the
    # tail after the last epoch are inside it
    outside_s = run.epochs * run.eval_s
    assert s.energy.outside_steps_j == pytest.approx(run.inside_w * outside_s, rel=1e-6)
    assert [e.epoch for e in s.epochs] == list(range(run.epochs))
    for e in s.epochs:
        assert e.steps == run.steps
        assert e.duration_s == pytest.approx(run.steps * run.step_s)
        assert e.energy_j == pytest.approx(run.steps * step_j, rel=1e-6)
        assert e.sources["rapl:package-0"] == pytest.approx(run.steps * run.package_w * run.step_s)
    # modules: mean power x exclusive time; shares of the energy inside steps
    mods = {m.module: m for m in s.modules}
    inside = n_steps * step_j
    for name, seconds in run.modules.items():
        assert mods[name].energy_j == pytest.approx(n_steps * run.inside_w * seconds, rel=1e-6)
        assert mods[name].share == pytest.approx(n_steps * run.inside_w * seconds / inside)
    assert [m.module for m in s.modules][:2] == ["fc1", "fc2"]
    assert s.co2e_g == pytest.approx(s.energy.total_kwh * 480.0)
    assert s.no_energy_reason is None
    validate(s.to_dict())


def test_wall_meter_counted_once_and_rest_of_system() -> None:
    run = KnownRun(wall_w=80.0)
    s = summarize(run.points())
    src = by_source(s)
    assert s.energy.total_j == pytest.approx(run.wall_w * run.duration_s, rel=1e-6)
    assert src["emonpi:5"].counted
    assert not src["rapl:package-0"].counted and not src["rapl:dram-0"].counted
    rest = src[REST_OF_SYSTEM]
    assert not rest.counted
    assert rest.energy_j == pytest.approx((run.wall_w - run.inside_w) * run.duration_s, rel=1e-6)
    assert s.steps.energy_j["mean"] == pytest.approx(run.wall_w * run.step_s, rel=1e-6)  # type: ignore[index]
    validate(s.to_dict())


def test_epoch_as_old_integer_field() -> None:
    s = summarize(KnownRun(epoch_as_tag=False).points())
    assert [e.steps for e in s.epochs] == [4, 4, 4]


def test_no_samples_no_energy_per_sample() -> None:
    s = summarize(KnownRun(samples=None).points())
    assert s.steps.samples is None and s.steps.energy_per_sample_j is None


def test_window_larger_than_sampling_gives_an_error_bar() -> None:
    run = KnownRun()
    pts = run.points()
    start = run.t0 - 2 * NS  # two seconds before the first sample
    s = summarize(pts, window_ns=(start, run.last_sample))
    pkg = by_source(s)["rapl:package-0"]
    sampled_s = (run.last_sample - run.t0) / NS
    assert pkg.energy_j == pytest.approx(run.package_w * sampled_s, rel=1e-9)
    assert pkg.error_j == pytest.approx(run.package_w * 2.0, rel=1e-6)


def test_counter_restart_loses_one_interval_only() -> None:
    run = KnownRun(startup_s=0.0, eval_s=0.0, tail_s=0.0)
    pts = [p for p in run.points() if p.measurement == "rapl" and p.tags["domain"] == "package"]
    half = len(pts) // 2
    restarted = pts[:half] + [
        Point(
            p.measurement,
            p.tags,
            {
                "energy_joules": float(p.fields["energy_joules"])
                - float(pts[half].fields["energy_joules"])
                + 1.0
            },
            p.time_ns,
        )
        for p in pts[half:]
    ]
    s = summarize(restarted)
    tick_j = run.package_w * run.tick_s
    span = (pts[-1].time_ns - pts[0].time_ns) / NS
    assert s.energy.total_j == pytest.approx(run.package_w * span - tick_j, rel=1e-9)


def test_no_energy_source_says_why_first() -> None:
    pts = [p for p in KnownRun().points() if p.measurement not in ("rapl", "nrg_energy")]
    reasons = {"rapl": "no RAPL interface here", "nvml": "no NVIDIA driver"}
    s = summarize(pts, unavailable=reasons)
    assert s.energy.total_j == 0.0
    # every source, the ones a user can fix first, each with the fix that applies here
    assert s.no_energy_reason == NO_ENERGY.format(
        why=f"rapl: no RAPL interface here (fix: {FIX_RAPL_ABSENT}); "
        f"emonpi: not configured (fix: {FIX_EMONPI}); nvml: no NVIDIA driver (fix: {FIX_NVML})"
    )
    text = format_text(s)
    assert text.splitlines()[0] == s.no_energy_reason
    validate(s.to_dict())
    # a reason with a how-to: its first line in the sentence, the how-to in the notes
    howto = "unavailable: energy_uj is readable by root only\n  1. udev rule: ...\n  2. chmod ..."
    s = summarize(pts, unavailable={"rapl": howto})
    assert s.no_energy_reason == NO_ENERGY.format(
        why=f"rapl: energy_uj is readable by root only; emonpi: not configured (fix: {FIX_EMONPI}); "
        f"nvml: not configured (fix: {FIX_NVML})"
    )
    assert s.notes == [f"rapl: {howto}"]


def test_a_one_line_reason_is_said_once_and_only_a_how_to_goes_to_the_notes() -> None:
    """Guards: when no energy was measured, a source's one-line reason is said once, in the
    first sentence, and is not repeated as a note; only a reason with a how-to under it (RAPL
    readable by root only) adds a note, the whole how-to."""
    pts = [p for p in KnownRun().points() if p.measurement not in ("rapl", "nrg_energy")]
    howto = "unavailable: energy_uj is readable by root only\n  1. udev rule: ...\n  2. chmod ..."
    s = summarize(pts, unavailable={"rapl": howto, "nvml": "no NVIDIA driver"})
    assert s.notes == [f"rapl: {howto}"]
    text = format_text(s)
    assert [line for line in text.splitlines() if line.startswith("Note:")] == [
        "Note: rapl: unavailable: energy_uj is readable by root only"
    ]
    assert text.count("no NVIDIA driver") == 1


def test_resources_from_process_points() -> None:
    run = KnownRun()
    pts = run.points()
    t = run.job_start
    for i, (main, desc) in enumerate([(100e6, 50e6), (300e6, 20e6), (200e6, 80e6)]):
        for scope, rss in (("main", main), ("descendants", desc), ("combined", main + desc)):
            pts.append(
                Point(
                    "process",
                    {"host": "h1", "run": "r1", "tree": "4242", "scope": scope},
                    {"rss_bytes": int(rss), "cpu_cores": 0.5 * (i + 1), "threads": 3 + i},
                    t + i * NS,
                )
            )
        pts.append(
            Point(
                "memory",
                {"host": "h1"},
                {"total_bytes": int(8e9), "used_bytes": int(1e9 * (i + 1))},
                t + i * NS,
            )
        )
    s = summarize(pts, SummaryOptions(ram_unit="megabytes", time_unit="seconds"))
    r = s.resources
    assert r["tree"] == "4242"  # the job's pid from nrg_run
    assert r["max_ram"]["main"]["total_rss"] == pytest.approx(300.0)
    assert r["max_ram"]["descendants"]["total_rss"] == pytest.approx(80.0)
    assert r["max_ram"]["combined"]["total_rss"] == pytest.approx(320.0)
    assert r["max_ram"]["system"] == pytest.approx(3000.0)
    assert r["max_ram"]["system_capacity"] == pytest.approx(8000.0)
    assert r["cpu_utilization"]["main"]["max_sum_percent"] == pytest.approx(150.0)
    assert r["cpu_utilization"]["main"]["mean_sum_percent"] == pytest.approx(100.0)
    assert r["cpu_utilization"]["main_n_threads"] == 5
    assert r["compute_time"]["time"] == pytest.approx(run.duration_s)
    full = format_text(s, full=True)
    assert (
        "Max RAM:" in full and "   Unit: megabytes" in full and "      Total RSS: 300.000" in full
    )
    assert "   Descendants number of threads: 5" in full  # it has descendants: said
    # the default: only the figures with values, no n/a, no GPU lines without a GPU
    short = str(s)
    assert short.endswith(
        "Peak RAM: job 320.000 MB, system 3000.000 MB of 8000.000 MB\n"
        "CPU use: job mean 100.0 %, peak 150.0 % (100 % = one core)\n"
    )
    assert "n/a" not in short and "GPU" not in short
    validate(s.to_dict())


def test_full_summary_says_no_thread_count_without_descendants() -> None:
    run = KnownRun()
    pts = run.points()
    for i in range(3):
        for scope, rss in (("main", 100e6), ("descendants", 0), ("combined", 100e6)):
            fields = {"rss_bytes": int(rss), "cpu_cores": 0.5, "threads": 3}
            tags = {"host": "h1", "run": "r1", "tree": "4242", "scope": scope}
            pts.append(Point("process", tags, fields, run.job_start + i * NS))
    s = summarize(pts)
    full = format_text(s, full=True)
    assert "   Main number of threads: 3" in full
    assert "Descendants number of threads" not in full
    assert s.to_dict()["resources"]["cpu_utilization"]["descendants_n_threads"] == 3


def test_json_round_trip_and_schema_id() -> None:
    s = summarize(KnownRun().points())
    data = json.loads(s.to_json())
    assert data["schema"] == SCHEMA
    assert data["energy"]["total_j"] == s.energy.total_j
    assert set(data["provenance"]) >= {"energy.sources", "energy.total_j", "modules", "resources"}
    validate(data)


def test_bad_unit() -> None:
    with pytest.raises(ValueError, match="unit"):
        summarize(KnownRun().points(), SummaryOptions(ram_unit="furlongs"))  # type: ignore[arg-type]


def test_a_source_that_misses_steps_is_said() -> None:
    """A wall meter that stopped early: the steps after it have no wall energy, and the
    summary says how many."""
    run = KnownRun(wall_w=80.0)
    cut = run.step_times()[8][2]  # the wall meter's last sample: during the 9th step
    pts = [p for p in run.source_points() if p.measurement != "emonpi" or p.time_ns <= cut]
    pts += run.job_points()
    stored = attributed(sorted(pts, key=lambda p: p.time_ns), run)
    s = summarize(stored)
    assert s.notes == [STEPS_WITHOUT_SOURCE.format(source="emonpi:5", missing=4, steps=12)]
    assert f"Note: {s.notes[0]}" in format_text(s)


def attributed(points: list[Point], run: KnownRun) -> list[Point]:
    from acquisition.api import PluginContext
    from acquisition.config import build_dataclass
    from acquisition.processors.attribution import AttributionConfig, EnergyAttribution

    proc = EnergyAttribution(
        build_dataclass(AttributionConfig, {}, "a"),
        PluginContext("h1", 0.05, *(3 * [None])),  # type: ignore[arg-type]
    )
    out: list[Point] = []

    def emit(p: Point) -> None:
        out.append(p.with_tags({"host": run.host}))  # as the sinks tag them

    for p in points:
        out.append(p)
        proc.process(p, emit)
    proc.flush(emit)
    return out


def test_a_counter_read_less_often_than_power_is_extended_by_the_power_readings() -> None:
    """NVML's energy counter is read once a second, its power every 0.1 s: the window's parts
    before the first and after the last counter reading are counted from the power readings
    there (not left out and only put in the error bar)."""
    t0, watts = 1_700_000_000 * NS, 300.0
    tags = {"gpu": "0", "host": "h1"}
    points = []
    for tenth in range(-5, 50):  # power from 0.5 s before the first counter reading to 4.9 s
        fields: dict[str, float] = {"power_watts": watts}
        if tenth >= 0 and tenth % 10 == 0:  # the counter at 0, 1, 2, 3, 4 s
            fields["energy_joules"] = watts * tenth / 10
        points.append(Point("gpu", tags, fields, t0 + tenth * NS // 10))
    window = (t0 - 3 * NS // 10, t0 + 47 * NS // 10)  # 0.3 s before the first, 0.7 s after
    gpu = by_source(summarize(points, window_ns=window))["nvml:0"]
    # By hand: 0.3 s + 4 s + 0.7 s at 300 W; the readings agree with the counter exactly.
    assert gpu.energy_j == pytest.approx(watts * 5.0, rel=1e-9)
    assert gpu.mean_w == pytest.approx(watts, rel=1e-9)
    assert gpu.error_j == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("tenths", [60, 4, 1], ids=["two readings", "every 0.4 s", "every 0.1 s"])
def test_a_counter_extended_by_power_readings_on_a_ramp(tenths: int) -> None:
    """Guards: the window's parts beyond a GPU's counter readings get their energy, and its
    error bar, from the power readings there: two readings (the fewest that bracket a time),
    or readings every 0.4 s or 0.1 s, some inside those parts (each reading paired with its own
    time, none dropped at a part's end); the bar from the counter's difference over its span,
    whatever value it started from."""
    t0 = 1_700_000_000 * NS
    tags = {"gpu": "0", "host": "h1"}
    # The counter at 0, 1, 2, 3, 4 s, 300 W, from 5,000,000 J (an NVML counter counts from the
    # driver's start: only differences count); power read from -1 s (200 W) to 5 s (500 W) on a
    # ramp of 50 W a second, every `tenths` tenths of a second (trapezoids exact on a line).
    base = 5_000_000.0
    points = [
        Point("gpu", tags, {"energy_joules": base + 300.0 * k}, t0 + k * NS) for k in range(5)
    ]
    for k in range(-10, 51, tenths):
        watts = 250.0 + 5.0 * k  # 250 W at 0 s, +50 W a second
        points.append(Point("gpu", tags, {"power_watts": watts}, t0 + k * NS // 10))
    window = (t0 - 3 * NS // 10, t0 + 47 * NS // 10)  # 0.3 s before the first, 0.7 s after
    gpu = by_source(summarize(points, window_ns=window))["nvml:0"]
    # By hand, 235 W at -0.3 s, 250 W at 0 s, 450 W at 4 s, 485 W at 4.7 s. Edges:
    # (235 + 250) / 2 × 0.3 = 72.75 J and (450 + 485) / 2 × 0.7 = 327.25 J: 400 J. Counter:
    # 5,001,200 − 5,000,000 = 1200 J. Total 1600 J over 5 s: 320 W. Over the counter's span the
    # readings say (250 + 450) / 2 × 4 = 1400 J for its 1200 J: 1/6 too high, so the edges' bar
    # is 400 / 6.
    assert gpu.energy_j == pytest.approx(1600.0, rel=1e-9)
    assert gpu.mean_w == pytest.approx(320.0, rel=1e-9)
    assert gpu.error_j == pytest.approx(400.0 / 6, rel=1e-9)


@pytest.mark.parametrize(
    ("last_w", "energy_j", "error_j"),
    [(500.0, 1600.0, 400.0 / 6), (500.6, 1600.4, 400.4 * 201.2 / 1200)],
)
def test_a_counter_extended_by_two_power_readings_to_a_fraction_of_a_joule(
    last_w: float, energy_j: float, error_j: float
) -> None:
    """Guards: two power readings, the fewest that bracket a time, still give the window's parts
    beyond a GPU's counter readings their energy (not left out, 400 J lost) and its error bar,
    the readings' relative error against the counter to a fraction of a joule."""
    t0 = 1_700_000_000 * NS
    tags = {"gpu": "0", "host": "h1"}
    # The counter at 0, 1, 2, 3, 4 s, 300 W; power read only at -1 s (200 W) and 5 s (last_w).
    points = [Point("gpu", tags, {"energy_joules": 300.0 * k}, t0 + k * NS) for k in range(5)]
    points.append(Point("gpu", tags, {"power_watts": 200.0}, t0 - NS))
    points.append(Point("gpu", tags, {"power_watts": last_w}, t0 + 5 * NS))
    window = (t0 - 3 * NS // 10, t0 + 47 * NS // 10)  # 0.3 s before the first, 0.7 s after
    gpu = by_source(summarize(points, window_ns=window))["nvml:0"]
    # By hand, power rising 50 W a second: 235 W at -0.3 s, 250 W at 0 s, 450 W at 4 s, 485 W
    # at 4.7 s. Edges: (235 + 250) / 2 × 0.3 = 72.75 J and (450 + 485) / 2 × 0.7 = 327.25 J:
    # 400 J. Counter: 1200 J. Total 1600 J over 5 s: 320 W. Over the counter's span the readings
    # say (250 + 450) / 2 × 4 = 1400 J for its 1200 J: 1/6 too high, so the edges' bar is 400 / 6.
    # With 500.6 W at 5 s, 50.1 W a second: 235.07, 250.1, 450.5 and 485.57 W; edges 72.7755 +
    # 327.6245 = 400.4 J; the readings say (250.1 + 450.5) / 2 × 4 = 1401.2 J for 1200 J, 201.2 J
    # too high: the bar 400.4 × 201.2 / 1200 J (67.13 J; 67.07 J were 1401.2 J taken as 1401 J).
    assert gpu.energy_j == pytest.approx(energy_j, rel=1e-9)
    assert gpu.mean_w == pytest.approx(energy_j / 5.0, rel=1e-9)
    assert gpu.error_j == pytest.approx(error_j, rel=1e-9)


@pytest.mark.parametrize(
    ("stray", "error_j"),
    [((2000, 4000), 0.0), ((-10, 300), 165.0 * 901.5 / 18_000)],
    ids=["mid-run", "at the start"],
)
def test_the_edges_error_bar_is_from_the_readings_beside_them(
    stray: tuple[int, int], error_j: float
) -> None:
    """A 10-minute run, its GPU counter read every second at 300 W, power read every 0.1 s:
    where the readings stray from the counter (330 W) matters to the bar of the window's edges
    beyond the counter, only within a minute of the edge (the whole run's stray would give
    mid-run 300 J × 6,003 / 180,000 = 10.0 J, and at the start 315 J × 901.5 / 180,000 = 1.6 J)."""
    t0 = 1_700_000_000 * NS
    tags = {"gpu": "0", "host": "h1"}
    points = [Point("gpu", tags, {"energy_joules": 300.0 * k}, t0 + k * NS) for k in range(601)]
    for k in range(-10, 6011):
        watts = 330.0 if stray[0] <= k <= stray[1] else 300.0
        points.append(Point("gpu", tags, {"power_watts": watts}, t0 + k * NS // 10))
    window = (t0 - NS // 2, t0 + 6005 * NS // 10)  # 0.5 s beyond the counter at each end
    gpu = by_source(summarize(points, window_ns=window))["nvml:0"]
    # By hand, at the start: 0.5 s at 330 W before the first counter reading, 165 J; over the
    # counter's first minute the readings say 330 × 30 + (330 + 300) / 2 × 0.1 + 300 × 29.9 =
    # 18,901.5 J for 18,000 J. The end: 150 J, at 300 W as its minute is: no bar.
    start_j = 165.0 if stray[0] < 0 else 150.0
    assert gpu.energy_j == pytest.approx(180_000.0 + start_j + 150.0, rel=1e-9)
    assert gpu.error_j == pytest.approx(error_j, rel=1e-9, abs=1e-6)


def test_a_window_ending_inside_a_counter_interval_is_shaped_by_the_gpu_samples() -> None:
    """The GPU goes idle halfway through the counter's last interval and the window ends there:
    the driver's power samples give that part the interval's energy in proportion to their own
    energy (busy), not to its time (half)."""
    t0, busy, idle = 1_700_000_000 * NS, 600.0, 100.0
    tags = {"gpu": "0", "host": "h1"}
    # Counter: 600 J in each of the first two seconds, then 300 J busy + 50 J idle in the third.
    counter = [(0, 0.0), (1, 600.0), (2, 1200.0), (3, 1550.0)]
    points = [Point("gpu", tags, {"energy_joules": j}, t0 + sec * NS) for sec, j in counter]
    for k in range(150):  # a sample every 20 ms; idle after 2.5 s
        t = k * NS // 50
        watts = busy if t <= 5 * NS // 2 else idle
        points.append(Point("gpu_sample", tags, {"power_watts": watts}, t0 + t))
    window = (t0, t0 + 5 * NS // 2)
    gpu = by_source(summarize(points, window_ns=window))["nvml:0"]
    # By hand, the samples' energy (trapezoids, the last one held to 3 s) over [2, 2.5] s:
    # 600 W × 0.5 s = 300 J; over [2, 3] s: 300 + (600 + 100) / 2 × 0.02 (2.50 → 2.52 s)
    # + 100 × 0.46 (2.52 → 2.98 s) + 100 × 0.02 (held) = 355 J. The window gets 1200 J plus
    # 350 J × 300 / 355 of the third interval (linear in time: 175 J).
    assert gpu.energy_j == pytest.approx(1200.0 + 350.0 * 300.0 / 355.0, rel=1e-9)


def test_peak_power_is_never_below_the_mean() -> None:
    """The profile a tracked run on a fake tree at 25 W gave: the counter's deltas over the
    points' timestamps make 25.00 W, the collector's ``power_watts`` (the same deltas over its
    monotonic clock, a little longer) 24.98 W. The peak is the largest power seen either way."""
    tags = {"host": "h", "run": "r", "socket": "0", "domain": "package"}
    points = [
        Point("rapl", tags, {"energy_joules": 25.0 * k / 10, "power_watts": 24.98}, k * NS // 10)
        for k in range(1, 31)
    ]
    s = summarize(points, window_ns=(0, 3 * NS))
    (src,) = s.energy.sources
    assert src.mean_w == pytest.approx(25.0)
    assert src.peak_w is not None and src.peak_w >= src.mean_w
    assert s.energy.peak_w is not None and s.energy.mean_w is not None
    assert s.energy.peak_w >= s.energy.mean_w
    # the error bar covers the unsampled start; mean and peak both come from what was sampled
    assert "peak" in format_text(s, full=True)


def test_a_source_read_only_twice_is_counted() -> None:
    """Guards: a source with two readings, the fewest that bracket any time, is counted. A RAPL
    counter read at 0 s (0 J) and 4 s (100 J): 100 J / 4 s = 25 W; a wall meter's power
    readings at 0 s and 4 s: 80 W. Over the window [1, 3] s: RAPL 25 W × 2 s = 50 J; with the
    wall meter, it is counted (RAPL is inside it): 80 W × 2 s = 160 J."""
    t0 = 1_700_000_000 * NS
    window = (t0 + NS, t0 + 3 * NS)
    rapl = {"host": "h1", "socket": "0", "domain": "package"}
    counter = [
        Point("rapl", rapl, {"energy_joules": j}, t0 + sec * NS)
        for sec, j in ((0, 0.0), (4, 100.0))
    ]
    s = summarize(counter, window_ns=window)
    assert by_source(s)["rapl:package-0"].energy_j == pytest.approx(50.0, rel=1e-9)
    assert s.energy.total_j == pytest.approx(50.0, rel=1e-9)
    assert s.energy.mean_w == pytest.approx(25.0, rel=1e-9)
    wall = [
        Point("emonpi", {"host": "h1", "node": "5"}, {"power1_watts": 80.0}, t0 + sec * NS)
        for sec in (0, 4)
    ]
    s = summarize(counter + wall, window_ns=window)
    src = by_source(s)
    assert src["emonpi:5"].counted and not src["rapl:package-0"].counted
    assert src["emonpi:5"].energy_j == pytest.approx(160.0, rel=1e-9)
    assert s.energy.total_j == pytest.approx(160.0, rel=1e-9)


def test_a_counter_reading_sent_twice_is_counted_once_and_the_rest_kept() -> None:
    """Guards: a counter reading that arrives twice with the same time (a batch re-sent after
    an answer was lost) is taken once, and the readings after it still count. A RAPL counter
    at 25 W read every second from 0 s to 4 s (0, 25, 50, 75, 100 J), the 1 s reading twice:
    over [0, 4] s, 100 J − 0 J = 100 J, 100 J / 4 s = 25 W, every second bracketed (no error)."""
    t0 = 1_700_000_000 * NS
    rapl = {"host": "h1", "socket": "0", "domain": "package"}
    counter = [
        Point("rapl", rapl, {"energy_joules": 25.0 * sec}, t0 + sec * NS)
        for sec in (0, 1, 1, 2, 3, 4)
    ]
    s = summarize(counter, window_ns=(t0, t0 + 4 * NS))
    pkg = by_source(s)["rapl:package-0"]
    assert pkg.energy_j == pytest.approx(100.0, rel=1e-9)
    assert pkg.mean_w == pytest.approx(25.0, rel=1e-9)
    assert pkg.error_j == pytest.approx(0.0, abs=1e-9)
    assert s.energy.total_j == pytest.approx(100.0, rel=1e-9)


def test_a_counter_stored_out_of_order_counts_in_time_order() -> None:
    """Guards: a counter's readings stored out of time order (a batch re-sent after later ones
    reached storage) are taken in time order, not as a counter restart. A RAPL counter at 25 W
    read every second from 0 to 4 s (0, 25, 50, 75, 100 J), stored as the readings of 0, 2, 1,
    3 and 4 s: over [0, 4] s, 100 J, 25 W, every second bracketed (no error)."""
    t0 = 1_700_000_000 * NS
    rapl = {"host": "h1", "socket": "0", "domain": "package"}
    counter = [
        Point("rapl", rapl, {"energy_joules": 25.0 * sec}, t0 + sec * NS) for sec in (0, 2, 1, 3, 4)
    ]
    pkg = by_source(summarize(counter, window_ns=(t0, t0 + 4 * NS)))["rapl:package-0"]
    assert pkg.energy_j == pytest.approx(100.0, rel=1e-9)
    assert pkg.mean_w == pytest.approx(25.0, rel=1e-9)
    assert pkg.error_j == pytest.approx(0.0, abs=1e-9)


def test_the_run_host_and_experiment_are_the_names_on_most_points() -> None:
    """Guards: the summary's run, experiment and host are the values most points carry, each
    point counted once whether its series shares one tags mapping (as stored points do) or
    not: 3 points of host ``a`` (one mapping) against 2 of ``b`` (a mapping each)."""
    shared = {"host": "a", "run": "r1", "experiment": "e"}
    pts = [Point("memory", shared, {"used_bytes": 1}, k * NS) for k in range(3)]
    pts += [Point("memory", {"host": "b", "run": "r2"}, {"used_bytes": 1}, k * NS) for k in (3, 4)]
    s = summarize(pts)
    assert (s.host, s.run, s.experiment) == ("a", "r1", "e")


def test_excluded_intervals_count_in_neither_the_duration_nor_the_energy() -> None:
    """Guards: the tracker's own waits inside its span (``exclude_ns``) are taken out of the
    summary's duration and energy, not added to them. A RAPL counter at 25 W read every second
    over [0, 10] s, the waits [2, 4] s and [6, 7] s left out: 10 − 2 − 1 = 7 s, 25 W × 7 s =
    175 J, 175 J / 7 s = 25 W. With nothing left out: 10 s, 250 J."""
    t0 = 1_700_000_000 * NS
    rapl = {"host": "h1", "socket": "0", "domain": "package"}
    counter = [
        Point("rapl", rapl, {"energy_joules": 25.0 * sec}, t0 + sec * NS) for sec in range(11)
    ]
    window = (t0, t0 + 10 * NS)
    waits = [(t0 + 2 * NS, t0 + 4 * NS), (t0 + 6 * NS, t0 + 7 * NS)]
    s = summarize(counter, window_ns=window, exclude_ns=waits)
    assert s.duration_s == pytest.approx(7.0, rel=1e-9)
    assert by_source(s)["rapl:package-0"].energy_j == pytest.approx(175.0, rel=1e-9)
    assert s.energy.total_j == pytest.approx(175.0, rel=1e-9)
    assert s.energy.mean_w == pytest.approx(25.0, rel=1e-9)
    whole = summarize(counter, window_ns=window)
    assert whole.duration_s == pytest.approx(10.0, rel=1e-9)
    assert whole.energy.total_j == pytest.approx(250.0, rel=1e-9)


def test_waits_outside_the_window_or_of_no_length_change_nothing() -> None:
    """Guards: of the tracker's waits (``exclude_ns``), one wholly before the window and one
    that lasted no time (two readings of the clock alike) take nothing out, and a wait after
    them still does; a GPU counter's edges still get the power readings there.

    An NVML counter at 300 W read at 1, 2, 3 and 4 s (300 J a second), power readings of
    300 W every second from 0 to 5 s; the window [0, 5] s less the waits [−2, −1] s, [0.5,
    0.5] s and [2, 3] s: [0, 2] and [3, 5] s, 4 s. Counter: 600 − 300 = 300 J over [1, 2] s and
    1200 − 900 = 300 J over [3, 4] s; power readings beyond it: 300 W × 1 s over [0, 1] s and
    [4, 5] s, 600 J. 1200 J over 4 s: 300 W; every part covered and the readings agree with
    the counter: no error bar."""
    t0 = 1_700_000_000 * NS
    tags = {"gpu": "0", "host": "h1"}
    points = [
        Point("gpu", tags, {"energy_joules": 300.0 * sec}, t0 + sec * NS) for sec in range(1, 5)
    ]
    points += [Point("gpu", tags, {"power_watts": 300.0}, t0 + sec * NS) for sec in range(6)]
    window = (t0, t0 + 5 * NS)
    waits = [(t0 - 2 * NS, t0 - NS), (t0 + NS // 2, t0 + NS // 2), (t0 + 2 * NS, t0 + 3 * NS)]
    s = summarize(points, window_ns=window, exclude_ns=waits)
    assert s.duration_s == pytest.approx(4.0, rel=REL)
    gpu = by_source(s)["nvml:0"]
    assert gpu.energy_j == pytest.approx(1200.0, rel=REL)
    assert gpu.mean_w == pytest.approx(300.0, rel=REL)
    assert gpu.error_j == pytest.approx(0.0, abs=1e-6)
    assert gpu.origin == "energy_joules counter, differenced, power readings beyond it"
    assert s.energy.total_j == pytest.approx(1200.0, rel=REL)
    assert s.energy.mean_w == pytest.approx(300.0, rel=REL)


@pytest.mark.parametrize("readings", [0, 1], ids=["no power reading", "one power reading"])
def test_a_window_beyond_a_counter_without_two_power_readings_is_its_error_bar(
    readings: int,
) -> None:
    """Guards: a counter with fewer than two power readings beside it (RAPL reads none; an
    NVML counter read once with its power) has nothing to extend it beyond its readings: the
    window's part outside them adds no energy and no covered time, only its error bar.

    The counter at 25 W read at 0, 1, 2, 3 and 4 s (0 to 100 J); the window [−2, 4] s.
    100 J over the 4 s read: 25 W; the 2 s before the first reading at that mean power:
    25 W × 2 s = 50 J of error bar."""
    t0 = 1_700_000_000 * NS
    if readings:
        tags, name = {"gpu": "0", "host": "h1"}, "nvml:0"
        points = [
            Point("gpu", tags, {"energy_joules": 25.0 * sec}, t0 + sec * NS) for sec in range(5)
        ]
        points[2] = Point("gpu", tags, {"energy_joules": 50.0, "power_watts": 25.0}, t0 + 2 * NS)
    else:
        tags, name = {"host": "h1", "socket": "0", "domain": "package"}, "rapl:package-0"
        points = [
            Point("rapl", tags, {"energy_joules": 25.0 * sec}, t0 + sec * NS) for sec in range(5)
        ]
    s = summarize(points, window_ns=(t0 - 2 * NS, t0 + 4 * NS))
    src = by_source(s)[name]
    assert src.energy_j == pytest.approx(100.0, rel=REL)
    assert src.mean_w == pytest.approx(25.0, rel=REL)
    assert src.error_j == pytest.approx(50.0, rel=REL)
    assert src.origin == "energy_joules counter, differenced"
    assert s.energy.total_j == pytest.approx(100.0, rel=REL)


T1 = 1_700_000_000 * NS
GPU = {"gpu": "0", "host": "h1"}
RAPL = {"host": "h1", "socket": "0", "domain": "package"}


def _gpu_counter(
    joules: list[tuple[float, float]], watts: list[tuple[float, float]]
) -> list[Point]:
    """An NVML counter read at (s, J) and its power readings at (s, W), as separate points."""
    points = [Point("gpu", GPU, {"energy_joules": j}, T1 + round(t * NS)) for t, j in joules]
    points += [Point("gpu", GPU, {"power_watts": w}, T1 + round(t * NS)) for t, w in watts]
    return points


def test_a_counter_extended_by_readings_that_cover_part_of_the_rest() -> None:
    """Guards: where the power readings beyond a counter's readings cover only part of the
    window's rest, that part gets their energy and the part no reading brackets the error bar
    (mean power × its seconds), and the source says where its figure comes from.

    An NVML counter at 300 W read at 1, 2, 3 and 4 s; power readings of 300 W every 0.5 s
    from 0.5 to 4.5 s; the window [0.2, 5] s. Counter: 900 J over 3 s. Readings beyond it:
    [0.5, 1] and [4, 4.5] s, 300 W × 1 s = 300 J. 1200 J over 4 s: 300 W. Not bracketed:
    [0.2, 0.5] and [4.5, 5] s, 0.8 s: 300 W × 0.8 s = 240 J."""
    watts = [(k / 2, 300.0) for k in range(1, 10)]
    points = _gpu_counter([(sec, 300.0 * sec) for sec in range(1, 5)], watts)
    s = summarize(points, window_ns=(T1 + NS // 5, T1 + 5 * NS))
    gpu = by_source(s)["nvml:0"]
    assert gpu.energy_j == pytest.approx(1200.0, rel=REL)
    assert gpu.mean_w == pytest.approx(300.0, rel=REL)
    assert gpu.error_j == pytest.approx(240.0, rel=REL)
    assert gpu.origin == "energy_joules counter, differenced, power readings beyond it"


@pytest.mark.parametrize(
    ("counter_w", "energy_j", "mean_w", "error_j"),
    [(0.0, 600.0, 120.0, 600.0), (0.2, 1.0, 0.2, 0.0)],
    ids=["a counter that does not move", "a counter moving 0.2 J a second"],
)
def test_the_error_bar_beyond_a_counter_that_moves_little_or_not_at_all(
    counter_w: float, energy_j: float, mean_w: float, error_j: float
) -> None:
    """Guards: the error bar of the window's parts beyond a GPU's counter readings when the
    counter moved less than a joule over its span (readings compared with it as they are) or
    not at all (a stuck driver: nothing to compare with; the whole extension is the bar).

    A counter read at 1, 2, 3 and 4 s, from 1000 J, at ``counter_w``; power readings of
    ``counter_w`` W (300 W beside the stuck counter) every second from 0 to 5 s; the window
    [0, 5] s. Stuck: 0 J over 3 s, and 300 W × 2 s = 600 J beyond it: 600 J over 5 s, 120 W;
    the bar 600 J. At 0.2 W: 0.6 J over 3 s and 0.2 W × 2 s = 0.4 J beyond: 1 J over 5 s,
    0.2 W; the readings say 0.2 W × 3 s = 0.6 J as the counter does: no bar."""
    watts = [(sec, counter_w or 300.0) for sec in range(6)]
    joules = [(sec, 1000.0 + counter_w * (sec - 1)) for sec in range(1, 5)]
    gpu = by_source(summarize(_gpu_counter(joules, watts), window_ns=(T1, T1 + 5 * NS)))["nvml:0"]
    assert gpu.energy_j == pytest.approx(energy_j, rel=REL)
    assert gpu.mean_w == pytest.approx(mean_w, rel=REL)
    assert gpu.error_j == pytest.approx(error_j, rel=REL, abs=1e-9)


def test_readings_of_0_w_beyond_a_counter_cover_their_time() -> None:
    """Guards: power readings of 0 W beyond a counter's readings are readings: their time is
    covered (0 J), the mean power is over it, and the source says it.

    An NVML counter at 300 W read at 1, 2, 3 and 4 s (900 J); power readings of 0 W at 0 and
    1 s; the window [0, 4] s: 900 J + 0 J over 3 + 1 s = 225 W, every second bracketed."""
    points = _gpu_counter([(sec, 300.0 * sec) for sec in range(1, 5)], [(0, 0.0), (1, 0.0)])
    gpu = by_source(summarize(points, window_ns=(T1, T1 + 4 * NS)))["nvml:0"]
    assert gpu.energy_j == pytest.approx(900.0, rel=REL)
    assert gpu.mean_w == pytest.approx(225.0, rel=REL)
    assert gpu.error_j == pytest.approx(0.0, abs=1e-9)
    assert gpu.origin == "energy_joules counter, differenced, power readings beyond it"


def test_a_gpu_counter_read_once_gives_way_to_its_power_readings() -> None:
    """Guards: a counter read only once (a run shorter than the counter's period) brackets
    nothing; the source's power readings give its energy instead of the source being lost.

    The counter read at 1 s; power readings of 300 W every second from 0 to 4 s; the window
    [0, 4] s: 300 W × 4 s = 1200 J, integrated by trapezoids."""
    points = _gpu_counter([(1, 5000.0)], [(sec, 300.0) for sec in range(5)])
    gpu = by_source(summarize(points, window_ns=(T1, T1 + 4 * NS)))["nvml:0"]
    assert gpu.energy_j == pytest.approx(1200.0, rel=REL)
    assert gpu.origin == "power readings, integrated by trapezoids"


def test_sources_whose_readings_end_where_the_window_starts_are_not_listed() -> None:
    """Guards: a source whose last reading is the window's first instant brackets none of it:
    it is left out (no 0 J source, no crash on a stretch of no length), for a counter and for
    power readings alike. A RAPL counter and a wall meter read at 0, 1 and 2 s; the window
    [2, 4] s: no energy measured."""
    points = [Point("rapl", RAPL, {"energy_joules": 25.0 * sec}, T1 + sec * NS) for sec in range(3)]
    wall = {"host": "h1", "node": "5"}
    points += [Point("emonpi", wall, {"power1_watts": 80.0}, T1 + sec * NS) for sec in range(3)]
    s = summarize(points, window_ns=(T1 + 2 * NS, T1 + 4 * NS))
    assert s.energy.sources == []
    assert s.energy.total_j == 0.0
    assert s.no_energy_reason is not None


def test_a_wall_meters_uneven_readings_are_integrated_by_trapezoids() -> None:
    """Guards: every power reading inside the window takes part in the integral, the first and
    the last inner ones too. A wall meter read at 0, 1, 2, 3 and 4 s: 80, 120, 90, 100 and
    85 W; over [0, 4] s: (80 + 120) / 2 + (120 + 90) / 2 + (90 + 100) / 2 + (100 + 85) / 2 =
    100 + 105 + 95 + 92.5 = 392.5 J, 392.5 / 4 = 98.125 W; peak 120 W."""
    wall = {"host": "h1", "node": "5"}
    watts = [80.0, 120.0, 90.0, 100.0, 85.0]
    points = [Point("emonpi", wall, {"power1_watts": w}, T1 + k * NS) for k, w in enumerate(watts)]
    src = by_source(summarize(points, window_ns=(T1, T1 + 4 * NS)))["emonpi:5"]
    assert src.energy_j == pytest.approx(392.5, rel=REL)
    assert src.mean_w == pytest.approx(98.125, rel=REL)
    assert src.peak_w == pytest.approx(120.0, rel=REL)


def _peak_run(case: str) -> tuple[list[Point], tuple[int, int], list[tuple[int, int]]]:
    """The points, window and waits of each case of the peak power test."""
    window, waits = (T1, T1 + 4 * NS), []
    if case == "a wall meter's largest reading":
        wall = {"host": "h1", "node": "5"}
        watts = [80.0, 120.0, 90.0, 100.0, 85.0]
        points = [
            Point("emonpi", wall, {"power1_watts": w}, T1 + k * NS) for k, w in enumerate(watts)
        ]
        return points, window, waits
    if case == "a counter's mean between readings":
        # every 0.5 s, 10.3 J a half second except 20.6 J in the third: 20.6 and 41.2 W
        gains = [10.3, 10.3, 20.6, 10.3, 10.3, 10.3, 10.3, 10.3]
        joules = [sum(gains[:k]) for k in range(9)]
        points = [
            Point("rapl", RAPL, {"energy_joules": j}, T1 + k * NS // 2)
            for k, j in enumerate(joules)
        ]
        return points, window, waits
    # 25 W read every second with a power_watts reading of 24 W, 60 W at one time
    at = {"a reading at the window's start": 0, "a reading at the window's end": 4}.get(case, 1)
    if case == "the larger of two stretches":
        waits = [(T1 + 2 * NS, T1 + 3 * NS)]
    if case == "a reading beside a counter among power readings":
        tags = GPU
        extra = [Point("gpu", GPU, {"power_watts": 24.0}, T1 + NS // 2)]  # power alone
    else:
        tags, extra = RAPL, []
    points = [
        Point(
            "rapl" if tags is RAPL else "gpu",
            tags,
            {"energy_joules": 25.0 * sec, "power_watts": 60.0 if sec == at else 24.0},
            T1 + sec * NS,
        )
        for sec in range(5)
    ]
    return points + extra, window, waits


@pytest.mark.parametrize(
    ("case", "peak_w"),
    [
        ("a wall meter's largest reading", 120.0),
        ("a counter's mean between readings", 41.2),
        ("a reading at the window's start", 60.0),
        ("a reading at the window's end", 60.0),
        ("the larger of two stretches", 60.0),
        ("a reading beside a counter among power readings", 60.0),
    ],
)
def test_peak_power_is_the_largest_power_seen(case: str, peak_w: float) -> None:
    """Guards: a source's peak power is the largest power seen over the window: a power
    reading; a counter's mean power between two readings (gain ÷ interval: 20.6 J ÷ 0.5 s =
    41.2 W beside 10.3 J ÷ 0.5 s = 20.6 W); a ``power_watts`` reading beside a counter, also
    at the window's first or last instant, and also in a series where some points carry power
    alone; the larger of the peaks of the window's stretches (the wait [2, 3] s leaves [0, 2]
    and [3, 4] s, 60 W at 1 s in the first, 25 W in the second). The counter otherwise draws
    25 W (25 J a second) beside readings of 24 W."""
    points, window, waits = _peak_run(case)
    (src,) = summarize(points, window_ns=window, exclude_ns=waits).energy.sources
    assert src.peak_w == pytest.approx(peak_w, rel=REL)


def test_the_start_and_end_are_to_the_millisecond() -> None:
    """Guards: the summary's start and end (ISO 8601, UTC) keep their milliseconds. The window
    [1,700,000,000.25, 1,700,000,003.75] s since the epoch: 2023-11-14 22:13:20.250 to
    22:13:23.750 UTC (1,700,000,000 s is 22:13:20 on 14 November 2023)."""
    points = [Point("rapl", RAPL, {"energy_joules": 25.0 * sec}, T1 + sec * NS) for sec in range(5)]
    s = summarize(points, window_ns=(T1 + NS // 4, T1 + 3 * NS + 3 * NS // 4))
    assert (s.start, s.end) == ("2023-11-14T22:13:20.250+00:00", "2023-11-14T22:13:23.750+00:00")
    assert s.duration_s == pytest.approx(3.5, rel=REL)


class _Bytes(float):
    """A float subclass (as numpy's float64 is): a number the summary must still read."""


def test_gpu_memory_and_use_of_the_system_from_gpu_points() -> None:
    """Guards: the GPUs' memory capacity (each GPU's largest, added), the system's peak GPU
    memory (the GPUs' use added at each tick, then the largest) and utilisation (percent added
    at each tick; hardware percent per GPU), from plain numbers and from others (a float
    subclass, a missing field, a bool that is no number).

    By hand, in megabytes: GPU 0 of 1000 and GPU 1 of 2000: capacity 3000. Used at tick 1:
    100 + 400 = 500; at tick 2: 300 + 150 = 450 (GPU 1's second reading a subclass); at tick 3
    only GPU 0's 50 (GPU 1's missing): peak 500. Utilisation at tick 1: 50 + 30 = 80 %, tick 2:
    70 + 90 = 160 %, tick 3: 20 % (GPU 1's a bool): max 160, mean 260 / 3; per GPU of 2: max
    80, mean 130 / 3."""
    mb = 1e6
    rows = [  # tick, gpu, total, used, util
        (1, "0", 1000 * mb, 100 * mb, 0.5),
        (1, "1", 2000 * mb, 400 * mb, 0.3),
        (2, "0", 1000 * mb, 300 * mb, 0.7),
        (2, "1", 2000 * mb, _Bytes(150 * mb), 0.9),
        (3, "0", 1000 * mb, 50 * mb, 0.2),
        (3, "1", 2000 * mb, None, True),
    ]
    for plain in (True, False):
        pts = []
        for tick, gpu, total, used, util in rows:
            if plain and (type(used) is not float or type(util) is not float):
                continue
            fields = {"memory_total_bytes": int(total), "utilization_ratio": util}
            if used is not None:
                fields["memory_used_bytes"] = used
            pts.append(Point("gpu", {"host": "h1", "gpu": gpu}, fields, tick * NS))
        r = summarize(pts, SummaryOptions(gpu_ram_unit="megabytes")).resources
        ram, util = r["max_gpu_ram"], r["gpu_utilization"]
        assert ram["system_capacity"] == pytest.approx(3000.0)
        assert ram["system"] == pytest.approx(500.0)
        assert util["system_gpu_count"] == 2
        shares = util["gpu_percentages"]
        if plain:  # GPU 1's tick 2 and 3 left out: 80, 70 and 20 %
            assert (shares["max_sum_percent"], shares["mean_sum_percent"]) == pytest.approx(
                (80.0, 170.0 / 3)
            )
            continue
        assert shares["max_sum_percent"] == pytest.approx(160.0)
        assert shares["mean_sum_percent"] == pytest.approx(260.0 / 3)
        assert shares["max_hardware_percent"] == pytest.approx(80.0)
        assert shares["mean_hardware_percent"] == pytest.approx(130.0 / 3)


def test_a_window_without_points_is_summarised_and_no_window_is_an_error() -> None:
    """Guards: a time window in which nothing was recorded still gets its summary (its
    duration, no energy, the sentence saying why), less the intervals left out: 5 to 15 s less
    7 to 9 s = 8 s; without points and without a window there is nothing to summarise."""
    s = summarize([], window_ns=(5 * NS, 15 * NS), exclude_ns=[(7 * NS, 9 * NS)])
    assert (s.start_ns, s.end_ns, s.duration_s) == (5 * NS, 15 * NS, 8.0)
    assert (s.energy.total_j, s.energy.sources, s.steps.count) == (0, [], 0)
    assert s.no_energy_reason is not None and s.no_energy_reason.startswith("No energy was")
    with pytest.raises(ValueError, match="no points to summarise"):
        summarize([])


def test_gpu_memory_and_use_over_two_hosts() -> None:
    """Guards: a run on two hosts with GPUs of the same indexes counts each host's GPUs (4, not
    2), their capacity added, and, as the hosts tick apart, each host's peak and mean added.

    By hand, in megabytes, each GPU of 1000: capacity 4000. Host a (ticks at 1 and 3 s) uses
    100 + 200 = 300, then 500 + 100 = 600: peak 600; host b (ticks at 2 and 4 s) 50 + 50 = 100,
    then 250 + 150 = 400: peak 400. System peak 600 + 400 = 1000. Use: a 40 + 60 = 100 % then
    20 %; b 10 % then 90 %: peak 100 + 90 = 190 %, mean 60 + 50 = 110 %; of 4 GPUs 47.5 and
    27.5 %."""
    mb = 1e6
    rows = [  # host, tick, gpu, used, util
        ("a", 1, "0", 100, 0.4), ("a", 1, "1", 200, 0.6), ("a", 3, "0", 500, 0.1),
        ("a", 3, "1", 100, 0.1), ("b", 2, "0", 50, 0.05), ("b", 2, "1", 50, 0.05),
        ("b", 4, "0", 250, 0.5), ("b", 4, "1", 150, 0.4),
    ]  # fmt: skip
    pts = [
        Point(
            "gpu",
            {"host": host, "gpu": gpu},
            {
                "memory_total_bytes": int(1000 * mb),
                "memory_used_bytes": int(used * mb),
                "utilization_ratio": util,
            },
            tick * NS,
        )
        for host, tick, gpu, used, util in rows
    ]
    r = summarize(pts, SummaryOptions(gpu_ram_unit="megabytes")).resources
    ram, util = r["max_gpu_ram"], r["gpu_utilization"]
    assert (ram["system_capacity"], ram["system"]) == pytest.approx((4000.0, 1000.0))
    assert util["system_gpu_count"] == 4
    shares = util["gpu_percentages"]
    assert (shares["max_sum_percent"], shares["mean_sum_percent"]) == pytest.approx((190.0, 110.0))
    assert shares["max_hardware_percent"] == pytest.approx(47.5)
    assert shares["mean_hardware_percent"] == pytest.approx(27.5)
