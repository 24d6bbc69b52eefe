"""End to end: a real instrumented CPU training loop, the real agent, a RAPL source of known power.

A fixture powercap tree (laid out as the kernel does: zones under
``sys/devices/virtual/powercap/intel-rapl``, linked from ``sys/class/powercap``) has its
``energy_uj`` files advanced by a writer process at constant known wattages (energy = W × t from
the wall clock, rewritten every ~1 ms by atomic rename). The real ``nrg-collect`` runs with the
rapl, hooks and attribution plugins and the file sink; the training job uses the real
``acquisition.torch.instrument``. The file read back must give, per step, energy = W × duration,
module joules plus the remainder = the step's joules, and every step exactly once. Two failure
cases: no agent (the fallback file holds every event) and the agent killed mid-run (training
finishes; the agent's file plus the fallback file hold every event), and the agent started
mid-run (the job starts on its fallback file, moves to the socket, and once the job has exited
the agent ingests the file: its own output then holds every event).
"""

from __future__ import annotations

import bisect
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acquisition.errors import LineProtocolError
from acquisition.lineproto import decode_line
from acquisition.point import FieldValue, Point

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
WATTS = {"package-0": 25.0, "dram": 5.0}
SOURCES = {"package-0": "rapl:package-0", "dram": "rapl:dram-0"}
EPOCHS = 3
STEPS_PER_EPOCH = 4
DATA_WAIT_S = 0.15
"""A slow data loader: each step lasts ≥ 150 ms, long against the ~1 ms granularity at which the
fixture counters advance (the error bound of the energy check scales with 1 ms / step length)."""

COUNTER_PERIOD_S = 0.001
"""How often the fixture writer advances the counters: the counter update period of the error
bar (a real RAPL counter updates about every millisecond too)."""

_WRITER = r"""
import os, sys, time
pairs = [(sys.argv[i], float(sys.argv[i + 1])) for i in range(1, len(sys.argv), 2)]
try:  # wake on time even while training keeps both CPUs busy (real RAPL never lags)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, PermissionError):
    pass
t0 = time.time_ns()
while True:
    t = time.time_ns()
    for path, watts in pairs:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % (watts * (t - t0) // 1000))  # W * ns = nJ; / 1000 = uJ
        os.replace(tmp, path)
    time.sleep(0.001)
"""


_LATE_AGENT_JOB = r"""
import pathlib, sys, time
from tests.e2e.test_training_energy import train
sock, fallback, graphs = map(pathlib.Path, sys.argv[1:4])
def wait_for_agent(epoch):
    if epoch == 0:
        while not sock.exists():
            time.sleep(0.02)
        time.sleep(3.5)  # the library retries the socket every 3 s
train(sock, fallback, graphs, run="late", on_epoch_end=wait_for_agent)
"""
REPO = Path(__file__).resolve().parents[2]


# --- fixtures --------------------------------------------------------------------------------


def make_powercap(root: Path) -> dict[str, Path]:
    """A one-socket RAPL tree with package-0 and its dram subzone; the energy_uj paths by name."""
    virtual = root / "sys/devices/virtual/powercap/intel-rapl"
    package = virtual / "intel-rapl:0"
    dram = package / "intel-rapl:0:0"
    paths = {}
    for zone, name in ((package, "package-0"), (dram, "dram")):
        zone.mkdir(parents=True)
        (zone / "name").write_text(name + "\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
        (zone / "enabled").write_text("1\n")
        (zone / "energy_uj").write_text("0\n")
        paths[name] = zone / "energy_uj"
    links = root / "sys/class/powercap"
    links.mkdir(parents=True)
    (links / "intel-rapl").symlink_to("../../devices/virtual/powercap/intel-rapl")
    (links / "intel-rapl:0").symlink_to("../../devices/virtual/powercap/intel-rapl/intel-rapl:0")
    (links / "intel-rapl:0:0").symlink_to(
        "../../devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0"
    )
    return paths


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket addresses are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="nrg-e2e-") as d:
        yield Path(d)


