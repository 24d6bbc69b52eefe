"""Pure parsers of the procfs files nrg reads, and the derivations on their values.

Every parser takes the file's bytes and raises only :class:`ValueError` (``UnicodeDecodeError``
is one) on text it cannot read; a value outside the int64 range (``2**64 - 1`` from a broken
kernel or a damaged capture) is unreadable, as InfluxDB could not store it. Units are the
kernel's: ticks of USER_HZ, pages, KiB converted to bytes where said.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from acquisition.point import FieldValue

__all__ = [
    "INT64_MAX",
    "CpuTimes",
    "MemInfo",
    "MemoryDetail",
    "PidStat",
    "cpu_idle",
    "cpu_ratio_fields",
    "cpu_total",
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

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
MSG_OUT_OF_RANGE = "value {value} is outside the int64 range"
MSG_MEMINFO_MISSING = "/proc/meminfo has no {key} line"


def _check64(values: Iterable[int]) -> None:
    for v in values:
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError(MSG_OUT_OF_RANGE.format(value=v))


def _int64(token: bytes) -> int:
    value = int(token)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(MSG_OUT_OF_RANGE.format(value=value))
    return value


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
            values = [int(token) for token in parts[1:11]]
            if values and (max(values) > INT64_MAX or min(values) < INT64_MIN):
                _check64(values)  # raises, naming the value
            out["total" if name == "cpu" else name] = CpuTimes(*values)
    return out


def parse_forks(data: bytes) -> int | None:
    """The ``processes`` line of ``/proc/stat``: tasks (processes and threads) created since boot."""
    i = data.find(b"\nprocesses ")
    if i < 0:
        return None
    j = data.find(b"\n", i + 1)
    return _int64(data[i + 11 : j if j > 0 else len(data)])


def parse_meminfo(data: bytes, keys: Iterable[bytes] | None = None) -> dict[str, int]:
    """``/proc/meminfo`` as ``{key: value}``; ``kB`` values are converted to bytes.

    With ``keys``, only those that are present are returned (found directly, not line by line).
    A line whose value is not a number, or is outside int64 once in bytes, is unreadable and
    left out.
    """
    out: dict[str, int] = {}
    if keys is None:
        for line in data.split(b"\n"):
            key, sep, rest = line.partition(b":")
            parts = rest.split()
            if sep and parts and b" " not in key:
                _put(out, key, parts)
        return out
    data = b"\n" + data
    for key in keys:
        i = data.find(b"\n" + key + b":")
        if i >= 0:
            j = data.find(b"\n", i + 1)
            parts = data[i + len(key) + 2 : j if j > 0 else len(data)].split()
            if parts:
                _put(out, key, parts)
    return out


def _put(out: dict[str, int], key: bytes, parts: list[bytes]) -> None:
    try:
        name = key.decode("ascii")
        value = int(parts[0])
    except ValueError:
        return
    if len(parts) > 1 and parts[1] == b"kB":
        value *= 1024
    if INT64_MIN <= value <= INT64_MAX:
        out[name] = value


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
    ValueError for a truncated line or a value outside int64.
    """
    lp = data.index(b"(")
    rp = data.rindex(b")")
    rest = data[rp + 2 :].split(b" ", 22)
    if len(rest) < 22:
        raise ValueError(f"/proc/<pid>/stat has {len(rest)} fields after comm, expected 22+")
    pid = int(data[:lp])
    ppid = int(rest[1])
    utime = int(rest[11])
    stime = int(rest[12])
    threads = int(rest[17])
    start = int(rest[19])
    rss = int(rest[21])
    # One OR and a shift: non-zero only for a negative value or one of 2^63 or more.
    if (pid | ppid | utime | stime | threads | start | rss) >> 63:
        _check64((pid, ppid, utime, stime, threads, start, rss))
    # tuple.__new__ skips the NamedTuple's Python-level __new__: this runs for every tracked
    # process at every tick.
    return _new_tuple(
        PidStat,
        (
            pid,
            data[lp + 1 : rp].decode("utf-8", "replace"),
            rest[0].decode("ascii", "replace"),
            ppid,
            utime,
            stime,
            threads,
            start,
            rss,
        ),
    )


def parse_children(data: bytes) -> list[int]:
    """``/proc/<pid>/task/<tid>/children``: space-separated pids."""
    return [_int64(v) for v in data.split()]


