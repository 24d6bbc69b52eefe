"""The agent beside its peers at the same sampling rate: CPU and memory while they sample.

Side by side, in one run, for ``--seconds`` after a warm-up, at ``--hz`` (10 by default), all
watching the same tree of 20 sleeping processes:
- ``nrg-collect`` (procfs collector, file sink), ``--track`` on the tree;
- CodeCarbon's ``OfflineEmissionsTracker(measure_power_secs=0.1)``;
- gpu_tracker's ``Tracker(sleep_time=0.1, process_id=<tree>)`` (it samples in a child process);
- the baseline: a bare Python loop reading /proc/stat, /proc/meminfo and /proc/self/stat and
  appending one line per tick;
- a bare Python loop reading the files nrg reads, at nrg's cadence (open, read, close; one line
  appended per tick): each tick /proc/stat, /proc/meminfo, its own /proc/self/stat and
  ``/proc/<pid>/stat`` of each process of the tree (nrg tracks its own process too); the
  ``task/<tid>/children`` files of the tree and of itself at a tick where /proc/stat's
  ``processes`` counter moved (a task was created somewhere: nrg walks its trees then); and
  ``smaps_rollup`` of each of those processes every 5 s (nrg's ``memory_detail_interval``).
CPU is the on-CPU time of every thread of each tool's process and its live descendants
(``/proc/<pid>/task/<tid>/schedstat``, nanoseconds; utime + stime of ``/proc/<pid>/stat`` in
10 ms clock ticks where schedstat is missing) over the window, as CPU-seconds per minute; RSS
is summed over the same processes at the end.

Peers come from their own environment: ``bash bench/make_peers_venv.sh`` first.
Run: ``.venv/bin/python bench/bench_peers.py [--seconds 30] [--hz 10]``.
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
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
NRG = str(Path(sys.executable).with_name("nrg-collect"))
PEERS = HERE / ".venv-peers" / "bin" / "python"
TICKS = os.sysconf("SC_CLK_TCK")

BARE_LOOP = """
import sys, time
out = open(sys.argv[1], "a")
period = float(sys.argv[2])
paths = ["/proc/stat", "/proc/meminfo"] + sys.argv[3:]
deadline = time.monotonic()
while True:
    for path in paths:
        with open(path, "rb") as f:
            f.read()
    out.write("tick %d\\n" % time.time_ns()); out.flush()
    deadline += period
    time.sleep(max(0.0, deadline - time.monotonic()))
"""
SAME_FILES_LOOP = """
import os, sys, time
out = open(sys.argv[1], "a")
period, detail_s = float(sys.argv[2]), float(sys.argv[3])
pids = ["self"] + sys.argv[4:]
paths = ["/proc/meminfo"] + ["/proc/%s/stat" % p for p in pids]
forks = None
deadline = detail_due = time.monotonic()
while True:
    with open("/proc/stat", "rb") as f:
        data = f.read()
    i = data.find(b"\\nprocesses ")
    count = data[i : data.find(b"\\n", i + 1)]
    moved, forks = count != forks, count
    for path in paths:
        with open(path, "rb") as f:
            f.read()
    if moved:
        for p in pids:
            for tid in os.listdir("/proc/%s/task" % p):
                with open("/proc/%s/task/%s/children" % (p, tid), "rb") as f:
                    f.read()
    if time.monotonic() >= detail_due:
        detail_due += detail_s
        for p in pids:
            with open("/proc/%s/smaps_rollup" % p, "rb") as f:
                f.read()
    out.write("tick %d\\n" % time.time_ns()); out.flush()
    deadline += period
    time.sleep(max(0.0, deadline - time.monotonic()))
"""
CODECARBON = """
import sys, time
from codecarbon import OfflineEmissionsTracker
t = OfflineEmissionsTracker(country_iso_code="USA", measure_power_secs=float(sys.argv[1]),
                            save_to_file=False,
                            log_level="error")
t.start()
time.sleep(1e9)
"""
GPU_TRACKER = """
import sys, time
from gpu_tracker import Tracker
t = Tracker(sleep_time=float(sys.argv[2]), process_id=int(sys.argv[1]), disable_logs=True)
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


class Cpu(NamedTuple):
    """One reading of a process tree's CPU: from ``stat`` (10 ms clock ticks, exited threads
    included) and from each live thread's ``schedstat`` (ns), with the threads it covered."""

    stat_s: float
    sched_s: float
    threads: frozenset[tuple[int, str]]


