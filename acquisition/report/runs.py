"""Runs in stored points: finding them, and loading one run's points for its summary.

A run is every point with the same ``run`` tag (and ``experiment``), from however many hosts and
ranks (a distributed job is one run). Its window is the tracked command's spawn → exit
(``nrg_job``, from every agent of the run) and its ranks' ``nrg_run`` start → end, the widest of
them, else its first → last point. Power and resource points written without a ``run``
tag (an agent that was already running, tagging nothing) are taken from the run's hosts within
its window.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from acquisition.errors import NrgError
from acquisition.gc_pause import gc_paused
from acquisition.point import Point
from acquisition.store import Query, Store
from acquisition.store_columns import read_columns, skip_pattern
from acquisition.summary.columns import Series, StepColumns, regular_views
from acquisition.summary.ranks import gpu_owners

__all__ = [
    "NO_RUNS",
    "NO_SUCH_RUN",
    "SOURCE_MEASUREMENTS",
    "PointSource",
    "RunInfo",
    "find_runs",
    "load_run",
    "load_run_columns",
    "select_runs",
]

NO_RUNS = "no runs found in {where}"
NO_SUCH_RUN = (
    "no run or experiment named {name!r} in {where} (nrg-collect report --list shows them)"
)
SOURCE_MEASUREMENTS = ("rapl", "gpu", "emonpi")
_EVENTS = ("nrg_job", "nrg_run")
RESOURCE_MEASUREMENTS = ("memory", "cpu", "process", "gpu_process")
_LIST_MEASUREMENTS = (
    *SOURCE_MEASUREMENTS,
    "nrg_job",
    "nrg_run",
    "nrg_step",
    "nrg_collect",
    "memory",
)


class PointSource(Protocol):
    """Where stored points come from: :class:`acquisition.store.Store` (files) or
    :class:`acquisition.report.influx.InfluxQLStore` and
    :class:`acquisition.report.flux.FluxStore` (InfluxDB)."""

    def points(
        self,
        measurements: Iterable[str] | None = None,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        tags: Mapping[str, str | Collection[str]] | None = None,
    ) -> Iterator[Point]: ...


@dataclass
class RunInfo:
    """What ``--list`` shows of one run, and the points it was found from."""

    experiment: str
    run: str
    hosts: set[str] = field(default_factory=set)
    start_ns: int = 2**63
    end_ns: int = 0
    points: list[Point] = field(default_factory=list)
    columns: StepColumns | None = None
    """Its ``nrg_step`` lines as columns, when read from files (not in ``points`` then)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.experiment, self.run)


def _add(runs: dict[tuple[str, str], RunInfo], points: Iterable[Point]) -> None:
    """Each point into its run (the run of each tags mapping found once: the points of a
    stored series share one)."""
    of: dict[int, tuple[Mapping[str, str], RunInfo | None]] = {}
    added: set[int] = set()
    for p in points:
        tags = p.tags
        known = of.get(id(tags))
        if known is None or known[0] is not tags:
            known = of[id(tags)] = (tags, _run_of(runs, tags))
        if (info := known[1]) is not None:
            info.points.append(p)
            added.add(id(info))
    for info in runs.values():
        if id(info) in added:
            _span(info)


def _run_of(runs: dict[tuple[str, str], RunInfo], tags: Mapping[str, str]) -> RunInfo | None:
    run = tags.get("run")
    if not run:
        return None
    key = (tags.get("experiment", ""), run)
    info = runs.get(key)
    if info is None:
        info = runs[key] = RunInfo(*key)
    if host := tags.get("host"):
        info.hosts.add(host)
    return info


def _span(info: RunInfo) -> None:
    times = [p.time_ns for p in info.points]
    info.start_ns = min(info.start_ns, min(times))
    info.end_ns = max(info.end_ns, max(times))


def _add_series(runs: dict[tuple[str, str], RunInfo], s: Series) -> None:
    run = s.tags.get("run")
    if not run or not len(s):
        return
    key = (s.tags.get("experiment", ""), run)
    info = runs.get(key)
    if info is None:
        info = runs[key] = RunInfo(*key)
    if info.columns is None:
        info.columns = StepColumns()
    info.columns.add(s)
    info.columns.lines += len(s)
    if host := s.tags.get("host"):
        info.hosts.add(host)
    info.start_ns = min(info.start_ns, min(s.time))
    info.end_ns = max(info.end_ns, max(s.time))


def find_runs(store: PointSource) -> list[RunInfo]:
    """Every run of the store, oldest first, with its power and event points (enough for the
    energy of ``--list``); from files, its steps as columns."""
    with gc_paused():  # many objects, no cycles: see acquisition.gc_pause
        return _find_runs(store)


def _find_runs(store: PointSource) -> list[RunInfo]:
    runs: dict[tuple[str, str], RunInfo] = {}
    if isinstance(store, Store):
        points, columns = read_columns(store, Query.of(_LIST_MEASUREMENTS))
        for s in columns.series:
            _add_series(runs, s)
    else:
        points = list(store.points(_LIST_MEASUREMENTS))
    _add(runs, points)
    return sorted(runs.values(), key=lambda r: r.start_ns)


