"""The metrics table (acquisition/metrics.py) against what the plugins really emit.

Every collector and processor is driven with the fixtures its own tests use (captured RAPL
trees, the fake NVML scenarios, emonPi serial transcripts over a real pty, the real /proc, a real
instrumented CPU training run, fed bus points for the processors); any (measurement, tag) or
(measurement, field) they emit that the table lacks fails the test, naming it.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from acquisition.agent import Agent
from acquisition.api import PluginContext
from acquisition.config import parse_config
from acquisition.job import Job
from acquisition.lineproto import decode_line
from acquisition.metrics import METRICS, find_field, find_measurement
from acquisition.point import Point
from acquisition.processors.carbon import CarbonConfig, CarbonRecord
from acquisition.processors.forecast import ForecastConfig, RunForecast
from acquisition.processors.process_power import ProcessPowerConfig, ProcessPowerShare
from collectors.nvml.fake import FakeNvml
from collectors.procfs import ProcfsCollector, ProcfsConfig
from tests.attribution.test_processor import Harness, counter, module, run_event, step
from tests.attribution.test_sources import timeline
from tests.emonpi.conftest import Pty, fast_config, running, wait_until
from tests.forecast.test_processor import job as forecast_job
from tests.nvml.conftest import T0_NS, write_stat
from tests.nvml.scenarios import load_scenario
from tests.rapl.scenarios import MSR_SCENARIOS, POWERCAP_SCENARIOS, run_msr, run_powercap

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def missing(points: Iterable[Point]) -> set[str]:
    """What the table does not describe, as ``measurement`` / ``measurement tag=`` /
    ``measurement .field``."""
    out: set[str] = set()
    for p in points:
        m = find_measurement(p.measurement)
        if m is None:
            out.add(p.measurement)
            continue
        known_tags = {t.name for t in m.tags} | {"host"}
        out.update(f"{p.measurement} {k}=" for k in p.tags if k not in known_tags)
        if p.measurement == "nrg_collect":
            continue  # plugin counters are documented on each plugin's page
        out.update(
            f"{p.measurement} .{k}" for k in p.fields if find_field(p.measurement, k) is None
        )
    return out


def context(tmp: Path) -> PluginContext:
    return PluginContext(host="t", interval_s=1.0, state_dir=tmp, data_dir=tmp, runtime_dir=tmp)


async def rapl_points(tmp: Path) -> list[Point]:
    points: list[Point] = []
    for i, name in enumerate(POWERCAP_SCENARIOS):
        got, collector = await run_powercap(name, tmp / f"p{i}")
        await collector.aclose()
        points += got
    for i, name in enumerate(MSR_SCENARIOS):
        got, collector = await run_msr(name, tmp / f"m{i}")
        await collector.aclose()
        points += got
    return points


async def nvml_points(tmp: Path) -> list[Point]:
    from collectors.nvml import NvmlCollector, NvmlConfig

    points: list[Point] = []
    for name in ("mixed", "samples", "processes", "old_driver"):
        root = tmp / name
        root.mkdir()
        scenario = load_scenario(name)
        for pid in (4242, 4243):  # a tracked tree: the job and a child
            write_stat(root, pid, 4242 if pid == 4243 else 1, 1000 + pid)
        ctx = context(tmp)
        ctx.status["tracked_pids"] = {4242}
        fake = FakeNvml(scenario)
        collector = NvmlCollector(NvmlConfig(root=str(root)), ctx, nvml=fake, environ={})
        await collector.open()
        for n in (1, 2, 3):
            fake.step = n
            await collector.collect(points.append, T0_NS + n * 1_000_000_000)
        await collector.aclose()
    return points


async def emonpi_points() -> list[Point]:
    points: list[Point] = []
    for name in sorted(p.name for p in (FIXTURES / "emonpi").glob("*.txt")):
        data = (FIXTURES / "emonpi" / name).read_bytes()
        pty = Pty()
        try:
            baud = 115200 if "115200" in name else 38400
            async with running(fast_config(pty.path, baudrate=baud)) as r:
                lines = data.count(b"\n")
                await wait_until(lambda r=r: r.stat("connects") == 1)  # type: ignore[misc]
                await pty.write(data)
                await wait_until(lambda r=r, n=lines: r.lines_seen() >= n)  # type: ignore[misc]
                points += r.points
        finally:
            pty.close()
    return points


async def procfs_points(tmp: Path) -> list[Point]:
    collector = ProcfsCollector(ProcfsConfig(per_process=True, memory_detail=True), context(tmp))
    await collector.open()
    points: list[Point] = []
    for _ in range(2):
        await collector.collect(points.append, time.time_ns())
        sum(i * i for i in range(100_000))  # some CPU time between the ticks
    await collector.aclose()
    golden = [
        decode_line(line)
        for f in (FIXTURES / "procfs").glob("*/expected.lp")
        for line in f.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return points + golden


def training_points(tmp: Path) -> list[Point]:
    """A real instrumented CPU training run with no agent: its fallback file holds every point."""
    torch = pytest.importorskip("torch")
    from acquisition.torch import instrument

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    with (
        tempfile.TemporaryDirectory(prefix="nrg-m-") as d,
        instrument(
            model,
            example_inputs=(x,),
            experiment="e",
            run="metrics",
            socket_path=Path(d) / "nobody.sock",
            fallback_dir=tmp / "fallback",
            graph_dir=tmp / "graphs",
            epochs=2,
            steps_per_epoch=2,
        ) as session,
    ):
        for epoch in range(2):
            session.epoch(epoch)
            for _ in range(2):
                model(x).sum().backward()
                session.step()
    return [
        decode_line(line)
        for f in (tmp / "fallback").glob("*.lp")
        for line in f.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def processor_points() -> list[Point]:
    out: list[Point] = []
    for detail in ("step", "epoch"):
        h = Harness(module_detail=detail)
        h.feed(timeline(5000, 10_000))
        h.feed([*counter("package", 10.0, 10_000, 12_000), module(99, "m", "forward", 0.1, 11_000)])
        h.feed([step(99, 10_500, 11_000), run_event("end", 12_000)])
        out += h.out
    share = ProcessPowerShare(ProcessPowerConfig(scopes=["combined", "pid"]), context(Path("/")))
    for t in (0, 1):
        for domain in ("package", "dram"):
            p = Point("rapl", {"socket": "0", "domain": domain}, {"power_watts": 10.0}, t)
            share.process(p, out.append)
        fields = {"cpu_busy_share_ratio": 0.5, "memory_used_share_ratio": 0.25}
        for tags in ({"tree": "1", "scope": "combined"}, {"tree": "1", "scope": "pid", "pid": "2"}):
            share.process(Point("process", tags, fields, t * 1_000_000_000), out.append)
    out += forecast_points()
    return out


def forecast_points() -> list[Point]:
    """The forecast and carbon processors on a job of three epochs at a known power."""
    points, _ = forecast_job([[0.2] * 3] * 3)
    ctx = context(Path("/"))
    carbon = CarbonRecord(CarbonConfig(), ctx)
    forecast = RunForecast(ForecastConfig(epochs=3), ctx)
    out: list[Point] = []
    for p in points:
        carbon.process(p, out.append)
        forecast.process(p, out.append)
    return out


def agent_points() -> list[Point]:
    agent = Agent(parse_config(""))
    agent.config.processors = parse_config(
        "[[processors.attribution]]\n[[processors.process_power]]"
    ).processors
    agent.open_processors()
    return agent.self_stats()


async def job_points() -> list[Point]:
    """A tracked command's ``nrg_job`` spawn and exit, from a real job."""
    out: list[Point] = []
    job = Job(["sh", "-c", "exit 4"])
    await job.start(dict(os.environ))
    await job.wait(out.append)
    return out


def test_every_emitted_measurement_tag_and_field_is_in_the_table(tmp_path: Path) -> None:
    async def collected() -> list[Point]:
        return (
            await rapl_points(tmp_path / "rapl")
            + await nvml_points(tmp_path)
            + await emonpi_points()
            + await procfs_points(tmp_path)
            + await job_points()
        )

    points = asyncio.run(collected())
    points += training_points(tmp_path) + processor_points() + agent_points()
    assert missing(points) == set()
    # The drivers reach every measurement of the table, so the check above covers all of them.
    assert {p.measurement for p in points} == {m.name for m in METRICS}


def test_the_check_names_what_is_missing() -> None:
    points = [
        Point("rapl", {"socket": "0", "domain": "package"}, {"energy_joules": 1.0}, 1),
        Point("rapl", {"socket": "0", "zone": "x"}, {"power_watts": 1.0, "volts": 1.0}, 1),
        Point("emonpi", {"node": "5"}, {"power12_watts": 1.0, "powerX_watts": 1.0}, 1),
        Point("nrg_new", {}, {"x": 1}, 1),
    ]
    assert missing(points) == {"rapl zone=", "rapl .volts", "emonpi .powerX_watts", "nrg_new"}
