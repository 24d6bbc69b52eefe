"""Energy attribution: joules per training step and per module, joined from the bus.

Source: the agent's bus, nothing else. Power sources read from it:

- ``rapl`` points (tags ``socket``, ``domain``, optional ``die``): cumulative ``energy_joules`` (J);
- ``gpu`` points (tag ``gpu``): cumulative ``energy_joules`` (J), else ``power_watts`` (W);
- ``gpu_sample`` points (tag ``gpu``): the driver's power samples (``power_watts``, W), which
  shape the GPU's counter between its readings (or stand in for its power without one);
- ``emonpi`` points (tag ``node``), the wall meter: ``power<ch>_watts`` (W) of the configured
  channel, integrated; its ``energy<ch>_joules`` only with ``wall_counter = true`` (the firmware's
  counters step in whole Wh, 3600 J, far coarser than a training step).

Training-job points (sent by ``acquisition.torch`` through the hooks collector): ``nrg_step``
(``start_time_ns``/``end_time_ns``, Unix-epoch ns; on CUDA ``gpu_start_time_ns``/
``gpu_end_time_ns``, the step on the GPU's timeline, used for GPU sources; tag ``epoch``, or an
integer ``epoch`` field from older jobs), ``nrg_module`` (``exclusive_seconds``, optional ``gpu_seconds``, s) and
``nrg_run`` (``event`` start/end).

Emits ``nrg_energy`` points (tags ``experiment``, ``run``, ``rank``, ``epoch``, ``source``,
``scope``, and ``module``/``phase`` for ``scope=module``; fields ``step``, ``energy_joules``,
``duration_seconds``, ``mean_power_watts``; on ``scope=step`` ``error_joules`` and the edge
bounds ``error_start_joules``/``error_end_joules``), stamped with the step's end time.

Model, per step interval [start, end] and per source:

- step energy: an energy counter is interpolated between the samples that bracket each edge
  (linearly, or in proportion to a GPU's power samples where they cover the interval) and
  differenced; a source with power samples only is integrated by trapezoids, with the
  power interpolated at the edges. A source whose samples do not bracket the step is left out
  and counted (``steps_missing:<source>``);
- module energy: the step's mean power times the module's exclusive (self) time, GPU time on GPU
  sources (GPU sources get no module split when no module reports GPU time). When the summed
  times exceed the step's duration, the shares are scaled down to the sum so none goes negative.
  ``module_detail`` says whether module points are written per step, summed per epoch, or not;
- unattributed = step energy − Σ module energy, computed by subtraction so the two add up to the
  step energy exactly (conservation);
- rest of the system = wall − Σ RAPL (package and dram: core and uncore sit inside package, psys
  covers the platform) − Σ GPU, when a wall meter and a RAPL package domain bracket the step.

A step is emitted once its data is complete. Its module points are in when a point of a later
step, or the run's ``end`` event, arrived after the step point for the same experiment/run/rank
(a job sends a step's points together), or ``grace`` passed on the data clock since the step point
arrived. Each source is waited for on its own: until its first sample at or after the step's end,
unless it can never bracket the step (its first sample is after the step's start), it fell
silent (no sample for ``max(grace, 3 ×`` its longest recent sample interval``)``), or ``history``
passed since the step's end. Modules may arrive before or after their step. The data clock is the
newest timestamp seen on the bus, so the processor needs no timer and replays deterministically.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.point import FieldValue, Point
from acquisition.processors.energy import (
    Series,
    Source,
    SourceSample,
    counter_energy,
    interpolate,
    parse_gpu_sample,
    parse_source,
    split_energy,
    trapezoid_energy,
)
from acquisition.processors.module_sums import EPOCH_SUM_MAX_STEPS, EpochSums
from acquisition.processors.steps import (
    DoneSteps,
    RunKey,
    Step,
    StepKey,
    epoch_of,
    float_field,
    int_field,
    run_key,
    run_tags,
)

__all__ = [
    "AUTO_EPOCH_MODULES",
    "AttributionConfig",
    "EnergyAttribution",
    "SourceSample",
    "counter_energy",
    "interpolate",
    "parse_source",
    "split_energy",
    "trapezoid_energy",
]

log = logging.getLogger(__name__)

_NS = 1_000_000_000
_MODULE_SCOPE = "module"
# RAPL domains that add up without overlap: core and uncore are parts of package, psys is the
# whole platform.
_RAPL_DISJOINT = ("package", "dram")
_OVERDUE = 3
"""A source silent for this many of its longest recent sample intervals is no longer waited for."""

AUTO_EPOCH_MODULES = 50
"""With ``module_detail = "auto"``, a run whose steps report more modules than this gets its
module energy summed per epoch instead of per step."""


@dataclass
class AttributionConfig:
    """``[[processors.attribution]]`` keys."""

    grace: float = duration(
        2.0, "wait this long (data clock) after a step point for its late module points"
    )
    history: float = duration(
        600.0, "source history kept; the longest a step waits for a lagging source"
    )
    wall_channel: int = option(1, "emonPi CT channel that measures this machine (power<ch>_watts)")
    wall_counter: bool = option(False, "use emonPi energy<ch>_joules (1 Wh steps), not power")
    max_pending_steps: int = option(10_000, "beyond this, waiting steps are dropped oldest first")
    module_detail: Literal["auto", "step", "epoch", "off"] = option(
        "auto",
        "module energy per step, summed per epoch, or off; auto: per step up to "
        f"{AUTO_EPOCH_MODULES} modules, per epoch above",
    )

    def validate(self) -> None:
        if self.history <= self.grace:
            raise ValueError("history must be longer than grace")
        if self.wall_channel < 1:
            raise ValueError("wall_channel must be >= 1")
        if self.max_pending_steps < 1:
            raise ValueError("max_pending_steps must be >= 1")
        if self.module_detail not in ("auto", "step", "epoch", "off"):
            raise ValueError(
                f"module_detail: {self.module_detail!r} is not auto, step, epoch or off"
            )


class EnergyAttribution:
    """Bus processor: joins training steps and modules with power sources into ``nrg_energy``."""

    name: ClassVar[str] = "attribution"
    config_class: ClassVar[type] = AttributionConfig

    def __init__(self, config: AttributionConfig, context: PluginContext) -> None:
        self._config = config
        self._context = context
        self._grace_ns = int(config.grace * _NS)
        self._history_ns = int(config.history * _NS)
        self._sources: dict[str, Source] = {}
        self._steps: dict[StepKey, Step] = {}
        self._last_step: dict[RunKey, int] = {}
        """Step index of the latest training-job point per run (arrival order)."""
        self._run_end_ns: dict[RunKey, int] = {}
        """Per run, the end of its latest step or its latest start event seen, to tell a restart
        from a late start event."""
        self._done: dict[RunKey, DoneSteps] = {}
        self._sums: dict[RunKey, EpochSums] = {}
        """Module energy summed over the current epoch, per run (``module_detail`` epoch)."""
        self._sums_epoch: dict[RunKey, str] = {}
        self._ended: set[RunKey] = set()
        """Runs whose end event came while some of their steps were still pending."""
        self._many_modules: set[RunKey] = set()
        """Runs whose steps reported more than AUTO_EPOCH_MODULES modules."""
        self._clock = 0
        self._next_due: float = 0
        self._blocking: set[str] = set()
        """Sources some pending step waits for (as of the last flush)."""
        """Data-clock time when a pending step next falls due (grace, a silent source, history)."""
        self._missing: dict[str, int] = {}
        """Per source: steps it could not bracket."""
        self._counts: dict[str, int] = {
            "steps_attributed": 0,
            "steps_without_source": 0,
            "steps_dropped": 0,
            "steps_duplicate": 0,
            "modules_late": 0,
            "samples_out_of_order": 0,
            "counter_resets": 0,
            "points_emitted": 0,
        }

    # -- processor protocol --

    def process(self, point: Point, emit: Emit) -> None:
        """Take one bus point; emit ``nrg_energy`` for every step whose data is complete."""
        self._clock = max(self._clock, point.time_ns)  # the data's clock never goes back
        m = point.measurement
        if m == "nrg_module":
            # A module point completes earlier steps only when it is the first of a new step.
            if not self._on_module(point) and self._clock < self._next_due:
                return
        elif m == "nrg_step":
            self._on_step(point)
        elif m == "nrg_run":
            self._on_run(point, emit)
            return
        elif m in ("rapl", "gpu", "emonpi", "gpu_sample"):
            name = self._on_source(point)
            # Only a sample of a source some step waits for can complete a step (or time).
            if name not in self._blocking and self._clock < self._next_due:
                return
        else:
            if self._steps and self._clock >= self._next_due:
                self._flush(emit)
            return
        if self._steps:
            self._flush(emit)

    def flush(self, emit: Emit) -> None:
        """Emit every step that has a step point, with the data there is (at shutdown)."""
        self._flush(emit, force=True)
        for run in list(self._sums):
            self._emit_sums(run, emit)
        measured = self._counts["steps_attributed"] + self._counts["steps_without_source"]
        for name, n in sorted(self._missing.items()):
            log.warning(
                "attribution: source %s had no data around %d of %d steps", name, n, measured
            )

    def stats(self) -> dict[str, float | int]:
        out: dict[str, float | int] = dict(self._counts)
        out["steps_pending"] = len(self._steps)
        out["sources"] = len(self._sources)
        for name, n in self._missing.items():
            out[f"steps_missing:{name}"] = n
        return out

    def missing_by_source(self) -> dict[str, int]:
        """Per source: how many steps it could not bracket, so they have no energy from it."""
        return dict(self._missing)

    # -- intake --

    def _on_source(self, point: Point) -> str | None:
        """Take a source sample; the source's name when the sample was kept."""
        if point.measurement == "gpu_sample":
            return self._on_gpu_sample(point)
        sample = parse_source(point, self._config.wall_channel, self._config.wall_counter)
        if sample is None:
            return None
        src = self._source(sample.source, sample.kind, sample.domain)
        series = src.counter if sample.counter else src.power
        if series.times and point.time_ns < series.times[-1]:
            self._counts["samples_out_of_order"] += 1
            return None
        if sample.counter and series.values and sample.value < series.values[-1]:
            # The collector restarted (counters count from its open): the old base is gone.
            self._counts["counter_resets"] += 1
            series.clear()
        if series.times and point.time_ns > series.times[-1] and series is src.series():
            src.note_gap(point.time_ns - series.times[-1])
        self._add(series, point.time_ns, sample.value)
        return src.name

    def _source(self, name: str, kind: str, domain: str) -> Source:
        src = self._sources.get(name)
        if src is None:
            src = self._sources[name] = Source(name, kind, domain)
        return src

    def _add(self, series: Series, t: int, value: float) -> None:
        series.add(t, value)
        if len(series.times) > 64 and series.times[-1] - series.times[0] > 2 * self._history_ns:
            series.prune(series.times[-1] - self._history_ns)

    def _on_gpu_sample(self, point: Point) -> str | None:
        """A driver power sample: kept beside the GPU's counter, never waited for."""
        reading = parse_gpu_sample(point)
        if reading is None:
            return None
        series = self._source(reading[0], "gpu", "").samples
        if series.times and point.time_ns < series.times[-1]:
            self._counts["samples_out_of_order"] += 1
            return None
        self._add(series, point.time_ns, reading[1])
        return None

    def _step_for(self, run: RunKey, step: int) -> Step | None:
        done = self._done.get(run)
        if done is not None and step in done:
            return None
        key = (*run, step)
        entry = self._steps.get(key)
        if entry is None:
            entry = self._steps[key] = Step(run, step, seen_ns=self._clock)
            if len(self._steps) > self._config.max_pending_steps:
                oldest = next(iter(self._steps))
                del self._steps[oldest]
                self._counts["steps_dropped"] += 1
        return entry

    def _note_step(self, run: RunKey, step: int) -> bool:
        """A point of ``step`` arrived: the run's steps before it whose step point is in are
        complete (a job sends a step's points together, so a later step's point means the earlier
        one's are all in). True when that may have completed a step."""
        if self._last_step.get(run) == step:
            return False  # the common case: more points of the same step
        self._last_step[run] = step
        self._mark_complete(run, lambda n: n < step)
        return True

    def _mark_complete(self, run: RunKey, which: Callable[[int], bool]) -> None:
        for entry in self._steps.values():
            if entry.run == run and entry.end_ns is not None and which(entry.step):
                entry.complete = True

    def _on_module(self, point: Point) -> bool:
        """Take a module point; True when it is the first point of a new step of its run."""
        f = point.fields
        step = int_field(f, "step")
        excl = float_field(f, "exclusive_seconds")
        if step is None or excl is None:
            return False
        run = run_key(point.tags)
        newer = self._note_step(run, step)
        entry = self._step_for(run, step)
        if entry is None:
            self._counts["modules_late"] += 1
            return newer
        key = (point.tags.get("module", ""), point.tags.get("phase", ""))
        entry.modules[key] = (excl, float_field(f, "gpu_seconds"))
        return newer

    def _on_step(self, point: Point) -> None:
        f = point.fields
        step = int_field(f, "step")
        start = int_field(f, "start_time_ns")
        end = int_field(f, "end_time_ns")
        if step is None or start is None or end is None or end < start:
            return
        run = run_key(point.tags)
        self._note_step(run, step)
        entry = self._step_for(run, step)
        if entry is None:
            self._counts["steps_duplicate"] += 1
            return
        if entry.end_ns is not None:
            self._counts["steps_duplicate"] += 1
        entry.epoch = epoch_of(point)
        entry.start_ns, entry.end_ns = start, end
        gpu_start, gpu_end = int_field(f, "gpu_start_time_ns"), int_field(f, "gpu_end_time_ns")
        if gpu_start is not None and gpu_end is not None and gpu_end >= gpu_start:
            entry.gpu_ns = (gpu_start, gpu_end)
        self._run_end_ns[run] = max(end, self._run_end_ns.get(run, end))
        entry.arrived_ns = self._clock

    def _on_run(self, point: Point, emit: Emit) -> None:
        run = run_key(point.tags)
        event = point.fields.get("event")
        latest = self._run_end_ns.get(run, point.time_ns)
        if event == "start":
            self._run_end_ns[run] = max(latest, point.time_ns)
        if event == "end":
            self._mark_complete(run, lambda n: True)
            self._ended.add(run)
            self._flush(emit)
        elif event == "start" and point.time_ns > latest:
            # A restarted run counts its steps from 0 again: finish the old incarnation first.
            # (A start older than steps already seen is the same run's start arriving late, e.g.
            # from an ingested fallback file, and changes nothing.)
            # Its steps still waiting (for a slow meter) are written now, as at shutdown, and an
            # end it had is settled: a step of the new incarnation with the same number must not
            # be taken for one of them.
            self._flush(emit, finish=run)
            self._emit_sums(run, emit)
            self._last_step.pop(run, None)
            self._done.pop(run, None)
        elif self._steps:
            self._flush(emit)

    # -- readiness --

    def _source_due(self, src: Source, start: int, end: int) -> int | None:
        """Data-clock time until which the step [start, end] waits for ``src``; None: no wait."""
        first, last = src.first(), src.last()
        if first is None or last is None or first > start or last >= end:
            return None  # it brackets the step already, or it never can
        until = end + self._history_ns
        gap = src.max_gap()
        if gap is not None:
            until = min(until, last + max(self._grace_ns, _OVERDUE * gap))
        return until if self._clock < until else None

    def _due(self, entry: Step) -> int | None:
        """Data-clock time at which the step is emitted if nothing else arrives; None: now."""
        due = None if entry.complete else entry.arrived_ns + self._grace_ns
        if due is not None and self._clock >= due:
            due = None
        for src in self._sources.values():
            wait = self._source_due(src, *entry.interval(src.kind))
            if wait is not None:
                self._blocking.add(src.name)
                if due is None or wait > due:
                    due = wait
        return due

    def _flush(self, emit: Emit, force: bool = False, finish: RunKey | None = None) -> None:
        """Write the steps that are due (all with ``force``; all of run ``finish``, whose
        incarnation is over: what never ended is dropped, the rest written as it stands)."""
        next_due: float = math.inf  # nothing pending
        self._blocking.clear()
        for key, entry in list(self._steps.items()):
            over = entry.run == finish
            if entry.end_ns is None:  # no step point yet (it sets start and end together)
                due = entry.seen_ns + self._history_ns
                if over or self._clock >= due:
                    del self._steps[key]  # modules whose step never came
                    self._counts["steps_dropped"] += 1
                else:
                    next_due = min(next_due, due)
                continue
            wait = None if force or over else self._due(entry)
            if wait is None:
                del self._steps[key]
                self._done.setdefault(entry.run, DoneSteps()).add(entry.step)
                self._attribute(entry, emit)
            else:
                next_due = min(next_due, wait)
        self._next_due = next_due
        if self._ended:
            self._finish_ended_runs(emit)

    def _finish_ended_runs(self, emit: Emit) -> None:
        """Write the epoch sums of ended runs that have no step left to attribute."""
        pending = {entry.run for entry in self._steps.values()}
        for run in [r for r in self._ended if r not in pending]:
            self._ended.discard(run)
            self._emit_sums(run, emit)

    # -- attribution and emission --

    def _measure(self, entry: Step) -> list[tuple[Source, float]]:
        """Each source's energy over the step (on the GPU's timeline for a GPU, when the job
        sent it); sources that cannot bracket it are counted."""
        measured = []
        for src in self._sources.values():
            energy = src.energy(*entry.interval(src.kind))
            if energy is None:
                n = self._missing.get(src.name, 0)
                if n == 0:
                    log.warning(
                        "attribution: source %s has no samples around a step; such steps get "
                        "no energy from it (counted in steps_missing:%s)",
                        src.name,
                        src.name,
                    )
                self._missing[src.name] = n + 1
                continue
            measured.append((src, energy))
        return measured

    def _detail(self, entry: Step) -> str:
        mode = self._config.module_detail
        if mode != "auto":
            return mode
        if entry.run not in self._many_modules:
            names = {module for module, _ in entry.modules}
            if len(names) <= AUTO_EPOCH_MODULES:
                return "step"
            self._many_modules.add(entry.run)
        return "epoch"

    def _attribute(self, entry: Step, emit: Emit) -> None:
        assert entry.start_ns is not None and entry.end_ns is not None
        measured = self._measure(entry)
        if not measured:
            self._counts["steps_without_source"] += 1
            return
        self._counts["steps_attributed"] += 1
        detail = self._detail(entry)
        sums = self._epoch_sums(entry, emit) if detail == "epoch" else None
        for src, energy in measured:
            self._emit_source(entry, src, energy, detail, sums, emit)
        self._emit_rest_of_system(entry, measured, emit)
        if sums is not None:
            sums.count_step(entry.step, entry.end_ns)
            if sums.steps >= EPOCH_SUM_MAX_STEPS:
                self._emit_sums(entry.run, emit)

    def _emit_source(
        self,
        entry: Step,
        src: Source,
        energy: float,
        detail: str,
        sums: EpochSums | None,
        emit: Emit,
    ) -> None:
        """The step's energy from one source: the step, its modules and the unattributed rest."""
        start, end = entry.interval(src.kind)
        duration_s = (end - start) / _NS
        error = src.bounds(start, end, energy)
        self._emit(emit, entry, src.name, "step", {}, energy, duration_s, error)
        if detail == "off":
            return
        if src.kind == "gpu":
            weights = {k: g for k, (_, g) in entry.modules.items() if g is not None}
        else:
            weights = {k: excl for k, (excl, _) in entry.modules.items()}
        shares, rest = split_energy(energy, duration_s, weights)
        for (module, phase), joules in shares.items():
            seconds = weights[(module, phase)]
            if sums is not None:
                sums.add((src.name, module, phase), joules, seconds)
            else:
                extra = {"module": module, "phase": phase}
                self._emit(emit, entry, src.name, _MODULE_SCOPE, extra, joules, seconds)
        unattributed_s = max(duration_s - sum(weights.values()), 0.0)
        self._emit(emit, entry, src.name, "unattributed", {}, rest, unattributed_s)

    def _emit_rest_of_system(
        self, entry: Step, measured: list[tuple[Source, float]], emit: Emit
    ) -> None:
        """Wall energy less what RAPL and the GPUs measured inside the machine, per wall meter."""
        if not any(s.kind == "rapl" and s.domain == "package" for s, _ in measured):
            return
        inside = sum(
            energy
            for s, energy in measured
            if s.kind == "gpu" or (s.kind == "rapl" and s.domain in _RAPL_DISJOINT)
        )
        assert entry.start_ns is not None and entry.end_ns is not None
        duration_s = (entry.end_ns - entry.start_ns) / _NS
        for wall, energy in measured:
            if wall.kind == "wall":
                self._emit(
                    emit, entry, wall.name, "rest_of_system", {}, energy - inside, duration_s
                )

    def _emit(
        self,
        emit: Emit,
        entry: Step,
        source: str,
        scope: str,
        extra: Mapping[str, str],
        joules: float,
        seconds: float,
        error: tuple[float, float, float] | None = None,
    ) -> None:
        tags = {**entry.base_tags(), "source": source, "scope": scope, **extra}
        fields: dict[str, FieldValue] = {
            "step": entry.step,
            "energy_joules": joules,
            "duration_seconds": seconds,
        }
        if seconds > 0.0:
            fields["mean_power_watts"] = joules / seconds
        if error is not None:
            fields["error_joules"] = error[0]
            fields["error_start_joules"] = error[1]
            fields["error_end_joules"] = error[2]
        assert entry.end_ns is not None
        emit(Point("nrg_energy", tags, fields, entry.end_ns))
        self._counts["points_emitted"] += 1

    def _epoch_sums(self, entry: Step, emit: Emit) -> EpochSums:
        """The run's running module sums for the step's epoch; a new epoch writes the old one's."""
        if self._sums_epoch.get(entry.run) != entry.epoch:
            self._emit_sums(entry.run, emit)
        sums = self._sums.get(entry.run)
        if sums is None:
            sums = self._sums[entry.run] = EpochSums({**run_tags(entry.run), "epoch": entry.epoch})
            self._sums_epoch[entry.run] = entry.epoch
        return sums

    def _emit_sums(self, run: RunKey, emit: Emit) -> None:
        sums = self._sums.pop(run, None)
        self._sums_epoch.pop(run, None)
        if sums is None:
            return
        for p in sums.points():
            emit(p)
            self._counts["points_emitted"] += 1
