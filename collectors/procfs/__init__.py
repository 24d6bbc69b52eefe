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
or ``pid`` with tags ``pid`` and ``comm``). Ratios need two samples: the first tick emits none.
Time base of every ratio is the system's own tick count: Δ(total ticks of ``/proc/stat``), which
is ``online CPUs × Δwall × USER_HZ`` and comes from the same clock as the process counters.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option
from acquisition.errors import ConfigError, NoData
from acquisition.point import FieldValue, Point

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

_NS = 1_000_000_000
_BACKENDS = ("auto", "procfs", "psutil")
_DESCENDANTS = ("auto", "children", "scan")
# Kept descriptors for a process's task/<tid>/children files; threads beyond this are read by path
# so that a process with hundreds of threads cannot exhaust the agent's descriptor limit.
_MAX_KEPT_CHILDREN_FDS = 16
_MEMINFO_KEYS = (
    b"MemTotal",
    b"MemFree",
    b"MemAvailable",
    b"Buffers",
    b"Cached",
    b"SwapTotal",
    b"SwapFree",
)


# --- configuration -----------------------------------------------------------------------------


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
    per_process: bool = option(True, "emit a scope=pid point per process besides the tree sums")
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

    def validate(self) -> None:
        """Raise ValueError on a bad value (the core turns it into a ConfigError)."""
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {self.backend!r}")
        if self.descendants not in _DESCENDANTS:
            raise ValueError(f"descendants must be one of {_DESCENDANTS}, got {self.descendants!r}")
        if self.memory_detail_interval < 0:
            raise ValueError("memory_detail_interval must be >= 0")
        bad = [p for p in self.pids if isinstance(p, bool) or not isinstance(p, int) or p <= 0]
        if bad:
            raise ValueError(f"pids must be positive integers, got {bad}")


# --- pure parsers ------------------------------------------------------------------------------


class CpuTimes(NamedTuple):
    """One ``/proc/stat`` cpu line, in ticks (``guest`` is already inside ``user``)."""

    user: int = 0
    nice: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0
    guest: int = 0
    guest_nice: int = 0


def parse_proc_stat(data: bytes) -> dict[str, CpuTimes]:
    """The cpu lines of ``/proc/stat``, keyed ``total`` (the ``cpu`` line) and ``cpuN``.

    Older kernels print fewer columns; the missing ones read 0. Offline CPUs have no line.
    """
    out: dict[str, CpuTimes] = {}
    end = data.find(b"\nintr")  # the cpu lines come first; intr is long and not needed
    for line in (data[:end] if end > 0 else data).split(b"\n"):
        if line.startswith(b"cpu"):
            parts = line.split()
            name = parts[0].decode("ascii")
            out["total" if name == "cpu" else name] = CpuTimes(*map(int, parts[1:11]))
    return out


def parse_forks(data: bytes) -> int | None:
    """The ``processes`` line of ``/proc/stat``: tasks (processes and threads) created since boot."""
    i = data.find(b"\nprocesses ")
    if i < 0:
        return None
    j = data.find(b"\n", i + 1)
    return int(data[i + 11 : j if j > 0 else len(data)])


def parse_meminfo(data: bytes, keys: Iterable[bytes] | None = None) -> dict[str, int]:
    """``/proc/meminfo`` as ``{key: value}``; ``kB`` values are converted to bytes.

    With ``keys``, only those that are present are returned (found directly, not line by line).
    """
    out: dict[str, int] = {}
    if keys is None:
        for line in data.split(b"\n"):
            key, sep, rest = line.partition(b":")
            parts = rest.split()
            if sep and parts and b" " not in key:
                out[key.decode("ascii")] = _kib(parts)
        return out
    data = b"\n" + data
    for key in keys:
        i = data.find(b"\n" + key + b":")
        if i >= 0:
            j = data.find(b"\n", i + 1)
            parts = data[i + len(key) + 2 : j if j > 0 else len(data)].split()
            if parts:
                out[key.decode("ascii")] = _kib(parts)
    return out


def _kib(parts: list[bytes]) -> int:
    value = int(parts[0])
    return value * 1024 if len(parts) > 1 and parts[1] == b"kB" else value


_new_tuple = tuple.__new__


class PidStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` that nrg uses (ticks and pages, as the kernel gives)."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    rss_pages: int


def parse_pid_stat(data: bytes) -> PidStat:
    """Parse ``/proc/<pid>/stat``.

    ``comm`` sits in parentheses and may itself hold spaces and parentheses, so the numeric
    fields are split after the *last* ``)``: there, index = man-page field number - 3.
    """
    lp = data.index(b"(")
    rp = data.rindex(b")")
    rest = data[rp + 2 :].split(b" ", 22)
    # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs for every tracked
    # process at every tick.
    return _new_tuple(
        PidStat,
        (
            int(data[:lp]),
            data[lp + 1 : rp].decode("utf-8", "replace"),
            rest[0].decode("ascii", "replace"),
            int(rest[1]),
            int(rest[11]),
            int(rest[12]),
            int(rest[17]),
            int(rest[19]),
            int(rest[21]),
        ),
    )


def parse_children(data: bytes) -> list[int]:
    """``/proc/<pid>/task/<tid>/children``: space-separated pids."""
    return [int(v) for v in data.split()]


def parse_smaps_rollup(data: bytes) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup`` as ``{key: bytes}`` (the ``[rollup]`` header line skipped)."""
    out: dict[str, int] = {}
    for line in data.split(b"\n"):
        key, sep, rest = line.partition(b":")
        if not sep or b" " in key:
            continue
        parts = rest.split()
        if len(parts) == 2 and parts[1] == b"kB":
            out[key.decode("ascii")] = int(parts[0]) * 1024
    return out


def parse_statm(data: bytes) -> tuple[int, ...]:
    """``/proc/<pid>/statm``: size resident shared text lib data dt, in pages."""
    return tuple(int(v) for v in data.split())


class MemInfo(NamedTuple):
    """System memory in bytes."""

    total: int
    available: int
    free: int
    swap_total: int
    swap_free: int


def meminfo_from_fields(fields: dict[str, int]) -> MemInfo:
    """System memory from parsed ``/proc/meminfo``.

    Available is ``MemAvailable`` (kernels before 3.14 lack it: MemFree + Buffers + Cached
    instead); inside LXC it can exceed the total, and then MemFree is used, as psutil does.
    """
    total = fields["MemTotal"]
    free = fields["MemFree"]
    available = fields.get("MemAvailable")
    if available is None:
        available = free + fields.get("Buffers", 0) + fields.get("Cached", 0)
    if available > total:
        available = free
    return MemInfo(total, available, free, fields.get("SwapTotal", 0), fields.get("SwapFree", 0))


def memory_fields(mem: MemInfo) -> dict[str, FieldValue]:
    """Fields of the ``memory`` point; used = total - available (never total - free)."""
    used = mem.total - mem.available
    out: dict[str, FieldValue] = {
        "total_bytes": mem.total,
        "available_bytes": mem.available,
        "used_bytes": used,
        "free_bytes": mem.free,
    }
    if mem.total > 0:
        out["used_ratio"] = used / mem.total
    out["swap_total_bytes"] = mem.swap_total
    out["swap_used_bytes"] = mem.swap_total - mem.swap_free
    return out


def _clamp01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _cpu_total(t: CpuTimes) -> int:
    # guest and guest_nice are already counted in user and nice.
    return sum(t) - t.guest - t.guest_nice


def _cpu_idle(t: CpuTimes) -> int:
    return t.idle + t.iowait


def cpu_ratio_fields(prev: CpuTimes, cur: CpuTimes) -> dict[str, FieldValue] | None:
    """Fields of a ``cpu`` point from two samples of one cpu line, or None without a delta.

    utilization = Δ(total - idle - iowait) / Δtotal, where total excludes guest time (already in
    user). user = user + nice - guest, system = system + irq + softirq, guest = guest +
    guest_nice, so utilization = user + system + steal + guest. iowait "is not reliable" and may
    go backwards, so every ratio is clamped to 0..1.
    """
    dt = _cpu_total(cur) - _cpu_total(prev)
    if dt <= 0:
        return None
    busy = dt - (_cpu_idle(cur) - _cpu_idle(prev))
    user = (cur.user + cur.nice - cur.guest - cur.guest_nice) - (
        prev.user + prev.nice - prev.guest - prev.guest_nice
    )
    system = (cur.system + cur.irq + cur.softirq) - (prev.system + prev.irq + prev.softirq)
    guest = (cur.guest + cur.guest_nice) - (prev.guest + prev.guest_nice)
    return {
        "utilization_ratio": _clamp01(busy / dt),
        "user_ratio": _clamp01(user / dt),
        "system_ratio": _clamp01(system / dt),
        "iowait_ratio": _clamp01((cur.iowait - prev.iowait) / dt),
        "steal_ratio": _clamp01((cur.steal - prev.steal) / dt),
        "guest_ratio": _clamp01(guest / dt),
    }


class MemoryDetail(NamedTuple):
    """A process's memory split, in bytes; ``pss``/``swap`` are None where the source lacks them."""

    private: int
    shared: int
    pss: int | None
    swap: int | None


def memory_detail_from_smaps_rollup(rollup: dict[str, int]) -> MemoryDetail:
    """private = Private_Clean + Private_Dirty (USS), shared = Shared_Clean + Shared_Dirty.

    Hugetlb pages are left out, as they are of Rss. An empty rollup (zombie) gives zeros.
    """
    g = rollup.get
    return MemoryDetail(
        g("Private_Clean", 0) + g("Private_Dirty", 0),
        g("Shared_Clean", 0) + g("Shared_Dirty", 0),
        g("Pss", 0),
        g("Swap", 0),
    )


def memory_detail_from_statm(statm: tuple[int, ...], page_size: int) -> MemoryDetail:
    """Approximation where smaps_rollup cannot be read: shared = file-backed + shmem resident
    pages (statm ``shared``), private = resident - shared (the anonymous pages)."""
    resident, shared = statm[1], statm[2]
    return MemoryDetail(max(resident - shared, 0) * page_size, shared * page_size, None, None)


# --- sources -----------------------------------------------------------------------------------


class _Source(Protocol):
    """Where readings come from. Process readings are :class:`PidStat` in the source's units:
    CPU times in 1/``hz`` s, rss in units of ``page_size`` bytes, starttime comparable within
    the source (with the pid, the identity of a process)."""

    name: str
    hz: int
    page_size: int

    def available(self) -> bool: ...
    def open(self) -> None: ...
    def close(self) -> None: ...
    def begin_tick(self) -> None: ...
    def self_pid(self) -> int | None: ...
    def cpu_times(self) -> dict[str, CpuTimes]: ...
    def forks(self) -> int | None: ...
    def memory(self) -> MemInfo: ...
    def sample(self, pid: int) -> PidStat | None: ...
    def children(self, pid: int, threads: int, now_ns: int) -> list[int] | None: ...
    def scan(self) -> dict[int, tuple[int, int]]: ...
    def detail(self, pid: int) -> MemoryDetail | None: ...
    def release(self, pid: int) -> None: ...
    def describe(self) -> str: ...


def _read_path(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _pread_all(fd: int, size: int) -> bytes:
    data = os.pread(fd, size, 0)
    while len(data) == size:
        size *= 4
        data = os.pread(fd, size, 0)
    return data


class _Handle:
    """Descriptors kept open for one process (procfs on a live /proc only)."""

    __slots__ = ("child_fds", "stat_fd", "tids", "tids_ns", "tids_threads")

    def __init__(self) -> None:
        self.stat_fd = -1
        self.tids: list[int] | None = None
        self.tids_threads = -1
        self.tids_ns = 0
        self.child_fds: dict[int, int] = {}

    def close(self) -> int:
        """Close every descriptor; returns how many were open."""
        n = len(self.child_fds)
        if self.stat_fd >= 0:
            os.close(self.stat_fd)
            self.stat_fd = -1
            n += 1
        for fd in self.child_fds.values():
            os.close(fd)
        self.child_fds.clear()
        return n


class _ProcfsSource:
    name = "procfs"

    def __init__(
        self, root: str, *, hz: int, page_size: int, descendants: str, relist_ns: int
    ) -> None:
        self.proc = os.path.join(root, "proc")
        self.root = root
        self.hz = hz
        self.page_size = page_size
        self.relist_ns = relist_ns
        self.keep_open = False
        self.max_kept = 0  # descriptors kept open for processes, at most (set by open)
        self._kept = 0
        self._stat_fd = -1
        self._meminfo_fd = -1
        self._stat_size = 4096
        self._forks: int | None = None
        self._handles: dict[int, _Handle] = {}
        self._children_ok: bool | None = (
            None if descendants == "auto" else descendants == "children"
        )
        self._scan_samples: dict[int, PidStat] | None = None

    def available(self) -> bool:
        return os.path.exists(os.path.join(self.proc, "stat"))

    def open(self) -> None:
        path = os.path.join(self.proc, "stat")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise NoData(f"cannot read {path}: {exc.strerror}") from exc
        # procfs files report size 0 and are regenerated on every read, so a descriptor kept open
        # and pread at offset 0 sees fresh values. A captured tree holds regular files that tests
        # replace between steps: there a kept descriptor would read the old file.
        self.keep_open = st.st_size == 0
        # Stay well inside the descriptor limit the agent shares with sinks and sockets; past
        # this many, process files are opened and closed at each read instead.
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.max_kept = 1024 if soft == resource.RLIM_INFINITY else min(1024, soft // 4)
        pid = self.self_pid()
        if self._children_ok is None and pid is not None:
            task = f"{self.proc}/{pid}/task"
            if os.path.isdir(task):
                self._children_ok = os.path.exists(f"{task}/{pid}/children")
        if self.keep_open:
            self._stat_fd = os.open(path, os.O_RDONLY)
            self._meminfo_fd = os.open(os.path.join(self.proc, "meminfo"), os.O_RDONLY)

    def close(self) -> None:
        for h in self._handles.values():
            h.close()
        self._handles.clear()
        self._kept = 0
        for fd in (self._stat_fd, self._meminfo_fd):
            if fd >= 0:
                os.close(fd)
        self._stat_fd = self._meminfo_fd = -1

    def begin_tick(self) -> None:
        self._scan_samples = None

    def self_pid(self) -> int | None:
        try:
            return int(os.readlink(os.path.join(self.proc, "self")))
        except (OSError, ValueError):
            return os.getpid() if os.path.realpath(self.root) == "/" else None

    def cpu_times(self) -> dict[str, CpuTimes]:
        if self._stat_fd < 0:
            data = _read_path(os.path.join(self.proc, "stat"))
        else:
            data = _pread_all(self._stat_fd, self._stat_size)
            self._stat_size = max(self._stat_size, 2 * len(data))
        self._forks = parse_forks(data)
        return parse_proc_stat(data)

    def forks(self) -> int | None:
        return self._forks

    def memory(self) -> MemInfo:
        if self._meminfo_fd < 0:
            data = _read_path(os.path.join(self.proc, "meminfo"))
        else:
            data = _pread_all(self._meminfo_fd, 8192)
        return meminfo_from_fields(parse_meminfo(data, _MEMINFO_KEYS))

    def sample(self, pid: int) -> PidStat | None:
        if self._scan_samples is not None:
            cached = self._scan_samples.get(pid)
            if cached is not None:
                return cached
        h = self._handles.get(pid)
        if h is not None and h.stat_fd >= 0:
            try:
                return parse_pid_stat(os.pread(h.stat_fd, 4096, 0))
            except ProcessLookupError:
                # The process we held exited (an open fd does not pin a pid); the pid may already
                # belong to a new process, which the open below finds.
                self.release(pid)
                h = None
            except (OSError, ValueError, IndexError):
                self.release(pid)
                return None
        path = f"{self.proc}/{pid}/stat"
        try:
            if not self.keep_open or self._kept >= self.max_kept:
                return parse_pid_stat(_read_path(path))
            fd = os.open(path, os.O_RDONLY)
            if h is None:
                h = self._handles[pid] = _Handle()
            h.stat_fd = fd
            self._kept += 1
            return parse_pid_stat(os.pread(fd, 4096, 0))
        except (OSError, ValueError, IndexError) as exc:
            log.debug("pid %d: stat unreadable (%s)", pid, exc)
            self.release(pid)
            return None

    def _list_tids(self, pid: int, h: _Handle, threads: int, now_ns: int) -> list[int]:
        tids = sorted(int(t) for t in os.listdir(f"{self.proc}/{pid}/task") if t.isdigit())
        for tid in [t for t in h.child_fds if t not in tids]:
            os.close(h.child_fds.pop(tid))
            self._kept -= 1
        h.tids, h.tids_threads, h.tids_ns = tids, threads, now_ns
        return tids

    def children(self, pid: int, threads: int, now_ns: int) -> list[int] | None:
        if self._children_ok is False:
            return None
        h = self._handles.get(pid)
        if h is None:
            h = self._handles[pid] = _Handle()
        tids = h.tids
        # Thread lists change rarely; re-list when the thread count changes, when a listed thread
        # is gone, and at least every relist interval (a thread replaced by another).
        if tids is None or h.tids_threads != threads or now_ns - h.tids_ns >= self.relist_ns:
            try:
                tids = self._list_tids(pid, h, threads, now_ns)
            except OSError:
                return []
        out: list[int] = []
        fds = h.child_fds
        for tid in tids:
            try:
                fd = fds.get(tid, -1)
                if fd >= 0:
                    data = os.pread(fd, 65536, 0)
                    if len(data) == 65536:
                        data = _pread_all(fd, 65536)
                else:
                    path = f"{self.proc}/{pid}/task/{tid}/children"
                    if (
                        self.keep_open
                        and len(fds) < _MAX_KEPT_CHILDREN_FDS
                        and self._kept < self.max_kept
                    ):
                        fd = fds[tid] = os.open(path, os.O_RDONLY)
                        self._kept += 1
                        data = _pread_all(fd, 65536)
                    else:
                        data = _read_path(path)
            except OSError:
                if self._children_ok is None and os.path.isdir(f"{self.proc}/{pid}/task/{tid}"):
                    self._children_ok = False
                    log.info("%s lacks task/*/children; finding descendants by scan", self.proc)
                    return None
                fd = fds.pop(tid, -1)
                if fd >= 0:
                    os.close(fd)
                    self._kept -= 1
                h.tids = None  # that thread exited: re-list next time
                continue
            self._children_ok = True
            if data:
                out += parse_children(data)
        return out

    def scan(self) -> dict[int, tuple[int, int]]:
        samples: dict[int, PidStat] = {}
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            try:
                s = parse_pid_stat(_read_path(f"{self.proc}/{name}/stat"))
            except (OSError, ValueError, IndexError):
                continue  # exited while scanning, or hidden (hidepid)
            samples[s.pid] = s
        self._scan_samples = samples
        return {pid: (s.ppid, s.starttime) for pid, s in samples.items()}

    def detail(self, pid: int) -> MemoryDetail | None:
        try:
            return memory_detail_from_smaps_rollup(
                parse_smaps_rollup(_read_path(f"{self.proc}/{pid}/smaps_rollup"))
            )
        except (OSError, ValueError):
            # Absent before Linux 4.14, and it "raises ESRCH / ENOENT for many PIDs, even if
            # they're alive" (psutil); statm has the resident/shared split.
            pass
        try:
            return memory_detail_from_statm(
                parse_statm(_read_path(f"{self.proc}/{pid}/statm")), self.page_size
            )
        except (OSError, ValueError, IndexError):
            return None

    def release(self, pid: int) -> None:
        h = self._handles.pop(pid, None)
        if h is not None:
            self._kept -= h.close()

    def describe(self) -> str:
        how = {None: "auto", True: "task/*/children", False: "ppid scan"}[self._children_ok]
        return f"procfs at {self.proc}, descendants by {how}"


def _psutil_cpu(t: Any) -> CpuTimes:
    return CpuTimes(*[round(getattr(t, name, 0.0) * 1_000_000) for name in CpuTimes._fields])


def _psutil() -> Any:
    """psutil, imported on first use: most machines never need it and it costs start-up time."""
    import psutil

    return psutil


class _PsutilSource:
    """The same readings through psutil, for machines without procfs (macOS).

    CPU times in µs, rss in bytes (page unit 1), start = creation time in µs since the epoch.
    """

    name = "psutil"
    hz = 1_000_000
    page_size = 1

    def available(self) -> bool:
        return True

    def open(self) -> None:
        _psutil().cpu_times()

    def close(self) -> None:
        pass

    def begin_tick(self) -> None:
        pass

    def self_pid(self) -> int | None:
        return os.getpid()

    def cpu_times(self) -> dict[str, CpuTimes]:
        out = {"total": _psutil_cpu(_psutil().cpu_times())}
        for i, t in enumerate(_psutil().cpu_times(percpu=True)):
            out[f"cpu{i}"] = _psutil_cpu(t)
        return out

    def forks(self) -> int | None:
        return None  # unknown: descendants are looked for at every tick

    def memory(self) -> MemInfo:
        vm = _psutil().virtual_memory()
        sm = _psutil().swap_memory()
        return MemInfo(vm.total, vm.available, vm.free, sm.total, sm.free)

    def sample(self, pid: int) -> PidStat | None:
        # A fresh Process each time: psutil caches create_time, so a reused pid would otherwise
        # pass for the old process.
        try:
            p = _psutil().Process(pid)
            with p.oneshot():
                ct = p.cpu_times()
                return PidStat(
                    pid,
                    p.name(),
                    "Z" if p.status() == _psutil().STATUS_ZOMBIE else "R",
                    p.ppid(),
                    round(ct.user * 1_000_000),
                    round(ct.system * 1_000_000),
                    p.num_threads(),
                    round(p.create_time() * 1_000_000),
                    p.memory_info().rss,
                )
        except (_psutil().Error, OSError) as exc:
            log.debug("pid %d: unreadable through psutil (%s)", pid, exc)
            return None

    def children(self, pid: int, threads: int, now_ns: int) -> list[int] | None:
        return None

    def scan(self) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for p in _psutil().process_iter(["ppid", "create_time"]):
            ppid, ct = p.info["ppid"], p.info["create_time"]
            if ppid is not None and ct is not None:
                out[p.pid] = (ppid, round(ct * 1_000_000))
        return out

    def detail(self, pid: int) -> MemoryDetail | None:
        try:
            m = _psutil().Process(pid).memory_full_info()
        except (_psutil().Error, OSError):
            return None
        return MemoryDetail(
            m.uss, max(m.rss - m.uss, 0), getattr(m, "pss", None), getattr(m, "swap", None)
        )

    def release(self, pid: int) -> None:
        pass

    def describe(self) -> str:
        return "psutil, descendants by ppid scan"


# --- the collector -----------------------------------------------------------------------------


class _Proc:
    """A tracked process across ticks (identity: pid and starttime)."""

    __slots__ = ("cpu", "detail", "detail_ns", "prev_cpu", "st", "tags")

    def __init__(self, st: PidStat) -> None:
        self.st = st
        self.cpu = st.utime + st.stime
        self.prev_cpu: int | None = None  # CPU time at the previous tick; None when first seen
        self.detail: MemoryDetail | None = None
        self.detail_ns = 0
        self.tags: dict[str, dict[str, str]] = {}  # tree -> tags of its scope=pid point


class _Sum:
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

    def add(self, p: _Proc, d: int) -> None:
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

    def merged(self, other: _Sum) -> _Sum:
        out = _Sum()
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
        """``clock_ticks``/``page_size`` override USER_HZ and the page size (this machine's by
        default), for trees captured on another machine."""
        try:
            config.validate()
        except ValueError as exc:
            raise ConfigError(f"[collectors.procfs] {exc}") from exc
        self.config = config
        self._shared: set[Any] = context.status.setdefault("tracked_pids", set())
        self._detail_ns = round(config.memory_detail_interval * _NS)
        self._hz = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._source: _Source | None = None
        self._self_pid: int | None = None
        self._prev_cpus: dict[str, CpuTimes] | None = None
        self._procs: dict[int, _Proc] = {}
        self._roots: dict[int, int] = {}  # root pid -> starttime, once seen
        self._gone: set[int] = set()  # roots that exited (or never existed): not followed again
        self._summary_tags: dict[int, tuple[dict[str, str], ...]] = {}
        self._forks: int | None = None
        # root pid -> (pid, ppid) of its descendants at the last tick, parents before children
        self._shapes: dict[int, list[tuple[int, int]]] = {}

    def _make_source(self) -> _Source:
        cfg = self.config
        procfs = _ProcfsSource(
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
        return _PsutilSource()

    async def open(self) -> None:
        source = self._make_source()
        source.open()
        self._source = source
        if self.config.track_self:
            self._self_pid = source.self_pid()

    async def aclose(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
        self._procs.clear()
        self._shapes.clear()
        self._prev_cpus = self._forks = None

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

        d_total = d_busy = 0
        if prev is not None:
            for name, cur in cpus.items():
                if name != "total" and not self.config.per_core:
                    continue
                old = prev.get(name)
                if old is None:
                    continue  # came online since the last tick
                fields = cpu_ratio_fields(old, cur)
                if fields is not None:
                    emit(Point("cpu", {"cpu": name}, fields, now_ns))
            cur_t, old_t = cpus.get("total"), prev.get("total")
            if cur_t is not None and old_t is not None:
                d_total = max(_cpu_total(cur_t) - _cpu_total(old_t), 0)
                d_busy = max(d_total - (_cpu_idle(cur_t) - _cpu_idle(old_t)), 0)
        emit(Point("memory", {}, memory_fields(mem), now_ns))

        roots = self._root_pids()
        if not roots and not self._procs:
            return
        # No task created anywhere since the last tick: no tree can have gained a member.
        quiet = forks is not None and forks == prev_forks
        trees = self._discover(src, roots, now_ns, quiet)
        if self.config.memory_detail:
            for p in self._procs.values():
                if p.detail is None or now_ns - p.detail_ns >= self._detail_ns:
                    m = src.detail(p.st.pid)
                    if m is not None:
                        p.detail, p.detail_ns = m, now_ns
        n_online = max(len(cpus) - ("total" in cpus), 1)
        used = mem.total - mem.available
        for root, members in trees:
            self._emit_tree(emit, now_ns, root, members, d_total, d_busy, n_online, used)

    def _discover(
        self, src: _Source, roots: set[int], now_ns: int, quiet: bool
    ) -> list[tuple[_Proc, list[_Proc]]]:
        """Find every tracked tree's live members and update the process table.

        When ``quiet`` (the kernel's fork counter did not move), a tree whose previous members are
        all alive, unchanged and still children of their previous parents keeps them without
        reading any children file; otherwise it is walked again.
        """
        old = self._procs
        new: dict[int, _Proc] = {}

        def get(pid: int) -> _Proc | None:
            p = new.get(pid)
            if p is not None:
                return p
            st = src.sample(pid)
            if st is None:
                return None
            p = old.get(pid)
            if p is not None and p.st.starttime == st.starttime:
                p.prev_cpu = p.cpu
                p.st = st
                p.cpu = st.utime + st.stime
            else:
                p = _Proc(st)  # new, or the pid now belongs to another process
            new[pid] = p
            return p

        ppid_map: dict[int, list[tuple[int, int]]] | None = None
        trees: list[tuple[_Proc, list[_Proc]]] = []
        for root_pid in sorted(roots):
            root = get(root_pid)
            seen = self._roots.get(root_pid)
            if root is None or (seen is not None and seen != root.st.starttime):
                if seen is None:
                    log.info("tracked pid %d does not exist; not tracking it", root_pid)
                else:
                    log.info("tracked process %d exited; no longer tracking it", root_pid)
                self._gone.add(root_pid)
                self._roots.pop(root_pid, None)
                self._summary_tags.pop(root_pid, None)
                continue
            self._roots[root_pid] = root.st.starttime
            shape = self._shapes.get(root_pid)
            if quiet and shape is not None and root.prev_cpu is not None:
                same = self._same_members(get, root, shape)
                if same is not None:
                    trees.append((root, same))
                    continue
            members = [root]
            in_tree = {root_pid}
            stack = [root]
            while stack:
                parent = stack.pop()
                pst = parent.st
                kids = src.children(pst.pid, pst.num_threads, now_ns)
                if kids is None:
                    if ppid_map is None:
                        ppid_map = {}
                        for pid, (ppid, start) in src.scan().items():
                            ppid_map.setdefault(ppid, []).append((pid, start))
                    kids = [pid for pid, _ in ppid_map.get(pst.pid, ())]
                for pid in kids:
                    if pid in in_tree:
                        continue
                    child = get(pid)
                    # A pid listed as a child but now another process's, or started before its
                    # parent (a reused pid), is not a descendant.
                    if child is None or child.st.ppid != pst.pid:
                        continue
                    if child.st.starttime < pst.starttime:
                        continue
                    in_tree.add(pid)
                    members.append(child)
                    stack.append(child)
            trees.append((root, members))

        self._shapes = {
            root.st.pid: [(p.st.pid, p.st.ppid) for p in members[1:]] for root, members in trees
        }
        table = {p.st.pid: p for _, members in trees for p in members}
        for pid in (old.keys() | new.keys()) - table.keys():
            if pid in old:
                log.debug("process %d (%s) left the tracked trees", pid, old[pid].st.comm)
            src.release(pid)
        self._procs = table
        return trees

    @staticmethod
    def _same_members(
        get: Callable[[int], _Proc | None], root: _Proc, shape: list[tuple[int, int]]
    ) -> list[_Proc] | None:
        """The previous members again, or None if any exited, changed or moved."""
        members = [root]
        alive = {root.st.pid}
        for pid, ppid in shape:
            p = get(pid)
            if p is None or p.prev_cpu is None or p.st.ppid != ppid or ppid not in alive:
                return None
            members.append(p)
            alive.add(pid)
        return members

    def _emit_tree(
        self,
        emit: Emit,
        now_ns: int,
        root: _Proc,
        members: list[_Proc],
        d_total: int,
        d_busy: int,
        n_online: int,
        used: int,
    ) -> None:
        src = self._source
        assert src is not None
        hz = src.hz
        page = src.page_size
        detail_on = self.config.memory_detail
        # Deltas exist when the system and the tree's root were both sampled at the previous tick.
        # A descendant new since then was born in the interval: all its CPU time was spent in it.
        history = d_total > 0 and root.prev_cpu is not None
        root_pid = root.st.pid
        tree = str(root_pid)
        main, desc = _Sum(), _Sum()
        per_process = self.config.per_process
        rows: list[tuple[_Proc, int]] = []
        for p in members:
            prev = p.prev_cpu
            d = (p.cpu - prev if p.cpu > prev else 0) if prev is not None else p.cpu
            (main if p is root else desc).add(p, d)
            if per_process:
                rows.append((p, d))

        def fields(
            cpu: int, d: int, rss_pages: int, threads: int, m: MemoryDetail | None, count: int
        ) -> dict[str, FieldValue]:
            out: dict[str, FieldValue] = {"cpu_seconds": cpu / hz}
            if history:
                out["cpu_utilization_ratio"] = d / d_total
                out["cpu_cores"] = d * n_online / d_total
                if d_busy > 0:
                    share = d / d_busy
                    out["cpu_busy_share_ratio"] = share if share < 1.0 else 1.0
            rss = rss_pages * page
            out["rss_bytes"] = rss
            if detail_on and m is not None:
                out["private_bytes"] = m.private
                out["shared_bytes"] = m.shared
                if m.pss is not None:
                    out["pss_bytes"] = m.pss
                if m.swap is not None:
                    out["swap_bytes"] = m.swap
            if used > 0:
                out["memory_used_share_ratio"] = rss / used
            out["threads"] = threads
            if count >= 0:
                out["process_count"] = count
            return out

        tags = self._summary_tags.get(root_pid)
        if tags is None:
            tags = self._summary_tags[root_pid] = tuple(
                {"tree": tree, "scope": scope} for scope in ("main", "descendants", "combined")
            )
        for t, s in zip(tags, (main, desc, main.merged(desc)), strict=True):
            f = fields(s.cpu, s.d, s.rss, s.threads, s.memory(), s.count)
            emit(Point("process", t, f, now_ns))
        if not per_process:
            return
        rows.sort(key=lambda r: r[0].st.pid)
        for p, d in rows:
            st = p.st
            ptags = p.tags.get(tree)
            if ptags is None or ptags["comm"] != st.comm:
                ptags = p.tags[tree] = {
                    "tree": tree,
                    "scope": "pid",
                    "pid": str(st.pid),
                    "comm": st.comm,
                }
            f = fields(p.cpu, d, st.rss_pages, st.num_threads, p.detail, -1)
            emit(Point("process", ptags, f, now_ns))
