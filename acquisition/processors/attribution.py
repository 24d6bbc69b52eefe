"""Energy attribution: joules per training step and per module, joined from the bus.

Source: the agent's bus, nothing else. Power sources read from it:

- ``rapl`` points (tags ``socket``, ``domain``, optional ``die``): cumulative ``energy_joules`` (J);
- ``gpu`` points (tag ``gpu``): cumulative ``energy_joules`` (J), else ``power_watts`` (W);
- ``emonpi`` points (tag ``node``), the wall meter: ``power<ch>_watts`` (W) of the configured
  channel, integrated; its ``energy<ch>_joules`` only with ``wall_counter = true`` (the firmware's
  counters step in whole Wh, 3600 J, far coarser than a training step).

Training-job points (sent by ``acquisition.torch`` through ``collectors/hooks.py``): ``nrg_step``
(``start_time_ns``/``end_time_ns``, Unix-epoch ns), ``nrg_module`` (``exclusive_seconds``,
optional ``gpu_seconds``, s) and ``nrg_run`` (``event`` start/end).

Emits ``nrg_energy`` points (tags ``experiment``, ``run``, ``rank``, ``source``, ``scope``, and
``module``/``phase`` for ``scope=module``; fields ``step``, ``epoch``, ``energy_joules``,
``duration_seconds``, ``mean_power_watts``), stamped with the step's end time.

Model, per step interval [start, end] and per source:

- step energy: an energy counter is interpolated linearly between the samples that bracket each
  edge and differenced; a source with power samples only is integrated by trapezoids, with the
  power interpolated at the edges. A source whose samples do not bracket the step is left out;
- module energy: the step's mean power times the module's exclusive (self) time, GPU time on GPU
  sources (GPU sources get no module split when no module reports GPU time). When the summed
  times exceed the step's duration, the shares are scaled down to the sum so none goes negative;
- unattributed = step energy − Σ module energy, computed by subtraction so the two add up to the
  step energy exactly (conservation);
- rest of the system = wall − Σ RAPL (package and dram: core and uncore sit inside package, psys
  covers the platform) − Σ GPU, when a wall meter and a RAPL package domain bracket the step.

A step is emitted once its data is complete: every known source has a sample at or after the
step's end (or can never bracket it), and its module points are in (a point of a later step, or
the run's ``end`` event, arrived after the step point for the same experiment/run/rank — a job
sends a step's points together — or ``grace`` passed on the data clock since the step point
arrived). Modules may arrive before or after their step. The data clock is the
newest timestamp seen on the bus, so the processor needs no timer and replays deterministically.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.point import FieldValue, Point

__all__ = [
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
_FAR = 2**63
# RAPL domains that add up without overlap: core and uncore are parts of package, psys is the
# whole platform.
_RAPL_DISJOINT = ("package", "dram")


@dataclass
class AttributionConfig:
    """``[[processors.attribution]]`` keys."""

    grace: float = duration(
        2.0, "wait this long (data clock) after a step point for late modules and sources"
    )
    history: float = duration(600.0, "source history kept; older steps cannot be attributed")
    wall_channel: int = option(1, "emonPi CT channel that measures this machine (power<ch>_watts)")
    wall_counter: bool = option(False, "use emonPi energy<ch>_joules (1 Wh steps), not power")
    max_pending_steps: int = option(10_000, "beyond this, waiting steps are dropped oldest first")

    def validate(self) -> None:
        if self.history <= self.grace:
            raise ValueError("history must be longer than grace")
        if self.wall_channel < 1:
            raise ValueError("wall_channel must be >= 1")
        if self.max_pending_steps < 1:
            raise ValueError("max_pending_steps must be >= 1")


# --- pure functions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceSample:
    """One reading of a power source, as :func:`parse_source` finds it on a point."""

    source: str
    """``rapl:package-0``, ``rapl:dram-0``, ``rapl:package-0-die-1``, ``gpu:0``, ``emonpi:5``."""
    kind: str
    """``rapl``, ``gpu`` or ``wall``."""
    domain: str
    """RAPL domain (``package``, ``dram``...), else ``""``."""
    counter: bool
    """True: ``value`` is a cumulative energy counter in J; False: a power in W."""
    value: float


def parse_source(
    point: Point, wall_channel: int = 1, wall_counter: bool = False
) -> SourceSample | None:
    """The power-source reading ``point`` carries, or None when it carries none."""
    tags, fields = point.tags, point.fields
    m = point.measurement
    if m == "rapl":
        domain = tags.get("domain", "")
        name = f"rapl:{domain}-{tags.get('socket', '0')}"
        if tags.get("die"):
            name += f"-die-{tags['die']}"
        return _reading(name, "rapl", domain, fields, "energy_joules", None)
    if m == "gpu":
        name = f"gpu:{tags.get('gpu', '0')}"
        return _reading(name, "gpu", "", fields, "energy_joules", "power_watts")
    if m == "emonpi":
        name = f"emonpi:{tags.get('node', '0')}"
        counter = f"energy{wall_channel}_joules" if wall_counter else None
        return _reading(name, "wall", "", fields, counter, f"power{wall_channel}_watts")
    return None


def _reading(
    name: str,
    kind: str,
    domain: str,
    fields: Mapping[str, FieldValue],
    energy_field: str | None,
    power_field: str | None,
) -> SourceSample | None:
    energy = fields.get(energy_field) if energy_field else None
    if _is_number(energy):
        return SourceSample(name, kind, domain, True, float(energy))  # type: ignore[arg-type]
    if power_field is not None:
        power = fields.get(power_field)
        if _is_number(power):
            return SourceSample(name, kind, domain, False, float(power))  # type: ignore[arg-type]
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def interpolate(times: list[int], values: list[float], t: int) -> float | None:
    """``values`` linearly interpolated at ``t``; None outside ``[times[0], times[-1]]``.

    ``times`` is strictly increasing (ns).
    """
    if not times or t < times[0] or t > times[-1]:
        return None
    i = bisect.bisect_left(times, t)
    if times[i] == t:
        return values[i]
    t0, t1 = times[i - 1], times[i]
    v0, v1 = values[i - 1], values[i]
    return v0 + (v1 - v0) * ((t - t0) / (t1 - t0))


def counter_energy(times: list[int], joules: list[float], start: int, end: int) -> float | None:
    """Energy (J) a cumulative counter gained over [start, end]; None unless samples bracket it."""
    e0 = interpolate(times, joules, start)
    e1 = interpolate(times, joules, end)
    if e0 is None or e1 is None:
        return None
    return e1 - e0


def trapezoid_energy(times: list[int], watts: list[float], start: int, end: int) -> float | None:
    """Energy (J) of a power series over [start, end] by trapezoids; None unless bracketed."""
    p0 = interpolate(times, watts, start)
    p1 = interpolate(times, watts, end)
    if p0 is None or p1 is None:
        return None
    lo = bisect.bisect_right(times, start)
    hi = bisect.bisect_left(times, end)
    total = 0.0
    prev_t, prev_p = start, p0
    for i in range(lo, hi):
        total += (times[i] - prev_t) * (prev_p + watts[i]) / 2
        prev_t, prev_p = times[i], watts[i]
    total += (end - prev_t) * (prev_p + p1) / 2
    return total / _NS


def split_energy(
    energy: float, duration_s: float, weights: Mapping[tuple[str, str], float]
) -> tuple[dict[tuple[str, str], float], float]:
    """Split a step's ``energy`` over modules by their time ``weights`` (s).

    Each module gets ``energy × weight / max(duration_s, Σ weights)`` (the step's mean power times
    its time); the remainder is what is left, by subtraction, so modules + remainder == energy.
    """
    total = sum(weights.values())
    denom = max(duration_s, total)
    if denom <= 0.0:
        return {}, energy
    # w / denom first: each fraction is <= 1, so no product can overflow or round above energy
    shares = {key: energy * (w / denom) for key, w in weights.items()}
    return shares, energy - sum(shares.values())


# --- state -------------------------------------------------------------------------------------


class _Series:
    """Time-ordered samples of one quantity of one source."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.values: list[float] = []

    def add(self, t: int, v: float) -> None:
        """Append a sample no older than the last; one at the same time replaces it."""
        if self.times and t == self.times[-1]:
            self.values[-1] = v
            return
        self.times.append(t)
        self.values.append(v)

    def prune(self, before: int) -> None:
        """Drop samples older than ``before``, keeping the last one at or before it."""
        i = bisect.bisect_right(self.times, before) - 1
        if i > 0:
            del self.times[:i]
            del self.values[:i]


