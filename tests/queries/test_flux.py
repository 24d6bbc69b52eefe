"""Every Flux library query type-checks with the Flux language server (npm, pinned in tools/)."""

from __future__ import annotations

import json
import subprocess

import pytest

from acquisition.queries import ALL, available, load_query, queries_dir, render
from tests.queries.conftest import TOOLS

CHECKER = TOOLS / "flux-check.mjs"


def check(node: str, items: list[dict[str, str]], *, grafana: bool) -> dict[str, dict[str, object]]:
    args = [node, str(CHECKER), *(["--grafana"] if grafana else []), "-"]
    proc = subprocess.run(
        args, input=json.dumps(items), capture_output=True, text=True, timeout=120, check=False
    )
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(items), proc.stderr
    assert proc.returncode == (0 if all(r["valid"] for r in results) else 1)
    return {str(r["name"]): r for r in results}


def test_every_flux_query_type_checks_as_grafana_runs_it(node: str) -> None:
    items = [{"name": n, "query": load_query(n, "flux")} for n in available("flux")]
    assert len(items) >= 20
    results = check(node, items, grafana=True)
    assert [n for n, r in results.items() if not r["valid"]] == []


def test_a_misspelt_function_fails_the_check(node: str) -> None:
    good = load_query("power_over_time", "flux")
    bad = good.replace("aggregateWindow(", "aggregateWindw(")
    assert bad != good
    results = check(
        node, [{"name": "good", "query": good}, {"name": "bad", "query": bad}], grafana=True
    )
    assert results["good"]["valid"] is True
    assert results["bad"]["valid"] is False


def test_without_grafanas_v_record_the_check_fails(node: str) -> None:
    results = check(
        node, [{"name": "q", "query": load_query("run_summary", "flux")}], grafana=False
    )
    assert results["q"]["valid"] is False


def test_rendered_flux_type_checks_on_its_own(node: str) -> None:
    params = {
        "experiment": 'exp "quoted"',
        "run": "r1",
        "host": ["h1.lab", "h/2"],
        "rank": ALL,
        "measurement": ["gpu", "nrg_step"],
        "timeRangeStart": 1_767_225_600_000_000_000,
        "timeRangeStop": 1_767_229_200_123_456_789,
        "windowPeriod": "10s",
        "bucket": "nrg",
    }
    items = [{"name": n, "query": render(load_query(n, "flux"), params)} for n in available("flux")]
    results = check(node, items, grafana=False)
    assert [n for n, r in results.items() if not r["valid"]] == []


def test_every_query_has_both_twins_and_a_description() -> None:
    where = queries_dir()
    flux = {p.stem for p in where.glob("*.flux")}
    influxql = {p.stem for p in where.glob("*.influxql")}
    assert flux == influxql
    files = [p for p in where.iterdir() if p.name not in ("__init__.py", "__pycache__")]
    assert {p.suffix for p in files} == {".flux", ".influxql"}
    for path in files:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        prefix = "// " if path.suffix == ".flux" else "-- "
        assert first.startswith(prefix) and len(first) > 20, path.name


@pytest.mark.parametrize("name", ["run_summary", "energy_per_epoch", "compare_energy_per_epoch"])
def test_run_queries_filter_by_host_and_rank(name: str) -> None:
    for dialect in ("flux", "influxql"):
        text = load_query(name, dialect)
        assert "$host" in text and "$rank" in text, (name, dialect)


def test_every_query_is_documented() -> None:
    page = (queries_dir().parent / "docs" / "guide" / "grafana.md").read_text(encoding="utf-8")
    assert [n for n in available() if f"`{n}`" not in page] == []
