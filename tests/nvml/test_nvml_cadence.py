"""The NVML collector's cadences at a 100 ms tick: the energy counter (a call of milliseconds),
the detail reads (clocks, power limit, processes) and the driver's sample buffers once a second,
per-process utilisation every 5 s, the cheap readings every tick; totals still those of the
counter, and no buffered sample lost. Calls are counted, never timed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import FakeNvml
from collectors.nvml.state import Cadence
from tests.nvml.conftest import T0_NS, only

TICK_NS = 100_000_000
RELOAD_STEP = 15
STEPS = 36


def energy_mj(step: int) -> int:
    """400 W: 40 J per 100 ms step; the driver reloads at RELOAD_STEP and counts from 500 mJ."""
    if step < RELOAD_STEP:
        return 7_000_000 + 40_000 * step
    return 500 + 40_000 * (step - RELOAD_STEP)


def power_mw(step: int) -> int:
    return 300_000 + 10_000 * (step % 7)


def h100(**extra: Any) -> dict[str, Any]:
    gpu = {
        "uuid": "GPU-11111111-2222-4333-8444-555555555555",
        "name": "NVIDIA H100 80GB HBM3",
        "architecture": 9,
        "memory_total": 85_520_809_984,
        "memory_reserved": 567_279_616,
        "power_limit_mw": 700_000,
        "power_instant_mw": [power_mw(k) for k in range(STEPS + 1)],
        "power_usage_mw": 400_000,
        "energy_mj": [energy_mj(k) for k in range(STEPS + 1)],
        "utilization_gpu": 90,
        "utilization_memory": 40,
        "memory_used": 40_000_000_000,
        "temperature_c": 60,
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 2619,
        "sample_generator": {
            "period_us": 20_000,
            "step_us": 100_000,
            "start_us": T0_NS // 1000,
            "power_mw": 400_000,
            "gpu_util": 90,
            "memory_util": 40,
        },
        "process_generator": {
            "pids": [4242],
            "used": 2_000_000_000,
            "sm": 45,
            "mem": 20,
            "step_us": 100_000,
        },
        **extra,
    }
    return {"gpu": [gpu]}


async def run(
    context: PluginContext,
    tmp_path: Path,
    scenario: dict[str, Any],
    steps: int = STEPS,
    stats: dict[str, float | int] | None = None,
    **config: Any,
) -> tuple[FakeNvml, dict[int, list[Point]], dict[int, Counter[str]]]:
    """Open at step 0, tick steps 1..steps-1 every 100 ms: the points and the calls of each tick
    (and the collector's self-stats into ``stats``)."""
    fake = FakeNvml(scenario)
    collector = NvmlCollector(
        NvmlConfig(root=str(tmp_path), **config), context, nvml=fake, environ={}
    )
    await collector.open()
    points: dict[int, list[Point]] = {}
    calls: dict[int, Counter[str]] = {}
    try:
        for step in range(1, steps):
            fake.step = step
            before = Counter(fake.calls)
            points[step] = []
            await collector.collect(points[step].append, T0_NS + step * TICK_NS)
            calls[step] = fake.calls - before
    finally:
        await collector.aclose()
    if stats is not None:
        stats.update(collector.stats())
    return fake, points, calls


CHEAP = Counter(
    {
        "nvmlDeviceGetFieldValues": 1,  # fields 186 and 185 together
        "nvmlDeviceGetUtilizationRates": 1,
        "nvmlDeviceGetMemoryInfo_v2": 1,
        "nvmlDeviceGetTemperatureV": 1,
    }
)
DETAIL = Counter(
    {
        "nvmlDeviceGetClockInfo": 2,
        "nvmlDeviceGetEnforcedPowerLimit": 1,
        "nvmlDeviceGetSamples": 3,  # the power and both utilisation buffers
        "nvmlDeviceGetComputeRunningProcesses_v3": 1,
    }
)
PROCESS = Counter({"nvmlDeviceGetProcessesUtilizationInfo": 1})
ENERGY = Counter({"nvmlDeviceGetTotalEnergyConsumption": 1})
READ_STEPS = (1, 11, 21, 31)
"""Ticks at least 1 s after the last read, from the first tick on."""
PROCESS_STEPS = (1, 51)
"""Detail ticks at least 5 s after the last per-process utilisation read."""


async def test_per_tick_calls_at_100ms(context: PluginContext, tmp_path: Path) -> None:
    fake, points, calls = await run(context, tmp_path, h100(), steps=60)
    detail = (*READ_STEPS, 41, 51)
    for step, made in calls.items():
        expected = CHEAP + DETAIL + ENERGY if step in detail else CHEAP
        assert made == expected + (PROCESS if step in PROCESS_STEPS else Counter()), step
    # open read the counter once (the base) and primed the three buffers
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1 + len(detail)
    # each detail tick has the process's memory; its utilisation only every process_interval
    for step in detail:
        (process,) = only(points[step], "gpu_process", instance="0")
        assert process.fields["memory_used_bytes"] == 2_000_000_000
        assert ("sm_utilization_ratio" in process.fields) is (step in PROCESS_STEPS), step


async def test_every_tick_reads_everything_with_intervals_of_0(
    context: PluginContext, tmp_path: Path
) -> None:
    _, _, calls = await run(context, tmp_path, h100(), energy_interval=0.0, detail_interval=0.0,
                            process_interval=0.0)  # fmt: skip
    assert all(made == CHEAP + DETAIL + ENERGY + PROCESS for made in calls.values())


async def test_a_counter_read_more_often_brings_the_power_samples_up_to_it(
    context: PluginContext, tmp_path: Path
) -> None:
    _, points, calls = await run(context, tmp_path, h100(), energy_interval=0.0)
    for step, made in calls.items():
        assert made["nvmlDeviceGetSamples"] == (3 if step in READ_STEPS else 1), step
        power = [p.time_ns for p in only(points[step], "gpu_sample") if "power_watts" in p.fields]
        assert max(power) == T0_NS + step * TICK_NS  # the driver's newest sample, this tick's


async def test_energy_totals_are_the_counters_across_a_driver_reload(
    context: PluginContext, tmp_path: Path
) -> None:
    _, points, _ = await run(context, tmp_path, h100())
    got = {
        step: p.fields["energy_joules"]
        for step, tick in points.items()
        for p in only(tick, "gpu")
        if "energy_joules" in p.fields
    }
    assert sorted(got) == list(READ_STEPS)
    # Opened at step 0; read at 1 and 11; the driver reloaded at 15, so the read at 21 found
    # the counter restarted: what it counted before (to the read at 11) is carried over. The
    # energy between the read at 11 and the reload is not seen by any read.
    before = energy_mj(11) - energy_mj(0)
    assert got[1] == (energy_mj(1) - energy_mj(0)) / 1000
    assert got[11] == before / 1000
    assert got[21] == (before + energy_mj(21)) / 1000
    assert got[31] == (before + energy_mj(31)) / 1000


async def test_without_the_counter_power_is_integrated_every_tick(
    context: PluginContext, tmp_path: Path
) -> None:
    scenario = h100(not_supported=["nvmlDeviceGetTotalEnergyConsumption"])
    fake, points, calls = await run(context, tmp_path, scenario)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # at open: never asked again
    # the power samples are this GPU's energy: read on every tick, not once a second
    assert all(made["nvmlDeviceGetSamples"] >= 1 for made in calls.values())
    joules = 0.0
    for step in range(2, STEPS):
        (gpu,) = only(points[step], "gpu")
        assert "energy_joules" not in gpu.fields
        joules += (power_mw(step - 1) + power_mw(step)) / 2 / 1000 * 0.1
        assert gpu.fields["energy_integrated_joules"] == pytest.approx(joules, rel=1e-12)


async def test_samples_come_before_the_counter_of_their_tick(
    context: PluginContext, tmp_path: Path
) -> None:
    _, points, _ = await run(context, tmp_path, h100())
    for step in range(1, STEPS):
        if step not in READ_STEPS:
            assert not only(points[step], "gpu_sample")
            continue
        order = [p.measurement for p in points[step]]
        samples = [i for i, m in enumerate(order) if m == "gpu_sample"]
        assert max(samples) < order.index("gpu")
        new = 5 if step == 1 else 50  # the driver's 20 ms samples since the last read
        for field in ("power_watts", "utilization_ratio", "memory_utilization_ratio"):
            got = [p.time_ns for p in only(points[step], "gpu_sample") if field in p.fields]
            assert len(got) == new
            assert max(got) == T0_NS + step * TICK_NS  # up to the counter reading


def _power_sample_times(points: dict[int, list[Point]]) -> list[int]:
    return [
        p.time_ns
        for step in sorted(points)
        for p in only(points[step], "gpu_sample")
        if "power_watts" in p.fields
    ]


async def test_buffers_read_once_a_second_lose_no_sample(
    context: PluginContext, tmp_path: Path
) -> None:
    stats: dict[str, float | int] = {}
    # A buffer of 60 samples (1.2 s at 20 ms): a read a second suffices.
    scenario = h100(sample_generator={**h100()["gpu"][0]["sample_generator"], "depth": 60})
    _, points, _ = await run(context, tmp_path, scenario, stats=stats)
    last = T0_NS + READ_STEPS[-1] * TICK_NS
    assert _power_sample_times(points) == list(range(T0_NS + 20_000_000, last + 1, 20_000_000))
    assert stats["samples_lost"] == 0


async def test_a_buffer_that_overflows_is_counted_and_read_sooner(
    context: PluginContext, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stats: dict[str, float | int] = {}
    # 40 samples = 0.8 s at 20 ms: the read a second after step 1 finds the buffer full and
    # starting at 320 ms: the 10 samples of 120-300 ms are gone, in each of the three buffers.
    scenario = h100(sample_generator={**h100()["gpu"][0]["sample_generator"], "depth": 40})
    _, points, calls = await run(context, tmp_path, scenario, stats=stats)
    assert stats["samples_lost"] == 3 * 10
    assert sum("overflowed" in r.getMessage() for r in caplog.records) == 1
    # from then on every 0.5 s: nothing more is lost
    reads = [step for step, made in calls.items() if made["nvmlDeviceGetSamples"]]
    assert reads == [1, 11, 16, 21, 26, 31]
    lost = set(range(T0_NS + 120_000_000, T0_NS + 300_000_001, 20_000_000))
    every = range(T0_NS + 20_000_000, T0_NS + 31 * TICK_NS + 1, 20_000_000)
    assert _power_sample_times(points) == [t for t in every if t not in lost]


def test_a_cadence_allows_for_jitter_but_never_reads_twice_in_a_period() -> None:
    cadence = Cadence(1_000_000_000)
    ticks = [0, 100, 997, 1_100, 1_990, 2_000, 2_960, 3_000]  # ms
    due = [t for t in ticks if cadence.due(t * 1_000_000)]
    assert due == [0, 997, 1_990, 2_960]


class _FieldLog(FakeNvml):
    """Records the field ids of each ``nvmlDeviceGetFieldValues`` call."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        super().__init__(scenario)
        self.asked: list[list[int]] = []

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: Any) -> Any:
        self.asked.append(list(field_ids))
        return super().nvmlDeviceGetFieldValues(handle, field_ids)


@pytest.mark.parametrize(
    ("name", "architecture", "not_supported", "fields", "usage_calls", "average"),
    [
        ("NVIDIA H100 80GB HBM3", 9, [], [186, 185], 0, True),  # 185 is the 1 s average
        ("NVIDIA H100 80GB HBM3", 9, ["field:185"], [186], 3, True),  # refused once: the call
        ("NVIDIA A100-SXM4-40GB", 7, [], [186], 3, False),  # GA100: GetPowerUsage is instant
        ("NVIDIA H100 80GB HBM3", None, [], [186], 3, True),  # no architecture: as before
    ],
)
async def test_power_fields_are_read_in_one_call(
    context: PluginContext,
    tmp_path: Path,
    name: str,
    architecture: int | None,
    not_supported: list[str],
    fields: list[int],
    usage_calls: int,
    average: bool,
) -> None:
    scenario = h100(name=name, architecture=architecture, not_supported=not_supported)
    if architecture is None:
        del scenario["gpu"][0]["architecture"]
    fake = _FieldLog(scenario)
    collector = NvmlCollector(NvmlConfig(root=str(tmp_path), processes=False), context,
                              nvml=fake, environ={})  # fmt: skip
    await collector.open()
    points: list[Point] = []
    try:
        for step in (1, 2, 3):
            fake.step = step
            await collector.collect(points.append, T0_NS + step * TICK_NS)
    finally:
        await collector.aclose()
    assert fake.asked[-1] == fields
    assert fake.calls["nvmlDeviceGetPowerUsage"] == usage_calls
    for step, gpu in zip((1, 2, 3), only(points, "gpu"), strict=True):
        assert gpu.fields["power_watts"] == power_mw(step) / 1000  # field 186
        assert ("power_average_watts" in gpu.fields) is average
        if average:
            assert gpu.fields["power_average_watts"] == 400.0


async def test_the_last_reading_at_stop_reads_everything(
    context: PluginContext, tmp_path: Path
) -> None:
    """``read_all_next()`` (what the agent calls before its last tick at stop): that tick reads
    the counter, the detail, per-process utilisation and all three buffers, up to its time, and
    the ordinary cadence goes on from it."""
    fake = FakeNvml(h100())
    collector = NvmlCollector(NvmlConfig(root=str(tmp_path)), context, nvml=fake, environ={})
    await collector.open()
    made: list[Counter[str]] = []
    points: dict[int, list[Point]] = {}
    try:
        for step, last in ((1, False), (4, True), (5, False)):
            fake.step = step
            if last:
                collector.read_all_next()
            before = Counter(fake.calls)
            points[step] = []
            await collector.collect(points[step].append, T0_NS + step * TICK_NS)
            made.append(fake.calls - before)
    finally:
        await collector.aclose()
    assert made == [CHEAP + DETAIL + ENERGY + PROCESS, CHEAP + DETAIL + ENERGY + PROCESS, CHEAP]
    power = [p.time_ns for p in only(points[4], "gpu_sample") if "power_watts" in p.fields]
    assert max(power) == T0_NS + 4 * TICK_NS  # the driver's newest sample, the last tick's
    (gpu,) = only(points[4], "gpu")
    assert gpu.fields["energy_joules"] == pytest.approx((energy_mj(4) - energy_mj(0)) / 1000)