@dataclass
class _Source:
    name: str
    kind: str
    domain: str
    counter: _Series = field(default_factory=_Series)
    power: _Series = field(default_factory=_Series)

    def first(self) -> int | None:
        series = self.counter if self.counter.times else self.power
        return series.times[0] if series.times else None

    def last(self) -> int | None:
        series = self.counter if self.counter.times else self.power
        return series.times[-1] if series.times else None

    def energy(self, start: int, end: int) -> float | None:
        if self.counter.times:
            return counter_energy(self.counter.times, self.counter.values, start, end)
        return trapezoid_energy(self.power.times, self.power.values, start, end)


RunKey = tuple[str, str, str]
_EmitOne = Callable[[str, Mapping[str, str], float, float], None]
StepKey = tuple[str, str, str, int]


@dataclass
class _Step:
    run: RunKey
    step: int
    epoch: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    arrived_ns: int = 0
    seen_ns: int = 0
    modules: dict[tuple[str, str], tuple[float, float | None]] = field(default_factory=dict)
    complete: bool = False
    """All its module points are in: a later step's point or the run's end arrived after it."""


class _Done:
    """Steps of one run already attributed: a bounded set above a floor (all below it are done)."""

    __slots__ = ("floor", "steps")
    keep: ClassVar[int] = 4096

    def __init__(self) -> None:
        self.floor = -1
        self.steps: set[int] = set()

    def __contains__(self, step: int) -> bool:
        return step <= self.floor or step in self.steps

    def add(self, step: int) -> None:
        self.steps.add(step)
        if len(self.steps) > 2 * self.keep:
            self.floor = max(self.floor, max(self.steps) - self.keep)
            self.steps = {s for s in self.steps if s > self.floor}


