"""Energy per profiler event: total and self joules, the way the profiler gives total and self time.

Input: spans (one per profiler event: a track, a start and an end in Unix-epoch ns) and the power
sources as cumulative series (:mod:`acquisition.profiler.series`). Model:

- **CPU events** (a track per thread) get the energy of the CPU sources (RAPL package and DRAM of
  every socket) over their interval: the machine's CPU energy while they ran. Events nest by
  containment on their thread; an event's *self* energy is its total minus its children's totals,
  so self energies of a thread plus its time outside any event add up to the window's energy.
  Several threads running at once each see the same joules: energies are per thread, not split
  between threads.
- **Device events** (a track per GPU: kernels, copies) get the energy of that GPU's source. Where
  kernels overlap, each elementary interval's energy is split equally among the kernels running
  in it; the GPU's energy outside any kernel is its idle energy.
- Error bars are estimates from the sampling (see :mod:`acquisition.profiler.series`); a self
  energy's error adds its children's errors. Events that the samples do not bracket get no energy and are
  counted in :attr:`EnergyResult.unmeasured`.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from acquisition.profiler.series import EnergySeries, cpu_sources, gpu_source

__all__ = [
    "NO_CPU_SOURCE",
    "NO_SAMPLE",
    "EnergyResult",
    "EventEnergy",
    "Span",
    "TrackEnergy",
    "compute_energy",
]

NO_SAMPLE = "%d of %d profiler events got no energy: no source sampled their interval (sources: %s)"
NO_CPU_SOURCE = (
    "%d of %d profiler events ran on the CPU, and no CPU energy source was sampled (RAPL "
    "package or DRAM; sampled: %s, which cover the whole platform or a GPU and are not charged "
    "to operators): they got no energy"
)

log = logging.getLogger("nrg.profiler")


@dataclass(frozen=True, slots=True)
class Span:
    """One profiler event: ``track`` is ``("cpu", thread)``, ``("gpu", device)``, or for an
    asynchronous event (which nests with nothing) ``("async", anything unique)``."""

    track: tuple[str, Hashable]
    start_ns: int
    end_ns: int


@dataclass(slots=True)
class EventEnergy:
    """Joules of one span, per source and summed over them (None: not measured)."""

    total_j: float | None = None
    self_j: float | None = None
    error_j: float = 0.0
    self_error_j: float = 0.0
    by_source: dict[str, float] = field(default_factory=dict)
    parent: int | None = None


@dataclass(slots=True)
class TrackEnergy:
    """A thread's or a GPU's account of the window: ``events_j`` (Σ self energies) plus
    ``outside_j`` (no event running: idle for a GPU) is ``window_j``."""

    track: tuple[str, Hashable]
    window_j: float
    events_j: float
    outside_j: float
    sources: list[str]


@dataclass
class EnergyResult:
    events: list[EventEnergy]
    tracks: list[TrackEnergy]
    window: tuple[int, int]
    sources: list[str]
    unmeasured: int = 0


def _energy(
    series: Mapping[str, EnergySeries],
    sources: Sequence[str],
    start: int,
    end: int,
    scale: float = 1.0,
) -> tuple[float, float, dict[str, float]] | None:
    total, error, parts = 0.0, 0.0, {}
    for name in sources:
        got = series[name].energy(start, end)
        if got is None:
            return None
        parts[name] = got[0] * scale
        total += got[0] * scale
        error += got[1] * scale
    return total, error, parts


def _nest(indices: list[int], spans: Sequence[Span]) -> dict[int, int | None]:
    """Parent of each span of one track, by containment (outermost first at equal starts)."""
    keyed = sorted((spans[i].start_ns, -spans[i].end_ns, i) for i in indices)
    parents: dict[int, int | None] = {}
    stack: list[tuple[int, int]] = []  # (end, index)
    for _, neg_end, i in keyed:
        end = -neg_end
        while stack and stack[-1][0] < end:
            stack.pop()
        parents[i] = stack[-1][1] if stack else None
        stack.append((end, i))
    return parents


def _cpu_track(
    indices: list[int],
    spans: Sequence[Span],
    series: Mapping[str, EnergySeries],
    sources: list[str],
    out: list[EventEnergy],
    scale: float,
) -> int:
    """Totals and self energies of one thread's spans; returns how many were not measured."""
    parents = _nest(indices, spans)
    missing = 0
    for i in indices:
        got = _energy(series, sources, spans[i].start_ns, spans[i].end_ns, scale)
        entry = out[i]
        entry.parent = parents[i]
        if got is None:
            missing += 1
            continue
        entry.total_j, entry.error_j, entry.by_source = got
        entry.self_j, entry.self_error_j = got[0], got[1]
    for i in indices:
        parent = parents[i]
        if parent is None:
            continue
        child, up = out[i], out[parent]
        if up.self_j is None:
            continue
        if child.total_j is None:
            up.self_j = None
        else:
            up.self_j -= child.total_j
            up.self_error_j += child.error_j
    return missing


