"""Benchmark of the RAPL collector: cost of one tick beside a bare read of the same files.

Prints, in one run on this machine, the median over rounds of the CPU time per tick of:
- µs per powercap tick of ``RaplCollector.collect`` on the two-socket fixture (4 zones: package
  and DRAM per socket), the emitted points kept in a list, then also encoded to line protocol;
- the baseline: a bare Python loop reading the same four ``energy_uj`` files (``os.open``, ``os.read``,
  ``int``, ``os.close``) and nothing else;
- the same pair for the MSR backend on the two-socket Skylake fixture (4 counters through
  ``pread`` of files laid out like /dev/cpu/N/msr) against bare preads of the same registers.

The fixture files live on the filesystem of the temporary directory (tmpfs or disk), not sysfs:
on a RAPL host each real ``energy_uj`` read also costs the kernel's MSR read (an IPI to a CPU of
that package), identical for the collector and the baseline.

Run: ``.venv/bin/python bench/bench_rapl.py [--ticks 20000] [--rounds 7]``. Target: a powercap
tick ≤ 2x the bare read of its files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from collectors.rapl import RaplCollector, RaplConfig
from tests.rapl.scenarios import FIXTURES, install_tree, write_msr_files


def _context() -> PluginContext:
    tmp = Path(tempfile.gettempdir())
    return PluginContext(host="bench", interval_s=1.0, state_dir=tmp, data_dir=tmp, runtime_dir=tmp)


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """Drive a coroutine that never awaits anything pending (collect() does not)."""
    try:
        coro.send(None)
    except StopIteration:
        return
    raise RuntimeError("collect() suspended")


def _per_tick_us(fn: Callable[[], None], ticks: int) -> float:
    # CPU time of this process (user + system, syscalls included): steadier than wall time on
    # a shared machine, and it is what the agent costs the host.
    t0 = time.process_time_ns()
    for _ in range(ticks):
        fn()
    return (time.process_time_ns() - t0) / ticks / 1000


def _median_pair(
    label: str, collector_tick: Callable[[], None], baseline_tick: Callable[[], None], args: Any
) -> tuple[float, float]:
    ours: list[float] = []
    bare: list[float] = []
    for _ in range(args.rounds):  # interleaved rounds: machine noise hits both alike
        ours.append(_per_tick_us(collector_tick, args.ticks))
        bare.append(_per_tick_us(baseline_tick, args.ticks))
    o, b = statistics.median(ours), statistics.median(bare)
    print(
        f"  {label:<38} {o:7.2f} CPU µs/tick   baseline {b:7.2f} CPU µs/tick   ratio {o / b:4.2f}x"
    )
    return o, b


def bench_powercap(tmp: Path, args: Any) -> None:
    root = install_tree("xeon-2s-dram", tmp)
    collector = RaplCollector(RaplConfig(root=str(root)), _context())
    _run(collector.open())
    assert collector.backend == "powercap"
    paths = [
        os.path.realpath(root / "sys/class/powercap" / z / "energy_uj")
        for z in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1", "intel-rapl:1:0")
    ]
    for p in paths:  # the counters move once: proven, they are read as on a real machine
        Path(p).write_text(f"{int(Path(p).read_text()) + 1_000_000}\n")
    _run(collector.collect(lambda point: None, time.time_ns()))
    sink: list[Point] = []
    encoder = LineEncoder({"host": "bench"})
    now = time.time_ns()

    def tick() -> None:
        sink.clear()
        _run(collector.collect(sink.append, now))

    def tick_encoded() -> None:
        sink.clear()
        _run(collector.collect(sink.append, now))
        encoder.encode_many(sink)

    def bare() -> None:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            int(os.read(fd, 64))
            os.close(fd)

    print(f"powercap, 2 sockets × (package, dram), files under {tmp}:")
    _median_pair("collect() → 4 points", tick, bare, args)
    _median_pair("collect() + line-protocol encoding", tick_encoded, bare, args)
    assert len(sink) == 4
    _run(collector.aclose())


def bench_msr(tmp: Path, args: Any) -> None:
    root = install_tree("msr-skx-2s", tmp)
    spec = tomllib.loads((FIXTURES / "msr-skx-2s" / "msr.toml").read_text())
    write_msr_files(root, spec["registers"])
    collector = RaplCollector(RaplConfig(root=str(root)), _context())
    _run(collector.open())
    assert collector.backend == "msr"
    write_msr_files(root, spec["step"][0]["registers"])  # they move once: proven
    _run(collector.collect(lambda point: None, time.time_ns()))
    fds = [os.open(root / f"dev/cpu/{cpu}/msr", os.O_RDONLY) for cpu in (0, 1)]
    sink: list[Point] = []
    now = time.time_ns()

    def tick() -> None:
        sink.clear()
        _run(collector.collect(sink.append, now))

    def bare() -> None:
        for fd in fds:
            for address in (0x611, 0x619):
                int.from_bytes(os.pread(fd, 8, address), "little") & 0xFFFF_FFFF

    print("MSR, 2 packages × (package, dram), files laid out like /dev/cpu/N/msr:")
    _median_pair("collect() → 4 points", tick, bare, args)
    assert len(sink) == 4
    for fd in fds:
        os.close(fd)
    _run(collector.aclose())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20_000, help="ticks per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (median reported)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="nrg-bench-rapl-") as tmp:
        bench_powercap(Path(tmp), args)
        bench_msr(Path(tmp), args)


if __name__ == "__main__":
    main()
