"""Two hosts simulated on this machine: two real agents with different ``host`` settings, each on
its own powercap tree of known power, each tracking one node of a 2-node torchrun rendezvous on
127.0.0.1 (one rank per node, gloo), each writing its own directory and both one real influxd 1.6.
``report --influx``, ``report --data A --data B`` and the InfluxQL library agree with each other
and with the per-host reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.queries import ALL, load_query, render
from tests.answers import job_ddp
from tests.answers.fakepower import powercap_tree
from tests.answers.test_tracked import NRG, REPO, nrg
from tests.servers import Influxd, free_port, have

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),  # two torch ranks and two agents start on two shared CPUs
    pytest.mark.skipif(not have("influxd"), reason="influxd (Debian influxdb) not here"),
]

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
WATTS = {"hostA": 20.0, "hostB": 45.0}
STALE_S = 0.02
DB = "cluster"
RUN = "two-hosts"


def agent_config(tmp: Path, host: str, rapl_root: Path, influxd: Influxd) -> Path:
    cfg = tmp / f"{host}.toml"
    cfg.write_text(
        f"""
[agent]
host = "{host}"
interval = "50ms"
flush_interval = "200ms"
state_dir = "{tmp}/{host}-state"
experiment = "exp"

[[collectors.rapl]]
root = "{rapl_root}"
backend = "powercap"

[[collectors.hooks]]
socket_path = "{tmp}/{host}.s"
ingest_dir = "{tmp}/{host}-fallback"

[[processors.attribution]]

[[sinks.file]]
dir = "{tmp}/{host}"
fsync = "never"

[[sinks.influxdb]]
url = "{influxd.url}"
api = "v1"
database = "{DB}"
username = "{influxd.admin_user}"
password = "{influxd.admin_password}"
flush_interval = "200ms"
"""
    )
    return cfg


@pytest.fixture(scope="module")
def influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Influxd]:
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    server.start()
    server.query(f'CREATE DATABASE "{DB}"')
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def two_hosts(influxd: Influxd) -> Iterator[Path]:
    with (
        powercap_tree({"package-0": WATTS["hostA"]}) as root_a,
        powercap_tree({"package-0": WATTS["hostB"]}) as root_b,
        tempfile.TemporaryDirectory(prefix="nrg-2h-") as d,
    ):
        tmp = Path(d)
        port = free_port()
        procs = []
        for node, (host, root) in enumerate((("hostA", root_a), ("hostB", root_b))):
            cfg = agent_config(tmp, host, root, influxd)
            job = [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node)]
            job += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
            job += ["-m", "tests.answers.job_ddp", str(tmp / f"{host}.s"), "", str(tmp / "g")]
            cmd = [NRG, "-c", str(cfg), "--run", RUN, "-q", "--summary", "json"]
            cmd += ["--summary-file", str(tmp / f"{host}.json"), "--", *job]
            env = {**os.environ, "NRG_FALLBACK_DIR": str(tmp / f"{host}-fallback")}
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE))
        for proc in procs:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err.decode()
        yield tmp


def report(*args: str) -> dict:  # type: ignore[type-arg]
    return json.loads(nrg("report", RUN, "--format", "json", *args).stdout)


def test_influx_files_and_per_host_reports_agree(
    two_hosts: Path, influxd: Influxd, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = two_hosts
    both = report("--data", str(tmp / "hostA"), "--data", str(tmp / "hostB"))
    monkeypatch.setenv("NRG_INFLUX_USER", influxd.admin_user)
    monkeypatch.setenv("NRG_INFLUX_PASSWORD", influxd.admin_password)
    db = report("--influx", f"{influxd.url}/{DB}")
    n = job_ddp.EPOCHS * job_ddp.STEPS
    for s in (both, db):
        assert s["hosts"] == ["hostA", "hostB"] and s["ranks"] == ["0", "1"]
        assert s["steps"]["count"] == n
        assert [r["host"] for r in s["per_rank"]] == ["hostA", "hostB"]
        assert s["stragglers"]["slowest_rank"] == str(job_ddp.SLOW_RANK)
    assert db["duration_s"] == pytest.approx(both["duration_s"], abs=1e-6)
    assert db["energy"]["total_j"] == pytest.approx(both["energy"]["total_j"], rel=1e-9)
    assert db["steps"]["energy_j"] == pytest.approx(both["steps"]["energy_j"], rel=1e-9)
    for a, b in zip(db["per_rank"], both["per_rank"], strict=True):
        assert {k: v for k, v in a.items() if isinstance(v, str)} == {
            k: v for k, v in b.items() if isinstance(v, str)
        }
        assert {k: v for k, v in a.items() if not isinstance(v, str)} == pytest.approx(
            {k: v for k, v in b.items() if not isinstance(v, str)}, rel=1e-9
        )
    # each host's energy over the run's window = its known power × the window; the part of the
    # window its own agent did not sample (it started later or stopped sooner than the other)
    # is its error bar
    window = both["duration_s"]
    for host, watts in WATTS.items():
        assert measured(both, host) == pytest.approx(watts * window, abs=2 * watts * STALE_S)
        mine = next(e for e in both["per_host"] if e["host"] == host)
        assert mine["energy_j"] == pytest.approx(covered(both, host))
    # each host's own report covers its own command, a window inside the run's
    alone_j = 0.0
    for host, watts in WATTS.items():
        alone = report("--data", str(tmp / host))
        assert alone["hosts"] == [host] and alone["steps"]["count"] == n
        assert alone["duration_s"] <= window + 1e-6
        assert measured(alone, host) == pytest.approx(
            watts * alone["duration_s"], abs=2 * watts * STALE_S
        )
        alone_j += alone["energy"]["total_j"]
    assert both["energy"]["total_j"] >= alone_j - 4 * sum(WATTS.values()) * STALE_S


def covered(summary: dict, host: str) -> float:  # type: ignore[type-arg]
    """The host's counted energy in the summary."""
    return sum(
        s["energy_j"] for s in summary["energy"]["sources"] if s["host"] == host and s["counted"]
    )


