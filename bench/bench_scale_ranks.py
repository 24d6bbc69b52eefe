"""How the summary of a distributed run grows with ranks and global steps.

A synthetic run as the agents of 8-GPU hosts store it: per host a RAPL package and dram counter
and 8 GPUs (``gpu`` points with UUIDs, as the NVML collector writes them) sampled every second;
per rank its ``nrg_run`` start naming its GPU, one ``nrg_step`` per step and the attribution's
``nrg_energy`` (scope ``step``) per step and source of its host (2 RAPL domains + 8 GPUs). Rank
``world - 1`` is slowed 10 ms per step. Each size runs in a child process: the seconds to build
the points (the baseline: what storage hands the summary), ``summarize`` and ``report --by rank``
text, and the peak resident memory of the child beside the memory the points alone take.

With ``--files`` the run goes the way ``nrg-collect report --data DIR --by rank`` takes it: the
points are written to a line-protocol file first (in a process of their own), then each way runs
in a fresh child and is timed in parts: finding the run (``find_runs``), loading it
(``load_run_columns``), the summary and the ``--by rank`` text, with the child's peak memory
(VmHWM) and the load average at its end. ``new`` is the report's path: step lines read into
columns, a rank's step energy of its host's other GPUs left unread, the join on the columns;
``old`` (the baseline, up to ``--old-max`` rank-steps) reads the same file through ``points()``
only, one ``Point`` per line, as before; ``index`` first writes the file's step index as the
file sink's child process does (``index s``: its own time, the agent's cost, paid once per
file), then takes the report's path through the index. Where several ways run, their summaries
must be equal.

Run: ``.venv/bin/python bench/bench_scale_ranks.py [--sizes 8x1000,64x1000,64x2500] [--files]
[--old-max 64000]`` (RANKSxSTEPS, ranks a multiple of 8).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from acquisition.point import FieldValue, Point  # noqa: E402

GPUS = 8
T0 = 1_764_000_000_000_000_000
NS = 1_000_000_000
STEP_NS = 100_000_000
SLOW_NS = 10_000_000
PACKAGE_W, DRAM_W, GPU_W = 200.0, 30.0, 400.0
DRIVER_HZ = 0
"""``--driver-hz``: the driver's power samples per GPU-second (``gpu_sample``, as the nvml
collector writes them: the GPU's name tag with escaped spaces). A real driver gives about 50."""
NAME = "NVIDIA H100 80GB HBM3"
TICK: dict[str, FieldValue] = {
    "power_average_watts": GPU_W,
    "power_watts": GPU_W,
    "utilization_ratio": 1.0,
    "memory_utilization_ratio": 0.5,
    "memory_reserved_bytes": 0,
    "memory_used_bytes": 40 * 2**30,
    "memory_total_bytes": 80 * 2**30,
    "temperature_celsius": 60,
    "sm_clock_hertz": 1_980_000_000,
    "memory_clock_hertz": 2_619_000_000,
    "power_limit_watts": 700.0,
}
"""With driver samples, a GPU's point each second carries the nvml collector's other fields."""


