"""Run forecast: remaining and total duration, energy and CO₂e, at each epoch end.

At the end of every epoch of a run whose length is known, the run's remaining and total
duration, energy per source and CO₂e, with prediction intervals (``nrg_forecast``).

The run's length comes from the job (``instrument(..., epochs=N)`` or ``session.plan(...)``
send an ``nrg_plan`` point) or from this processor's ``epochs`` (``nrg-collect --epochs N``).
An epoch ends where the first step of the next one starts (its ``nrg_step`` point has a new
``epoch`` tag); the epoch's figures are taken once every power source has a sample at or after
that time (or ``wait`` later on the data clock, with what there is). The statistics are in
:mod:`acquisition.forecast`; the CO₂e is at the intensity ``processors.carbon`` recorded for the
run (else the default). The latest forecast of each run is kept in the agent's shared
status (``status["forecast"][run]``) for the live line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.forecast import TOTAL, EpochFigures, Forecast, forecast_run, format_forecast
from acquisition.point import FieldValue, Point
from acquisition.processors.carbon import STATUS_KEY as CARBON_STATUS
from acquisition.processors.energy import Source, parse_source
from acquisition.processors.steps import RunKey, epoch_of, int_field, run_key, run_tags
from acquisition.summary.build import counted_sources
from acquisition.summary_options import DEFAULT_CARBON_INTENSITY

__all__ = [
    "MEASUREMENT",
    "PLAN",
    "ForecastConfig",
    "RunForecast",
    "forecast_points",
]

log = logging.getLogger(__name__)

MEASUREMENT = "nrg_forecast"
PLAN = "nrg_plan"
STATUS_KEY = "forecast"
_NS = 1_000_000_000


@dataclass
class ForecastConfig:
    """``[[processors.forecast]]`` keys."""

    epochs: int = option(0, "epochs of the run when the job does not say (0: only the job's)")
    steps_per_epoch: int = option(0, "steps per epoch (0: as many as the last epoch had)")
    wall_channel: int = option(1, "emonPi CT channel that measures this machine (power<ch>_watts)")
    wait: float = duration(
        5.0, "wait this long (data clock) past an epoch's end for a lagging source"
    )

    def validate(self) -> None:
        if self.epochs < 0:
            raise ValueError("epochs must be >= 0")
        if self.steps_per_epoch < 0:
            raise ValueError("steps_per_epoch must be >= 0")


STEPS_KEPT = 50_000
"""Steps per epoch whose figures are kept for the spread (the first ones; all are counted)."""


@dataclass
class _Run:
    start_ns: int | None = None
    epochs: int = 0
    steps_per_epoch: int = 0
    epoch: str | None = None
    queue: list[tuple[int, int]] = field(default_factory=list)
    """Waiting for data, in time order: steps ``(start, end)`` and epoch ends ``(end, -1)``."""
    ended_epochs: list[str] = field(default_factory=list)
    """The epochs whose ends are queued, in order."""
    cursor_ns: int | None = None
    """The run's energies are summed up to here; the samples before it are not needed."""
    window_ns: int | None = None
    """Start of the current epoch (the first step's start, then each epoch's end)."""
    epoch_j: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    step_s: list[float] = field(default_factory=list)
    step_j: dict[str, list[float]] = field(default_factory=dict)
    spent_j: dict[str, float] = field(default_factory=dict)
    done: list[EpochFigures] = field(default_factory=list)
    ended: bool = False


