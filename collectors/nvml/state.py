"""What the NVML collector keeps per GPU across ticks: cursors, energy, failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acquisition.advancing import Advance

__all__ = ["WHY_NVML", "Cadence", "Cursor", "EnergyCounter", "Gpu", "GpuLost", "Integrator"]

WHY_NVML = "the driver does not update the energy counter of this GPU (a virtual GPU or VM)"


class GpuLost(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Cadence:
    """Whether a tick reads a costly set of calls: the first tick does, then the first tick at
    least ``period_ns`` after the last read (less 5 % for the ticks' jitter); 0 = every tick."""

    period_ns: int
    last_ns: int | None = None

    def due(self, now_ns: int) -> bool:
        if self.last_ns is not None and now_ns - self.last_ns < self.period_ns * 19 // 20:
            return False
        self.last_ns = now_ns
        return True

    def mark(self, now_ns: int) -> None:
        """Count a read made at ``now_ns`` for another reason: the period runs from it."""
        self.last_ns = now_ns


@dataclass
class Cursor:
    last_us: int = 0
    progress_ns: int | None = None  # agent time of the last new sample (or probe)
    depth: int = 0  # the most samples one read of this buffer returned: a full buffer


@dataclass
class EnergyCounter:
    """mJ since driver load → J since open; a counter that goes back (driver reload) restarts."""

    base_mj: int | None = None
    last_mj: int = 0
    carried_mj: int = 0

    def update(self, mj: int) -> float:
        if self.base_mj is None:
            self.base_mj = self.last_mj = mj
        elif mj < self.last_mj:
            self.carried_mj += self.last_mj - self.base_mj
            self.base_mj = 0
        self.last_mj = mj
        return (self.carried_mj + mj - self.base_mj) / 1000.0


@dataclass
class Integrator:
    """Trapezoidal integral of power over agent time: energy where the GPU has no counter."""

    joules: float = 0.0
    last: tuple[int, float] | None = None

    def update(self, now_ns: int, watts: float) -> float:
        if self.last is not None and now_ns > self.last[0]:
            self.joules += (now_ns - self.last[0]) * 1e-9 * (watts + self.last[1]) / 2.0
        self.last = (now_ns, watts)
        return self.joules


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    handle: Any
    architecture: int | None
    tags: dict[str, str]
    cuda_ordinal: int | None = None
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    failing: dict[str, int] = field(default_factory=dict)
    legacy_process_util: bool = False
    energy: EnergyCounter = field(default_factory=EnergyCounter)
    integrator: Integrator | None = None
    cursors: dict[int, Cursor] = field(default_factory=dict)
    process_cursor: Cursor = field(default_factory=Cursor)
    buffers: Cadence = field(default_factory=lambda: Cadence(0))  # the sample buffers' reads
    jump_logged: bool = False
    loss_logged: bool = False
    power_usage_instant: bool | None = None  # GetPowerUsage instantaneous (pre-Ampere, GA100)
    advance: Advance | None = None  # the proof that the energy counter measures

    def energy_moves(self, joules: float, now_ns: int) -> bool:
        """Whether ``energy_joules`` (since open) is to be written: the first reading (0 J, the
        baseline a reader differences from), then nothing until the counter has moved (see
        :mod:`acquisition.advancing`)."""
        if self.advance is None:
            self.advance = Advance("nvml", f"GPU {self.index} energy counter", WHY_NVML)
            return self.advance.observe(joules != 0.0, now_ns) or True
        return self.advance.observe(joules != 0.0, now_ns)
