"""Pure parts of the NVML collector, GPU selection, the worker thread, and this machine's NVML."""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import collectors.nvml.parse as nvml_module
from acquisition.api import PluginContext
from acquisition.errors import NoData
from collectors.nvml import (
    NvmlCollector,
    NvmlConfig,
    decode_samples,
    lost_samples,
    parse_proc_stat,
    parse_visible_devices,
    select_gpus,
    select_new_samples,
    value_of,
)
from collectors.nvml.fake import FakeNvml
from tests.nvml.conftest import MakeCollector, tick
from tests.nvml.scenarios import load_scenario

REPO = Path(__file__).resolve().parents[2]


def test_nvml_constants_match_the_binding() -> None:
    for ours, theirs in (
        ("NVML_SUCCESS", "NVML_SUCCESS"),
        ("ERROR_UNINITIALIZED", "NVML_ERROR_UNINITIALIZED"),
        ("ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_SUPPORTED"),
        ("ERROR_NO_PERMISSION", "NVML_ERROR_NO_PERMISSION"),
        ("ERROR_NOT_FOUND", "NVML_ERROR_NOT_FOUND"),
        ("ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_DRIVER_NOT_LOADED"),
        ("ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_LIBRARY_NOT_FOUND"),
        ("ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("ERROR_GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST"),
        ("ERROR_RESET_REQUIRED", "NVML_ERROR_RESET_REQUIRED"),
        ("ERROR_LIB_RM_VERSION_MISMATCH", "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
        ("ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"),
        ("ERROR_GPU_NOT_FOUND", "NVML_ERROR_GPU_NOT_FOUND"),
        ("FI_DEV_POWER_AVERAGE", "NVML_FI_DEV_POWER_AVERAGE"),
        ("FI_DEV_POWER_INSTANT", "NVML_FI_DEV_POWER_INSTANT"),
        ("TEMPERATURE_GPU", "NVML_TEMPERATURE_GPU"),
        ("CLOCK_SM", "NVML_CLOCK_SM"),
        ("CLOCK_MEM", "NVML_CLOCK_MEM"),
        ("SAMPLING_TOTAL_POWER", "NVML_TOTAL_POWER_SAMPLES"),
        ("SAMPLING_GPU_UTIL", "NVML_GPU_UTILIZATION_SAMPLES"),
        ("SAMPLING_MEMORY_UTIL", "NVML_MEMORY_UTILIZATION_SAMPLES"),
        ("ARCH_VOLTA", "NVML_DEVICE_ARCH_VOLTA"),
        ("ARCH_AMPERE", "NVML_DEVICE_ARCH_AMPERE"),
        ("MEMORY_V2", "nvmlMemory_v2"),
    ):
        assert getattr(nvml_module, ours) == getattr(pynvml, theirs), ours


def test_fake_errors_are_the_bindings_classes() -> None:
    fake = FakeNvml(load_scenario("mixed"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    fake.step = 2
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound) as caught:
        fake.nvmlDeviceGetSamples(handle, 0, 1763884800100000)
    assert caught.value.value == 6
    value_type, samples = fake.nvmlDeviceGetSamples(handle, 0, 1763884800050000)
    assert value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert [type(s) for s in samples] == [pynvml.c_nvmlSample_t]
    assert isinstance(fake.nvmlDeviceGetFieldValues(handle, [186])[0], pynvml.c_nvmlFieldValue_t)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4100 (python) S 4000 4100 4000 0 -1 4194560 " + "0 " * 12 + "1000 0 0\n", (4000, 1000)),
        # a command name with spaces and parentheses: fields count from the last ")"
        ("77 (a) b (c)) R 1 77 77 0 -1 0 " + "0 " * 12 + "123456 99\n", (1, 123456)),
    ],
)
def test_parse_proc_stat(text: str, expected: tuple[int, int]) -> None:
    assert parse_proc_stat(text) == expected


def test_parse_visible_devices() -> None:
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices(" 1, GPU-abc ,0") == ["1", "GPU-abc", "0"]


UUIDS = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-bbbc-3"]


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (None, [0, 1, 2]),
        ([], []),
        (["2", "0"], [2, 0]),
        (["GPU-bbbc", "GPU-aaaa-1"], [2, 0]),
        (["1", "7", "0"], [1]),  # CUDA ignores everything from an invalid entry on
        (["GPU-bbb", "0"], []),  # an ambiguous prefix is invalid
        (["-1", "0"], []),
        (["0", "0"], [0]),  # a repeat is invalid
        (["MIG-4f3c", "0"], []),
    ],
)
def test_select_gpus_like_cuda(entries: list[str] | None, expected: list[int]) -> None:
    assert select_gpus(entries, UUIDS, stop_at_invalid=True) == expected


