"""A run's step data as columns: ``nrg_step`` and step-scope ``nrg_energy`` lines kept as arrays
per series (one value per line and field) instead of a :class:`Point` per line.

A distributed run writes about eleven such lines per rank and step (its step and its energy per
source); as points, 64 ranks × 10,000 steps take gigabytes. Here a line costs a few array slots
(8 bytes per field). :meth:`StepColumns.to_points` gives the points back exactly as the lines
decode (same measurement, tags, fields in line order, time, and file order), for every reader
that needs points; :meth:`StepColumns.ranks` gives the aligned per-rank view the summary's
join reads (see :mod:`acquisition.summary.ranks_columns`). A GPU's driver samples
(``gpu_sample``, about 50 per GPU-second) may come as columns too (:class:`DriverSamples`): the
summary only shapes GPU counters with their power.
"""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field

from acquisition.point import FieldValue, Point

__all__ = [
    "ENERGY_OPTIONAL",
    "NONE_INT",
    "DriverSamples",
    "RankView",
    "Series",
    "StepColumns",
    "regular_views",
    "strictly_increasing",
]

NONE_INT = -(2**63)
"""An absent int field (``samples``) in an int column."""
ENERGY_OPTIONAL = (
    "duration_seconds",
    "mean_power_watts",
    "error_joules",
    "error_start_joules",
    "error_end_joules",
)
"""The optional fields of a step-energy line after ``step`` and ``energy_joules``, in line order
(absent: NaN in their column; line protocol has no NaN)."""


def _ints() -> array[int]:
    return array("q")


def _floats() -> array[float]:
    return array("d")


@dataclass(eq=False)
class Series:
    """The lines of one series (measurement and tags) in file order."""

    measurement: str
    tags: Mapping[str, str]
    step: array[int] = field(default_factory=_ints)
    time: array[int] = field(default_factory=_ints)
    order: array[int] = field(default_factory=_ints)
    """Each line's position among the run's step lines (file order)."""
    ints: list[array[int]] = field(default_factory=list)
    """``nrg_step``: samples (NONE_INT when absent), start_time_ns, end_time_ns."""
    floats: list[array[float]] = field(default_factory=list)
    """``nrg_step``: duration_seconds; ``nrg_energy``: energy_joules, then ENERGY_OPTIONAL."""
    bounds: tuple[int, int] | None = None
    """The earliest and latest time, when known without a pass over them (a step index
    records them)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.tags.get("host", ""), self.tags.get("rank", ""))

    @property
    def source(self) -> str:
        return self.tags.get("source", "")

    def __len__(self) -> int:
        return len(self.step)

    def point(self, i: int) -> Point:
        """Line ``i`` as the decoder gives it."""
        fields: dict[str, FieldValue] = {"step": self.step[i]}
        if self.measurement == "nrg_step":
            samples, start, end = (col[i] for col in self.ints)
            if samples != NONE_INT:
                fields["samples"] = samples
            fields["start_time_ns"], fields["end_time_ns"] = start, end
            fields["duration_seconds"] = self.floats[0][i]
        else:
            fields["energy_joules"] = self.floats[0][i]
            for name, col in zip(ENERGY_OPTIONAL, self.floats[1:], strict=True):
                if not math.isnan(col[i]):
                    fields[name] = col[i]
        return Point(self.measurement, self.tags, fields, self.time[i])


def step_series(measurement: str, tags: Mapping[str, str]) -> Series:
    """An empty series of ``nrg_step`` or step-energy lines."""
    s = Series(measurement, tags)
    if measurement == "nrg_step":
        s.ints = [_ints(), _ints(), _ints()]
        s.floats = [_floats()]
    else:
        s.floats = [_floats() for _ in range(1 + len(ENERGY_OPTIONAL))]
    return s


@dataclass
class RankView:
    """One rank's steps, aligned: entry ``i`` of every column is its ``i``-th step (by step
    number), its energy per source (``energy[source][i]``) and that source's error bounds."""

    host: str
    rank: str
    step: list[int]
    start: list[int]
    end: list[int]
    samples: list[int]
    epoch: list[str | None]
    """The ``epoch`` tag of each step's point."""
    energy: dict[str, list[float]]
    """Per source, in the order of the rank's first step's lines."""
    bounds: dict[str, tuple[list[float], list[float], list[float]]]
    """Per source with bounds on every step: error, at start, at end."""


@dataclass
class DriverSamples:
    """The ``gpu_sample`` lines of one series that carry a power: their times and ``power_watts``
    (as floats), and nothing else of them (the summary reads nothing else)."""

    tags: Mapping[str, str]
    time: MutableSequence[int]
    watts: MutableSequence[float]
    bounds: tuple[int, int] | None = None
    """The earliest and latest time, when known without a pass (an index records them)."""
    increasing: bool = False
    """Whether the times are known to only grow (an index records it); False: not known."""


