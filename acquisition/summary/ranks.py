"""Global steps of a distributed run: the steps of all ranks with the same step number are one
step of the run, and the figures per rank and of the stragglers that come with them.

Input: each rank's ``nrg_step`` points and the attribution's ``nrg_energy`` (scope ``step``)
per (host, rank, step) and source; the rank's GPU from the ``gpu_uuid`` field of its ``nrg_run``
start, matched to the ``uuid`` tag of the host's ``gpu`` points.

Model, per global step:

- its span: from the end of the run's previous step (the slowest rank's end) or, when all its
  ranks started later (after a pause), their earliest start, to the latest end of its ranks: the
  run's steps follow each other without overlap, each as long as its slowest rank made it (a
  step of one process keeps its own interval and figures);
- on a host with several ranks, a source used by one rank only (its GPU) counts that rank's
  figure, and a GPU no rank of the run uses is left out (when the ranks named theirs; a host's
  only rank keeps all its GPUs, as one process may use them all); a source the host's ranks
  share (RAPL, the wall meter, GPUs of unknown owner) counts once: with several ranks on the
  host, its energy over the span (from its readings; without them, the largest of the ranks'
  figures), with one, that rank's figure; the step's energy is
  the sum over hosts; samples: the sum over ranks;
- a rank's energy: its own sources plus an equal share of the host's shared sources (so the
  ranks add up to the step);
- a module's energy on a host: each rank's figure of its own GPU, and an equal share (the mean
  over the host's ranks) of each rank's figure of a shared source, GPUs of other ranks left out;
- stragglers: the slowest rank is the one whose step ends last; every other rank waits from its
  own step end to the slowest one's, and uses its mean power of the step for that long (its own
  sources' energy over its step, its share of the shared ones over the span).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from acquisition.point import FieldValue, Point
from acquisition.summary.bounds import StepBound, add_bound

__all__ = [
    "Curve",
    "Curves",
    "GlobalSteps",
    "RankKey",
    "StepKey",
    "global_steps",
    "gpu_owners",
    "host_modules",
    "normalize_uuid",
]

StepKey = tuple[str, str, int]
"""(host, rank, step)."""
RankKey = tuple[str, str]
"""(host, rank)."""
Counted = Callable[[Iterable[str]], set[str]]


class Curve(Protocol):
    def energy(self, start: int, end: int) -> float | None: ...

    def energies(self, spans: Sequence[tuple[int, int]]) -> list[float | None]: ...


Curves = Mapping[tuple[str, str], Curve]
"""(host, source) → its cumulative energy."""

_NS = 1e9


def normalize_uuid(uuid: str) -> str:
    """A CUDA device UUID as NVML and torch both spell it: lower case, no ``GPU-`` prefix."""
    text = uuid.strip().lower()
    return text.removeprefix("gpu-")


def _int(fields: Mapping[str, FieldValue], name: str) -> int | None:
    value = fields.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gpu_owners(points: Iterable[Point]) -> dict[RankKey, tuple[str, str]]:
    """(host, rank) → (GPU source name, UUID) for the ranks whose ``nrg_run`` start names their
    CUDA device and whose host's ``gpu`` points carry that UUID."""
    points = points if isinstance(points, list) else list(points)
    wanted: dict[RankKey, str] = {}
    for p in [p for p in points if p.measurement == "nrg_run"]:
        if p.fields.get("event") == "start":
            named = p.fields.get("gpu_uuid")
            if isinstance(named, str) and named:
                wanted[(p.tags.get("host", ""), p.tags.get("rank", ""))] = named
    # a stored series' points share one tags mapping: each mapping is looked at once, at the
    # last point that has it
    gpus = [p for p in points if p.measurement == "gpu"]
    last = {id(p.tags): (i, p.tags) for i, p in enumerate(gpus)}
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    """(host, UUID as written) → (where last seen, its GPU's source)."""
    for i, tags in last.values():
        if written := tags.get("uuid"):
            key = (tags.get("host", ""), written)
            if i > seen.get(key, (-1, ""))[0]:
                seen[key] = (i, f"nvml:{tags.get('gpu', '0')}")
    sources: dict[tuple[str, str], str] = {}
    for (host, written), (_, source) in sorted(seen.items(), key=lambda kv: kv[1][0]):
        sources[(host, normalize_uuid(written))] = source  # the last one seen of each device
    out = {}
    for (host, rank), uuid in wanted.items():
        name = sources.get((host, normalize_uuid(uuid)))
        if name is not None:
            out[(host, rank)] = (name, uuid)
    return out