def test_select_gpus_from_config_rejects_what_matches_nothing() -> None:
    assert select_gpus(["GPU-bbbb", "0"], UUIDS, stop_at_invalid=False) == [1, 0]
    with pytest.raises(ValueError, match="'3' matches no single GPU"):
        select_gpus(["0", "3"], UUIDS, stop_at_invalid=False)


def test_select_new_samples() -> None:
    assert select_new_samples(100, [], probed=False) == ([], 100, False)
    assert select_new_samples(100, [110, 120], probed=False) == ([0, 1], 120, False)
    # a probe re-reads the whole buffer: only what is newer than the cursor is new...
    assert select_new_samples(100, [90, 100, 110], probed=True) == ([2], 110, False)
    assert select_new_samples(100, [90, 100], probed=True) == ([], 100, False)
    # ...unless everything is older: the clock went back and all of it is new
    assert select_new_samples(100, [10, 20], probed=True) == ([0, 1], 20, True)


def test_lost_samples_only_from_a_full_buffer_read() -> None:
    full = [300, 320, 340, 360, 380]  # 20 µs apart, a buffer of 5
    # the cursor at 200: 220..280 (4 samples) went before the read
    assert lost_samples(200, full, depth=5) == 4
    assert lost_samples(280, full, depth=5) == 0  # the next one after the cursor: nothing lost
    assert lost_samples(200, full[1:], depth=5) == 0  # not full: the driver paused, not a loss
    assert lost_samples(0, full, depth=5) == 0  # no cursor yet
    assert lost_samples(200, [300, 320], depth=2) == 0  # too few to know the period
    assert lost_samples(200, [380, 300, 340, 360, 320], depth=3) == 4  # in any order


def test_value_of_reads_the_union_by_type() -> None:
    value = pynvml.c_nvmlValue_t()
    value.ullVal = 2**40 + 5
    assert value_of(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, value) == 2**40 + 5
    value.dVal = 1.5
    assert value_of(pynvml.NVML_VALUE_TYPE_DOUBLE, value) == 1.5
    value.siVal = -3
    assert value_of(pynvml.NVML_VALUE_TYPE_SIGNED_INT, value) == -3


@pytest.mark.parametrize(
    ("environ", "gpus"),
    [
        ({"CUDA_VISIBLE_DEVICES": "GPU-0a9b"}, ["1"]),
        ({"CUDA_VISIBLE_DEVICES": "1,0"}, ["1", "0"]),
        ({"CUDA_VISIBLE_DEVICES": "1,5,0"}, ["1"]),
        ({}, ["0", "1"]),
    ],
)
async def test_gpus_of_this_job(
    make: MakeCollector, environ: dict[str, str], gpus: list[str]
) -> None:
    collector, fake = make(load_scenario("mixed"), environ=environ, gpus="visible")
    await collector.open()
    try:
        points = await tick(collector, fake, 1)
        ordered = collector._context.status["nvml_cuda_uuids"]
    finally:
        await collector.aclose()
    assert [p.tags["gpu"] for p in points if p.measurement == "gpu"] == gpus  # in CUDA order
    index_uuid = {p.tags["gpu"]: p.tags["uuid"] for p in points if p.measurement == "gpu"}
    # CUDA ordinal i of the job is the i-th visible GPU, known by UUID
    assert ordered == [index_uuid[g] for g in gpus]


