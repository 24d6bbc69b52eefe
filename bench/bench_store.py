"""Benchmark of the stored-points reader against ``grep -c`` over the same file.

Writes a mixed line-protocol file (``cpu``, ``memory``, ``process`` lines as the agent writes them
and, for ``--wanted`` of the lines, ``rapl`` and ``nrg_energy`` lines) into a temporary directory,
then times, in the same run, with the file in the page cache:

- the baseline: ``grep -c -E '^(rapl|nrg_energy)[ ,]'`` over the file (counts the wanted lines);
- ``Store.points(["rapl", "nrg_energy"])``: finds, decodes and yields every wanted point;
- the same with a tag filter (``run=r7``, a tenth of the wanted lines).

Prints MB/s of each and the reader's ratio to grep (median of ``--rounds``); checks the reader's
count equals grep's. Targets: ≥ 100 MB/s and ≥ 0.3× grep on 1 GB with 5 % wanted lines. The file
is deleted at the end.

Run: ``.venv/bin/python bench/bench_store.py [--mb 1024] [--wanted 0.05] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquisition.store import Store

T0 = 1_764_000_000_000_000_000


def other_line(rng: random.Random, t: int) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        return (
            f"cpu,cpu=cpu{rng.randrange(16)},host=node-1,experiment=e1,run=r{rng.randrange(10)} "
            f"utilization_ratio={rng.random()!r},user_ratio={rng.random()!r},"
            f"system_ratio={rng.random()!r},iowait_ratio=0.0 {t}"
        )
    if kind == 1:
        return (
            f"memory,host=node-1,experiment=e1,run=r{rng.randrange(10)} "
            f"total_bytes=33554432000i,available_bytes={rng.randrange(1 << 34)}i,"
            f"used_bytes={rng.randrange(1 << 34)}i,used_ratio={rng.random()!r} {t}"
        )
    return (
        f"process,host=node-1,experiment=e1,run=r{rng.randrange(10)},tree=4242,scope=pid,"
        f"pid={rng.randrange(99999)},comm=python cpu_seconds={rng.random() * 100!r},"
        f"rss_bytes={rng.randrange(1 << 32)}i,threads=12i {t}"
    )


def wanted_line(rng: random.Random, t: int) -> str:
    run = f"r{rng.randrange(10)}"
    if rng.random() < 0.5:
        return (
            f"rapl,host=node-1,experiment=e1,run={run},socket=0,domain=package "
            f"energy_joules={rng.random() * 1e4!r},power_watts={rng.random() * 90!r} {t}"
        )
    return (
        f"nrg_energy,experiment=e1,run={run},source=rapl:package-0,scope=step,epoch=1 "
        f"step={rng.randrange(10**6)}i,energy_joules={rng.random() * 5!r},"
        f"duration_seconds=0.1,mean_power_watts=42.0 {t}"
    )


def write_file(path: Path, megabytes: int, wanted: float) -> None:
    rng = random.Random(1)
    block_lines = []
    t = T0
    for _ in range(50_000):
        t += 1_000_000
        block_lines.append(wanted_line(rng, t) if rng.random() < wanted else other_line(rng, t))
    block = ("\n".join(block_lines) + "\n").encode()
    target = megabytes * 1024 * 1024
    with path.open("wb") as f:
        written = 0
        while written < target:
            f.write(block)
            written += len(block)


def timed(fn: object) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = fn()  # type: ignore[operator]
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--wanted", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nrg-bench-store-") as d:
        path = Path(d) / "nrg-20251124T000000Z.lp"
        write_file(path, args.mb, args.wanted)
        size_mb = path.stat().st_size / 1e6
        print(f"file: {size_mb:.0f} MB, {args.wanted:.0%} wanted lines")

        def grep() -> int:
            out = subprocess.run(
                ["grep", "-c", "-E", "^(rapl|nrg_energy)[ ,]", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            return int(out.stdout.strip() or 0)

        def reader() -> int:
            return sum(1 for _ in Store(path).points(["rapl", "nrg_energy"]))

        def reader_tag() -> int:
            return sum(1 for _ in Store(path).points(["rapl", "nrg_energy"], tags={"run": "r7"}))

        grep()  # page cache
        results: dict[str, list[float]] = {"grep -c": [], "reader": [], "reader run=r7": []}
        counts: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, fn in (("grep -c", grep), ("reader", reader), ("reader run=r7", reader_tag)):
                seconds, n = timed(fn)
                results[name].append(seconds)
                counts[name] = n
        assert counts["reader"] == counts["grep -c"], counts
        base = size_mb / statistics.median(results["grep -c"])
        for name, times in results.items():
            rate = size_mb / statistics.median(times)
            print(
                f"{name:15s} {rate:8.0f} MB/s  {rate / base:5.2f}x grep  "
                f"({counts[name]} lines, median of {len(times)})"
            )


if __name__ == "__main__":
    main()
