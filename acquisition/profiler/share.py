"""This process's share of the machine's busy CPU time, for ``profile(cpu_share=True)``.

Reads ``<root>/proc/stat`` (the ``cpu`` line: busy = user + nice + system + irq + softirq +
steal, in USER_HZ ticks; guest time is already inside user and nice) and
``<root>/proc/self/stat`` (``utime`` + ``stime``, ticks) at the start and at the end of the
profile: the share is the process's CPU ticks over the machine's busy ticks in between, at most 1.
It covers this process only: worker processes (a DataLoader's) are not in it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CpuShare", "parse_machine_busy", "parse_process_cpu"]


def parse_machine_busy(text: str) -> int:
    """Busy ticks of all CPUs from ``/proc/stat``'s first (``cpu``) line."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:]]
            fields += [0] * (8 - len(fields))
            user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
            return user + nice + system + irq + softirq + steal
    raise ValueError("no 'cpu' line in /proc/stat")


def parse_process_cpu(text: str) -> int:
    """``utime`` + ``stime`` ticks from ``/proc/<pid>/stat`` (split after the last ``)``)."""
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


class CpuShare:
    """Reads at ``start()``; :meth:`ratio` gives the share since then (None before two reads
    are apart, or when procfs is unreadable)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.proc = Path(root) / "proc"
        self._start: tuple[int, int] | None = None

    def _read(self) -> tuple[int, int] | None:
        try:
            machine = parse_machine_busy((self.proc / "stat").read_text())
            process = parse_process_cpu((self.proc / "self" / "stat").read_text())
        except (OSError, ValueError, IndexError):
            return None
        return machine, process

    def start(self) -> None:
        self._start = self._read()

    def ratio(self) -> float | None:
        now = self._read()
        if self._start is None or now is None:
            return None
        busy = now[0] - self._start[0]
        mine = now[1] - self._start[1]
        if busy <= 0:
            return None
        return min(1.0, max(0.0, mine / busy))
