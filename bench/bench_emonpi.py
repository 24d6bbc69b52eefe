"""Benchmark of the emonPi collector: lines/s parsed and points/s emitted through a real pty.

Prints, in one run on this machine, for the same stream of simulated lines (classic 24-byte and
CM 40-byte frames, emonTx4 key:value lines, a few banner/noise lines) written by a thread to the
master of a pseudo-terminal:
- the baseline: a bare ``await reader.readline()`` loop on the slave via pyserial-asyncio;
- the collector's ``run()`` (pyserial-asyncio, own line framing, parse, decode, energy, Point);
- the same pipeline plus line-protocol encoding of every point (what a sink adds);
- without I/O: ``parse_line`` alone and ``handle_line`` (parse to Point) on the list of lines.

Run: ``.venv/bin/python bench/bench_emonpi.py [--lines 20000] [--repeat 3]``. A real emonPi sends
one line every 5-10 s (a few emonTx/emonTH nodes relayed: about 1 line/s), so the target is
headroom, not parity with a loop that does nothing per line: the collector ≥ 10 000 lines/s
through the pty on a 2-core machine, i.e. under 0.01 % of one core at a real unit's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
import time
import tty
from collections.abc import Callable

import serial_asyncio

from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from collectors.emonpi import BUILTIN_LAYOUTS, EmonPiCollector, EmonPiConfig, LineError, parse_line
from collectors.emonpi.sim import Simulator, key_value_line

_LAYOUTS = {layout.name: layout for layout in BUILTIN_LAYOUTS}


def make_stream(n: int) -> list[bytes]:
    """``n`` CRLF-terminated lines: 40 % classic, 40 % CM frames, 15 % key:value, 5 % noise."""
    classic = Simulator(_LAYOUTS["emonpi_classic"], 5.0, 1)
    cm = Simulator(_LAYOUTS["emonpi_cm"], 9.85, 2)
    tx4 = Simulator(_LAYOUTS["emontx4"], 9.8, 3)
    noise = [b"emonPi V2.93", b" -> 4 b", b"\xff\xfe\x00garbage", b"OK 7 1 2 3 (-70)"]
    out: list[bytes] = []
    for i in range(n):
        k = i % 20
        if k < 8:
            line = classic.frame(classic.step(), 5, 0).encode()
        elif k < 16:
            line = cm.frame(cm.step(), 5, 0).encode()
        elif k < 19:
            line = key_value_line(tx4.step()).encode()
        else:
            line = noise[i % len(noise)]
        out.append(line + b"\r\n")
    return out


class PtyFeeder:
    """A pty pair and a thread that writes a byte string to its master (blocking writes)."""

    def __init__(self, data: bytes) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        self.path = os.ttyname(self.slave)
        self.data = data
        self.start = threading.Event()
        self.t0 = 0.0
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        self.start.wait()
        self.t0 = time.perf_counter()
        view = memoryview(self.data)
        while view:
            n = os.write(self.master, view[:65536])
            view = view[n:]

    def close(self) -> None:
        self.thread.join()
        os.close(self.master)
        os.close(self.slave)


async def bare_readline(data: bytes, n_lines: int) -> float:
    """Seconds for a bare readline loop to receive ``n_lines`` through the pty."""
    feeder = PtyFeeder(data)
    reader, writer = await serial_asyncio.open_serial_connection(url=feeder.path, baudrate=38400)
    feeder.start.set()
    count = 0
    while count < n_lines:
        line = await reader.readline()
        if line:
            count += 1
    elapsed = time.perf_counter() - feeder.t0
    writer.close()
    await asyncio.sleep(0.01)
    feeder.close()
    return elapsed


async def collector_run(data: bytes, n_lines: int, encode: bool) -> tuple[float, int]:
    """Seconds for the collector to take ``n_lines`` from the pty, and the points it emitted."""
    feeder = PtyFeeder(data)
    collector = EmonPiCollector(EmonPiConfig(port=feeder.path))
    await collector.open()
    encoder = LineEncoder({"host": "bench"})
    out: list[str] = []
    points = 0

    def emit(point: Point) -> None:
        nonlocal points
        points += 1
        if encode:
            out.append(encoder.encode(point))

    task = asyncio.create_task(collector.run(emit))
    # The collector exposes counters, not events: poll them (the cost is the same in every run).
    while collector.stats()["connects"] < 1:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    feeder.start.set()
    while collector.stats()["lines"] < n_lines:  # noqa: ASYNC110
        await asyncio.sleep(0.0005)
    elapsed = time.perf_counter() - feeder.t0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    await collector.aclose()
    await asyncio.sleep(0.01)
    feeder.close()
    return elapsed, points


def no_io(lines: list[bytes]) -> tuple[float, float, int]:
    """Seconds for parse_line alone and for handle_line (to Point) over ``lines``."""
    stripped = [line[:-1] for line in lines]  # as the framing hands them over, without \n

    t0 = time.perf_counter()
    for line in stripped:
        try:
            parse_line(line)
        except LineError:
            pass
    parse_s = time.perf_counter() - t0

    collector = EmonPiCollector(EmonPiConfig())
    points: list[Point] = []
    handle: Callable[[bytes, Callable[[Point], None]], None] = collector.handle_line
    t0 = time.perf_counter()
    for line in stripped:
        handle(line, points.append)
    handle_s = time.perf_counter() - t0
    return parse_s, handle_s, len(points)


async def main_async(n: int, repeat: int) -> None:
    lines = make_stream(n)
    data = b"".join(lines)
    print(f"stream: {n} lines, {len(data)} bytes ({len(data) / n:.0f} B/line) through a pty")
    best: dict[str, float] = {}
    points = 0
    for _ in range(repeat):
        best["readline"] = min(best.get("readline", 1e9), await bare_readline(data, n))
        s, points = await collector_run(data, n, encode=False)
        best["collector"] = min(best.get("collector", 1e9), s)
        s, _ = await collector_run(data, n, encode=True)
        best["collector+lp"] = min(best.get("collector+lp", 1e9), s)
    parse_s, handle_s, no_io_points = no_io(lines)
    base = best["readline"]
    print(f"{'path':34} {'lines/s':>10} {'points/s':>10} {'time vs baseline':>17}")
    print(f"{'baseline: bare readline loop':34} {n / base:10.0f} {'-':>10} {1.0:16.2f}x")
    for key, label in (
        ("collector", "collector run() via pty"),
        ("collector+lp", "collector run() + line protocol"),
    ):
        s = best[key]
        print(f"{label:34} {n / s:10.0f} {points / s:10.0f} {s / base:16.2f}x")
    print(f"{'parse_line only (no I/O)':34} {n / parse_s:10.0f} {'-':>10} {'':>17}")
    print(
        f"{'handle_line to Point (no I/O)':34} {n / handle_s:10.0f} {no_io_points / handle_s:10.0f}"
    )
    print(f"(best of {repeat}; points per line {points / n:.2f}; a real emonPi: 0.1-0.2 lines/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the noise lines' "no layout" warnings
    asyncio.run(main_async(args.lines, args.repeat))


if __name__ == "__main__":
    main()
