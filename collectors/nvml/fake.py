"""A fake of exactly the ``pynvml`` functions :mod:`collectors.nvml` calls, driven by a scenario.

For machines without a GPU the narrowest boundary is faked: the Python binding's functions (the
tests drive it step by step; :mod:`collectors.nvml.sim` on the wall clock, for
``nrg-collect simulate nvml``).
Everything the fake hands back is what the real binding hands back: the real ctypes structures
(``c_nvmlFieldValue_t``, ``c_nvmlUtilization_t``, ``c_nvmlMemory_t``/``_v2_t``, ``c_nvmlSample_t``,
``c_nvmlProcessUtilizationSample_t``, ``c_nvmlProcessUtilizationInfo_v1_t``), the friendly objects
``nvmlDeviceGetComputeRunningProcesses`` builds from ``c_nvmlProcessInfo_v3_t``, plain ints and
strs; errors are ``pynvml.NVMLError(code)``, which the binding turns into its ``NVMLError_<Name>``
subclasses. Behaviour modelled on the binding and ``nvml.h``:

- any call before ``nvmlInit`` (or after the matching ``nvmlShutdown``) raises UNINITIALIZED;
  init and shutdown are reference-counted;
- ``nvmlDeviceGetSamples`` returns samples with ``timeStamp > lastSeen`` in buffer (FIFO) order
  and raises NOT_FOUND when there are none; a driver reload empties the buffer;
- ``nvmlDeviceGetFieldValues`` succeeds as a call and reports per-element ``nvmlReturn``;
- ``nvmlDeviceGetProcessUtilization`` / ``…ProcessesUtilizationInfo``: NOT_FOUND when processes
  run but nothing was sampled since the timestamp; with no process at all the driver's size call
  answers SUCCESS with a count of 0, which the binding raises as ``NVMLError(0)``;
- a function missing from the driver raises FUNCTION_NOT_FOUND (``_nvmlGetFunctionPointer``);
  for ``nvmlDeviceGetComputeRunningProcesses`` the binding turns that into
  ``NVMLLibraryMismatchError``;
- a lost GPU raises GPU_IS_LOST from every call on its handle.

Units and return codes, each as ``nvml.h`` documents the call (the header's doc comment of the
function named; scenario values are written in these units):

- ``nvmlDeviceGetPowerUsage``: milliwatts; "On Ampere (except GA100) or newer GPUs, the API
  returns power averaged over 1 sec interval. On GA100 and older architectures, instantaneous
  power is returned"; NOT_SUPPORTED "if the device does not support power readings";
- ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_POWER_INSTANT`` (186): milliwatts, the
  per-field result in ``nvmlFieldValue_t.nvmlReturn`` while the call itself returns SUCCESS;
  ``NVML_FI_DEV_POWER_AVERAGE`` (185): milliwatts, "GPU power averaged over 1 sec interval,
  supported on Ampere (except GA100) or newer architectures" (the value ``GetPowerUsage`` gives
  there), NOT_SUPPORTED in its element elsewhere or where the architecture is not reported;
- ``nvmlDeviceGetTotalEnergyConsumption``: millijoules "since the driver was last reloaded",
  "For Volta or newer fully supported devices", NOT_SUPPORTED otherwise;
- ``nvmlDeviceGetEnforcedPowerLimit``: milliwatts;
- ``nvmlDeviceGetMemoryInfo`` / ``_v2``: bytes (``nvmlMemory_t``, ``nvmlMemory_v2_t`` with
  ``reserved``); ARGUMENT_VERSION_MISMATCH where the driver lacks the version;
- ``nvmlDeviceGetUtilizationRates``: percent (0..100) over the past sample period
  (``nvmlUtilization_t``);
- ``nvmlDeviceGetTemperature`` / ``…V``: degrees Celsius (``NVML_TEMPERATURE_GPU`` = 0);
- ``nvmlDeviceGetClockInfo``: MHz (``NVML_CLOCK_SM`` = 1, ``NVML_CLOCK_MEM`` = 2);
- ``nvmlDeviceGetSamples``: ``timeStamp`` in microseconds (CPU timestamp), values in the units
  of the sample type (mW for ``NVML_TOTAL_POWER_SAMPLES``, percent for utilisation); NOT_FOUND
  "if sample entries are not found";
- ``nvmlDeviceGetComputeRunningProcesses``: ``usedGpuMemory`` in bytes, or
  ``NVML_VALUE_NOT_AVAILABLE`` (ULL max) when the driver cannot tell;
- ``nvmlDeviceGetProcessUtilization`` / ``…ProcessesUtilizationInfo``: ``smUtil``/``memUtil``
  percent, ``timeStamp`` µs; NOT_FOUND when nothing was sampled since ``lastSeenTimeStamp``;
- ``nvmlDeviceGetArchitecture``: ``nvmlDeviceArchitecture_t`` (VOLTA = 5, TURING = 6,
  AMPERE = 7, ADA = 8, HOPPER = 9);
- return codes (``nvmlReturn_t``): SUCCESS 0, UNINITIALIZED 1, NOT_SUPPORTED 3, NO_PERMISSION 4,
  NOT_FOUND 6, DRIVER_NOT_LOADED 9, LIBRARY_NOT_FOUND 12, FUNCTION_NOT_FOUND 13, GPU_IS_LOST 15,
  RESET_REQUIRED 16, LIB_RM_VERSION_MISMATCH 18, ARGUMENT_VERSION_MISMATCH 25, GPU_NOT_FOUND 28
  (``test_nvml_constants_match_the_binding`` checks them against the binding's constants).

Scenario (TOML or a dict; see the tests' ``tests/fixtures/nvml/*.toml``). Per-step series are lists indexed by
the fake's ``step``; a shorter list holds its last value. Keys of a ``[[gpu]]``::

    uuid, name, architecture (omit: NOT_SUPPORTED), memory_total, memory_reserved, power_limit_mw
    power_instant_mw, power_usage_mw, energy_mj, utilization_gpu, utilization_memory,
    memory_used, temperature_c, clock_sm_mhz, clock_mem_mhz        per-step series
    not_supported = ["nvmlDeviceGetTotalEnergyConsumption", "field:186", "samples:2", ...]
    lost_from_step = N
    errors = [[step, "function name", code], ...]                  one-off errors
    samples_power / samples_gpu_util / samples_memory_util = [[from_step, timestamp_us, value]]
    sample_generator = {period_us, step_us, depth, power_mw, gpu_util, memory_util}
    reload_at_step = N                buffers (samples, process samples) keep only entries from N on
    processes = [[step, pid, used_bytes or -1 for "not available"], ...]
    process_samples = [[from_step, timestamp_us, pid, sm_percent, mem_percent], ...]
    process_generator = {pids, used, sm, mem, step_us}   the same processes at every step, one
                                                         utilisation sample each per step

Top level: ``driver_version``, ``init_error``, ``missing_functions`` (names the driver lacks).

Cost model (``FakeNvml(scenario, costs=H200_COSTS_US)``): each call busy-waits the CPU time that
call takes in the driver, so that a CPU benchmark shows the real proportions. The figures were
measured with ``bench/bench_nvml.py --real`` (CPU µs per call, 200 calls each, the GPU busy,
driver 580.159.04) on an NVIDIA H200 (:data:`H200_COSTS_US`, every call the collector makes)
and on an H100 80GB HBM3 (:data:`H100_MEASURED_US`, six calls); :data:`H100_COSTS_US` is the
H100's figure where there is one, the H200's for the others (:data:`COST_SOURCES` says which).
Off by default: tests count calls, never time them.
"""

