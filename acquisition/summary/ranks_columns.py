"""The join of :mod:`acquisition.summary.ranks` on a regular run's columns
(:meth:`acquisition.summary.columns.StepColumns.ranks`): the same model and the same figures,
computed with the same operations in the same order, without a point or a dict per rank-step.

What makes it cheap: every rank has every step and the same sources on each, so what the general
join works out per step and host (which sources a host counts, whose figure each one is, which
of them add up to its total, in which order) is worked out once per host (:class:`_HostPlan`);
per step only the figures are read from the rank's arrays.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import cast

from acquisition.point import FieldValue, Point
from acquisition.summary.bounds import StepBound, add_bound
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


def _max_of(plan: _HostPlan, source: str) -> list[float]:
    """A shared source's figure in each step: the largest of its ranks', as the general join
    takes them one by one."""
    having = plan.shared[source]
    if len(having) == 1:
        return plan.views[having[0]].energy[source]
    # max(newest, ..., first) per step: what max(next, so_far) rank by rank gives
    return list(map(max, *(plan.views[k].energy[source] for k in reversed(having))))


def _merged(
    plan: _HostPlan, spans: list[tuple[int, int]], curves: Curves
) -> dict[str, list[float]]:
    """The host's figure of each source it counts, per step: a rank's own source its figure,
    a shared one over the step's span from its readings (several ranks), else the largest."""
    merged: dict[str, list[float]] = {}
    for source in plan.order:
        owner = plan.own.get(source)
        if owner is not None:
            merged[source] = plan.views[owner].energy[source]
            continue
        curve = curves.get((plan.host, source)) if len(plan.views) > 1 else None
        if curve is None:
            merged[source] = _max_of(plan, source)
            continue
        over = curve.energies(spans)
        if None not in over:  # its readings cover every step: the ranks' figures are not read
            merged[source] = cast(list[float], over)
            continue
        figures = _max_of(plan, source)
        merged[source] = [f if o is None else o for f, o in zip(figures, over, strict=True)]
    return merged


def _added(columns: list[list[float]], n: int, start: float = 0) -> list[float]:
    """Element by element, ``start`` plus each column in turn (the order of a loop's ``+=``)."""
    out: list[float] = [start] * n
    for col in columns:
        out = list(map(operator.add, out, col))
    return out


@dataclass
class _Energy:
    """A host's figures per step."""

    merged: dict[str, list[float]]
    total: list[float]
    own: list[list[float]]
    """Per view of the host."""
    share: list[float]


def _host_energy(plan: _HostPlan, spans: list[tuple[int, int]], curves: Curves, n: int) -> _Energy:
    merged = _merged(plan, spans, curves)
    total = _added([merged[s] for s in plan.used], n)
    zeros = [0.0] * n
    own = [zeros] * len(plan.views)
    for k, source in plan.own_used:
        own[k] = merged[source]
    owned = _added(own, n)
    m = len(plan.views)
    share = [(t - o) / m for t, o in zip(total, owned, strict=True)]
    return _Energy(merged, total, own, share)


def _bounds_at(plan: _HostPlan, into: dict[str, StepBound], i: int) -> None:
    """Add the host's bounds of step ``i``: for each source it counts that has them, the
    largest of the bounds that count (the owner's, or the sharers')."""
    for source in plan.order:
        if source not in plan.bounded:
            continue
        found = [plan.views[k].bounds[source] for k in plan.bounded[source]]
        best = max(range(len(found)), key=lambda j: found[j][0][i])
        b = StepBound(found[best][0][i], found[best][1][i], found[best][2][i])
        add_bound(into, source, b)


def _spans(views: list[RankView]) -> list[tuple[int, int]]:
    """Each global step's span: from the previous step's end (or its ranks' earliest start,
    when later) to its ranks' latest end."""
    starts = list(map(min, *(v.start for v in views)))
    ends = list(map(max, *(v.end for v in views)))
    out = []
    previous_end: int | None = None
    for start, end in zip(starts, ends, strict=True):
        if previous_end is not None:
            start = max(start, previous_end)
        previous_end = end
        out.append((min(start, end), end))
    return out


def _synth(views: list[RankView], spans: list[tuple[int, int]]) -> list[Point]:
    """The global steps as ``nrg_step`` points (epoch, span, samples summed over ranks)."""
    rows = list(zip(*(v.samples for v in views), strict=True))
    out = []
    for i, (step, span) in enumerate(zip(views[0].step, spans, strict=True)):
        fields: dict[str, FieldValue] = {"step": step}
        fields["start_time_ns"], fields["end_time_ns"] = span
        fields["duration_seconds"] = (span[1] - span[0]) / _NS
        samples = [s for s in rows[i] if s != NONE_INT]
        if samples:
            fields["samples"] = sum(samples)
        epoch = views[0].epoch[i]
        tags = {"epoch": epoch} if epoch is not None else {}
        out.append(Point("nrg_step", tags, fields, span[1]))
    return out


