"""gpu_tracker's figures from nrg's points: peak RAM, peak GPU RAM, CPU and GPU use, compute time.

Sources (one host, one process tree):

- ``memory``: ``total_bytes`` (system capacity), ``used_bytes`` (total − available);
- ``process`` with ``scope`` ``main``/``descendants``/``combined`` of the tree: ``rss_bytes``
  (total RSS), ``private_bytes``, ``shared_bytes``, ``cpu_cores`` (cores busy: × 100 is
  gpu_tracker's *sum percent*), ``threads``;
- ``cpu`` ``cpu=total``: ``utilization_ratio`` (× 100: *hardware percent*); the number of
  ``cpuN`` series is the core count;
- ``gpu``: ``memory_total_bytes``, ``memory_used_bytes``, ``utilization_ratio``;
- ``gpu_process`` with the same scopes: ``memory_used_bytes``.

Maxima are over samples; means are over samples (equally spaced ticks). The tree is the one the
options name, else the job's (the ``pid`` of its ``nrg_run`` start), else the busiest one.

A run on several hosts (distributed training): the GPU figures cover every host's GPUs (each
GPU is its host's and its index), and as the hosts tick apart their peaks and means are each
host's added (the peak an upper bound). The CPU and RAM figures are those of one host.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from acquisition.point import FieldValue, Point
from acquisition.processors.energy import as_numbers, is_number
from acquisition.summary.model import RAM_UNITS, TIME_UNITS, SummaryOptions

__all__ = ["resources"]

_SCOPES = ("main", "descendants", "combined")


def _num(value: FieldValue | None) -> float | None:
    return float(value) if is_number(value) else None  # type: ignore[arg-type]


def _field(points: list[Point], name: str) -> list[float | None]:
    """Each point's ``name`` field as :func:`_num` gives it (a collector's series, every value
    a plain number: converted at C speed)."""
    return as_numbers([p.fields.get(name) for p in points])


def _max(values: Iterable[float | None], scale: float = 1.0) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) / scale if present else None


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _tree(points: list[Point], options: SummaryOptions) -> str | None:
    if options.tree is not None:
        return options.tree
    trees = {p.tags.get("tree") for p in points if p.measurement == "process"} - {None}
    for p in points:
        if p.measurement == "nrg_run" and p.fields.get("event") == "start":
            pid = str(p.fields.get("pid", ""))
            if pid in trees:
                return pid
    busiest: dict[str, float] = {}
    for p in points:
        if p.measurement == "process" and p.tags.get("scope") == "combined":
            cpu = _num(p.fields.get("cpu_seconds")) or 0.0
            tree = p.tags.get("tree", "")
            busiest[tree] = max(busiest.get(tree, 0.0), cpu)
    return max(busiest, key=lambda t: busiest[t]) if busiest else None


def _percent(sums: list[float | None], hardware: list[float | None]) -> dict[str, float | None]:
    return {
        "max_sum_percent": _max(sums),
        "max_hardware_percent": _max(hardware),
        "mean_sum_percent": _mean(sums),
        "mean_hardware_percent": _mean(hardware),
    }


def _ram(by_scope: dict[str, list[Point]], unit: float) -> dict[str, dict[str, float | None]]:
    return {
        scope: {
            "total_rss": _max((_num(p.fields.get("rss_bytes")) for p in by_scope[scope]), unit),
            "private_rss": _max(
                (_num(p.fields.get("private_bytes")) for p in by_scope[scope]), unit
            ),
            "shared_rss": _max((_num(p.fields.get("shared_bytes")) for p in by_scope[scope]), unit),
        }
        for scope in _SCOPES
    }


def _gpu(
    points: list[Point], tree: str | None, unit: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    gpus = [p for p in points if p.measurement == "gpu"]
    capacity: dict[tuple[str, str], float] = {}
    used_at: dict[tuple[str, int], float] = defaultdict(float)
    util_at: dict[tuple[str, int], float] = defaultdict(float)
    hosts = [p.tags.get("host", "") for p in gpus]
    times = list(zip(hosts, [p.time_ns for p in gpus], strict=True))
    names = list(zip(hosts, [p.tags.get("gpu", "") for p in gpus], strict=True))
    for gpu, total in zip(names, _field(gpus, "memory_total_bytes"), strict=True):
        if total is not None:
            capacity[gpu] = max(capacity.get(gpu, 0.0), total)
    for at, used in zip(times, _field(gpus, "memory_used_bytes"), strict=True):
        if used is not None:
            used_at[at] += used
    for at, ratio in zip(times, _field(gpus, "utilization_ratio"), strict=True):
        if ratio is not None:
            util_at[at] += ratio * 100
    procs = [p for p in points if p.measurement == "gpu_process" and p.tags.get("tree") == tree]
    peaks = [m for m in map(_max, _per_host(used_at).values()) if m is not None]
    ram: dict[str, Any] = {
        "system_capacity": sum(capacity.values()) / unit if capacity else None,
        "system": sum(peaks) / unit if peaks else None,
    }
    for scope in _SCOPES:
        ram[scope] = _max(
            (
                _num(p.fields.get("memory_used_bytes"))
                for p in procs
                if p.tags.get("scope") == scope
            ),
            unit,
        )
    n = len(capacity) or len(set(names))
    util: dict[str, Any] = {
        "system_gpu_count": n,
        "gpu_percentages": _hosts_percent(list(_per_host(util_at).values()), n),
    }
    return ram, util


def _per_host(at: dict[tuple[str, int], float]) -> dict[str, list[float]]:
    """Figures per (host, time) as each host's list, in time order of arrival."""
    out: dict[str, list[float]] = {}
    for (host, _), value in at.items():
        out.setdefault(host, []).append(value)
    return out