def parse_smaps_rollup(data: bytes) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup`` as ``{key: bytes}`` (the ``[rollup]`` header line skipped)."""
    out: dict[str, int] = {}
    for line in data.split(b"\n"):
        key, sep, rest = line.partition(b":")
        if not sep or b" " in key:
            continue
        parts = rest.split()
        if len(parts) == 2 and parts[1] == b"kB":
            value = int(parts[0]) * 1024
            _check64((value,))
            out[key.decode("ascii")] = value
    return out


def parse_statm(data: bytes) -> tuple[int, ...]:
    """``/proc/<pid>/statm``: size resident shared text lib data dt, in pages (ValueError for
    fewer than 3 values)."""
    values = tuple(_int64(v) for v in data.split())
    if len(values) < 3:
        raise ValueError(f"/proc/<pid>/statm has {len(values)} values, expected 7")
    return values


class MemInfo(NamedTuple):
    """System memory in bytes."""

    total: int
    available: int
    free: int
    swap_total: int
    swap_free: int


def meminfo_from_fields(fields: Mapping[str, int]) -> MemInfo:
    """System memory from parsed ``/proc/meminfo``.

    Available is ``MemAvailable`` (kernels before 3.14 lack it: MemFree + Buffers + Cached
    instead); inside LXC it can exceed the total, and then MemFree is used, as psutil does.
    ValueError without ``MemTotal`` or ``MemFree``, or with a value outside int64.
    """
    for key in ("MemTotal", "MemFree"):
        if key not in fields:
            raise ValueError(MSG_MEMINFO_MISSING.format(key=key))
    _check64(fields.values())
    total = fields["MemTotal"]
    free = fields["MemFree"]
    available = fields.get("MemAvailable")
    if available is None:
        available = free + fields.get("Buffers", 0) + fields.get("Cached", 0)
    if available > total:
        available = free
    return MemInfo(total, available, free, fields.get("SwapTotal", 0), fields.get("SwapFree", 0))


def memory_fields(mem: MemInfo) -> dict[str, FieldValue]:
    """Fields of the ``memory`` point; used = total - available (never total - free).

    ValueError when a value or a difference is outside int64.
    """
    used = mem.total - mem.available
    _check64((*mem, used, mem.swap_total - mem.swap_free))
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


def cpu_total(t: CpuTimes) -> int:
    # guest and guest_nice are already counted in user and nice.
    return sum(t) - t.guest - t.guest_nice


def cpu_idle(t: CpuTimes) -> int:
    return t.idle + t.iowait


def cpu_ratio_fields(prev: CpuTimes, cur: CpuTimes) -> dict[str, FieldValue] | None:
    """Fields of a ``cpu`` point from two samples of one cpu line, or None without a delta.

    utilization = Δ(total - idle - iowait) / Δtotal, where total excludes guest time (already in
    user). user = user + nice - guest, system = system + irq + softirq, guest = guest +
    guest_nice, so utilization = user + system + steal + guest. iowait "is not reliable" and may
    go backwards, so every ratio is clamped to 0..1.
    """
    # This runs for every core on every tick: the ten columns' increases in one pass (not the
    # tuple's named properties), the clamps written out (not a call each).
    user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice = map(
        int.__sub__, cur, prev
    )
    guests = guest + guest_nice
    dt = user + nice + system + idle + iowait + irq + softirq + steal
    if dt <= 0:
        return None
    b = (dt - idle - iowait) / dt
    u = (user + nice - guests) / dt
    s = (system + irq + softirq) / dt
    w = iowait / dt
    t = steal / dt
    g = guests / dt
    return {
        "utilization_ratio": 0.0 if b < 0.0 else 1.0 if b > 1.0 else b,
        "user_ratio": 0.0 if u < 0.0 else 1.0 if u > 1.0 else u,
        "system_ratio": 0.0 if s < 0.0 else 1.0 if s > 1.0 else s,
        "iowait_ratio": 0.0 if w < 0.0 else 1.0 if w > 1.0 else w,
        "steal_ratio": 0.0 if t < 0.0 else 1.0 if t > 1.0 else t,
        "guest_ratio": 0.0 if g < 0.0 else 1.0 if g > 1.0 else g,
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
