"""A tracked run measured on a running ``nrg-collect simulate SOURCE``: shared by the
simulators' end-to-end tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

NRG = str(Path(sys.executable).with_name("nrg-collect"))


def tracked_run_on_simulator(
    tmp: Path, simulate: list[str], table_lines: int, *, seconds: float = 2.0
) -> dict[str, Any]:
    """Start ``nrg-collect simulate *simulate``, read the ``table_lines`` of collector table it
    prints, track a job sleeping ``seconds`` under an agent at 100 ms with that table (plus
    procfs, hooks on a socket under ``tmp`` and a file sink), stop the simulator, and return
    the run's JSON summary. ``tmp`` must be short: the hooks' Unix socket lives in it."""
    sim = subprocess.Popen(
        [NRG, "simulate", *simulate], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out = tmp / "summary.json"
    try:
        assert sim.stdout is not None
        table = "".join(sim.stdout.readline() for _ in range(table_lines))
        if simulate[0] == "nvml":
            table += 'energy_interval = "100ms"\n'  # the counter at every tick of a short run
        cfg = tmp / "nrg.toml"
        cfg.write_text(
            f'[agent]\ninterval = "100ms"\ndata_dir = "{tmp}/data"\nstate_dir = "{tmp}/state"\n\n'
            f"{table}\n[[collectors.procfs]]\n"
            f'[[collectors.hooks]]\nsocket_path = "{tmp}/s"\n'
            f'[[sinks.file]]\ndir = "{tmp}/out"\n'
        )
        run = [NRG, "-c", str(cfg), "--quiet", "--summary", "json", "--summary-file", str(out)]
        job = [sys.executable, "-c", f"import time; time.sleep({seconds})"]
        proc = subprocess.run([*run, "--", *job], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    finally:
        sim.terminate()
        _, err = sim.communicate(timeout=30)
    assert sim.returncode == 0, err
    summary: dict[str, Any] = json.loads(out.read_text())
    return summary


def sources(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The summary's energy sources by name."""
    return {s["source"]: s for s in summary["energy"]["sources"]}
