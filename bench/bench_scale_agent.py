"""How the agent's CPU per tick grows with the number of tracked processes: 1, 20, 200, 2000.

For each size, a shell starts N ``sleep`` processes and waits; the real ``nrg-collect`` tracks
that tree (``--track``) with the procfs collector and the file sink at 5 Hz. After a warm-up,
its CPU time (utime + stime from ``/proc/<pid>/stat``) over a window is divided by the ticks it
wrote in that window (``memory`` points, one per tick). The extra CPU per tick is fitted against
the process count (least squares) and the constant per process printed; a plot goes to
``bench/scale_processes.png``.

Run: ``.venv/bin/python bench/bench_scale_agent.py [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NRG = str(Path(sys.executable).with_name("nrg-collect"))
TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.2


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> int:
    try:
        return len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return 0


def ticks_between(out: Path, t0_ns: int, t1_ns: int) -> int:
    n = 0
    for path in out.glob("*.lp"):
        with path.open() as f:
            for line in f:
                if line.startswith("memory,") or line.startswith("memory "):
                    t = int(line.rsplit(" ", 1)[1])
                    n += t0_ns <= t < t1_ns
    return n


def measure(n: int, seconds: float, tmp: Path) -> float:
    """Agent CPU seconds per tick with a tracked tree of ``n`` sleeping processes."""
    tree = subprocess.Popen(
        ["sh", "-c", f"i=0; while [ $i -lt {n} ]; do sleep 1000 & i=$((i+1)); done; wait"],
        start_new_session=True,
    )
    out = tmp / f"out-{n}"
    cfg = tmp / f"cfg-{n}.toml"
    cfg.write_text(
        f'[agent]\ninterval = "{int(INTERVAL_S * 1000)}ms"\nstate_dir = "{tmp}/state-{n}"\n'
        f'stats_interval = "60s"\n[[collectors.procfs]]\n[[sinks.file]]\ndir = "{out}"\n'
    )
    try:
        deadline = time.monotonic() + 60
        while children(tree.pid) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        agent = subprocess.Popen(
            [NRG, "--config", str(cfg), "--quiet", "--track", str(tree.pid)],
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(3.0)
            c0, t0 = cpu_seconds(agent.pid), time.time_ns()
            time.sleep(seconds)
            c1, t1 = cpu_seconds(agent.pid), time.time_ns()
        finally:
            agent.terminate()
            agent.wait()
    finally:
        os.killpg(tree.pid, signal.SIGTERM)
        tree.wait()
    ticks = ticks_between(out, t0, t1)
    return (c1 - c0) / max(ticks, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sizes = [1, 20, 200, 2000]
    per_tick: dict[int, list[float]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for n in sizes:
                per_tick[n].append(measure(n, args.seconds, Path(tmp)))
    cost = {n: statistics.median(v) for n, v in per_tick.items()}
    print(f"agent (procfs + file sink) at {1 / INTERVAL_S:g} Hz, median of {args.rounds} rounds")
    print(f"{'processes':>10} {'CPU ms/tick':>12}")
    for n, c in cost.items():
        print(f"{n:10d} {c * 1e3:12.3f}")
    xs, ys = list(cost), list(cost.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    print(
        f"fit: CPU per tick = {(my - slope * mx) * 1e3:.3f} ms + {slope * 1e6:.1f} us x processes"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(xs, [y * 1e3 for y in ys], "o-")
    ax.set_xlabel("tracked processes")
    ax.set_ylabel("agent CPU ms per tick")
    ax.set_title(f"nrg-collect cost vs processes ({slope * 1e6:.0f} us per process)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = HERE / "scale_processes.png"
    fig.savefig(out, dpi=100)
    print(f"plot: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
