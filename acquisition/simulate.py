"""``nrg-collect simulate SOURCE ...``: sources for machines without the hardware.

``rapl`` lays out a powercap tree whose counters advance at given powers
(:mod:`collectors.rapl.sim`); ``nvml`` a GPU at a given power that the nvml collector reads
through the fake NVML binding (:mod:`collectors.nvml.sim`); ``emonpi`` writes an emonPi's serial
output on a pseudo-terminal (:mod:`collectors.emonpi.sim`). Each prints the collector table that
reads it and runs until Ctrl-C. The simulators are loaded by name, as the registry loads
plugins; :func:`serve` is the loop the counter simulators share.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "BAD_POWER",
    "PID_FILE",
    "SIMULATORS",
    "STALEST",
    "UNKNOWN_SOURCE",
    "add_run_options",
    "main",
    "parse_watts",
    "serve",
]

SIMULATORS: dict[str, tuple[str, str]] = {
    "rapl": ("collectors.rapl.sim:main", "a powercap tree at given powers (--package, --dram)"),
    "nvml": ("collectors.nvml.sim:main", "NVIDIA GPUs at a given power (--power), read by nvml"),
    "emonpi": ("collectors.emonpi.sim:main", "an emonPi's serial output on a pseudo-terminal"),
}
UNKNOWN_SOURCE = "nrg-collect simulate: unknown source {name!r}; known: {known}"
BAD_POWER = "simulate: {value!r} is not a power (use e.g. 25W, 5W, 0.5kW)"
STALEST = "stopped; a reading was at most {ms:.1f} ms stale (the longest gap between updates)"
"""Said on stderr when a foreground simulator stops: how far its counters lagged real time."""
PID_FILE = "simulate.pid"
"""With ``--background``: the simulator's pid, in DIR (``kill $(cat DIR/simulate.pid)``)."""
_USAGE = "usage: nrg-collect simulate {{{names}}} ... (simulate SOURCE --help for its options)"
_POWER_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(k?W)?\s*$")


def main(argv: Sequence[str]) -> int:
    """Run the simulator named by ``argv[0]`` with the rest of the arguments."""
    names = ", ".join(SIMULATORS)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE.format(names=",".join(SIMULATORS)))
        for name, (_, text) in SIMULATORS.items():
            print(f"  {name:8} {text}")
        return 0 if argv else 2
    target = SIMULATORS.get(argv[0])
    if target is None:
        print(UNKNOWN_SOURCE.format(name=argv[0], known=names), file=sys.stderr)
        return 2
    module, _, attr = target[0].partition(":")
    result: int = getattr(importlib.import_module(module), attr)(list(argv[1:]))
    return result


def parse_watts(value: str) -> float:
    """``25W``, ``25``, ``0.5kW`` → watts; ValueError (:data:`BAD_POWER`) otherwise."""
    m = _POWER_RE.match(value)
    if m is None:
        raise ValueError(BAD_POWER.format(value=value))
    return float(m.group(1)) * (1000.0 if m.group(2) == "kW" else 1.0)


def _positive_seconds(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return seconds


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options every counter simulator shares: ``--period``, ``--duration`` and
    ``--background`` (the arguments of :func:`serve`)."""
    parser.add_argument(
        "--period",
        type=_positive_seconds,
        default=0.001,
        help="seconds between counter updates (0.001)",
    )
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds")
    parser.add_argument(
        "--background",
        action="store_true",
        help="once the counters run, go on in the background (kill PID stops it)",
    )


def serve(
    root: Path,
    table: str,
    what: str,
    tick: Callable[[int], None],
    *,
    period_s: float,
    duration_s: float = 0.0,
    background: bool = False,
) -> bool:
    """Print the collector ``table``, then call ``tick(now_ns)`` every ``period_s`` until
    Ctrl-C, SIGTERM or ``duration_s``. ``background``: print, leave the ticks to a process of
    its own (pid in ``root/simulate.pid``) and return at once; ``what`` is said on stderr, and
    on stopping in the foreground how stale a reading could have been (:data:`STALEST`).
    Whether this process ran the ticks (False: the one that started them in the background)."""
    if background:
        pid = os.fork()
        if pid:
            (root / PID_FILE).write_text(f"{pid}\n")
            sys.stdout.write(table)
            print(f"simulating {what}; kill {pid} stops", file=sys.stderr)
            return False
        os.setsid()  # not stopped with the shell that started it
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    # The handler only appends to a list: an Event set from a signal handler can deadlock on
    # the lock the main thread holds inside the Event's own wait.
    signals: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, _frame: signals.append(signum))
    deadline = time.monotonic() + duration_s if duration_s > 0 else math.inf
    if not background:
        sys.stdout.write(table)
        sys.stdout.flush()
        print(f"simulating {what}; Ctrl-C stops", file=sys.stderr)
    stalest_ns = _run_ticks(tick, period_s, deadline, signals)
    if background:
        (root / PID_FILE).unlink(missing_ok=True)
    else:
        print(STALEST.format(ms=stalest_ns / 1e6), file=sys.stderr)
    return True


def _run_ticks(
    tick: Callable[[int], None], period_s: float, deadline: float, signals: list[int]
) -> int:
    """Call ``tick(now_ns)`` every ``period_s`` until a signal or the deadline; the longest a
    reading can have been stale (ns): from one update's time to the end of the next update."""
    stalest = 0
    last: int | None = None
    while not signals and time.monotonic() < deadline:
        now = time.time_ns()
        tick(now)
        if last is not None:
            stalest = max(stalest, time.time_ns() - last)
        last = now
        time.sleep(period_s)
    return stalest
