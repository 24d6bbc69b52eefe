"""Computing the run summary from points (a run's stored points, or a Tracker's samples).

Sources of each figure:

- energy per source: the collectors' own points (``rapl`` and ``gpu`` cumulative
  ``energy_joules``, differenced, a decrease being a collector restart; ``gpu`` ``power_watts``
  or ``emonpi`` ``power<ch>_watts`` integrated by trapezoids), per host, named as the ``source``
  tag of ``nrg_energy`` (``rapl:package-0``, ``nvml:0``, ``emonpi:5``); mean power = energy ÷
  sampled span, peak power = the largest power seen, a ``power_watts`` reading or a counter's
  delta ÷ interval (never below the mean); ``error_j`` = mean power × the part of the run no
  two samples bracket (see :mod:`acquisition.summary.source_energy`);
- rest of system = wall − (RAPL package + dram + GPUs) of the same host;
- steps, epochs, samples: ``nrg_step`` (``epoch`` tag, else field; ``samples`` field);
- energy per step, per epoch, per module: ``nrg_energy`` (``scope`` = ``step`` / ``module``),
  counted once per host as ``total_j`` is (see :class:`EnergySummary`); the error bar of the
  steps' and each epoch's energy from the steps' edge bounds (:mod:`acquisition.summary.bounds`);
- resources: ``memory``, ``cpu``, ``process`` (one tree: ``main``/``descendants``/``combined``),
  ``gpu`` and ``gpu_process`` points (see :mod:`acquisition.summary.resources`).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from acquisition.energy import energy_problems
from acquisition.gc_pause import gc_paused
from acquisition.point import FieldValue, Point
from acquisition.processors.energy import is_number
from acquisition.summary.bounds import StepBound, sum_bound
from acquisition.summary.carbon import run_carbon
from acquisition.summary.columns import RankView, StepColumns, regular_views
from acquisition.summary.forecast import first_forecast
from acquisition.summary.model import (
    J_PER_KWH,
    EnergySummary,
    EpochSummary,
    ModuleShare,
    RunSummary,
    SourceEnergy,
    StepStats,
    SummaryOptions,
)
from acquisition.summary.ranks import GlobalSteps, global_steps, gpu_owners, host_modules
from acquisition.summary.ranks_columns import global_steps_columns
from acquisition.summary.resources import resources
from acquisition.summary.series import Cumulative
from acquisition.summary.source_energy import (
    Series,
    pieces,
    readings_by_source,
    source_energy,
)

__all__ = [
    "NO_ENERGY",
    "REST_OF_SYSTEM",
    "STEPS_WITHOUT_SOURCE",
    "counted_sources",
    "step_energies",
    "summarize",
]

REST_OF_SYSTEM = "rest_of_system"
NO_ENERGY = "No energy was measured: {why}."
STEPS_WITHOUT_SOURCE = (
    "{source}: no energy for {missing} of {steps} steps (not bracketed by its samples)"
)
NO_SOURCE_POINTS = "no RAPL, GPU or wall-meter readings were recorded for this run"
_ERROR_FIELDS = ("energy_error_joules", "error_joules")
_EDGE_FIELDS = ("error_start_joules", "error_end_joules")
_NS = 1e9
_STARTS = ("spawn", "start")
_ENDS = ("exit", "end")
_EVENTS = ("nrg_job", "nrg_run")
_ROOT_MODULE = "(root)"
"""The whole model's module tag in nrg_model (acquisition.torch's ROOT_NAME)."""


def _number(value: FieldValue | None) -> float | None:
    return float(value) if is_number(value) else None  # type: ignore[arg-type]


def _kind(source: str) -> tuple[str, str]:
    """(kind, domain) of a source name: ``rapl:package-0`` → (rapl, package)."""
    kind, _, rest = source.partition(":")
    if kind == "rapl":
        return "rapl", rest.split("-")[0]
    if kind in ("gpu", "nvml"):
        return "gpu", ""
    if kind == "emonpi":
        return "wall", ""
    return kind, ""


def counted_sources(sources: Iterable[str]) -> set[str]:
    """Of one host's sources, those whose energies add up to its total without overlap."""
    names = set(sources) - {REST_OF_SYSTEM}
    walls = {s for s in names if _kind(s)[0] == "wall"}
    if walls:
        return walls
    return {
        s
        for s in names
        if _kind(s)[0] == "gpu" or _kind(s) in (("rapl", "package"), ("rapl", "dram"))
    }


# --- per-source energy -------------------------------------------------------------------------


