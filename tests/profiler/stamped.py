"""The hardware boundary of the fake powercap tree (:mod:`tests.profiler.power`), read as
hardware counts: each ``energy_uj`` is the energy of its zone's power profile at the reading's
own time.

The tree's writer process rewrites its files about every millisecond, but only while it has a
CPU: on a loaded machine without real-time scheduling (a container without ``CAP_SYS_NICE``) it
waits tens of milliseconds, and a read then returns the energy of that long before, which no
tolerance for the sampler's own timing covers. A real RAPL counter does not wait for a CPU.
:class:`StampedIO` (the collector's :class:`~collectors.rapl.RaplIO` seam) gives the value at
``at_ns``, the stamp its caller gives the reading, so the truth of any interval is exact. Light
on imports: the sampler's child process loads it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from collectors.rapl import RaplIO

__all__ = ["StampedIO", "energy_uj"]


def energy_uj(profile: Sequence[Sequence[float]], t: int) -> int:
    """µJ of a piecewise-constant ``profile`` ([[from_ns, watts], ...]) from its start to ``t``
    (ns), as the tree's writer writes it."""
    total = 0.0
    for i, (start, watts) in enumerate(profile):
        end = min(profile[i + 1][0] if i + 1 < len(profile) else t, t)
        if end > start:
            total += watts * (end - start) / 1e3  # W * ns = nJ; / 1000 = uJ
    return int(total)


class StampedIO(RaplIO):
    """Reads the tree, except each profiled zone's ``energy_uj``: its profile's energy at
    ``at_ns`` (the time now while None). ``source`` is the tree's profiles file, read again
    when it is replaced."""

    def __init__(self, source: Path) -> None:
        super().__init__()
        self.source = source
        self.at_ns: int | None = None
        self._zones: dict[str, list[list[float]]] = {}
        self._seen: tuple[int, int] | None = None

    def read_text(self, path: str) -> str:
        if path.endswith("/energy_uj"):
            profile = self._profiles().get(os.path.realpath(path))
            if profile is not None:
                t = self.at_ns if self.at_ns is not None else time.time_ns()
                return f"{energy_uj(profile, t)}\n"
        return super().read_text(path)

    def _profiles(self) -> dict[str, list[list[float]]]:
        st = os.stat(self.source)
        if (st.st_mtime_ns, st.st_ino) != self._seen:
            with open(self.source) as f:
                zones = json.load(f)
            self._zones = {os.path.realpath(path): profile for path, profile in zones}
            self._seen = (st.st_mtime_ns, st.st_ino)
        return self._zones
