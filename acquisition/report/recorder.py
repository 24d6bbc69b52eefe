"""Keeps, in memory, the points a tracked run's summary needs, as they cross the agent's bus.

Kept: power sources (``rapl``, ``gpu``, ``emonpi``), the agent's ``nrg_job``, the job's
``nrg_run``, ``nrg_step`` and root ``nrg_model`` points, ``nrg_energy`` of scope ``step`` (module
energies are summed per module as they arrive), ``memory``, ``cpu`` (``cpu=total``; the other cpus only as a count) and the tree
sums of ``process`` / ``gpu_process``. When more than ``max_points`` sampled points are held,
every second one is let go (counters stay exact over the run; peaks and means lose detail), so a
run of any length holds a bounded amount.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acquisition.point import Point

__all__ = ["SummaryRecorder", "attach_recorder"]

_SAMPLED = frozenset({"rapl", "gpu", "emonpi", "memory", "cpu", "process", "gpu_process"})
_EVENTS = frozenset({"nrg_job", "nrg_run", "nrg_step", "nrg_model", "nrg_carbon", "nrg_forecast"})


class SummaryRecorder:
    """A sink-side tap on the bus (``offer`` never blocks); ``points()`` for ``summarize``."""

    def __init__(self, max_points: int = 400_000, tags: Mapping[str, str] | None = None) -> None:
        self.max_points = max_points
        self.tags = dict(tags or {})
        """Global tags added as the sinks add them (``host``, ``experiment``, ``run``)."""
        self.sampled: list[Point] = []
        self.events: list[Point] = []
        self.step_energy: list[Point] = []
        self.modules: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        self.cores: set[str] = set()
        self.thinned = 0

    def offer(self, point: Point) -> None:
        m = point.measurement
        if m in _SAMPLED:
            if m == "cpu" and point.tags.get("cpu") != "total":
                self.cores.add(point.tags.get("cpu", ""))
                return
            if m in ("process", "gpu_process") and "pid" in point.tags:
                return  # per-process detail: the summary uses the tree sums
            self.sampled.append(self._tagged(point))
            if len(self.sampled) > self.max_points:
                self._thin()
        elif m in _EVENTS:
            if m == "nrg_model" and point.tags.get("module") != "(root)":
                return
            if m == "nrg_forecast" and point.tags.get("source") != "total":
                return
            self.events.append(self._tagged(point))
        elif m == "nrg_energy":
            if point.tags.get("scope") == "module":
                self._add_module(self._tagged(point))
            else:
                self.step_energy.append(self._tagged(point))

    def _tagged(self, point: Point) -> Point:
        """The point with the global tags, added only to what is kept: most points of a tick
        (one per core, one per process) are only counted or let go."""
        return point.with_tags(self.tags) if self.tags else point

    def _add_module(self, point: Point) -> None:
        key = tuple(sorted(point.tags.items()))
        joules = point.fields.get("energy_joules")
        if not isinstance(joules, int | float) or isinstance(joules, bool):
            return
        entry = self.modules.get(key)
        if entry is None:
            self.modules[key] = [float(joules), point]
        else:
            entry[0] += float(joules)

    def _thin(self) -> None:
        """Let every second sample of each series go (the first and last stay)."""
        by_series: dict[tuple[str, tuple[tuple[str, str], ...]], list[Point]] = {}
        for p in self.sampled:
            by_series.setdefault((p.measurement, tuple(sorted(p.tags.items()))), []).append(p)
        kept: list[Point] = []
        for series in by_series.values():
            last = len(series) - 1
            kept.extend(p for i, p in enumerate(series) if i % 2 == 0 or i == last)
        kept.sort(key=lambda p: p.time_ns)
        self.thinned += len(self.sampled) - len(kept)
        self.sampled = kept

    def points(self) -> list[Point]:
        """What was kept; module energies as one point per module (their run's sum)."""
        modules = [
            Point("nrg_energy", dict(key), {**proto.fields, "energy_joules": joules}, proto.time_ns)
            for key, (joules, proto) in self.modules.items()
        ]
        out = self.sampled + self.events + self.step_energy + modules
        if out and self.cores:  # the core count, for gpu_tracker's hardware percentages
            first = min(p.time_ns for p in out)
            out += [Point("cpu", {"cpu": name}, {}, first) for name in sorted(self.cores)]
        return out


def attach_recorder(agent: Any, max_points: int = 400_000) -> SummaryRecorder:
    """A recorder on ``agent``'s bus (call before or after ``agent.start()``)."""
    recorder = SummaryRecorder(max_points, getattr(agent, "tags", None))
    agent.bus.add_sink(recorder.offer)
    return recorder
