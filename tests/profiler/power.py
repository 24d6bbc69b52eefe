"""A RAPL powercap tree whose counters advance at known power, and samplers of it.

The tree is laid out as the kernel lays it out (see ``tests/e2e/test_training_energy.py``); a
writer process rewrites each zone's ``energy_uj`` about every 1 ms (atomic rename) with the energy
of a piecewise-constant power profile: ``[(from_ns, watts), ...]`` in Unix-epoch ns, so the truth
for any interval is known to the test. Those files serve a reader that opens the tree itself
(an ``nrg-collect`` agent); they lag while the writer waits for a CPU. :class:`RaplSampler` (a
background thread) and :class:`ProcessRaplSampler` (a child process) run the real RAPL collector
on the tree with its counters read as hardware counts instead
(:class:`tests.profiler.stamped.StampedIO`): the seam
:class:`acquisition.profiler.wrapper.EnergyProfile` takes as ``sampler``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from acquisition.api import PluginContext
from acquisition.lineproto import decode_line
from acquisition.point import Point
from collectors.rapl import RaplCollector, RaplConfig
from tests.answers.fakepower import GAP_FILE
from tests.e2e.test_training_energy import make_powercap
from tests.profiler.stamped import StampedIO

__all__ = [
    "ProcessRaplSampler",
    "Profile",
    "RaplSampler",
    "energy_between",
    "powercap_tree",
    "set_profiles",
]

Profile = Sequence[tuple[int, float]]
"""Piecewise-constant power: (from this Unix-epoch ns, watts), in time order."""

_WRITER = r"""
import json, os, sys, time
source = sys.argv[1]  # a JSON file: [[path, [[from_ns, watts], ...]], ...], re-read when replaced
gap_file = sys.argv[2]  # the longest gap between rewrites so far (ns), read by stale_s
zones, seen = [], None
last, worst = None, 0
try:  # wake on time even while the test keeps the CPUs busy
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, PermissionError):
    pass
def energy_uj(profile, t):
    total = 0.0
    for i, (start, watts) in enumerate(profile):
        end = profile[i + 1][0] if i + 1 < len(profile) else t
        end = min(end, t)
        if end > start:
            total += watts * (end - start) / 1e3  # W * ns = nJ; / 1000 = uJ
    return int(total)
while True:
    stamp = os.stat(source).st_mtime_ns, os.stat(source).st_ino
    if stamp != seen:
        with open(source) as f:
            zones, seen = json.load(f), stamp
    t = time.time_ns()
    for path, profile in zones:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % energy_uj(profile, t))
        os.replace(tmp, path)
    stalest = time.time_ns() - last if last is not None else 0  # from one rewrite's time
    if stalest > worst:  # to the end of the next
        worst = stalest
        with open(gap_file + ".tmp", "w") as f:
            f.write("%d\n" % worst)
        os.replace(gap_file + ".tmp", gap_file)
    last = t
    time.sleep(0.001)
"""


_PROFILES = "profiles.json"
_ZONES = {
    "package-0": "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj",
    "dram": "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0/energy_uj",
}
"""Where make_powercap puts each zone's counter, relative to the root."""


def energy_between(profile: Profile, start: int, end: int) -> float:
    """Joules of ``profile`` over [start, end] (ns)."""
    total = 0.0
    for i, (t0, watts) in enumerate(profile):
        t1 = profile[i + 1][0] if i + 1 < len(profile) else end
        a, b = max(t0, start), min(t1, end)
        if b > a:
            total += watts * (b - a) / 1e9
    return total


