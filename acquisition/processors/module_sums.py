"""Per-module energy summed over the steps of an epoch (``module_detail = "epoch"``).

One :class:`EpochSums` per run and epoch adds up each (source, module, phase)'s joules and seconds
over the steps attributed; :meth:`EpochSums.points` turns them into ``nrg_energy`` points
(``scope=module``, fields ``energy_joules`` J, ``duration_seconds`` s, ``mean_power_watts`` W,
``step`` = the last step summed, ``steps`` = how many steps were summed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from acquisition.point import FieldValue, Point

__all__ = ["EPOCH_SUM_MAX_STEPS", "EpochSums"]

EPOCH_SUM_MAX_STEPS = 1000
"""An epoch's module sums are also written every this many steps, so a long epoch is not held
in memory until its end; the partial sums of one epoch add up to the whole."""

ModuleKey = tuple[str, str, str]
"""(source, module, phase)."""


@dataclass
class EpochSums:
    """Running sums of module energy and time over the steps of one epoch of one run."""

    tags: Mapping[str, str]
    """The run's tags and ``epoch``; every point gets them."""
    joules: dict[ModuleKey, float] = field(default_factory=dict)
    seconds: dict[ModuleKey, float] = field(default_factory=dict)
    steps: int = 0
    last_step: int = 0
    end_ns: int = 0

    def add(self, key: ModuleKey, joules: float, seconds: float) -> None:
        self.joules[key] = self.joules.get(key, 0.0) + joules
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def count_step(self, step: int, end_ns: int) -> None:
        self.steps += 1
        self.last_step = max(self.last_step, step) if self.steps > 1 else step
        self.end_ns = max(self.end_ns, end_ns)

    def points(self) -> list[Point]:
        """One ``nrg_energy`` point per (source, module, phase), stamped at the last step's end."""
        out = []
        for (source, module, phase), joules in self.joules.items():
            seconds = self.seconds[(source, module, phase)]
            tags = {**self.tags, "source": source, "scope": "module", "module": module}
            tags["phase"] = phase
            fields: dict[str, FieldValue] = {
                "step": self.last_step,
                "steps": self.steps,
                "energy_joules": joules,
                "duration_seconds": seconds,
            }
            if seconds > 0.0:
                fields["mean_power_watts"] = joules / seconds
            out.append(Point("nrg_energy", tags, fields, self.end_ns))
        return out
