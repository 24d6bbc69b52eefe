"""End to end: ``nrg-collect -- CMD`` prints the run's summary, ``report`` and ``compare`` read
the same run back from the file sink's directory. The agent is the real one, RAPL a powercap
tree at known constant powers (see ``fakepower.py``), the job a real instrumented CPU training
loop (``job_train.py``) or an uninstrumented command."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from acquisition.advancing import WINDOW_S
from acquisition.energy import FIX_RAPL_STUCK
from acquisition.lineproto import LineEncoder, decode_line
from acquisition.point import Point
from acquisition.summary import NO_ENERGY, SCHEMA
from collectors.rapl import WHY_FIRMWARE
from tests.answers import job_train
from tests.answers.fakepower import powercap_tree, stale_s
from tests.selfstats import read_lag_s

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "acquisition/schemas/summary-1.json"
PACKAGE_W, DRAM_W = 25.0, 5.0
STALE_S = 0.02
"""How stale a fixture counter may be when read on an idle machine (rewritten every ~1 ms); what a
run measured is added to it (see :func:`stale`)."""


@pytest.fixture(scope="module")
def rapl_root() -> Iterator[Path]:
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        yield root


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="nrg-ans-") as d:
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
experiment = "exp"

[[collectors.rapl]]
root = "{rapl_root}"
backend = "powercap"

[[collectors.procfs]]
memory_detail_interval = "0s"

[[collectors.hooks]]
socket_path = "{tmp}/s"
ingest_dir = "{tmp}/fallback"

[[processors.attribution]]

[[sinks.file]]
dir = "{tmp}/out"
fsync = "never"
"""
    )
    return cfg