async def test_no_visible_gpu_is_nodata(make: MakeCollector) -> None:
    collector, _ = make(
        load_scenario("mixed"), environ={"CUDA_VISIBLE_DEVICES": ""}, gpus="visible"
    )
    with pytest.raises(NoData, match=r"no GPU selected \(gpus = 'visible'\)"):
        await collector.open()


async def test_configured_gpu_list(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("mixed"), gpus="GPU-0a9b8c7d")
    await collector.open()
    try:
        assert {p.tags["gpu"] for p in await tick(collector, fake, 1)} == {"1"}
    finally:
        await collector.aclose()
    collector, _ = make(load_scenario("mixed"), gpus="0, 2")
    with pytest.raises(NoData, match="'2' matches no single GPU here"):
        await collector.open()


class _StuckNvml(FakeNvml):
    """GetPowerUsage blocks until released, like a driver call that hangs."""

    def __init__(self, scenario: Any) -> None:
        super().__init__(scenario)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.stick = False

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        if self.stick:
            self.entered.set()
            self.release.wait(30)
        return super().nvmlDeviceGetUtilizationRates(handle)


async def test_a_stuck_tick_is_not_queued_behind(context: PluginContext) -> None:
    fake = _StuckNvml(load_scenario("gpu_lost"))
    collector = NvmlCollector(NvmlConfig(processes=False), context, nvml=fake, environ={})
    await collector.open()
    try:
        fake.stick = True
        first = asyncio.create_task(tick(collector, fake, 1))
        assert await asyncio.to_thread(fake.entered.wait, 30)
        first.cancel()  # what the core's timeout does
        with pytest.raises(asyncio.CancelledError):
            await first
        calls = fake.calls.total()
        assert await tick(collector, fake, 1) == []
        assert fake.calls.total() == calls
        assert collector.stats()["ticks_skipped_busy"] == 1
        fake.stick = False
        fake.release.set()
        await asyncio.to_thread(collector._busy.result, 30)  # type: ignore[union-attr]
        assert [p.tags["gpu"] for p in await tick(collector, fake, 1) if p.measurement == "gpu"]
    finally:
        fake.release.set()
        await collector.aclose()


def test_importing_the_collector_does_not_import_pynvml() -> None:
    code = "import sys, collectors.nvml; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def _real_nvml_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_real_nvml_loads(), reason="this machine has an NVIDIA driver")
async def test_real_pynvml_without_a_driver_is_cleanly_unavailable(
    context: PluginContext,
) -> None:
    collector = NvmlCollector(NvmlConfig(), context)  # the real pynvml, imported in open
    with pytest.raises(NoData) as caught:
        await collector.open()
    assert str(caught.value) == "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver here)"
    await collector.aclose()
    assert collector.stats()["gpus"] == 0


@pytest.mark.skipif(_real_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_agent_runs_on_without_nvml(tmp_path: Path) -> None:
    config = tmp_path / "nrg.toml"
    config.write_text('[[collectors.nvml]]\n[[collectors.rapl]]\nroot = "/nonexistent"\n')
    listed = subprocess.run(
        [sys.executable, "-m", "acquisition.cli", "list", "--config", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        "nvml  unavailable: NVML library libnvidia-ml.so.1 not found (no NVIDIA driver here)"
        in listed.stdout
    )


@pytest.mark.parametrize(
    ("value_type", "member", "values"),
    [
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", [1.5, -2.25]),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", [350000, 2**32 - 1]),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", [7, 2**40]),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", [2**64 - 1, 0]),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", [-(2**63), 5]),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", [-7, 2**31 - 1]),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", [65535, 1]),
    ],
)
def test_decode_samples_both_ways(value_type: int, member: str, values: list[Any]) -> None:
    array = (pynvml.c_nvmlSample_t * 3)()
    for i, sample in enumerate(array):
        sample.sampleValue.ullVal = 0xFFFF_FFFF_FFFF_FFFF  # garbage in the unused bytes
        sample.timeStamp = 1_763_884_800_000_000 + i
        setattr(sample.sampleValue, member, values[i % 2])
    expected = [(1_763_884_800_000_000 + i, values[i % 2]) for i in range(3)]
    # what the binding returns: a slice of one array, read from its memory at once
    assert decode_samples(value_type, array[0:3]) == expected
    # separate structures (or a sliced-out part) are read field by field
    loose = [pynvml.c_nvmlSample_t() for _ in range(3)]
    for target, source in zip(loose, array, strict=True):
        ctypes.memmove(ctypes.addressof(target), ctypes.addressof(source), 16)
    assert decode_samples(value_type, loose) == expected
    assert decode_samples(value_type, array[1:3]) == expected[1:]
    assert decode_samples(value_type, []) == []


