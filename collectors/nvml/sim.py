"""NVML simulator: NVIDIA GPUs at a given constant power, for machines without one.

``nrg-collect simulate nvml DIR --power 300W`` writes, under ``DIR``, the GPUs' description
(``nvml.toml``, a scenario of the fake binding :mod:`collectors.nvml.fake`: an H100 by default,
its power in mW, memory, clocks, limits) and their state (``state``: the wall time in µs and each
GPU's energy counter in mJ), prints the ``[[collectors.nvml]]`` table that reads them
(``simulate = "DIR"``), then rewrites ``state`` every ``--period`` as power × time since start,
by atomic rename, until Ctrl-C, SIGTERM or ``--duration``; ``--background`` returns once it
runs (pid in ``DIR/simulate.pid``).

The nvml collector configured with ``simulate`` calls
:class:`collectors.nvml.simulated.SimulatedNvml` in place of ``pynvml``: the fake binding, its step the time of the last state written (one step per ms), so
it answers as NVML does (``interfaces.md``): ``nvmlDeviceGetTotalEnergyConsumption`` in mJ,
``nvmlDeviceGetPowerUsage`` and field 186 in mW, and a driver power sample buffer filled every
20 ms up to the state's time. A simulator that has stopped leaves its counters where they were,
as a stopped RAPL simulator does. The fake uses the binding's own structures and errors:
``pip install '.[nvml]'`` (nvidia-ml-py imports without a driver).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acquisition.errors import NoData, install_hint
from acquisition.simulate import BAD_POWER, add_run_options, parse_watts, serve

__all__ = [
    "BAD_POWER",
    "NOT_SIMULATED",
    "SCENARIO",
    "STATE",
    "binding",
    "config_table",
    "layout",
    "main",
    "scenario",
    "write_state",
]

SCENARIO = "nvml.toml"
STATE = "state"
STEP_US = 1000
"""The fake's step: one per ms of the simulator's clock."""
SAMPLE_PERIOD_US = 20_000
"""The driver's power sample buffer gets one sample every 20 ms (as an H100's does)."""
_NAME = "NVIDIA H100 80GB HBM3"
_HOPPER = 9
_MEMORY = 85_520_809_984
NOT_SIMULATED = "{dir}: no simulated GPUs here ({why}); lay them out with nrg-collect simulate nvml"


def scenario(watts: float, gpus: int, start_us: int, name: str = _NAME) -> dict[str, Any]:
    """The fake's scenario of ``gpus`` idle GPUs each drawing ``watts``, from ``start_us``."""
    mw = round(watts * 1000)
    generator = {"period_us": SAMPLE_PERIOD_US, "step_us": STEP_US, "depth": 120,
                 "start_us": start_us, "power_mw": mw, "gpu_util": 0, "memory_util": 0}  # fmt: skip
    return {
        "driver_version": "580.159.04 (simulated)",
        "start_us": start_us,
        "gpu": [
            {
                "uuid": f"GPU-5157a7ed-0000-4000-8000-{i:012x}",
                "name": name,
                "architecture": _HOPPER,
                "memory_total": _MEMORY,
                "memory_reserved": 0,
                "memory_used": 0,
                "power_limit_mw": max(700_000, mw),
                "power_instant_mw": mw,
                "power_usage_mw": mw,
                "energy_mj": 0,
                "utilization_gpu": 0,
                "utilization_memory": 0,
                "temperature_c": 40,
                "clock_sm_mhz": 1980,
                "clock_mem_mhz": 2619,
                "sample_generator": generator,
            }
            for i in range(gpus)
        ],
    }


def _toml(data: Mapping[str, Any]) -> str:
    """The scenario as TOML (flat values, one inline table)."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        return str(v)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if k != "gpu"]
    for gpu in data["gpu"]:
        lines += ["", "[[gpu]]", *(f"{k} = {value(v)}" for k, v in gpu.items())]
    return "\n".join(lines) + "\n"


def layout(root: Path, watts: float, gpus: int = 1, start_ns: int | None = None) -> list[float]:
    """Write the scenario and a first state (counters at 0) under ``root``; each GPU's power."""
    start = time.time_ns() if start_ns is None else start_ns
    root.mkdir(parents=True, exist_ok=True)
    (root / SCENARIO).write_text(_toml(scenario(watts, gpus, start // 1000)))
    powers = [watts] * gpus
    write_state(root, powers, start, start)
    return powers


def write_state(root: Path, powers: Sequence[float], start_ns: int, now_ns: int) -> None:
    """``state`` at ``now_ns``: the time in µs, then each GPU's energy in mJ (power × time)."""
    energies = [int(w * (now_ns - start_ns) // 1_000_000) for w in powers]
    tmp = root / (STATE + ".tmp")
    tmp.write_text(" ".join(map(str, [now_ns // 1000, *energies])) + "\n")
    os.replace(tmp, root / STATE)


def config_table(root: Path) -> str:
    """The ``[[collectors.nvml]]`` table that reads the GPUs simulated under ``root``."""
    return f'[[collectors.nvml]]\nsimulate = "{root}"\n'


def binding(directory: str | os.PathLike[str]) -> Any:
    """The fake binding over the GPUs simulated in ``directory``
    (:class:`collectors.nvml.simulated.SimulatedNvml`); NoData where there are none or where
    nvidia-ml-py, whose structures the fake hands back, is not installed."""
    try:
        from .simulated import SimulatedNvml
    except ImportError as exc:
        raise NoData(f"nvidia-ml-py is not installed ({install_hint('nvml')})") from exc
    return SimulatedNvml(directory)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nrg-collect simulate nvml",
        description="NVIDIA GPUs at a constant power, read by the nvml collector through the "
        "fake NVML binding; prints the [[collectors.nvml]] table and runs until Ctrl-C.",
    )
    p.add_argument("dir", metavar="DIR", help="where to write the GPUs' files (created if missing)")
    p.add_argument("--power", default="300W", help="each GPU's power (default 300W)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs (default 1)")
    add_run_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``nrg-collect simulate nvml``; see the module docstring."""
    args = _parser().parse_args(argv)
    try:
        watts = parse_watts(args.power)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.gpus < 1:
        print("simulate nvml: --gpus must be > 0", file=sys.stderr)
        return 2
    root = Path(args.dir).expanduser().resolve()
    start = time.time_ns()
    powers = layout(root, watts, args.gpus, start)
    ran = serve(
        root,
        config_table(root),
        f"{args.gpus} GPU(s) under {root} at {watts:g} W each",
        lambda now: write_state(root, powers, start, now),
        period_s=args.period,
        duration_s=args.duration,
        background=args.background,
    )
    if ran:
        (root / (STATE + ".tmp")).unlink(missing_ok=True)
    return 0
