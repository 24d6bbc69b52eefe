"""End to end: ``nrg-collect -- CMD`` on a real instrumented CPU job of known epoch lengths,
RAPL a powercap tree at known constant powers. The forecast made after the first epoch is
within 5 % of the run's duration and energy for a steady job; when the steps (and so the
epochs) vary by a known amount its interval is wider and still holds what happened."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from acquisition.lineproto import decode_line
from tests.answers.fakepower import powercap_tree

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]
PACKAGE_W, DRAM_W = 25.0, 5.0
EPOCHS, STEPS, WAIT_S = 4, 6, 0.12


@pytest.fixture(scope="module")
def rapl_root() -> Iterator[Path]:
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        yield root


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nrg-fc-") as d:  # Unix socket paths ≤ 107 bytes
        yield Path(d)


def config(tmp: Path, rapl_root: Path) -> Path:
    cfg = tmp / "nrg.toml"
    cfg.write_text(
        f"""
[agent]
interval = "50ms"
flush_interval = "200ms"
state_dir = "{tmp}/state"
data_dir = "{tmp}/data"
experiment = "fc"

[report]
carbon_intensity = "FR"

[[collectors.rapl]]
root = "{rapl_root}"
backend = "powercap"

[[collectors.hooks]]
socket_path = "{tmp}/s"
ingest_dir = "{tmp}/fallback"

[[processors.attribution]]
[[processors.forecast]]

[[sinks.file]]
dir = "{tmp}/out"
fsync = "never"
"""
    )
    return cfg


def tracked(
    tmp: Path, cfg: Path, run: str, jitter: float, *extra: str, job_args: tuple[str, ...] = ()
) -> dict[str, object]:
    job = [sys.executable, "-m", "tests.forecast.job_epochs"]
    job += [str(tmp / "s"), str(tmp / "fallback"), str(tmp / "graphs")]
    job += [str(EPOCHS), str(STEPS), str(WAIT_S), str(jitter), *job_args]
    out = tmp / f"{run}.json"
    cmd = [NRG, "-c", str(cfg), "--run", run, "--quiet", "--summary", "text"]
    cmd += ["--summary-file", str(out), *extra, "--", *job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Forecast after epoch 1 of 4" in proc.stderr
    assert "forecast after epoch 1/4" in proc.stderr  # the log line at the epoch's end
    return {"summary": json.loads(out.read_text()), "stderr": proc.stderr}


def forecasts(tmp: Path, run: str) -> list[dict[str, object]]:
    points = [
        decode_line(line)
        for f in sorted((tmp / "out").rglob("*.lp*"))
        if f.suffix == ".lp"
        for line in f.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    found = [
        p
        for p in points
        if p.measurement == "nrg_forecast"
        and p.tags.get("run") == run
        and p.tags.get("source") == "total"
    ]
    return [dict(p.fields) for p in sorted(found, key=lambda p: p.time_ns)]


def teardown_s(tmp: Path, run: str) -> float:
    """Seconds from the end of the job's session to the command's exit, from the run's own
    points: the interpreter's exit comes after the last epoch, and no forecast can see it."""
    times: dict[str, int] = {}
    for f in (tmp / "out").glob("*.lp"):
        for line in f.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            p = decode_line(line)
            if p.tags.get("run") != run:
                continue
            if p.measurement == "nrg_run" and p.fields.get("event") == "end":
                times["end"] = p.time_ns
            elif p.measurement == "nrg_job" and p.fields.get("event") == "exit":
                times["exit"] = p.time_ns
    return (times["exit"] - times["end"]) / 1e9


def forecastable(figure: dict[str, float], outside: float) -> tuple[float, float]:
    """(the forecast's error against what it could see, the actual less ``outside``)."""
    seen = figure["actual"] - outside
    return (figure["forecast"] - seen) / figure["actual"], seen


def test_forecast_after_the_first_epoch(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    steady = tracked(short_tmp, cfg, "steady", 0.0, job_args=("--plan",))
    varying = tracked(short_tmp, cfg, "varying", 0.1, "--epochs", str(EPOCHS))

    schema = json.loads((REPO / "acquisition/schemas/summary-1.json").read_text())
    for got in (steady, varying):
        jsonschema.validate(got["summary"], schema)
    s = steady["summary"]
    fc = s["forecast"]  # type: ignore[index]
    assert fc["epochs_done"] == 1 and fc["epochs"] == EPOCHS and fc["basis"] == "steps"
    # The run's window is spawn to exit: the forecast covers start-up and every epoch; the
    # command's teardown after the session (measured from its points) is outside its view.
    watts = PACKAGE_W + DRAM_W
    tail = teardown_s(short_tmp, "steady")
    assert abs(forecastable(fc["duration_s"], tail)[0]) < 0.05
    assert abs(forecastable(fc["energy_j"], tail * watts)[0]) < 0.05
    assert fc["energy_j"]["actual"] == pytest.approx(s["energy"]["total_j"])  # type: ignore[index]
    # the summary's carbon: the table's figure for France, said where it came from
    assert s["carbon_intensity_g_per_kwh"] == 56.0  # type: ignore[index]
    assert "France (FR)" in s["carbon_intensity_source"]  # type: ignore[index]
    assert "Carbon intensity: France (FR)" in str(steady["stderr"])

    v = varying["summary"]["forecast"]  # type: ignore[index]
    tail = teardown_s(short_tmp, "varying")
    for name, outside in (("duration_s", tail), ("energy_j", tail * watts)):
        seen = forecastable(v[name], outside)[1]
        assert v[name]["low"] <= seen <= v[name]["high"], (name, v[name], outside)
    width = {
        name: fc_["duration_s"]["high"] - fc_["duration_s"]["low"]
        for name, fc_ in (("steady", fc), ("varying", v))
    }
    assert width["varying"] > 1.5 * width["steady"]  # the steady one: timing noise only

    # every epoch but the last has its nrg_forecast points, for Grafana
    for run in ("steady", "varying"):
        got = forecasts(short_tmp, run)
        assert [f["epochs_done"] for f in got] == list(range(1, EPOCHS))
        assert all(f["carbon_intensity_g_per_kwh"] == 56.0 for f in got)
