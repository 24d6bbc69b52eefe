"""The error bar of a sum of steps (an epoch, a run) from the attribution's per-step bounds.

Each ``nrg_energy`` step point carries ``error_joules`` (the step's own bound) and the bounds of
the source's cumulative energy at the step's two edges (``error_start_joules``,
``error_end_joules``). Over a chain of adjacent steps (each starting where the one before ended)
the energy between the chain's two ends is conserved, so the chain's error is at most the bound
at its first start plus the bound at its last end, however many steps it holds; the sum of the
steps' own bounds also holds, and the smaller of the two is taken. Steps are adjacent per source on
the interval the attribution used: a GPU source's ``gpu_start_time_ns``/``gpu_end_time_ns`` when
the step carries them, else ``start_time_ns``/``end_time_ns``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from acquisition.point import Point

__all__ = ["StepBound", "add_bound", "sum_bound"]

StepKey = tuple[str, str, int]
"""(host, rank, step)."""


@dataclass(frozen=True, slots=True)
class StepBound:
    """One step's bounds from one source (J): its own, and at its start and end edges."""

    error: float
    start: float | None = None
    end: float | None = None


def add_bound(into: dict[str, StepBound], source: str, b: StepBound) -> None:
    """Add ``b`` to ``into[source]``: errors add, and so do edges known on both sides (an edge
    unknown on either side is unknown)."""
    have = into.get(source)
    if have is None:
        into[source] = b
        return
    start = None if have.start is None or b.start is None else have.start + b.start
    end = None if have.end is None or b.end is None else have.end + b.end
    into[source] = StepBound(have.error + b.error, start, end)


def _interval(step: Point | None, source: str) -> tuple[int, int] | None:
    if step is None:
        return None
    names = ("start_time_ns", "end_time_ns")
    if source.startswith("nvml:") and "gpu_start_time_ns" in step.fields:
        names = ("gpu_start_time_ns", "gpu_end_time_ns")
    start, end = (step.fields.get(name) for name in names)
    if isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool):
        return start, end
    return None


def _chains_bound(entries: list[tuple[tuple[int, int] | None, StepBound]]) -> float:
    """Bound of the sum of one source's steps: per chain of adjacent steps, the smaller of its
    edge bounds and the sum of its steps' own bounds."""
    timed = sorted(
        ((iv, b) for iv, b in entries if iv is not None and b.start is not None),
        key=lambda entry: entry[0],
    )
    total = sum(b.error for iv, b in entries if iv is None or b.start is None)
    chain_end: int | None = None
    first: StepBound | None = None
    last: StepBound | None = None
    inner = 0.0
    for (start, end), bound in timed:
        if first is None or start != chain_end:
            if first is not None and last is not None:
                total += min(_edges(first, last), inner)
            first, inner = bound, 0.0
        last, chain_end = bound, end
        inner += bound.error
    if first is not None and last is not None:
        total += min(_edges(first, last), inner)
    return total


def _edges(first: StepBound, last: StepBound) -> float:
    return (first.start or 0.0) + (last.end or 0.0)


def sum_bound(
    keys: Iterable[StepKey],
    bounds: Mapping[StepKey, Mapping[str, StepBound]],
    steps: Mapping[StepKey, Point],
    counted: Mapping[StepKey, set[str]],
) -> float | None:
    """The error bar (J) of the summed energy of the steps ``keys`` over their ``counted``
    sources; None when no step has a bound."""
    entries: dict[tuple[str, str, str], list[tuple[tuple[int, int] | None, StepBound]]]
    entries = defaultdict(list)
    for key in keys:
        for source, bound in bounds.get(key, {}).items():
            if source in counted.get(key, ()):
                interval = _interval(steps.get(key), source)
                entries[(key[0], key[1], source)].append((interval, bound))
    if not entries:
        return None
    return sum(_chains_bound(items) for items in entries.values())
