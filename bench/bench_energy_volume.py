"""Output volume of the energy attribution: bytes of ``nrg_energy`` line protocol per step and MB
per hour, for each ``module_detail``, and the number of series a run creates per hour.

A simulated run through the real ``EnergyAttribution`` and the real line-protocol encoder: a
101-layer MLP (101 modules, forward and backward: 202 module entries per step), RAPL package and
DRAM on one socket sampled every 100 ms, 10 epochs of 360 steps. The tags are what a tracked run
carries (``host``, ``experiment``, ``run``, ``rank``, ``epoch``). Steps of 100 ms (10 steps/s)
and of 1 s (1 step/s) give the two MB/hour columns.

Run: ``python bench/bench_energy_volume.py``. All figures come from this run.
"""

from __future__ import annotations

from pathlib import Path

from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.processors.attribution import AttributionConfig, EnergyAttribution

S = 1_000_000_000
MS = 1_000_000
T0 = 1_763_000_000 * S
MODULES = [f"layers.{i}" for i in range(101)]
EPOCHS = 10
STEPS_PER_EPOCH = 360
TAGS = {"host": "gpu-node-01", "experiment": "mlp-sweep", "run": "lr-0.01", "rank": "0"}


def run(detail: str, step_ms: int) -> tuple[int, int, set[tuple[str, ...]]]:
    """(steps, bytes of nrg_energy line protocol, distinct series) for one simulated run."""
    context = PluginContext("bench", 0.1, Path("/"), Path("/"), Path("/"))
    proc = EnergyAttribution(AttributionConfig(module_detail=detail), context)  # type: ignore[arg-type]
    encoder = LineEncoder()
    size = 0
    series: set[tuple[str, ...]] = set()

    def emit(p: Point) -> None:
        nonlocal size
        p = Point(p.measurement, {**p.tags, "host": TAGS["host"]}, p.fields, p.time_ns)
        size += len(encoder.encode(p))
        series.add(tuple(sorted(p.tags.items())))

    t_sample = 0
    step = 0
    for epoch in range(EPOCHS):
        for _ in range(STEPS_PER_EPOCH):
            start, end = step * step_ms, (step + 1) * step_ms
            while t_sample <= end + 100:
                for domain, watts in (("package", 65.0), ("dram", 7.0)):
                    fields = {"energy_joules": watts * t_sample / 1000, "power_watts": watts}
                    tags = {"socket": "0", "domain": domain}
                    proc.process(Point("rapl", tags, fields, T0 + t_sample * MS), emit)
                t_sample += 100
            run_tags = {**TAGS, "epoch": str(epoch)}
            for name in MODULES:
                for phase in ("forward", "backward"):
                    fields = {"step": step, "calls": 1, "exclusive_seconds": step_ms / 1000 / 500}
                    tags = {**run_tags, "module": name, "phase": phase}
                    proc.process(Point("nrg_module", tags, fields, T0 + end * MS), emit)
            fields = {"step": step, "start_time_ns": T0 + start * MS, "end_time_ns": T0 + end * MS}
            proc.process(Point("nrg_step", run_tags, fields, T0 + end * MS), emit)
            step += 1
    proc.process(Point("nrg_run", TAGS, {"event": "end"}, T0 + (step * step_ms + 200) * MS), emit)
    proc.flush(emit)
    return step, size, series


def main() -> None:
    print(f"nrg_energy volume: {len(MODULES)} modules x 2 phases, RAPL package + dram, 1 socket")
    print(
        f"{'module_detail':>14} {'bytes/step':>11} {'MB/h @1 step/s':>15} {'MB/h @10 steps/s':>17}"
    )
    counts = {}
    for detail in ("step", "epoch", "off"):
        steps, size, series = run(detail, 100)
        counts[detail] = len(series)
        per_step = size / steps
        print(
            f"{detail:>14} {per_step:11.0f} {per_step * 3600 / 1e6:15.2f}"
            f" {per_step * 36000 / 1e6:17.2f}"
        )
    for detail, n in counts.items():
        print(
            f"series, module_detail={detail}: {n} in {EPOCHS} epochs ({n / EPOCHS:.0f} per epoch)"
        )


if __name__ == "__main__":
    main()