def _hosts_percent(sums: list[list[float]], n: int) -> dict[str, float | None]:
    """:func:`_percent` of ``n`` GPUs' use summed at each tick of each host. Hosts tick apart,
    so over several the hosts' figures are added: the peak an upper bound, the mean exact."""
    if len(sums) <= 1:
        one = sums[0] if sums else []
        return _percent(list(one), [s / n if n else None for s in one])
    peak = sum(max(s) for s in sums)
    mean = sum(statistics.fmean(s) for s in sums)
    return {
        "max_sum_percent": peak,
        "max_hardware_percent": peak / n if n else None,
        "mean_sum_percent": mean,
        "mean_hardware_percent": mean / n if n else None,
    }


def resources(points: list[Point], options: SummaryOptions, duration_s: float) -> dict[str, Any]:
    """gpu_tracker's figures (see the module docstring); None where nothing was sampled."""
    ram_unit = RAM_UNITS[options.ram_unit]
    gpu_unit = RAM_UNITS[options.gpu_ram_unit]
    tree = _tree(points, options)
    by_scope: dict[str, list[Point]] = {scope: [] for scope in _SCOPES}
    for p in points:
        if p.measurement == "process" and p.tags.get("tree") == tree:
            scope = p.tags.get("scope", "")
            if scope in by_scope:
                by_scope[scope].append(p)
    memory = [p for p in points if p.measurement == "memory"]
    cores = len({p.tags.get("cpu") for p in points if p.measurement == "cpu"} - {"total", None})
    system_ratio = [
        _num(p.fields.get("utilization_ratio"))
        for p in points
        if p.measurement == "cpu" and p.tags.get("cpu") == "total"
    ]
    hardware = [r * 100 if r is not None else None for r in system_ratio]
    cpu: dict[str, Any] = {
        "system_core_count": cores or None,
        "system": _percent(
            [h * cores if h is not None and cores else None for h in hardware], hardware
        ),
    }
    for scope in _SCOPES:
        sums = [_num(p.fields.get("cpu_cores")) for p in by_scope[scope]]
        sums = [s * 100 if s is not None else None for s in sums]
        cpu[scope] = _percent(sums, [s / cores if s is not None and cores else None for s in sums])
        threads = _max(_num(p.fields.get("threads")) for p in by_scope[scope])
        cpu[f"{scope}_n_threads"] = int(threads) if threads is not None else None
    gpu_ram, gpu_util = _gpu(points, tree, gpu_unit)
    return {
        "tree": tree,
        "max_ram": {
            "unit": options.ram_unit,
            "system_capacity": _max((_num(p.fields.get("total_bytes")) for p in memory), ram_unit),
            "system": _max((_num(p.fields.get("used_bytes")) for p in memory), ram_unit),
            **_ram(by_scope, ram_unit),
        },
        "max_gpu_ram": {"unit": options.gpu_ram_unit, **gpu_ram},
        "cpu_utilization": cpu,
        "gpu_utilization": gpu_util,
        "compute_time": {
            "unit": options.time_unit,
            "time": duration_s / TIME_UNITS[options.time_unit],
        },
    }