def _series(
    points: list[Point], options: SummaryOptions, columns: StepColumns | None = None
) -> dict[tuple[str, str], Series]:
    """Each (host, source)'s readings (and the driver samples ``columns`` holds)."""
    samples = columns.samples if columns is not None else []
    return readings_by_source(points, options.wall_channel, samples)


def _curves(series: Mapping[tuple[str, str], Series]) -> dict[tuple[str, str], Cumulative]:
    """Each (host, source)'s cumulative energy, for the energy of any interval."""
    out = {}
    for key, s in series.items():
        if len(s.counter) >= 2:
            out[key] = Cumulative.counter(s.continuous_counter())
        elif len(s.power) >= 2:
            out[key] = Cumulative.power(sorted(s.power))
    return out


def _sources(
    series: Mapping[tuple[str, str], Series], stretches: Sequence[tuple[int, int]]
) -> list[SourceEnergy]:
    out = []
    for (host, name), s in sorted(series.items()):
        energy = source_energy(host, name, s, stretches)
        if energy is not None:
            out.append(energy)
    by_host: dict[str, list[SourceEnergy]] = defaultdict(list)
    for e in out:
        by_host[e.host].append(e)
    for host, items in by_host.items():
        counted = counted_sources(e.source for e in items)
        for e in items:
            e.counted = e.source in counted
        rest = _rest_of_system(host, items)
        if rest is not None:
            out.append(rest)
    return out


def _rest_of_system(host: str, items: list[SourceEnergy]) -> SourceEnergy | None:
    walls = [e for e in items if _kind(e.source)[0] == "wall"]
    inside = [
        e
        for e in items
        if _kind(e.source)[0] == "gpu" or _kind(e.source) in (("rapl", "package"), ("rapl", "dram"))
    ]
    if not walls or not any(_kind(e.source) == ("rapl", "package") for e in inside):
        return None
    energy = sum(e.energy_j for e in walls) - sum(e.energy_j for e in inside)
    errors = [e.error_j for e in walls + inside if e.error_j is not None]
    return SourceEnergy(
        REST_OF_SYSTEM,
        energy,
        None,
        None,
        sum(errors) if errors else None,
        host,
        False,
        "wall meter minus RAPL package and dram and GPUs",
    )


# --- steps, epochs and modules -----------------------------------------------------------------


def _epoch(p: Point) -> int:
    tag = p.tags.get("epoch")
    if tag is not None and tag.lstrip("-").isdigit():
        return int(tag)
    value = p.fields.get("epoch")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _int(p: Point, name: str) -> int | None:
    value = p.fields.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Steps:
    steps: dict[tuple[str, str, int], Point] = field(default_factory=dict)
    energy: dict[tuple[str, str, int], dict[str, float]] = field(default_factory=dict)
    bounds: dict[tuple[str, str, int], dict[str, StepBound]] = field(default_factory=dict)
    modules: dict[tuple[str, ...], dict[str, float]] = field(default_factory=dict)
    """(host, rank, module) → source → J as read; (host, module) once the ranks are joined."""
    counted: dict[tuple[str, str, int], set[str]] | None = None


def _collect_steps(points: list[Point]) -> _Steps:
    out = _Steps()
    for p in points:
        measurement = p.measurement
        if measurement != "nrg_step" and measurement != "nrg_energy":
            continue  # most of a run's points (readings): no tags looked up
        host, rank = p.tags.get("host", ""), p.tags.get("rank", "")
        if measurement == "nrg_step":
            step = _int(p, "step")
            if step is not None:
                out.steps[(host, rank, step)] = p
        else:
            energy = _number(p.fields.get("energy_joules"))
            step = _int(p, "step")
            scope, source = p.tags.get("scope", ""), p.tags.get("source", "")
            if energy is None or step is None or not source:
                continue
            if scope == "step":
                out.energy.setdefault((host, rank, step), {})[source] = energy
                bound = _bound(p)
                if bound is not None:
                    out.bounds.setdefault((host, rank, step), {})[source] = bound
            elif scope == "module":
                per = out.modules.setdefault((host, rank, p.tags.get("module", "")), {})
                per[source] = per.get(source, 0.0) + energy
    return out


def _bound(p: Point) -> StepBound | None:
    """A step point's error bounds: its own, and at its edges where it gives them."""
    error = next((_number(p.fields.get(n)) for n in _ERROR_FIELDS if n in p.fields), None)
    if error is None:
        return None
    start, end = (_number(p.fields.get(name)) for name in _EDGE_FIELDS)
    return (
        StepBound(error, start, end) if start is not None and end is not None else StepBound(error)
    )


