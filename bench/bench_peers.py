"""The agent beside its peers at the same sampling rate: CPU and memory while they sample.

Side by side, in one run, for ``--seconds`` after a warm-up, at 10 Hz, all watching the same
tree of 20 sleeping processes:
- ``nrg-collect`` (procfs collector, file sink), ``--track`` on the tree;
- CodeCarbon's ``OfflineEmissionsTracker(measure_power_secs=0.1)``;
- gpu_tracker's ``Tracker(sleep_time=0.1, process_id=<tree>)`` (it samples in a child process);
- the baseline: a bare Python loop reading /proc/stat, /proc/meminfo and /proc/self/stat and
  appending one line per tick.
CPU is utime + stime of each tool's process and its live descendants (``/proc/<pid>/stat``,
10 ms clock ticks) over the window, as CPU-seconds per minute; RSS is summed over the same
processes at the end.

Peers come from their own environment: ``bash bench/make_peers_venv.sh`` first.
Run: ``.venv/bin/python bench/bench_peers.py [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NRG = str(Path(sys.executable).with_name("nrg-collect"))
PEERS = HERE / ".venv-peers" / "bin" / "python"
TICKS = os.sysconf("SC_CLK_TCK")

BARE_LOOP = """
import sys, time
out = open(sys.argv[1], "a")
deadline = time.monotonic()
while True:
    for path in ("/proc/stat", "/proc/meminfo", "/proc/self/stat"):
        with open(path, "rb") as f:
            f.read()
    out.write("tick %d\\n" % time.time_ns()); out.flush()
    deadline += 0.1
    time.sleep(max(0.0, deadline - time.monotonic()))
"""
CODECARBON = """
import time
from codecarbon import OfflineEmissionsTracker
t = OfflineEmissionsTracker(country_iso_code="USA", measure_power_secs=0.1, save_to_file=False,
                            log_level="error")
t.start()
time.sleep(1e9)
"""
GPU_TRACKER = """
import sys, time
from gpu_tracker import Tracker
t = Tracker(sleep_time=0.1, process_id=int(sys.argv[1]), disable_logs=True)
t.start()
time.sleep(1e9)
"""


def tree_of(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                pass
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if not PEERS.exists():
        raise SystemExit("no peers environment: run bash bench/make_peers_venv.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        job = subprocess.Popen(
            ["sh", "-c", "for i in $(seq 20); do sleep 1000 & done; wait"],
            start_new_session=True,
        )
        cfg = Path(tmp, "cfg.toml")
        cfg.write_text(
            f'[agent]\ninterval = "100ms"\nstate_dir = "{tmp}/state"\nstats_interval = "60s"\n'
            f'[[collectors.procfs]]\n[[sinks.file]]\ndir = "{tmp}/out"\n'
        )
        commands = {
            "nrg-collect": [NRG, "--config", str(cfg), "--quiet", "--track", str(job.pid)],
            "CodeCarbon": [str(PEERS), "-c", CODECARBON],
            "gpu_tracker": [str(PEERS), "-c", GPU_TRACKER, str(job.pid)],
            "bare loop": [sys.executable, "-c", BARE_LOOP, f"{tmp}/bare.txt"],
        }
        procs = {
            name: subprocess.Popen(
                cmd,
                cwd=tmp,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, cmd in commands.items()
        }
        try:
            time.sleep(5.0)
            start = {name: cpu_seconds(tree_of(p.pid)) for name, p in procs.items()}
            time.sleep(args.seconds)
            end = {name: cpu_seconds(tree_of(p.pid)) for name, p in procs.items()}
            rss = {name: rss_mb(tree_of(p.pid)) for name, p in procs.items()}
            alive = {name: p.poll() is None for name, p in procs.items()}
        finally:
            for p in [*procs.values(), job]:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                p.wait()
    minutes = args.seconds / 60
    base = (end["bare loop"] - start["bare loop"]) / minutes
    print(f"10 Hz, 20-process tree, {args.seconds:g} s window, side by side")
    print(f"{'tool':14} {'CPU-s/min':>10} {'vs bare loop':>13} {'vs nrg':>8} {'RSS MB':>8}")
    ours = (end["nrg-collect"] - start["nrg-collect"]) / minutes
    for name in procs:
        cpu = (end[name] - start[name]) / minutes
        note = "" if alive[name] else "  (exited early)"
        print(
            f"{name:14} {cpu:10.2f} {cpu / base if base else float('nan'):12.2f}x "
            f"{cpu / ours if ours else float('nan'):7.2f}x {rss[name]:8.1f}{note}"
        )


if __name__ == "__main__":
    main()
