"""The run summary as text: energy first, then the resources that have values (the default), or
gpu_tracker's whole layout for resources (``full``)."""

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
_UNIT_SYMBOLS = {
    "bytes": "B",
    "kilobytes": "kB",
    "megabytes": "MB",
    "gigabytes": "GB",
    "terabytes": "TB",
}


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
    power = "".join(
        f", {name} {value:.1f} W" for name, value in (("mean", e.mean_w), ("peak", e.peak_w))
        if value is not None
    )  # fmt: skip
    lines = [
        f"Energy: {human_joules(e.total_j)} ({e.total_kwh:.6f} kWh){power}; CO2e "
        f"{s.co2e_g:.3f} g at {s.carbon_intensity_g_per_kwh:g} g/kWh"
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


def _of(value: float | None, whole: float | None, unit: str) -> str:
    return f"{value:.3f} {unit}" + (f" of {whole:.3f} {unit}" if whole else "")


def _ram_line(res: dict[str, Any]) -> list[str]:
    ram = res.get("max_ram") or {}
    unit = _UNIT_SYMBOLS.get(str(ram.get("unit")), str(ram.get("unit")))
    parts = []
    job = (ram.get("combined") or {}).get("total_rss")
    if job is not None:
        parts.append(f"job {job:.3f} {unit}")
    if ram.get("system") is not None:
        parts.append("system " + _of(ram["system"], ram.get("system_capacity"), unit))
    return [f"Peak RAM: {', '.join(parts)}"] if parts else []


def _cpu_line(res: dict[str, Any]) -> list[str]:
    cpu = res.get("cpu_utilization") or {}
    parts = []
    job = cpu.get("combined") or {}
    if job.get("mean_sum_percent") is not None:
        parts.append(
            f"job mean {job['mean_sum_percent']:.1f} %, peak {job['max_sum_percent']:.1f} % "
            "(100 % = one core)"
        )
    system = cpu.get("system") or {}
    if system.get("mean_hardware_percent") is not None:
        cores = cpu.get("system_core_count")
        parts.append(
            f"system mean {system['mean_hardware_percent']:.1f} %"
            + (f" of {cores} cores" if cores else "")
        )
    return [f"CPU use: {'; '.join(parts)}"] if parts else []


def _gpu_lines(res: dict[str, Any]) -> list[str]:
    util = res.get("gpu_utilization") or {}
    ram = res.get("max_gpu_ram") or {}
    if not util.get("system_gpu_count") and ram.get("system_capacity") is None:
        return []  # no GPU on this machine: nothing to say
    lines = []
    pct = util.get("gpu_percentages") or {}
    if pct.get("mean_hardware_percent") is not None:
        lines.append(
            f"GPU use: mean {pct['mean_hardware_percent']:.1f} %, peak "
            f"{pct['max_hardware_percent']:.1f} % of {util['system_gpu_count']} GPU(s)"
        )
    unit = _UNIT_SYMBOLS.get(str(ram.get("unit")), str(ram.get("unit")))
    parts = []
    if ram.get("combined") is not None:
        parts.append(f"job {ram['combined']:.3f} {unit}")
    if ram.get("system") is not None:
        parts.append("system " + _of(ram["system"], ram.get("system_capacity"), unit))
    if parts:
        lines.append(f"Peak GPU memory: {', '.join(parts)}")
    return lines


def _short_resources(res: dict[str, Any]) -> list[str]:
    """Peak RAM, CPU use, and GPU use and memory where there is a GPU: only figures with values."""
    return _ram_line(res) + _cpu_line(res) + _gpu_lines(res)


def _full_resources(res: dict[str, Any]) -> list[str]:
    """gpu_tracker's layout, less the descendants' thread count of a job without descendants."""
    out: list[str] = []
    for key in _RESOURCE_ORDER:
        if key not in res:
            continue
        data = res[key]
        if key == "cpu_utilization" and not _has_descendants(res):
            data = {k: v for k, v in data.items() if k != "descendants_n_threads"}
        out.append(f"{_label(key)}:")
        _tree(data, 1, out)
    return out


def _has_descendants(res: dict[str, Any]) -> bool:
    rss = ((res.get("max_ram") or {}).get("descendants") or {}).get("total_rss")
    return bool(rss)


def format_text(s: RunSummary, *, full: bool = False) -> str:
    """Energy, steps and modules, then the resources: the figures that have values, or with
    ``full`` every figure in gpu_tracker's layout."""
    out = _header(s) + _energy(s) + extra_lines(s) + _steps(s) + straggler_lines(s)
    out += [f"Note: {n}" for n in s.notes]
    out += _full_resources(s.resources) if full else _short_resources(s.resources)
    return "\n".join(out) + "\n"
