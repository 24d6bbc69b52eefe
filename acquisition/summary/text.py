"""The run summary as text: energy first, then gpu_tracker's layout for resources."""

from __future__ import annotations

from typing import Any

from acquisition.summary.forecast import extra_lines
from acquisition.summary.model import RunSummary
from acquisition.summary.rank_text import straggler_lines

__all__ = ["format_text", "human_joules"]

_LABELS = {
    "max_ram": "Max RAM",
    "max_gpu_ram": "Max GPU RAM",
    "cpu_utilization": "CPU utilization",
    "gpu_utilization": "GPU utilization",
    "compute_time": "Compute time",
    "total_rss": "Total RSS",
    "private_rss": "Private RSS",
    "shared_rss": "Shared RSS",
    "system_gpu_count": "System GPU count",
    "gpu_percentages": "GPU percentages",
}
_RESOURCE_ORDER = ("max_ram", "max_gpu_ram", "cpu_utilization", "gpu_utilization", "compute_time")


def human_joules(joules: float | None) -> str:
    if joules is None:
        return "n/a"
    for unit, size in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(joules) >= size:
            return f"{joules / size:.3f} {unit}"
    return f"{joules:.3f} J"


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _label(key: str) -> str:
    if key in _LABELS:
        return _LABELS[key]
    text = key.replace("_n_threads", " number of threads").replace("_", " ")
    return text[:1].upper() + text[1:]


def _tree(data: dict[str, Any], indent: int, out: list[str]) -> None:
    pad = "   " * indent
    for key, value in data.items():
        if isinstance(value, dict):
            out.append(f"{pad}{_label(key)}:")
            _tree(value, indent + 1, out)
        elif isinstance(value, float):
            out.append(f"{pad}{_label(key)}: {value:.3f}")
        else:
            out.append(f"{pad}{_label(key)}: {'n/a' if value is None else value}")


def _header(s: RunSummary) -> list[str]:
    who = f"run {s.run or '(unnamed)'}" + (f" (experiment {s.experiment})" if s.experiment else "")
    where = ", ".join(s.hosts) or s.host or "?"
    code = "" if s.exit_code is None else f", exit code {s.exit_code}"
    lines = [
        f"nrg summary: {who} on {where}",
        f"  {s.start} → {s.end} ({s.duration_s:.1f} s{code})",
    ]
    if s.no_energy_reason:
        lines.insert(0, s.no_energy_reason)
    return lines


def _energy(s: RunSummary) -> list[str]:
    e = s.energy
    lines = [
        f"Energy: {human_joules(e.total_j)} ({e.total_kwh:.6f} kWh), mean {_num(e.mean_w, 1)} W, "
        f"peak {_num(e.peak_w, 1)} W; CO2e {s.co2e_g:.3f} g at "
        f"{s.carbon_intensity_g_per_kwh:g} g/kWh"
    ]
    if e.sources:
        lines.append(
            f"  {'source':<22}{'host':<14}{'energy J':>12}{'mean W':>10}{'peak W':>10}{'± J':>10}"
        )
    for src in e.sources:
        note = "" if src.counted else "  (not in total)"
        lines.append(
            f"  {src.source:<22}{src.host[:13]:<14}{src.energy_j:>12.3f}{_num(src.mean_w, 2):>10}"
            f"{_num(src.peak_w, 2):>10}{_num(src.error_j, 3):>10}{note}"
        )
    if e.outside_steps_j is not None:
        lines.append(f"  outside steps: {human_joules(e.outside_steps_j)}")
    return lines


def _steps(s: RunSummary) -> list[str]:
    st = s.steps
    if not st.count:
        return []
    lines = [f"Steps: {st.count} in {len(s.epochs)} epoch(s)"]
    if st.energy_j is not None:
        lines.append(
            f"  energy per step: mean {st.energy_j['mean']:.4f} J, p50 {st.energy_j['p50']:.4f} J,"
            f" p95 {st.energy_j['p95']:.4f} J"
        )
    if st.energy_per_sample_j is not None:
        lines.append(f"  energy per sample: {st.energy_per_sample_j:.6f} J ({st.samples} samples)")
    if s.epochs:
        lines.append(f"  {'epoch':>5}{'steps':>8}{'duration s':>12}{'energy J':>12}")
        for ep in s.epochs:
            lines.append(
                f"  {ep.epoch:>5}{ep.steps:>8}{ep.duration_s:>12.3f}{_num(ep.energy_j):>12}"
            )
    if s.modules:
        lines.append("Top modules by energy:")
        for m in s.modules:
            lines.append(f"  {m.module:<40}{m.energy_j:>12.3f} J{m.share * 100:>7.1f} %")
    return lines


def format_text(s: RunSummary) -> str:
    """Energy, steps and modules, then resources as gpu_tracker prints them."""
    out = _header(s) + _energy(s) + extra_lines(s) + _steps(s) + straggler_lines(s)
    out += [f"Note: {n}" for n in s.notes]
    res = s.resources
    for key in _RESOURCE_ORDER:
        if key in res:
            out.append(f"{_label(key)}:")
            _tree(res[key], 1, out)
    return "\n".join(out) + "\n"
