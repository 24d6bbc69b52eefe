"""Replays the captured RAPL fixture trees under tests/fixtures/rapl/ through the real collector.

A powercap scenario is ``tree/`` (the sysfs tree at open, laid out as the kernel lays it out: flat
links in ``sys/class/powercap`` into nested zones under ``sys/devices/virtual/powercap``),
``steps.toml`` (the ``energy_uj`` values of each later tick, the zones whose read fails, and the
monotonic clock) and ``expected.lp``. An MSR scenario has ``msr.toml`` (register values per CPU
at open and at each tick) instead of ``energy_uj`` steps; the test writes them into files laid
out like ``/dev/cpu/N/msr``: 8-byte little-endian values at the register offsets.
"""

from __future__ import annotations

import errno
import os
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acquisition.api import PluginContext
from acquisition.lineproto import encode_lines
from acquisition.point import Point
from collectors.rapl import RaplCollector, RaplConfig, RaplIO

__all__ = [
    "FIXTURES",
    "MSR_SCENARIOS",
    "POWERCAP_SCENARIOS",
    "SteppedIO",
    "bump",
    "context",
    "install_tree",
    "lines",
    "run_msr",
    "run_powercap",
    "write_msr_files",
]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rapl"
POWERCAP_SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "steps.toml").exists())
MSR_SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "msr.toml").exists())


def context(interval_s: float = 1.0, tmp: Path | None = None) -> PluginContext:
    where = tmp or Path("/nonexistent")
    return PluginContext("testhost", interval_s, where, where, where)


class SteppedIO(RaplIO):
    """The real reader, plus a settable monotonic clock and injected errors.

    ``fail`` maps a path suffix (``intel-rapl:0:0/energy_uj``) to an errno raised on reading it;
    ``msr_table`` (cpu → {address: value}) replaces pread of the MSR files where a plain file
    cannot hold the registers (AMD's consecutive 0xC0010299..0xC001029B)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.fail: dict[str, int] = {}
        self.msr_table: dict[int, dict[int, int]] | None = None
        self._msr_fds: dict[int, int] = {}
        self.reads = 0

    def read_text(self, path: str) -> str:
        self.reads += 1
        for suffix, err in self.fail.items():
            if path.endswith(suffix):
                raise OSError(err, os.strerror(err), path)
        return super().read_text(path)

    def open_msr(self, path: str) -> int:
        fd = super().open_msr(path)
        self._msr_fds[fd] = int(Path(path).parent.name)
        return fd

    def pread_msr(self, fd: int, address: int) -> int:
        if self.msr_table is None:
            return super().pread_msr(fd, address)
        regs = self.msr_table[self._msr_fds[fd]]
        if address not in regs:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return regs[address]

    def monotonic_ns(self) -> int:
        return self.now


def install_tree(scenario: str, tmp: Path) -> Path:
    """A writable copy of the scenario's tree (links kept as links) under ``tmp``."""
    root = tmp / scenario
    shutil.copytree(FIXTURES / scenario / "tree", root, symlinks=True)
    return root


def bump(root: Path, zone: str, uj: int) -> None:
    """Advance one zone's ``energy_uj`` by ``uj`` (a counter that measures moves)."""
    real = os.path.realpath(root / "sys/class/powercap" / zone)
    Path(real, "energy_uj").write_text(f"{int(Path(real, 'energy_uj').read_text()) + uj}\n")


def _write_energy(root: Path, zone: str, value: int) -> None:
    real = os.path.realpath(root / "sys/class/powercap" / zone)
    Path(real, "energy_uj").write_text(f"{value}\n")


async def run_powercap(
    scenario: str,
    tmp: Path,
    config: RaplConfig | None = None,
    io: SteppedIO | None = None,
    interval_s: float = 1.0,
) -> tuple[list[Point], RaplCollector]:
    """Open at the tree's values, then collect once per step; every point emitted, in order."""
    spec: dict[str, Any] = tomllib.loads((FIXTURES / scenario / "steps.toml").read_text())
    root = install_tree(scenario, tmp)
    io = io or SteppedIO()
    cfg = config or RaplConfig()
    cfg.root = str(root)
    collector = RaplCollector(cfg, context(interval_s), io=io)
    points: list[Point] = []
    io.now = spec["open_monotonic_ns"]
    await collector.open()
    for step in spec["step"]:
        for zone, value in step["energy_uj"].items():
            _write_energy(root, zone, value)
        io.fail = {
            f"/{zone}/energy_uj": getattr(errno, name)
            for zone, name in step.get("fail", {}).items()
        }
        io.now = step["monotonic_ns"]
        await collector.collect(points.append, step["time_ns"])
    io.fail = {}
    return points, collector


def write_msr_files(root: Path, registers: dict[str, dict[str, int]]) -> None:
    """Registers into ``dev/cpu/N/msr`` files at their offsets (sparse files)."""
    for cpu, regs in registers.items():
        path = root / "dev/cpu" / cpu / "msr"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for address, value in regs.items():
                os.pwrite(fd, value.to_bytes(8, "little"), int(address, 16))
        finally:
            os.close(fd)


def _registers(table: dict[str, dict[str, int]]) -> dict[int, dict[int, int]]:
    return {int(cpu): {int(a, 16): v for a, v in regs.items()} for cpu, regs in table.items()}


async def run_msr(
    scenario: str,
    tmp: Path,
    io: SteppedIO | None = None,
    prepare: Callable[[Path], None] | None = None,
) -> tuple[list[Point], RaplCollector]:
    """Open with the registers at their first values, then collect once per step;
    ``prepare`` may change the installed tree first."""
    spec: dict[str, Any] = tomllib.loads((FIXTURES / scenario / "msr.toml").read_text())
    root = install_tree(scenario, tmp)
    if prepare is not None:
        prepare(root)
    io = io or SteppedIO()
    table = _registers(spec["registers"])
    # The device files exist in both layouts (the collector looks for them); with the "table"
    # layout their content is not read.
    write_msr_files(
        root,
        spec["registers"] if spec["layout"] == "file" else {cpu: {} for cpu in spec["registers"]},
    )
    if spec["layout"] == "table":
        io.msr_table = table
    collector = RaplCollector(RaplConfig(root=str(root)), context(), io=io)
    points: list[Point] = []
    io.now = spec["open_monotonic_ns"]
    await collector.open()
    for step in spec["step"]:
        changed = step.get("registers", {})
        if spec["layout"] == "file":
            write_msr_files(root, changed)
        else:
            for cpu, regs in _registers(changed).items():
                table[cpu].update(regs)
        io.now = step["monotonic_ns"]
        await collector.collect(points.append, step["time_ns"])
    return points, collector


def lines(points: list[Point]) -> str:
    """Points as line protocol, the format of ``expected.lp``."""
    return encode_lines(points)