def cpu_reading(pids: list[int]) -> Cpu:
    stat_ticks, sched_ns, threads = 0, 0, set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            stat_ticks += int(fields[11]) + int(fields[12])
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    sched_ns += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            threads.add((pid, tid))
    return Cpu(stat_ticks / TICKS, sched_ns / 1e9, frozenset(threads))


def cpu_used(start: Cpu, end: Cpu) -> tuple[float, str]:
    """CPU seconds between two readings: from schedstat (ns) when the same threads lived
    throughout, else from stat (a tool that starts threads per sample, counted in 10 ms ticks)."""
    if start.threads and start.threads == end.threads and end.sched_s > 0:
        return end.sched_s - start.sched_s, "ns"
    return end.stat_s - start.stat_s, "ticks"


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
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument(
        "--also",
        metavar="DIR",
        help="also run nrg-collect from another checkout (e.g. git archive of a commit) in DIR",
    )
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="TOOL",
        help="leave a peer out (CodeCarbon, gpu_tracker), e.g. to spare a loaded machine",
    )
    args = ap.parse_args()
    period = 1.0 / args.hz
    if not PEERS.exists():
        raise SystemExit("no peers environment: run bash bench/make_peers_venv.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        job = subprocess.Popen(
            ["sh", "-c", "for i in $(seq 20); do sleep 1000 & done; wait"],
            start_new_session=True,
        )
        for _ in range(500):
            tree = tree_of(job.pid)
            if len(tree) > 20:
                break
            time.sleep(0.01)
        cfg, cfg2 = Path(tmp, "cfg.toml"), Path(tmp, "cfg2.toml")
        for path, sub in ((cfg, ""), (cfg2, "2")):
            path.write_text(
                f'[agent]\ninterval = "{period * 1000:g}ms"\nstate_dir = "{tmp}/state{sub}"\n'
                f'stats_interval = "60s"\n'
                f'[[collectors.procfs]]\n[[sinks.file]]\ndir = "{tmp}/out{sub}"\n'
            )
        commands = {
            "nrg-collect": [NRG, "--config", str(cfg), "--quiet", "--track", str(job.pid)],
            "CodeCarbon": [str(PEERS), "-c", CODECARBON, str(period)],
            "gpu_tracker": [str(PEERS), "-c", GPU_TRACKER, str(job.pid), str(period)],
            "bare loop": [
                sys.executable,
                "-c",
                BARE_LOOP,
                f"{tmp}/bare.txt",
                str(period),
                "/proc/self/stat",
            ],
            "bare, same files": [
                sys.executable,
                "-c",
                SAME_FILES_LOOP,
                f"{tmp}/same.txt",
                str(period),
                "5",
                *[str(pid) for pid in tree],
            ],
        }
        for name in args.skip:
            commands.pop(name, None)
        envs = {name: None for name in commands}
        if args.also:
            commands["nrg (--also)"] = [
                NRG,
                "--config",
                str(cfg2),
                "--quiet",
                "--track",
                str(job.pid),
            ]
            envs["nrg (--also)"] = {**os.environ, "PYTHONPATH": args.also}
        procs = {
            name: subprocess.Popen(
                cmd,
                cwd=tmp,
                env=envs.get(name),
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, cmd in commands.items()
        }
        try:
            time.sleep(5.0)
            start = {name: cpu_reading(tree_of(p.pid)) for name, p in procs.items()}
            time.sleep(args.seconds)
            end = {name: cpu_reading(tree_of(p.pid)) for name, p in procs.items()}
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
    used = {name: cpu_used(start[name], end[name]) for name in procs}
    per_min = {name: cpu / minutes for name, (cpu, _how) in used.items()}

    def ratio(x: float, y: float) -> float:
        return x / y if y > 0 else float("nan")

    base, same, ours = per_min["bare loop"], per_min["bare, same files"], per_min["nrg-collect"]
    print(f"{args.hz:g} Hz, 20-process tree, {args.seconds:g} s window, side by side")
    print(
        f"{'tool':16} {'CPU-s/min':>10} {'vs bare loop':>13} {'vs same files':>14} "
        f"{'vs nrg':>8} {'RSS MB':>8}  CPU from"
    )
    for name in procs:
        cpu = per_min[name]
        note = "" if alive[name] else "  (exited early)"
        print(
            f"{name:16} {cpu:10.3f} {ratio(cpu, base):12.2f}x {ratio(cpu, same):13.2f}x "
            f"{ratio(cpu, ours):7.2f}x {rss[name]:8.1f}  {used[name][1]}{note}"
        )


if __name__ == "__main__":
    main()