def _run_key(tags: Mapping[str, str]) -> RunKey:
    return (tags.get("experiment", ""), tags.get("run", ""), tags.get("rank", ""))


def _int_field(fields: Mapping[str, FieldValue], key: str) -> int | None:
    value = fields.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _float_field(fields: Mapping[str, FieldValue], key: str) -> float | None:
    value = fields.get(key)
    return float(value) if _is_number(value) else None  # type: ignore[arg-type]


class EnergyAttribution:
    """Bus processor: joins training steps and modules with power sources into ``nrg_energy``."""

    name: ClassVar[str] = "attribution"
    config_class: ClassVar[type] = AttributionConfig

    def __init__(self, config: AttributionConfig, context: PluginContext) -> None:
        self._config = config
        self._context = context
        self._grace_ns = int(config.grace * _NS)
        self._history_ns = int(config.history * _NS)
        self._sources: dict[str, _Source] = {}
        self._steps: dict[StepKey, _Step] = {}
        self._last_step: dict[RunKey, int] = {}
        """Step index of the latest training-job point per run (arrival order)."""
        self._run_end_ns: dict[RunKey, int] = {}
        """End of the latest step seen per run, to tell a restart from a late start event."""
        self._done: dict[RunKey, _Done] = {}
        self._clock = 0
        self._next_due = 0
        """Data-clock time when a pending step next falls due (grace or history)."""
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
        if point.time_ns > self._clock:
            self._clock = point.time_ns
        m = point.measurement
        if m == "nrg_module":
            # A module point completes earlier steps only when it is the first of a new step.
            if not self._on_module(point) and self._clock < self._next_due:
                return
        elif m == "nrg_step":
            self._on_step(point)
        elif m == "nrg_run":
            self._on_run(point, emit)
        elif m in ("rapl", "gpu", "emonpi"):
            self._on_source(point)
        else:
            if self._steps and self._clock >= self._next_due:
                self._flush(emit)
            return
        if self._steps:
            self._flush(emit)

    def flush(self, emit: Emit) -> None:
        """Emit every step that has a step point, with the data there is (at shutdown)."""
        self._flush(emit, force=True)

    def stats(self) -> dict[str, float | int]:
        out: dict[str, float | int] = dict(self._counts)
        out["steps_pending"] = len(self._steps)
        out["sources"] = len(self._sources)
        return out

    def describe(self) -> str:
        names = ", ".join(sorted(self._sources)) or "none yet"
        return f"energy per step and module from {names}"

    # -- intake --

    def _on_source(self, point: Point) -> None:
        sample = parse_source(point, self._config.wall_channel, self._config.wall_counter)
        if sample is None:
            return
        src = self._sources.get(sample.source)
        if src is None:
            src = self._sources[sample.source] = _Source(sample.source, sample.kind, sample.domain)
        series = src.counter if sample.counter else src.power
        if series.times and point.time_ns < series.times[-1]:
            self._counts["samples_out_of_order"] += 1
            return
        if sample.counter and series.values and sample.value < series.values[-1]:
            # The collector restarted (counters count from its open): the old base is gone.
            self._counts["counter_resets"] += 1
            series.times.clear()
            series.values.clear()
        series.add(point.time_ns, sample.value)
        if len(series.times) > 64 and series.times[-1] - series.times[0] > 2 * self._history_ns:
            series.prune(series.times[-1] - self._history_ns)

    def _step_for(self, run: RunKey, step: int) -> _Step | None:
        done = self._done.get(run)
        if done is not None and step in done:
            return None
        key = (*run, step)
        entry = self._steps.get(key)
        if entry is None:
            entry = self._steps[key] = _Step(run, step, seen_ns=self._clock)
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
        step = _int_field(f, "step")
        excl = _float_field(f, "exclusive_seconds")
        if step is None or excl is None:
            return False
        run = _run_key(point.tags)
        newer = self._note_step(run, step)
        entry = self._step_for(run, step)
        if entry is None:
            self._counts["modules_late"] += 1
            return newer
        key = (point.tags.get("module", ""), point.tags.get("phase", ""))
        entry.modules[key] = (excl, _float_field(f, "gpu_seconds"))
        return newer

    def _on_step(self, point: Point) -> None:
        f = point.fields
        step = _int_field(f, "step")
        start = _int_field(f, "start_time_ns")
        end = _int_field(f, "end_time_ns")
        if step is None or start is None or end is None or end < start:
            return
        run = _run_key(point.tags)
        self._note_step(run, step)
        entry = self._step_for(run, step)
        if entry is None:
            self._counts["steps_duplicate"] += 1
            return
        if entry.end_ns is not None:
            self._counts["steps_duplicate"] += 1
        entry.epoch = _int_field(f, "epoch") or 0
        entry.start_ns, entry.end_ns = start, end
        if end > self._run_end_ns.get(run, -1):
            self._run_end_ns[run] = end
        entry.arrived_ns = self._clock

    def _on_run(self, point: Point, emit: Emit) -> None:
        run = _run_key(point.tags)
        event = point.fields.get("event")
        if event == "end":
            self._mark_complete(run, lambda n: True)
        elif event == "start" and point.time_ns > self._run_end_ns.get(run, point.time_ns):
            # A restarted run counts its steps from 0 again: finish the old incarnation first.
            # (A start older than steps already seen is the same run's start arriving late, e.g.
            # from an ingested fallback file, and changes nothing.)
            self._mark_complete(run, lambda n: True)
            self._flush(emit)
            self._last_step.pop(run, None)
            self._done.pop(run, None)
            self._run_end_ns.pop(run, None)

    # -- emission --

    def _covered(self, start: int, end: int) -> bool:
        for src in self._sources.values():
            first, last = src.first(), src.last()
            if first is None or last is None or first > start:
                continue  # can never bracket this step
            if last < end:
                return False
        return True

    def _flush(self, emit: Emit, force: bool = False) -> None:
        next_due = _FAR
        for key, entry in list(self._steps.items()):
            if entry.start_ns is None or entry.end_ns is None:
                due = entry.seen_ns + self._history_ns
                if self._clock >= due:
                    del self._steps[key]  # modules whose step never came
                    self._counts["steps_dropped"] += 1
                else:
                    next_due = min(next_due, due)
                continue
            due = entry.arrived_ns + self._grace_ns
            ready = entry.complete and self._covered(entry.start_ns, entry.end_ns)
            if force or ready or self._clock >= due:
                del self._steps[key]
                self._done.setdefault(entry.run, _Done()).add(entry.step)
                self._attribute(entry, emit)
            else:
                next_due = min(next_due, due)
        self._next_due = next_due

    def _attribute(self, entry: _Step, emit: Emit) -> None:
        assert entry.start_ns is not None and entry.end_ns is not None
        start, end = entry.start_ns, entry.end_ns
        duration = (end - start) / _NS
        experiment, run, rank = entry.run
        base_tags = {"experiment": experiment, "run": run, "rank": rank}
        base_tags = {k: v for k, v in base_tags.items() if v}
        per_source: dict[str, float] = {}
        for src in self._sources.values():
            energy = src.energy(start, end)
            if energy is None:
                continue
            per_source[src.name] = energy
            if src.kind == "gpu":
                weights = {k: g for k, (_, g) in entry.modules.items() if g is not None}
            else:
                weights = {k: excl for k, (excl, _) in entry.modules.items()}
            shares, rest = split_energy(energy, duration, weights)
            emit_one = self._emitter(emit, base_tags, src.name, entry, end)
            emit_one("step", {}, energy, duration)
            for (module, phase), joules in shares.items():
                emit_one(
                    _MODULE_SCOPE,
                    {"module": module, "phase": phase},
                    joules,
                    weights[(module, phase)],
                )
            emit_one("unattributed", {}, rest, max(duration - sum(weights.values()), 0.0))
        if not per_source:
            self._counts["steps_without_source"] += 1
            return
        self._counts["steps_attributed"] += 1
        measured = [s for s in self._sources.values() if s.name in per_source]
        if not any(s.kind == "rapl" and s.domain == "package" for s in measured):
            return
        inside = sum(
            per_source[s.name]
            for s in measured
            if s.kind == "gpu" or (s.kind == "rapl" and s.domain in _RAPL_DISJOINT)
        )
        for wall in measured:
            if wall.kind == "wall":
                emit_rest = self._emitter(emit, base_tags, wall.name, entry, end)
                emit_rest("rest_of_system", {}, per_source[wall.name] - inside, duration)

    def _emitter(
        self, emit: Emit, base_tags: Mapping[str, str], source: str, entry: _Step, time_ns: int
    ) -> _EmitOne:
        def emit_one(scope: str, extra: Mapping[str, str], joules: float, seconds: float) -> None:
            tags = {**base_tags, "source": source, "scope": scope, **extra}
            fields: dict[str, FieldValue] = {
                "step": entry.step,
                "epoch": entry.epoch,
                "energy_joules": joules,
                "duration_seconds": seconds,
            }
            if seconds > 0.0:
                fields["mean_power_watts"] = joules / seconds
            emit(Point("nrg_energy", tags, fields, time_ns))
            self._counts["points_emitted"] += 1

        return emit_one
