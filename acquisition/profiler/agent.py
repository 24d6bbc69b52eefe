"""Power readings of an nrg agent already running on this machine, instead of opening the sources
a second time: the points its file sink writes (``.lp`` files under the agent's data directory),
read back with :class:`acquisition.store.Store`.

The agent samples at its own interval (1 s by default): for energy per operator, run it with a
short interval (``[agent] interval = "10ms"``, and a short ``flush_interval`` so readings reach the
file soon after they are taken); at 1 s the profile gets per-step energies at best.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from acquisition.point import Point

__all__ = ["POWER_MEASUREMENTS", "AgentSampler"]

POWER_MEASUREMENTS = ("rapl", "gpu", "gpu_sample", "emonpi")
_NS = 1_000_000_000


class AgentSampler:
    """The sampler protocol over an agent's file sink directory ``data_dir``.

    ``margin_s``: readings this long before ``start()`` are read too (they bracket the first
    events); ``latency_s``: how long the profiler may wait at the end for the agent's readings
    after the last event to reach the file (its interval plus its flush interval)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        margin_s: float = 5.0,
        latency_s: float = 3.0,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.margin_s = margin_s
        self.latency_s = latency_s
        self.start_ns = 0
        self.stop_ns: int | None = None

    def start(self) -> None:
        self.start_ns = time.time_ns()
        self.stop_ns = None

    def snapshot(self) -> list[Point]:
        from acquisition.store import Store

        start = self.start_ns - int(self.margin_s * _NS)
        end = None if self.stop_ns is None else self.stop_ns + int(self.margin_s * _NS)
        return list(Store(self.data_dir).points(POWER_MEASUREMENTS, start_ns=start, end_ns=end))

    def stop(self) -> list[Point]:
        self.stop_ns = time.time_ns()
        return self.snapshot()
