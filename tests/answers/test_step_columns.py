"""A run's step lines read from files as columns (``report --data``'s path) give exactly the
summary of the same lines read as points, on a synthetic distributed run (two hosts, two ranks
each, one slowed, a shared RAPL package, a GPU per rank and unused ones, the attribution's real
output with its error bounds)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.report.formats import summaries_json
from acquisition.report.runs import find_runs, load_run, load_run_columns
from acquisition.store import Store
from acquisition.store_index import index_files
from acquisition.summary import summarize
from acquisition.summary.columns import regular_views
from acquisition.summary.ranks import GlobalSteps, _Rank
from tests.answers.cluster import ClusterRun
from tests.answers.runs import NS, T0


def write(tmp: Path, points: list[Point]) -> Store:
    (tmp / "nrg.lp").write_text(LineEncoder().encode_many(points), encoding="utf-8")
    return Store(tmp, chunk_bytes=4096)  # many chunk edges, inside lines too


def both(store: Store) -> tuple[str, str, bool]:
    """(summary JSON from points, from columns, whether the columns' join was taken)."""
    (run,) = find_runs(store)
    old = summarize(load_run(store, run))
    points, columns = load_run_columns(store, run)
    assert columns is not None
    fast = regular_views(points, columns) is not None
    return summaries_json([old]), summaries_json([summarize(points, columns=columns)]), fast


def step_lines(points: list[Point]) -> int:
    return sum(
        p.measurement == "nrg_step" or (p.measurement == "nrg_energy" and p.tags["scope"] == "step")
        for p in points
    )


def test_columns_give_the_summary_of_the_points(tmp_path: Path) -> None:
    run = ClusterRun(gpus=12)  # nvml:1 and nvml:10, nvml:11: a rank's GPU and lookalikes
    points = run.points()
    store = write(tmp_path, points)
    old, new, fast = both(store)
    assert fast
    assert new == old
    (info,) = find_runs(store)
    _, columns = load_run_columns(store, info)
    assert columns is not None and columns.skipped
    # each rank's step and its step energy of RAPL and its own GPU only: 11 GPUs left unread
    assert len(columns) == run.world * run.n_steps * 3 < step_lines(points)


def test_a_host_with_one_rank_reads_all_its_gpus(tmp_path: Path) -> None:
    """A host's only rank counts every GPU of its host: the lines left unread for the others
    are read for it (the run is read again whole), module energies included."""
    run = ClusterRun(hosts=("h1", "h2", "h3"), gpus=12, module_s=0.01, module_gpu_s=0.005)
    points = [
        p for p in run.points() if not (p.tags.get("host") == "h3" and p.tags.get("rank") == "5")
    ]
    old, new, fast = both(write(tmp_path, points))
    assert fast
    assert new == old
    assert '"nvml:10"' in new  # h3's unused GPUs count for its one rank


def test_shared_readings_that_stop_before_the_last_steps(tmp_path: Path) -> None:
    """A host's RAPL readings end halfway through the steps: its later steps take the ranks'
    largest figure of the shared source, the earlier ones its readings, as from points."""
    run = ClusterRun(gpus=4)
    half = run.job_start + run.n_steps // 2 * round(run.period_s * NS)
    points = [
        p
        for p in run.points()
        if not (p.measurement == "rapl" and p.tags["host"] == "h2" and p.time_ns > half)
    ]
    old, new, fast = both(write(tmp_path, points))
    assert fast
    assert new == old
    full, _, _ = both(write(tmp_path, run.points()))
    assert new != full  # the figures of h2's later steps came from elsewhere


def test_a_rank_known_only_from_its_step_lines_is_among_the_runs_ranks(tmp_path: Path) -> None:
    """Guards: a rank known from its step lines alone (its start and end events and the rest
    of its points lost, or written by a tool that sends only step lines) is one of the run's
    ranks when those lines are read as columns, as when they are read as points: the lines'
    tags count, not only the points'. Two hosts of two ranks; rank 3's points other than its
    step lines left out: ranks 0 to 3, per-rank rows for all four."""
    run = ClusterRun(gpus=2, epochs=1, steps=3, startup_s=0.1, tail_s=0.1)
    points = [p for p in run.points() if p.tags.get("rank") != "3" or step_lines([p])]
    store = write(tmp_path, points)
    (info,) = find_runs(store)
    loaded, columns = load_run_columns(store, info)
    assert columns is not None and regular_views(loaded, columns) is not None
    for s in (summarize(load_run(store, info)), summarize(loaded, columns=columns)):
        assert (s.ranks, s.hosts) == (["0", "1", "2", "3"], ["h1", "h2"])
        assert sorted(str(r["rank"]) for r in s.per_rank) == ["0", "1", "2", "3"]


def test_a_rank_missing_a_step_takes_the_general_way(tmp_path: Path) -> None:
    run = ClusterRun(gpus=4)
    points = [
        p
        for p in run.points()
        if not (
            p.tags.get("rank") == "2"
            and p.measurement.startswith("nrg_")
            and p.fields.get("step") == 3
        )
    ]
    old, new, fast = both(write(tmp_path, points))
    assert not fast
    assert new == old
    assert '"steps": 9' in new  # rank 2's tenth step is missing, not the run's


def test_lines_of_another_shape_read_as_before(tmp_path: Path) -> None:
    """Step lines with their fields in another order (as an earlier version, or another writer,
    may write them) are read as points, and give the same summary."""
    run = ClusterRun(gpus=4)
    points = []
    for p in run.points():
        if p.measurement == "nrg_step":
            fields = dict(sorted(p.fields.items()))
            p = dataclasses.replace(p, fields=fields)
        points.append(p)
    old, new, fast = both(write(tmp_path, points))
    assert not fast
    assert new == old


def test_the_summary_does_not_depend_on_the_order_of_points() -> None:
    """The columns come after the other points: the run's host (both hosts have as many
    points) must not depend on which point came first."""
    points = ClusterRun().points()
    forward, backward = summarize(points), summarize(points[::-1])
    assert forward.host == backward.host == "h1"


def test_equally_slow_ranks_name_the_first() -> None:
    joined = GlobalSteps(multi_rank_steps=4)
    for rank in ("10", "2", "1"):  # in no order
        joined.ranks[("h", rank)] = _Rank("h", rank, slowest_steps=2 if rank != "1" else 0)
    stragglers = joined.stragglers(1.0)
    assert stragglers is not None and stragglers["slowest_rank"] == "2"


def driver_samples(run: ClusterRun, every_s: float = 0.01) -> list[Point]:
    """Each GPU's driver samples as the nvml collector writes them (its name tag has escaped
    spaces): a power of 50 % of the GPU's in the first half of each 0.05 s tick and 150 % in
    the second, so they shape a counter edge differently from a straight line."""
    out = []
    step = round(every_s * NS)
    for host in run.hosts:
        for g in range(run.gpus):
            tags = {
                "host": host,
                "run": run.run,
                "experiment": "e",
                "gpu": str(g),
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-" + run.uuid(host, g).upper(),
            }
            for t in range(T0, run.job_end + round(run.tail_s * NS), step):
                half = (t - T0) % round(run.tick_s * NS) < round(run.tick_s * NS) / 2
                watts = run.gpu_w * (0.5 if half else 1.5)
                out.append(Point("gpu_sample", tags, {"power_watts": watts, "util": 1.0}, t))
    return out


def test_driver_samples_as_columns_give_the_summary_of_their_points(tmp_path: Path) -> None:
    """Guards: a run's driver samples, read as columns (from the text, and from a step index
    without building their points), shape each GPU's counter at the run's edges exactly as the
    same samples read as points do; they are read (without them the GPU energy differs)."""
    run = ClusterRun(gpus=3)
    run = dataclasses.replace(run, extra=driver_samples(run))
    store = write(tmp_path, run.points())
    old, new, fast = both(store)
    assert fast and new == old
    index_files([tmp_path])
    (tmp_path / "nrg.lp").write_bytes(b" " * ((tmp_path / "nrg.lp").stat().st_size - 1) + b"\n")
    indexed = Store(tmp_path)
    (info,) = find_runs(indexed)
    points, columns = load_run_columns(indexed, info)
    assert columns is not None and len(columns.samples) == len(run.hosts) * run.gpus
    assert not any(p.measurement == "gpu_sample" for p in points)
    assert summaries_json([summarize(points, columns=columns)]) == old
    columns.samples.clear()
    without = summarize(points, columns=columns)
    assert summaries_json([without]) != old


def test_driver_samples_that_go_back_in_time_are_sorted_from_an_index(tmp_path: Path) -> None:
    """Guards: a step index records, per series of driver samples, its earliest and latest time
    and whether its times only grow; a GPU whose samples go back once in the file (two swapped:
    a clock set back) is sorted as its points are, and the summary from the index is the
    summary of the points."""
    run = ClusterRun(gpus=2)
    samples = driver_samples(run, every_s=0.05)
    first = [k for k, p in enumerate(samples) if p.tags["host"] == run.hosts[0]]
    first = [k for k in first if samples[k].tags["gpu"] == "0"]
    a, b = first[10], first[11]  # h0's GPU 0: its 11th and 12th samples in the other order
    samples[a], samples[b] = samples[b], samples[a]
    run = dataclasses.replace(run, extra=samples)
    store = write(tmp_path, run.points())
    old, new, _ = both(store)
    assert new == old
    index_files([tmp_path])
    (tmp_path / "nrg.lp").write_bytes(b" " * ((tmp_path / "nrg.lp").stat().st_size - 1) + b"\n")
    indexed = Store(tmp_path)
    (info,) = find_runs(indexed)
    points, columns = load_run_columns(indexed, info)
    assert columns is not None
    growing = {(d.tags["host"], d.tags["gpu"]): d.increasing for d in columns.samples}
    assert growing == {(h, g): (h, g) != (run.hosts[0], "0") for h in run.hosts for g in "01"}
    for d in columns.samples:
        assert d.bounds == (min(d.time), max(d.time))
    assert summaries_json([summarize(points, columns=columns)]) == old


def test_a_run_without_events_ends_at_its_last_step_line(tmp_path: Path) -> None:
    """Guards: a run whose start and end events are missing (an agent killed before it wrote
    them) spans its first to its last point, step lines read as columns included: meters read
    from 0 to 2 s, steps until 3 s, so the run lasts 3 s (3 − 0), not the meters' 2 s; the
    same summary as from the points."""

    def kept(p: Point) -> bool:
        if p.measurement in ("nrg_run", "nrg_job"):
            return False
        return step_lines([p]) == 1 or p.time_ns <= T0 + 2 * NS

    points = [p for p in ClusterRun(gpus=3).points() if kept(p)]
    assert max(p.time_ns for p in points if not step_lines([p])) == T0 + 2 * NS
    assert max(p.time_ns for p in points) == T0 + 3 * NS  # the last step line
    store = write(tmp_path, points)
    old, new, fast = both(store)
    assert fast and new == old
    (info,) = find_runs(store)
    read, columns = load_run_columns(store, info)
    summary = summarize(read, columns=columns)
    assert (summary.start_ns, summary.duration_s) == (T0, 3.0)
