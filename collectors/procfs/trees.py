"""Process trees: the table of tracked processes, how a tree's members are found, and the
fields of its ``process`` points.

Discovery, in the order it is tried at each tick:

- **fork counter**: when the kernel's count of created tasks (``/proc/stat`` ``processes``) did
  not move and the tracked roots are the same, a tree whose previous members are all alive,
  unchanged and children of their previous parents keeps them without reading a children file;
- **children files**: ``/proc/<pid>/task/<tid>/children`` of each member, walked from the root;
- **ppid scan**: where the kernel has no children files, one pass over every ``/proc/<pid>/stat``
  per tick, grouped by parent.

A process belongs to exactly one tree: the walk stops at a descendant that is itself a tracked
root (a job tracked on its own under the agent's tree is counted in its own tree only).
"""

from __future__ import annotations

from collections.abc import Callable

from acquisition.point import FieldValue

from .parsers import MemoryDetail, PidStat
from .sources import Source

__all__ = [
    "ChildFinder",
    "Instances",
    "Proc",
    "ProcessTable",
    "Sum",
    "TickContext",
    "process_fields",
    "same_members",
    "walk_tree",
]


class Proc:
    """A tracked process across ticks (identity: pid and starttime)."""

    __slots__ = ("cpu", "detail", "detail_ns", "prev_cpu", "st", "tags")

    def __init__(self, st: PidStat) -> None:
        self.st = st
        self.cpu = st.utime + st.stime
        self.prev_cpu: int | None = None  # CPU time at the previous tick; None when first seen
        self.detail: MemoryDetail | None = None
        self.detail_ns = 0
        self.tags: dict[str, dict[str, str]] = {}  # its tree -> the tags of its scope=pid point


class Sum:
    """Running totals of one summary scope; memory sums count only if every member has them."""

    __slots__ = (
        "all_detail",
        "all_pss",
        "all_swap",
        "count",
        "cpu",
        "d",
        "private",
        "pss",
        "rss",
        "shared",
        "swap",
        "threads",
    )

    def __init__(self) -> None:
        self.count = self.cpu = self.d = self.rss = self.threads = 0
        self.private = self.shared = self.pss = self.swap = 0
        self.all_detail = self.all_pss = self.all_swap = True

    def add(self, p: Proc, d: int) -> None:
        st = p.st
        self.count += 1
        self.cpu += p.cpu
        self.d += d
        self.rss += st.rss_pages
        self.threads += st.num_threads
        m = p.detail
        if m is None:
            self.all_detail = False
            return
        self.private += m.private
        self.shared += m.shared
        if m.pss is None:
            self.all_pss = False
        else:
            self.pss += m.pss
        if m.swap is None:
            self.all_swap = False
        else:
            self.swap += m.swap

    def memory(self) -> MemoryDetail | None:
        """The summed memory split, None unless every member has one."""
        if not self.all_detail:
            return None
        return MemoryDetail(
            self.private,
            self.shared,
            self.pss if self.all_pss else None,
            self.swap if self.all_swap else None,
        )

    def merged(self, other: Sum) -> Sum:
        out = Sum()
        out.count = self.count + other.count
        out.cpu = self.cpu + other.cpu
        out.d = self.d + other.d
        out.rss = self.rss + other.rss
        out.threads = self.threads + other.threads
        out.private = self.private + other.private
        out.shared = self.shared + other.shared
        out.pss = self.pss + other.pss
        out.swap = self.swap + other.swap
        out.all_detail = self.all_detail and other.all_detail
        out.all_pss = self.all_pss and other.all_pss
        out.all_swap = self.all_swap and other.all_swap
        return out


class ProcessTable:
    """The processes sampled at this tick; an entry of the previous tick is reused (keeping its
    CPU time as ``prev_cpu``) when pid and starttime still match."""

    def __init__(self, src: Source, old: dict[int, Proc]) -> None:
        self.src = src
        self.old = old
        self.new: dict[int, Proc] = {}

    def get(self, pid: int) -> Proc | None:
        p = self.new.get(pid)
        if p is not None:
            return p
        st = self.src.sample(pid)
        if st is None:
            return None
        p = self.old.get(pid)
        if p is not None and p.st.starttime == st.starttime:
            p.prev_cpu = p.cpu
            p.st = st
            p.cpu = st.utime + st.stime
        else:
            p = Proc(st)  # new, or the pid now belongs to another process
        self.new[pid] = p
        return p


class ChildFinder:
    """The children of a process: from ``task/*/children`` (the source), else from one scan of
    every process's parent per tick, made the first time a children file is missing."""

    def __init__(self, src: Source, now_ns: int) -> None:
        self.src = src
        self.now_ns = now_ns
        self._by_ppid: dict[int, list[int]] | None = None

    def __call__(self, parent: PidStat) -> list[int]:
        kids = self.src.children(parent.pid, parent.num_threads, self.now_ns)
        if kids is not None:
            return kids
        if self._by_ppid is None:
            self._by_ppid = {}
            for pid, (ppid, _start) in self.src.scan().items():
                self._by_ppid.setdefault(ppid, []).append(pid)
        return self._by_ppid.get(parent.pid, [])


