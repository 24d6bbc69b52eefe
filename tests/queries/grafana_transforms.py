"""The Grafana transformations the InfluxQL dashboards use, applied in Python to a query's rows,
so that a test checks the dashboard's own configuration on the real server's answer.

Only what the dashboards use: ``merge`` (rows of every series in one table), ``groupBy`` with
``groupby`` keys and ``max``/``sum`` aggregations (the aggregated field named ``field (how)``,
as Grafana names it) and ``organize`` with ``renameByName``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["apply", "panel_transformations"]

DASHBOARDS = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"
_AGGREGATE: dict[str, Callable[[list[float]], float]] = {"max": max, "sum": sum}

Row = dict[str, Any]


def panel_transformations(dialect: str, board: str, title: str) -> list[dict[str, Any]]:
    data = json.loads((DASHBOARDS / dialect / f"{board}.json").read_text(encoding="utf-8"))
    (panel,) = [p for p in data["panels"] if p.get("title") == title]
    return list(panel.get("transformations", []))


def apply(rows: list[Row], transformations: list[dict[str, Any]]) -> list[Row]:
    for t in transformations:
        if t["id"] == "merge":
            continue  # the rows are one table already
        if t["id"] == "groupBy":
            rows = _group_by(rows, t["options"]["fields"])
        elif t["id"] == "organize":
            names = t["options"].get("renameByName", {})
            rows = [{names.get(k, k): v for k, v in row.items()} for row in rows]
        else:
            raise AssertionError(f"transformation {t['id']!r} is not emulated")
    return rows


def _group_by(rows: list[Row], fields: dict[str, dict[str, Any]]) -> list[Row]:
    keys = [k for k, f in fields.items() if f["operation"] == "groupby"]
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    out = []
    for key, members in groups.items():
        row = dict(zip(keys, key, strict=True))
        for name, f in fields.items():
            if f["operation"] != "aggregate":
                continue
            values = [m[name] for m in members if m.get(name) is not None]
            for how in f["aggregations"]:
                row[f"{name} ({how})"] = _AGGREGATE[how](values)
        out.append(row)
    return out