def _sum_bound(data: _Steps, keys: Iterable[tuple[str, str, int]]) -> float | None:
    if data.counted is None:  # the sources each step counts, worked out once per set of them
        known: dict[frozenset[str], set[str]] = {}
        data.counted = {}
        for k, v in data.energy.items():
            names = frozenset(v)
            data.counted[k] = known.get(names) or known.setdefault(names, counted_sources(names))
    return sum_bound(keys, data.bounds, data.steps, data.counted)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)  # q < 1: the value after lo, or lo itself when alone
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _step_stats(
    data: _Steps, totals: dict[tuple[str, str, int], float]
) -> tuple[StepStats, dict[tuple[str, str, int], float]]:
    samples_list = [_int(p, "samples") for p in data.steps.values()]
    samples = sum(s for s in samples_list if s is not None) if any(samples_list) else None
    energy = None
    if totals:
        values = list(totals.values())
        energy = {
            "mean": statistics.fmean(values),
            "p50": _quantile(values, 0.5),
            "p95": _quantile(values, 0.95),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        }
    # energy per sample over the steps that have both
    counted = [(k, c) for k, p in data.steps.items() if (c := _int(p, "samples")) and k in totals]
    n = sum(c for _, c in counted)
    per_sample = sum(totals[k] for k, _ in counted) / n if n else None
    error = _sum_bound(data, data.energy)
    count = len(data.steps) or len(totals)
    return StepStats(count, energy, samples, per_sample, error), totals


def _epochs(data: _Steps, totals: Mapping[tuple[str, str, int], float]) -> list[EpochSummary]:
    keys_by_epoch: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for key, p in data.steps.items():
        keys_by_epoch[_epoch(p)].append(key)
    out = []
    for epoch in sorted(keys_by_epoch):
        keys = keys_by_epoch[epoch]
        starts = [_int(data.steps[k], "start_time_ns") for k in keys]
        ends = [_int(data.steps[k], "end_time_ns") for k in keys]
        s = [t for t in starts if t is not None]
        e = [t for t in ends if t is not None]
        duration = (max(e) - min(s)) / _NS if s and e else 0.0
        sources: dict[str, float] = {}
        for k in keys:
            for source, joules in data.energy.get(k, {}).items():
                sources[source] = sources.get(source, 0.0) + joules
        energies = [totals[k] for k in keys if k in totals]
        total = sum(energies) if energies else None
        out.append(EpochSummary(epoch, len(keys), duration, total, sources, _sum_bound(data, keys)))
    return out


def _modules(data: _Steps, inside_j: float, top: int) -> list[ModuleShare]:
    by_host_sources: dict[str, set[str]] = defaultdict(set)
    for (host, _, _), per in data.energy.items():
        by_host_sources[host].update(per)
    totals: dict[str, float] = defaultdict(float)
    for (host, module), per in data.modules.items():
        counted = counted_sources(by_host_sources.get(host, set(per)))
        totals[module] += sum(j for s, j in per.items() if s in counted)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[: max(top, 0)]
    return [ModuleShare(m, j, j / inside_j if inside_j > 0 else 0.0) for m, j in ranked]


# --- the run -----------------------------------------------------------------------------------


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / _NS, UTC).isoformat(timespec="milliseconds")


_NAME_TAGS = ("run", "experiment", "host", "rank")


def _tag_counts(
    points: list[Point], columns: StepColumns | None, tags: tuple[str, ...] = _NAME_TAGS
) -> dict[str, dict[str, int]]:
    """For each of ``tags``, how many points (and step lines) carry each value: one pass."""
    counts: dict[str, dict[str, int]] = {tag: defaultdict(int) for tag in tags}
    mappings = {id(p.tags): p.tags for p in points}  # a stored series' points share one
    for key, n in Counter([id(p.tags) for p in points]).items():
        ptags = mappings[key]
        for tag in tags:
            if value := ptags.get(tag):
                counts[tag][value] += n
    for tag in tags:
        for value, n in (columns.tag_counts(tag) if columns is not None else {}).items():
            counts[tag][value] += n
    return counts


def _most_common(counts: Mapping[str, int]) -> str:
    """The value on most points (the first by name of equals)."""
    return max(sorted(counts), key=lambda k: counts[k]) if counts else ""


