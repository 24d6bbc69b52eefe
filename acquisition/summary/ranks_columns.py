"""The join of :mod:`acquisition.summary.ranks` on a regular run's columns
(:meth:`acquisition.summary.columns.StepColumns.ranks`): the same model and the same figures,
computed with the same operations in the same order, without a point or a dict per rank-step.

What makes it cheap: every rank has every step and the same sources on each, so what the general
join works out per step and host (which sources a host counts, whose figure each one is, which
of them add up to its total, in which order) is worked out once per host (:class:`_HostPlan`);
per step only the figures are read from the rank's arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from acquisition.point import FieldValue, Point
from acquisition.summary.bounds import StepBound
from acquisition.summary.columns import NONE_INT, RankView
from acquisition.summary.ranks import (
    Counted,
    Curves,
    GlobalSteps,
    RankKey,
    StepKey,
    _owned,
    _Rank,
)

__all__ = ["global_steps_columns"]

_NS = 1e9


@dataclass
class _HostPlan:
    """What one host counts in every global step, worked out once."""

    host: str
    views: list[RankView]
    ranks: list[_Rank]
    order: list[str] = field(default_factory=list)
    """The sources the host counts, in the order the general join meets them."""
    own: dict[str, int] = field(default_factory=dict)
    """A rank's own source → its index in ``views``."""
    shared: dict[str, list[int]] = field(default_factory=dict)
    """A shared source → the indices of the views that have it."""
    used: list[str] = field(default_factory=list)
    """Of ``order``, those that add up to the total, in the order they are added."""
    own_used: list[tuple[int, str]] = field(default_factory=list)
    bounded: dict[str, list[int]] = field(default_factory=dict)
    """A source with bounds → the views whose bounds count (the owner, or the sharers)."""


def _plan(
    host: str,
    views: list[RankView],
    ranks: list[_Rank],
    owners: Mapping[RankKey, tuple[str, str]],
    counted: Counted,
) -> _HostPlan:
    plan = _HostPlan(host, views, ranks)
    owned = _owned(host, [v.rank for v in views], owners)
    for i, v in enumerate(views):
        for source in v.energy:
            owner = owned.get(source)
            if owner is not None:
                if owner == v.rank and source not in plan.own:
                    plan.own[source] = i
                    if source not in plan.shared:
                        plan.order.append(source)
            elif source.startswith("nvml:") and owned:
                continue
            else:
                if source not in plan.shared and source not in plan.own:
                    plan.order.append(source)
                plan.shared.setdefault(source, []).append(i)
    used = counted(dict.fromkeys(plan.order))
    plan.used = [s for s in used]
    plan.own_used = [
        (views.index(next(v for v in views if v.rank == rank)), source)
        for source, rank in owned.items()
        if source in used and source in plan.order
    ]
    for source in plan.order:
        having = [plan.own[source]] if source in plan.own else plan.shared[source]
        with_bounds = [i for i in having if source in views[i].bounds]
        if with_bounds:
            plan.bounded[source] = with_bounds
    return plan


def _merged(plan: _HostPlan, i: int, span: tuple[int, int], curves: Curves) -> dict[str, float]:
    """The host's figure of each source it counts in step ``i``."""
    views = plan.views
    merged: dict[str, float] = {}
    several = len(views) > 1
    for source in plan.order:
        owner = plan.own.get(source)
        if owner is not None:
            merged[source] = views[owner].energy[source][i]
            continue
        having = plan.shared[source]
        value = views[having[0]].energy[source][i]
        for k in having[1:]:
            value = max(views[k].energy[source][i], value)
        if several:
            curve = curves.get((plan.host, source))
            over_span = curve.energy(*span) if curve is not None else None
            if over_span is not None:
                value = over_span
        merged[source] = value
    return merged


def _bound(plan: _HostPlan, source: str, i: int) -> StepBound:
    """The largest of the bounds that count for ``source`` in step ``i`` (the first of equals)."""
    found = [plan.views[k].bounds[source] for k in plan.bounded[source]]
    best = max(range(len(found)), key=lambda j: found[j][0][i])
    error, start, end = found[best]
    return StepBound(error[i], start[i], end[i])


def _add_bounds(
    into: dict[str, StepBound], plan: _HostPlan, merged: Mapping[str, float], i: int
) -> None:
    for source in merged:
        if source not in plan.bounded:
            continue
        b = _bound(plan, source, i)
        have = into.get(source)
        if have is None:
            into[source] = b
            continue
        start = None if have.start is None or b.start is None else have.start + b.start
        end = None if have.end is None or b.end is None else have.end + b.end
        into[source] = StepBound(have.error + b.error, start, end)


