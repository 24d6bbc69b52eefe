"""RAPL simulator: a powercap tree whose counters advance at given constant powers.

``nrg-collect simulate rapl DIR --package 25W --dram 5W`` lays out, under ``DIR``, the tree the
kernel's ``intel_rapl`` driver makes, where the rapl collector looks for it: zone directories
under ``DIR/sys/devices/virtual/powercap/intel-rapl/`` (``intel-rapl:S`` named ``package-S``,
its subzone ``intel-rapl:S:0`` named ``dram``), each with ``name``, ``enabled``,
``max_energy_range_uj`` and ``energy_uj``, linked from ``DIR/sys/class/powercap/``. It prints the
``[[collectors.rapl]]`` table that reads it, then rewrites every ``energy_uj`` each ``--period``
as power × time since start in µJ, modulo ``max_energy_range_uj`` (so the counters wrap as real
ones do), by atomic rename, until Ctrl-C, SIGTERM or ``--duration``. Between two readings the
energy is power × time to within one period. ``--background`` returns once the tree is laid
out, leaving the counters advancing in a process of their own, whose pid is in
``DIR/simulate.pid``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acquisition.simulate import BAD_POWER, PID_FILE, add_run_options, parse_watts, serve

__all__ = [
    "BAD_POWER",
    "MAX_RANGE_UJ",
    "PID_FILE",
    "Zone",
    "config_table",
    "layout",
    "main",
    "parse_watts",
]

MAX_RANGE_UJ = 262_143_328_850
"""``max_energy_range_uj`` of a real package zone (Skylake server): 2^38 µJ less a margin."""


@dataclass(frozen=True)
class Zone:
    """One simulated zone: its directory under the virtual powercap tree, name and power."""

    directory: str
    name: str
    watts: float


def layout(
    root: Path,
    package_w: float,
    dram_w: float | None,
    sockets: int = 1,
    max_range_uj: int = MAX_RANGE_UJ,
) -> list[Zone]:
    """Create the tree under ``root`` (existing files are rewritten); the zones, each socket's
    package then its dram (none where ``dram_w`` is None)."""
    virtual = root / "sys/devices/virtual/powercap/intel-rapl"
    links = root / "sys/class/powercap"
    links.mkdir(parents=True, exist_ok=True)
    _link(links / "intel-rapl", "../../devices/virtual/powercap/intel-rapl")
    zones: list[Zone] = []
    for s in range(sockets):
        zones.append(Zone(f"intel-rapl:{s}", f"package-{s}", package_w))
        if dram_w is not None:
            zones.append(Zone(f"intel-rapl:{s}/intel-rapl:{s}:0", "dram", dram_w))
    for zone in zones:
        where = virtual / zone.directory
        where.mkdir(parents=True, exist_ok=True)
        for file, text in (("name", zone.name), ("enabled", "1"), ("energy_uj", "0")):
            (where / file).write_text(text + "\n")
        (where / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
        _link(links / Path(zone.directory).name, os.path.relpath(where, links))
    return zones


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def config_table(root: Path) -> str:
    """The ``[[collectors.rapl]]`` table that reads the tree under ``root``."""
    return f'[[collectors.rapl]]\nroot = "{root}"\nbackend = "powercap"\n'


def write_counters(
    root: Path, zones: Sequence[Zone], start_ns: int, now_ns: int, max_range_uj: int
) -> None:
    """Every zone's ``energy_uj`` at ``now_ns``: power × (now − start), wrapped."""
    virtual = root / "sys/devices/virtual/powercap/intel-rapl"
    for zone in zones:
        path = virtual / zone.directory / "energy_uj"
        uj = int(zone.watts * (now_ns - start_ns) // 1000) % max_range_uj
        tmp = path.with_name("energy_uj.tmp")
        tmp.write_text(f"{uj}\n")
        os.replace(tmp, path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nrg-collect simulate rapl",
        description="A powercap tree under DIR whose RAPL counters advance at constant powers; "
        "prints the [[collectors.rapl]] table that reads it and runs until Ctrl-C.",
    )
    p.add_argument("dir", metavar="DIR", help="where to lay out the tree (created if missing)")
    p.add_argument("--package", default="25W", help="each package's power (default 25W)")
    p.add_argument("--dram", default="5W", help="each package's DRAM power (default 5W; 0: none)")
    p.add_argument("--sockets", type=int, default=1, help="packages (default 1)")
    p.add_argument(
        "--max-range-uj",
        type=int,
        default=MAX_RANGE_UJ,
        help=f"where the counters wrap to 0 (default {MAX_RANGE_UJ})",
    )
    add_run_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``nrg-collect simulate rapl``; see the module docstring."""
    args = _parser().parse_args(argv)
    try:
        package = parse_watts(args.package)
        dram = parse_watts(args.dram)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.sockets < 1 or args.max_range_uj < 1:
        print("simulate rapl: --sockets and --max-range-uj must be > 0", file=sys.stderr)
        return 2
    root = Path(args.dir).expanduser().resolve()
    zones = layout(root, package, dram if dram > 0 else None, args.sockets, args.max_range_uj)
    powers = ", ".join(f"{z.name} {z.watts:g} W" for z in zones[: 2 if dram > 0 else 1])
    start = time.time_ns()
    ran = serve(
        root,
        config_table(root),
        f"RAPL under {root}: {powers}",
        lambda now: write_counters(root, zones, start, now, args.max_range_uj),
        period_s=args.period,
        duration_s=args.duration,
        background=args.background,
    )
    if ran:
        for path in root.glob("sys/devices/virtual/powercap/intel-rapl/**/energy_uj.tmp"):
            path.unlink(missing_ok=True)
    return 0
