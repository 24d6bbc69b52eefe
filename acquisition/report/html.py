"""The HTML report: one self-contained file (plots inline as SVG, no network at view time).

Plots are drawn by matplotlib (``pip install '.[report]'``), imported only here:

- power per source over time (W, from consecutive counter readings or power readings), epochs
  as vertical lines, time outside steps (start-up, evaluation in ``paused()``) shaded;
- energy per epoch (J), the distribution of energy per step (J), the top modules (J) beside the
  module tree with shares;
- memory over time (system used and the job's combined RSS, in the summary's RAM unit).

The page also carries each summary as JSON (``<script type="application/json">``), and the
figures in its text are the JSON's, rounded as shown.
"""

from __future__ import annotations

import html
import io
import itertools
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from acquisition.errors import install_hint
from acquisition.point import Point
from acquisition.processors.attribution import parse_source
from acquisition.report.compare import Comparison
from acquisition.report.formats import _cell
from acquisition.summary import RAM_UNITS, RunSummary

__all__ = ["MATPLOTLIB_MISSING", "compare_html", "fmt", "in_run", "report_html", "resource_rows"]

MATPLOTLIB_MISSING = f"the HTML report draws its plots with matplotlib: {install_hint('report')}"
_NS = 1e9
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.5em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0} td,th{padding:.2em .8em;text-align:right;
border-bottom:1px solid #eee} th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.note{color:#a40} .plots{display:flex;flex-wrap:wrap;gap:1em} .plots svg{max-width:100%;height:auto}
.side{display:flex;gap:2em;flex-wrap:wrap} .side>div{flex:1;min-width:400px}
ul.tree{font-family:monospace;list-style:none;padding-left:1.2em}
"""


def fmt(value: float | None, digits: int = 3) -> str:
    """How the page writes a figure (tests compare the page's text with the JSON this way)."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from acquisition.errors import NrgError

        raise NrgError(MATPLOTLIB_MISSING) from exc
    plt.rcParams["svg.fonttype"] = "none"  # text stays text
    plt.rcParams["svg.hashsalt"] = "nrg"  # same ids for the same plot
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(
        buf,
        format="svg",
        bbox_inches="tight",
        metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
    )
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


# -- series from points -------------------------------------------------------------------------


def _power_series(points: Sequence[Point]) -> dict[str, tuple[list[float], list[float]]]:
    """Per source: (times in s since start, W) from counter deltas or power readings."""
    raw: dict[str, list[tuple[int, float, bool]]] = defaultdict(list)
    for p in points:
        if p.measurement in ("rapl", "gpu", "emonpi"):
            sample = parse_source(p)
            if sample is not None:
                raw[sample.source].append((p.time_ns, sample.value, sample.counter))
    out: dict[str, tuple[list[float], list[float]]] = {}
    for source, samples in sorted(raw.items()):
        samples.sort()
        times: list[float] = []
        watts: list[float] = []
        for (t0, v0, c0), (t1, v1, _) in itertools.pairwise(samples):
            if c0:
                if t1 > t0 and v1 >= v0:
                    times.append(t1)
                    watts.append((v1 - v0) / ((t1 - t0) / _NS))
            else:
                times.append(t1)
                watts.append(v1)
        out[source] = (times, watts)
    return out


def _steps(points: Sequence[Point]) -> list[tuple[int, int, int]]:
    """(epoch, start_ns, end_ns) of each step."""
    out = []
    for p in points:
        if p.measurement == "nrg_step":
            start, end = p.fields.get("start_time_ns"), p.fields.get("end_time_ns")
            epoch = p.tags.get("epoch", p.fields.get("epoch", 0))
            if isinstance(start, int) and isinstance(end, int):
                out.append((int(epoch) if str(epoch).lstrip("-").isdigit() else 0, start, end))
    return sorted(out, key=lambda s: s[1])


def in_run(
    times: Sequence[float], values: Sequence[float], s: RunSummary
) -> tuple[list[float], list[float]]:
    """(seconds since the run's start, value) of the readings inside the run's window."""
    pairs = [(t, v) for t, v in zip(times, values, strict=True) if s.start_ns <= t <= s.end_ns]
    return [(t - s.start_ns) / _NS for t, _ in pairs], [v for _, v in pairs]


def _run_axis(ax: Any, s: RunSummary, label: str) -> None:
    """The run's span on the x axis, the same on every time chart; the legend beside it."""
    ax.set_xlim(0, max(s.duration_s, 1e-9))
    ax.set_xlabel(label)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _power_plot(s: RunSummary, points: Sequence[Point]) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    t0 = s.start_ns
    for source, (times, watts) in _power_series(points).items():
        ax.plot(*in_run(times, watts, s), label=source, linewidth=1)
    steps = _steps(points)
    if steps:
        # shade what lies outside steps inside the run: start-up, evaluation, the tail
        edges = [(t0, steps[0][1])]
        edges += [(a[2], b[1]) for a, b in itertools.pairwise(steps) if b[1] > a[2]]
        edges.append((steps[-1][2], s.end_ns))
        for a, b in edges:
            if b > a:
                ax.axvspan((a - t0) / _NS, (b - t0) / _NS, color="0.85", linewidth=0)
        seen: set[int] = set()
        for epoch, start, _ in steps:
            if epoch not in seen:
                seen.add(epoch)
                ax.axvline((start - t0) / _NS, color="0.4", linestyle="--", linewidth=0.8)
    _run_axis(ax, s, "time since start (s); grey: outside steps; dashed: epoch starts")
    ax.set_ylabel("power (W)")
    ax.set_title("Power per source")
    return _svg(fig)


def _epoch_plot(s: RunSummary, top_j: float | None = None) -> str | None:
    """Energy per epoch; ``top_j``: the y axis's top, the same for runs shown side by side."""
    epochs = [e for e in s.epochs if e.energy_j is not None]
    if not epochs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.bar([str(e.epoch) for e in epochs], [e.energy_j for e in epochs], color="#4a7")
    ax.set_xlabel("epoch")
    ax.set_ylabel("energy (J)")
    if top_j:
        ax.set_ylim(0, top_j * 1.05)
    ax.set_title("Energy per epoch")
    return _svg(fig)


def _step_plot(points: Sequence[Point], s: RunSummary) -> str | None:
    from acquisition.summary.build import step_energies

    totals = step_energies(points)
    if not totals:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.hist(totals, bins=min(30, max(5, len(totals) // 3)), color="#47a")
    ax.set_xlabel("energy of one step (J)")
    ax.set_ylabel("steps")
    ax.set_title("Energy per step")
    return _svg(fig)


def _module_plot(s: RunSummary) -> str | None:
    if not s.modules:
        return None
    plt = _plt()
    mods = list(reversed(s.modules))
    fig, ax = plt.subplots(figsize=(5, 0.35 * len(mods) + 1))
    ax.barh([m.module for m in mods], [m.energy_j for m in mods], color="#a74")
    ax.set_xlabel("energy (J)")
    ax.set_title("Top modules")
    return _svg(fig)


def _memory_plot(s: RunSummary, points: Sequence[Point]) -> str | None:
    unit_name = s.resources.get("max_ram", {}).get("unit", "gigabytes")
    unit = RAM_UNITS.get(unit_name, 1e9)
    tree = s.resources.get("tree")
    system = [(p.time_ns, p.fields.get("used_bytes")) for p in points if p.measurement == "memory"]
    job = [
        (p.time_ns, p.fields.get("rss_bytes"))
        for p in points
        if p.measurement == "process"
        and p.tags.get("tree") == tree
        and p.tags.get("scope") == "combined"
    ]
    if not system and not job:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 2.8))
    for label, series in (("system used", system), ("job combined RSS", job)):
        pairs = sorted((t, v) for t, v in series if isinstance(v, int | float))
        if pairs:
            times = [t for t, _ in pairs]
            ax.plot(*in_run(times, [v / unit for _, v in pairs], s), label=label)
    _run_axis(ax, s, "time since start (s)")
    ax.set_ylabel(f"memory ({unit_name})")
    ax.set_title("Memory")
    return _svg(fig)


# -- page ---------------------------------------------------------------------------------------


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["<table><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


_GROUPS = {
    "max_ram": "Max RAM",
    "max_gpu_ram": "Max GPU RAM",
    "cpu_utilization": "CPU utilization",
    "gpu_utilization": "GPU utilization",
    "compute_time": "Compute time",
}


def resource_rows(resources: dict[str, Any]) -> list[list[str]]:
    """The text summary's resource tables as rows: ``Max RAM: main total RSS (gigabytes)``."""
    rows: list[list[str]] = []

    def walk(prefix: str, node: Any, unit: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "unit":
                    walk(f"{prefix} {key.replace('_', ' ')}".strip(), value, unit)
            return
        value = "n/a" if node is None else fmt(node) if isinstance(node, float) else str(node)
        rows.append([prefix + (f" ({unit})" if unit else ""), value])

    for key, title in _GROUPS.items():
        group = resources.get(key)
        if isinstance(group, dict):
            walk(f"{title}:", group, str(group.get("unit", "")))
    return rows


def _module_tree(s: RunSummary) -> str:
    """The top modules nested by their dotted names, each with its share."""
    tree: dict[str, Any] = {}
    for m in s.modules:
        node = tree
        for part in m.module.split("."):
            node = node.setdefault(part, {})
        node["__share__"] = m.share

    def render(node: dict[str, Any]) -> str:
        items = []
        for name, child in node.items():
            if name == "__share__":
                continue
            share = child.get("__share__")
            label = f"{name} {fmt(share * 100, 1)} %" if share is not None else name
            items.append(f"<li>{_e(label)}{render(child)}</li>")
        return f"<ul class='tree'>{''.join(items)}</ul>" if items else ""

    return render(tree)


def _summary_section(s: RunSummary, points: Sequence[Point]) -> str:
    e = s.energy
    parts = [f"<h2>Run {_e(s.run or '(unnamed)')}</h2>"]
    if s.no_energy_reason:
        parts.append(f"<p class='note'>{_e(s.no_energy_reason)}</p>")
    parts.append(
        _table(
            ["figure", "value"],
            [
                ["experiment", s.experiment or "-"],
                ["hosts", ", ".join(s.hosts) or s.host],
                ["start", s.start],
                ["duration (s)", fmt(s.duration_s)],
                ["energy total (J)", fmt(e.total_j)],
                ["energy total (kWh)", fmt(e.total_kwh, 6)],
                ["energy outside steps (J)", fmt(e.outside_steps_j)],
                ["mean power (W)", fmt(e.mean_w)],
                ["CO2e (g)", fmt(s.co2e_g)],
                ["carbon intensity (g/kWh)", fmt(s.carbon_intensity_g_per_kwh)],
                ["carbon intensity from", s.carbon_intensity_source],
                ["steps", s.steps.count],
                ["energy per step, mean (J)", fmt((s.steps.energy_j or {}).get("mean"))],
                ["energy per step, p50 (J)", fmt((s.steps.energy_j or {}).get("p50"))],
                ["energy per step, p95 (J)", fmt((s.steps.energy_j or {}).get("p95"))],
                ["energy per sample (J)", fmt(s.steps.energy_per_sample_j, 6)],
            ],
        )
    )
    parts.append(
        _table(
            ["source", "host", "energy (J)", "mean (W)", "peak (W)", "± (J)", "in total"],
            [
                [
                    src.source,
                    src.host,
                    fmt(src.energy_j),
                    fmt(src.mean_w),
                    fmt(src.peak_w),
                    fmt(src.error_j),
                    "yes" if src.counted else "no",
                ]
                for src in e.sources
            ],
        )
    )
    plots = [_power_plot(s, points), _epoch_plot(s), _step_plot(points, s)]
    parts.append("<div class='plots'>" + "".join(p for p in plots if p) + "</div>")
    if s.epochs:
        parts.append(
            _table(
                ["epoch", "steps", "duration (s)", "energy (J)"],
                [[ep.epoch, ep.steps, fmt(ep.duration_s), fmt(ep.energy_j)] for ep in s.epochs],
            )
        )
    if s.modules:
        parts.append("<div class='side'><div>")
        parts.append(_module_plot(s) or "")
        parts.append("</div><div><h3>Share of energy, by module path</h3>")
        parts.append(_module_tree(s) + "</div></div>")
        parts.append(
            _table(
                ["module", "energy (J)", "share (%)"],
                [[m.module, fmt(m.energy_j), fmt(m.share * 100, 1)] for m in s.modules],
            )
        )
    parts.append(_table(["resource", "value"], resource_rows(s.resources)))
    memory = _memory_plot(s, points)
    if memory:
        parts.append("<div class='plots'>" + memory + "</div>")
    data = json.dumps(s.to_dict(), allow_nan=False).replace("</", "<\\/")
    parts.append(f"<script type='application/json' class='nrg-summary'>{data}</script>")
    return "".join(parts)


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{body}</body></html>\n"
    )


def report_html(summaries: Sequence[RunSummary], points: Sequence[Sequence[Point]]) -> str:
    """One page with every run's figures and plots."""
    body = "".join(_summary_section(s, p) for s, p in zip(summaries, points, strict=True))
    names = ", ".join(s.run or "(unnamed)" for s in summaries)
    return _page(f"nrg report: {names}", body)


def compare_html(c: Comparison, groups: Sequence[Sequence[RunSummary]]) -> str:
    """The comparison table, then energy per epoch of each run side by side."""
    rows = []
    for f in c.figures:
        row: list[object] = [f"{f.name} ({f.unit})"]
        for i, v in enumerate(f.values):
            text = _cell(v.value)
            if v.error is not None:
                text += f" ±{_cell(v.error)}"
            if v.n > 1:
                text += f" (n={v.n})"
            if i and v.diff_ratio is not None:
                text += f" [{v.diff_ratio:+.1%}{'*' if v.significant else ''}]"
            row.append(text)
        rows.append(row)
    body = _table(["figure", *c.labels], rows)
    body += "<p>[±x%]: difference to the first column; *: outside the error bars.</p>"
    plots = []
    top = max((e.energy_j or 0.0 for g in groups for s in g for e in s.epochs), default=0.0)
    for label, runs in zip(c.labels, groups, strict=True):
        for s in runs:
            plot = _epoch_plot(s, top)
            heading = label if s.run == label else f"{label}: {s.run}"
            if plot:
                plots.append(f"<div><h2>{_e(heading)}</h2>{plot}</div>")
    body += "<div class='side'>" + "".join(plots) + "</div>"
    data = json.dumps(c.to_dict(), allow_nan=False).replace("</", "<\\/")
    body += f"<script type='application/json' class='nrg-compare'>{data}</script>"
    return _page("nrg compare: " + " vs ".join(c.labels), body)