def select_runs(runs: Sequence[RunInfo], names: Sequence[str], where: str) -> list[list[RunInfo]]:
    """For each name, the run of that name or the runs of that experiment; no names: the
    newest run."""
    if not runs:
        raise NrgError(NO_RUNS.format(where=where))
    if not names:
        return [[max(runs, key=lambda r: r.end_ns)]]
    out = []
    for name in names:
        chosen = [r for r in runs if r.run == name] or [r for r in runs if r.experiment == name]
        if not chosen:
            raise NrgError(NO_SUCH_RUN.format(name=name, where=where))
        out.append(chosen)
    return out


def _window(points: Iterable[Point], also: tuple[int, int] | None = None) -> tuple[int, int]:
    pts = list(points)
    events = [(p.fields.get("event"), p.time_ns) for p in pts if p.measurement in _EVENTS]
    starts = [t for event, t in events if event in ("spawn", "start")]
    ends = [t for event, t in events if event in ("exit", "end")]
    times = [p.time_ns for p in pts] + list(also or ())
    return (min(starts) if starts else min(times), max(ends) if ends else max(times))


def _run_tags(info: RunInfo) -> dict[str, str]:
    tags = {"run": info.run}
    if info.experiment:
        tags["experiment"] = info.experiment
    return tags


def load_run(store: PointSource, info: RunInfo) -> list[Point]:
    """Every point of one run (see the module docstring)."""
    points = list(store.points(tags=_run_tags(info)))
    return _complete(store, info, points)


def load_run_columns(store: PointSource, info: RunInfo) -> tuple[list[Point], StepColumns | None]:
    """One run as :func:`load_run` reads it; from files, its step lines as columns (for
    ``summarize(points, columns=...)``: the same summary in a fraction of the time and
    memory), the rest as points; from other stores, None for the columns.

    A rank's step energy of its host's other GPUs (known from the run's ``nrg_run`` starts and
    ``gpu`` points) is left unread, as the summary does not count it; when the run turns out
    to need it (a host with one rank, a rank's steps missing), the run is read again whole."""
    if not isinstance(store, Store):
        return load_run(store, info), None
    with gc_paused():  # many objects, no cycles: see acquisition.gc_pause
        return _load_columns(store, info)


def _load_columns(store: Store, info: RunInfo) -> tuple[list[Point], StepColumns | None]:
    query = Query.of(tags=_run_tags(info))
    owners = gpu_owners(info.points)
    skip = skip_pattern(owners)
    points, columns = _read(store, info, query, skip)
    if skip is not None and not _skip_held(points, columns, owners):
        points, columns = _read(store, info, query, None)
    return points, columns


def _read(
    store: Store, info: RunInfo, query: Query, skip: re.Pattern[bytes] | None
) -> tuple[list[Point], StepColumns]:
    # the plain nrg_step lines were read by find_runs: not again
    known = info.columns
    points, columns = read_columns(store, query, skip, steps=known is None, samples=True)
    if known is not None:
        columns.series[:0] = known.series
        columns.lines += known.lines
    if info.experiment == "":
        columns.series = [s for s in columns.series if not s.tags.get("experiment")]
    return _complete(store, info, points, columns), columns


def _skip_held(
    points: list[Point], columns: StepColumns, owners: Mapping[tuple[str, str], tuple[str, str]]
) -> bool:
    """Whether the summary's join reads none of the lines left out: the run is regular, every
    rank they were left out of is in it with its GPU, on a host with other ranks."""
    views = regular_views(points, columns)
    if views is None:
        return False
    per_host: dict[str, int] = {}
    for v in views:
        per_host[v.host] = per_host.get(v.host, 0) + 1
    keys = {(v.host, v.rank) for v in views}
    now = gpu_owners(points)
    return all(
        key in keys and per_host[key[0]] > 1 and now.get(key, ("",))[0] == owner[0]
        for key, owner in owners.items()
    )


def _complete(
    store: PointSource, info: RunInfo, points: list[Point], columns: StepColumns | None = None
) -> list[Point]:
    """The run's points with the power and resource points it lacks, taken untagged from its
    hosts within its window."""
    if info.experiment == "":
        points = [p for p in points if not p.tags.get("experiment")]
    if not points and not columns:
        return points
    have = {p.measurement for p in points}
    wanted = [m for m in (*SOURCE_MEASUREMENTS, *RESOURCE_MEASUREMENTS) if m not in have]
    if wanted:
        start, end = _window(points, columns.time_range() if columns else None)
        hosts = {p.tags["host"] for p in points if p.tags.get("host")}
        hosts |= set(columns.tag_counts("host")) if columns else set()
        points += list(_untagged(store, wanted, start, end, hosts))
    return points


def _untagged(
    store: PointSource, measurements: Sequence[str], start: int, end: int, hosts: set[str]
) -> Iterator[Point]:
    """Points of no run, on the run's hosts, that bracket its window (one sample either side
    kept by widening the window a little: a minute)."""
    margin = 60_000_000_000
    for p in store.points(measurements, start_ns=start - margin, end_ns=end + margin + 1):
        if not p.tags.get("run") and (not hosts or p.tags.get("host") in hosts):
            yield p