@dataclass
class _StepTotals:
    sources: dict[str, float] = field(default_factory=dict)
    parts: list[tuple[float, float]] = field(default_factory=list)
    """Per view of the run, (own J, share J)."""
    total: float = 0.0
    measured: bool = False
    bounds: dict[str, StepBound] = field(default_factory=dict)


def _energy(
    out: GlobalSteps, plans: list[_HostPlan], i: int, span: tuple[int, int], curves: Curves
) -> _StepTotals:
    t = _StepTotals()
    for plan in plans:
        merged = _merged(plan, i, span, curves)
        host_total = sum(merged[s] for s in plan.used)
        own = [0.0] * len(plan.views)
        for k, source in plan.own_used:
            own[k] = merged[source]
        shared = (host_total - sum(own)) / len(plan.views)
        t.measured = t.measured or bool(plan.used)
        for source, joules in merged.items():
            t.sources[source] = t.sources.get(source, 0.0) + joules
        for k, r in enumerate(plan.ranks):
            t.parts.append((own[k], shared))
            r.energy_j += own[k] + shared
        t.total += host_total
        out.host_energy[plan.host] = out.host_energy.get(plan.host, 0.0) + host_total
        _add_bounds(t.bounds, plan, merged, i)
    return t


def _synth(step: int, views: list[RankView], i: int, span: tuple[int, int]) -> Point:
    fields: dict[str, FieldValue] = {"step": step}
    fields["start_time_ns"], fields["end_time_ns"] = span
    fields["duration_seconds"] = (span[1] - span[0]) / _NS
    samples = [v.samples[i] for v in views if v.samples[i] != NONE_INT]
    if samples:
        fields["samples"] = sum(samples)
    epoch = views[0].epoch[i]
    return Point("nrg_step", {"epoch": epoch} if epoch is not None else {}, fields, span[1])


def _stragglers(
    views: list[RankView],
    ranks: list[_Rank],
    i: int,
    span: tuple[int, int],
    parts: list[tuple[float, float]],
) -> None:
    ends = [v.end[i] for v in views]
    latest = max(ends)
    slowest = ends.index(latest)
    ranks[slowest].slowest_steps += 1
    span_s = (span[1] - span[0]) / _NS
    for k, v in enumerate(views):
        wait = (latest - ends[k]) / _NS
        if k == slowest or wait <= 0:
            continue
        r = ranks[k]
        r.wait_s += wait
        own, share = parts[k]
        duration = (v.end[i] - v.start[i]) / _NS
        power = (own / duration if duration > 0 else 0.0) + (share / span_s if span_s > 0 else 0.0)
        r.wait_energy_j += power * wait


def global_steps_columns(
    views: list[RankView],
    owners: Mapping[RankKey, tuple[str, str]],
    counted: Counted,
    curves: Curves | None = None,
) -> GlobalSteps:
    """:func:`acquisition.summary.ranks.global_steps` of a regular run (two ranks or more, in
    (host, rank) order, each with every step and the same sources on each)."""
    curves = curves or {}
    out = GlobalSteps()
    ranks = []
    for v in views:
        gpu_source, uuid = owners.get((v.host, v.rank), ("", ""))
        ranks.append(
            out.ranks.setdefault((v.host, v.rank), _Rank(v.host, v.rank, uuid, gpu_source))
        )
    by_host: dict[str, list[int]] = {}
    for k, v in enumerate(views):
        by_host.setdefault(v.host, []).append(k)
    plans = [
        _plan(host, [views[k] for k in ks], [ranks[k] for k in ks], owners, counted)
        for host, ks in by_host.items()
    ]
    previous_end: int | None = None
    for i, step in enumerate(views[0].step):
        start = min(v.start[i] for v in views)
        end = max(v.end[i] for v in views)
        if previous_end is not None:
            start = max(start, previous_end)
        span = (min(start, end), end)
        gkey: StepKey = ("", "", step)
        out.steps[gkey] = _synth(step, views, i, span)
        for v, r in zip(views, ranks, strict=True):
            r.steps += 1
            r.time_s += (v.end[i] - v.start[i]) / _NS
        t = _energy(out, plans, i, span, curves)
        if t.sources:
            out.energy[gkey] = t.sources
        if t.measured:
            out.totals[gkey] = t.total
        if t.bounds:
            out.bounds[gkey] = t.bounds
        _stragglers(views, ranks, i, span, t.parts)
        previous_end = span[1]
        out.multi_rank_steps += 1
    return out
