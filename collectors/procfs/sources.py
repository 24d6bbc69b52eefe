"""Where procfs readings come from: ``/proc`` files (kept open where that is cheaper) or psutil.

A source gives the collector system CPU times and memory, one :class:`~.parsers.PidStat` per
process, the children of a process (``task/<tid>/children``) or a scan of every process's parent,
and a process's memory split. The module docstring of :mod:`collectors.procfs` gives the costs.
"""

from __future__ import annotations

import logging
import os
import resource
from typing import Any, Protocol

from acquisition.errors import NoData

from .parsers import (
    CpuTimes,
    MemInfo,
    MemoryDetail,
    PidStat,
    meminfo_from_fields,
    memory_detail_from_smaps_rollup,
    memory_detail_from_statm,
    parse_children,
    parse_forks,
    parse_meminfo,
    parse_pid_stat,
    parse_proc_stat,
    parse_smaps_rollup,
    parse_statm,
)

__all__ = ["ProcfsSource", "PsutilSource", "Source"]

log = logging.getLogger("collectors.procfs")

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


class Source(Protocol):
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

    __slots__ = ("child_fds", "stat_fd", "stat_raw", "stat_st", "tids", "tids_ns", "tids_threads")

    def __init__(self) -> None:
        self.stat_fd = -1
        # The last stat text read and its parse: a process that did not run since the last
        # tick (most of a tree, most of the time) gives the same bytes, and is not parsed again.
        self.stat_raw = b""
        self.stat_st: PidStat | None = None
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


class ProcfsSource:
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
                data = os.pread(h.stat_fd, 4096, 0)
                if data == h.stat_raw:
                    return h.stat_st
                st = h.stat_st = parse_pid_stat(data)
                h.stat_raw = data
                return st
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
            data = os.pread(fd, 4096, 0)
            st = h.stat_st = parse_pid_stat(data)
            h.stat_raw = data
            return st
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
                try:
                    out += parse_children(data)
                except ValueError as exc:
                    log.debug("pid %d: children of thread %d unreadable (%s)", pid, tid, exc)
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


class PsutilSource:
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
