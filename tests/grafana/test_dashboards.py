"""The dashboards in grafana/dashboards: fresh from the builder, valid for the pinned Grafana,
every query a library query, every variable used, datasources as provisioned."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from acquisition.queries import available, load_query

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
DASHBOARDS = ROOT / "grafana" / "dashboards"
SCHEMA = ROOT / "grafana" / "schema" / "dashboard.schema.json"
PROVISIONING = ROOT / "grafana" / "provisioning"
FILES = sorted(DASHBOARDS.rglob("*.json"))
BUILTIN = {"timeFilter", "__interval", "interval"}


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nrg_grafana_builder", ROOT / "grafana" / "builder.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def node() -> str:
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    if not (TOOLS / "node_modules" / "ajv").is_dir():
        pytest.skip("npm tools missing: run `npm ci --prefix tools`")
    return binary


def dashboards() -> list[tuple[str, dict[str, Any]]]:
    return [(str(p.relative_to(DASHBOARDS)), json.loads(p.read_text())) for p in FILES]


def queries_of(board: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(where, datasource ref, query text) of every panel target, annotation and variable."""
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r}", target["datasource"], target["query"]))
    for ann in board.get("annotations", {}).get("list", []):
        out.append((f"annotation {ann['name']!r}", ann["datasource"], ann["target"]["query"]))
    for var in board["templating"]["list"]:
        out.append((f"variable {var['name']!r}", var["datasource"], var["query"]))
    return out


def test_the_five_dashboards_exist_in_both_dialects() -> None:
    names = {p.relative_to(DASHBOARDS).as_posix() for p in FILES}
    boards = ("host-power", "training-run", "compare-experiments", "agent-health", "cluster")
    assert names == {f"{d}/{b}.json" for d in ("flux", "influxql") for b in boards}


def test_committed_dashboards_equal_a_fresh_build() -> None:
    builder = load_builder()
    built = builder.build_all()
    for rel, text in built.items():
        assert (DASHBOARDS / rel).read_text() == text, f"rebuild: python grafana/builder.py ({rel})"
    assert builder.main(["--check"]) == 0


def test_check_notices_a_stale_file(tmp_path: Path) -> None:
    builder = load_builder()
    builder.OUT = tmp_path
    assert builder.main([]) == 0
    assert builder.main(["--check"]) == 0
    victim = tmp_path / "flux" / "cluster.json"
    victim.write_text(victim.read_text().replace("Total energy", "Total"))
    assert builder.main(["--check"]) == 1


def validate(node: str, files: list[Path]) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [node, str(TOOLS / "dashboard-check.mjs"), str(SCHEMA), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    results = {r["file"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert len(results) == len(files), proc.stderr
    assert proc.returncode == (0 if all(r["valid"] for r in results.values()) else 1)
    return results


def test_dashboards_validate_against_the_pinned_grafana_schema(node: str) -> None:
    results = validate(node, FILES)
    assert {n: r["errors"] for n, r in results.items() if not r["valid"]} == {}


def test_the_schema_check_catches_broken_dashboards(node: str, tmp_path: Path) -> None:
    board = json.loads((DASHBOARDS / "flux" / "training-run.json").read_text())
    broken = {
        "misspelt_panel_key": lambda b: b["panels"][0].update(
            gridPoss=b["panels"][0].pop("gridPos")
        ),
        "no_schema_version": lambda b: b.pop("schemaVersion"),
        "grid_pos_text": lambda b: b["panels"][0]["gridPos"].update(w="twelve"),
    }
    files = []
    for name, breaks in broken.items():
        b = copy.deepcopy(board)
        breaks(b)
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(b))
    results = validate(node, files)
    assert [Path(n).stem for n, r in results.items() if r["valid"]] == []


def test_committed_schema_is_the_pinned_grafana_schema(node: str) -> None:
    proc = subprocess.run(
        [node, str(TOOLS / "dashboard-schema.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert proc.stdout == SCHEMA.read_text()
    pinned = json.loads((TOOLS / "package.json").read_text())["devDependencies"]["@grafana/schema"]
    assert f"@grafana/schema {pinned} " in json.loads(proc.stdout)["$comment"]


def library() -> dict[str, dict[str, str]]:
    return {
        d: {load_query(n, d).rstrip("\n"): n for n in available(d)} for d in ("flux", "influxql")
    }


@pytest.mark.parametrize(("name", "board"), dashboards())
def test_every_query_is_a_library_query_in_the_dashboards_dialect(
    name: str, board: dict[str, Any]
) -> None:
    dialect = name.split("/")[0]
    uid = {"flux": "nrg-influxdb", "influxql": "nrg-influxql"}[dialect]
    texts = library()[dialect]
    found = queries_of(board)
    assert len(found) >= 4
    for where, ref, query in found:
        assert query in texts, f"{name}: {where} runs a query that is not in queries/"
        assert ref == {"type": "influxdb", "uid": uid}, f"{name}: {where}"


@pytest.mark.parametrize(("name", "board"), dashboards())
def test_every_variable_is_defined_and_used(name: str, board: dict[str, Any]) -> None:
    defined = {v["name"] for v in board["templating"]["list"]}
    used: set[str] = set()
    for _, _, query in queries_of(board):
        used |= set(re.findall(r"\$\{?(\w+)", query)) - BUILTIN
    assert used == defined
    assert "host" in defined  # every dashboard filters by host


def test_datasource_uids_match_provisioning() -> None:
    provisioned = yaml.safe_load((PROVISIONING / "datasources" / "influxdb.yml").read_text())
    by_uid = {d["uid"]: d for d in provisioned["datasources"]}
    assert by_uid["nrg-influxdb"]["jsonData"]["version"] == "Flux"
    assert by_uid["nrg-influxql"]["jsonData"]["version"] == "InfluxQL"
    used = {ref["uid"] for _, b in dashboards() for _, ref, _ in queries_of(b)}
    assert used == set(by_uid)


def test_dashboard_provider_points_at_both_folders() -> None:
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "nrg.yml").read_text())
    paths = {p["options"]["path"] for p in provider["providers"]}
    assert paths == {f"/var/lib/grafana/dashboards/{d}" for d in ("flux", "influxql")}


def test_dashboard_uids_are_unique() -> None:
    uids = [b["uid"] for _, b in dashboards()]
    assert len(uids) == len(set(uids))


def test_every_flux_query_of_the_dashboards_type_checks(node: str) -> None:
    if not (TOOLS / "node_modules" / "@influxdata" / "flux-lsp-browser").is_dir():
        pytest.skip("npm tools missing: run `npm ci --prefix tools`")
    items = [
        {"name": f"{name}: {where}", "query": query}
        for name, board in dashboards()
        if name.startswith("flux/")
        for where, _, query in queries_of(board)
    ]
    proc = subprocess.run(
        [node, str(TOOLS / "flux-check.mjs"), "--grafana", "-"],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(items) > 20, proc.stderr
    assert [r["name"] for r in results if not r["valid"]] == []
