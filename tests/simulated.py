"""A tracked run measured on a running ``nrg-collect simulate SOURCE``: shared by the
simulators' end-to-end tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.selfstats import read_lag_s, tick_lateness_s

NRG = str(Path(sys.executable).with_name("nrg-collect"))


INTERVAL_S = 0.1
"""The tracking agent's interval."""


@dataclass
class SimulatedRun:
    """A tracked run's JSON summary and how far its readings could lag or lead power × time."""

    summary: dict[str, Any]
    stale_s: float
    """The simulator's stalest reading (its own measure) plus how late after its tick's time the
    agent read the simulated source (a tick is stamped before its reads)."""
    late_s: float
    """The agent's latest tick: how far a first or last reading can sit inside the run."""

    def mean_w_bound(self, watts: float) -> float:
        """How far a source's mean power may be from ``watts``: the counter's two ends off from
        each other by up to ``stale_s``, over the span they bracket (at least the run less an
        interval, the lateness and the staleness at each edge)."""
        span = self.summary["duration_s"] - 2 * (INTERVAL_S + self.late_s + self.stale_s)
        return watts * self.stale_s / span

    def energy_bound(self, watts: float, source: str) -> float:
        """How far a source's energy may be from ``watts`` × the run's duration: the mean's
        bound over the whole run, plus the summary's own error bar for the edges."""
        error = sources(self.summary)[source]["error_j"] or 0.0
        return self.mean_w_bound(watts) * self.summary["duration_s"] + error


def tracked_run_on_simulator(
    tmp: Path, simulate: list[str], table_lines: int, *, seconds: float = 2.0
) -> SimulatedRun:
    """Start ``nrg-collect simulate *simulate``, read the ``table_lines`` of collector table it
    prints, track a job sleeping ``seconds`` under an agent at 100 ms with that table (plus
    procfs, hooks on a socket under ``tmp`` and a file sink), stop the simulator, and return
    the run's summary with the staleness measured. ``tmp`` must be short: the hooks' Unix
    socket lives in it."""
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
            f'[agent]\ninterval = "{INTERVAL_S}s"\ndata_dir = "{tmp}/data"\nstate_dir = "{tmp}/state"\n\n'
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
    stalest = re.search(r"a reading was at most ([0-9.]+) ms stale", err)
    assert stalest is not None, err
    stale = float(stalest.group(1)) / 1e3 + read_lag_s(tmp / "out", simulate[0])
    return SimulatedRun(
        json.loads(out.read_text()), stale, tick_lateness_s(tmp / "out", simulate[0])
    )


def sources(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The summary's energy sources by name."""
    return {s["source"]: s for s in summary["energy"]["sources"]}