@pytest.fixture
def powercap() -> Iterator[Path]:
    # On tmpfs where there is one: on a disk, ext4 flushes data on every replace-by-rename, which
    # makes the counters advance in jumps of tens of ms (as no real RAPL counter does).
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nrg-powercap-", dir=shm) as d:
        root = Path(d)
        paths = make_powercap(root)
        args = [str(a) for name, path in paths.items() for a in (path, WATTS[name])]
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, *args])
        try:
            yield root
        finally:
            writer.kill()
            writer.wait()


class Agent:
    """The real nrg-collect as a subprocess."""

    def __init__(self, tmp: Path, root: Path, socket_path: Path) -> None:
        self.out = tmp / "out" / "nrg.lp"
        self.socket_path = socket_path
        cfg = tmp / "nrg.toml"
        cfg.write_text(
            f"""
[agent]
interval = "50ms"
flush_interval = "100ms"
stats_interval = "1s"
state_dir = "{tmp}/state"
data_dir = "{tmp}/data"

[[collectors.rapl]]
root = "{root}"
backend = "powercap"

[[collectors.hooks]]
socket_path = "{socket_path}"
ingest_dir = "{tmp}/fallback"
ingest_interval = "200ms"

[[processors.attribution]]

[[sinks.file]]
path = "{self.out}"
fsync = "never"
"""
        )
        self.proc = subprocess.Popen(
            [NRG, "--config", str(cfg), "--quiet"], stderr=subprocess.PIPE, text=True
        )
        wait_for(lambda: socket_path.exists(), "the agent's socket", self)
        wait_for(lambda: any(p.measurement == "rapl" for p in self.points()), "rapl points", self)

    def points(self) -> list[Point]:
        return read_points(self.out)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        _, stderr = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, stderr
        return stderr

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=30)