@dataclass
class _Rank:
    host: str
    rank: str
    gpu: str = ""
    gpu_source: str = ""
    steps: int = 0
    time_s: float = 0.0
    energy_j: float = 0.0
    slowest_steps: int = 0
    wait_s: float = 0.0
    wait_energy_j: float = 0.0

    def row(self) -> dict[str, Any]:
        """The JSON ``per_rank`` row: every field, in declaration order."""
        return dataclasses.asdict(self)


@dataclass
class GlobalSteps:
    """The run's steps, one per step number, keyed ("", "", step) as the per-rank ones are."""

    steps: dict[StepKey, Point] = field(default_factory=dict)
    energy: dict[StepKey, dict[str, float]] = field(default_factory=dict)
    """Per source name, summed over hosts."""
    totals: dict[StepKey, float] = field(default_factory=dict)
    bounds: dict[StepKey, dict[str, StepBound]] = field(default_factory=dict)
    """Per source, the error bounds of the figure counted (summed over hosts)."""
    ranks: dict[RankKey, _Rank] = field(default_factory=dict)
    host_energy: dict[str, float] = field(default_factory=dict)
    """Energy inside the global steps per host."""
    multi_rank_steps: int = 0
    """Global steps that more than one rank took part in."""

    def rank_rows(self) -> list[dict[str, Any]]:
        return [r.row() for _, r in sorted(self.ranks.items(), key=lambda kv: _rank_order(kv[0]))]

    def stragglers(self, total_j: float) -> dict[str, Any] | None:
        """The slowest rank, how often it was slowest, and what the others' waiting cost."""
        if self.multi_rank_steps == 0 or len(self.ranks) < 2:
            return None
        ordered = [r for _, r in sorted(self.ranks.items(), key=lambda kv: _rank_order(kv[0]))]
        slowest = max(ordered, key=lambda r: (r.slowest_steps, r.wait_s == 0))
        wasted = sum(r.wait_energy_j for r in ordered)
        return {
            "slowest_host": slowest.host,
            "slowest_rank": slowest.rank,
            "slowest_steps": slowest.slowest_steps,
            "steps": self.multi_rank_steps,
            "wait_s": sum(r.wait_s for r in ordered),
            "wasted_j": wasted,
            "wasted_share": wasted / total_j if total_j > 0 else None,
        }


def _rank_order(key: RankKey) -> tuple[str, int, str]:
    host, rank = key
    return (host, int(rank) if rank.isdigit() else -1, rank)


@dataclass
class _RankStep:
    key: StepKey
    point: Point
    start: int | None
    end: int | None


@dataclass
class _Join:
    """What joining the ranks' steps needs besides the steps."""

    energy: Mapping[StepKey, Mapping[str, float]]
    bounds: Mapping[StepKey, Mapping[str, StepBound]]
    owners: Mapping[RankKey, tuple[str, str]]
    counted: Counted
    curves: Curves


def _merge_host(
    members: list[_RankStep], span: tuple[int, int] | None, join: _Join
) -> tuple[dict[str, float], dict[str, tuple[float, float]], float]:
    """One host's share of a global step: (source → J, rank → (own J, share J), total J)."""
    energy, owners, counted = join.energy, join.owners, join.counted
    host = members[0].key[0]
    owned = _owned(host, [m.key[1] for m in members], owners)
    merged: dict[str, float] = {}
    for m in members:
        for source, joules in energy.get(m.key, {}).items():
            owner = owned.get(source)
            if owner is not None:
                if owner == m.key[1]:
                    merged[source] = joules
            elif source.startswith("nvml:") and owned:
                continue  # a GPU of this host that no rank of the run uses
            else:
                merged[source] = max(joules, merged.get(source, joules))
    if span is not None and len(members) > 1:  # one rank's own figures stand as they are
        for source in merged.keys() - owned.keys():
            curve = join.curves.get((host, source))
            over_span = curve.energy(*span) if curve is not None else None
            if over_span is not None:
                merged[source] = over_span
    used = counted(merged)
    total = sum(merged[s] for s in used)
    own = {m.key[1]: 0.0 for m in members}
    for source, rank in owned.items():
        if source in used and source in merged:
            own[rank] = merged[source]
    shared = (total - sum(own.values())) / len(members)
    return merged, {rank: (j, shared) for rank, j in own.items()}, total


