"""The energy-aware ``torch.profiler.profile``: a subclass, so every argument, method and
``on_trace_ready`` handler of the profiler keeps working, plus energy from nrg's collectors.

This module imports torch; :func:`acquisition.profiler.profile` imports it on first use.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch.profiler

from acquisition.point import Point
from acquisition.profiler.energy import EnergyResult, Span, compute_energy
from acquisition.profiler.series import (
    EnergySeries,
    SeriesBuilder,
    cpu_sources,
    gpu_names_by_uuid,
)
from acquisition.profiler.share import CpuShare
from acquisition.profiler.tables import (
    EnergyRow,
    RowEvent,
    format_table,
    group_rows,
    sort_rows,
)
from acquisition.profiler.trace import add_energy, load_trace, save_trace

__all__ = [
    "DEFAULT_INTERVAL_S",
    "NO_SOURCE",
    "EnergyProfile",
    "PointSampler",
    "StepEnergy",
    "TimedEvent",
]

log = logging.getLogger("nrg.profiler")

DEFAULT_INTERVAL_S = 0.01
"""Sampling interval of the in-process collectors: RAPL counters advance about every 1 ms and
NVML's sample buffer is read whole, so 10 ms resolves operators of a few ms."""
_COLLECTORS = ("rapl", "nvml")
NO_SOURCE = "no energy source to sample: the profile will have no energy (%s)"
NO_SHARE = "cpu_share: /proc/stat or /proc/self/stat unreadable, CPU energy left whole"


class PointSampler(Protocol):
    """What the profiler needs of a sampler (:class:`acquisition.sampler.Sampler` is one).

    ``snapshot()`` returns every point so far, in arrival order (the profiler takes the new ones
    after those it has seen). A sampler that also has ``drain()`` (the points since the last
    drain, also after ``stop()``) is drained instead, so it need not keep its points: the
    profiler keeps its readings compact (16 bytes each, where a point takes about 500)."""

    def start(self) -> None: ...

    def stop(self) -> list[Point]: ...

    def snapshot(self) -> list[Point]: ...


@dataclass(frozen=True)
class TimedEvent:
    """One profiler event with its energy (times Unix-epoch ns, energies J)."""

    name: str
    thread: int
    device: bool
    start_ns: int
    end_ns: int
    input_shapes: str
    total_j: float | None
    self_j: float | None
    error_j: float
    by_source: dict[str, float]


@dataclass(frozen=True)
class StepEnergy:
    """Energy of one profiler step (between two ``step()`` calls), per source and summed."""

    step: int
    start_ns: int
    end_ns: int
    energy_j: float | None
    error_j: float
    by_source: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _default_sampler(config: str | os.PathLike[str] | None, interval_s: float) -> PointSampler:
    from acquisition.config import load_config
    from acquisition.sampler import Sampler

    cfg = load_config(config) if config is not None else None
    sampler: PointSampler = Sampler(cfg, interval_s=interval_s, only=_COLLECTORS)
    return sampler