def _gpu_track(
    indices: list[int],
    spans: Sequence[Span],
    source: EnergySeries,
    out: list[EventEnergy],
) -> int:
    """Kernels of one GPU: each elementary interval's energy split equally among the kernels
    running in it. Returns how many were not measured."""
    edges = sorted({t for i in indices for t in (spans[i].start_ns, spans[i].end_ns)})
    starts: dict[int, list[int]] = defaultdict(list)
    ends: dict[int, list[int]] = defaultdict(list)
    for i in indices:
        starts[spans[i].start_ns].append(i)
        ends[spans[i].end_ns].append(i)
        out[i].total_j = 0.0
    active: set[int] = set()
    unmeasured: set[int] = set()
    for a, b in itertools.pairwise(edges):
        active.difference_update(ends.get(a, ()))
        active.update(i for i in starts.get(a, ()) if spans[i].end_ns > a)
        if not active:
            continue
        got = source.energy(a, b)
        if got is None:
            unmeasured.update(active)
            continue
        share = got[0] / len(active)
        for i in active:
            out[i].total_j += share  # type: ignore[operator]
    for i in indices:
        entry = out[i]
        if i in unmeasured:
            entry.total_j = None
            continue
        edge_a = source.at(spans[i].start_ns)
        edge_b = source.at(spans[i].end_ns)
        entry.error_j = (edge_a[1] if edge_a else 0.0) + (edge_b[1] if edge_b else 0.0)
        entry.self_j, entry.self_error_j = entry.total_j, entry.error_j
        entry.by_source = {source.source: entry.total_j or 0.0}
    return len(unmeasured)


def _window_energy(
    series: Mapping[str, EnergySeries],
    sources: Sequence[str],
    window: tuple[int, int],
    scale: float,
) -> float | None:
    got = _energy(series, sources, *window, scale)
    return None if got is None else got[0]


def _track_account(
    track: tuple[str, Hashable],
    indices: list[int],
    out: list[EventEnergy],
    series: Mapping[str, EnergySeries],
    sources: list[str],
    window: tuple[int, int],
    scale: float,
) -> TrackEnergy | None:
    # A window that the samples do not quite cover is clipped to them (the events outside are
    # already counted as unmeasured).
    window = (
        max(window[0], max(series[n].first_ns for n in sources)),
        min(window[1], min(series[n].last_ns for n in sources)),
    )
    window_j = _window_energy(series, sources, window, scale) if window[0] <= window[1] else None
    if window_j is None:
        return None
    events_j = sum(out[i].self_j or 0.0 for i in indices)
    return TrackEnergy(track, window_j, events_j, window_j - events_j, sources)


def compute_energy(
    spans: Sequence[Span],
    series: Mapping[str, EnergySeries],
    window: tuple[int, int] | None = None,
    gpu_names: Mapping[int, str] | None = None,
    cpu_scale: float = 1.0,
) -> EnergyResult:
    """Energy of every span (see the module docstring). ``window`` defaults to the spans' extent;
    ``gpu_names`` maps a span's device (CUDA ordinal) to its source name (default ``nvml:<N>``, the
    NVML index N); ``cpu_scale`` multiplies the CPU sources' energy (the process's CPU share)."""
    out = [EventEnergy() for _ in spans]
    if window is None:
        window = (
            min((s.start_ns for s in spans), default=0),
            max((s.end_ns for s in spans), default=0),
        )
    by_track: dict[tuple[str, Hashable], list[int]] = defaultdict(list)
    for i, span in enumerate(spans):
        by_track[span.track].append(i)
    cpu = cpu_sources(series)
    tracks: list[TrackEnergy] = []
    unmeasured = no_cpu = 0
    for track, indices in by_track.items():
        if track[0] == "gpu":
            device = int(track[1])  # type: ignore[call-overload]
            name = (gpu_names or {}).get(device) or gpu_source(device)
            if name not in series:
                unmeasured += len(indices)
                continue
            unmeasured += _gpu_track(indices, spans, series[name], out)
            sources, scale = [name], 1.0
        else:
            if not cpu:
                no_cpu += len(indices)
                continue
            unmeasured += _cpu_track(indices, spans, series, cpu, out, cpu_scale)
            sources, scale = cpu, cpu_scale
        account = _track_account(track, indices, out, series, sources, window, scale)
        if account is not None and track[0] in ("cpu", "gpu"):
            tracks.append(account)
    names = ", ".join(sorted(series)) or "none"
    if no_cpu:
        log.warning(NO_CPU_SOURCE, no_cpu, len(spans), names)
    if unmeasured:
        log.warning(NO_SAMPLE, unmeasured, len(spans), names)
    return EnergyResult(out, tracks, window, sorted(series), unmeasured + no_cpu)