@contextmanager
def powercap_tree(profiles: Mapping[str, Profile]) -> Iterator[Path]:
    """A tree with ``package-0`` and ``dram`` driven by ``profiles`` (zone name → profile)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nrg-prof-powercap-", dir=shm) as d:
        root = Path(d)
        paths = make_powercap(root)
        set_profiles(root, profiles)
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root / _PROFILES), str(root / GAP_FILE)]
        )
        try:
            deadline = time.monotonic() + 30
            while any(paths[n].read_text().strip() in ("", "0") for n in profiles):
                if time.monotonic() > deadline:
                    raise AssertionError("the powercap writer did not start")
                time.sleep(0.005)
            yield root
        finally:
            writer.kill()
            writer.wait()


def set_profiles(root: Path, profiles: Mapping[str, Profile]) -> None:
    """Give the tree's writer new profiles (zone name → profile): it reads them within about a
    millisecond, and the counters follow the new profiles from their start (their values are a
    function of the profile and the time only)."""
    zones = [[str(root / _ZONES[name]), [list(p) for p in prof]] for name, prof in profiles.items()]
    tmp = root / (_PROFILES + ".tmp")
    tmp.write_text(json.dumps(zones))
    os.replace(tmp, root / _PROFILES)


class RaplSampler:
    """The real RAPL collector on ``root``, read every ``interval_s`` on a background thread."""

    def __init__(self, root: Path, interval_s: float = 0.005) -> None:
        context = PluginContext("testhost", interval_s, root, root, root)
        self.io = StampedIO(root / _PROFILES)
        config = RaplConfig(root=str(root), backend="powercap")
        self.collector = RaplCollector(config, context, io=self.io)
        self.interval_s = interval_s
        self._points: list[Point] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0

    def start(self) -> None:
        self.started += 1
        ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(ready),), daemon=True)
        self._thread.start()
        ready.wait(30)

    async def _main(self, ready: threading.Event) -> None:
        await self.collector.open()
        ready.set()
        try:
            while not self._stop.is_set():
                await self._read()
                await asyncio.sleep(self.interval_s)
        finally:
            await self.collector.aclose()

    async def _read(self) -> None:
        """One read, stamped before it as the agent's runner does."""
        self.io.at_ns = now = time.time_ns()
        await self.collector.collect(self._emit, now)

    def _emit(self, point: Point) -> None:
        with self._lock:
            self._points.append(point)

    def stop(self) -> list[Point]:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)
        return self.snapshot()

    def snapshot(self) -> list[Point]:
        with self._lock:
            return list(self._points)


_CHILD = r"""
import asyncio, sys, time
from pathlib import Path
from acquisition.api import PluginContext
from acquisition.lineproto import encode_point
from collectors.rapl import RaplCollector, RaplConfig
from tests.profiler.stamped import StampedIO
root, interval, profiles = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
async def main():
    io = StampedIO(profiles)
    c = RaplCollector(RaplConfig(root=str(root), backend="powercap"),
                      PluginContext("testhost", interval, root, root, root), io=io)
    await c.open()
    print("ready", flush=True)
    out = []
    while True:
        io.at_ns = now = time.time_ns()
        await c.collect(out.append, now)
        sys.stdout.write("".join(encode_point(p) + "\n" for p in out))
        sys.stdout.flush()
        out.clear()
        await asyncio.sleep(interval)
asyncio.run(main())
"""


class ProcessRaplSampler:
    """The real RAPL collector on ``root``, read in a child process (its line protocol read
    back on a thread): its reads are stamped to the millisecond whatever this process does,
    where a reader thread in here waits for the GIL behind a busy Python loop. Its counters are
    read as hardware counts (:class:`tests.profiler.stamped.StampedIO`): each the energy of its
    profile at the reading's stamp, however late the tree's writer runs."""

    def __init__(self, root: Path, interval_s: float = 0.005) -> None:
        self.root, self.interval_s = root, interval_s
        self._points: list[Point] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CHILD,
                str(self.root),
                str(self.interval_s),
                str(self.root / _PROFILES),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            raise AssertionError("the sampler process did not start")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            point = decode_line(line.rstrip("\n"))
            with self._lock:
                self._points.append(point)

    def stop(self) -> list[Point]:
        assert self._proc is not None and self._reader is not None
        self._proc.terminate()
        self._proc.wait(30)
        self._reader.join(30)
        assert self._proc.stdout is not None
        self._proc.stdout.close()
        return self.snapshot()

    def snapshot(self) -> list[Point]:
        with self._lock:
            return list(self._points)