from __future__ import annotations

import threading
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from collectors.nvml.parse import is_ga100

__all__ = [
    "COST_SOURCES",
    "H100_COSTS_US",
    "H100_MEASURED_US",
    "H200_COSTS_US",
    "FakeHandle",
    "FakeNvml",
    "load_scenario",
]

_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_SAMPLE_KEYS = {0: "samples_power", 1: "samples_gpu_util", 2: "samples_memory_util"}
_GENERATOR_KEYS = {0: "power_mw", 1: "gpu_util", 2: "memory_util"}
T = TypeVar("T")

H200_COSTS_US = {
    "nvmlDeviceGetTotalEnergyConsumption": 4003.5,
    "nvmlDeviceGetFieldValues": 13.3,
    "nvmlDeviceGetPowerUsage": 1.0,
    "nvmlDeviceGetUtilizationRates": 10.3,
    "nvmlDeviceGetMemoryInfo_v2": 5.9,
    "nvmlDeviceGetMemoryInfo": 5.9,  # v1: as v2
    "nvmlDeviceGetTemperatureV": 3.8,
    "nvmlDeviceGetTemperature": 3.8,  # the deprecated call: as the versioned one
    "nvmlDeviceGetClockInfo": 3.0,
    "nvmlDeviceGetEnforcedPowerLimit": 1.0,
    "nvmlDeviceGetSamples": 307.4,
    "nvmlDeviceGetComputeRunningProcesses_v3": 8.0,
    "nvmlDeviceGetProcessesUtilizationInfo": 2198.4,
    "nvmlDeviceGetProcessUtilization": 2198.4,  # the older call: as its successor
}
"""CPU µs per call on an NVIDIA H200, driver 580.159.04, 16 vCPUs (Firecracker VM), another
process keeping the GPU busy: ``bench/bench_nvml.py --real``, 200 calls each."""
H100_MEASURED_US = {
    "nvmlDeviceGetTotalEnergyConsumption": 3789.0,
    "nvmlDeviceGetComputeRunningProcesses_v3": 48.0,
    "nvmlDeviceGetPowerUsage": 19.0,
    "nvmlDeviceGetUtilizationRates": 11.0,
    "nvmlDeviceGetMemoryInfo_v2": 8.0,
    "nvmlDeviceGetMemoryInfo": 8.0,
    "nvmlDeviceGetTemperatureV": 5.0,
    "nvmlDeviceGetTemperature": 5.0,
}
"""CPU µs per call on an H100 80GB HBM3, driver 580.159.04 (200 calls each, GPU busy)."""
H100_COSTS_US = {**H200_COSTS_US, **H100_MEASURED_US}
"""The H100's figure where it was measured, the H200's for the other calls."""
COST_SOURCES = {name: "H100" if name in H100_MEASURED_US else "H200" for name in H100_COSTS_US}
"""Which GPU each figure of :data:`H100_COSTS_US` was measured on."""