def wait_for(condition: Callable[[], bool], what: str, agent: Agent | None = None) -> None:
    """Wait for a state of the system (not a duration); fail with a message after 120 s (a
    training job took over 60 s to its first step at a load average of 10)."""
    deadline = time.monotonic() + 120
    while not condition():
        if agent is not None and agent.proc.poll() is not None:
            raise AssertionError(f"agent exited waiting for {what}: {agent.proc.stderr.read()}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_points(path: Path) -> list[Point]:
    """Points of a line-protocol file, as a database keeps them: an identical line written twice
    (a sink retrying a batch whose first write went through) is one point. A torn last line (a
    killed writer) is left out."""
    if not path.exists():
        return []
    lines = list(dict.fromkeys(path.read_text().splitlines()))
    points = []
    for i, line in enumerate(lines):
        try:
            points.append(decode_line(line))
        except LineProtocolError:
            if i != len(lines) - 1:
                raise
    return points


def train(
    sock: Path,
    fallback: Path,
    graphs: Path,
    run: str,
    on_epoch_end: Callable[[int], None] | None = None,
) -> None:
    """A small real training loop, instrumented: EPOCHS × STEPS_PER_EPOCH optimizer steps."""
    from acquisition.torch import instrument

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    # Leave a CPU to the agent and the fixture writer: a preempted collector stamps its
    # read late, which shows as a ms-sized error at the step edges.
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Linear(64, 256),
        nn.ReLU(),
        nn.Sequential(nn.Linear(256, 256), nn.Tanh()),
        nn.Linear(256, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(256, 64)
    y = torch.randint(0, 10, (256,))
    with instrument(
        model,
        example_inputs=(x,),
        experiment="e2e",
        run=run,
        socket_path=sock,
        fallback_dir=fallback,
        graph_dir=graphs,
    ) as session:
        for epoch in range(EPOCHS):
            session.epoch(epoch)
            for _ in range(STEPS_PER_EPOCH):
                time.sleep(DATA_WAIT_S)
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
            if on_epoch_end is not None:
                on_epoch_end(epoch)
    torch.set_num_threads(threads)


def unique_steps(points: list[Point], run: str) -> dict[int, Point]:
    """The run's nrg_step points by step index; identical replays count once, others fail.

    The ``host`` and ``pid`` tags are left out: the agent stamps them, the fallback file has
    none."""
    steps: dict[int, Point] = {}
    for p in points:
        if p.measurement != "nrg_step" or p.tags.get("run") != run:
            continue
        p = Point(
            p.measurement,
            {k: v for k, v in p.tags.items() if k not in ("host", "pid")},
            p.fields,
            p.time_ns,
        )
        step = p.fields["step"]
        assert isinstance(step, int)
        if step in steps:
            assert steps[step] == p, f"two different points for step {step}"
        steps[step] = p
    return steps


def assert_complete_run(points: list[Point], run: str) -> dict[int, Point]:
    """Every event of a run is there: start and end, the model, every step and its modules."""
    mine = [p for p in points if p.tags.get("run") == run]
    events = [p.fields["event"] for p in mine if p.measurement == "nrg_run"]
    assert set(events) == {"start", "end"}
    assert {p.tags["module"] for p in mine if p.measurement == "nrg_model"} == {
        "(root)",
        "0",
        "1",
        "2",
        "2.0",
        "2.1",
        "3",
    }
    steps = unique_steps(points, run)
    assert sorted(steps) == list(range(len(steps)))
    assert len(steps) >= EPOCHS * STEPS_PER_EPOCH
    optimizer_steps = [s for s in steps.values() if s.fields["duration_seconds"] >= DATA_WAIT_S]  # type: ignore[operator]
    assert len(optimizer_steps) == EPOCHS * STEPS_PER_EPOCH
    modules = defaultdict(set)
    for p in mine:
        if p.measurement == "nrg_module":
            modules[p.fields["step"]].add((p.tags["module"], p.tags["phase"]))
    for s in optimizer_steps:
        assert ("0", "forward") in modules[s.fields["step"]]
        assert ("3", "backward") in modules[s.fields["step"]]
    return steps


def counter_samples(points: list[Point], domain: str) -> list[tuple[int, float]]:
    """(time ns, cumulative J) of the agent's ``rapl`` points of one domain, as the attribution
    keeps them: in arrival order, a sample older than the last skipped, one at the same time
    replacing it."""
    samples: list[tuple[int, float]] = []
    for p in points:
        if p.measurement != "rapl" or p.tags.get("domain") != domain:
            continue
        sample = (p.time_ns, float(p.fields["energy_joules"]))  # type: ignore[arg-type]
        if samples and sample[0] < samples[-1][0]:
            continue
        if samples and sample[0] == samples[-1][0]:
            samples[-1] = sample
        else:
            samples.append(sample)
    return samples


def error_bar(samples: list[tuple[int, float]], start: int, end: int, mean_w: float) -> float:
    """The documented per-step error bound (J) of a counter source over [start, end]:

    for each edge, the swing of the measured power (max − min over the sample interval holding
    the edge and its two neighbours, up to the first sample at or after the step's end: what the
    agent has when it writes the step) times that interval's length — a sample read late or early,
    or a counter file not yet rewritten, shifts the interpolated counter at the edge by at most
    that much and shows as such a swing — plus 2 × the mean power × the counter update period
    (the counter's own staleness at each edge). A constant lag shared by both edges cancels.
    """
    samples = samples[: bisect.bisect_left([t for t, _ in samples], end) + 1]
    times = [t for t, _ in samples]
    watts = [
        (samples[k + 1][1] - samples[k][1]) / ((times[k + 1] - times[k]) / 1e9)
        for k in range(len(samples) - 1)
    ]

    def edge(t: int) -> float:
        k = bisect.bisect_right(times, t) - 1  # times[k] <= t < times[k + 1]
        k = min(max(k, 0), len(watts) - 1)
        near = watts[max(k - 1, 0) : k + 2]
        return (max(near) - min(near)) * (times[k + 1] - times[k]) / 1e9

    return edge(start) + edge(end) + 2 * mean_w * COUNTER_PERIOD_S


def step_epoch(p: Point) -> str:
    """A step's epoch: the tag, or the integer field jobs of older versions write."""
    return p.tags.get("epoch") or str(p.fields.get("epoch", 0))


# --- tests ------------------------------------------------------------------------------------


def test_energy_per_step_and_module_with_the_real_agent(
    tmp_path: Path, sock_dir: Path, powercap: Path
) -> None:
    sock = sock_dir / "hooks.sock"
    agent = Agent(tmp_path, powercap, sock)
    try:
        train(sock, tmp_path / "fallback", tmp_path / "graphs", run="r1")

        def last_step_attributed() -> bool:
            points = agent.points()
            steps = unique_steps(points, "r1")
            done = {
                (p.fields["step"], p.tags["source"])
                for p in points
                if p.measurement == "nrg_energy" and p.tags["scope"] == "step"
            }
            return bool(steps) and all((max(steps), s) in done for s in SOURCES.values())

        wait_for(last_step_attributed, "the last step's energy", agent)
    finally:
        stderr = agent.stop()
    assert not (tmp_path / "fallback").exists() or not any((tmp_path / "fallback").iterdir())
    points = agent.points()
    steps = assert_complete_run(points, "r1")

    energy = [p for p in points if p.measurement == "nrg_energy"]
    module_times = {
        (p.fields["step"], p.tags["module"], p.tags["phase"]): p.fields["exclusive_seconds"]
        for p in points
        if p.measurement == "nrg_module"
    }
    errors: list[tuple[float, float]] = []
    for zone, source in SOURCES.items():
        watts = WATTS[zone]
        per_step: dict[int, Point] = {}
        modules: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
        rest: dict[int, float] = {}
        for p in energy:
            if p.tags["source"] != source:
                continue
            step = p.fields["step"]
            assert isinstance(step, int)
            joules = p.fields["energy_joules"]
            assert isinstance(joules, float)
            assert p.tags["experiment"] == "e2e" and p.tags["run"] == "r1"
            if p.tags["scope"] == "step":
                assert step not in per_step, f"step {step} attributed twice for {source}"
                per_step[step] = p
            elif p.tags["scope"] == "module":
                excl = module_times[(step, p.tags["module"], p.tags["phase"])]
                assert isinstance(excl, float)
                assert p.fields["duration_seconds"] == excl
                modules[step].append((joules, excl))
            elif p.tags["scope"] == "unattributed":
                assert step not in rest
                rest[step] = joules
        assert sorted(per_step) == sorted(steps), f"{source}: every step once"
        samples = counter_samples(points, "package" if zone == "package-0" else zone)
        for step, sp in per_step.items():
            s = steps[step]
            start, end = s.fields["start_time_ns"], s.fields["end_time_ns"]
            assert isinstance(start, int) and isinstance(end, int)
            duration = (end - start) / 1e9
            joules = sp.fields["energy_joules"]
            assert isinstance(joules, float)
            assert sp.fields["duration_seconds"] == pytest.approx(duration, rel=1e-9)
            assert sp.tags["epoch"] == step_epoch(s)
            truth = watts * duration
            bound = error_bar(samples, start, end, joules / duration)
            assert sp.fields["error_joules"] == pytest.approx(bound, rel=1e-6, abs=1e-12)
            errors.append((abs(joules - truth) / truth, bound / truth))
            assert abs(joules - truth) <= bound, (
                f"{source} step {step}: {joules} J vs {truth} J, error bar {bound} J"
            )
            # Each module: the step's mean power times its exclusive time.
            assert sum(excl for _, excl in modules[step]) <= duration
            for module_joules, excl in modules[step]:
                assert module_joules == pytest.approx(joules * excl / duration, rel=1e-9)
            # Conservation: modules plus the remainder are the step's joules.
            module_sum = sum(j for j, _ in modules[step])
            total = module_sum + rest[step]
            assert math.isclose(total, joules, rel_tol=1e-9)
            if sp.fields["duration_seconds"] >= DATA_WAIT_S:  # type: ignore[operator]
                assert module_sum > 0.0
    assert not [p for p in energy if p.tags["scope"] == "rest_of_system"]  # no wall meter here
    assert "Traceback" not in stderr
    # Bounds this loose on most steps would hide a step charged with a wrong interval (one 50 ms
    # poll interval is 25 % of a 200 ms step): the data itself would be too disturbed to judge.
    bounds = sorted(b for _, b in errors)
    assert bounds[len(bounds) // 2] < 0.1, f"median error bar {bounds[len(bounds) // 2]:.1%}"
    worst = max(errors)
    print(
        f"per-step relative error: worst {worst[0]:.4%} (its error bar {worst[1]:.4%}); "
        f"widest error bar {max(b for _, b in errors):.4%}"
    )


def test_agent_absent_fallback_file_holds_every_event(tmp_path: Path, sock_dir: Path) -> None:
    fallback = tmp_path / "fallback"
    train(sock_dir / "nobody-listens.sock", fallback, tmp_path / "graphs", run="alone")
    files = list(fallback.glob("nrg-alone-*.lp"))
    assert [f.name for f in files] == [f"nrg-alone-{os.getpid()}.lp"]
    assert_complete_run(read_points(files[0]), "alone")


def test_agent_killed_mid_run_nothing_lost(tmp_path: Path, sock_dir: Path, powercap: Path) -> None:
    sock = sock_dir / "hooks.sock"
    agent = Agent(tmp_path, powercap, sock)
    fallback = tmp_path / "fallback"

    def kill_after_first_epoch(epoch: int) -> None:
        if epoch == 0:
            agent.kill()

    try:
        train(
            sock, fallback, tmp_path / "graphs", run="killed", on_epoch_end=kill_after_first_epoch
        )
    finally:
        if agent.proc.poll() is None:
            agent.kill()
    arrived = agent.points()
    assert unique_steps(arrived, "killed"), "the agent received steps before it was killed"
    spooled = [p for f in fallback.glob("nrg-killed-*.lp") for p in read_points(f)]
    assert spooled, "after the kill the library wrote to its fallback file"
    assert_complete_run(arrived + spooled, "killed")


def test_agent_started_mid_run_ingests_the_fallback_file(
    tmp_path: Path, sock_dir: Path, powercap: Path
) -> None:
    sock, fallback = sock_dir / "hooks.sock", tmp_path / "fallback"
    job = subprocess.Popen(
        [sys.executable, "-c", _LATE_AGENT_JOB, str(sock), str(fallback), str(tmp_path / "g")],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    spool = fallback / f"nrg-late-{job.pid}.lp"
    try:
        wait_for(
            lambda: any(p.measurement == "nrg_step" for p in read_points(spool)),
            "the job's first step",
        )
    except BaseException:
        job.kill()
        job.communicate(timeout=30)
        raise
    agent = Agent(tmp_path, powercap, sock)
    try:
        _, job_err = job.communicate(timeout=300)
        assert job.returncode == 0, job_err

        def attributed_and_expected(points: list[Point]) -> tuple[list[FieldValue], list[int]]:
            """Steps with energy; steps that began after the agent's first RAPL sample (the
            earlier ones cannot be bracketed)."""
            steps = assert_complete_run(points, "late")
            first_sample = min(p.time_ns for p in points if p.measurement == "rapl")
            attributed = [
                p.fields["step"]
                for p in points
                if p.measurement == "nrg_energy"
                and p.tags["scope"] == "step"
                and p.tags["source"] == "rapl:package-0"
            ]
            starts = {n: s.fields["start_time_ns"] for n, s in steps.items()}
            expected = sorted(n for n, t in starts.items() if int(t) >= first_sample)
            return sorted(attributed), expected

        def done() -> bool:
            try:
                attributed, expected = attributed_and_expected(agent.points())
            except AssertionError:
                return False  # the fallback file is not ingested yet
            return set(expected) <= set(attributed)

        wait_for(done, "the ingested fallback file and its energy", agent)
    finally:
        agent.stop()
    assert [f.name for f in fallback.iterdir()] == [spool.name + ".ingested"]
    attributed, expected = attributed_and_expected(agent.points())
    assert attributed == expected  # each once
    assert len(expected) >= (EPOCHS - 1) * STEPS_PER_EPOCH - 1
