"""Synthetic runs with a known power profile, attributed by the real attribution processor.

Sources draw constant powers (RAPL package and dram counters every ``tick_s``, with a
``power_watts`` reading; optionally a wall meter's ``power1_watts``); the job starts ``startup_s``
after the first sample, runs ``epochs`` × ``steps`` steps of ``step_s`` back to back with
``eval_s`` between epochs (energy outside steps), each step with two modules of known exclusive
time, and ends ``tail_s`` before the last sample. Every point goes through
:class:`~acquisition.processors.attribution.EnergyAttribution` in time order, as on the bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acquisition.api import PluginContext
from acquisition.config import build_dataclass
from acquisition.point import Point
from acquisition.processors.attribution import AttributionConfig, EnergyAttribution

__all__ = ["T0", "KnownRun"]

T0 = 1_764_000_000_000_000_000
NS = 1_000_000_000


@dataclass
class KnownRun:
    run: str = "r1"
    experiment: str = "e1"
    host: str = "h1"
    rank: str | None = None
    package_w: float = 25.0
    dram_w: float = 5.0
    wall_w: float | None = None
    tick_s: float = 0.05
    startup_s: float = 1.0
    step_s: float = 0.2
    eval_s: float = 0.5
    tail_s: float = 0.5
    epochs: int = 3
    steps: int = 4
    samples: int | None = 32
    modules: dict[str, float] = field(default_factory=lambda: {"fc1": 0.1, "fc2": 0.05})
    t0: int = T0
    epoch_as_tag: bool = True

    # -- known answers --

    @property
    def inside_w(self) -> float:
        return self.package_w + self.dram_w

    @property
    def counted_w(self) -> float:
        return self.wall_w if self.wall_w is not None else self.inside_w

    @property
    def job_start(self) -> int:
        return self.t0 + round(self.startup_s * NS)

    def step_times(self) -> list[tuple[int, int, int, int]]:
        """(epoch, step, start_ns, end_ns) of every step."""
        out, t, n = [], self.job_start, 0
        for epoch in range(self.epochs):
            if epoch:
                t += round(self.eval_s * NS)
            for _ in range(self.steps):
                out.append((epoch, n, t, t + round(self.step_s * NS)))
                t += round(self.step_s * NS)
                n += 1
        return out

    @property
    def job_end(self) -> int:
        return self.step_times()[-1][3] + round(self.eval_s * NS)

    @property
    def last_sample(self) -> int:
        return self.job_end + round(self.tail_s * NS)

    @property
    def duration_s(self) -> float:
        return (self.job_end - self.job_start) / NS

    # -- points --

    def tags(self) -> dict[str, str]:
        tags = {"host": self.host, "run": self.run, "experiment": self.experiment}
        if self.rank is not None:
            tags["rank"] = self.rank
        return tags

    def source_points(self) -> list[Point]:
        out = []
        tick = round(self.tick_s * NS)
        t = self.t0
        while t <= self.last_sample + tick:
            seconds = (t - self.t0) / NS
            for domain, watts in (("package", self.package_w), ("dram", self.dram_w)):
                out.append(
                    Point(
                        "rapl",
                        {**self.tags(), "socket": "0", "domain": domain},
                        {"energy_joules": watts * seconds, "power_watts": watts},
                        t,
                    )
                )
            if self.wall_w is not None:
                out.append(
                    Point("emonpi", {**self.tags(), "node": "5"}, {"power1_watts": self.wall_w}, t)
                )
            t += tick
        return out

    def job_points(self) -> list[Point]:
        tags = self.tags()
        out = [Point("nrg_run", tags, {"event": "start", "pid": 4242}, self.job_start)]
        for epoch, step, start, end in self.step_times():
            fields: dict[str, float | int | bool | str] = {
                "step": step,
                "start_time_ns": start,
                "end_time_ns": end,
                "duration_seconds": (end - start) / NS,
            }
            step_tags = dict(tags)
            if self.epoch_as_tag:
                step_tags["epoch"] = str(epoch)
            else:
                fields["epoch"] = epoch
            if self.samples is not None:
                fields["samples"] = self.samples
            out.append(Point("nrg_step", step_tags, fields, end))
            for module, seconds in self.modules.items():
                out.append(
                    Point(
                        "nrg_module",
                        {**step_tags, "module": module, "phase": "forward"},
                        {
                            "step": step,
                            "epoch": epoch,
                            "calls": 1,
                            "inclusive_seconds": seconds,
                            "exclusive_seconds": seconds,
                        },
                        end,
                    )
                )
        out.append(Point("nrg_run", tags, {"event": "end", "pid": 4242}, self.job_end))
        return out

    def points(self) -> list[Point]:
        """Every point a run leaves in storage, the attribution's nrg_energy included."""
        raw = sorted(self.source_points() + self.job_points(), key=lambda p: p.time_ns)
        ctx = PluginContext(self.host, self.tick_s, *(3 * [None]))  # type: ignore[arg-type]
        config = build_dataclass(AttributionConfig, {}, "processors.attribution")
        proc = EnergyAttribution(config, ctx)
        out: list[Point] = []

        def emit(p: Point) -> None:
            out.append(p.with_tags({"host": self.host}))

        for p in raw:
            out.append(p)
            proc.process(p, emit)
        proc.flush(emit)
        return out
