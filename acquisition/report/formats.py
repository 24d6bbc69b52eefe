"""Report and compare output as text, JSON and CSV (HTML is :mod:`acquisition.report.html`)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from acquisition.report.compare import Comparison
from acquisition.report.runs import RunInfo
from acquisition.summary import RunSummary, format_text
from acquisition.summary.rank_text import rank_table, straggler_lines
from acquisition.summary.text import human_joules

__all__ = [
    "compare_csv",
    "compare_text",
    "list_text",
    "ranks_csv",
    "ranks_text",
    "summaries_csv",
    "summaries_json",
    "summaries_text",
]

_CSV_FIELDS = (
    "experiment",
    "run",
    "host",
    "start",
    "end",
    "duration_s",
    "exit_code",
    "total_j",
    "total_kwh",
    "outside_steps_j",
    "mean_w",
    "co2e_g",
    "carbon_intensity_g_per_kwh",
    "carbon_intensity_source",
    "steps",
    "step_energy_mean_j",
    "step_energy_p50_j",
    "step_energy_p95_j",
    "samples",
    "energy_per_sample_j",
)


def summaries_text(summaries: Sequence[RunSummary]) -> str:
    return "\n".join(format_text(s, full=True) for s in summaries)


def summaries_json(summaries: Sequence[RunSummary]) -> str:
    """One summary: the ``nrg.summary/1`` object; several: a JSON array of them."""
    if len(summaries) == 1:
        return summaries[0].to_json() + "\n"
    return json.dumps([s.to_dict() for s in summaries], indent=2, allow_nan=False) + "\n"


def summaries_csv(summaries: Sequence[RunSummary]) -> str:
    """One row per run; energy per source as extra ``<source>_j`` columns."""
    sources = sorted({src.source for s in summaries for src in s.energy.sources})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_CSV_FIELDS, *(f"{src}_j" for src in sources)])
    for s in summaries:
        e = s.steps.energy_j or {}
        per_source = {src: 0.0 for src in sources}
        for src in s.energy.sources:
            per_source[src.source] += src.energy_j
        row = [
            s.experiment,
            s.run,
            s.host,
            s.start,
            s.end,
            s.duration_s,
            s.exit_code,
            s.energy.total_j,
            s.energy.total_kwh,
            s.energy.outside_steps_j,
            s.energy.mean_w,
            s.co2e_g,
            s.carbon_intensity_g_per_kwh,
            s.carbon_intensity_source,
            s.steps.count,
            e.get("mean"),
            e.get("p50"),
            e.get("p95"),
            s.steps.samples,
            s.steps.energy_per_sample_j,
            *(per_source[src] for src in sources),
        ]
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue()


_RANK_FIELDS = (
    "host",
    "rank",
    "gpu",
    "gpu_source",
    "steps",
    "time_s",
    "energy_j",
    "slowest_steps",
    "wait_s",
    "wait_energy_j",
)


def ranks_text(summaries: Sequence[RunSummary]) -> str:
    """``report --by rank``: per run, its ranks' table and the straggler lines."""
    parts = []
    for s in summaries:
        parts.append(rank_table(s) + "".join(line + "\n" for line in straggler_lines(s)))
    return "\n".join(parts)


def ranks_csv(summaries: Sequence[RunSummary]) -> str:
    """One row per rank of each run."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["experiment", "run", *_RANK_FIELDS])
    for s in summaries:
        for r in s.per_rank:
            writer.writerow([s.experiment, s.run, *(r.get(k, "") for k in _RANK_FIELDS)])
    return out.getvalue()


def list_text(rows: Sequence[tuple[RunInfo, RunSummary]]) -> str:
    """One line per run; each column as wide as its widest value (names of any length)."""
    cells = [
        (
            info.experiment or "-",
            info.run,
            ",".join(sorted(info.hosts)) or "-",
            s.start,
            f"{s.duration_s:.1f}s",
            "no energy" if s.no_energy_reason else human_joules(s.energy.total_j),
        )
        for info, s in rows
    ]
    header = ("experiment", "run", "host", "start", "duration", "energy")
    minimum = (16, 32, 16, 24, 10, 12)
    widths = [max(m, *(len(c[i]) for c in [header, *cells])) for i, m in enumerate(minimum)]
    lines = []
    for row in [header, *cells]:
        left = " ".join(f"{v:<{w}}" for v, w in zip(row[:4], widths[:4], strict=True))
        right = " ".join(f"{v:>{w}}" for v, w in zip(row[4:], widths[4:], strict=True))
        lines.append(f"{left} {right}")
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
        return f"{value:.4g}"
    return f"{value:.3f}"


def compare_text(c: Comparison) -> str:
    """A table: one row per figure, per column the value ± error (n for experiments), and
    against the first column the difference, its ratio and ``*`` when outside the error bars."""
    width = 30
    lines = [f"{'figure':<{width}}" + "".join(f"{label[:34]:>36}" for label in c.labels)]
    for f in c.figures:
        cells = []
        for i, v in enumerate(f.values):
            text = _cell(v.value)
            if v.error is not None:
                text += f" ±{_cell(v.error)}"
            if v.n > 1:
                text += f" (n={v.n})"
            if i and v.diff is not None:
                ratio = f"{v.diff_ratio:+.1%}" if v.diff_ratio is not None else ""
                mark = "*" if v.significant else ""
                text += f" [{ratio}{mark}]"
            cells.append(f"{text:>36}")
        lines.append(f"{f.name + ' (' + f.unit + ')':<{width}}" + "".join(cells))
    lines.append("[±x%] difference to the first column; * outside the error bars (sum of both).")
    for label, sources in zip(c.labels, c.carbon_sources, strict=False):
        lines.extend(f"carbon intensity of {label}: {source}" for source in sources)
    return "\n".join(lines) + "\n"


def compare_csv(c: Comparison) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "figure",
            "unit",
            "label",
            "value",
            "error",
            "sd",
            "n",
            "diff",
            "diff_ratio",
            "significant",
        ]
    )
    for f in c.figures:
        for label, v in zip(c.labels, f.values, strict=True):
            row = [
                f.name,
                f.unit,
                label,
                v.value,
                v.error,
                v.sd,
                v.n,
                v.diff,
                v.diff_ratio,
                v.significant,
            ]
            writer.writerow(["" if x is None else x for x in row])
    return out.getvalue()