class RunForecast:
    """Bus processor: ``nrg_forecast`` points at each epoch end of a run of known length."""

    name: ClassVar[str] = "forecast"
    config_class: ClassVar[type] = ForecastConfig

    def __init__(self, config: ForecastConfig, context: PluginContext) -> None:
        self._config = config
        self._status: dict[str, Forecast] = context.status.setdefault(STATUS_KEY, {})
        self._shared = context.status
        self._sources: dict[str, Source] = {}
        self._runs: dict[RunKey, _Run] = {}
        self._clock = 0
        self._spawned: dict[RunKey, int] = {}
        """Spawn time of each tracked command's run: the start of the run's window."""
        self._counts = {"forecasts": 0, "epochs_without_energy": 0}

    def process(self, point: Point, emit: Emit) -> None:
        """Take one bus point; emit the forecasts whose epoch's data is complete."""
        self._clock = max(self._clock, point.time_ns)
        m = point.measurement
        if m in ("rapl", "gpu", "emonpi"):
            self._on_source(point)
        elif m == "nrg_step":
            self._on_step(point)
        elif m == PLAN:
            self._on_plan(point)
        elif m == "nrg_run":
            self._on_run(point)
            self._prune()  # a run starts: nothing before it is needed
        elif m == "nrg_job":
            self._on_job(point)
        else:
            return
        self._settle(emit, force=False)

    def flush(self, emit: Emit) -> None:
        """At shutdown: the finished epochs still waiting, with the data there is."""
        self._settle(emit, force=True)

    def stats(self) -> dict[str, float | int]:
        return dict(self._counts)

    def describe(self) -> str:
        return "run forecast at each epoch end"

    # -- intake --

    def _on_source(self, point: Point) -> None:
        sample = parse_source(point, self._config.wall_channel)
        if sample is None:
            return
        src = self._sources.get(sample.source)
        if src is None:
            src = self._sources[sample.source] = Source(sample.source, sample.kind, sample.domain)
        series = src.counter if sample.counter else src.power
        if series.times and point.time_ns < series.times[-1]:
            return
        if sample.counter and series.values and sample.value < series.values[-1]:
            series.clear()  # the collector restarted: its counter has a new base
        series.add(point.time_ns, sample.value)

    def _run(self, point: Point) -> _Run:
        key = run_key(point.tags)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = _Run(
                epochs=self._config.epochs, steps_per_epoch=self._config.steps_per_epoch
            )
        return run

    def _on_plan(self, point: Point) -> None:
        run = self._run(point)
        epochs = int_field(point.fields, "epochs")
        steps = int_field(point.fields, "steps_per_epoch")
        if epochs is not None and epochs > 0:
            run.epochs = epochs
        if steps is not None and steps > 0:
            run.steps_per_epoch = steps

    def _spawn_of(self, key: RunKey, default: int) -> int:
        """When the run's command was spawned (the agent's own points may carry no run tags:
        then its one command's spawn), never after ``default``."""
        return min(default, self._spawned.get(key, self._spawned.get(("", "", ""), default)))

    def _on_job(self, point: Point) -> None:
        """A tracked command's spawn opens the run's window (interpreter and imports first)."""
        if point.fields.get("event") == "spawn":
            self._spawned[run_key(point.tags)] = point.time_ns
            for key, run in self._runs.items():
                if run.start_ns is not None:
                    run.start_ns = self._spawn_of(key, run.start_ns)

    def _on_run(self, point: Point) -> None:
        event = point.fields.get("event")
        if event == "start":
            key = run_key(point.tags)
            old = self._runs.get(key)
            self._runs[key] = _Run(
                start_ns=min(point.time_ns, self._spawn_of(key, point.time_ns)),
                epochs=old.epochs if old else self._config.epochs,
                steps_per_epoch=old.steps_per_epoch if old else self._config.steps_per_epoch,
            )
        elif event == "end":
            run = self._run(point)
            run.ended = True

    def _on_step(self, point: Point) -> None:
        start = int_field(point.fields, "start_time_ns")
        end = int_field(point.fields, "end_time_ns")
        if start is None or end is None or end < start:
            return
        run = self._run(point)
        epoch = epoch_of(point)
        if run.start_ns is None:
            run.start_ns = min(start, self._spawn_of(run_key(point.tags), start))
        if run.epoch is None:
            run.epoch = epoch
        elif epoch != run.epoch:
            run.queue.append((start, -1))
            run.ended_epochs.append(run.epoch)
            run.epoch = epoch
        run.queue.append((start, end))

    # -- forecasts --

    def _ready(self, t_ns: int, force: bool) -> bool:
        if force or self._clock - t_ns >= int(self._config.wait * _NS):
            return True
        lasts = [s.last() for s in self._sources.values()]
        return all(t is not None and t >= t_ns for t in lasts)

    def _settle(self, emit: Emit, force: bool) -> None:
        moved = False
        for key, run in list(self._runs.items()):
            while run.queue:
                a, b = run.queue[0]
                if not self._ready(a if b < 0 else b, force):
                    break
                run.queue.pop(0)
                moved = True
                if b < 0:
                    self._finish_epoch(key, run, a, emit)
                else:
                    self._step(run, a, b)
            if run.ended and not run.queue:
                del self._runs[key]
        if moved or not self._runs:
            self._prune()

    def _energy(self, src: Source, start: int, end: int) -> float | None:
        first = src.first()
        if first is not None and first > start:
            start = first  # the source started after the run: from its first sample
        return src.energy(start, end) if end > start else None

    def _advance(self, run: _Run, t: int, in_epoch: bool) -> dict[str, float]:
        """Sum every source's energy from the run's cursor to ``t``; the piece per source."""
        if run.cursor_ns is None:
            run.cursor_ns = run.start_ns if run.start_ns is not None else t
        piece: dict[str, float] = {}
        if t <= run.cursor_ns:
            return piece
        for name, src in self._sources.items():
            e = self._energy(src, run.cursor_ns, t)
            if e is None:
                continue
            piece[name] = e
            run.spent_j[name] = run.spent_j.get(name, 0.0) + e
            if in_epoch:
                run.epoch_j[name] = run.epoch_j.get(name, 0.0) + e
        run.cursor_ns = t
        return piece

    def _step(self, run: _Run, start: int, end: int) -> None:
        """A step whose data is in: the time before it, then the step itself."""
        first = run.window_ns is None
        self._advance(run, start, in_epoch=not first)  # before the first step: the run's start
        if first:
            run.window_ns = start
        piece = self._advance(run, end, in_epoch=True)
        run.steps += 1
        if run.epochs and len(run.step_s) < STEPS_KEPT:  # only planned runs need the spread
            run.step_s.append((end - start) / _NS)
            for name, e in piece.items():
                run.step_j.setdefault(name, []).append(e)

    def _finish_epoch(self, key: RunKey, run: _Run, end: int, emit: Emit) -> None:
        self._advance(run, end, in_epoch=True)
        start = run.window_ns if run.window_ns is not None else end
        figures = EpochFigures((end - start) / _NS, run.epoch_j, run.step_s, run.step_j, run.steps)
        run.window_ns, run.epoch_j, run.steps, run.step_s, run.step_j = end, {}, 0, [], {}
        epoch = run.ended_epochs.pop(0)
        if not figures.energy_j:
            self._counts["epochs_without_energy"] += 1
        run.done.append(figures)
        if run.epochs <= len(run.done):
            return
        origin = run.start_ns if run.start_ns is not None else start
        forecast = forecast_run(
            run.done,
            run.epochs,
            elapsed_s=(end - origin) / _NS,
            spent_j=run.spent_j,
            counted=sorted(counted_sources(self._sources)),
            steps_per_epoch=run.steps_per_epoch or None,
            carbon_intensity_g_per_kwh=self._intensity(),
        )
        self._status[key[1]] = forecast
        self._counts["forecasts"] += 1
        log.info("run %s: %s", key[1] or "-", format_forecast(forecast))
        for p in forecast_points(forecast, {**run_tags(key), "epoch": epoch}, end):
            emit(p)

    def _intensity(self) -> float:
        """The run's carbon intensity, as ``processors.carbon`` recorded it, else the default."""
        recorded = self._shared.get(CARBON_STATUS)
        return float(recorded[0]) if recorded else DEFAULT_CARBON_INTENSITY

    def _prune(self) -> None:
        """Keep each source's samples from the oldest cursor a run still sums from."""
        needs = [
            r.cursor_ns if r.cursor_ns is not None else r.start_ns for r in self._runs.values()
        ]
        kept = [t for t in needs if t is not None]
        floor = min(kept) if kept else self._clock - 60 * _NS
        for src in self._sources.values():
            src.counter.prune(floor)
            src.power.prune(floor)


