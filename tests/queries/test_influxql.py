"""Every InfluxQL library query, run against a real influxd 1.6 loaded with the known runs.

The known runs are written by the InfluxDB sink on its v1 API (``api = "v1"``, ``POST /write``).
Each answer is compared with the same number computed in Python from the points that were written
(``known_run``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from acquisition.point import Point
from acquisition.queries import ALL, available, load_query, render
from tests.queries.conftest import DB, influxql, write_v1
from tests.queries.grafana_transforms import apply, panel_transformations
from tests.queries.known_run import KnownRun, group_count, group_sum
from tests.servers import Influxd

pytestmark = pytest.mark.server

WINDOW_S = 10
STEP_TAGS = ("host", "rank", "source")


def params(known: KnownRun, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "experiment": "exp-a",
        "run": "r1",
        "host": ALL,
        "rank": ALL,
        "timeRangeStart": known.start_ns,
        "timeRangeStop": known.stop_ns,
        "windowPeriod": f"{WINDOW_S}s",
    }
    return {**base, **over}


def tag(row: dict[str, Any], key: str) -> Any:
    return "" if row.get(key) is None else row[key]  # a missing tag reads as ""


def keyed(
    rows: list[dict[str, Any]], keys: tuple[str, ...], col: str
) -> dict[tuple[Any, ...], Any]:
    out = {}
    for row in rows:
        key = tuple(tag(row, k) for k in keys)
        assert key not in out, f"two rows for {key}"
        out[key] = row[col]
    return out


def approx(expected: dict[Any, float]) -> Any:
    return pytest.approx(expected, rel=1e-9, abs=1e-9)


def windows(
    points: Iterable[Point], keys: tuple[str, ...], field: str, how: Callable[[list[float]], float]
) -> dict[tuple[Any, ...], float]:
    """``how`` of ``field`` per window of ``WINDOW_S`` (aligned to the epoch) and tags ``keys``."""
    acc: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    width = WINDOW_S * 1_000_000_000
    for p in points:
        if field in p.fields:
            window = p.time_ns // width * width
            acc[(window, *(p.tags.get(k, "") for k in keys))].append(float(p.fields[field]))
    return {k: how(v) for k, v in acc.items()}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def window_rows(rows: list[dict[str, Any]], keys: tuple[str, ...], col: str) -> dict[Any, float]:
    return {(r["time"], *(tag(r, k) for k in keys)): r[col] for r in rows if r[col] is not None}


def run_steps(known: KnownRun, experiment: str = "exp-a", run: str = "r1") -> list[Point]:
    return known.where("nrg_energy", scope="step", experiment=experiment, run=run)


def test_every_influxql_query_is_tested() -> None:
    names = {n.removeprefix("test_") for n in globals() if n.startswith("test_")}
    assert set(available("influxql")) <= names


def test_run_summary(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "run_summary", params(known))
    steps = run_steps(known)
    energy = group_sum(steps, STEP_TAGS, "energy_joules")
    duration = group_sum(steps, STEP_TAGS, "duration_seconds")
    assert keyed(rows, STEP_TAGS, "energy_joules") == approx(energy)
    assert keyed(rows, STEP_TAGS, "steps") == group_count(steps, STEP_TAGS)
    assert keyed(rows, STEP_TAGS, "duration_seconds") == approx(duration)
    power = {k: energy[k] / duration[k] for k in energy}
    assert keyed(rows, STEP_TAGS, "mean_power_watts") == approx(power)
    assert {k[0] for k in energy} == {"h1", "h2.lab"}  # the distributed run: both hosts


def test_run_summary_filters_host_and_rank(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "run_summary", params(known, host=["h2.lab"], rank=["2"]))
    steps = [p for p in run_steps(known) if p.tags["host"] == "h2.lab" and p.tags["rank"] == "2"]
    assert steps
    assert keyed(rows, STEP_TAGS, "energy_joules") == approx(
        group_sum(steps, STEP_TAGS, "energy_joules")
    )


def test_run_summary_of_a_run_without_ranks(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "run_summary", params(known, experiment="exp-b", run="r4"))
    steps = run_steps(known, "exp-b", "r4")
    assert keyed(rows, STEP_TAGS, "energy_joules") == approx(
        group_sum(steps, STEP_TAGS, "energy_joules")
    )


def test_energy_per_epoch(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "energy_per_epoch", params(known))
    keys = ("epoch", *STEP_TAGS)
    expected = group_sum(run_steps(known), keys, "energy_joules")
    assert {k[0] for k in expected} == {"0", "1", "2"}
    assert keyed(rows, keys, "energy_joules") == approx(expected)


def test_energy_per_step(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "energy_per_step", params(known))
    keys = ("time", *STEP_TAGS)
    expected = {
        (p.time_ns, *(p.tags[k] for k in STEP_TAGS)): p.fields["energy_joules"]
        for p in run_steps(known)
    }
    assert keyed(rows, keys, "energy_joules") == approx(expected)


def test_top_modules(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "top_modules", params(known, host=["h1"]))
    modules = known.where("nrg_energy", scope="module", experiment="exp-a", run="r1", host="h1")
    per_rank = group_sum(modules, ("rank", "source", "module"), "energy_joules")
    ranks = {k[0] for k in per_rank}
    assert len(ranks) == 2  # host h1 runs two ranks: its sources count once, the ranks' mean
    expected: dict[tuple[str, ...], float] = defaultdict(float)
    for (_, source, module), joules in per_rank.items():
        expected[(source, module)] += joules / len(ranks)
    assert keyed(rows, ("source", "module"), "energy_joules") == approx(dict(expected))


def test_power_over_time(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "power_over_time", params(known, host=["h1"]))
    keys = ("host", "socket", "domain", "gpu")
    rapl = [p for p in known.where("rapl", host="h1") if p.tags["domain"] in ("package", "dram")]
    expected = windows([*rapl, *known.where("gpu", host="h1")], keys, "power_watts", mean)
    assert window_rows(rows, keys, "power_watts") == approx(expected)


def test_wall_power(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "wall_power", params(known))
    expected = windows(known.where("emonpi"), ("host", "node"), "power1_watts", mean)
    assert window_rows(rows, ("host", "node"), "mean_power1_watts") == approx(expected)


def test_rest_of_system(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "rest_of_system", params(known))
    keys = ("host", "rank", "source")
    rest = known.where("nrg_energy", scope="rest_of_system")
    assert rest
    expected = windows(rest, keys, "mean_power_watts", mean)
    assert window_rows(rows, keys, "power_watts") == approx(expected)


def test_step_time(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "step_time", params(known))
    steps = known.where("nrg_step", experiment="exp-a", run="r1")
    expected = {
        (p.time_ns, p.tags["host"], p.tags["rank"]): p.fields["duration_seconds"] for p in steps
    }
    assert keyed(rows, ("time", "host", "rank"), "duration_seconds") == approx(expected)


def test_utilization(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "utilization", params(known))
    points = [*known.where("cpu", cpu="total"), *known.where("gpu")]
    expected = windows(points, ("host", "gpu"), "utilization_ratio", mean)
    assert window_rows(rows, ("host", "gpu"), "utilization_ratio") == approx(expected)


def test_memory_used(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "memory_used", params(known))
    ram = windows(known.where("memory"), ("host", "gpu"), "used_bytes", mean)
    gpu = windows(known.where("gpu"), ("host", "gpu"), "memory_used_bytes", mean)
    assert window_rows(rows, ("host", "gpu"), "used_bytes") == approx(ram)
    assert window_rows(rows, ("host", "gpu"), "gpu_memory_used_bytes") == approx(gpu)


def test_epoch_starts(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "epoch_starts", params(known))
    first: dict[tuple[str, ...], Point] = {}
    for p in known.where("nrg_step", experiment="exp-a", run="r1"):
        key = (p.tags["epoch"], p.tags["host"], p.tags["rank"])
        if key not in first or p.time_ns < first[key].time_ns:
            first[key] = p
    expected = {(p.time_ns, *k): p.fields["step"] for k, p in first.items()}
    assert keyed(rows, ("time", "epoch", "host", "rank"), "step") == expected


def test_run_events(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "run_events", params(known))
    runs = known.where("nrg_run", experiment="exp-a", run="r1")
    jobs = known.where("nrg_job", experiment="exp-a", run="r1")
    assert {p.fields["event"] for p in jobs} == {"spawn", "exit"}
    expected = {
        (p.time_ns, p.tags["host"], p.tags.get("rank", "")): p.fields["event"]
        for p in (*runs, *jobs)
    }
    assert keyed(rows, ("time", "host", "rank"), "event") == expected


def test_forecast_energy(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "forecast_energy", params(known))
    found = known.where("nrg_forecast", experiment="exp-a", run="r1", source="total")
    assert found  # the known run has forecasts at its epoch ends
    for col in ("energy_low_joules", "energy_joules", "energy_high_joules"):
        expected = {(p.time_ns, p.tags["host"], p.tags["rank"]): p.fields[col] for p in found}
        assert keyed(rows, ("time", "host", "rank"), col) == approx(expected)


COMPARE = {"experiment": ["exp-a", "exp-b"], "run": ["r1", "r3", "r4"]}
COMPARE_TAGS = ("experiment", "run", "source", "host", "rank")


def compared(known: KnownRun, measurement: str = "nrg_energy", **match: str) -> list[Point]:
    return [
        p
        for p in known.where(measurement, **match)
        if p.tags["run"] in COMPARE["run"] and p.tags["experiment"] in COMPARE["experiment"]
    ]


def test_compare_energy_per_epoch(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "compare_energy_per_epoch", params(known, **COMPARE))
    keys = ("epoch", *COMPARE_TAGS)
    expected = group_sum(compared(known, scope="step"), keys, "energy_joules")
    assert {k[2] for k in expected} == {"r1", "r3", "r4"}
    assert keyed(rows, keys, "energy_joules") == approx(expected)


def test_compare_energy_per_step(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "compare_energy_per_step", params(known, **COMPARE))
    steps = compared(known, scope="step")
    total = group_sum(steps, COMPARE_TAGS, "energy_joules")
    count = group_count(steps, COMPARE_TAGS)
    expected = {k: total[k] / count[k] for k in total}
    assert keyed(rows, COMPARE_TAGS, "energy_joules") == approx(expected)


def test_compare_mean_power(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "compare_mean_power", params(known, **COMPARE))
    steps = compared(known, scope="step")
    energy = group_sum(steps, COMPARE_TAGS, "energy_joules")
    seconds = group_sum(steps, COMPARE_TAGS, "duration_seconds")
    expected = {k: energy[k] / seconds[k] for k in energy}
    assert keyed(rows, COMPARE_TAGS, "mean_power_watts") == approx(expected)


def test_compare_energy_per_sample(loaded: Influxd, known: KnownRun) -> None:
    energy_rows, sample_rows = influxql(
        loaded, "compare_energy_per_sample", params(known, **COMPARE)
    )
    energy = keyed(energy_rows, COMPARE_TAGS, "energy_joules")
    samples = keyed(sample_rows, ("experiment", "run", "host", "rank"), "samples")
    per_sample = {k: e / samples[(k[0], k[1], k[3], k[4])] for k, e in energy.items()}
    steps = compared(known, scope="step")
    want_energy = group_sum(steps, COMPARE_TAGS, "energy_joules")
    want_samples = group_sum(
        compared(known, "nrg_step"), ("experiment", "run", "host", "rank"), "samples"
    )
    expected = {k: e / want_samples[(k[0], k[1], k[3], k[4])] for k, e in want_energy.items()}
    assert per_sample == approx(expected)


def test_cluster_power_by_host(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "cluster_power_by_host", params(known))
    expected = windows(run_steps(known), STEP_TAGS, "mean_power_watts", mean)
    assert window_rows(rows, STEP_TAGS, "power_watts") == approx(expected)


def counted_once(steps: Iterable[Point]) -> dict[tuple[str, ...], float]:
    """Per source: over hosts, the host's figure counted once (the rank whose steps saw the
    most of it), not once per rank."""
    per_rank = group_sum(steps, STEP_TAGS, "energy_joules")
    per_host: dict[tuple[str, str], float] = {}
    for (host, _, source), joules in per_rank.items():
        per_host[(host, source)] = max(joules, per_host.get((host, source), joules))
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for (_, source), joules in per_host.items():
        out[(source,)] += joules
    return dict(out)


def test_cluster_energy_total(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "cluster_energy_total", params(known))
    expected = counted_once(run_steps(known))
    assert keyed(rows, ("source",), "energy_joules") == approx(expected)
    summed = group_sum(run_steps(known), ("source",), "energy_joules")
    assert all(expected[k] < summed[k] for k in summed)  # two ranks per host: not twice


SHARED_DB = "nrg_shared"
SHARED_STEPS = 4
# host → rank → source → J in each of the rank's steps: the ranks of host a both see the whole
# package and both GPUs of their host (as the attribution writes them).
SHARED = {
    "a": {
        "0": {"rapl:package-0": 10.0, "nvml:0": 30.0, "nvml:1": 20.0},
        "1": {"rapl:package-0": 10.0, "nvml:0": 30.0, "nvml:1": 20.0},
    },
    "b": {"2": {"rapl:package-0": 7.0, "nvml:0": 25.0}},
}


def test_cluster_energy_total_counts_a_hosts_sources_once(
    loaded: Influxd, known: KnownRun, tmp_path: Path
) -> None:
    points = []
    for host, ranks in SHARED.items():
        for rank, sources in ranks.items():
            for step in range(SHARED_STEPS):
                t = known.start_ns + (step + 1) * 10**9 + int(rank)
                tags = {"host": host, "rank": rank, "experiment": "x", "run": "shared"}
                for source, joules in sources.items():
                    fields = {"step": step, "energy_joules": joules, "duration_seconds": 0.5}
                    scoped = {**tags, "source": source, "scope": "step", "epoch": "0"}
                    points.append(Point("nrg_energy", scoped, fields, t))
    loaded.query(f"CREATE DATABASE {SHARED_DB}")
    write_v1(loaded, SHARED_DB, points, tmp_path)
    p = params(known, experiment="x", run="shared")
    (rows,) = influxql(loaded, "cluster_energy_total", p, db=SHARED_DB)
    expected = {("rapl:package-0",): 68.0, ("nvml:0",): 220.0, ("nvml:1",): 80.0}
    assert keyed(rows, ("source",), "energy_joules") == approx(expected)


def global_energy(rows: Iterable[dict[str, Any]]) -> dict[int, float]:
    """step → energy of the run's step: per host and source, the largest of its ranks'."""
    per_host: dict[tuple[Any, ...], float] = {}
    for r in rows:
        key = (r["step"], tag(r, "host"), tag(r, "source"))
        per_host[key] = max(r["energy_joules"], per_host.get(key, r["energy_joules"]))
    out: dict[int, float] = defaultdict(float)
    for (step, _, _), joules in per_host.items():
        out[step] += joules
    return dict(out)


def as_rows(points: Iterable[Point], *fields: str) -> list[dict[str, Any]]:
    return [{**p.tags, **{f: p.fields[f] for f in fields}, "time": p.time_ns} for p in points]


def test_global_step_energy(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "global_step_energy", params(known))
    steps = run_steps(known)
    assert sorted(map(str, rows[0])) == sorted(["time", "step", "energy_joules", *STEP_TAGS])
    expected = global_energy(as_rows(steps, "step", "energy_joules"))
    assert len(expected) == 12 and len({p.tags["rank"] for p in steps}) == 4
    # the dashboard's transformations take it from there
    done = apply(rows, panel_transformations("influxql", "cluster", "Energy per global step"))
    assert {r["step"]: r["energy_joules"] for r in done} == approx(expected)
    # two ranks on each host: adding every rank's figures would count the hosts' sources twice
    summed = group_sum(steps, (), "energy_joules")[()]
    assert sum(expected.values()) < summed


def test_global_step_time(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "global_step_time", params(known))
    steps = known.where("nrg_step", experiment="exp-a", run="r1")
    expected: dict[int, float] = {}
    for p in steps:
        n, d = int(p.fields["step"]), float(p.fields["duration_seconds"])
        expected[n] = max(d, expected.get(n, d))
    done = apply(rows, panel_transformations("influxql", "cluster", "Global step time"))
    assert {r["step"]: r["duration_seconds"] for r in done} == approx(expected)
    assert len(done) == 12


def test_stragglers(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "stragglers", params(known))
    steps = known.where("nrg_step", experiment="exp-a", run="r1")
    expected = {(p.time_ns, p.tags["host"], p.tags["rank"]): p.fields["step"] for p in steps}
    assert keyed(rows, ("time", "host", "rank"), "step") == expected
    # what a rank waits for, from the rows: the step's latest end minus its own
    last: dict[int, int] = {}
    for r in rows:
        last[r["step"]] = max(r["time"], last.get(r["step"], r["time"]))
    waits = {
        k: last[step] - k[0] for k, step in keyed(rows, ("time", "host", "rank"), "step").items()
    }
    assert min(waits.values()) == 0 and max(waits.values()) > 0


AGENT_TAGS = ("host", "plugin")


def test_agent_drops(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "agent_drops", params(known))
    sinks = known.where("nrg_collect", kind="sink")
    for field in ("dropped_points", "rejected_points"):
        expected = windows(sinks, AGENT_TAGS, field, max)
        assert window_rows(rows, AGENT_TAGS, field) == approx(expected)
    assert any(v > 0 for v in window_rows(rows, AGENT_TAGS, "dropped_points").values())


def test_agent_spool(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "agent_spool", params(known, host=["h1"]))
    sinks = known.where("nrg_collect", kind="sink", host="h1")
    for field in ("queue_points", "spool_points"):
        expected = windows(sinks, AGENT_TAGS, field, max)
        assert window_rows(rows, AGENT_TAGS, field) == approx(expected)


def test_agent_lateness(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "agent_lateness", params(known))
    collectors = known.where("nrg_collect", kind="collector")
    for field in ("lateness_max_seconds", "errors"):
        expected = windows(collectors, AGENT_TAGS, field, max)
        assert window_rows(rows, AGENT_TAGS, field) == approx(expected)


def values(rows: list[dict[str, Any]]) -> set[str]:
    return {r["value"] for r in rows}


def test_var_hosts(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "var_hosts", params(known))
    assert values(rows) == {p.tags["host"] for p in known.points}


def test_var_experiments(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "var_experiments", params(known))
    assert values(rows) == {p.tags["experiment"] for p in known.where("nrg_step")}


def test_var_runs(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "var_runs", params(known, experiment=["exp-b"]))
    assert values(rows) == {p.tags["run"] for p in known.where("nrg_step", experiment="exp-b")}


def test_var_ranks(loaded: Influxd, known: KnownRun) -> None:
    (rows,) = influxql(loaded, "var_ranks", params(known, experiment=["exp-a"], run=["r1"]))
    steps = known.where("nrg_step", experiment="exp-a", run="r1")
    assert values(rows) == {p.tags["rank"] for p in steps}


def stored_points(rows_of: dict[str, Any]) -> set[tuple[Any, ...]]:
    """(measurement, tags, time, fields) of a raw ``SELECT * … GROUP BY *`` answer; a tag that
    reads "" is one the point does not have."""
    out = set()
    for series in rows_of["results"][0].get("series", []):
        tags = frozenset((k, v) for k, v in series["tags"].items() if v)
        for row in series["values"]:
            record = dict(zip(series["columns"], row, strict=True))
            time_ns = record.pop("time")
            fields = frozenset((k, v) for k, v in record.items() if v is not None)
            out.add((series["name"], tags, time_ns, fields))
    return out


def as_stored(points: Iterable[Point]) -> set[tuple[Any, ...]]:
    return {
        (p.measurement, frozenset(p.tags.items()), p.time_ns, frozenset(p.fields.items()))
        for p in points
    }


def raw(server: Influxd, name: str, params: dict[str, Any]) -> dict[str, Any]:
    return server.query(render(load_query(name, "influxql"), params), DB)


def test_points(loaded: Influxd, known: KnownRun) -> None:
    start, stop = known.start_ns + 3 * 10**9, known.stop_ns - 3 * 10**9
    wanted = ("gpu", "nrg_run", "nrg_step")
    p = {"measurement": list(wanted), "timeRangeStart": start, "timeRangeStop": stop}
    expected = [q for q in known.points if q.measurement in wanted and start <= q.time_ns <= stop]
    assert {q.measurement for q in expected} == set(wanted)
    assert len(expected) < len([q for q in known.points if q.measurement in wanted])
    assert stored_points(raw(loaded, "points", p)) == as_stored(expected)
    everything = {**p, "measurement": ALL}
    in_range = [q for q in known.points if start <= q.time_ns <= stop]
    assert stored_points(raw(loaded, "points", everything)) == as_stored(in_range)


def test_run_points(loaded: Influxd, known: KnownRun) -> None:
    p = {
        "measurement": ALL,
        "run": "r4",
        "timeRangeStart": known.start_ns,
        "timeRangeStop": known.stop_ns,
    }
    expected = [q for q in known.points if q.tags.get("run") == "r4"]
    assert len({q.measurement for q in expected}) >= 3
    assert stored_points(raw(loaded, "run_points", p)) == as_stored(expected)
    steps = {**p, "measurement": ["nrg_step"]}
    assert stored_points(raw(loaded, "run_points", steps)) == as_stored(
        q for q in expected if q.measurement == "nrg_step"
    )
