"""Per-process GPU use: ``gpu_process`` points per pid and per tracked process tree.

Processes are keyed by (pid, start time from ``<root>/proc/<pid>/stat``), so a reused pid is a
new process; a process belongs to the tree of its nearest tracked ancestor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acquisition.point import FieldValue, Point

from .parse import parse_proc_stat

__all__ = ["ProcessAccounting", "ProcessReading"]

_MAX_ANCESTRY = 64

ProcessReading = tuple[Any, int, int | None, tuple[int, int] | None]
"""(gpu, pid, used bytes or None, (sm %, memory %) or None) of one process on one GPU."""


@dataclass
class _ProcState:
    ancestors: tuple[int, ...]
    memory_max: int = 0


class ProcessAccounting:
    """Peak memory per process and per tree across ticks, and the points of one tick.

    A process's ``gpu_process`` point carries its pid as an integer field and an ``instance`` tag:
    its slot among the processes on that GPU (0, 1, ...; the lowest free one when it first
    appears, kept while it runs there), so the series stay as few as the processes that run at
    once. ``pid_tag``: the pid is a tag instead (one series per process).
    """

    def __init__(self, proc: Path, *, pid_tag: bool = False) -> None:
        self._proc = proc
        self._pid_tag = pid_tag
        self._procs: dict[tuple[int, int | None], _ProcState] = {}
        self._trees: dict[tuple[int, int | None], list[int]] = {}
        self._slots: dict[str, dict[tuple[int, int | None], int]] = {}

    def reset(self) -> None:
        self._procs, self._trees, self._slots = {}, {}, {}

    def _instance(self, gpu: str, key: tuple[int, int | None], live: set[tuple[str, Any]]) -> int:
        slots = self._slots.setdefault(gpu, {})
        slot = slots.get(key)
        if slot is None:
            used = set(slots.values())
            slot = next(i for i in range(len(used) + 1) if i not in used)
            slots[key] = slot
        live.add((gpu, key))
        return slot

    def _release(self, live: set[tuple[str, Any]]) -> None:
        for gpu, slots in self._slots.items():
            for key in [k for k in slots if (gpu, k) not in live]:
                del slots[key]

    def start_time(self, pid: int) -> tuple[int, int] | None:
        try:
            return parse_proc_stat((self._proc / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            return None  # exited, or another pid namespace

    def ancestors(self, pid: int) -> tuple[int, ...]:
        chain: list[int] = []
        current = pid
        while len(chain) < _MAX_ANCESTRY:
            stat = self.start_time(current)
            if stat is None or stat[0] <= 1:
                break
            current = stat[0]
            chain.append(current)
        return tuple(chain)

    def points(
        self,
        now_ns: int,
        processes: Iterable[ProcessReading],
        roots: frozenset[int],
        points: list[Point],
    ) -> None:
        """Append this tick's per-process and per-tree ``gpu_process`` points."""
        seen: set[tuple[int, int | None]] = set()
        live: set[tuple[str, Any]] = set()
        tree_now: dict[int, list[int]] = {root: [0, 0] for root in roots}
        for gpu, pid, used, util in processes:
            key, state = self._state(pid)
            seen.add(key)
            fields: dict[str, FieldValue] = {}
            if used is not None:
                state.memory_max = max(state.memory_max, used)
                fields["memory_used_bytes"] = used
                fields["memory_used_max_bytes"] = state.memory_max
                self._add_to_tree(tree_now, roots, pid, state, used)
            if util is not None:
                fields["sm_utilization_ratio"] = util[0] / 100.0
                fields["memory_utilization_ratio"] = util[1] / 100.0
            if fields:
                tags = {"gpu": gpu.tags["gpu"], "uuid": gpu.uuid}
                if self._pid_tag:
                    tags["pid"] = str(pid)
                else:
                    tags["instance"] = str(self._instance(gpu.tags["gpu"], key, live))
                    fields["pid"] = pid
                points.append(Point("gpu_process", tags, fields, now_ns))
        self._release(live)
        for key in [key for key in self._procs if key not in seen]:
            del self._procs[key]  # no longer on any GPU: a later process with this pid is new
        self._tree_points(now_ns, tree_now, points)

    def _state(self, pid: int) -> tuple[tuple[int, int | None], _ProcState]:
        stat = self.start_time(pid)
        key = (pid, None if stat is None else stat[1])
        if stat is None:
            # Exited since NVML listed it (or another pid namespace): nothing says it is a
            # new process, so it stays the one last seen under this pid.
            key = next((known for known in self._procs if known[0] == pid), key)
        state = self._procs.get(key)
        if state is None:
            ancestors = () if stat is None else (stat[0], *self.ancestors(stat[0]))
            state = self._procs[key] = _ProcState(ancestors)
        return key, state

    @staticmethod
    def _add_to_tree(
        tree_now: dict[int, list[int]],
        roots: frozenset[int],
        pid: int,
        state: _ProcState,
        used: int,
    ) -> None:
        if pid in roots:
            tree_now[pid][0] += used
            return
        root = next((a for a in state.ancestors if a in roots), None)
        if root is not None:
            tree_now[root][1] += used

    def _tree_points(
        self, now_ns: int, tree_now: dict[int, list[int]], points: list[Point]
    ) -> None:
        live_trees: dict[tuple[int, int | None], list[int]] = {}
        for root, (main, descendants) in sorted(tree_now.items()):
            stat = self.start_time(root)
            key = (root, None if stat is None else stat[1])
            peaks = self._trees.get(key, [0, 0, 0])
            current = (main, descendants, main + descendants)
            peaks = [max(peak, value) for peak, value in zip(peaks, current, strict=True)]
            live_trees[key] = peaks
            for scope, value, peak in zip(
                ("main", "descendants", "combined"), current, peaks, strict=True
            ):
                tags = {"tree": str(root), "scope": scope}
                fields: dict[str, FieldValue] = {
                    "memory_used_bytes": value,
                    "memory_used_max_bytes": peak,
                }
                points.append(Point("gpu_process", tags, fields, now_ns))
        self._trees = live_trees