def forecast_points(f: Forecast, tags: dict[str, str], time_ns: int) -> list[Point]:
    """The ``nrg_forecast`` points of a forecast: one per source and one ``source=total`` with
    the durations and CO₂e."""
    points = []
    for source, total in sorted(f.energy_total_j.items()):
        rem = f.energy_remaining_j[source]
        fields: dict[str, FieldValue] = {
            "epochs_done": f.epochs_done,
            "epochs": f.epochs,
            "energy_joules": total.value,
            "energy_low_joules": total.low,
            "energy_high_joules": total.high,
            "energy_spent_joules": f.energy_spent_j.get(source, 0.0),
            "energy_remaining_joules": rem.value,
        }
        if source == TOTAL:
            fields.update(_total_fields(f))
        points.append(Point(MEASUREMENT, {**tags, "source": source}, fields, time_ns))
    return points


def _total_fields(f: Forecast) -> dict[str, Any]:
    return {
        "elapsed_seconds": f.elapsed_s,
        "remaining_seconds": f.remaining_s.value,
        "remaining_low_seconds": f.remaining_s.low,
        "remaining_high_seconds": f.remaining_s.high,
        "total_seconds": f.total_s.value,
        "total_low_seconds": f.total_s.low,
        "total_high_seconds": f.total_s.high,
        "co2e_grams": f.co2e_g.value,
        "co2e_low_grams": f.co2e_g.low,
        "co2e_high_grams": f.co2e_g.high,
        "carbon_intensity_g_per_kwh": f.carbon_intensity_g_per_kwh,
        "level_ratio": f.level,
        "basis": f.basis,
    }