def _stragglers(
    views: list[RankView],
    ranks: list[_Rank],
    spans: list[tuple[int, int]],
    parts: list[tuple[list[float], list[float]]],
    durations: list[list[float]],
) -> None:
    """Per step, the slowest rank (the first of the latest ends); every other rank waits from
    its end to that one, at its mean power of the step."""
    latest = [end for _, end in spans]  # its ranks' latest end
    rows = zip(*(v.end for v in views), strict=True)
    for k in (row.index(end) for row, end in zip(rows, latest, strict=True)):
        ranks[k].slowest_steps += 1
    span_s = [(b - a) / _NS for a, b in spans]
    spans_positive = min(span_s, default=1.0) > 0
    per_s: dict[int, list[float]] = {}  # a host's share per second of span, once per host
    for v, r, (own, share), took in zip(views, ranks, parts, durations, strict=True):
        waits = list(map(operator.truediv, map(operator.sub, latest, v.end), repeat(_NS)))
        if min(took, default=1.0) <= 0 or not spans_positive:
            _waits_one_by_one(r, waits, took, own, share, span_s)
            continue
        if (shared := per_s.get(id(share))) is None:
            shared = per_s[id(share)] = list(map(operator.truediv, share, span_s))
        power = map(operator.add, map(operator.truediv, own, took), shared)
        energy: Iterator[float] = map(operator.mul, power, waits)
        if 0.0 in waits:  # the steps it waits in, only (no wait is below 0)
            waiting = list(map((0.0).__lt__, waits))
            r.wait_s = functools.reduce(operator.add, compress(waits, waiting), r.wait_s)
            energy = compress(energy, waiting)
        else:
            r.wait_s = functools.reduce(operator.add, waits, r.wait_s)
        r.wait_energy_j = functools.reduce(operator.add, energy, r.wait_energy_j)


def _waits_one_by_one(
    r: _Rank,
    waits: list[float],
    durations: list[float],
    own: list[float],
    share: list[float],
    span_s: list[float],
) -> None:
    """:func:`_stragglers` for a rank with a step of no length (or a span of none)."""
    for wait, duration, own_j, share_j, span in zip(
        waits, durations, own, share, span_s, strict=True
    ):
        if wait <= 0:
            continue
        r.wait_s += wait
        power = (own_j / duration if duration > 0 else 0.0) + (share_j / span if span > 0 else 0.0)
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
        rank = _Rank(v.host, v.rank, uuid, gpu_source)
        ranks.append(out.ranks.setdefault((v.host, v.rank), rank))
    by_host: dict[str, list[int]] = {}
    for k, v in enumerate(views):
        by_host.setdefault(v.host, []).append(k)
    plans = [
        _plan(host, [views[k] for k in ks], [ranks[k] for k in ks], owners, counted)
        for host, ks in by_host.items()
    ]
    n = len(views[0].step)
    spans = _spans(views)
    keys: list[StepKey] = [("", "", step) for step in views[0].step]
    out.steps = dict(zip(keys, _synth(views, spans), strict=True))
    durations = []
    for v, r in zip(views, ranks, strict=True):
        r.steps += n
        durations.append(
            list(map(operator.truediv, map(operator.sub, v.end, v.start), repeat(_NS)))
        )
        r.time_s = functools.reduce(operator.add, durations[-1], r.time_s)
    energies = [_host_energy(plan, spans, curves, n) for plan in plans]
    parts = []
    sources: dict[str, list[float]] = {}
    for plan, e in zip(plans, energies, strict=True):
        for source, figures in e.merged.items():
            sources[source] = (
                _added([figures], n, 0.0)
                if source not in sources
                else list(map(operator.add, sources[source], figures))
            )
        for k, r in enumerate(plan.ranks):
            parts.append((e.own[k], e.share))
            r.energy_j = functools.reduce(
                operator.add, map(operator.add, e.own[k], e.share), r.energy_j
            )
        out.host_energy[plan.host] = functools.reduce(
            operator.add, e.total, out.host_energy.get(plan.host, 0.0)
        )
    if sources:
        names = list(sources)
        for i, key in enumerate(keys):
            out.energy[key] = {s: sources[s][i] for s in names}
    if any(plan.used for plan in plans):
        totals = _added([e.total for e in energies], n, 0.0)
        out.totals = dict(zip(keys, totals, strict=True))
    if any(plan.bounded for plan in plans):
        for i, key in enumerate(keys):
            into: dict[str, StepBound] = {}
            for plan in plans:
                _bounds_at(plan, into, i)
            if into:
                out.bounds[key] = into
    _stragglers(views, ranks, spans, parts, durations)
    out.multi_rank_steps += n
    return out
