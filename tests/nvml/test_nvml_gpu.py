"""The NVML collector against the real NVML, on a machine with an NVIDIA GPU (marked ``gpu``).

Skipped where ``nvmlInit`` fails (no driver, no GPU). With ``NRG_GPU_NOTE=FILE`` the minute-long
test writes what it saw (energy counter vs integrated instant power and vs the driver's power
samples, sample rate, UUID mapping) as JSON to FILE, to keep with a report of the run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def real_nvml() -> Iterator[None]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA GPU here: nvmlInit failed with {exc} (error {exc.value})")
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            pytest.skip("NVML loads but sees no GPU")
        yield
    finally:
        pynvml.nvmlShutdown()


async def test_real_nvml_one_tick(real_nvml: None, context: PluginContext) -> None:
    collector = NvmlCollector(NvmlConfig(), context)
    await collector.open()
    try:
        points: list[Point] = []
        await collector.collect(points.append, time.time_ns())
    finally:
        await collector.aclose()
    gpus = [p for p in points if p.measurement == "gpu"]
    assert len(gpus) == pynvml.nvmlDeviceGetCount()
    for point in gpus:
        assert point.tags["uuid"].startswith("GPU-")
        assert point.fields["memory_total_bytes"] > 0  # type: ignore[operator]
        assert 0 < point.fields["power_watts"] < 2000  # type: ignore[operator]


def _trapezoid(series: list[tuple[int, float]]) -> float:
    return sum(
        (t1 - t0) * 1e-9 * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(series)
    )


def _workload(stop: threading.Event, uuid_out: dict[str, Any]) -> None:
    import torch

    if not torch.cuda.is_available():
        return
    uuid_out["torch_uuid"] = str(torch.cuda.get_device_properties(0).uuid)
    a = torch.randn(4096, 4096, device="cuda:0")
    b = torch.randn(4096, 4096, device="cuda:0")
    while not stop.is_set():
        for _ in range(20):
            a = (a @ b).tanh_()
        torch.cuda.synchronize()


@pytest.mark.slow
async def test_energy_counter_against_integrated_power(
    real_nvml: None, context: PluginContext
) -> None:
    seconds = int(os.environ.get("NRG_GPU_SECONDS", "60"))
    collector = NvmlCollector(NvmlConfig(gpus="0"), context)
    await collector.open()
    stop = threading.Event()
    seen: dict[str, Any] = {}
    worker = threading.Thread(target=_workload, args=(stop, seen), daemon=True)
    worker.start()
    points: list[Point] = []
    try:
        start = time.monotonic()
        for i in range(seconds + 1):
            await asyncio.sleep(max(0.0, start + i - time.monotonic()))
            await collector.collect(points.append, time.time_ns())
    finally:
        stop.set()
        await asyncio.to_thread(worker.join, 30)
        await collector.aclose()
    gpu = [p for p in points if p.measurement == "gpu"]
    samples = [p for p in points if p.measurement == "gpu_sample" and "power_watts" in p.fields]
    instant = [(p.time_ns, float(p.fields["power_watts"])) for p in gpu]
    sampled = [(p.time_ns, float(p.fields["power_watts"])) for p in samples]
    counter = float(gpu[-1].fields["energy_joules"]) - float(gpu[0].fields["energy_joules"])
    window = (gpu[-1].time_ns - gpu[0].time_ns) * 1e-9
    in_window = [s for s in sampled if gpu[0].time_ns <= s[0] <= gpu[-1].time_ns]
    note = {
        "name": gpu[0].tags["name"],
        "uuid": gpu[0].tags["uuid"],
        "torch_uuid": seen.get("torch_uuid"),
        "seconds": window,
        "energy_counter_joules": counter,
        "integrated_instant_power_joules": _trapezoid(instant),
        "integrated_power_samples_joules": _trapezoid(in_window),
        "power_samples_per_second": len(in_window) / window,
        "mean_power_watts": counter / window,
        "stats": collector.stats(),
    }
    if "NRG_GPU_NOTE" in os.environ:
        Path(os.environ["NRG_GPU_NOTE"]).write_text(json.dumps(note, indent=2))
    # 1 Hz snapshots of instant power against the counter: agree to within 10 % over a minute
    # of steady load (the counter is the reference; see the NVML section of README.md).
    assert note["integrated_instant_power_joules"] == pytest.approx(counter, rel=0.10)
