"""A known set of training runs, as nrg writes them, to load into a real server and query.

Two experiments, four runs; run ``r1`` spans two hosts with two ranks each (a distributed job),
``r4`` is a single-process run without a ``rank`` tag. Runs ``r1`` (on each of its hosts), ``r2``,
``r3`` and ``r4`` are tracked commands, with the agent's ``nrg_job`` spawn and exit. Every step has attributed energy for a
RAPL package, a GPU and the wall meter (with its rest-of-system share), module energy, and a
``nrg_step`` point with the samples it saw; the hosts also have power, utilisation and memory
series and the agent's own ``nrg_collect`` points. Values are pseudo-random with a fixed seed.

``expected_*`` helpers compute each question's answer from these points in plain Python,
independently of any query language.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from acquisition.point import Point

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
STEP_NS = 500_000_000
EPOCHS = 3
STEPS_PER_EPOCH = 4
SOURCES = ("rapl:package-0", "nvml:0")
WALL = "emonpi:5:power1"
MODULES = ("0", "1.conv", "2.fc", "(root)")

# (experiment, run, host, rank or None)
RANKS: tuple[tuple[str, str, str, str | None], ...] = (
    ("exp-a", "r1", "h1", "0"),
    ("exp-a", "r1", "h1", "1"),
    ("exp-a", "r1", "h2.lab", "2"),
    ("exp-a", "r1", "h2.lab", "3"),
    ("exp-a", "r2", "h1", "0"),
    ("exp-b", "r3", "h2.lab", "0"),
    ("exp-b", "r4", "h1", None),
)
HOSTS = ("h1", "h2.lab")


@dataclass
class KnownRun:
    points: list[Point]
    start_ns: int
    stop_ns: int

    def where(self, measurement: str, **match: str | Callable[[str | None], bool]) -> list[Point]:
        out = []
        for p in self.points:
            if p.measurement != measurement:
                continue
            ok = True
            for key, want in match.items():
                have = p.tags.get(key)
                ok = want(have) if callable(want) else have == want
                if not ok:
                    break
            if ok:
                out.append(p)
        return out


def build() -> KnownRun:
    rng = random.Random(13)
    points: list[Point] = []
    last = T0
    for i, (experiment, run, host, rank) in enumerate(RANKS):
        base = T0 + i * 60_000_000_000  # runs one minute apart
        tags = {"host": host, "experiment": experiment, "run": run}
        if rank is not None:
            tags["rank"] = rank
        points.append(Point("nrg_run", tags, {"event": "start", "pid": 100 + i}, base))
        t = base
        for step in range(EPOCHS * STEPS_PER_EPOCH):
            t += STEP_NS + rng.randrange(0, 50_000_000)
            epoch = str(step // STEPS_PER_EPOCH)
            points.extend(_step_points(rng, {**tags, "epoch": epoch}, step, t))
            if (
                step % STEPS_PER_EPOCH == STEPS_PER_EPOCH - 1
                and step // STEPS_PER_EPOCH < EPOCHS - 1
            ):
                points.append(_forecast({**tags, "epoch": epoch}, step // STEPS_PER_EPOCH + 1, t))
        points.append(Point("nrg_run", tags, {"event": "end", "pid": 100 + i}, t + 1))
        if rank in (None, "0", "2"):  # a tracked command: the agent of its host marks it
            job = {k: v for k, v in tags.items() if k != "rank"}
            points.append(Point("nrg_job", job, {"event": "spawn", "pid": 90 + i}, base - 5))
            exit_fields = {"event": "exit", "pid": 90 + i, "exit_code": 0}
            points.append(Point("nrg_job", job, exit_fields, t + 5))
        last = max(last, t + 5)
    for host in HOSTS:
        points.extend(_host_series(rng, host, T0, last))
    return KnownRun(points, T0 - 10, last + 1)


def _forecast(tags: dict[str, str], done: int, t: int) -> Point:
    """A forecast at an epoch's end, as processors.forecast writes it (source=total)."""
    energy = 100.0 * EPOCHS + 7.0 * done
    fields: dict[str, float | int | str] = {
        "epochs_done": done,
        "epochs": EPOCHS,
        "energy_joules": energy,
        "energy_low_joules": energy - 30.0 / done,
        "energy_high_joules": energy + 40.0 / done,
        "total_seconds": 6.0 + done / 10,
        "basis": "steps",
    }
    return Point("nrg_forecast", {**tags, "source": "total"}, fields, t + 2)


