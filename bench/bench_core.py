"""Core benchmarks: encoder throughput, scheduler lateness, agent CPU per tick, time to first point.

Each figure is printed beside a baseline measured in the same run:
- encoder: nrg's LineEncoder vs influxdb-client's ``Point.to_line_protocol`` on the same points;
- lateness: the scheduler at 10 Hz and 100 Hz (p50/p99/max) vs a plain ``asyncio.sleep`` loop;
- agent CPU at 10 Hz: the real ``nrg-collect`` (procfs + file sink) vs a bare Python loop reading
  /proc/stat, /proc/meminfo and /proc/self/stat and appending one line per tick, run side by side;
- time from spawning ``nrg-collect`` to its first point on stdout.

Run: ``.venv/bin/python bench/bench_core.py [--seconds 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.running import CollectorRunner, SystemClock

HERE = Path(__file__).resolve().parent.parent
NRG = str(Path(sys.executable).with_name("nrg-collect"))
TICKS = os.sysconf("SC_CLK_TCK")


def fstring_lines(points: list[Point]) -> str:
    """The baseline: a plain f-string encoder (sorted tags, ``i`` suffix, ``repr`` floats; no
    escaping, no validation, no caching): what a few lines of hand-written code do."""
    out = []
    for p in points:
        tags = "".join(f",{k}={v}" for k, v in sorted(p.tags.items()))
        fields = ",".join(
            f"{k}={v}i" if type(v) is int else f"{k}={v!r}" for k, v in p.fields.items()
        )
        out.append(f"{p.measurement}{tags} {fields} {p.time_ns}\n")
    return "".join(out)


def _best_rate(fn: Callable[[], object], n: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def bench_encoder(n: int = 200_000) -> None:
    """procfs-like points: two tags of their own plus ``host`` and ``run`` (default tags for
    nrg, carried by the points themselves for the baselines), a ratio and a byte count."""
    points = [
        Point(
            "process",
            {"tree": "1234", "scope": "combined"},
            {"cpu_utilization_ratio": 0.125 + i * 1e-6, "rss_bytes": 123456789 + i},
            1_700_000_000_000_000_000 + i,
        )
        for i in range(n)
    ]
    tagged = [
        Point(p.measurement, {**p.tags, "host": "bench-host", "run": "r1"}, p.fields, p.time_ns)
        for p in points
    ]
    enc = LineEncoder({"host": "bench-host", "run": "r1"})
    ours_text = enc.encode_many(points)
    if ours_text != fstring_lines(tagged):
        raise SystemExit("encoder output differs from the f-string baseline")
    ours = fstring = 0.0
    for _ in range(7):  # interleaved, best of each: a shared machine's noise hits both alike
        ours = max(ours, _best_rate(lambda: enc.encode_many(points), n, 1))
        fstring = max(fstring, _best_rate(lambda: fstring_lines(tagged), n, 1))
    from influxdb_client import Point as IPoint

    m = n // 4
    ipoints = [
        IPoint("process")
        .tag("tree", "1234")
        .tag("scope", "combined")
        .tag("host", "bench-host")
        .tag("run", "r1")
        .field("cpu_utilization_ratio", p.fields["cpu_utilization_ratio"])
        .field("rss_bytes", p.fields["rss_bytes"])
        .time(p.time_ns)
        for p in points[:m]
    ]
    if "\n".join(p.to_line_protocol() for p in ipoints) + "\n" != enc.encode_many(points[:m]):
        print("note: influxdb-client's text differs from nrg's for these points")
    theirs = _best_rate(lambda: "\n".join(p.to_line_protocol() for p in ipoints), m, 3)
    print(
        f"encoder (procfs-like points, byte-identical output): nrg {ours:,.0f} points/s  |  "
        f"f-string baseline {fstring:,.0f}/s ({ours / fstring:.2f}x)  |  influxdb-client "
        f"Point.to_line_protocol {theirs:,.0f}/s ({ours / theirs:.1f}x)"
    )
    bench_encoder_interleaved(n)


def bench_encoder_interleaved(n: int) -> None:
    """The same points spread over 50 series (per-process tags, one dict per series as the procfs
    collector keeps them), taken in turn: no two neighbours share a series."""
    tag_sets = [{"tree": "1", "scope": "pid", "comm": f"w{j}", "instance": "0"} for j in range(50)]
    points = [
        Point(
            "process",
            tag_sets[i % 50],
            {"cpu_utilization_ratio": 0.125 + i * 1e-6, "rss_bytes": 123456789 + i},
            1_700_000_000_000_000_000 + i,
        )
        for i in range(n)
    ]
    tagged = [
        Point(p.measurement, {**p.tags, "host": "bench-host", "run": "r1"}, p.fields, p.time_ns)
        for p in points
    ]
    enc = LineEncoder({"host": "bench-host", "run": "r1"})
    if enc.encode_many(points) != fstring_lines(tagged):
        raise SystemExit("encoder output differs from the f-string baseline (interleaved)")
    ours = fstring = 0.0
    for _ in range(7):
        ours = max(ours, _best_rate(lambda: enc.encode_many(points), n, 1))
        fstring = max(fstring, _best_rate(lambda: fstring_lines(tagged), n, 1))
    print(
        f"encoder (50 series in turn, byte-identical output): nrg {ours:,.0f} points/s  |  "
        f"f-string baseline {fstring:,.0f}/s ({ours / fstring:.2f}x)"
    )


class _Noop:
    name = "noop"

    async def collect(self, emit: object, now_ns: int) -> None:
        return None


async def _lateness(hz: float, seconds: float, precise: bool) -> list[int]:
    runner = CollectorRunner(
        "noop",
        _Noop(),
        lambda p: None,
        interval_s=1 / hz,  # type: ignore[arg-type]
        clock=SystemClock(precise=precise),
    )
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(seconds)
    task.cancel()
    return list(runner.stats.lateness_ns)[1:]


async def _plain_sleep_lateness(hz: float, seconds: float) -> list[int]:
    interval = int(1e9 / hz)
    deadline = time.monotonic_ns()
    out = []
    end = deadline + int(seconds * 1e9)
    while deadline < end:
        deadline += interval
        await asyncio.sleep(max(0, deadline - time.monotonic_ns()) / 1e9)
        out.append(time.monotonic_ns() - deadline)
    return out


def _pct(values: list[int]) -> str:
    v = sorted(values)
    p = lambda q: v[min(len(v) - 1, int(q * len(v)))] / 1e6  # noqa: E731
    return f"p50 {p(0.5):.3f} ms  p99 {p(0.99):.3f} ms  max {v[-1] / 1e6:.3f} ms  (n={len(v)})"


def bench_lateness(seconds: float) -> None:
    for hz in (10, 100):
        precise = 1 / hz < 0.05  # what precise_wakeup = "auto" picks
        ours = asyncio.run(_lateness(hz, seconds, precise=precise))
        base = asyncio.run(_plain_sleep_lateness(hz, seconds))
        mode = "precise" if precise else "plain"
        print(f"scheduler lateness at {hz} Hz ({mode} wakeup): nrg {_pct(ours)}")
        print(f"    baseline asyncio.sleep loop:  {_pct(base)}")


BARE_LOOP = textwrap.dedent(
    """
    import time, sys
    out = open(sys.argv[1], "a")
    interval = 0.1
    deadline = time.monotonic()
    while True:
        for path in ("/proc/stat", "/proc/meminfo", "/proc/self/stat"):
            with open(path, "rb") as f:
                f.read()
        out.write("tick %d\\n" % time.time_ns()); out.flush()
        deadline += interval
        time.sleep(max(0.0, deadline - time.monotonic()))
    """
)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _config(tmp: str, agent_keys: str, sink: str) -> Path:
    """A 10 Hz procfs config in ``tmp`` with extra ``[agent]`` keys and one sink table."""
    cfg = Path(tmp, "cfg.toml")
    cfg.write_text(
        f'[agent]\ninterval = "100ms"\nstate_dir = "{tmp}/state"\n{agent_keys}\n'
        f"[[collectors.procfs]]\n{sink}\n"
    )
    return cfg


def bench_agent_cpu(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(tmp, 'stats_interval = "10s"', f'[[sinks.file]]\ndir = "{tmp}/out"')
        agent = subprocess.Popen([NRG, "--config", str(cfg), "--quiet"], stderr=subprocess.DEVNULL)
        bare = subprocess.Popen([sys.executable, "-c", BARE_LOOP, f"{tmp}/bare.txt"])
        time.sleep(2.0)  # let start-up costs pass before measuring
        a0, b0 = _cpu_seconds(agent.pid), _cpu_seconds(bare.pid)
        time.sleep(seconds)
        a1, b1 = _cpu_seconds(agent.pid), _cpu_seconds(bare.pid)
        agent.terminate()
        bare.terminate()
        agent.wait()
        bare.wait()
    ticks = seconds * 10
    da, db = a1 - a0, b1 - b0
    print(
        f"agent CPU at 10 Hz (procfs + file sink): {da / ticks * 1e6:.0f} µs/tick = "
        f"{da / seconds * 100:.2f} % of a core  |  bare loop {db / ticks * 1e6:.0f} µs/tick = "
        f"{db / seconds * 100:.2f} %  |  ratio {da / db if db else float('nan'):.2f}x "
        f"(target <= 1.5x; clock ticks are 10 ms, so use >= 20 s)"
    )


def bench_first_point() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(tmp, 'flush_interval = "5ms"', "[[sinks.stdout]]")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            p = subprocess.Popen(
                [NRG, "--config", str(cfg), "--quiet"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert p.stdout is not None
            p.stdout.readline()
            times.append(time.perf_counter() - t0)
            p.terminate()
            p.wait()
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = time.perf_counter() - t0
    print(
        f"first point after spawn: {statistics.median(times) * 1e3:.0f} ms (median of 3)  |  "
        f"bare interpreter start {bare * 1e3:.0f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--encoder-only", action="store_true")
    args = ap.parse_args()
    bench_encoder()
    if args.encoder_only:
        return
    bench_lateness(min(args.seconds, 10.0))
    bench_first_point()
    bench_agent_cpu(args.seconds)


if __name__ == "__main__":
    main()
