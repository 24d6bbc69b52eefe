"""Benchmark of the procfs collector: CPU per tick, and agent-side CPU at 10 Hz.

Prints, in one run on this machine:
- CPU µs per procfs tick (system CPU + memory + one tracked tree of 20 real processes spawned
  here), without and with memory-detail reads, and the detail cost amortised at 10 Hz;
- the same for the default configuration (only the agent itself tracked);
- the baseline: a bare Python loop reading /proc/stat, /proc/meminfo and /proc/self/stat and
  appending one line per tick;
- CPU % of a 10 Hz asyncio loop running the collector (points encoded to line protocol), beside
  a 10 Hz bare loop doing the baseline work.

Run: ``.venv/bin/python bench/bench_procfs.py [--seconds 5]``. Targets (2-core machine): a full
tick ≤ 150 µs of CPU; agent CPU at 10 Hz ≤ 1.5x the bare loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from collectors.procfs import ProcfsCollector, ProcfsConfig

# root sh -> 1 sleep + 3 sh, each with 5 sleeps: 1 + 1 + 3 + 15 = 20 processes, depth 3.
_TREE = (
    "sleep 1000 & "
    + "for g in 1 2 3; do sh -c 'for i in 1 2 3 4 5; do sleep 1000 & done; wait' & done; wait"
)


def _context() -> PluginContext:
    tmp = Path("/tmp")
    return PluginContext(host="bench", interval_s=0.1, state_dir=tmp, data_dir=tmp, runtime_dir=tmp)


def _baseline_tick(lines: list[str]) -> None:
    with open("/proc/stat", "rb") as f:
        stat = f.read()
    with open("/proc/meminfo", "rb") as f:
        meminfo = f.read()
    with open("/proc/self/stat", "rb") as f:
        own = f.read()
    lines.append(
        f"baseline stat={len(stat)}i,meminfo={len(meminfo)}i,own={len(own)}i {time.time_ns()}"
    )


def _cpu_per_call_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time_ns()
    for _ in range(n):
        fn()
    return (time.process_time_ns() - t0) / n / 1000


async def _collector(config: ProcfsConfig) -> ProcfsCollector:
    c = ProcfsCollector(config, _context())
    await c.open()
    return c


async def _tick_cost(config: ProcfsConfig, n: int) -> tuple[float, int]:
    c = await _collector(config)
    sink: list[Point] = []
    emit = sink.append
    now = time.time_ns()
    for _ in range(3):  # warm: descriptors opened, deltas present, memory detail read
        now += 100_000_000
        await c.collect(emit, now)
    sink.clear()
    t0 = time.process_time_ns()
    for _ in range(n):
        now += 1_000  # ticks 1 µs apart in its own clock: no memory-detail refresh falls due
        await c.collect(emit, now)
    us = (time.process_time_ns() - t0) / n / 1000
    per_tick = len(sink) // n
    await c.aclose()
    return us, per_tick


async def _agent_cpu(config: ProcfsConfig | None, seconds: float) -> float:
    """CPU % of one core for a 10 Hz asyncio loop (collector + line-protocol encoding)."""
    enc = LineEncoder({"host": "bench"})
    lines: list[str] = []
    c = await _collector(config) if config is not None else None
    loop = asyncio.get_running_loop()
    points: list[Point] = []
    t0 = time.process_time_ns()
    w0 = time.monotonic()
    deadline = loop.time()
    while time.monotonic() - w0 < seconds:
        deadline += 0.1
        if c is not None:
            await c.collect(points.append, time.time_ns())
            lines.append(enc.encode_many(points))
            points.clear()
        else:
            _baseline_tick(lines)
        await asyncio.sleep(max(deadline - loop.time(), 0))
    cpu = time.process_time_ns() - t0
    wall = time.monotonic() - w0
    if c is not None:
        await c.aclose()
    return cpu / 1e9 / wall * 100


def _bare_loop_cpu(seconds: float) -> float:
    lines: list[str] = []
    t0 = time.process_time_ns()
    w0 = time.monotonic()
    deadline = w0
    while time.monotonic() - w0 < seconds:
        deadline += 0.1
        _baseline_tick(lines)
        time.sleep(max(deadline - time.monotonic(), 0))
    return (time.process_time_ns() - t0) / 1e9 / (time.monotonic() - w0) * 100


def _children(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def _tree_size(pid: int) -> int:
    todo, n = [pid], 0
    while todo:
        p = todo.pop()
        n += 1
        todo += _children(p)
    return n


def _spawn_tree() -> tuple[subprocess.Popen[str], int]:
    """A tree of 20 real processes; returns the launcher (its session owns the tree) and the
    tree's root pid. Started through a shell that exits at once, so the tree is not the bench's
    own descendant (the default configuration tracks the bench process itself)."""
    launcher = subprocess.Popen(
        ["sh", "-c", f"sh -c {shlex.quote(_TREE)} >/dev/null 2>&1 & echo $!"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    root_pid = int(launcher.stdout.readline())
    launcher.wait()
    for _ in range(500):
        if _tree_size(root_pid) == 20:
            break
        time.sleep(0.01)
    return launcher, root_pid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    launcher, root_pid = _spawn_tree()
    try:
        bare = _bare_loop_cpu(args.seconds)
        asyncio.run(_run(root_pid, args.ticks, args.seconds, bare))
    finally:
        os.killpg(launcher.pid, 9)


async def _run(root_pid: int, n: int, seconds: float, bare: float) -> None:
    size = _tree_size(root_pid)
    lines: list[str] = []
    base = _cpu_per_call_us(lambda: _baseline_tick(lines), n)
    tree = ProcfsConfig(pids=[root_pid], track_self=False)
    full, pts = await _tick_cost(tree, n)
    nodetail, _ = await _tick_cost(
        ProcfsConfig(pids=[root_pid], track_self=False, memory_detail=False), n
    )
    summary, spts = await _tick_cost(
        ProcfsConfig(pids=[root_pid], track_self=False, per_process=False), n
    )
    scan, _ = await _tick_cost(
        ProcfsConfig(pids=[root_pid], track_self=False, descendants="scan"), n // 10
    )
    default, dpts = await _tick_cost(ProcfsConfig(), n)
    ps, _ = await _tick_cost(
        ProcfsConfig(pids=[root_pid], track_self=False, backend="psutil"), n // 10
    )

    c = await _collector(ProcfsConfig(pids=[root_pid], track_self=False))
    assert c._source is not None
    t0 = time.process_time_ns()
    reps = 50
    for _ in range(reps):
        for pid in c._procs or {}:
            c._source.detail(pid)
    await c.collect(lambda p: None, time.time_ns())
    t0 = time.process_time_ns()
    for _ in range(reps):
        for pid in list(c._procs):
            c._source.detail(pid)
    detail_all = (time.process_time_ns() - t0) / reps / 1000
    await c.aclose()

    print(f"machine: {os.cpu_count()} CPUs; tracked tree: {size} processes; {n} ticks")
    print("CPU per tick (µs):")
    print(f"  baseline: bare read of stat+meminfo+self/stat, one line  {base:8.1f}")
    print(f"  procfs, default config (self only)          {dpts:3d} points  {default:8.1f}")
    print(
        f"  procfs, tree of {size}, per-process points   {pts:3d} points  {full:8.1f}"
        f"   (target <= 150)"
    )
    print(f"  procfs, tree of {size}, tree sums only       {spts:3d} points  {summary:8.1f}")
    print(f"  procfs, tree of {size}, memory_detail=false             {nodetail:8.1f}")
    print(f"  procfs, tree of {size}, descendants=scan                {scan:8.1f}")
    print(f"  psutil backend, tree of {size}                          {ps:8.1f}")
    print(
        f"  memory detail (smaps_rollup) of all {size}, one pass    {detail_all:8.1f}"
        f"   = {detail_all / 50:.1f} µs/tick at 10 Hz, 5 s interval"
    )

    print(f"agent CPU at 10 Hz over {seconds:g} s (% of one core):")
    base_async = await _agent_cpu(None, seconds)
    self_only = await _agent_cpu(ProcfsConfig(), seconds)
    with_tree = await _agent_cpu(ProcfsConfig(pids=[root_pid]), seconds)
    print(f"  bare loop (time.sleep), baseline work       {bare:6.3f}")
    print(f"  asyncio loop, baseline work                 {base_async:6.3f}")
    print(
        f"  asyncio loop, procfs default (self)         {self_only:6.3f}"
        f"   = {self_only / bare:.2f}x bare (target <= 1.5x)"
    )
    print(
        f"  asyncio loop, procfs self + tree of {size}    {with_tree:6.3f}"
        f"   = {with_tree / bare:.2f}x bare"
    )


if __name__ == "__main__":
    main()
