"""The NVML collector at a 100 ms tick feeding the real attribution: steps on the GPU's timeline get
the energy of their GPU interval, from the counter read once a second shaped by the power samples
read every tick, as computed by hand from the power profile the fake driver follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import FakeNvml
from tests.attribution.test_processor import RUN, Harness
from tests.nvml.conftest import T0_NS

MS = 1_000_000
TICKS = 30  # 3 s of 100 ms ticks
LOW_MW, HIGH_MW = 300_000, 600_000
RAMP_MS = (1940, 1960)
"""In the last 100 ms before the counter reading at 2 s: only samples up to that reading shape it."""
QUEUE_MS = 30


def watts(t_ms: float) -> float:
    a, b = RAMP_MS
    if t_ms <= a:
        return LOW_MW / 1000
    if t_ms >= b:
        return HIGH_MW / 1000
    return (LOW_MW + (HIGH_MW - LOW_MW) * (t_ms - a) / (b - a)) / 1000


def joules(t_ms: float) -> float:
    """∫ watts from 0 to t (J): the constant parts and the ramp's trapezoid."""
    a, b = RAMP_MS
    low, high = LOW_MW / 1000, HIGH_MW / 1000
    if t_ms <= a:
        return low * t_ms / 1000
    if t_ms <= b:
        return low * a / 1000 + (low + watts(t_ms)) / 2 * (t_ms - a) / 1000
    return low * a / 1000 + (low + high) / 2 * (b - a) / 1000 + high * (t_ms - b) / 1000


def scenario() -> dict[str, Any]:
    base_mj = 5_000_000
    samples = [
        [-(-j // 5), T0_NS // 1000 + j * 20_000, round(watts(j * 20) * 1000)]
        for j in range(TICKS * 5 + 1)
    ]  # a sample at j × 20 ms is in the buffer from the first tick at or after it
    gpu = {
        "uuid": "GPU-11111111-2222-4333-8444-555555555555",
        "name": "NVIDIA H100 80GB HBM3",
        "architecture": 9,
        "memory_total": 85_520_809_984,
        "power_limit_mw": 700_000,
        "power_instant_mw": [round(watts(k * 100) * 1000) for k in range(TICKS + 1)],
        "power_usage_mw": 400_000,
        "energy_mj": [base_mj + round(joules(k * 100) * 1000) for k in range(TICKS + 1)],
        "utilization_gpu": 90,
        "utilization_memory": 40,
        "memory_used": 40_000_000_000,
        "temperature_c": 60,
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 2619,
        "samples_power": samples,
        "not_supported": ["samples:1", "samples:2"],
    }
    return {"gpu": [gpu]}


async def bus(context: PluginContext, tmp_path: Path) -> list[tuple[int, Point]]:
    """(bus time ns, point) of every collector point: a tick's points arrive at the tick."""
    fake = FakeNvml(scenario())
    config = NvmlConfig(root=str(tmp_path), processes=False)
    collector = NvmlCollector(config, context, nvml=fake, environ={})
    await collector.open()
    out: list[tuple[int, Point]] = []
    try:
        for k in range(TICKS + 1):
            fake.step = k
            now = T0_NS + k * 100 * MS
            await collector.collect(lambda p, now=now: out.append((now, p)), now)
    finally:
        await collector.aclose()
    return out


async def test_gpu_steps_from_the_collector_get_their_gpu_intervals_energy(
    context: PluginContext, tmp_path: Path
) -> None:
    ticks = await bus(context, tmp_path)
    assert sum(1 for _, p in ticks if "energy_joules" in p.fields) == 4  # at 0, 1, 2 and 3 s
    steps = [(400 + 37 * n, 400 + 37 * (n + 1)) for n in range(50)]  # CPU ms, to 2.25 s
    events = [(t, 0, i, p) for i, (t, p) in enumerate(ticks)]
    for n, (start, end) in enumerate(steps):
        fields = {
            "step": n,
            "start_time_ns": T0_NS + start * MS,
            "end_time_ns": T0_NS + end * MS,
            "gpu_start_time_ns": T0_NS + (start + QUEUE_MS) * MS,
            "gpu_end_time_ns": T0_NS + (end + QUEUE_MS) * MS,
        }
        step = Point("nrg_step", {**RUN, "epoch": "0"}, fields, T0_NS + end * MS)
        events.append((T0_NS + end * MS, 1, n, step))
    events.sort(key=lambda e: e[:3])
    h = Harness(module_detail="off")
    h.feed(p for *_, p in events)
    h.feed([Point("nrg_run", RUN, {"event": "end", "pid": 1}, T0_NS + TICKS * 100 * MS)])
    got = {p.fields["step"]: p.fields for p in h.out if p.tags["scope"] == "step"}
    assert sorted(got) == list(range(len(steps)))
    for n, (start, end) in enumerate(steps):
        expected = joules(end + QUEUE_MS) - joules(start + QUEUE_MS)
        assert got[n]["energy_joules"] == pytest.approx(expected, rel=1e-9), n
        assert abs(got[n]["energy_joules"] - expected) <= got[n]["error_joules"]  # type: ignore[operator]