def _host_sources(host: str, steps: int) -> list[Point]:
    out = []
    tags = {"host": host, "run": "big", "experiment": "scale"}
    for s in range(steps * STEP_NS // NS + 3):
        t = T0 + s * NS
        for domain, watts in (("package", PACKAGE_W), ("dram", DRAM_W)):
            out.append(
                Point(
                    "rapl",
                    {**tags, "socket": "0", "domain": domain},
                    {"energy_joules": watts * s},
                    t,
                )
            )
        for g in range(GPUS):
            gtags = {**tags, "gpu": str(g), "uuid": f"GPU-{host}-{g:04d}"}
            if DRIVER_HZ:  # an agent's: what the nvml collector writes each tick
                gtags["name"] = NAME
                out.append(Point("gpu", gtags, {**TICK, "energy_joules": GPU_W * s}, t))
                out += _driver_samples(gtags, t)
            else:
                out.append(Point("gpu", gtags, {"energy_joules": GPU_W * s}, t))
    return out


def _driver_samples(tags: dict[str, str], t: int) -> list[Point]:
    fields: dict[str, FieldValue] = {
        "power_watts": GPU_W,
        "utilization_ratio": 1.0,
        "memory_utilization_ratio": 0.5,
    }
    return [Point("gpu_sample", tags, fields, t + k * NS // DRIVER_HZ) for k in range(DRIVER_HZ)]


def _rank_points(host: str, rank: int, local: int, steps: int, slow: bool) -> list[Point]:
    tags = {"host": host, "run": "big", "experiment": "scale", "rank": str(rank)}
    start_fields = {"event": "start", "pid": rank, "gpu_uuid": f"GPU-{host}-{local:04d}"}
    out = [Point("nrg_run", tags, start_fields, T0 + NS)]
    lag = 0 if slow else SLOW_NS
    start = T0 + NS
    shared = {"rapl:package-0": PACKAGE_W, "rapl:dram-0": DRAM_W}
    for n in range(steps):
        end = T0 + NS + (n + 1) * STEP_NS - lag
        d = (end - start) / NS
        etags = {**tags, "epoch": str(n // 1000)}
        fields = {"step": n, "samples": 32, "start_time_ns": start, "end_time_ns": end}
        out.append(Point("nrg_step", etags, {**fields, "duration_seconds": d}, end))
        for source, watts in shared.items():
            e = {"step": n, "energy_joules": watts * d}
            out.append(Point("nrg_energy", {**etags, "scope": "step", "source": source}, e, end))
        for g in range(GPUS):
            e = {"step": n, "energy_joules": GPU_W * d}
            stags = {**etags, "scope": "step", "source": f"nvml:{g}"}
            out.append(Point("nrg_energy", stags, e, end))
        start = end
    return out


def build(ranks: int, steps: int) -> list[Point]:
    points: list[Point] = []
    for h in range(ranks // GPUS):
        points += build_host(h, ranks, steps)
    return points


def build_host(h: int, ranks: int, steps: int) -> list[Point]:
    host = f"node{h}"
    points = _host_sources(host, steps)
    for local in range(GPUS):
        rank = h * GPUS + local
        points += _rank_points(host, rank, local, steps, rank == ranks - 1)
    return points


def _rss_mb() -> float:
    """This process's peak resident memory (MB): VmHWM, which starts afresh at exec (the
    rusage figure keeps the parent's from before the exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(ranks: int, steps: int) -> dict[str, float]:
    from acquisition.report.formats import ranks_text
    from acquisition.summary import summarize

    base = _rss_mb()
    t = time.perf_counter()
    points = build(ranks, steps)
    built = time.perf_counter() - t
    points_mb = _rss_mb() - base
    t = time.perf_counter()
    s = summarize(points)
    summary_s = time.perf_counter() - t
    t = time.perf_counter()
    ranks_text([s])
    text_s = time.perf_counter() - t
    assert s.steps.count == steps and len(s.per_rank) == ranks
    assert s.stragglers is not None and s.stragglers["slowest_rank"] == str(ranks - 1)
    return {
        "ranks": ranks,
        "steps": steps,
        "points": len(points),
        "build_s": built,
        "summary_s": summary_s,
        "report_s": text_s,
        "points_mb": points_mb,
        "peak_mb": _rss_mb(),
    }


class _Points:
    """The store seen only through ``points()`` (as InfluxDB is): the report's way before step
    lines were read as columns, the baseline."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def points(self, *args: Any, **kwargs: Any) -> Any:
        return self.store.points(*args, **kwargs)


def _write(d: str, ranks: int, steps: int) -> int:
    """Write the run host by host (its points die with each); the lines written."""
    from acquisition.lineproto import LineEncoder

    n = 0
    encoder = LineEncoder()
    with (Path(d) / "nrg.lp").open("w", encoding="utf-8") as f:
        for h in range(ranks // GPUS):
            points = build_host(h, ranks, steps)
            n += len(points)
            for i in range(0, len(points), 50_000):
                f.write(encoder.encode_many(points[i : i + 50_000]))
    return n


def child_files(ranks: int, steps: int, way: str, d: str, lines: int) -> dict[str, Any]:
    from acquisition.report.formats import ranks_text
    from acquisition.report.runs import find_runs, load_run_columns
    from acquisition.store import Store
    from acquisition.summary import summarize

    base = _rss_mb()
    store: Any = Store(d, use_index=way == "index") if way != "old" else _Points(Store(d))
    cpu = time.process_time()
    t = time.perf_counter()
    (run,) = find_runs(store)
    find_s = time.perf_counter() - t
    t = time.perf_counter()
    points, columns = load_run_columns(store, run)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    s = summarize(points, columns=columns)
    summary_s = time.perf_counter() - t
    t = time.perf_counter()
    ranks_text([s])
    text_s = time.perf_counter() - t
    cpu = time.process_time() - cpu
    assert s.steps.count == steps and len(s.per_rank) == ranks
    assert s.stragglers is not None and s.stragglers["slowest_rank"] == str(ranks - 1)
    return {
        "ranks": ranks,
        "steps": steps,
        "lines": lines,
        "cpu_s": cpu,
        "way": way,
        "find_s": find_s,
        "load_s": load_s,
        "summary_s": summary_s,
        "report_s": text_s,
        "base_mb": base,
        "peak_mb": _rss_mb(),
        "load_avg": os.getloadavg()[0],
        "summary": s.to_dict(),
    }


def index_child(d: str) -> float:
    """Seconds to write the step index of ``d``'s file (``nrg-collect index``)."""
    from acquisition.store_index import index_files

    t = time.perf_counter()
    index_files([d], force=True)
    return time.perf_counter() - t


def main_files(sizes: str, old_max: int, only: list[str] | None = None) -> None:
    import tempfile

    print(
        f"{'ranks':>6}{'steps':>7}{'lines':>10} {'way':>4}{'find s':>8}{'load s':>8}"
        f"{'summary s':>10}{'report s':>9}{'total s':>9}{'CPU s':>7}{'CPU µs/rank-step':>17}"
        f"{'peak MB':>9}{'load avg':>9}{'index s':>9}"
    )
    for size in sizes.split(","):
        ranks, steps = (int(v) for v in size.split("x"))
        with tempfile.TemporaryDirectory(prefix="nrg-scale-") as d:
            argv = [sys.executable, __file__, "--write", size, d, *_hz()]
            lines = int(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
            ways = ["old", "new", "index"] if ranks * steps <= old_max else ["new", "index"]
            ways = [w for w in ways if only is None or w in only]
            found = {}
            for way in ways:
                indexing = None
                if way == "index":
                    argv = [sys.executable, __file__, "--index", d]
                    out = subprocess.run(argv, capture_output=True, text=True, check=True)
                    indexing = float(out.stdout)
                argv = [sys.executable, __file__, "--child-files", size, way, d, str(lines), *_hz()]
                env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same order of sets in both
                out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
                r = json.loads(out.stdout)
                found[way] = r.pop("summary")
                _print_files_row(r, indexing)
            assert all(s == next(iter(found.values())) for s in found.values()), "ways disagree"


def _hz() -> list[str]:
    return ["--driver-hz", str(DRIVER_HZ)]


def _print_files_row(r: dict[str, Any], indexing: float | None) -> None:
    total = r["find_s"] + r["load_s"] + r["summary_s"] + r["report_s"]
    per = r["cpu_s"] / (r["ranks"] * r["steps"]) * 1e6
    print(
        f"{r['ranks']:>6}{r['steps']:>7}{r['lines']:>10} {r['way']:>4}{r['find_s']:>8.2f}"
        f"{r['load_s']:>8.2f}{r['summary_s']:>10.2f}{r['report_s']:>9.3f}{total:>9.2f}"
        f"{r['cpu_s']:>7.2f}{per:>17.1f}{r['peak_mb']:>9.0f}{r['load_avg']:>9.1f}"
        + (f"{indexing:>9.2f}" if indexing is not None else f"{'':>9}"),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8x1000,16x1000,64x1000,64x2500")
    ap.add_argument("--files", action="store_true", help="through .lp files, as report reads")
    ap.add_argument(
        "--old-max",
        type=int,
        default=64_000,
        help="with --files, run the old way too up to this many rank-steps",
    )
    ap.add_argument("--driver-hz", type=int, default=0, help="gpu_sample lines per GPU-second")
    ap.add_argument("--ways", help="with --files, only these ways (e.g. new,index)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--write", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--child-files", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DRIVER_HZ
    DRIVER_HZ = args.driver_hz
    if args.index:
        print(index_child(args.index))
        return
    if args.write:
        ranks, steps = (int(v) for v in args.write[0].split("x"))
        print(_write(args.write[1], ranks, steps))
        return
    if args.child:
        ranks, steps = (int(v) for v in args.child.split("x"))
        print(json.dumps(child(ranks, steps)))
        return
    if args.child_files:
        size, way, d, lines = args.child_files
        ranks, steps = (int(v) for v in size.split("x"))
        print(json.dumps(child_files(ranks, steps, way, d, int(lines))))
        return
    if args.files:
        main_files(args.sizes, args.old_max, args.ways.split(",") if args.ways else None)
        return
    print(
        f"{'ranks':>6}{'steps':>8}{'points':>11}{'build s':>9}{'summary s':>11}"
        f"{'report s':>10}{'points MB':>11}{'peak MB':>9}{'µs/rank-step':>14}"
    )
    for size in args.sizes.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--child", size, *_hz()],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        per = r["summary_s"] / (r["ranks"] * r["steps"]) * 1e6
        print(
            f"{r['ranks']:>6}{r['steps']:>8}{r['points']:>11}{r['build_s']:>9.2f}"
            f"{r['summary_s']:>11.2f}{r['report_s']:>10.3f}{r['points_mb']:>11.0f}"
            f"{r['peak_mb']:>9.0f}{per:>14.2f}"
        )


if __name__ == "__main__":
    main()
