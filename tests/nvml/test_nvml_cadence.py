"""The NVML collector's cadences at a 100 ms tick: the energy counter (a call of milliseconds) and
the detail reads (clocks, power limit, processes, utilisation samples) once a second, the cheap
readings and the driver's power samples every tick; totals still those of the counter. Calls are counted, never
timed."""

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
    context: PluginContext, tmp_path: Path, scenario: dict[str, Any], **config: Any
) -> tuple[FakeNvml, dict[int, list[Point]], dict[int, Counter[str]]]:
    """Open at step 0, tick steps 1..STEPS-1 every 100 ms: the points and the calls of each tick."""
    fake = FakeNvml(scenario)
    collector = NvmlCollector(
        NvmlConfig(root=str(tmp_path), **config), context, nvml=fake, environ={}
    )
    await collector.open()
    points: dict[int, list[Point]] = {}
    calls: dict[int, Counter[str]] = {}
    try:
        for step in range(1, STEPS):
            fake.step = step
            before = Counter(fake.calls)
            points[step] = []
            await collector.collect(points[step].append, T0_NS + step * TICK_NS)
            calls[step] = fake.calls - before
    finally:
        await collector.aclose()
    return fake, points, calls


CHEAP = Counter(
    {
        "nvmlDeviceGetFieldValues": 1,  # fields 186 and 185 together
        "nvmlDeviceGetUtilizationRates": 1,
        "nvmlDeviceGetMemoryInfo_v2": 1,
        "nvmlDeviceGetTemperatureV": 1,
        "nvmlDeviceGetSamples": 1,
    }
)
DETAIL = Counter(
    {
        "nvmlDeviceGetClockInfo": 2,
        "nvmlDeviceGetEnforcedPowerLimit": 1,
        "nvmlDeviceGetSamples": 2,
        "nvmlDeviceGetComputeRunningProcesses_v3": 1,
        "nvmlDeviceGetProcessesUtilizationInfo": 1,
    }
)
ENERGY = Counter({"nvmlDeviceGetTotalEnergyConsumption": 1})
READ_STEPS = (1, 11, 21, 31)
"""Ticks at least 1 s after the last read, from the first tick on."""


async def test_per_tick_calls_at_100ms(context: PluginContext, tmp_path: Path) -> None:
    fake, _, calls = await run(context, tmp_path, h100())
    for step, made in calls.items():
        expected = CHEAP + DETAIL + ENERGY if step in READ_STEPS else CHEAP
        assert made == expected, step
    # open read the counter once (the base) and primed the three buffers
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1 + len(READ_STEPS)


async def test_every_tick_reads_everything_with_intervals_of_0(
    context: PluginContext, tmp_path: Path
) -> None:
    _, _, calls = await run(context, tmp_path, h100(), energy_interval=0.0, detail_interval=0.0)
    assert all(made == CHEAP + DETAIL + ENERGY for made in calls.values())


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
    fake, points, _ = await run(context, tmp_path, scenario)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # at open: never asked again
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
    for step in range(2, STEPS):
        order = [p.measurement for p in points[step]]
        samples = [i for i, m in enumerate(order) if m == "gpu_sample"]
        assert max(samples) < order.index("gpu")
        power = [p for p in only(points[step], "gpu_sample") if "power_watts" in p.fields]
        assert len(power) == 5  # 100 ms of the driver's 20 ms power samples
        # utilisation samples (a second of them) only with the detail reads
        utilisation = [
            p for p in only(points[step], "gpu_sample") if "utilization_ratio" in p.fields
        ]
        assert len(utilisation) == (50 if step in READ_STEPS else 0)


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
