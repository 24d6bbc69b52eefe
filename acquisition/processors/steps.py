"""The attribution's bookkeeping of training steps: a step waiting for its data, the steps of a
run already written, and reading the training job's points (``nrg_step``, ``nrg_module``).

Times are Unix-epoch ns; module times s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from acquisition.point import FieldValue, Point
from acquisition.processors.energy import is_number

__all__ = [
    "DoneSteps",
    "RunKey",
    "Step",
    "StepKey",
    "epoch_of",
    "float_field",
    "int_field",
    "run_key",
    "run_tags",
]

RunKey = tuple[str, str, str]
StepKey = tuple[str, str, str, int]


@dataclass
class Step:
    run: RunKey
    step: int
    epoch: str = "0"
    start_ns: int | None = None
    end_ns: int | None = None
    gpu_ns: tuple[int, int] | None = None
    """The step on the GPU's timeline (start, end), when the job sent it (CUDA)."""
    arrived_ns: int = 0
    seen_ns: int = 0
    modules: dict[tuple[str, str], tuple[float, float | None]] = field(default_factory=dict)
    complete: bool = False
    """All its module points are in: a later step's point or the run's end arrived after it."""
    tags: dict[str, str] | None = None
    """The run's tags and ``epoch``, built once when the step is written."""

    def interval(self, kind: str) -> tuple[int, int]:
        """The step's interval for a kind of source: the GPU's timeline for a GPU when known,
        else the CPU's."""
        if kind == "gpu" and self.gpu_ns is not None:
            return self.gpu_ns
        assert self.start_ns is not None and self.end_ns is not None
        return self.start_ns, self.end_ns

    def base_tags(self) -> dict[str, str]:
        if self.tags is None:
            self.tags = {**run_tags(self.run), "epoch": self.epoch}
        return self.tags


class DoneSteps:
    """Steps of one run already attributed: a bounded set above a floor (all below it are done)."""

    __slots__ = ("floor", "steps")
    keep: ClassVar[int] = 4096

    def __init__(self) -> None:
        self.floor = -1
        self.steps: set[int] = set()

    def __contains__(self, step: int) -> bool:
        return step <= self.floor or step in self.steps

    def add(self, step: int) -> None:
        self.steps.add(step)
        if len(self.steps) > 2 * self.keep:
            self.floor = max(self.floor, max(self.steps) - self.keep)
            self.steps = {s for s in self.steps if s > self.floor}


def run_key(tags: Mapping[str, str]) -> RunKey:
    return (tags.get("experiment", ""), tags.get("run", ""), tags.get("rank", ""))


def run_tags(run: RunKey) -> dict[str, str]:
    experiment, name, rank = run
    tags = {"experiment": experiment, "run": name, "rank": rank}
    return {k: v for k, v in tags.items() if v}


def int_field(fields: Mapping[str, FieldValue], key: str) -> int | None:
    value = fields.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def float_field(fields: Mapping[str, FieldValue], key: str) -> float | None:
    value = fields.get(key)
    return float(value) if is_number(value) else None  # type: ignore[arg-type]


def epoch_of(point: Point) -> str:
    """The step's epoch: the ``epoch`` tag, else the integer field older jobs wrote, else 0."""
    tag = point.tags.get("epoch")
    if tag:
        return tag
    value = int_field(point.fields, "epoch")
    return str(value) if value is not None else "0"