def _window(points: list[Point], columns: StepColumns | None = None) -> tuple[int, int, int | None]:
    """(start, end, exit code): the earliest event that starts the run and the latest that ends
    it: a tracked command's ``nrg_job`` spawn and exit (from every agent of the run) and its
    ranks' ``nrg_run`` start and end; else the first and last point."""
    runs = [p for p in points if p.measurement in _EVENTS]
    starts = [p.time_ns for p in runs if p.fields.get("event") in _STARTS]
    ends = [p for p in runs if p.fields.get("event") in _ENDS]
    times = [p.time_ns for p in points]
    times.extend(columns.time_range() or () if columns is not None else ())
    start = min(starts) if starts else min(times)
    end = max(p.time_ns for p in ends) if ends else max(times)
    return start, max(end, start), _exit_code(ends)


def _exit_code(ends: list[Point]) -> int | None:
    """The tracked command's exit status: from its ``nrg_job`` exit; data of older versions has
    it on an ``nrg_run`` exit point only."""
    for measurement in _EVENTS:
        for p in ends:
            code = _int(p, "exit_code") if p.measurement == measurement else None
            if code is not None:
                return code
    return None


def _first_line(reason: str) -> str:
    line = reason.strip().splitlines()[0] if reason.strip() else "unavailable"
    return line.removeprefix("unavailable: ").rstrip(":")


def _no_energy_reason(unavailable: Mapping[str, str] | None) -> str:
    """One sentence: every energy source, the ones a user can fix first, each with its reason
    (first line only: the how-to that some reasons carry, like granting access to RAPL, goes to
    the notes) and the fix that applies here."""
    if unavailable:
        parts = []
        for name, reason, fix in energy_problems(unavailable.items()):
            parts.append(f"{name}: {_first_line(reason)}" + (f" (fix: {fix})" if fix else ""))
        return NO_ENERGY.format(why="; ".join(parts))
    return NO_ENERGY.format(why=NO_SOURCE_POINTS)


def _guidance(unavailable: Mapping[str, str] | None) -> list[str]:
    return [
        f"{name}: {reason.strip()}"
        for name, reason in sorted((unavailable or {}).items())
        if len(reason.strip().splitlines()) > 1
    ]


def _coverage_notes(data: _Steps) -> list[str]:
    """A sentence per source that some steps have no energy from (the source did not
    bracket them: it started late, stopped early, or its samples are too sparse)."""
    steps = set(data.steps) | set(data.energy)
    if not steps:
        return []
    per_source: dict[str, int] = defaultdict(int)
    for per in data.energy.values():
        for source in per:
            per_source[source] += 1
    return [
        STEPS_WITHOUT_SOURCE.format(source=source, missing=len(steps) - n, steps=len(steps))
        for source, n in sorted(per_source.items())
        if n < len(steps)
    ]


def _per_host(sources: list[SourceEnergy], joined: GlobalSteps) -> list[dict[str, object]]:
    """Per host: its energy, the energy inside the run's steps, and its ranks' figures."""
    rows = joined.rank_rows()
    hosts = sorted({s.host for s in sources} | {r["host"] for r in rows})
    return [
        {
            "host": host,
            "energy_j": sum(s.energy_j for s in sources if s.host == host and s.counted),
            "steps_energy_j": joined.host_energy.get(host, 0.0),
            "ranks": [{**r, "steps_energy_j": r["energy_j"]} for r in rows if r["host"] == host],
        }
        for host in hosts
    ]


def _join(
    pts: list[Point],
    curves: Mapping[tuple[str, str], Cumulative],
    views: list[RankView] | None = None,
) -> tuple[GlobalSteps, dict[tuple[str, ...], dict[str, float]]]:
    """The run's global steps (see :mod:`acquisition.summary.ranks`), and the module energies;
    with ``views`` (a regular run's steps as columns), joined on those."""
    data = _collect_steps(pts)
    owners = gpu_owners(pts)
    if views is not None:
        joined = global_steps_columns(views, owners, counted_sources, curves)
        keys = [(v.host, v.rank, 0) for v in views]
        return joined, host_modules(data.modules, keys, owners)
    joined = global_steps(data.steps, data.energy, data.bounds, owners, counted_sources, curves)
    return joined, host_modules(data.modules, data.steps.keys() | data.energy.keys(), owners)


def _views(
    pts: list[Point], columns: StepColumns | None
) -> tuple[list[Point], list[RankView] | None]:
    """The points to read, and the columns' aligned ranks when the join can take them; else
    the columns' lines join the points (the general way)."""
    if columns is None:
        return pts, None
    views = regular_views(pts, columns)
    if views is not None:
        return pts, views
    if columns.skipped:
        raise ValueError("step columns read without some lines cannot take the general way")
    return pts + columns.to_points(), None