def _owned(
    host: str, ranks: list[str], owners: Mapping[RankKey, tuple[str, str]]
) -> dict[str, str]:
    """GPU source → the rank of ``ranks`` (on ``host``) that uses it; none for a host's only
    process, which may use every GPU (DataParallel, pipelines)."""
    if len(ranks) < 2:
        return {}
    return {owners[(host, r)][0]: r for r in ranks if (host, r) in owners}


def host_modules(
    modules: Mapping[tuple[str, ...], Mapping[str, float]],
    steps: Iterable[StepKey],
    owners: Mapping[RankKey, tuple[str, str]],
) -> dict[tuple[str, ...], dict[str, float]]:
    """(host, rank, module) → source → J joined into (host, module) → source → J, the host's
    sources counted once: a rank's own GPU from that rank, a shared source as the mean of the
    host's ranks' figures (each rank's figure is the module's time at the whole host's power),
    another rank's GPU or a GPU no rank uses left out."""
    ranks: dict[str, set[str]] = defaultdict(set)
    for host, rank, _ in steps:
        ranks[host].add(rank)
    for host, rank, _ in modules:
        ranks[host].add(rank)
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for (host, rank, module), per in modules.items():
        owned = _owned(host, sorted(ranks[host]), owners)
        into = out.setdefault((host, module), {})
        for source, joules in per.items():
            owner = owned.get(source)
            if owner is not None:
                share = joules if owner == rank else 0.0
            elif source.startswith("nvml:") and owned:
                continue
            else:
                share = joules / len(ranks[host])
            into[source] = into.get(source, 0.0) + share
    return out


def _span(members: list[_RankStep], previous_end: int | None) -> tuple[int, int] | None:
    starts = [m.start for m in members if m.start is not None]
    ends = [m.end for m in members if m.end is not None]
    if not starts or not ends:
        return None
    start = min(starts) if previous_end is None else max(min(starts), previous_end)
    return min(start, max(ends)), max(ends)


def _synth(step: int, members: list[_RankStep], span: tuple[int, int] | None) -> Point:
    """The global step as one ``nrg_step`` point (epoch, span, samples)."""
    samples = [_int(m.point.fields, "samples") for m in members]
    fields: dict[str, FieldValue] = {"step": step}
    if span is not None:
        fields["start_time_ns"], fields["end_time_ns"] = span
        fields["duration_seconds"] = (span[1] - span[0]) / _NS
    if any(s is not None for s in samples):
        fields["samples"] = sum(s for s in samples if s is not None)
    first = members[0].point
    tags = {k: v for k, v in first.tags.items() if k == "epoch"}
    if "epoch" not in tags and "epoch" in first.fields:
        fields["epoch"] = first.fields["epoch"]
    return Point("nrg_step", tags, fields, span[1] if span else first.time_ns)


def _stragglers(
    members: list[_RankStep],
    span: tuple[int, int] | None,
    rank_energy: Mapping[RankKey, tuple[float, float]],
    ranks: dict[RankKey, _Rank],
) -> None:
    timed = [m for m in members if m.end is not None]
    if len(timed) < 2:
        return
    slowest = max(timed, key=lambda m: m.end or 0)
    assert slowest.end is not None
    ranks[slowest.key[:2]].slowest_steps += 1
    for m in timed:
        assert m.end is not None
        wait = (slowest.end - m.end) / _NS
        if m is slowest or wait <= 0:
            continue
        r = ranks[m.key[:2]]
        r.wait_s += wait
        if m.key[:2] in rank_energy:
            r.wait_energy_j += _mean_power(m, span, rank_energy[m.key[:2]]) * wait


def _add_bounds(
    into: dict[str, StepBound], members: list[_RankStep], merged: Mapping[str, float], join: _Join
) -> None:
    """Add one host's bounds of the sources it counts in a global step: a rank's own source's
    from that rank, a shared source's the largest of its ranks' (the figure is counted once)."""
    owned = _owned(members[0].key[0], [m.key[1] for m in members], join.owners)
    for source in merged:
        found = [
            join.bounds[m.key][source]
            for m in members
            if source in join.bounds.get(m.key, {}) and owned.get(source, m.key[1]) == m.key[1]
        ]
        if not found:
            continue
        b = max(found, key=lambda x: x.error)
        add_bound(into, source, b)