def _step_points(rng: random.Random, tags: dict[str, str], step: int, t: int) -> list[Point]:
    duration = round(rng.uniform(0.3, 0.6), 6)
    samples = rng.choice((32, 32, 32, 17))
    out = [
        Point(
            "nrg_step",
            tags,
            {"step": step, "duration_seconds": duration, "samples": samples},
            t,
        )
    ]
    inside = 0.0
    for source in (*SOURCES, WALL):
        joules = round(rng.uniform(5.0, 60.0), 6) if source != WALL else inside * 1.4
        inside += joules if source != WALL else 0.0
        out.append(_energy({**tags, "source": source, "scope": "step"}, step, joules, duration, t))
        if source == WALL:
            rest = joules - inside
            out.append(
                _energy(
                    {**tags, "source": source, "scope": "rest_of_system"}, step, rest, duration, t
                )
            )
            continue
        for module in MODULES:
            for phase in ("forward", "backward"):
                share = round(rng.uniform(0.0, joules / 10), 6)
                mtags = {**tags, "source": source, "scope": "module", "module": module}
                out.append(_energy({**mtags, "phase": phase}, step, share, duration / 20, t))
    return out


def _energy(tags: dict[str, str], step: int, joules: float, seconds: float, t: int) -> Point:
    fields: dict[str, float | int] = {
        "step": step,
        "energy_joules": joules,
        "duration_seconds": seconds,
        "mean_power_watts": joules / seconds,
    }
    return Point("nrg_energy", tags, fields, t)


def _host_series(rng: random.Random, host: str, start: int, stop: int) -> Iterable[Point]:
    h = {"host": host}
    counters = {"dropped_points": 0, "rejected_points": 0, "spool_points": 0}
    for t in range(start, stop, 1_000_000_000):
        for socket in ("0", "1"):
            for domain in ("package", "dram", "core"):
                tags = {**h, "socket": socket, "domain": domain}
                yield Point("rapl", tags, {"power_watts": rng.uniform(5, 90)}, t)
        gpu = {**h, "gpu": "0", "uuid": f"GPU-{host}", "name": "NVIDIA H100"}
        yield Point(
            "gpu",
            gpu,
            {
                "power_watts": rng.uniform(60, 700),
                "utilization_ratio": rng.random(),
                "memory_used_bytes": rng.randrange(1 << 30, 80 << 30),
            },
            t,
        )
        yield Point("cpu", {**h, "cpu": "total"}, {"utilization_ratio": rng.random()}, t)
        yield Point("cpu", {**h, "cpu": "cpu0"}, {"utilization_ratio": rng.random()}, t)
        yield Point("memory", h, {"used_bytes": rng.randrange(1 << 30, 64 << 30)}, t)
        yield Point("emonpi", {**h, "node": "5"}, {"power1_watts": rng.uniform(100, 900)}, t)
        for key in counters:
            counters[key] += rng.choice((0, 0, 0, 3))
        sink = {**h, "plugin": "influxdb", "kind": "sink"}
        yield Point("nrg_collect", sink, {**counters, "queue_points": rng.randrange(100)}, t)
        collector = {**h, "plugin": "rapl", "kind": "collector"}
        late = {"lateness_max_seconds": rng.uniform(0, 0.05), "errors": rng.randrange(3)}
        yield Point("nrg_collect", collector, late, t)


def group_sum(
    points: Iterable[Point], keys: tuple[str, ...], field: str
) -> dict[tuple[str, ...], float]:
    """Σ ``field`` per combination of the tags ``keys`` (a missing tag counts as ``""``)."""
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for p in points:
        out[tuple(p.tags.get(k, "") for k in keys)] += float(p.fields[field])
    return dict(out)


def group_count(points: Iterable[Point], keys: tuple[str, ...]) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = defaultdict(int)
    for p in points:
        out[tuple(p.tags.get(k, "") for k in keys)] += 1
    return dict(out)