@pytest.mark.skipif(_real_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_agent_once_runs_on_with_the_other_collectors(tmp_path: Path) -> None:
    config = tmp_path / "nrg.toml"
    config.write_text('[agent]\ninterval = "100ms"\n[[collectors.procfs]]\n[[collectors.nvml]]\n')
    once = subprocess.run(
        [sys.executable, "-m", "acquisition.cli", "--once", "--config", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    measurements = {line.split(",", 1)[0].split(" ", 1)[0] for line in once.stdout.splitlines()}
    assert {"cpu", "memory", "process"} <= measurements
    assert not measurements & {"gpu", "gpu_sample", "gpu_process"}
    assert "collector nvml unavailable: NVML library libnvidia-ml.so.1 not found" in once.stderr


@given(st.text(max_size=200))
def test_fuzz_parse_proc_stat_raises_only_value_error(text: str) -> None:
    try:
        ppid, start = parse_proc_stat(text)
    except ValueError:
        return
    assert isinstance(ppid, int) and isinstance(start, int)


@given(st.one_of(st.none(), st.text(max_size=100)))
def test_fuzz_parse_visible_devices_never_raises(value: str | None) -> None:
    entries = parse_visible_devices(value)
    assert entries is None or all(e == e.strip() for e in entries)


@given(
    st.one_of(st.none(), st.lists(st.text(max_size=12), max_size=6)),
    st.lists(st.from_regex(r"GPU-[0-9a-f]{4}", fullmatch=True), max_size=4),
    st.booleans(),
)
@example(["²"], ["GPU-abcd"], True)
@example(["--1"], ["GPU-abcd"], True)
def test_fuzz_select_gpus_raises_only_value_error(
    entries: list[str] | None, uuids: list[str], stop: bool
) -> None:
    try:
        chosen = select_gpus(entries, uuids, stop_at_invalid=stop)
    except ValueError:
        assert not stop  # CUDA's rule stops at an invalid entry instead
        return
    assert len(set(chosen)) == len(chosen)
    assert all(0 <= i < len(uuids) for i in chosen)


class _SlowEnergyNvml(FakeNvml):
    """The energy counter takes 50 ms to answer, as a busy driver's can."""

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> Any:
        time.sleep(0.05)
        return super().nvmlDeviceGetTotalEnergyConsumption(handle)


async def test_how_late_a_tick_read_the_driver_is_kept(context: PluginContext) -> None:
    """Points carry the tick's time, the driver is read on a thread: the self-stat says how
    much later the readings may have been made (here at least the slow counter's 50 ms)."""
    fake = _SlowEnergyNvml(load_scenario("gpu_lost"))
    collector = NvmlCollector(NvmlConfig(processes=False), context, nvml=fake, environ={})
    await collector.open()
    try:
        assert collector.stats()["read_lag_max_seconds"] == 0.0
        assert [p for p in await tick(collector, fake, 1) if p.measurement == "gpu"]
        assert collector.stats()["read_lag_max_seconds"] >= 0.05
    finally:
        await collector.aclose()
