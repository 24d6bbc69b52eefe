"""CUDA kernels' energy from NVML power samples: the real NVML collector over the fake ``pynvml``
(this machine has no GPU), a Chrome trace with kernel events on that GPU, and the energy split of
overlapping kernels checked against the samples' power integrated by hand."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from acquisition.profiler.series import SeriesBuilder, build_series, gpu_names_by_uuid
from acquisition.profiler.trace import ENERGY_ARG, SELF_ENERGY_ARG, add_energy
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import FakeNvml
from tests.nvml.scenarios import load_scenario

T_US = 1_790_000_000_000_000
"""Driver timestamp (Unix-epoch µs) of the first power sample."""
BASE_NS = T_US * 1000 - 5_000_000


def scenario() -> dict[str, Any]:
    """One A100 whose buffer holds, from step 1, power samples every 10 ms over 200 ms: 100 W
    up to 90 ms, 300 W from 100 ms."""
    spec = copy.deepcopy(load_scenario("samples"))
    gpu = spec["gpu"][0]
    gpu.pop("reload_at_step")
    gpu["samples_power"] = [
        [1, T_US + k * 10_000, 100_000 if k < 10 else 300_000] for k in range(21)
    ]
    return spec


async def sampled_points(tmp_path: Any) -> list[Point]:
    context = PluginContext("test", 0.01, tmp_path, tmp_path, tmp_path)
    collector = NvmlCollector(
        NvmlConfig(root=str(tmp_path), processes=False), context, nvml=FakeNvml(scenario())
    )
    await collector.open()
    points: list[Point] = []
    try:
        for step in (0, 1):
            collector._nvml.step = step
            if step == 1:  # the last reading at stop reads the sample buffers, whatever is due
                collector.read_all_next()
            await collector.collect(points.append, T_US * 1000 + step * 300_000_000)
    finally:
        await collector.aclose()
    return points


def ts(ms: float) -> float:
    """Trace ``ts`` (µs from baseTimeNanoseconds) of ``ms`` after the first sample."""
    return (T_US * 1000 - BASE_NS) / 1000 + ms * 1000


def kernel(name: str, start_ms: float, end_ms: float, stream: int = 7) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts(start_ms),
        "dur": (end_ms - start_ms) * 1000,
        "args": {"device": 0, "stream": stream},
    }


def trace() -> dict[str, Any]:
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": ts(0), "dur": 200_000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,
         "ts": ts(15), "dur": 30},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242,
         "tid": 4242, "ts": ts(15.001), "dur": 5},
        kernel("gemm_a", 20, 60),
        kernel("gemm_b", 40, 80, stream=13),
        kernel("relu", 120, 150),
    ]  # fmt: skip
    return {"baseTimeNanoseconds": BASE_NS, "traceEvents": events}


async def test_kernel_energy_from_nvml_samples(tmp_path: Any) -> None:
    points = await sampled_points(tmp_path)
    samples = [p for p in points if p.measurement == "gpu_sample" and "power_watts" in p.fields]
    assert len(samples) == 21
    series = build_series(points)
    assert series["nvml:0"].energy(T_US * 1000, T_US * 1000 + 200_000_000)[0] == pytest.approx(  # type: ignore[index]
        100 * 0.09 + (100 + 300) / 2 * 0.01 + 300 * 0.1
    )
    tr = trace()
    result = add_energy(tr, series)
    by_name = {e["name"]: e for e in tr["traceEvents"] if e.get("ph") == "X"}
    # gemm_a and gemm_b overlap over [40, 60] ms at 100 W: each gets half of those 2 J
    assert by_name["gemm_a"]["args"][ENERGY_ARG] == pytest.approx(100 * 0.02 + 100 * 0.02 / 2)
    assert by_name["gemm_b"]["args"][ENERGY_ARG] == pytest.approx(100 * 0.02 / 2 + 100 * 0.02)
    assert by_name["relu"]["args"][ENERGY_ARG] == pytest.approx(300 * 0.03)
    assert by_name["relu"]["args"][SELF_ENERGY_ARG] == by_name["relu"]["args"][ENERGY_ARG]
    # no RAPL here: the CPU operator gets no energy, and is counted; runtime calls are skipped
    assert "args" not in by_name["aten::mm"]
    assert "args" not in by_name["cudaLaunchKernel"]
    assert result.unmeasured == 1
    (gpu,) = tr["nrg"]["tracks"]
    assert gpu["kind"] == "gpu" and gpu["sources"] == ["nvml:0"]
    assert gpu["window_energy_j"] == pytest.approx(41.0)
    assert gpu["events_self_energy_j"] == pytest.approx(3.0 + 3.0 + 9.0)
    assert gpu["outside_energy_j"] == pytest.approx(41.0 - 15.0)
    power = [e for e in tr["traceEvents"] if e.get("name") == "nrg power nvml:0"]
    assert [e["args"]["W"] for e in power][:9] == pytest.approx([100.0] * 9)
    assert power[-1]["args"]["W"] == pytest.approx(300.0)


async def test_cuda_ordinals_map_to_nvml_gpus_by_uuid(tmp_path: Any) -> None:
    """With CUDA_VISIBLE_DEVICES, CUDA device 1 may be NVML GPU 0: matched by UUID (CUDA gives
    it without NVML's ``GPU-`` prefix)."""
    points = await sampled_points(tmp_path)
    uuids = SeriesBuilder().add(points).uuids
    assert uuids == {"a100a100-0000-4000-8000-000000000001": "nvml:0"}
    names = gpu_names_by_uuid(uuids, {1: "A100A100-0000-4000-8000-000000000001", 2: "other"})
    assert names == {1: "nvml:0"}
    tr = trace()
    for event in tr["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"]["device"] = 1
    add_energy(tr, build_series(points), names)
    relu = next(e for e in tr["traceEvents"] if e.get("name") == "relu")
    assert relu["args"][ENERGY_ARG] == pytest.approx(300 * 0.03)
    unmapped = trace()
    for event in unmapped["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"]["device"] = 1
    result = add_energy(unmapped, build_series(points))
    assert result.unmeasured == 4  # no nvml:1 source, and no RAPL for the CPU operator