def nrg(
    *args: str, check_rc: int | None = 0, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [NRG, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def stale(tmp: Path, rapl_root: Path) -> float:
    """STALE_S plus what was measured: the fixture writer's longest gap between two rewrites and
    the agent's longest RAPL collect (a tick is stamped before its reads; the agent's self-stats
    in the file sink's output)."""
    return STALE_S + stale_s(rapl_root) + read_lag_s(tmp / "out", "rapl")


def validate(data: object) -> None:
    jsonschema.validate(data, json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.timeout(480)  # two tracked runs and ten commands: over 180 s at a load average of 10
def test_training_run_summary_report_and_compare(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    job = [sys.executable, "-m", "tests.answers.job_train"]
    job += [str(short_tmp / "s"), str(short_tmp / "fallback"), str(short_tmp / "graphs")]
    runs = {}
    for run in ("a", "b"):
        out = short_tmp / f"{run}.json"
        proc = nrg(
            "-c", str(cfg), "--run", run, "--quiet", "--summary", "json",
            "--summary-file", str(out), "--", *job, check_rc=job_train.EXIT_CODE,
        )  # fmt: skip
        printed = json.loads(proc.stderr[proc.stderr.index("{\n") :])
        runs[run] = data = json.loads(out.read_text())
        assert printed == data
        validate(data)
        assert data["schema"] == SCHEMA
        assert data["run"] == run and data["experiment"] == "exp"
        assert data["exit_code"] == job_train.EXIT_CODE
        watts = PACKAGE_W + DRAM_W
        late = stale(short_tmp, rapl_root)
        bound = 2 * watts * late
        src = {s["source"]: s for s in data["energy"]["sources"]}
        # the window is spawn to exit: the part after the last sample is the sources' error bar
        unsampled = sum(s["error_j"] for s in src.values() if s["counted"])
        assert data["energy"]["total_j"] == pytest.approx(
            watts * data["duration_s"], abs=bound + unsampled
        )
        assert src["rapl:package-0"]["energy_j"] == pytest.approx(
            PACKAGE_W * data["duration_s"],
            abs=2 * PACKAGE_W * late + src["rapl:package-0"]["error_j"],
        )
        steps = data["steps"]
        assert steps["count"] >= job_train.EPOCHS * job_train.STEPS
        assert [e["epoch"] for e in data["epochs"]] == list(range(job_train.EPOCHS))
        # every epoch: energy = power × the time its steps took
        for e in data["epochs"]:
            assert e["energy_j"] == pytest.approx(
                watts * e["duration_s"], abs=2 * e["steps"] * watts * late
            )
        # outside steps: at least the evaluations (paused) at the known power
        evals = job_train.EPOCHS * job_train.EVAL_S
        assert data["energy"]["outside_steps_j"] >= watts * evals - bound
        assert data["modules"] and 0 < sum(m["share"] for m in data["modules"]) <= 1 + 1e-9
        assert data["resources"]["max_ram"]["main"]["total_rss"] > 0

    # report reads the same runs back from the file sink's directory: the same figures
    rep = json.loads(nrg("report", "-c", str(cfg), "a", "--format", "json").stdout)
    validate(rep)
    assert rep["energy"]["total_j"] == pytest.approx(runs["a"]["energy"]["total_j"], rel=1e-9)
    assert rep["steps"]["count"] == runs["a"]["steps"]["count"]
    listing = nrg("report", "--data", str(short_tmp / "out"), "--list").stdout
    assert [line.split()[1] for line in listing.splitlines()[1:]] == ["a", "b"]
    # an experiment is its runs
    both = json.loads(nrg("report", "-c", str(cfg), "exp", "--format", "json").stdout)
    assert [s["run"] for s in both] == ["a", "b"]
    csv_text = nrg("report", "-c", str(cfg), "a", "b", "--format", "csv").stdout
    assert csv_text.splitlines()[0].startswith("experiment,run,host,start")
    assert len(csv_text.splitlines()) == 3

    cmp = json.loads(nrg("compare", "-c", str(cfg), "a", "b", "--format", "json").stdout)
    energy = next(f for f in cmp["figures"] if f["name"] == "energy")
    a, b = energy["values"]
    assert a["value"] == pytest.approx(runs["a"]["energy"]["total_j"], rel=1e-9)
    assert b["diff"] == pytest.approx(b["value"] - a["value"])
    per_step = next(f for f in cmp["figures"] if f["name"] == "energy per step")
    mean_a = runs["a"]["steps"]["energy_j"]["mean"]
    assert per_step["values"][0]["value"] == pytest.approx(mean_a, rel=1e-9)
    assert per_step["values"][0]["error"] == pytest.approx(
        runs["a"]["steps"]["energy_j"]["sd"] / runs["a"]["steps"]["count"] ** 0.5, rel=1e-9
    )
    # a run against itself: no difference, inside the error bars
    same = json.loads(nrg("compare", "-c", str(cfg), "a", "a", "--format", "json").stdout)
    for f in same["figures"]:
        v = f["values"][1]
        assert v["diff"] in (None, 0.0) and v["significant"] in (None, False)
    assert "energy per step" in nrg("compare", "-c", str(cfg), "a", "b").stdout


def test_uninstrumented_command_text_summary(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    proc = nrg(
        "-c", str(cfg), "--quiet", "--summary-file", str(short_tmp / "s.json"), "--",
        sys.executable, "-c", "import time; print('job output'); time.sleep(1)",
    )  # fmt: skip
    assert proc.stdout == "job output\n"
    assert "nrg summary: run python" in proc.stderr
    assert "Energy:" in proc.stderr and "rapl:package-0" in proc.stderr
    data = json.loads((short_tmp / "s.json").read_text())
    validate(data)
    watts = PACKAGE_W + DRAM_W
    # the window is the command's spawn to exit; what of it no two samples bracket (before the
    # first reading, after the last) is the sources' error bar
    unsampled = sum(s["error_j"] for s in data["energy"]["sources"] if s["counted"])
    assert data["energy"]["total_j"] == pytest.approx(
        watts * data["duration_s"], abs=2 * watts * stale(short_tmp, rapl_root) + unsampled
    )
    assert data["steps"]["count"] == 0 and data["energy"]["outside_steps_j"] is None
    assert data["exit_code"] == 0
    # the default text: short, no n/a line on this machine without a GPU
    summary = proc.stderr[proc.stderr.index("nrg summary:") :]
    assert "n/a" not in summary and "GPU" not in summary
    assert "Peak RAM: job " in summary and "CPU use: job mean " in summary
    assert "Max RAM:" not in summary
    # --summary full: gpu_tracker's layout, every figure
    full = nrg(
        "-c", str(cfg), "--quiet", "--summary", "full", "--",
        sys.executable, "-c", BUSY_JOB.format(s=0.5),
    ).stderr  # fmt: skip
    headings = [line for line in full.splitlines() if line and not line.startswith(" ")]
    assert headings[-5:] == [
        "Max RAM:",
        "Max GPU RAM:",
        "CPU utilization:",
        "GPU utilization:",
        "Compute time:",
    ]
    for line in ("   Unit: gigabytes", "   Main:", "      Total RSS: ", "   System core count: "):
        assert line in full, line


BUSY_JOB = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass"


def test_counters_that_never_move_are_not_advancing_not_a_source(short_tmp: Path) -> None:
    """A powercap tree whose counters stand still (as a VM's psys does): the start-up log says
    they are not advancing and why, no rapl point is written (no zero power), and the summary's
    text and JSON open with the no-energy sentence naming RAPL first with its fix."""
    with powercap_tree({}) as still:
        cfg = config(short_tmp, still)
        proc = nrg(
            "-c", str(cfg), "--summary-file", str(short_tmp / "s.json"), "--",
            sys.executable, "-c", BUSY_JOB.format(s=WINDOW_S + 1.5),
        )  # fmt: skip
    log = [line for line in proc.stderr.splitlines() if "not advancing" in line]
    for domain in ("package", "dram"):
        said = f"rapl: not advancing: {domain} (socket 0) did not move in "
        assert any(said in line and line.endswith(f" ({WHY_FIRMWARE})") for line in log), log
    points = [line for f in (short_tmp / "out").glob("*.lp") for line in f.read_text().splitlines()]
    assert points and not [line for line in points if line.startswith("rapl,")]
    summary = proc.stderr[proc.stderr.index("No energy was measured") :]
    first = summary.splitlines()[0]
    assert first.startswith(
        "No energy was measured: rapl: not advancing: package (socket 0), dram (socket 0) did "
        "not move in "
    )
    assert f"({WHY_FIRMWARE}) (fix: {FIX_RAPL_STUCK}); emonpi: " in first
    data = json.loads((short_tmp / "s.json").read_text())
    validate(data)
    assert data["no_energy_reason"] == first
    assert data["energy"]["sources"] == [] and data["energy"]["total_j"] == 0.0


def test_no_energy_source_is_said_first(short_tmp: Path) -> None:
    empty = short_tmp / "empty"
    empty.mkdir()
    cfg = config(short_tmp, empty)
    text = cfg.read_text().replace("[[collectors.rapl]]", "[[collectors.rapl]]\n# none here")
    cfg.write_text(text)
    proc = nrg("-c", str(cfg), "--quiet", "--", sys.executable, "-c", "pass", check_rc=None)
    if proc.returncode == 2:  # an explicit collector that cannot open is a config error
        pytest.skip("explicit RAPL without a tree is refused at start")
    summary = proc.stderr[proc.stderr.index("No energy was measured") :]
    assert summary.startswith(NO_ENERGY.split("{")[0])
    assert "rapl" in summary.splitlines()[0]


TRACKER_JOB = """
import json, sys, time
from acquisition import Tracker
t = Tracker()
with t:
    time.sleep(0.6)
    with t.window("eval"):
        time.sleep(0.3)
s = t.summary()
print(json.dumps({"available": t.available, "agent_data": str(t.agent_data),
                  "total_j": s.energy.total_j, "duration_s": s.duration_s,
                  "eval_j": t.windows[0].energy_j, "eval_s": t.windows[0].duration_s}))
"""


def test_a_tracker_inside_a_tracked_job_reads_the_agent(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    proc = nrg("-c", str(cfg), "--quiet", "--summary", "none", "--", sys.executable, "-c",
               TRACKER_JOB)  # fmt: skip
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["available"] == ["rapl", "procfs", "hooks"]  # the agent's, opened there
    assert data["agent_data"] == str(short_tmp / "out")
    watts = PACKAGE_W + DRAM_W
    bound = 2 * watts * stale(short_tmp, rapl_root)
    assert data["total_j"] == pytest.approx(watts * data["duration_s"], abs=bound)
    assert data["eval_j"] == pytest.approx(watts * data["eval_s"], abs=bound)


CROWDED_JOB = """
import json, time
from acquisition import Tracker
t = Tracker()
waits = []  # (a window's end, when its exit returned): the wait for the readings after it
with t:
    with t.window("all"):
        for i in range(3):
            with t.window(f"w{i}"):
                time.sleep(0.2)
            waits.append((t.windows[-1].end_ns, time.time_ns()))
    waits.append((t.windows[-1].end_ns, time.time_ns()))
s = t.summary()
own = {p.tags.get("run") for p in t.points()}
print(json.dumps({"available": t.available, "unavailable": t.unavailable, "runs": sorted(own),
                  "timed_out": t.waits_timed_out, "windows": [w.to_dict() for w in t.windows],
                  "waits": waits, "span": [t.start_ns, t.stop_ns],
                  "duration_s": s.duration_s, "total_j": s.energy.total_j}))
"""


def other_runs(out: Path, n: int) -> None:
    """``n`` earlier runs of other agents in the same directory, their last readings 1 to 20 s
    old: their series never advance again."""
    now = time.time_ns()
    encoder = LineEncoder()
    for i in range(n):
        end = now - (1 + i) * 1_000_000_000
        points = [
            Point(
                "rapl",
                {"host": "h", "run": f"old-{i}", "socket": "0", "domain": "package"},
                {"energy_joules": 10.0 * k},
                end - (40 - k) * 100_000_000,
            )
            for k in range(41)
        ]
        (out / f"nrg-old-{i}.lp").write_text(encoder.encode_many(points))


def test_a_tracker_in_a_directory_of_other_runs_waits_only_for_its_agent(
    short_tmp: Path, rapl_root: Path
) -> None:
    cfg = config(short_tmp, rapl_root)
    (short_tmp / "out").mkdir()
    other_runs(short_tmp / "out", 20)
    proc = nrg("-c", str(cfg), "--quiet", "--summary", "none", "--run", "mine", "--",
               sys.executable, "-c", CROWDED_JOB)  # fmt: skip
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["available"] == ["rapl", "procfs", "hooks"]
    assert data["unavailable"] == {}
    assert data["runs"] == ["mine"]  # no other run's readings
    assert data["timed_out"] == 0  # every window end waited for its agent's readings only
    watts = PACKAGE_W + DRAM_W
    bound = 2 * watts * stale(short_tmp, rapl_root)
    for w in data["windows"]:
        assert w["energy_j"] == pytest.approx(watts * w["duration_s"], abs=bound)
    # The waits at the windows' ends are the tracker's, not the job's: neither the span nor
    # the window around them counts them (their time nor their energy).
    waited = [(back - end) / 1e9 for end, back in data["waits"]]
    start, stop = data["span"]
    assert data["duration_s"] == pytest.approx((stop - start) / 1e9 - sum(waited), abs=0.05)
    assert data["total_j"] == pytest.approx(watts * data["duration_s"], abs=bound)
    outer, outer_end = data["windows"][-1], data["waits"][-1][0]
    assert outer["name"] == "all"
    assert outer["duration_s"] == pytest.approx(
        (outer_end - outer["start_ns"]) / 1e9 - sum(waited[:3]), abs=0.05
    )


def standalone_fallback_file(directory: Path, run: str) -> Path:
    """The fallback file an instrumented job run earlier without an agent left: its run's
    start, three steps and end, a minute ago, written by a process that has exited."""
    writer = subprocess.Popen([sys.executable, "-c", "pass"])
    writer.wait()
    t0 = time.time_ns() - 60_000_000_000
    tags = {"experiment": "demo", "run": run}
    points = [Point("nrg_run", tags, {"event": "start", "pid": writer.pid}, t0)]
    for k in range(3):
        start, end = t0 + k * 100_000_000, t0 + (k + 1) * 100_000_000
        fields = {"step": k, "start_time_ns": start, "end_time_ns": end, "duration_seconds": 0.1}
        points.append(Point("nrg_step", {**tags, "epoch": "0"}, fields, end))
    points.append(Point("nrg_run", tags, {"event": "end", "pid": writer.pid}, t0 + 400_000_000))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"nrg-{run}-{writer.pid}.lp"
    path.write_text(LineEncoder().encode_many(points))
    return path


def test_a_tracked_run_leaves_other_runs_fallback_files_alone(
    short_tmp: Path, rapl_root: Path
) -> None:
    cfg = config(short_tmp, rapl_root)
    earlier = standalone_fallback_file(short_tmp / "fallback", "sgd-lr0.1")
    out = short_tmp / "b.json"
    nrg("-c", str(cfg), "--run", "b", "--quiet", "--summary", "json", "--summary-file", str(out),
        "--", sys.executable, "-c", "import time; time.sleep(0.3)")  # fmt: skip
    data = json.loads(out.read_text())
    assert data["steps"]["count"] == 0  # the uninstrumented command's run has no steps of another
    assert data["duration_s"] < 30  # nor does it start a minute early, with the earlier run
    assert earlier.exists()  # left for an agent that runs without a command
    listing = nrg("report", "--data", str(short_tmp / "out"), "--list").stdout
    assert [line.split()[1] for line in listing.splitlines()[1:]] == ["b"]


def test_report_keeps_the_exit_code_of_a_past_run(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    job = [sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"]
    nrg("-c", str(cfg), "--run", "r", "--quiet", "--summary", "none", "--", *job, check_rc=3)
    rep = json.loads(nrg("report", "-c", str(cfg), "r", "--format", "json").stdout)
    assert rep["exit_code"] == 3
    # one point says the command ended: the agent's nrg_job exit, with the status
    ends = [p for p in stored(short_tmp) if p.fields.get("event") in ("exit", "end")]
    assert [(p.measurement, p.fields.get("exit_code")) for p in ends] == [("nrg_job", 3)]


def test_a_command_that_cannot_start_has_its_exit_point(short_tmp: Path, rapl_root: Path) -> None:
    cfg = config(short_tmp, rapl_root)
    bad = short_tmp / "not-a-program"  # executable, but no format the kernel runs (ENOEXEC)
    bad.write_bytes(b"\x00\x01\x02")
    bad.chmod(0o755)
    out = short_tmp / "s.json"
    done = nrg("-c", str(cfg), "--run", "r", "--quiet", "--summary", "json", "--summary-file",
               str(out), "--", str(bad), check_rc=127)  # fmt: skip
    assert "failed" not in done.stderr
    assert json.loads(out.read_text())["exit_code"] == 127
    ends = [p for p in stored(short_tmp) if p.fields.get("event") in ("exit", "end")]
    assert [(p.measurement, p.fields.get("exit_code")) for p in ends] == [("nrg_job", 127)]


def stored(tmp: Path) -> list[Point]:
    """Every point the file sink wrote under ``tmp/out``."""
    lines = [line for f in (tmp / "out").glob("*.lp") for line in f.read_text().splitlines()]
    return [decode_line(line) for line in lines if line]