def load_scenario(path: str | Path) -> dict[str, Any]:
    """A scenario from a TOML file."""
    with Path(path).open("rb") as f:
        return tomllib.load(f)


class FakeHandle:
    """Stands in for ``c_nvmlDevice_t``: opaque to the caller."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<FakeHandle {self.index}>"


def _averages(gpu: Mapping[str, Any]) -> bool:
    """Whether the GPU has field 185 (a 1 s power average): Ampere and newer except GA100."""
    architecture = gpu.get("architecture")
    if architecture is None:
        return False
    return architecture > 7 or (architecture == 7 and not is_ga100(str(gpu["name"])))


def _at(series: Any, step: int) -> Any:
    if not isinstance(series, list):
        return series
    return series[min(step, len(series) - 1)]


class FakeNvml:
    """Module-like: pass it as ``NvmlCollector(..., nvml=FakeNvml(scenario))``."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(
        self, scenario: Mapping[str, Any], costs: Mapping[str, float] | None = None
    ) -> None:
        """``costs``: CPU µs each call busy-waits, by function (default: none)."""
        self.scenario = scenario
        self.costs = dict(costs or {})
        self.gpus: list[Mapping[str, Any]] = list(scenario.get("gpu", []))
        self.step = 0
        self.refcount = 0
        self.calls: Counter[str] = Counter()
        self.threads: set[str] = set()
        self._missing = set(scenario.get("missing_functions", []))
        self._handles = [FakeHandle(i) for i in range(len(self.gpus))]

    # -- plumbing -----------------------------------------------------------------------------

    def _enter(self, function: str) -> None:
        self.calls[function] += 1
        self.threads.add(threading.current_thread().name)
        cost = self.costs.get(function)
        if cost:
            until = time.thread_time() + cost * 1e-6
            while time.thread_time() < until:
                pass  # the driver's work: this thread's CPU time, however the machine is loaded
        if function in self._missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if self.refcount == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, function: str, handle: FakeHandle, what: str | None = None) -> Mapping[str, Any]:
        self._enter(function)
        gpu = self.gpus[handle.index]
        lost = gpu.get("lost_from_step")
        if lost is not None and self.step >= lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        for step, name, code in gpu.get("errors", []):
            if step == self.step and name == function:
                raise pynvml.NVMLError(code)
        if (what or function) in gpu.get("not_supported", []):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _series(self, gpu: Mapping[str, Any], key: str) -> Any:
        return _at(gpu[key], self.step)

    # -- library ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        self.threads.add(threading.current_thread().name)
        code = self.scenario.get("init_error")
        if code is not None:
            raise pynvml.NVMLError(code)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return str(self.scenario.get("driver_version", "550.54.15"))

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    # -- identity -----------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return str(self._gpu("nvmlDeviceGetUUID", handle)["uuid"])

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return str(self._gpu("nvmlDeviceGetName", handle)["name"])

    def nvmlDeviceGetArchitecture(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetArchitecture", handle)
        if "architecture" not in gpu:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(gpu["architecture"])

    # -- readings -----------------------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: Sequence[Any]) -> Any:
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            fid, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
            element = values[i]
            element.fieldId, element.scopeId = fid, scope
            element.timestamp = 1_763_884_800_000_000 + self.step * 1_000_000
            element.latencyUsec = 0
            if f"field:{fid}" in gpu.get("not_supported", []):
                element.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif fid == pynvml.NVML_FI_DEV_POWER_INSTANT:
                element.nvmlReturn = pynvml.NVML_SUCCESS
                element.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                element.value.uiVal = self._series(gpu, "power_instant_mw")
            elif fid == pynvml.NVML_FI_DEV_POWER_AVERAGE and _averages(gpu):
                element.nvmlReturn = pynvml.NVML_SUCCESS
                element.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                element.value.uiVal = self._series(gpu, "power_usage_mw")
            elif fid == pynvml.NVML_FI_DEV_POWER_AVERAGE:
                element.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                element.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        return values

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetPowerUsage", handle)
        return int(self._series(gpu, "power_usage_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle)
        return int(self._series(gpu, "energy_mj"))

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu = self._series(gpu, "utilization_gpu")
        rates.memory = self._series(gpu, "utilization_memory")
        return rates

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        # The binding resolves a different symbol for v2; a driver may lack it.
        function = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu = self._gpu(function, handle)
        total, used = int(gpu["memory_total"]), int(self._series(gpu, "memory_used"))
        reserved = int(gpu.get("memory_reserved", 0))
        if version:
            if version != pynvml.nvmlMemory_v2:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            memory = pynvml.c_nvmlMemory_v2_t()
            memory.version, memory.total, memory.reserved = version, total, reserved
            memory.used, memory.free = used, total - used - reserved
            return memory
        memory_v1 = pynvml.c_nvmlMemory_t()
        # v1 counts the reserved memory as used.
        memory_v1.total, memory_v1.used = total, used + reserved
        memory_v1.free = total - used - reserved
        return memory_v1

    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureV", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._series(gpu, "temperature_c"))

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._series(gpu, "temperature_c"))

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle, f"clock:{clock_type}")
        key = {pynvml.NVML_CLOCK_SM: "clock_sm_mhz", pynvml.NVML_CLOCK_MEM: "clock_mem_mhz"}
        if clock_type not in key:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._series(gpu, key[clock_type]))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        return int(gpu["power_limit_mw"])

    # -- buffered samples ---------------------------------------------------------------------

    def _reload_floor(self, gpu: Mapping[str, Any]) -> int:
        """The first step whose buffered samples survive: a driver reload empties every buffer."""
        reload_at = gpu.get("reload_at_step")
        return int(reload_at) if reload_at is not None and self.step >= reload_at else 0

    def _buffer(self, gpu: Mapping[str, Any], sampling_type: int) -> list[tuple[int, int]]:
        """The driver's buffer for a type at the current step, oldest first."""
        generator = gpu.get("sample_generator")
        if generator is not None:
            period, step_us = int(generator["period_us"]), int(generator["step_us"])
            start = int(generator.get("start_us", 1_763_884_800_000_000))
            newest = start + self.step * step_us
            depth = int(generator.get("depth", 120))
            value = int(generator[_GENERATOR_KEYS[sampling_type]])
            first = max(start, newest - (depth - 1) * period)
            first += (newest - first) % period
            return [(stamp, value) for stamp in range(first, newest + 1, period)]
        floor = self._reload_floor(gpu)
        return [
            (int(stamp), int(value))
            for visible, stamp, value in gpu.get(_SAMPLE_KEYS[sampling_type], [])
            if floor <= visible <= self.step
        ]

    def nvmlDeviceGetSamples(self, handle: FakeHandle, sampling_type: int, last_seen: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetSamples", handle, f"samples:{sampling_type}")
        if sampling_type not in _SAMPLE_KEYS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        fresh = [(t, v) for t, v in self._buffer(gpu, sampling_type) if t > last_seen]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        samples = (pynvml.c_nvmlSample_t * len(fresh))()
        for sample, (stamp, value) in zip(samples, fresh, strict=True):
            sample.timeStamp = stamp
            sample.sampleValue.uiVal = value
        return (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples[0 : len(fresh)])

    # -- processes ----------------------------------------------------------------------------

    def _running(self, gpu: Mapping[str, Any]) -> list[tuple[int, int]]:
        generator = gpu.get("process_generator")
        if generator is not None:
            return [(int(pid), int(generator["used"])) for pid in generator["pids"]]
        return [(pid, used) for step, pid, used in gpu.get("processes", []) if step == self.step]

    def _utilization(self, gpu: Mapping[str, Any]) -> list[tuple[int, int, int, int, int]]:
        generator = gpu.get("process_generator")
        if generator is None:
            floor = self._reload_floor(gpu)
            return [entry for entry in gpu.get("process_samples", []) if entry[0] >= floor]
        stamp = int(generator.get("start_us", 1_763_884_800_000_000))
        stamp += self.step * int(generator["step_us"])
        sm, mem = int(generator["sm"]), int(generator["mem"])
        return [(self.step, stamp, int(pid), sm, mem) for pid in generator["pids"]]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        try:
            gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses_v3", handle)
        except pynvml.NVMLError_FunctionNotFound:
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called") from None
        out = []
        for pid, used in self._running(gpu):
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid, info.gpuInstanceId, info.computeInstanceId = pid, 0xFFFFFFFF, 0xFFFFFFFF
            info.usedGpuMemory = _NOT_AVAILABLE if used < 0 else used
            friendly = pynvml.nvmlStructToFriendlyObject(info)
            if friendly.usedGpuMemory == _NOT_AVAILABLE:
                friendly.usedGpuMemory = None
            out.append(friendly)
        return out

    def _process_samples(
        self, function: str, handle: FakeHandle, last_seen: int, make: Callable[[], T]
    ) -> list[T]:
        gpu = self._gpu(function, handle)
        if not self._running(gpu):
            raise pynvml.NVMLError(pynvml.NVML_SUCCESS)  # the binding's quirk, see module doc
        fresh = [
            (stamp, pid, sm, mem)
            for visible, stamp, pid, sm, mem in self._utilization(gpu)
            if visible <= self.step and stamp > last_seen
        ]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        out = []
        for stamp, pid, sm, mem in fresh:
            sample: Any = make()
            sample.timeStamp, sample.pid, sample.smUtil, sample.memUtil = stamp, pid, sm, mem
            out.append(sample)
        return out

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: FakeHandle, last_seen: int) -> Any:
        return self._process_samples(
            "nvmlDeviceGetProcessesUtilizationInfo",
            handle,
            last_seen,
            pynvml.c_nvmlProcessUtilizationInfo_v1_t,
        )

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, last_seen: int) -> Any:
        return self._process_samples(
            "nvmlDeviceGetProcessUtilization",
            handle,
            last_seen,
            pynvml.c_nvmlProcessUtilizationSample_t,
        )
