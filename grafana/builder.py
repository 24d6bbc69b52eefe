"""nrg's Grafana dashboards, built as code with grafana-foundation-sdk.

Every panel, annotation and variable runs a query of the library in ``queries/``: one builder
makes a Flux variant (datasource ``nrg-influxdb``, InfluxDB 2) and an InfluxQL variant
(datasource ``nrg-influxql``, InfluxDB 1.x and 3.x) of each dashboard.

    python grafana/builder.py            # write grafana/dashboards/{flux,influxql}/*.json
    python grafana/builder.py --check    # exit 1 if a committed file differs from a fresh build
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

PanelT = TypeVar("PanelT", timeseries.Panel, table.Panel, stat.Panel)

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ROOT / "queries"
OUT = Path(__file__).resolve().parent / "dashboards"

# Datasource uids, as grafana/provisioning/datasources/influxdb.yml names them.
DATASOURCE_UID = {"flux": "nrg-influxdb", "influxql": "nrg-influxql"}
SUFFIX = {"flux": ".flux", "influxql": ".influxql"}
# Grafana's "All": a regular expression matching every value, and a missing tag.
ALL_VALUE = ".*"


@dataclass(frozen=True)
class Dialect:
    name: str

    @property
    def ref(self) -> model.DataSourceRef:
        return model.DataSourceRef(type_val="influxdb", uid=DATASOURCE_UID[self.name])

    def query(self, name: str) -> str:
        return (QUERIES / f"{name}{SUFFIX[self.name]}").read_text(encoding="utf-8").rstrip("\n")


class InfluxQuery(cogvariants.Dataquery):
    """A target of Grafana's InfluxDB datasource: a raw Flux or InfluxQL query."""

    def __init__(self, dialect: Dialect, name: str, ref_id: str, table_format: bool) -> None:
        self.dialect, self.name, self.ref_id, self.table_format = (
            dialect,
            name,
            ref_id,
            table_format,
        )

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "datasource": self.dialect.ref.to_json(),
            "query": self.dialect.query(self.name),
            "refId": self.ref_id,
        }
        if self.dialect.name == "influxql":
            out["rawQuery"] = True
            out["resultFormat"] = "table" if self.table_format else "time_series"
        return out


class Target(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, query: InfluxQuery) -> None:
        self.query = query

    def build(self) -> cogvariants.Dataquery:
        return self.query