def _mean_power(m: _RankStep, span: tuple[int, int] | None, joules: tuple[float, float]) -> float:
    """A rank's power in a step: its own sources over its step, its share over the span."""
    own, share = joules
    duration = (m.end - m.start) / _NS if m.start is not None and m.end is not None else 0.0
    span_s = (span[1] - span[0]) / _NS if span is not None else duration
    return (own / duration if duration > 0 else 0.0) + (share / span_s if span_s > 0 else 0.0)


def global_steps(
    steps: Mapping[StepKey, Point],
    energy: Mapping[StepKey, Mapping[str, float]],
    bounds: Mapping[StepKey, Mapping[str, StepBound]],
    owners: Mapping[RankKey, tuple[str, str]],
    counted: Counted,
    curves: Curves | None = None,
) -> GlobalSteps:
    """Each rank's steps (and step energies, per source) joined into the run's steps;
    ``curves`` give the shared sources' energy over each step's span."""
    join = _Join(energy, bounds, owners, counted, curves or {})
    by_step: dict[int, list[_RankStep]] = defaultdict(list)
    for key in steps.keys() | energy.keys():
        p = steps.get(key) or Point("nrg_step", {}, {"step": key[2]}, 0)
        start, end = _int(p.fields, "start_time_ns"), _int(p.fields, "end_time_ns")
        by_step[key[2]].append(_RankStep(key, p, start, end))
    out = GlobalSteps()
    for host, rank in {k[:2] for k in steps.keys() | energy.keys()}:
        gpu_source, uuid = owners.get((host, rank), ("", ""))
        out.ranks[(host, rank)] = _Rank(host, rank, uuid, gpu_source)
    previous_end: int | None = None
    for step in sorted(by_step):
        members = sorted(by_step[step], key=lambda m: m.key)
        gkey: StepKey = ("", "", step)
        if len(members) == 1:  # one process: its step as it is (its GPU-timeline edges too)
            only = members[0]
            span = (only.start, only.end) if only.start is not None and only.end else None
            out.steps[gkey] = only.point if only.key in steps else _synth(step, members, span)
        else:
            span = _span(members, previous_end)
            out.steps[gkey] = _synth(step, [m for m in members if m.key in steps] or members, span)
        _join_energy(out, gkey, members, span, join)
        if span is not None:
            previous_end = span[1]
        if len(members) > 1:
            out.multi_rank_steps += 1
    return out


def _join_energy(
    out: GlobalSteps,
    gkey: StepKey,
    members: list[_RankStep],
    span: tuple[int, int] | None,
    join: _Join,
) -> None:
    energy, counted = join.energy, join.counted
    per_host: dict[str, list[_RankStep]] = defaultdict(list)
    for m in members:
        r = out.ranks[m.key[:2]]
        r.steps += 1
        if m.start is not None and m.end is not None:
            r.time_s += (m.end - m.start) / _NS
        per_host[m.key[0]].append(m)
    sources: dict[str, float] = {}
    rank_energy: dict[RankKey, tuple[float, float]] = {}
    total, measured = 0.0, False
    for host, group in per_host.items():
        with_energy = [m for m in group if m.key in energy]
        if not with_energy:
            continue
        merged, ranks, host_total = _merge_host(with_energy, span, join)
        measured = measured or bool(counted(merged))
        for source, joules in merged.items():
            sources[source] = sources.get(source, 0.0) + joules
        for rank, parts in ranks.items():
            rank_energy[(host, rank)] = parts
            out.ranks[(host, rank)].energy_j += parts[0] + parts[1]
        total += host_total
        out.host_energy[host] = out.host_energy.get(host, 0.0) + host_total
        _add_bounds(out.bounds.setdefault(gkey, {}), with_energy, merged, join)
    if sources:
        out.energy[gkey] = sources
    if measured:
        out.totals[gkey] = total
    if not out.bounds.get(gkey, True):
        del out.bounds[gkey]
    _stragglers(members, span, rank_energy, out.ranks)
