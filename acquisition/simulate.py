"""``nrg-collect simulate SOURCE ...``: sources for machines without the hardware.

``rapl`` lays out a powercap tree whose counters advance at given powers
(:mod:`collectors.rapl.sim`); ``emonpi`` writes an emonPi's serial output on a pseudo-terminal
(:mod:`collectors.emonpi.sim`). Each prints the collector table that reads it and runs until
Ctrl-C. The simulators are loaded by name, as the registry loads plugins.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["SIMULATORS", "UNKNOWN_SOURCE", "main"]

SIMULATORS: dict[str, tuple[str, str]] = {
    "rapl": ("collectors.rapl.sim:main", "a powercap tree at given powers (--package, --dram)"),
    "emonpi": ("collectors.emonpi.sim:main", "an emonPi's serial output on a pseudo-terminal"),
}
UNKNOWN_SOURCE = "nrg-collect simulate: unknown source {name!r}; known: {known}"
_USAGE = "usage: nrg-collect simulate {{{names}}} ... (simulate SOURCE --help for its options)"


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
