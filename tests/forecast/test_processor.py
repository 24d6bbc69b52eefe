"""The forecast processor fed literal bus points: a RAPL counter at a known power and a job of
known epoch and step lengths; what it forecasts at each epoch end, against what then happens."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.config import PluginSpec, parse_config
from acquisition.errors import ConfigError
from acquisition.point import Point
from acquisition.processors.carbon import CarbonConfig, CarbonRecord
from acquisition.processors.forecast import (
    MEASUREMENT,
    ForecastConfig,
    RunForecast,
)
from acquisition.registry import build_plugin
from acquisition.run_plan import plan_forecast

S = 1_000_000_000
MS = 1_000_000
T0 = 1_763_000_000 * S
RUN = {"experiment": "e", "run": "r", "host": "h"}
WATTS = {"package": 40.0, "dram": 6.0}


def context() -> PluginContext:
    return PluginContext(
        host="h", interval_s=0.1, state_dir=Path("/"), data_dir=Path("/"), runtime_dir=Path("/")
    )


def job(
    epochs: Sequence[Sequence[float]], setup_s: float = 1.5, eval_s: float = 0.7
) -> tuple[list[Point], float]:
    """Points of a job (in arrival order, with RAPL samples every 50 ms at ``WATTS``) whose
    epoch e has steps of the durations ``epochs[e]`` (s) and an evaluation after them; and the
    run's duration."""
    events: list[Point] = [Point("nrg_run", RUN, {"event": "start"}, T0)]
    t = setup_s
    n = 0
    for e, steps in enumerate(epochs):
        for d in steps:
            fields = {
                "step": n,
                "start_time_ns": T0 + round(t * S),
                "end_time_ns": T0 + round((t + d) * S),
                "duration_seconds": d,
            }
            events.append(
                Point("nrg_step", {**RUN, "epoch": str(e)}, fields, T0 + round((t + d) * S))
            )
            t += d
            n += 1
        t += eval_s
    events.append(Point("nrg_run", RUN, {"event": "end"}, T0 + round(t * S)))
    end_ms = round(t * 1000) + 200
    samples = [
        Point(
            "rapl",
            {"socket": "0", "domain": domain},
            {"energy_joules": w * ms / 1000, "power_watts": w},
            T0 + (ms - 500) * MS,
        )
        for ms in range(0, end_ms + 500, 50)
        for domain, w in WATTS.items()
    ]
    points = sorted(events + samples, key=lambda p: p.time_ns)
    return points, t


def run(points: list[Point], carbon: float | None = None, **options: object) -> list[Point]:
    ctx = context()
    if carbon is not None:  # as processors.carbon records it
        CarbonRecord(CarbonConfig(g_per_kwh=carbon, source="test"), ctx)
    proc = RunForecast(ForecastConfig(**options), ctx)  # type: ignore[arg-type]
    out: list[Point] = []
    for p in points:
        proc.process(p, out.append)
    proc.flush(out.append)
    return out


def totals(out: list[Point]) -> list[Point]:
    return [p for p in out if p.measurement == MEASUREMENT and p.tags["source"] == "total"]


def test_steady_job_forecast_after_epoch_one_is_the_outcome() -> None:
    epochs = [[0.2] * 10] * 6
    points, duration = job(epochs)
    out = run(points, epochs=6, carbon=300.0)
    forecasts = totals(out)
    assert [p.fields["epochs_done"] for p in forecasts] == [1, 2, 3, 4, 5]
    first = forecasts[0]
    assert first.tags["epoch"] == "0" and first.fields["basis"] == "steps"
    assert first.fields["total_seconds"] == pytest.approx(duration, rel=1e-3)
    energy = sum(WATTS.values()) * duration
    assert first.fields["energy_joules"] == pytest.approx(energy, rel=1e-3)
    assert first.fields["co2e_grams"] == pytest.approx(energy / 3.6e6 * 300.0, rel=1e-3)
    per_source = {p.tags["source"]: p for p in out if p.fields.get("epochs_done") == 1}
    assert per_source["rapl:package-0"].fields["energy_joules"] == pytest.approx(
        WATTS["package"] * duration, rel=1e-3
    )
    # the forecast is made at the epoch's end: the first step of epoch 1
    assert first.time_ns == T0 + round((1.5 + 2.0 + 0.7) * S)
    assert first.fields["elapsed_seconds"] == pytest.approx(1.5 + 2.0 + 0.7)
    assert forecasts[-1].fields["basis"] == "epochs"


