"""Benchmark of reading a running agent's files from a ``Tracker`` or the profiler.

A ``Tracker()`` inside ``nrg-collect -- CMD`` (or ``profile(agent_data=DIR)``) reads the agent's
readings from its file sink's directory, and looks again every tenth of its latency while it
waits for the readings after ``stop()`` and after each window. Builds such a directory in a
temporary folder: ``--mb`` of history in rotated files last changed an hour ago (64 MB each, as
the file sink rotates) and a live file holding the last ``--live-mb`` of it, the tail of which is
the tracked span; then, ``--polls`` times, appends one agent flush (``--lines`` lines, a few of
them power readings) and reads the readings since the span's start, both ways, in the same run:

- the baseline: ``Store(dir).points(...)`` (every file read whole at each look);
- ``Follower`` (what ``AgentSampler`` uses): each look reads what was appended since the last,
  and never a file last changed before the span.

Prints milliseconds per look (median) and the ratio; checks both return the same points.

Run: ``.venv/bin/python bench/bench_follow.py [--mb 256] [--live-mb 32] [--polls 30]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquisition.follow import Follower
from acquisition.sampler import POWER_MEASUREMENTS
from acquisition.store import Query, Store

S = 1_000_000_000
ROTATE_MB = 64


def batch(t_ns: int, lines: int) -> str:
    """One agent flush at ``t_ns``: ``cpu``/``memory``/``process`` lines and a ``rapl`` reading."""
    out = [f"rapl,domain=package-0,host=node-1 energy_j=1234.5,power_w=41.2 {t_ns}\n"]
    for i in range(lines - 1):
        out.append(
            f"process,tree=4242,scope=pid,comm=python,instance={i % 20},host=node-1 "
            f"cpu_seconds={i}.25,cpu_utilization_ratio=0.01,rss_bytes=123456789i,threads=4i "
            f"{t_ns}\n"
        )
    return "".join(out)


def write_history(directory: Path, mb: int, live_mb: int, lines: int, t_end: int) -> Path:
    """``mb`` of one-second batches ending at ``t_end``: rotated files of ``ROTATE_MB`` last
    changed an hour ago, then ``live_mb`` in the live file."""
    one = len(batch(t_end, lines))
    t = t_end - mb * 1024 * 1024 // one * S
    hour_ago = time.time() - 3600
    rotated = (mb - live_mb) * 1024 * 1024 // one  # batches in rotated files
    per_file = ROTATE_MB * 1024 * 1024 // one
    for n, first in enumerate(range(0, rotated, per_file)):
        path = directory / f"nrg-{n}.20260101T000000Z.lp"
        with path.open("w") as f:
            for _ in range(min(per_file, rotated - first)):
                f.write(batch(t, lines))
                t += S
        os.utime(path, (hour_ago, hour_ago))
    live = directory / "nrg-live.lp"
    with live.open("w") as f:
        while t < t_end:
            f.write(batch(t, lines))
            t += S
    return live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--live-mb", type=int, default=32)
    ap.add_argument("--lines", type=int, default=32, help="lines per agent flush")
    ap.add_argument("--polls", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        now = time.time_ns()
        live = write_history(directory, args.mb, args.live_mb, args.lines, now - 60 * S)
        start = now - 120 * S  # the span began two minutes before the end of the history
        query = Query.of(POWER_MEASUREMENTS, start_ns=start)
        follower = Follower(directory, query)
        t0 = time.perf_counter()
        first = follower.points()
        first_ms = (time.perf_counter() - t0) * 1e3
        store_ms, follow_ms = [], []
        t = now - 60 * S
        for _ in range(args.polls):
            with live.open("a") as f:
                f.write(batch(t, args.lines))
            t += S
            t0 = time.perf_counter()
            full = list(Store(directory).points(POWER_MEASUREMENTS, start_ns=start))
            store_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            followed = follower.points()
            follow_ms.append((time.perf_counter() - t0) * 1e3)
            assert followed == full, "the follower and a full read differ"
        files = len(list(directory.iterdir()))
        total_mb = sum(p.stat().st_size for p in directory.iterdir()) / 1024 / 1024
    store, follow = statistics.median(store_ms), statistics.median(follow_ms)
    print(
        f"{total_mb:.0f} MB in {files} files ({args.live_mb} MB live), {len(first)} -> "
        f"{len(followed)} readings in the span, {args.polls} looks, one flush appended before each"
    )
    print(f"{'reader':34} {'ms per look (median)':>22} {'vs Store':>9}")
    print(f"{'Store(dir).points (baseline)':34} {store:22.2f} {1.0:8.2f}x")
    print(f"{'Follower.points':34} {follow:22.3f} {follow / store:8.4f}x")
    print(f"{'Follower, first look':34} {first_ms:22.2f} {first_ms / store:8.4f}x")


if __name__ == "__main__":
    main()
