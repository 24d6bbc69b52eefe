"""A real instrumented run, end to end: the library's InfluxQL queries on influxd 1.6 give the
numbers ``nrg-collect report --format json`` gives from the same run's files.

The run is the one of ``tests/answers``: the real agent (``nrg-collect -- python -m
tests.answers.job_train``) with RAPL read from a powercap tree at known constant powers, a file
sink, and the attribution processor. Its ``.lp`` files are then written into influxd by the
InfluxDB sink on its v1 API, and the queries run on that database.

Where the two define a figure differently:

- ``run_summary`` (and ``cluster_energy_total``) sum, per source, the energy *inside training
  steps* (``nrg_energy`` with ``scope = 'step'``). The report's ``energy.sources`` is each
  collector's counter over the *whole run* (startup, evaluations between epochs and teardown
  included). The queries' figure is the report's per-epoch ``sources`` summed over epochs, and
  the report's whole-run total exceeds the counted sources' step energy by exactly its
  ``outside_steps_j``: both are checked. Step energy is what the queries can answer for any
  time range a dashboard picks; the whole-run counter differences need the run's own window.
- ``run_summary``'s ``steps`` counts the steps a source has energy for; the report's
  ``steps.count`` counts ``nrg_step`` points. They agree when every step is bracketed by the
  source's samples, which the report would otherwise say in its notes (checked empty).
- The queries give every figure per source; the report adds the counted sources (RAPL package
  and dram here, no wall meter) into one figure per step, epoch and module.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.queries import ALL
from acquisition.report.cli import report_main
from acquisition.store import Store
from acquisition.summary import counted_sources
from tests.answers import job_train
from tests.answers.fakepower import powercap_tree
from tests.answers.test_tracked import DRAM_W, PACKAGE_W, config, nrg
from tests.queries.conftest import influxql, write_v1
from tests.servers import Influxd, have

pytestmark = [pytest.mark.slow, pytest.mark.server]

DB = "real"
RUN, EXPERIMENT = "a", "exp"


@pytest.fixture(scope="module")
def run_dir() -> Iterator[Path]:
    """The file sink's directory after one tracked training run."""
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    power = {"package-0": PACKAGE_W, "dram": DRAM_W}
    # a short directory: Unix socket paths are limited to 107 bytes
    with powercap_tree(power) as root, tempfile.TemporaryDirectory(prefix="nrg-q-") as d:
        tmp = Path(d)
        job = [sys.executable, "-m", "tests.answers.job_train"]
        job += [str(tmp / "s"), str(tmp / "fallback"), str(tmp / "graphs")]
        cfg = str(config(tmp, root))
        nrg("-c", cfg, "--run", RUN, "--quiet", "--", *job, check_rc=job_train.EXIT_CODE)
        yield tmp / "out"


@pytest.fixture(scope="module")
def report(run_dir: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report_main(["--data", str(run_dir), RUN, "--format", "json"]) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    assert data["notes"] == []  # every step has energy from every source
    return data


@pytest.fixture(scope="module")
def server(
    run_dir: Path, loaded: Influxd, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Influxd, dict[str, Any]]:
    """The known-run server, with the real run written by the v1 sink into database ``real``;
    and the parameters that select the run there."""
    points = list(Store(run_dir).points())
    loaded.query(f"CREATE DATABASE {DB}")
    write_v1(loaded, DB, points, tmp_path_factory.mktemp("sink-real"))
    params: dict[str, Any] = {
        "experiment": EXPERIMENT,
        "run": RUN,
        "host": ALL,
        "rank": ALL,
        "timeRangeStart": min(p.time_ns for p in points),
        "timeRangeStop": max(p.time_ns for p in points),
    }
    return loaded, params


def query(server: tuple[Influxd, dict[str, Any]], name: str) -> list[dict[str, Any]]:
    influxd, params = server
    (rows,) = influxql(influxd, name, params, db=DB)
    assert rows, f"{name} found nothing"
    return rows


def approx(expected: Any) -> Any:
    return pytest.approx(expected, rel=1e-9, abs=1e-9)


def epoch_sources(report: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for epoch in report["epochs"]:
        for source, joules in epoch["sources"].items():
            out[source] += joules
    return dict(out)


def test_run_summary_per_source_and_steps(
    server: tuple[Influxd, dict[str, Any]], report: dict[str, Any]
) -> None:
    rows = query(server, "run_summary")
    assert {r["host"] for r in rows} == set(report["hosts"])
    energy = {r["source"]: r["energy_joules"] for r in rows}
    assert energy == approx(epoch_sources(report))
    assert set(energy) == {"rapl:package-0", "rapl:dram-0"}
    assert {r["source"]: r["steps"] for r in rows} == dict.fromkeys(
        energy, report["steps"]["count"]
    )
    counted = sum(energy[s] for s in counted_sources(energy))
    e = report["energy"]
    assert e["total_j"] - counted == pytest.approx(e["outside_steps_j"], rel=1e-9)
    cluster = {r["source"]: r["energy_joules"] for r in query(server, "cluster_energy_total")}
    assert cluster == approx(energy)


def test_energy_per_epoch(server: tuple[Influxd, dict[str, Any]], report: dict[str, Any]) -> None:
    rows = query(server, "energy_per_epoch")
    got = {(int(r["epoch"]), r["source"]): r["energy_joules"] for r in rows}
    want = {(e["epoch"], s): j for e in report["epochs"] for s, j in e["sources"].items()}
    assert got == approx(want)
    assert {epoch for epoch, _ in got} == set(range(job_train.EPOCHS))
    per_epoch: dict[int, float] = defaultdict(float)
    for (epoch, source), joules in got.items():
        if source in counted_sources(s for _, s in got):
            per_epoch[epoch] += joules
    assert [per_epoch[e["epoch"]] for e in report["epochs"]] == approx(
        [e["energy_j"] for e in report["epochs"]]
    )


def test_energy_per_step(server: tuple[Influxd, dict[str, Any]], report: dict[str, Any]) -> None:
    rows = query(server, "energy_per_step")
    per_step: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for r in rows:
        per_step[(r["host"], r["time"])][r["source"]] = r["energy_joules"]
    totals = [sum(v[s] for s in counted_sources(v)) for v in per_step.values()]
    steps = report["steps"]
    assert len(totals) == steps["count"]
    assert statistics.fmean(totals) == approx(steps["energy_j"]["mean"])
    assert statistics.median(totals) == approx(steps["energy_j"]["p50"])
    assert statistics.stdev(totals) == approx(steps["energy_j"]["sd"])


def test_top_modules(server: tuple[Influxd, dict[str, Any]], report: dict[str, Any]) -> None:
    rows = query(server, "top_modules")
    sources = {r["source"] for r in rows}
    per_module: dict[str, float] = defaultdict(float)
    for r in rows:
        if r["source"] in counted_sources(sources):
            per_module[r["module"]] += r["energy_joules"]
    ranked = sorted(per_module.items(), key=lambda kv: -kv[1])
    want = [(m["module"], m["energy_j"]) for m in report["modules"]]
    assert [m for m, _ in ranked] == [m for m, _ in want]
    assert [j for _, j in ranked] == approx([j for _, j in want])