def step_energies(points: Iterable[Point], options: SummaryOptions | None = None) -> list[float]:
    """The energy of each step of the run (all ranks' devices), in step order."""
    pts = list(points)
    joined, _ = _join(pts, _curves(_series(pts, options or SummaryOptions())))
    return [joined.totals[k] for k in sorted(joined.totals)]


def summarize(
    points: Iterable[Point],
    options: SummaryOptions | None = None,
    *,
    exit_code: int | None = None,
    unavailable: Mapping[str, str] | None = None,
    window_ns: tuple[int, int] | None = None,
    exclude_ns: Sequence[tuple[int, int]] = (),
    columns: StepColumns | None = None,
) -> RunSummary:
    """The summary of ``points`` (one run, or any time window of them).

    ``unavailable`` (collector → reason) says why a source is missing, for the sentence that
    opens a summary without energy; ``window_ns`` fixes start and end instead of taking them
    from the points; ``exclude_ns``: intervals inside them that count in neither the duration
    nor the energy (a Tracker's own waits); ``columns``: the run's step lines as columns
    (:func:`acquisition.report.runs.load_run_columns`), the same figures as their points."""
    with gc_paused():  # many objects, no cycles: see acquisition.gc_pause
        return _summarize(points, options, exit_code, unavailable, window_ns, exclude_ns, columns)


def _summarize(
    points: Iterable[Point],
    options: SummaryOptions | None,
    exit_code: int | None,
    unavailable: Mapping[str, str] | None,
    window_ns: tuple[int, int] | None,
    exclude_ns: Sequence[tuple[int, int]],
    columns: StepColumns | None,
) -> RunSummary:
    options = options or SummaryOptions()
    options.validate()
    pts, views = _views(list(points), columns)
    columns = columns if views is not None else None
    if pts or columns:
        start, end, code = _window(pts, columns)
    elif window_ns is None:
        raise ValueError("no points to summarise")
    else:
        code = None
    if window_ns is not None:
        start, end = window_ns
    stretches = pieces((start, end), exclude_ns)
    duration = sum(b - a for a, b in stretches) / _NS  # the window less what is excluded
    series = _series(pts, options, columns)
    sources = _sources(series, stretches)
    total = sum(s.energy_j for s in sources if s.counted)
    joined, modules = _join(pts, _curves(series), views)
    steps = _Steps(joined.steps, joined.energy, joined.bounds, modules)
    stats, totals = _step_stats(steps, joined.totals)
    inside = sum(totals.values())
    counted = [s for s in sources if s.counted]
    peaks = [s.peak_w for s in counted if s.peak_w is not None]
    energy = EnergySummary(
        total_j=total,
        total_kwh=total / J_PER_KWH,
        outside_steps_j=(total - inside) if totals and counted else None,
        sources=sources,
        mean_w=total / duration if counted else None,  # a counted source spans some time
        peak_w=sum(peaks) if peaks else None,
    )
    flops = [
        _int(p, "flops")
        for p in pts
        if p.measurement == "nrg_model" and p.tags.get("module") == _ROOT_MODULE
    ]
    g_per_kwh, carbon_source = run_carbon(
        pts,
        options.carbon_intensity_g_per_kwh,
        options.carbon_intensity_source,
        options.carbon_given,
    )
    named = _tag_counts(pts, columns)
    summary = RunSummary(
        run=_most_common(named["run"]),
        experiment=_most_common(named["experiment"]),
        host=_most_common(named["host"]),
        start=_iso(start),
        end=_iso(end),
        duration_s=duration,
        energy=energy,
        co2e_g=total / J_PER_KWH * g_per_kwh,
        carbon_intensity_g_per_kwh=g_per_kwh,
        carbon_intensity_source=carbon_source,
        epochs=_epochs(steps, totals),
        steps=stats,
        modules=_modules(steps, inside, options.top_modules),
        resources=resources(pts, options, duration),
        no_energy_reason=None if counted else _no_energy_reason(unavailable),
        exit_code=exit_code if exit_code is not None else code,
        hosts=sorted(named["host"]),
        ranks=sorted(named["rank"]),
        per_host=_per_host(sources, joined),
        per_rank=joined.rank_rows(),
        stragglers=joined.stragglers(total),
        start_ns=start,
        end_ns=end,
        flops=next((f for f in flops if f is not None), None),
        notes=_coverage_notes(steps) + ([] if counted else _guidance(unavailable)),
    )
    summary.forecast = first_forecast(
        pts,
        duration_s=duration,
        energy_j=total if counted else None,
        g_per_kwh=g_per_kwh,
    )
    return summary
