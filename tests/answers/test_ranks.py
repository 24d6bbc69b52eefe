"""Global steps, per-rank figures and stragglers of a distributed run of known power (see
``cluster.py``): every figure against power × time computed from the step times themselves."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from acquisition.point import Point
from acquisition.summary import SummaryOptions, summarize
from acquisition.summary.build import step_energies
from acquisition.summary.ranks import gpu_owners, normalize_uuid
from tests.answers.cluster import ClusterRun
from tests.answers.runs import NS, T0
from tests.answers.test_summary import validate

REL = 1e-6


def intervals(run: ClusterRun) -> dict[int, list[float]]:
    """rank → its step durations (s)."""
    out = {}
    for rank in range(run.world):
        ends = run.ends(rank)
        starts = [run.job_start, *ends[:-1]]
        out[rank] = [(e - s) / NS for s, e in zip(starts, ends, strict=True)]
    return out


def host_ranks(run: ClusterRun, host: str) -> list[int]:
    first = run.hosts.index(host) * run.ranks_per_host
    return list(range(first, first + run.ranks_per_host))


def rank_step_j(run: ClusterRun, rank: int, n: int) -> float:
    """A rank's step energy: its GPU over its own step, plus its share of the host's package
    over the run's step (from the slowest rank's previous end to its end: one period)."""
    return run.gpu_w * intervals(run)[rank][n] + run.package_w * run.period_s / run.ranks_per_host


def test_steps_of_all_ranks_are_one_step_of_the_run() -> None:
    run = ClusterRun()
    s = summarize(run.points())
    validate(s.to_dict())
    assert s.steps.count == run.n_steps
    assert [e.steps for e in s.epochs] == [run.steps] * run.epochs
    assert s.steps.samples == run.n_steps * run.samples * run.world
    per_step = [sum(rank_step_j(run, r, n) for r in range(run.world)) for n in range(run.n_steps)]
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx(sum(per_step) / run.n_steps, rel=REL)
    assert s.steps.energy_per_sample_j == pytest.approx(
        sum(per_step) / (run.n_steps * run.samples * run.world), rel=REL
    )
    for e in s.epochs:
        n0 = e.epoch * run.steps
        assert e.energy_j == pytest.approx(sum(per_step[n0 : n0 + run.steps]), rel=REL)
        # the run's steps follow each other, each ending with the slowest rank
        assert e.duration_s == pytest.approx(run.steps * run.period_s, rel=REL)
    # the unused GPU (nvml:2 on each host) is no rank's: not in the steps
    assert s.epochs[0].sources.get("nvml:2", 0.0) == 0.0
    assert s.energy.outside_steps_j == pytest.approx(s.energy.total_j - sum(per_step), rel=REL)


def test_per_rank_table_and_per_host() -> None:
    run = ClusterRun()
    s = summarize(run.points())
    rows = {r["rank"]: r for r in s.per_rank}
    assert sorted(rows, key=int) == [str(r) for r in range(run.world)]
    d = intervals(run)
    for rank in range(run.world):
        row = rows[str(rank)]
        host = run.hosts[rank // run.ranks_per_host]
        local = rank % run.ranks_per_host
        assert row["host"] == host
        assert normalize_uuid(row["gpu"]) == run.uuid(host, local)
        assert row["gpu_source"] == f"nvml:{local}"
        assert row["steps"] == run.n_steps
        assert row["time_s"] == pytest.approx(sum(d[rank]), rel=REL)
        expected = sum(rank_step_j(run, rank, n) for n in range(run.n_steps))
        assert row["energy_j"] == pytest.approx(expected, rel=REL)
    window_s = (run.job_end - run.job_start) / NS
    for entry in s.per_host:
        host = entry["host"]
        ranks = host_ranks(run, host)
        assert [r["rank"] for r in entry["ranks"]] == [str(r) for r in ranks]
        assert entry["energy_j"] > (run.package_w + run.gpus * run.gpu_w) * window_s
        assert entry["steps_energy_j"] == pytest.approx(
            sum(rows[str(r)]["energy_j"] for r in ranks), rel=REL
        )
    assert sum(e["energy_j"] for e in s.per_host) == pytest.approx(s.energy.total_j, rel=REL)


def test_straggler_waits_and_the_energy_they_cost() -> None:
    run = ClusterRun()
    s = summarize(run.points())
    st = s.stragglers
    assert st is not None
    assert (st["slowest_host"], st["slowest_rank"]) == ("h2", str(run.slow_rank))
    assert st["slowest_steps"] == st["steps"] == run.n_steps
    fast = [r for r in range(run.world) if r != run.slow_rank]
    assert st["wait_s"] == pytest.approx(len(fast) * run.n_steps * run.delay_s, rel=REL)
    # a fast rank's power: its GPU, and its share of the host's package
    wasted = (
        len(fast) * run.n_steps * run.delay_s * (run.gpu_w + run.package_w / run.ranks_per_host)
    )
    assert st["wasted_j"] == pytest.approx(wasted, rel=REL)
    assert st["wasted_share"] == pytest.approx(wasted / s.energy.total_j, rel=REL)
    rows = {r["rank"]: r for r in s.per_rank}
    assert rows[str(run.slow_rank)]["wait_s"] == 0.0
    assert rows["0"]["wait_s"] == pytest.approx(run.n_steps * run.delay_s, rel=REL)


def test_no_straggler_when_ranks_end_together() -> None:
    s = summarize(ClusterRun(slow_rank=None).points())
    assert s.stragglers is not None
    assert s.stragglers["wait_s"] == 0.0 and s.stragglers["wasted_j"] == 0.0


def test_single_process_run_has_no_straggler_table() -> None:
    run = ClusterRun(hosts=("h1",), ranks_per_host=1, slow_rank=None)
    s = summarize(run.points())
    assert s.stragglers is None
    assert len(s.per_rank) == 1 and s.steps.count == 10
    # a host's only process keeps every GPU of the host (it may use them all)
    step_w = run.package_w + run.gpus * run.gpu_w
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx(step_w * run.period_s, rel=REL)


def test_window_is_spawn_to_exit() -> None:
    run = ClusterRun()
    s = summarize(run.points())
    tick = round(run.tick_s * NS)
    assert s.start_ns == T0 + tick // 2
    assert s.end_ns > run.job_end
    without = summarize(ClusterRun(spawn=False).points())
    assert (without.start_ns, without.end_ns) == (run.job_start, run.job_end)


def test_exit_code_from_the_command_and_from_older_data() -> None:
    run = ClusterRun(spawn=False, hosts=("h1",))
    host = {"host": "h1", "run": run.run, "experiment": "e"}
    end = run.job_end + NS
    job = Point("nrg_job", host, {"event": "exit", "pid": 1, "exit_code": 3}, end)
    # the command's exit status is its nrg_job exit's
    s = summarize([*run.points(), job])
    assert (s.exit_code, s.end_ns) == (3, end)
    # older agents wrote it on an nrg_run exit point too (after the command's)
    older = Point("nrg_run", host, {"event": "exit", "exit_code": 3}, end + 1)
    s = summarize([*run.points(), job, older])
    assert (s.exit_code, s.end_ns) == (3, end + 1)
    # and an nrg_run exit alone still says how the run ended
    s = summarize([*run.points(), older])
    assert (s.exit_code, s.end_ns) == (3, end + 1)
    # where the two differ (a hand-edited file), the command's own point wins
    other = Point("nrg_run", host, {"event": "exit", "exit_code": 9}, end + 1)
    assert summarize([*run.points(), other, job]).exit_code == 3


def test_a_module_counts_its_hosts_sources_once() -> None:
    # Each rank's module point gets the module's time at the whole package's power (the ranks
    # of a host share it) and its GPU time at the power of every GPU of the host: the module's
    # energy is the package's power over the module's time once per host, plus each rank's
    # own GPU over its GPU time (not the other rank's GPU, nor the unused one).
    run = ClusterRun(module_s=0.02, module_gpu_s=0.01)
    s = summarize(run.points(), SummaryOptions(top_modules=3))
    (module,) = s.modules
    assert module.module == "layer"
    per_host = run.package_w * run.module_s + run.ranks_per_host * run.gpu_w * 0.01
    assert module.energy_j == pytest.approx(len(run.hosts) * run.n_steps * per_host, rel=REL)


@dataclass
class WallReadTwice(ClusterRun):
    """Each host also has a wall meter read only twice: 600 W at T0 and 390 W 2.1 s later (a
    straight line between, falling 100 W a second)."""

    def host_points(self, host: str) -> list[Point]:
        wall = [
            Point("emonpi", {"host": host, "node": "5"}, {"power1_watts": w}, T0 + round(s * NS))
            for s, w in ((0.0, 600.0), (2.1, 390.0))
        ]
        return super().host_points(host) + wall


def test_a_wall_meter_read_twice_gives_each_global_step_its_span() -> None:
    """Guards: a meter with two readings, the fewest that bracket any time, gives a run's step
    the energy over the step's span across ranks, not the larger of the ranks' own figures.
    Two ranks on one host; rank 0 ends each step 0.05 s before rank 1: its steps end at 0.15,
    0.35, 0.55 s after the job's start (1 s after T0), rank 1's at 0.2, 0.4, 0.6 s. The run's
    steps: [0, 0.2], [0.2, 0.4], [0.4, 0.6] s, where the wall draws 500 − 100·t W: over each
    the power at its middle × 0.2 s = 490 × 0.2 = 98 J, 470 × 0.2 = 94 J, 450 × 0.2 = 90 J
    (rank 0's own [0.15, 0.35] s would give 475 × 0.2 = 95 J); one epoch: 282 J."""
    run = WallReadTwice(hosts=("h1",), epochs=1, steps=3, slow_rank=1)
    assert [(e - run.job_start) / NS for e in run.ends(0)] == pytest.approx([0.15, 0.35, 0.55])
    s = summarize(run.points())
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx((98 + 94 + 90) / 3, rel=REL)
    assert s.steps.energy_j["p50"] == pytest.approx(94.0, rel=REL)
    # each step's energy as the HTML report plots it: no options, the default channel 1
    assert step_energies(run.points()) == pytest.approx([98.0, 94.0, 90.0], rel=REL)
    assert [e.energy_j for e in s.epochs] == pytest.approx([98 + 94 + 90], rel=REL)


def test_a_rank_s_gpu_is_its_device_as_last_seen() -> None:
    """Guards: a rank's GPU is the ``gpu`` series whose UUID its start names, as last seen on
    its host: after the driver renumbered the device (index 0, then 1, same UUID) the rank's
    energy is read from ``nvml:1``; the same UUID on another host is another device; points of
    one series share one tags mapping (as stored ones do) or not, alike."""
    first = {"host": "a", "gpu": "0", "uuid": "GPU-AB12"}
    later = {"host": "a", "gpu": "1", "uuid": "GPU-AB12"}
    other_host = {"host": "b", "gpu": "3", "uuid": "GPU-AB12"}
    points = [
        Point("gpu", first, {"energy_joules": 1.0}, T0),
        Point("gpu", other_host, {"energy_joules": 1.0}, T0),
        Point("nrg_run", {"host": "a", "rank": "0"}, {"event": "start", "gpu_uuid": "ab12"}, T0),
        Point(
            "nrg_run", {"host": "b", "rank": "1"}, {"event": "start", "gpu_uuid": "GPU-ab12"}, T0
        ),
        Point("nrg_run", {"host": "b", "rank": "2"}, {"event": "end", "gpu_uuid": "GPU-ab12"}, T0),
        Point("gpu", dict(first), {"energy_joules": 2.0}, T0 + NS),
        Point("gpu", later, {"energy_joules": 3.0}, T0 + 2 * NS),
        Point("gpu", later, {"energy_joules": 4.0}, T0 + 3 * NS),
        Point("gpu", other_host, {"energy_joules": 2.0}, T0 + 3 * NS),
    ]
    assert gpu_owners(points) == {
        ("a", "0"): ("nvml:1", "ab12"),
        ("b", "1"): ("nvml:3", "GPU-ab12"),
    }
    # renumbered back: the device is GPU 0 again
    points.append(Point("gpu", first, {"energy_joules": 5.0}, T0 + 4 * NS))
    assert gpu_owners(iter(points))[("a", "0")] == ("nvml:0", "ab12")


@dataclass
class CounterReadTwice(ClusterRun):
    """One host of two ranks that take turns to be slower: rank 0 ends its steps 0.2, 0.35 and
    0.6 s after the job's start, rank 1 at 0.15, 0.4 and 0.55 s; the RAPL package counter is
    read only twice, at T0 and at the last sample."""

    def ends(self, rank: int) -> list[int]:
        at = {0: (0.2, 0.35, 0.6), 1: (0.15, 0.4, 0.55)}[rank]
        return [self.job_start + round(s * NS) for s in at]

    def host_points(self, host: str) -> list[Point]:
        points = [p for p in super().host_points(host) if p.measurement != "rapl"]
        tags = {"host": host, "run": self.run, "experiment": "e", "socket": "0"}
        last = self.job_end + round(self.tail_s * NS)
        return points + [
            Point("rapl", {**tags, "domain": "package"}, {"energy_joules": 40.0 * (t - T0) / NS}, t)
            for t in (T0, last)
        ]


def test_a_counter_read_twice_gives_each_global_step_its_span() -> None:
    """Guards: a shared counter with two readings, the fewest that bracket any time, gives a
    run's step its energy over the step's span across ranks, not the larger of the ranks' own
    figures. The run's steps: [0, 0.2], [0.2, 0.4] and [0.4, 0.6] s (each from the later of
    the earliest start and the step before's end, to the latest end); RAPL's 40 W over each:
    8 J (rank 1's own [0.15, 0.4] s would give 10 J). Each rank's GPU (100 W) over the rank's
    own step: 20 + 15 = 35 J, then 15 + 25 = 40 J and 25 + 15 = 40 J. Steps 43, 48, 48 J."""
    run = CounterReadTwice(hosts=("h1",), gpus=2, epochs=1, steps=3, slow_rank=None)
    points = run.points()
    assert step_energies(points) == pytest.approx([43.0, 48.0, 48.0], rel=REL)
    s = summarize(points)
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx((43 + 48 + 48) / 3, rel=REL)