@dataclass
class Board:
    """One dashboard under construction in one dialect."""

    d: Dialect
    builder: gd.Dashboard

    def target(self, name: str, *, table_format: bool = False, ref: str = "A") -> Target:
        return Target(InfluxQuery(self.d, name, ref, table_format))

    def _panel(
        self, panel: PanelT, title: str, query: str, *, table_format: bool = False
    ) -> PanelT:
        """What every panel has: title, the query's description, the datasource and the query."""
        return (
            panel.title(title)
            .description(_description(self.d.query(query)))
            .datasource(self.d.ref)
            .with_target(self.target(query, table_format=table_format))
        )

    def timeseries(
        self, title: str, query: str, unit: str, *, stacked: bool = False, width: int = 12
    ) -> None:
        panel = self._panel(timeseries.Panel(), title, query).unit(unit).height(8).span(width)
        if stacked:
            panel = panel.stacking(StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(
                40
            )
        self.builder.with_panel(panel)

    def points(self, title: str, query: str, unit: str, *, width: int = 12) -> None:
        """A time series drawn as points: one value per training step."""
        panel = (
            self._panel(timeseries.Panel(), title, query)
            .unit(unit)
            .draw_style(common.GraphDrawStyle.POINTS)
            .height(8)
            .span(width)
        )
        self.builder.with_panel(panel)

    def table(
        self,
        title: str,
        query: str,
        unit: str,
        *,
        width: int = 12,
        transformations: list[model.DataTransformerConfig] | None = None,
    ) -> None:
        panel = (
            self._panel(table.Panel(), title, query, table_format=True)
            .unit(unit)
            .height(8)
            .span(width)
        )
        for t in transformations or []:
            panel = panel.with_transformation(t)
        self.builder.with_panel(panel)

    def stat(self, title: str, query: str, unit: str, *, width: int = 6) -> None:
        panel = (
            self._panel(stat.Panel(), title, query, table_format=True)
            .unit(unit)
            .height(8)
            .span(width)
        )
        self.builder.with_panel(panel)

    def row(self, title: str) -> None:
        self.builder.with_row(gd.Row(title))

    def variable(self, name: str, label: str, query: str, *, multi: bool) -> None:
        v = (
            gd.QueryVariable(name)
            .label(label)
            .datasource(self.d.ref)
            .query(self.d.query(query))
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(multi)
        )
        if multi:
            v = v.include_all(True).all_value(ALL_VALUE)
        self.builder.with_variable(v)

    def annotation(self, name: str, query: str, color: str) -> None:
        target = AnnotationTarget(self.target(query, table_format=True).query)
        self.builder.annotation(
            gd.AnnotationQuery()
            .name(name)
            .datasource(self.d.ref)
            .enable(True)
            .icon_color(color)
            .target(target)
        )


class AnnotationTarget(cogbuilder.Builder[model.AnnotationTarget]):
    """A datasource annotation: the query of the datasource, plus the fields Grafana requires."""

    def __init__(self, query: InfluxQuery) -> None:
        self.query = query

    def build(self) -> model.AnnotationTarget:
        query = self.query

        class _Target(model.AnnotationTarget):
            def to_json(self) -> dict[str, object]:
                return {**super().to_json(), **query.to_json()}

        return _Target(limit=100, match_any=False, tags=[], type_val="tags")


def _description(query: str) -> str:
    first = query.splitlines()[0]
    return first.lstrip("/-").strip()


def _new(d: Dialect, slug: str, title: str, description: str) -> Board:
    label = "Flux" if d.name == "flux" else "InfluxQL"
    builder = (
        gd.Dashboard(f"{title} ({label})")
        .uid(f"nrg-{slug}-{d.name}")
        .description(description)
        .tags(["nrg", d.name])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
    )
    return Board(d, builder)


def host_power(d: Dialect) -> Board:
    b = _new(d, "host-power", "nrg: Host power", "Power of each machine by source.")
    b.variable("host", "Host", "var_hosts", multi=True)
    b.timeseries("Sources stacked", "power_over_time", "watt", stacked=True, width=24)
    b.timeseries("Per socket and GPU", "power_over_time", "watt")
    b.timeseries("Wall (emonPi)", "wall_power", "watt")
    b.timeseries("Rest of system", "rest_of_system", "watt")
    b.timeseries("CPU and GPU use", "utilization", "percentunit")
    b.timeseries("Memory in use", "memory_used", "bytes", width=24)
    return b


def _run_variables(b: Board, *, multi_runs: bool) -> None:
    b.variable("experiment", "Experiment", "var_experiments", multi=multi_runs)
    b.variable("run", "Run", "var_runs", multi=multi_runs)
    b.variable("host", "Host", "var_hosts", multi=True)
    b.variable("rank", "Rank", "var_ranks", multi=True)


def training_run(d: Dialect) -> Board:
    b = _new(d, "training-run", "nrg: Training run", "Energy of one training run, step by step.")
    _run_variables(b, multi_runs=False)
    b.annotation("Epochs", "epoch_starts", "blue")
    b.annotation("Run start and end", "run_events", "green")
    b.table("Run summary", "run_summary", "joule", width=24)
    b.points("Energy per step", "energy_per_step", "joule")
    b.table("Energy per epoch", "energy_per_epoch", "joule")
    b.points("Forecast: energy of the run", "forecast_energy", "joule")
    b.table("Top modules", "top_modules", "joule")
    b.points("Step time", "step_time", "s")
    b.timeseries("CPU and GPU use", "utilization", "percentunit")
    b.timeseries("Memory in use", "memory_used", "bytes")
    return b


def compare_experiments(d: Dialect) -> Board:
    b = _new(d, "compare", "nrg: Compare experiments", "Selected runs side by side.")
    _run_variables(b, multi_runs=True)
    b.table("Energy per epoch", "compare_energy_per_epoch", "joule")
    b.table("Energy per step", "compare_energy_per_step", "joule")
    per_sample: list[model.DataTransformerConfig] = []
    if d.name == "influxql":  # InfluxQL cannot join measurements: Grafana divides
        per_sample = [
            model.DataTransformerConfig(id_val="merge", options={}),
            model.DataTransformerConfig(
                id_val="calculateField",
                options={
                    "mode": "binary",
                    "binary": {"left": "energy_joules", "operator": "/", "right": "samples"},
                    "alias": "energy_per_sample_joules",
                },
            ),
        ]
    b.table("Energy per sample", "compare_energy_per_sample", "joule", transformations=per_sample)
    b.table("Mean power", "compare_mean_power", "watt")
    return b


def agent_health(d: Dialect) -> Board:
    b = _new(d, "agent-health", "nrg: Agent health", "Is nrg-collect keeping every point?")
    b.variable("host", "Host", "var_hosts", multi=True)
    b.timeseries("Lost or rejected points", "agent_drops", "short", width=24)
    b.timeseries("Waiting to be written", "agent_spool", "short")
    b.timeseries("Collector lateness, errors", "agent_lateness", "short")
    return b


def group_by(keys: list[str], field: str, how: str) -> model.DataTransformerConfig:
    """Grafana's *Group by*: one row per value of ``keys``, ``how`` (``max``, ``sum``) of
    ``field``, which keeps its name (Grafana would add `` (max)``)."""
    fields: dict[str, Any] = {k: {"operation": "groupby", "aggregations": []} for k in keys}
    fields[field] = {"operation": "aggregate", "aggregations": [how]}
    return model.DataTransformerConfig(id_val="groupBy", options={"fields": fields})


def keep_name(field: str, how: str) -> model.DataTransformerConfig:
    """Grafana's *Organize fields*: the aggregated ``field (how)`` back to ``field``."""
    options = {"renameByName": {f"{field} ({how})": field}}
    return model.DataTransformerConfig(id_val="organize", options=options)


MERGE = model.DataTransformerConfig(id_val="merge", options={})
# InfluxQL cannot group by a field (the step number): Grafana groups each rank's rows by step.
GLOBAL_STEP_ENERGY = [
    MERGE,
    group_by(["step", "host", "source"], "energy_joules", "max"),
    keep_name("energy_joules", "max"),
    group_by(["step"], "energy_joules", "sum"),
    keep_name("energy_joules", "sum"),
]
GLOBAL_STEP_TIME = [
    MERGE,
    group_by(["step"], "duration_seconds", "max"),
    keep_name("duration_seconds", "max"),
]


def cluster(d: Dialect) -> Board:
    b = _new(d, "cluster", "nrg: Cluster", "A distributed run's hosts and ranks side by side.")
    _run_variables(b, multi_runs=False)
    b.stat("Total energy", "cluster_energy_total", "joule")
    b.timeseries("Power per host and rank", "cluster_power_by_host", "watt", width=18)
    b.table("Per host and rank", "run_summary", "joule", width=24)
    b.table("Stragglers: waits per rank", "stragglers", "short", width=24)
    if d.name == "flux":
        b.points("Energy per global step", "global_step_energy", "joule")
        b.points("Global step time", "global_step_time", "s")
    else:
        b.table(
            "Energy per global step", "global_step_energy", "joule",
            transformations=GLOBAL_STEP_ENERGY,
        )  # fmt: skip
        b.table("Global step time", "global_step_time", "s", transformations=GLOBAL_STEP_TIME)
    b.table("Energy per epoch", "energy_per_epoch", "joule", width=24)
    return b


BOARDS: dict[str, Callable[[Dialect], Board]] = {
    "host-power": host_power,
    "training-run": training_run,
    "compare-experiments": compare_experiments,
    "agent-health": agent_health,
    "cluster": cluster,
}


def build_all() -> dict[Path, str]:
    """Relative path → JSON text of every dashboard in both dialects."""
    out: dict[Path, str] = {}
    for dialect in ("flux", "influxql"):
        for slug, make in BOARDS.items():
            board = make(Dialect(dialect)).builder.build()
            data: Any = json.loads(json.dumps(board, cls=JSONEncoder))
            _drop_interval_keys(data)
            text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            out[Path(dialect) / f"{slug}.json"] = text
    return out


# The SDK writes an interval variable's keys on every variable; Grafana's dashboard schema has
# them on none (they mean nothing on a query variable): leave them out.
_INTERVAL_KEYS = ("auto", "auto_count", "auto_min")


def _drop_interval_keys(data: dict[str, Any]) -> None:
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("type") != "interval":
            for key in _INTERVAL_KEYS:
                variable.pop(key, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files")
    args = parser.parse_args(argv)
    built = build_all()
    stale = [p for p, text in built.items() if _read(OUT / p) != text]
    extra = [p.relative_to(OUT) for p in OUT.rglob("*.json") if p.relative_to(OUT) not in built]
    if args.check:
        for p in [*stale, *extra]:
            print(f"differs from a fresh build: grafana/dashboards/{p}", file=sys.stderr)
        return 1 if stale or extra else 0
    for p in stale:
        (OUT / p).parent.mkdir(parents=True, exist_ok=True)
        (OUT / p).write_text(built[p], encoding="utf-8")
    for p in extra:
        (OUT / p).unlink()
    return 0


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


if __name__ == "__main__":
    sys.exit(main())