def measured(summary: dict, host: str) -> float:  # type: ignore[type-arg]
    """The host's counted energy plus its error bars (the window's unsampled part)."""
    return covered(summary, host) + sum(
        s["error_j"] or 0.0
        for s in summary["energy"]["sources"]
        if s["host"] == host and s["counted"]
    )


def test_influxql_library_sees_both_hosts(two_hosts: Path, influxd: Influxd) -> None:
    both = report("--data", str(two_hosts / "hostA"), "--data", str(two_hosts / "hostB"))
    start = _ns(both["start"])
    params = {
        "experiment": "exp",
        "run": RUN,
        "host": ALL,
        "rank": ALL,
        "timeRangeStart": start - 10**9,
        "timeRangeStop": _ns(both["end"]) + 10**9,
    }
    q = render(load_query("run_summary", "influxql"), params, dialect="influxql")
    rows = influxd.rows(q, DB)
    by_host: dict[str, float] = {}
    for row in rows:
        by_host[row["host"]] = by_host.get(row["host"], 0.0) + row["energy_joules"]
        assert row["steps"] == job_ddp.EPOCHS * job_ddp.STEPS  # one rank per host
    assert sorted(by_host) == ["hostA", "hostB"]
    # per host, the energy in its rank's steps: its power × the time its rank's steps took
    for entry in both["per_rank"]:
        watts = WATTS[entry["host"]]
        assert by_host[entry["host"]] == pytest.approx(
            watts * entry["time_s"], abs=4 * watts * STALE_S
        )
    total = sum(by_host.values())
    steps_j = sum(e["steps_energy_j"] for e in both["per_host"])
    slack = sum(WATTS.values()) * both["stragglers"]["wait_s"] + 4 * STALE_S * sum(WATTS.values())
    assert total == pytest.approx(steps_j, abs=slack)


def _ns(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1e9)
