"""End to end, a real 2-rank DDP job (gloo, CPU) under ``torchrun`` tracked by ``nrg-collect --``
on the powercap tree of known power (see ``fakepower.py``): global steps, the window from spawn
to exit, the slowed rank named with its waits, one graph, nothing on the terminal from tracing."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.store import read_points
from tests.answers import job_ddp
from tests.answers.fakepower import powercap_tree
from tests.answers.test_tracked import NRG, config, nrg, validate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]  # torchrun's two ranks start torch

PACKAGE_W, DRAM_W = 25.0, 5.0
STALE_S = 0.02
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@pytest.fixture(scope="module")
def rapl_root() -> Iterator[Path]:
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        yield root


@pytest.fixture(scope="module")
def ddp_run(rapl_root: Path) -> Iterator[tuple[Path, dict[str, object], str]]:
    with tempfile.TemporaryDirectory(prefix="nrg-ddp-") as d:
        tmp = Path(d)
        cfg = config(tmp, rapl_root)
        out = tmp / "summary.json"
        job = [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "tests.answers.job_ddp"]
        job += [str(tmp / "s"), str(tmp / "fallback"), str(tmp / "graphs")]
        # the two ranks took over 150 s at a load average of 10
        proc = nrg(
            "-c", str(cfg), "--run", "ddp1", "--quiet", "--summary", "json",
            "--summary-file", str(out), "--", *job, timeout=400,
        )  # fmt: skip
        yield tmp, json.loads(out.read_text()), proc.stderr


def test_global_steps_and_energy_per_step(ddp_run: tuple[Path, dict, str]) -> None:
    _, data, _ = ddp_run
    validate(data)
    n = job_ddp.EPOCHS * job_ddp.STEPS
    assert data["steps"]["count"] == n
    assert [(e["epoch"], e["steps"]) for e in data["epochs"]] == [
        (epoch, job_ddp.STEPS) for epoch in range(job_ddp.EPOCHS)
    ]
    assert data["steps"]["samples"] == 2 * n * job_ddp.BATCH
    watts = PACKAGE_W + DRAM_W
    for e in data["epochs"]:  # the ranks share one host: its power once, over the slowest rank
        assert e["energy_j"] == pytest.approx(watts * e["duration_s"], abs=2 * watts * STALE_S)
    assert data["ranks"] == ["0", "1"]
    (host,) = data["per_host"]
    assert [r["rank"] for r in host["ranks"]] == ["0", "1"]
    assert host["energy_j"] == pytest.approx(data["energy"]["total_j"])
    assert host["steps_energy_j"] == pytest.approx(sum(e["energy_j"] for e in data["epochs"]))


def test_window_is_spawn_to_exit(ddp_run: tuple[Path, dict, str]) -> None:
    tmp, data, _ = ddp_run
    runs = read_points(tmp / "out", ["nrg_run", "nrg_job"], tags={"run": "ddp1"})
    by_event: dict[tuple[str, str], list[int]] = {}
    for p in runs:
        by_event.setdefault((p.measurement, str(p.fields["event"])), []).append(p.time_ns)
    (spawn,) = by_event[("nrg_job", "spawn")]
    (exit_,) = by_event[("nrg_job", "exit")]
    starts, ends = by_event[("nrg_run", "start")], by_event[("nrg_run", "end")]
    assert len(starts) == len(ends) == 2  # one per rank
    assert spawn < min(starts) and exit_ > max(ends)
    # one point says the command ended: the agent's nrg_job exit
    assert [e for m, e in by_event if e == "exit"] == ["exit"]
    assert data["duration_s"] == pytest.approx((exit_ - spawn) / 1e9, abs=1e-3)
    assert data["exit_code"] == 0


def test_slowed_rank_is_the_straggler(ddp_run: tuple[Path, dict, str]) -> None:
    _, data, _ = ddp_run
    st = data["stragglers"]
    n = job_ddp.EPOCHS * job_ddp.STEPS
    assert st["slowest_rank"] == str(job_ddp.SLOW_RANK) and st["slowest_steps"] == n
    # rank 0 waits the known delay every step (scheduling adds to it, never takes from it
    # beyond the counters' staleness)
    assert st["wait_s"] >= n * (job_ddp.SLOW_S - STALE_S)
    assert st["wait_s"] <= n * job_ddp.SLOW_S * 2
    # waiting, rank 0 uses its share of the host's constant power: half of it
    watts = PACKAGE_W + DRAM_W
    assert st["wasted_j"] == pytest.approx(watts / 2 * st["wait_s"], rel=0.05)
    assert st["wasted_share"] == pytest.approx(st["wasted_j"] / data["energy"]["total_j"])


def test_one_graph_and_no_tracing_noise(ddp_run: tuple[Path, dict, str]) -> None:
    tmp, _, stderr = ddp_run
    graphs = list((tmp / "graphs").glob("*.graph.json"))
    assert len(graphs) == 1
    assert json.loads(graphs[0].read_text())["source"] == "torch.export"
    assert "jit" not in stderr and "TracerWarning" not in stderr


def test_report_by_rank(ddp_run: tuple[Path, dict, str]) -> None:
    tmp, _, _ = ddp_run
    proc = nrg("report", "ddp1", "--data", str(tmp / "out"), "--by", "rank", "--format", "csv")
    rows = proc.stdout.strip().splitlines()
    assert rows[0].startswith("experiment,run,host,rank,")
    assert [r.split(",")[3] for r in rows[1:]] == ["0", "1"]
    text = nrg("report", "ddp1", "--data", str(tmp / "out"), "--by", "rank").stdout
    assert f"slowest rank {job_ddp.SLOW_RANK}" in text


__all__ = ["NRG"]