def test_interval_widens_and_covers_when_steps_and_epochs_vary() -> None:
    rng = random.Random(7)
    varying = [[rng.uniform(0.1, 0.3) for _ in range(10)] for _ in range(6)]
    steady = [[0.2] * 10] * 6
    (vp, v_duration), (sp, _) = job(varying), job(steady)
    v, s = totals(run(vp, epochs=6)), totals(run(sp, epochs=6))
    energy = sum(WATTS.values()) * v_duration
    for fv, fs in zip(v, s, strict=True):
        width_v = fv.fields["total_high_seconds"] - fv.fields["total_low_seconds"]
        width_s = fs.fields["total_high_seconds"] - fs.fields["total_low_seconds"]
        assert width_v > 10 * max(width_s, 1e-6)
        assert fv.fields["total_low_seconds"] <= v_duration <= fv.fields["total_high_seconds"]
        assert fv.fields["energy_low_joules"] <= energy <= fv.fields["energy_high_joules"]


def test_the_jobs_plan_wins_and_no_plan_means_no_forecast() -> None:
    points, _ = job([[0.2] * 4] * 3)
    assert totals(run(points)) == []
    plan = Point("nrg_plan", RUN, {"epochs": 3, "steps_per_epoch": 4}, T0 + 1)
    with_plan = sorted([*points, plan], key=lambda p: p.time_ns)
    assert [p.fields["epochs"] for p in totals(run(with_plan, epochs=9))] == [3, 3]


def test_a_lagging_source_is_waited_for() -> None:
    points, _ = job([[0.2] * 4] * 3)
    # the step that ends epoch 0 arrives before any sample after it
    proc = RunForecast(ForecastConfig(epochs=3), context())
    out: list[Point] = []
    boundary = T0 + round((1.5 + 0.8 + 0.7) * S)
    for p in points:
        if p.measurement == "rapl" and p.time_ns >= boundary:
            continue  # RAPL stalls at the boundary …
        if p.measurement == "nrg_step" and p.tags["epoch"] == "1":
            proc.process(p, out.append)  # … and the step that ends epoch 0 arrives
            break
        proc.process(p, out.append)
    assert totals(out) == []
    proc.flush(out.append)
    assert len(totals(out)) == 1


def test_config_through_the_registry_and_the_command_line() -> None:
    proc = build_plugin(PluginSpec("processors", "forecast", {"epochs": 4}), context())
    assert isinstance(proc, RunForecast)
    with pytest.raises(ConfigError, match=r"\[processors.forecast\[0\]\] epochs must be >= 0"):
        build_plugin(PluginSpec("processors", "forecast", {"epochs": -1}), context())
    config = parse_config("[[processors.attribution]]\n", "<test>")
    plan_forecast(config, 12, None)
    assert [(s.name, s.options) for s in config.processors] == [
        ("attribution", {}),
        ("forecast", {"epochs": 12}),
    ]


def test_samples_are_kept_only_from_where_the_run_is_summed() -> None:
    """Energies are summed step by step, so a source's samples older than the last settled
    step go: memory does not grow with the epoch's length (54 samples an epoch here); the most
    kept is the run's start-up (1.5 s) and its first step: 34 samples."""
    points, _ = job([[0.2] * 10] * 6)
    proc = RunForecast(ForecastConfig(epochs=6), context())
    out: list[Point] = []
    most = 0
    for p in points:
        proc.process(p, out.append)
        most = max(most, *(len(s.series().times) for s in proc._sources.values()), 0)
    assert len(totals(out)) == 5
    assert most <= 40
