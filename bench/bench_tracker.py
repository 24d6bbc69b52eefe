"""Benchmark: CPU cost of ``acquisition.Tracker`` against gpu_tracker's ``Tracker``, same interval.

Each case runs in a fresh Python process that starts the tracker, sleeps ``--seconds`` (an idle
job, so everything measured is the tracker's own work), stops it and prints its CPU seconds
(user + system, this process and its waited-for children, from ``getrusage``):

- baseline: no tracker;
- nrg: ``Tracker(interval_s=I)`` with the embedded default (every collector that works here);
- gpu_tracker: ``gpu_tracker.Tracker(sleep_time=I)``, run with the Python of a separate
  environment that has gpu-tracker installed (created on first use under
  ``~/.cache/nrg-bench/gpu-tracker-venv``; gpu-tracker is not a dependency of nrg).

Prints each tracker's CPU overhead over the baseline (ms of CPU per second of tracking) and
nrg's ratio to gpu_tracker (target ≤ 0.1), for each interval.

Run: ``.venv/bin/python bench/bench_tracker.py [--seconds 10] [--intervals 0.1 1.0]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GT_VERSION = "5.0.1"
GT_VENV = Path.home() / ".cache/nrg-bench/gpu-tracker-venv"

_CHILD = r"""
import resource, sys, time
import psutil
mode, interval, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
me = psutil.Process()
def cpu():  # this process, its live children (psutil) and the reaped ones (rusage)
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            live += t.user + t.system
        except psutil.Error:
            pass
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + live
if mode == "nrg":
    from acquisition import Tracker
    tracker = Tracker(interval_s=interval)
elif mode == "gpu_tracker":
    from gpu_tracker import Tracker
    tracker = Tracker(sleep_time=interval, disable_logs=True)
else:
    tracker = None
t0 = cpu()
if tracker is not None:
    tracker.start()
time.sleep(min(1.0, seconds / 4))  # let start-up finish
t1 = cpu()
time.sleep(seconds)
t2 = cpu()
if tracker is not None:
    tracker.stop()
    summary = str(tracker.summary()) if mode == "nrg" else str(tracker)
t3 = cpu()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def gpu_tracker_python() -> Path:
    python = GT_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {GT_VENV} with gpu-tracker=={GT_VERSION} ...", file=sys.stderr)
        venv.create(GT_VENV, with_pip=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"gpu-tracker=={GT_VERSION}"], check=True
        )
    return python


def run(python: str, mode: str, interval: float, seconds: float) -> tuple[float, ...]:
    """CPU seconds of (start, steady ``seconds``, stop and summary)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [python, "-c", _CHILD, mode, str(interval), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd="/tmp",
    )
    return tuple(float(x) for x in out.stdout.strip().splitlines()[-1].split())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--intervals", type=float, nargs="+", default=[0.1, 1.0])
    args = ap.parse_args()
    gt = str(gpu_tracker_python())
    for interval in args.intervals:
        results = {}
        for name, python, mode in (
            ("nrg", sys.executable, "nrg"),
            ("nrg baseline", sys.executable, "baseline"),
            ("gpu_tracker", gt, "gpu_tracker"),
            ("gpu_tracker baseline", gt, "baseline"),
        ):
            results[name] = run(python, mode, interval, args.seconds)
        over = {
            name: [a - b for a, b in zip(results[name], results[f"{name} baseline"], strict=True)]
            for name in ("nrg", "gpu_tracker")
        }
        for name, (start, steady, stop) in over.items():
            print(
                f"interval {interval:g} s, {name:12s}: start {start * 1000:7.1f} ms CPU, "
                f"steady {steady / args.seconds * 1000:7.2f} ms CPU/s, "
                f"stop+summary {stop * 1000:7.1f} ms CPU"
            )
        ratio = over["nrg"][1] / over["gpu_tracker"][1]
        total = sum(over["nrg"]) / sum(over["gpu_tracker"])
        print(
            f"interval {interval:g} s: nrg / gpu_tracker steady {ratio:.3f}, whole run {total:.3f}"
        )


if __name__ == "__main__":
    main()