class EnergyProfile(torch.profiler.profile):
    """``torch.profiler.profile`` that also samples power and gives energy per event.

    Extra keyword arguments (everything else goes to ``torch.profiler.profile``):

    - ``config``: the agent's TOML (its ``rapl`` and ``nvml`` collectors and their settings);
      default: the embedded defaults;
    - ``interval_s``: sampling interval (default 10 ms);
    - ``agent_data``: the data directory of an nrg agent running here (its file sink): its
      readings are used instead of opening the sources in this process
      (:class:`acquisition.sampler.AgentSampler`);
    - ``sampler``: an object with ``start()``, ``stop()`` and ``snapshot()`` returning nrg
      points, used instead of the in-process collectors (e.g. points replayed from a file);
    - ``session``: an :func:`acquisition.torch.instrument` session: ``step()`` marks its step
      too, so profiler steps and nrg steps share their boundaries;
    - ``cpu_share``: charge CPU operators only this process's share of the CPU energy (its share
      of the machine's busy CPU time over the profile, :mod:`acquisition.profiler.share`).
    """

    def __init__(
        self,
        *args: Any,
        config: str | os.PathLike[str] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        sampler: PointSampler | None = None,
        agent_data: str | os.PathLike[str] | None = None,
        session: Any = None,
        cpu_share: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.interval_s = interval_s
        if sampler is None and agent_data is not None:
            from acquisition.sampler import AgentSampler

            sampler = AgentSampler(agent_data)
        self.sampler: PointSampler = sampler or _default_sampler(config, interval_s)
        self.session = session
        self._share = CpuShare() if cpu_share else None
        self._share_at_stop: float | None = None
        self._sampling = False
        self._no_source = False
        self._builder = SeriesBuilder()
        self._seen = 0
        self._step_marks: list[tuple[int, int]] = []
        self.last_energy: EnergyResult | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if not self._sampling:
            self.sampler.start()
            self._sampling = True
            self._wait_for_first_sample()
        self._step_marks = [(self.step_num, time.time_ns())]
        if self._share is not None:
            self._share.start()
            self._share_at_stop = None
        super().start()

    def stop(self) -> None:
        super().stop()
        end = time.time_ns()
        if self._share is not None:
            self._share_at_stop = self._share.ratio()
        self._step_marks.append((self.step_num + 1, end))
        if self._sampling:
            self._wait_for_samples(end)
            rest = self.sampler.stop()
            self._sampling = False
            self._take(rest)

    def step(self) -> None:
        if self.session is not None:
            self.session.step()
        self._step_marks.append((self.step_num + 1, time.time_ns()))
        super().step()

    # -- samples --------------------------------------------------------------------------------

    def cpu_share_ratio(self) -> float | None:
        """With ``cpu_share=True``: this process's share of the machine's busy CPU time since
        ``start()`` (frozen at ``stop()``); else None."""
        if self._share is None:
            return None
        return self._share.ratio() if self._sampling else self._share_at_stop

    def _cpu_scale(self) -> float:
        if self._share is None:
            return 1.0
        ratio = self.cpu_share_ratio()
        if ratio is None:
            log.warning(NO_SHARE)
            return 1.0
        return ratio

    def points(self) -> list[Point]:
        """The points the sampler holds (all of them, unless it is drained); Unix-epoch ns, the
        agent's units."""
        return self.sampler.snapshot()

    def series(self) -> dict[str, EnergySeries]:
        """The power sources sampled so far, as cumulative energy series."""
        self._take()
        return self._builder.series()

    def _take(self, stopped: list[Point] | None = None) -> None:
        """Move the sampler's new readings into the compact builder."""
        drain = getattr(self.sampler, "drain", None)
        if drain is not None:
            self._builder.add(drain())
            return
        points = stopped if stopped is not None else self.sampler.snapshot()
        if len(points) < self._seen:  # a sampler that started afresh
            self._seen = 0
        self._builder.add(points[self._seen :])
        self._seen = len(points)

    def _wait_for_first_sample(self) -> None:
        """Wait (a few sampling intervals at most) for the sources' first reading, so that the
        first events are bracketed; say once why there is none when no source is available."""
        unavailable = getattr(self.sampler, "unavailable", None)
        if getattr(self.sampler, "available", None) == [] and unavailable is not None:
            reasons = "; ".join(f"{name}: {why}" for name, why in unavailable.items())
            log.warning(NO_SOURCE, reasons or "none configured")
            self._no_source = True
            return
        deadline = time.monotonic() + 5 * self.interval_s + 0.05
        while time.monotonic() < deadline:
            self._take()
            if self._builder.readings:
                return
            time.sleep(self.interval_s / 4)

    def _wait_for_samples(self, t_ns: int) -> None:
        """Wait (a few sampling intervals at most) until every source has a sample after
        ``t_ns``, so the events that ended just before are bracketed."""
        if self._no_source:
            return
        latency = float(getattr(self.sampler, "latency_s", 0.0))
        deadline = time.monotonic() + max(5 * self.interval_s + 0.05, latency)
        pause = max(self.interval_s / 2, latency / 30)
        while time.monotonic() < deadline:
            series = self.series()
            if series and all(s.last_ns >= t_ns for s in series.values()):
                return
            time.sleep(pause)

    # -- energy per event ---------------------------------------------------------------------

    def _base_ns(self) -> int:
        if self.profiler is None or self.profiler.kineto_results is None:
            raise RuntimeError("no profile recorded yet")
        return int(self.profiler.kineto_results.trace_start_ns())

    def _events_and_energy(self) -> tuple[list[Any], EnergyResult]:
        base = self._base_ns()
        events = list(self.events() or ())  # type: ignore[no-untyped-call]
        spans = [_span(ev, base) for ev in events]
        if self._sampling:
            self._wait_for_samples(max((s.end_ns for s in spans), default=0))
        end = max((s.end_ns for s in spans), default=base)
        result = compute_energy(
            spans, self.series(), (min(base, end), end), self._gpu_names(), self._cpu_scale()
        )
        self.last_energy = result
        return events, result

    def energy_events(self) -> list[TimedEvent]:
        """Every event of the last recorded cycle with its energy."""
        events, result = self._events_and_energy()
        base = self._base_ns()
        out = []
        for ev, energy in zip(events, result.events, strict=True):
            span = _span(ev, base)
            out.append(
                TimedEvent(
                    ev.key,
                    int(ev.thread),
                    span.track[0] == "gpu",
                    span.start_ns,
                    span.end_ns,
                    str(ev.input_shapes or ""),
                    energy.total_j,
                    energy.self_j,
                    energy.error_j,
                    energy.by_source,
                )
            )
        return out

    def energy_averages(self, group_by_input_shape: bool = False) -> list[EnergyRow]:
        """``key_averages()`` rows with ``self_energy_j``, ``energy_total_j``,
        ``mean_power_w`` and ``energy_error_j``."""
        events, result = self._events_and_energy()
        base = self._base_ns()
        row_events = []
        for ev, energy in zip(events, result.events, strict=True):
            span = _span(ev, base)
            row_events.append(
                RowEvent(
                    ev.key,
                    str(ev.input_shapes or "") if group_by_input_shape else "",
                    span.track[0] == "gpu",
                    (span.end_ns - span.start_ns) / 1000,
                    energy.total_j,
                    energy.self_j,
                    energy.error_j,
                )
            )
        rows = group_rows(row_events, by_input_shape=group_by_input_shape)
        _merge_times(
            rows,
            self.key_averages(group_by_input_shape=group_by_input_shape),
            group_by_input_shape,
        )
        return rows

    def energy_table(self, sort_by: str = "energy_total", row_limit: int = 100) -> str:
        """The energy rows in ``key_averages().table()``'s layout, sorted descending by
        ``sort_by`` (``energy_total``, ``self_energy``, ``mean_power`` or a key_averages
        key such as ``cpu_time_total``)."""
        rows = sort_rows(self.energy_averages(), sort_by)
        result = self.last_energy
        window_s = None if result is None else (result.window[1] - result.window[0]) / 1e9
        series = self.series()
        sources = cpu_sources(series) + sorted(n for n in series if n.startswith("nvml:"))
        return format_table(rows, row_limit=row_limit, window_s=window_s, sources=sources)

    def step_energies(self) -> list[StepEnergy]:
        """Energy of each profiler step (``step()`` to ``step()``) of the whole run, every
        CPU (RAPL package and DRAM; this process's share with ``cpu_share``) and GPU source
        summed."""
        series = self.series()
        cpu = cpu_sources(series)
        names = cpu + sorted(n for n in series if n.startswith("nvml:"))
        scale = self._cpu_scale()
        out = []
        for (step, start), (_, end) in zip(self._step_marks, self._step_marks[1:], strict=False):
            parts: dict[str, float] = {}
            error = 0.0
            for name in names:
                got = series[name].energy(start, end)
                if got is not None:
                    factor = scale if name in cpu else 1.0
                    parts[name] = got[0] * factor
                    error += got[1] * factor
            complete = bool(names) and len(parts) == len(names)
            total = sum(parts.values()) if complete else None
            out.append(StepEnergy(step, start, end, total, error, parts))
        return out

    # -- trace --------------------------------------------------------------------------------

    def export_chrome_trace(self, path: str, *args: Any, **kwargs: Any) -> None:
        """The profiler's trace plus power and energy counters and each event's energy
        (``.gz`` paths are gzip-compressed as the profiler does).

        Further arguments go to this torch's own ``export_chrome_trace`` as given: none is
        added, so the call works on every torch release whatever keywords it has (2.11 has no
        ``use_python_export``)."""
        with tempfile.TemporaryDirectory(prefix="nrg-trace-") as tmp:
            plain = os.path.join(tmp, "trace.json")
            super().export_chrome_trace(plain, *args, **kwargs)
            trace = load_trace(plain)
        if "traceName" in trace:
            trace["traceName"] = path  # the profiler names the file it wrote: the temporary one
        if self._sampling:
            self._wait_for_samples(time.time_ns())
        self.last_energy = add_energy(trace, self.series(), self._gpu_names(), self._cpu_scale())
        window = self.last_energy.window
        trace["nrg"]["steps"] = [
            {
                "step": s.step,
                "start_ns": s.start_ns,
                "end_ns": s.end_ns,
                "energy_j": s.energy_j,
                "error_j": s.error_j,
                "by_source_j": s.by_source,
            }
            for s in self.step_energies()
            if s.end_ns > window[0] and s.start_ns < window[1]
        ]
        save_trace(trace, path)

    def _gpu_names(self) -> dict[int, str]:
        """CUDA ordinal → GPU source name, by UUID (empty without CUDA)."""
        if not torch.cuda.is_available():
            return {}
        uuids = {}
        for ordinal in range(torch.cuda.device_count()):
            uuid = getattr(torch.cuda.get_device_properties(ordinal), "uuid", None)
            if uuid is not None:
                uuids[ordinal] = str(uuid)
        return gpu_names_by_uuid(self._builder.uuids, uuids)


def _span(event: Any, base_ns: int) -> Span:
    start = base_ns + round(event.time_range.start * 1000)
    end = base_ns + round(event.time_range.end * 1000)
    device_type = getattr(event, "device_type", None)
    cpu = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
    if device_type is not None and device_type != cpu:
        return Span(("gpu", int(getattr(event, "device_index", 0))), start, end)
    if getattr(event, "is_async", False):
        return Span(("async", id(event)), start, end)
    return Span(("cpu", int(event.thread)), start, end)


def _merge_times(rows: Sequence[EnergyRow], averages: Any, by_shape: bool) -> None:
    """Copy the profiler's time fields (µs) into the rows of the same key (and shapes)."""
    by_key: dict[tuple[str, str], list[Any]] = {}
    for avg in averages:
        by_key.setdefault((avg.key, _shapes(avg) if by_shape else ""), []).append(avg)
    for row in rows:
        for avg in by_key.get((row.key, row.input_shapes), ()):
            row.cpu_time_total += float(avg.cpu_time_total)
            row.self_cpu_time_total += float(avg.self_cpu_time_total)
            row.device_time_total += float(getattr(avg, "device_time_total", 0.0))
            row.self_device_time_total += float(getattr(avg, "self_device_time_total", 0.0))


def _shapes(avg: Any) -> str:
    shapes = getattr(avg, "input_shapes", None)
    return str(shapes) if shapes else ""
