"""System CPU, memory and tracked process trees, from procfs (or psutil where there is none).

Source: Linux procfs under ``<root>/proc`` (kernel ``Documentation/filesystems/proc.rst``,
``proc_pid_stat(5)``); on a machine without ``/proc`` (macOS) the same points come from psutil.

Read every tick, directly on the event loop: on the 2-vCPU test VM open+read+close of one of these
files costs 8-14 µs of CPU, ``os.pread`` on a descriptor kept open 2-9 µs, while a thread hop
(``to_thread``) costs ~140 µs and ``aiofiles`` ~400 µs.

- ``/proc/stat``: the ``cpu`` and ``cpuN`` lines, in USER_HZ ticks (``SC_CLK_TCK``), and the
  ``processes`` line (tasks created since boot): while it stands still no tree can have gained a
  member, so children files are not read;
- ``/proc/meminfo``: KiB, converted to bytes;
- ``/proc/<pid>/stat`` of each tracked process: utime+stime (ticks), starttime (ticks since boot,
  the identity of a process together with its pid), num_threads, rss (pages);
- ``/proc/<pid>/task/<tid>/children`` of each of them to find the descendants, or, where the
  kernel lacks that file (``CONFIG_PROC_CHILDREN=n``), a scan of every ``/proc/<pid>/stat``.

Read every ``memory_detail_interval`` per process (130-160 µs each): ``/proc/<pid>/smaps_rollup``
(KiB) for private, shared and proportional memory, ``/proc/<pid>/statm`` (pages) where
smaps_rollup cannot be read.

Emits ``cpu`` (tag ``cpu`` = ``total``/``cpuN``, ratios 0..1), ``memory`` (bytes, ratio) and
``process`` points (tags ``tree`` = root pid, ``scope`` = ``main``/``descendants``/``combined``,
or ``pid`` with tags ``comm`` and ``instance`` and the pid as an integer field ``pid``; with
``pid_tag = true`` the pid is a tag instead of ``instance``). ``cpu=total`` comes every tick, each core's point every
``core_interval`` (its ratios the averages since its previous one). Ratios need two samples: the first tick emits none. Every process is counted
in one tree only (see :mod:`.trees`). Modules: :mod:`.parsers` (pure), :mod:`.sources` (procfs or
psutil), :mod:`.trees` (discovery and fields), this one (config and collector).

First round: ``open()`` samples ``/proc/stat`` and the tracked processes once, so the first
``collect()`` already emits ratios, averaged over the time since open. They are exact averages of
the kernel's counters over that interval; the counters move in steps of one tick (1/USER_HZ s per
CPU), so a ratio over an interval of T seconds on N CPUs is within ±1/(USER_HZ x T x N) of the true
average (±0.01 for 100 ms on 1 CPU at 100 Hz). A first collect less than one tick after open has
no ratios, as before.
Time base of every ratio is the system's own tick count: Δ(total ticks of ``/proc/stat``), which
is ``online CPUs × Δwall × USER_HZ`` and comes from the same clock as the process counters.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.errors import ConfigError, NoData
from acquisition.point import Point

from .parsers import (
    CpuTimes,
    MemInfo,
    MemoryDetail,
    PidStat,
    cpu_idle,
    cpu_ratio_fields,
    cpu_total,
    meminfo_from_fields,
    memory_detail_from_smaps_rollup,
    memory_detail_from_statm,
    memory_fields,
    parse_children,
    parse_forks,
    parse_meminfo,
    parse_pid_stat,
    parse_proc_stat,
    parse_smaps_rollup,
    parse_statm,
)
from .sources import ProcfsSource, PsutilSource, Source
from .trees import (
    ChildFinder,
    Instances,
    Proc,
    ProcessTable,
    Sum,
    TickContext,
    process_fields,
    same_members,
    walk_tree,
)

__all__ = [
    "CpuTimes",
    "MemInfo",
    "MemoryDetail",
    "PidStat",
    "ProcfsCollector",
    "ProcfsConfig",
    "cpu_ratio_fields",
    "meminfo_from_fields",
    "memory_detail_from_smaps_rollup",
    "memory_detail_from_statm",
    "memory_fields",
    "parse_children",
    "parse_forks",
    "parse_meminfo",
    "parse_pid_stat",
    "parse_proc_stat",
    "parse_smaps_rollup",
    "parse_statm",
]

log = logging.getLogger(__name__)

_ProcfsSource = ProcfsSource  # the name tests use
_NS = 1_000_000_000
_BACKENDS = ("auto", "procfs", "psutil")
_DESCENDANTS = ("auto", "children", "scan")
_SCOPES = ("main", "descendants", "combined")


@dataclass
class ProcfsConfig:
    """``[[collectors.procfs]]``: what to read and which process trees to follow."""

    root: str = option("/", "directory holding proc/ (/host in a container)")
    pids: list[int] = field(
        default_factory=list,
        metadata={"doc": "root pids of process trees to track, each with all its descendants"},
    )
    track_self: bool = option(True, "also track the agent's own process tree")
    per_core: bool = option(True, "emit a cpu point per core besides cpu=total")
    core_interval: float = duration(
        1.0,
        "time between two per-core cpu points, each the average since the last (cpu=total: "
        "every tick; 0: every tick)",
    )
    per_process: bool = option(True, "emit a scope=pid point per process besides the tree sums")
    pid_tag: bool = option(
        False, "scope=pid points carry the pid as a tag (one series per process) not a field"
    )
    memory_detail: bool = option(True, "read private/shared/pss memory (smaps_rollup, else statm)")
    memory_detail_interval: float = duration(
        5.0, "time between two memory-detail reads of a process (0: every tick)"
    )
    descendants: Literal["auto", "children", "scan"] = option(
        "auto", "children: task/*/children; scan: every ppid; auto: children where present"
    )
    backend: Literal["auto", "procfs", "psutil"] = option(
        "auto", "auto: procfs where <root>/proc/stat exists, else psutil (root / only)"
    )
    page_size: int = option(0, "bytes per page of the machine root belongs to (0: this one's)")
    clock_ticks: int = option(0, "USER_HZ of the machine root belongs to (0: this one's)")

    def validate(self) -> None:
        """Raise ValueError on a bad value (the core turns it into a ConfigError)."""
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {self.backend!r}")
        if self.descendants not in _DESCENDANTS:
            raise ValueError(f"descendants must be one of {_DESCENDANTS}, got {self.descendants!r}")
        if self.memory_detail_interval < 0:
            raise ValueError("memory_detail_interval must be >= 0")
        if self.core_interval < 0:
            raise ValueError("core_interval must be >= 0")
        bad = [p for p in self.pids if isinstance(p, bool) or not isinstance(p, int) or p <= 0]
        if bad:
            raise ValueError(f"pids must be positive integers, got {bad}")
        for key in ("page_size", "clock_ticks"):
            value = getattr(self, key)
            if value < 0 or value > 1 << 30:
                raise ValueError(f"{key} must be 0 (this machine's) or a positive count")
        if self.page_size and self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size must be a power of two, got {self.page_size}")


class ProcfsCollector:
    """System CPU and memory, and per-tree process CPU and memory (see the module docstring)."""

    name: ClassVar[str] = "procfs"
    config_class: ClassVar[type] = ProcfsConfig

    def __init__(
        self,
        config: ProcfsConfig,
        context: PluginContext,
        *,
        clock_ticks: int | None = None,
        page_size: int | None = None,
    ) -> None:
        """``clock_ticks``/``page_size`` override USER_HZ and the page size (the config's keys,
        else this machine's), for trees captured on another machine."""
        try:
            config.validate()
        except ValueError as exc:
            raise ConfigError(f"[collectors.procfs] {exc}") from exc
        self.config = config
        self._shared: set[Any] = context.status.setdefault("tracked_pids", set())
        self._detail_ns = round(config.memory_detail_interval * _NS)
        # Per-core points fall due within half a tick of core_interval (ticks jitter).
        self._cores_due_ns = round((config.core_interval - context.interval_s / 2) * _NS)
        self._hz = clock_ticks or config.clock_ticks or os.sysconf("SC_CLK_TCK")
        self._page_size = page_size or config.page_size or os.sysconf("SC_PAGE_SIZE")
        self._source: Source | None = None
        self._self_pid: int | None = None
        self._prev_cpus: dict[str, CpuTimes] | None = None
        self._prev_cores: dict[str, CpuTimes] | None = None
        """The cpu lines at the last per-core points (or at open): their ratios' start."""
        self._cores_ns: int | None = None
        """When the last per-core points were emitted; None: at the next tick."""
        self._cores_wait_ns: int | None = None
        """Since when per-core points wait for a core whose counters stand still."""
        self._procs: dict[int, Proc] = {}
        self._roots: dict[int, int] = {}  # root pid -> starttime, once seen
        self._gone: set[int] = set()  # roots that exited (or never existed): not followed again
        self._summary_tags: dict[int, tuple[dict[str, str], ...]] = {}
        # One tags dict per cpu line, kept: sinks recognise a series by its dict at no cost.
        self._cpu_tags: dict[str, dict[str, str]] = {}
        self._forks: int | None = None
        self._last_roots: set[int] = set()
        self._instances = Instances()
        # root pid -> (pid, ppid) of its descendants at the last tick, parents before children
        self._shapes: dict[int, list[tuple[int, int]]] = {}

    def _make_source(self) -> Source:
        cfg = self.config
        procfs = ProcfsSource(
            cfg.root,
            hz=self._hz,
            page_size=self._page_size,
            descendants=cfg.descendants,
            relist_ns=max(self._detail_ns, _NS),
        )
        if cfg.backend == "procfs" or (cfg.backend == "auto" and procfs.available()):
            return procfs
        if os.path.realpath(cfg.root) != "/":
            raise NoData(f"no {procfs.proc}/stat (psutil can only read this machine, root '/')")
        if cfg.descendants == "children":
            raise ConfigError("collectors.procfs: descendants = 'children' needs procfs")
        return PsutilSource()

    async def open(self) -> None:
        source = self._make_source()
        source.open()
        self._source = source
        if self.config.track_self:
            self._self_pid = source.self_pid()
        self._baseline(source)

    def _baseline(self, src: Source) -> None:
        """Sample the system and the tracked trees once at open, so that the first collect already
        has rates: averages over the time since open (a short first interval)."""
        try:
            src.begin_tick()
            self._prev_cpus = self._prev_cores = src.cpu_times()
            self._forks = src.forks()
            roots = self._root_pids()
            if roots:
                self._discover(src, roots, time.time_ns(), quiet=False)
        except (OSError, ValueError) as exc:
            log.debug("procfs: no baseline at open (%s); the first tick has no rates", exc)
            self._prev_cpus = self._prev_cores = self._forks = None

    async def aclose(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
        self._procs.clear()
        self._shapes.clear()
        self._prev_cpus = self._prev_cores = self._forks = None
        self._cores_ns = self._cores_wait_ns = None

    def describe(self) -> str:
        src = self._source
        what = src.describe() if src is not None else "not open"
        pids = sorted(self._root_pids())
        return f"{what}; tracking {pids or 'no processes'}"

    def _root_pids(self) -> set[int]:
        roots = set(self.config.pids)
        if self._self_pid is not None:
            roots.add(self._self_pid)
        for p in list(self._shared):  # other plugins add to it at run time
            try:
                roots.add(int(p))
            except (TypeError, ValueError):
                continue
        # A pid dropped from the shared set may come back later as a new root.
        self._gone &= roots
        return roots - self._gone

    async def collect(self, emit: Emit, now_ns: int) -> None:
        src = self._source
        if src is None:
            raise RuntimeError("procfs collector used before open()")
        src.begin_tick()
        # System files first: if they cannot be read, this tick emits nothing (never zeros).
        cpus = src.cpu_times()
        mem = src.memory()
        prev, self._prev_cpus = self._prev_cpus, cpus
        forks, prev_forks = src.forks(), self._forks
        self._forks = forks
        d_total, d_busy = self._emit_cpus(emit, now_ns, prev, cpus)
        emit(Point("memory", {}, memory_fields(mem), now_ns))

        roots = self._root_pids()
        if not roots and not self._procs:
            return
        # No task created anywhere since the last tick: no tree can have gained a member.
        quiet = forks is not None and forks == prev_forks
        trees = self._discover(src, roots, now_ns, quiet)
        if self.config.memory_detail:
            self._read_details(src, now_ns)
        tick = TickContext(
            hz=src.hz,
            page_size=src.page_size,
            d_total=d_total,
            d_busy=d_busy,
            n_online=max(len(cpus) - ("total" in cpus), 1),
            used_bytes=mem.total - mem.available,
            memory_detail=self.config.memory_detail,
        )
        for root, members in trees:
            self._emit_tree(emit, now_ns, tick, root, members)

    def _emit_cpus(
        self,
        emit: Emit,
        now_ns: int,
        prev: dict[str, CpuTimes] | None,
        cpus: dict[str, CpuTimes],
    ) -> tuple[int, int]:
        """Emit the ``cpu`` points: ``cpu=total`` every tick, each core's when they are due
        (see :meth:`_emit_cores`); (Δ total ticks, Δ busy ticks) of the whole machine."""
        cur_t = cpus.get("total")
        old_t = prev.get("total") if prev is not None else None
        fields = None if cur_t is None or old_t is None else cpu_ratio_fields(old_t, cur_t)
        if fields is not None:
            emit(Point("cpu", self._tags_of("total"), fields, now_ns))
        if self.config.per_core and self._cores_due(now_ns):
            self._emit_cores(emit, now_ns, cpus)
        if cur_t is None or old_t is None:
            return 0, 0
        d_total = max(cpu_total(cur_t) - cpu_total(old_t), 0)
        return d_total, max(d_total - (cpu_idle(cur_t) - cpu_idle(old_t)), 0)

    def _cores_due(self, now_ns: int) -> bool:
        last = self._cores_ns
        return last is None or now_ns - last >= self._cores_due_ns

    def _emit_cores(self, emit: Emit, now_ns: int, cpus: dict[str, CpuTimes]) -> None:
        """One ``cpu`` point per core, its ratios the averages since its last point (or since
        open): every ``core_interval``, nothing of the cores' time is left out. While no core's
        counters have moved since (a tick right after open), the next tick tries again."""
        prev = self._prev_cores
        if prev is None:
            self._prev_cores, self._cores_ns = cpus, now_ns
            return
        points, still = [], False
        for name, cur in cpus.items():
            old = prev.get(name)
            if name == "total" or old is None:
                continue  # a core without an old line came online since the last points
            fields = cpu_ratio_fields(old, cur)
            if fields is None:
                still = True
            else:
                points.append(Point("cpu", self._tags_of(name), fields, now_ns))
        if still and not self._cores_waited_long(now_ns):
            return  # a core whose counters have not moved yet: every core at a later tick
        self._cores_wait_ns = None
        if points or len(cpus) <= 1:
            self._prev_cores, self._cores_ns = cpus, now_ns
        for point in points:
            emit(point)

    def _cores_waited_long(self, now_ns: int) -> bool:
        """Whether per-core points have waited a second for a core whose counters stand still
        (one that went offline): the others' points then go without it."""
        if self._cores_wait_ns is None:
            self._cores_wait_ns = now_ns
        return now_ns - self._cores_wait_ns >= _NS

    def _tags_of(self, name: str) -> dict[str, str]:
        t = self._cpu_tags.get(name)
        if t is None:
            t = self._cpu_tags[name] = {"cpu": name}
        return t

    def _read_details(self, src: Source, now_ns: int) -> None:
        for p in self._procs.values():
            if p.detail is None or now_ns - p.detail_ns >= self._detail_ns:
                m = src.detail(p.st.pid)
                if m is not None:
                    p.detail, p.detail_ns = m, now_ns

    def _discover(
        self, src: Source, roots: set[int], now_ns: int, quiet: bool
    ) -> list[tuple[Proc, list[Proc]]]:
        """Find every tracked tree's live members and update the process table.

        When ``quiet`` (the kernel's fork counter did not move) and the roots are those of the
        last tick, a tree whose previous members are all alive, unchanged and still children of
        their previous parents keeps them without reading any children file; otherwise it is
        walked again (see :mod:`.trees`).
        """
        table = ProcessTable(src, self._procs)
        kids_of = ChildFinder(src, now_ns)
        quiet = quiet and roots == self._last_roots
        self._last_roots = set(roots)
        trees: list[tuple[Proc, list[Proc]]] = []
        for root_pid in sorted(roots):
            root = self._live_root(table, root_pid)
            if root is None:
                continue
            shape = self._shapes.get(root_pid)
            members = None
            if quiet and shape is not None and root.prev_cpu is not None:
                members = same_members(table, root, shape)
            if members is None:
                members = walk_tree(table, kids_of, root, roots)
            trees.append((root, members))
        self._shapes = {
            root.st.pid: [(p.st.pid, p.st.ppid) for p in members[1:]] for root, members in trees
        }
        self._replace_table(src, table.new, trees)
        return trees

    def _live_root(self, table: ProcessTable, root_pid: int) -> Proc | None:
        """The root's process, or None (and not followed again) if it exited or never existed."""
        root = table.get(root_pid)
        seen = self._roots.get(root_pid)
        if root is not None and (seen is None or seen == root.st.starttime):
            self._roots[root_pid] = root.st.starttime
            return root
        if seen is None:
            log.info("tracked pid %d does not exist; not tracking it", root_pid)
        else:
            log.info("tracked process %d exited; no longer tracking it", root_pid)
        self._gone.add(root_pid)
        self._instances.forget(str(root_pid))
        self._roots.pop(root_pid, None)
        self._summary_tags.pop(root_pid, None)
        return None

    def _replace_table(
        self, src: Source, sampled: dict[int, Proc], trees: list[tuple[Proc, list[Proc]]]
    ) -> None:
        old = self._procs
        table = {p.st.pid: p for _, members in trees for p in members}
        for pid in (old.keys() | sampled.keys()) - table.keys():
            if pid in old:
                log.debug("process %d (%s) left the tracked trees", pid, old[pid].st.comm)
            src.release(pid)
        self._procs = table

    def _emit_tree(
        self, emit: Emit, now_ns: int, tick: TickContext, root: Proc, members: list[Proc]
    ) -> None:
        # Deltas exist when the system and the tree's root were both sampled at the previous tick.
        # A descendant new since then was born in the interval: all its CPU time was spent in it.
        history = tick.d_total > 0 and root.prev_cpu is not None
        root_pid = root.st.pid
        tree = str(root_pid)
        main, desc = Sum(), Sum()
        per_process = self.config.per_process
        rows: list[tuple[Proc, int]] = []
        for p in members:
            prev = p.prev_cpu
            d = (p.cpu - prev if p.cpu > prev else 0) if prev is not None else p.cpu
            (main if p is root else desc).add(p, d)
            if per_process:
                rows.append((p, d))
        tags = self._summary_tags.get(root_pid)
        if tags is None:
            tags = self._summary_tags[root_pid] = tuple(
                {"tree": tree, "scope": scope} for scope in _SCOPES
            )
        for t, s in zip(tags, (main, desc, main.merged(desc)), strict=True):
            f = process_fields(tick, history, s.cpu, s.d, s.rss, s.threads, s.memory(), s.count)
            emit(Point("process", t, f, now_ns))
        rows.sort(key=lambda r: r[0].st.pid)
        if not self.config.pid_tag and rows:
            self._instances.update(tree, [(p.st.comm, p.st.pid) for p, _ in rows])
        for p, d in rows:
            st = p.st
            fields = process_fields(
                tick, history, p.cpu, d, st.rss_pages, st.num_threads, p.detail, -1
            )
            if not self.config.pid_tag:
                fields["pid"] = p.st.pid
            emit(Point("process", self._pid_tags(p, tree), fields, now_ns))

    def _pid_tags(self, p: Proc, tree: str) -> dict[str, str]:
        st = p.st
        ptags = p.tags.get(tree)
        if ptags is None or ptags["comm"] != st.comm:
            ptags = {"tree": tree, "scope": "pid", "comm": st.comm}
            if self.config.pid_tag:
                ptags["pid"] = str(st.pid)
            else:
                ptags["instance"] = str(self._instances.get(tree, st.comm, st.pid))
            # A process is in one tree at a time: the tags of a tree it left go (back in it
            # later, its slot there may be another process's by then).
            p.tags = {tree: ptags}
        return ptags