@dataclass
class StepColumns:
    """The ``nrg_step`` and step-scope ``nrg_energy`` lines of one run (and, when read so, its
    driver samples)."""

    series: list[Series] = field(default_factory=list)
    lines: int = 0
    samples: list[DriverSamples] = field(default_factory=list)
    skipped: bool = False
    """Lines the join does not read were left out (a rank's step energy of the host's other
    GPUs): only the join of :func:`regular_views` may read these columns."""
    _views: list[RankView] | None = field(default=None, repr=False)
    _viewed: bool = field(default=False, repr=False)
    _range: tuple[int, int] | None = field(default=None, repr=False)
    _range_of: tuple[int, int] = field(default=(-1, -1), repr=False)

    def add(self, series: Series) -> Series:
        self.series.append(series)
        return series

    def __len__(self) -> int:
        return self.lines

    def add_samples(self, samples: DriverSamples) -> None:
        self.samples.append(samples)
        self.lines += len(samples.time)

    def time_range(self) -> tuple[int, int] | None:
        """The earliest and latest time of the lines (worked out again only after lines were
        added: a report asks several times)."""
        shape = (len(self.series), self.lines)
        if self._range_of != shape:
            spans = [s.bounds or (min(s.time), max(s.time)) for s in self.series if len(s)]
            spans += [d.bounds or (min(d.time), max(d.time)) for d in self.samples if d.time]
            lows = [lo for lo, _ in spans]
            highs = [hi for _, hi in spans]
            self._range = (min(lows), max(highs)) if lows else None
            self._range_of = shape
        return self._range

    def tag_counts(self, tag: str) -> dict[str, int]:
        """Lines per value of ``tag``."""
        counts: dict[str, int] = {}
        sized = [(s.tags, len(s)) for s in self.series]
        sized += [(d.tags, len(d.time)) for d in self.samples]
        for tags, n in sized:
            value = tags.get(tag)
            if value and n:
                counts[value] = counts.get(value, 0) + n
        return counts

    def to_points(self) -> list[Point]:
        """Every step line as a point, in file order; then each driver sample as a point with
        its power only."""
        located = [(s.order[i], s, i) for s in self.series for i in range(len(s))]
        located.sort(key=lambda x: x[0])
        points = [s.point(i) for _, s, i in located]
        for d in self.samples:
            points += [
                Point("gpu_sample", d.tags, {"power_watts": w}, t)
                for t, w in zip(d.time, d.watts, strict=True)
            ]
        return points

    def ranks(self) -> list[RankView] | None:
        """Each (host, rank)'s aligned steps, in (host, rank) order, when the run is regular:
        every rank has the same step numbers, each once, with its energy for the same sources
        on every step; else None (the points take the general way)."""
        if not self._viewed:
            self._views, self._viewed = self._ranks(), True
        return self._views

    def _ranks(self) -> list[RankView] | None:
        steps: dict[tuple[str, str], list[Series]] = {}
        energy: dict[tuple[str, str], dict[str, list[Series]]] = {}
        for s in self.series:
            if not len(s):
                continue
            if s.measurement == "nrg_step":
                steps.setdefault(s.key, []).append(s)
            elif s.source:  # a line without its source counts nowhere
                energy.setdefault(s.key, {}).setdefault(s.source, []).append(s)
        if len(steps) < 2 or steps.keys() != energy.keys():
            return None
        views = []
        for key in sorted(steps):
            view = _view(key, steps[key], energy[key])
            if view is None:
                return None
            views.append(view)
        first = views[0].step
        return views if all(v.step == first for v in views) else None


def _concat(parts: list[Series]) -> tuple[array[int], list[Series]]:
    """The step numbers of ``parts`` joined in step order (the parts ordered by their first
    step), and the parts in that order."""
    ordered = sorted(parts, key=lambda s: s.step[0])
    steps = array("q")
    for s in ordered:
        steps.extend(s.step)
    return steps, ordered


def strictly_increasing(values: Sequence[int]) -> bool:
    """Whether each value is greater than the one before (one pass at C speed)."""
    return all(map(operator.lt, values, itertools.islice(values, 1, None)))


_NAN = array("d", [math.nan]).tobytes()


def _no_value(column: array[float]) -> bool:
    """Whether a float column holds no value at all (all absent, NaN as read), at C speed."""
    return column.tobytes() == _NAN * len(column)


def _joined(parts: list[Series], column: int) -> list[float]:
    out = array("d")
    for s in parts:
        out.extend(s.floats[column])
    return out.tolist()


def _joined_ints(parts: list[Series], column: int) -> list[int]:
    out = array("q")
    for s in parts:
        out.extend(s.ints[column])
    return out.tolist()


def _view(
    key: tuple[str, str], step_parts: list[Series], energy_parts: Mapping[str, list[Series]]
) -> RankView | None:
    numbers, parts = _concat(step_parts)
    if not strictly_increasing(numbers):
        return None
    epochs: list[str | None] = []
    for s in parts:
        epochs += [s.tags.get("epoch")] * len(s)
    view = RankView(
        key[0],
        key[1],
        numbers.tolist(),
        _joined_ints(parts, 1),
        _joined_ints(parts, 2),
        _joined_ints(parts, 0),
        epochs,
        {},
        {},
    )
    by_first_line = sorted(energy_parts.items(), key=lambda kv: min(p.order[0] for p in kv[1]))
    for source, sparts in by_first_line:
        steps, ordered = _concat(sparts)
        if steps != numbers:
            return None
        view.energy[source] = _joined(ordered, 0)
        if all(_no_value(s.floats[3]) for s in ordered):
            continue  # no error bounds (most writers): nothing to join
        errors = [_joined(ordered, k) for k in (3, 4, 5)]
        missing = list(map(math.isnan, errors[0]))
        if not all(missing):
            if any(missing):
                return None
            view.bounds[source] = (errors[0], errors[1], errors[2])
    return view


def regular_views(points: list[Point], columns: StepColumns) -> list[RankView] | None:
    """The columns' aligned ranks when the join can read them: the run is regular and no step
    line of it is among ``points`` (a line of another shape)."""
    steps = any(
        p.measurement == "nrg_step"
        or (p.measurement == "nrg_energy" and p.tags.get("scope") == "step")
        for p in points
    )
    return None if steps else columns.ranks()