def walk_tree(
    table: ProcessTable, kids_of: Callable[[PidStat], list[int]], root: Proc, stop: set[int]
) -> list[Proc]:
    """The root and its live descendants, parents before children.

    A descendant whose pid is in ``stop`` (another tracked root) is left out with its own
    descendants: it is counted in its own tree, so that every process is in exactly one tree.
    """
    members = [root]
    in_tree = {root.st.pid}
    stack = [root]
    while stack:
        pst = stack.pop().st
        for pid in kids_of(pst):
            if pid in in_tree or pid in stop:
                continue
            child = table.get(pid)
            # A pid listed as a child but now another process's, or started before its parent
            # (a reused pid), is not a descendant.
            if child is None or child.st.ppid != pst.pid or child.st.starttime < pst.starttime:
                continue
            in_tree.add(pid)
            members.append(child)
            stack.append(child)
    return members


def same_members(
    table: ProcessTable, root: Proc, shape: list[tuple[int, int]]
) -> list[Proc] | None:
    """The previous members again (``shape``: (pid, ppid) in walk order), or None if any exited,
    changed or moved. Used when the kernel's fork counter stood still since the last tick."""
    members = [root]
    alive = {root.st.pid}
    get = table.get
    for pid, ppid in shape:
        p = get(pid)
        if p is None or p.prev_cpu is None or p.st.ppid != ppid or ppid not in alive:
            return None
        members.append(p)
        alive.add(pid)
    return members


class TickContext:
    """What every tree's fields need from the system at this tick."""

    __slots__ = ("d_busy", "d_total", "hz", "memory_detail", "n_online", "page_size", "used_bytes")

    def __init__(
        self,
        *,
        hz: int,
        page_size: int,
        d_total: int,
        d_busy: int,
        n_online: int,
        used_bytes: int,
        memory_detail: bool,
    ) -> None:
        self.hz = hz
        self.page_size = page_size
        self.d_total = d_total  # Δ total ticks of /proc/stat since the previous tick (0: none)
        self.d_busy = d_busy
        self.n_online = n_online
        self.used_bytes = used_bytes
        self.memory_detail = memory_detail


def process_fields(
    tick: TickContext,
    history: bool,
    cpu: int,
    d: int,
    rss_pages: int,
    threads: int,
    m: MemoryDetail | None,
    count: int,
) -> dict[str, FieldValue]:
    """Fields of one ``process`` point (``count`` < 0: a single process, no ``process_count``)."""
    out: dict[str, FieldValue] = {"cpu_seconds": cpu / tick.hz}
    if history:
        out["cpu_utilization_ratio"] = d / tick.d_total
        out["cpu_cores"] = d * tick.n_online / tick.d_total
        if tick.d_busy > 0:
            out["cpu_busy_share_ratio"] = min(d / tick.d_busy, 1.0)
    rss = rss_pages * tick.page_size
    out["rss_bytes"] = rss
    if tick.memory_detail and m is not None:
        out["private_bytes"] = m.private
        out["shared_bytes"] = m.shared
        if m.pss is not None:
            out["pss_bytes"] = m.pss
        if m.swap is not None:
            out["swap_bytes"] = m.swap
    if tick.used_bytes > 0:
        out["memory_used_share_ratio"] = rss / tick.used_bytes
    out["threads"] = threads
    if count >= 0:
        out["process_count"] = count
    return out


class Instances:
    """The ``instance`` tag of ``scope=pid`` points: a process's slot among the live processes
    of its tree with the same ``comm`` (0, 1, ...; the lowest free slot when it first appears,
    kept for its life). Unlike a pid tag, the number of series stays bounded by how many such
    processes run at once, and two processes of one name never write the same series."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], dict[int, int]] = {}
        self._last: dict[str, list[tuple[str, int]]] = {}

    def update(self, tree: str, live: list[tuple[str, int]]) -> None:
        """Release the slots of processes no longer in ``tree``, then give new ones a slot."""
        if self._last.get(tree) == live:
            return  # the same processes as at the last tick: nothing to do
        self._last[tree] = live
        by_comm: dict[str, set[int]] = {}
        for comm, pid in live:
            by_comm.setdefault(comm, set()).add(pid)
        for key in [k for k in self._slots if k[0] == tree]:
            pids = by_comm.get(key[1], set())
            slots = self._slots[key]
            for pid in [pid for pid in slots if pid not in pids]:
                del slots[pid]
            if not slots:
                del self._slots[key]
        for comm, pid in live:
            self.get(tree, comm, pid)

    def get(self, tree: str, comm: str, pid: int) -> int:
        slots = self._slots.setdefault((tree, comm), {})
        slot = slots.get(pid)
        if slot is None:
            used = set(slots.values())
            slot = next(i for i in range(len(used) + 1) if i not in used)
            slots[pid] = slot
        return slot

    def forget(self, tree: str) -> None:
        self._last.pop(tree, None)
        for key in [k for k in self._slots if k[0] == tree]:
            del self._slots[key]
