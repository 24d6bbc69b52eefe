"""Cost of the agent side of training instrumentation: the hooks listener and the attribution.

1. Listener: N ``nrg_module`` lines sent over a real Unix socket to a running ``HooksCollector``
   until all are emitted — lines/s and µs per line — beside the baseline of parsing the same
   lines with ``decode_line`` in a plain loop (the listener's cost beyond parsing is the socket,
   line splitting, checks and host stamping).
2. Attribution: ``EnergyAttribution.process`` over a realistic bus stream (RAPL package + dram
   at 10 Hz, 4 steps/s with 60 module points each, one procfs-like point per 10 ms) — ns per
   point — beside a processor that does nothing on the same stream.

Run: ``.venv/bin/python bench/bench_attribution.py [--quick]``. All figures come from this run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

from acquisition.api import PluginContext
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.processors.attribution import AttributionConfig, EnergyAttribution
from collectors.hooks import HooksCollector, HooksConfig

S = 1_000_000_000
MS = 1_000_000
T0 = 1_763_000_000 * S


def module_lines(n: int) -> list[bytes]:
    return [
        (
            f"nrg_module,epoch=0,experiment=bench,module=layer{i % 60}.conv,phase=forward,rank=0,"
            f"run=r1 step={i // 60}i,calls=1i,inclusive_seconds=0.00123,"
            f"exclusive_seconds=0.00101 {T0 + i}\n"
        ).encode()
        for i in range(n)
    ]


async def listener_once(lines: list[bytes], tmp: Path) -> float:
    context = PluginContext(
        host="bench", interval_s=1.0, state_dir=tmp, data_dir=tmp, runtime_dir=tmp
    )
    collector = HooksCollector(HooksConfig(socket_path=str(tmp / "b.sock")), context)
    await collector.open()
    done = asyncio.Event()
    count = 0

    def emit(_: Point) -> None:
        nonlocal count
        count += 1
        if count == len(lines):
            done.set()

    task = asyncio.create_task(collector.run(emit))
    payload = b"".join(lines)

    def client() -> None:
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(tmp / "b.sock"))
        s.sendall(payload)
        s.close()

    t0 = time.perf_counter()
    sender = threading.Thread(target=client)
    sender.start()
    await done.wait()
    elapsed = time.perf_counter() - t0
    sender.join()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await collector.aclose()
    return elapsed


def parse_baseline(lines: list[bytes]) -> float:
    t0 = time.perf_counter()
    for raw in lines:
        decode_line(raw.decode())
    return time.perf_counter() - t0


def bus_stream(seconds: int) -> list[Point]:
    """Points in time order, as the bus would see them."""
    points: list[tuple[int, int, Point]] = []
    tags = {"experiment": "bench", "run": "r1", "rank": "0"}
    for k in range(seconds * 10 + 1):
        t = T0 + k * 100 * MS
        for domain, watts in (("package", 40.0), ("dram", 6.0)):
            fields = {"energy_joules": watts * k / 10, "power_watts": watts}
            points.append((t, 0, Point("rapl", {"socket": "0", "domain": domain}, fields, t)))
    for k in range(seconds * 100):
        t = T0 + k * 10 * MS + 3 * MS
        points.append((t, 1, Point("cpu", {"cpu": "total"}, {"utilization_ratio": 0.5}, t)))
    for step in range(seconds * 4):
        start, end = T0 + step * 250 * MS, T0 + (step + 1) * 250 * MS
        for i in range(60):
            fields = {"step": step, "calls": 1, "exclusive_seconds": 0.002}
            mtags = {
                **tags,
                "epoch": "0",
                "module": f"layer{i // 2}",
                "phase": ("forward", "backward")[i % 2],
            }
            points.append((end + 1, 2, Point("nrg_module", mtags, fields, end)))
        sfields = {"step": step, "start_time_ns": start, "end_time_ns": end}
        points.append((end + 1, 3, Point("nrg_step", {**tags, "epoch": "0"}, sfields, end)))
    points.sort(key=lambda x: (x[0], x[1]))
    return [p for _, _, p in points]


class NoOp:
    name = "noop"

    def process(self, point: Point, emit: object) -> None:
        return None


def process_once(points: list[Point], make: type) -> tuple[float, int]:
    context = PluginContext(
        host="b", interval_s=0.1, state_dir=Path("/"), data_dir=Path("/"), runtime_dir=Path("/")
    )
    proc = make(AttributionConfig(), context) if make is EnergyAttribution else NoOp()
    out: list[Point] = []
    emit = out.append
    process = proc.process
    t0 = time.perf_counter_ns()
    for p in points:
        process(p, emit)
    return (time.perf_counter_ns() - t0) / len(points), len(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 20_000 if args.quick else 100_000
    rounds = 3 if args.quick else 7
    lines = module_lines(n)
    listen, parse = [], []
    with tempfile.TemporaryDirectory(prefix="nrg-bench-") as d:
        for _ in range(rounds):
            listen.append(asyncio.run(listener_once(lines, Path(d))))
            parse.append(parse_baseline(lines))
    lt, pt = statistics.median(listen), statistics.median(parse)
    print(f"hooks listener, {n} nrg_module lines over a Unix socket ({rounds} rounds, median)")
    print(f"  baseline decode_line loop : {pt / n * 1e6:7.2f} µs/line  {n / pt:10,.0f} lines/s")
    print(f"  listener end to end       : {lt / n * 1e6:7.2f} µs/line  {n / lt:10,.0f} lines/s")
    print(f"  listener beyond parsing   : {(lt - pt) / n * 1e6:7.2f} µs/line")

    stream = bus_stream(30 if args.quick else 120)
    base, attr, emitted = [], [], 0
    for _ in range(rounds):
        base.append(process_once(stream, NoOp)[0])
        ns, emitted = process_once(stream, EnergyAttribution)
        attr.append(ns)
    b, a = statistics.median(base), statistics.median(attr)
    steps = sum(1 for p in stream if p.measurement == "nrg_step")
    print(f"attribution over a bus stream of {len(stream)} points ({rounds} rounds, median)")
    print(f"  baseline no-op processor  : {b:7.0f} ns/point")
    print(f"  EnergyAttribution.process : {a:7.0f} ns/point  ({emitted} nrg_energy points out)")
    print(
        f"  per step (2 sources, 60 module points): {(a - b) * len(stream) / steps / 1000:7.1f} µs"
        f"; per nrg_energy point out: {(a - b) * len(stream) / emitted / 1000:5.2f} µs"
    )


if __name__ == "__main__":
    main()
