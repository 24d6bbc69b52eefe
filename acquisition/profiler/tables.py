"""Energy rows grouped like ``key_averages()`` and printed in ``key_averages().table()``'s layout.

Times are µs (as the profiler gives them), energies J, power W. A row's error bar combines its
events' bounds as independent errors (root of the sum of squares).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "SORT_KEYS",
    "UNKNOWN_SORT_KEY",
    "EnergyRow",
    "RowEvent",
    "format_table",
    "group_rows",
    "sort_rows",
]

UNKNOWN_SORT_KEY = "energy_table: unknown sort_by {key!r}; use one of: {known}"
SORT_KEYS = {
    "energy_total": "energy_total_j",
    "energy_total_j": "energy_total_j",
    "self_energy": "self_energy_j",
    "self_energy_j": "self_energy_j",
    "mean_power": "mean_power_w",
    "mean_power_w": "mean_power_w",
    "count": "count",
    "cpu_time_total": "cpu_time_total",
    "self_cpu_time_total": "self_cpu_time_total",
    "device_time_total": "device_time_total",
    "self_device_time_total": "self_device_time_total",
    "cuda_time_total": "device_time_total",
    "self_cuda_time_total": "self_device_time_total",
    "cpu_time": "cpu_time_total",
}


@dataclass(frozen=True, slots=True)
class RowEvent:
    """What a row needs of one profiler event and its energy."""

    key: str
    input_shapes: str
    device: bool
    duration_us: float
    total_j: float | None
    self_j: float | None
    error_j: float


@dataclass
class EnergyRow:
    """One group of events: the profiler's fields plus energy."""

    key: str
    input_shapes: str = ""
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    self_device_time_total: float = 0.0
    self_energy_j: float = 0.0
    energy_total_j: float = 0.0
    energy_error_j: float = 0.0
    mean_power_w: float | None = None
    """Total energy over the events' summed duration."""
    measured: int = 0
    """Events of this row that got energy (the others are counted, not guessed)."""
    duration_total_us: float = 0.0
    _error_sq: float = field(default=0.0, repr=False)


def group_rows(events: Iterable[RowEvent], by_input_shape: bool = False) -> list[EnergyRow]:
    """Energy summed per key (and input shapes), in first-seen order."""
    rows: dict[tuple[str, str, bool], EnergyRow] = {}
    for ev in events:
        shapes = ev.input_shapes if by_input_shape else ""
        row = rows.get((ev.key, shapes, ev.device))
        if row is None:
            row = rows[(ev.key, shapes, ev.device)] = EnergyRow(ev.key, shapes)
        row.count += 1
        row.duration_total_us += ev.duration_us
        if ev.total_j is None:
            continue
        row.measured += 1
        row.energy_total_j += ev.total_j
        row.self_energy_j += ev.self_j or 0.0
        row._error_sq += ev.error_j**2
    for row in rows.values():
        row.energy_error_j = math.sqrt(row._error_sq)
        if row.duration_total_us > 0 and row.measured:
            row.mean_power_w = row.energy_total_j / (row.duration_total_us / 1e6)
    return list(rows.values())


def sort_rows(rows: Sequence[EnergyRow], sort_by: str) -> list[EnergyRow]:
    attr = SORT_KEYS.get(sort_by)
    if attr is None:
        known = ", ".join(sorted(SORT_KEYS))
        raise ValueError(UNKNOWN_SORT_KEY.format(key=sort_by, known=known))
    return sorted(rows, key=lambda r: getattr(r, attr) or 0.0, reverse=True)


def _time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _joules(j: float | None) -> str:
    if j is None:
        return "-"
    a = abs(j)
    if a >= 1.0 or a == 0.0:
        return f"{j:.3f}J"
    if a >= 1e-3:
        return f"{j * 1e3:.3f}mJ"
    return f"{j * 1e6:.3f}uJ"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def format_table(
    rows: Sequence[EnergyRow],
    *,
    row_limit: int = 100,
    window_s: float | None = None,
    sources: Sequence[str] = (),
) -> str:
    """``rows`` in ``key_averages().table()``'s layout, with energy columns."""
    devices = any(r.device_time_total for r in rows)
    shapes = any(r.input_shapes for r in rows)
    self_cpu = sum(r.self_cpu_time_total for r in rows)
    self_energy = sum(r.self_energy_j for r in rows)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total"]
    if devices:
        headers += ["Self CUDA", "CUDA total"]
    headers += ["Self energy", "Self energy %", "Total energy", "± Energy", "Mean power"]
    headers += ["# of Calls"] + (["Input Shapes"] if shapes else [])
    shown = rows[:row_limit] if row_limit > 0 else rows
    table = [headers]
    for r in shown:
        line = [r.key, _pct(r.self_cpu_time_total, self_cpu), _time(r.self_cpu_time_total)]
        line += [_pct(r.cpu_time_total, self_cpu), _time(r.cpu_time_total)]
        if devices:
            line += [_time(r.self_device_time_total), _time(r.device_time_total)]
        line += [_joules(r.self_energy_j if r.measured else None)]
        line += [_pct(r.self_energy_j, self_energy) if r.measured else "-"]
        line += [_joules(r.energy_total_j if r.measured else None)]
        line += [_joules(r.energy_error_j if r.measured else None)]
        line += ["-" if r.mean_power_w is None else f"{r.mean_power_w:.2f}W", str(r.count)]
        line += [r.input_shapes] if shapes else []
        table.append(line)
    width = [max(len(row[i]) for row in table) for i in range(len(headers))]
    width[0] = min(width[0], 55)
    sep = "  ".join("-" * w for w in width)

    def render(cells: Sequence[str]) -> str:
        name = cells[0] if len(cells[0]) <= width[0] else cells[0][: width[0] - 3] + "..."
        parts = [name.ljust(width[0])] + [
            c.rjust(w) for c, w in zip(cells[1:], width[1:], strict=False)
        ]
        return "  ".join(parts).rstrip()

    lines = [sep, render(headers), sep, *(render(r) for r in table[1:]), sep]
    lines.append(f"Self CPU time total: {_time(self_cpu)}")
    total = f"Self energy total: {_joules(self_energy)}"
    if window_s is not None:
        total += f" in a window of {window_s:.3f}s"
    if sources:
        total += f" (sources: {', '.join(sources)})"
    lines.append(total)
    return "\n".join(lines) + "\n"
