"""A powercap tree whose RAPL counters advance at known constant powers.

The tree is laid out as the kernel lays it out (zones under
``sys/devices/virtual/powercap/intel-rapl``, linked from ``sys/class/powercap``); a writer process
rewrites each zone's ``energy_uj`` every ~1 ms as ``watts × (now − t0)`` by atomic rename, so the
energy between any two readings is power × time to within the ~1 ms the file may be stale.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["GAP_FILE", "ZONES", "powercap_tree", "stale_s"]

ZONES = {"package-0": ("intel-rapl:0", None), "dram": ("intel-rapl:0:0", "intel-rapl:0")}

_WRITER = r"""
import os, sys, time
args = sys.argv[1:]
pairs = [(args[i], float(args[i + 1])) for i in range(0, len(args), 2)]
try:  # keep the counters fresh while the test keeps both CPUs busy
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except (AttributeError, PermissionError):
    pass
gap_file = os.environ["NRG_FAKEPOWER_GAP"]
start = last = time.time_ns()
worst = 0
while True:
    now = time.time_ns()
    for path, watts in pairs:
        with open(path + ".tmp", "w") as f:
            f.write("%d\n" % (watts * (now - start) // 1000))
        os.replace(path + ".tmp", path)
    if now - last > worst:  # how stale a counter has been at most: the longest rewrite gap
        worst = now - last
        with open(gap_file + ".tmp", "w") as f:
            f.write("%d\n" % worst)
        os.replace(gap_file + ".tmp", gap_file)
    last = now
    time.sleep(0.001)
"""


def _zone(virtual: Path, zone: str, parent: str | None, name: str) -> Path:
    where = virtual / parent / zone if parent else virtual / zone
    where.mkdir(parents=True)
    for file, text in (("name", name), ("max_energy_range_uj", "262143328850"), ("enabled", "1")):
        (where / file).write_text(text + "\n")
    (where / "energy_uj").write_text("0\n")
    return where


def _wait_started(writer: subprocess.Popen[bytes], paths: list[Path], watts: list[float]) -> None:
    """Until the writer runs, the counters stand at 0: readings then would not be power × time
    (the writer's interpreter can take 100 ms to start on a loaded machine)."""
    powered = [p for p, w in zip(paths, watts, strict=True) if w > 0]
    deadline = time.monotonic() + 60
    while powered and any(p.read_text().strip() in ("", "0") for p in powered):
        if writer.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the powercap counter writer did not start")
        time.sleep(0.005)


GAP_FILE = ".writer_max_gap_ns"
"""Where a counter writer keeps its longest gap between rewrites (ns), under the tree's root."""


def stale_s(root: Path) -> float:
    """The longest a counter of the tree has gone without a rewrite so far (s): how stale a
    reading can have been, as measured by the writer (0 before its second rewrite)."""
    try:
        return int((root / GAP_FILE).read_text()) / 1e9
    except (OSError, ValueError):
        return 0.0


@contextmanager
def powercap_tree(watts: Mapping[str, float]) -> Iterator[Path]:
    """A root directory (for ``[[collectors.rapl]] root``) whose zones named in ``watts``
    (``package-0``, ``dram``) draw those constant powers while the context is open."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # tmpfs: renames never stall
    with tempfile.TemporaryDirectory(prefix="nrg-answers-rapl-", dir=shm) as d:
        root = Path(d)
        virtual = root / "sys/devices/virtual/powercap/intel-rapl"
        links = root / "sys/class/powercap"
        links.mkdir(parents=True)
        (links / "intel-rapl").symlink_to("../../devices/virtual/powercap/intel-rapl")
        args: list[str] = []
        for name in ("package-0", "dram"):
            zone, parent = ZONES[name]
            where = _zone(virtual, zone, parent, name)
            (links / zone).symlink_to(os.path.relpath(where, links))
            if name in watts:
                args += [str(where / "energy_uj"), str(watts[name])]
        env = {**os.environ, "NRG_FAKEPOWER_GAP": str(root / GAP_FILE)}
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, *args], env=env)
        try:
            _wait_started(writer, [Path(a) for a in args[0::2]], [float(w) for w in args[1::2]])
            yield root
        finally:
            writer.kill()
            writer.wait()
