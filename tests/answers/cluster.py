"""A synthetic distributed run of known power: ranks on several hosts, one rank slowed on purpose.

Each host draws ``package_w`` (RAPL package counter) and has ``gpus`` GPUs of ``gpu_w`` each
(``gpu`` points with ``energy_joules`` counters and ``uuid`` tags); rank ``local`` of a host uses
GPU ``local`` (named by its UUID in the rank's ``nrg_run`` start, spelt as torch spells it), the
GPUs beyond the ranks stay unused. Every global step lasts ``period_s``: the slow rank ends its
steps ``period_s`` apart, the others ``delay_s`` earlier, and start their next step at once (as
DDP ranks do, waiting in the next all-reduce). Each host's points go through its own
:class:`~acquisition.processors.attribution.EnergyAttribution`, as with one agent per host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acquisition.api import PluginContext
from acquisition.config import build_dataclass
from acquisition.point import Point
from acquisition.processors.attribution import AttributionConfig, EnergyAttribution
from tests.answers.runs import NS, T0

__all__ = ["ClusterRun"]


@dataclass
class ClusterRun:
    hosts: tuple[str, ...] = ("h1", "h2")
    ranks_per_host: int = 2
    gpus: int = 3
    package_w: float = 40.0
    gpu_w: float = 100.0
    period_s: float = 0.2
    delay_s: float = 0.05
    slow_rank: int | None = 3
    epochs: int = 2
    steps: int = 5
    samples: int = 16
    tick_s: float = 0.05
    startup_s: float = 1.0
    tail_s: float = 0.5
    run: str = "ddp"
    spawn: bool = True
    module_s: float = 0.0
    """A module's exclusive time in each step of each rank (0: no module points)."""
    module_gpu_s: float | None = None
    """Its time on the rank's GPU in each step."""
    extra: list[Point] = field(default_factory=list)

    @property
    def world(self) -> int:
        return len(self.hosts) * self.ranks_per_host

    @property
    def job_start(self) -> int:
        return T0 + round(self.startup_s * NS)

    @property
    def job_end(self) -> int:
        return self.job_start + round(self.epochs * self.steps * self.period_s * NS)

    def uuid(self, host: str, gpu: int) -> str:
        return f"{self.hosts.index(host):08x}-0000-4000-8000-{gpu:012x}"

    def ends(self, rank: int) -> list[int]:
        """The rank's step ends."""
        lag = 0 if rank == self.slow_rank or self.slow_rank is None else self.delay_s
        period = round(self.period_s * NS)
        return [self.job_start + (n + 1) * period - round(lag * NS) for n in range(self.n_steps)]

    @property
    def n_steps(self) -> int:
        return self.epochs * self.steps

    def host_points(self, host: str) -> list[Point]:
        tags = {"host": host, "run": self.run, "experiment": "e"}
        out: list[Point] = []
        tick = round(self.tick_s * NS)
        t = T0
        while t <= self.job_end + round(self.tail_s * NS):
            s = (t - T0) / NS
            out.append(
                Point(
                    "rapl",
                    {**tags, "socket": "0", "domain": "package"},
                    {"energy_joules": self.package_w * s},
                    t,
                )
            )
            for g in range(self.gpus):
                gpu_tags = {**tags, "gpu": str(g), "uuid": "GPU-" + self.uuid(host, g).upper()}
                out.append(Point("gpu", gpu_tags, {"energy_joules": self.gpu_w * s}, t))
            t += tick
        if self.spawn:
            out.append(Point("nrg_job", tags, {"event": "spawn", "pid": 1}, T0 + tick // 2))
            out.append(Point("nrg_job", tags, {"event": "exit", "exit_code": 0}, t - tick))
        first = self.hosts.index(host) * self.ranks_per_host
        for local in range(self.ranks_per_host):
            out += self.rank_points(host, first + local, local)
        return out

    def rank_points(self, host: str, rank: int, local: int) -> list[Point]:
        tags = {"host": host, "run": self.run, "experiment": "e", "rank": str(rank)}
        start_fields = {"event": "start", "pid": 100 + rank, "gpu_uuid": self.uuid(host, local)}
        out = [Point("nrg_run", tags, dict(start_fields), self.job_start)]
        start = self.job_start
        for n, end in enumerate(self.ends(rank)):
            fields = {  # in the order the training library writes them
                "step": n,
                "samples": self.samples,
                "start_time_ns": start,
                "end_time_ns": end,
                "duration_seconds": (end - start) / NS,
            }
            epoch = {**tags, "epoch": str(n // self.steps)}
            out.append(Point("nrg_step", epoch, fields, end))
            if self.module_s:
                module = {**epoch, "module": "layer", "phase": "forward"}
                exclusive = {"step": n, "exclusive_seconds": self.module_s}
                if self.module_gpu_s is not None:
                    exclusive["gpu_seconds"] = self.module_gpu_s
                out.append(Point("nrg_module", module, exclusive, end))
            start = end
        out.append(Point("nrg_run", tags, {"event": "end", "pid": 100 + rank}, self.job_end))
        return out

    def points(self) -> list[Point]:
        """Every point of every host, each host's attribution output included."""
        out: list[Point] = []
        for host in self.hosts:
            raw = sorted(self.host_points(host), key=lambda p: p.time_ns)
            ctx = PluginContext(host, self.tick_s, *(3 * [None]))  # type: ignore[arg-type]
            config = build_dataclass(AttributionConfig, {}, "processors.attribution")
            proc = EnergyAttribution(config, ctx)

            def emit(p: Point, host: str = host) -> None:
                out.append(p.with_tags({"host": host}))

            for p in raw:
                out.append(p)
                proc.process(p, emit)
            proc.flush(emit)
        return out + self.extra
