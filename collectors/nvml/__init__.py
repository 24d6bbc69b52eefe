"""NVIDIA GPUs through NVML, via the ``pynvml`` module of NVIDIA's ``nvidia-ml-py`` distribution.

Calls read (``pynvml`` names; units as NVML returns them → as emitted):

- ``nvmlDeviceGetFieldValues([NVML_FI_DEV_POWER_INSTANT])`` mW → ``gpu.power_watts`` (instant);
- ``nvmlDeviceGetPowerUsage`` mW → ``gpu.power_average_watts``: a 1 s trailing average on Ampere
  and newer (except GA100); on older GPUs it is instantaneous and stands in for ``power_watts``
  when field 186 is not supported;
- ``nvmlDeviceGetTotalEnergyConsumption`` mJ since driver load (Volta+) → ``gpu.energy_joules``
  since the collector opened, reloads corrected; without the counter, instant power integrated
  over the agent's ticks → ``gpu.energy_integrated_joules``;
- ``nvmlDeviceGetUtilizationRates`` % → ``utilization_ratio``, ``memory_utilization_ratio``;
- ``nvmlDeviceGetMemoryInfo`` (v2, else v1) bytes → ``memory_used_bytes``, ``memory_total_bytes``,
  ``memory_reserved_bytes`` (v2 only);
- ``nvmlDeviceGetTemperatureV`` °C → ``temperature_celsius``;
- ``nvmlDeviceGetClockInfo(SM | MEM)`` MHz → ``sm_clock_hertz``, ``memory_clock_hertz``;
- ``nvmlDeviceGetEnforcedPowerLimit`` mW → ``power_limit_watts``;
- ``nvmlDeviceGetSamples`` (total power mW, GPU and memory utilisation %), everything the driver
  buffered since the last seen timestamp, each at its own driver timestamp (µs → ns) →
  ``gpu_sample`` points;
- ``nvmlDeviceGetComputeRunningProcesses`` bytes and ``nvmlDeviceGetProcessesUtilizationInfo``
  (else the older ``nvmlDeviceGetProcessUtilization``) % → ``gpu_process`` points per pid, and per
  tracked process tree (main / descendants / combined, current and maximum GPU memory);
- ``<root>/proc/<pid>/stat`` (parent pid, start time) to key processes by (pid, start time) and
  to find the tracked trees they belong to.

Every NVML call is a blocking ctypes call: all of them run on one worker thread owned by the
collector, one executor job per tick. Errors map to four outcomes: *not supported* (that reading
is skipped for that GPU from then on, logged once), *GPU lost* (that GPU is stopped, logged),
*library or driver absent* (``open`` raises :class:`NoData` with the reason) and anything else
(transient: counted, logged once per episode, retried next tick).
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import logging
import os
import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from acquisition.api import Emit, PluginContext
from acquisition.errors import NoData, NrgError
from acquisition.point import FieldValue, Point

__all__ = [
    "NvmlCollector",
    "NvmlConfig",
    "decode_samples",
    "parse_proc_stat",
    "parse_visible_devices",
    "select_gpus",
    "select_new_samples",
    "value_of",
]

log = logging.getLogger(__name__)

# NVML constants (nvml.h). They are part of the C ABI and never change; keeping them here keeps
# the seam to the binding down to its functions and exception classes (a test checks them
# against pynvml).
NVML_SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_GPU_NOT_FOUND = 28
FI_DEV_POWER_INSTANT = 186
TEMPERATURE_GPU = 0
CLOCK_SM = 1
CLOCK_MEM = 2
SAMPLING_TOTAL_POWER = 0
SAMPLING_GPU_UTIL = 1
SAMPLING_MEMORY_UTIL = 2
ARCH_VOLTA = 5
ARCH_AMPERE = 7
MEMORY_V2 = 0x02000028

_UNSUPPORTED = frozenset(
    {ERROR_NOT_SUPPORTED, ERROR_NO_PERMISSION, ERROR_FUNCTION_NOT_FOUND,
     ERROR_ARGUMENT_VERSION_MISMATCH}
)  # fmt: skip
_LOST = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_GPU_NOT_FOUND})
_INIT_REASONS = {
    ERROR_LIBRARY_NOT_FOUND: "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver here)",
    ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
    ERROR_NO_PERMISSION: "no permission to use NVML",
    ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (reboot?)",
}

# Sample types read from the driver's buffer: (type, field name, scale to SI).
_SAMPLE_TYPES = (
    (SAMPLING_TOTAL_POWER, "power_watts", 1e-3),
    (SAMPLING_GPU_UTIL, "utilization_ratio", 1e-2),
    (SAMPLING_MEMORY_UTIL, "memory_utilization_ratio", 1e-2),
)

# A buffer that yields nothing new for this long is re-read from the start once, which is how a
# timestamp that went backwards (driver reload, clock step) shows: the driver filters on
# ``timestamp > lastSeen`` and would otherwise answer NOT_FOUND forever.
_STALE_NS = 5_000_000_000
_MAX_ANCESTRY = 64


@dataclass
class NvmlConfig:
    """``[[collectors.nvml]]`` keys."""

    root: str = field(
        default="/", metadata={"doc": "where proc/<pid>/stat is read (fixture trees, /host)"}
    )
    gpus: str = field(
        default="all",
        metadata={
            "doc": '"all"; "visible" = the GPUs of this job (CUDA_VISIBLE_DEVICES); or NVML'
            " indices and GPU-... UUIDs (unique prefixes), comma-separated"
        },
    )
    samples: bool = field(
        default=True, metadata={"doc": "read the driver's power/utilisation sample buffer"}
    )
    processes: bool = field(
        default=True, metadata={"doc": "per-process and per-tracked-tree GPU memory and use"}
    )


class _GpuLost(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _Cursor:
    last_us: int = 0
    progress_ns: int | None = None  # agent time of the last new sample (or probe)


@dataclass
class _EnergyCounter:
    """mJ since driver load → J since open; a counter that goes back (driver reload) restarts."""

    base_mj: int | None = None
    last_mj: int = 0
    carried_mj: int = 0

    def update(self, mj: int) -> float:
        if self.base_mj is None:
            self.base_mj = self.last_mj = mj
        elif mj < self.last_mj:
            self.carried_mj += self.last_mj - self.base_mj
            self.base_mj = 0
        self.last_mj = mj
        return (self.carried_mj + mj - self.base_mj) / 1000.0


@dataclass
class _Integrator:
    """Trapezoidal integral of power over agent time: energy where the GPU has no counter."""

    joules: float = 0.0
    last: tuple[int, float] | None = None

    def update(self, now_ns: int, watts: float) -> float:
        if self.last is not None and now_ns > self.last[0]:
            self.joules += (now_ns - self.last[0]) * 1e-9 * (watts + self.last[1]) / 2.0
        self.last = (now_ns, watts)
        return self.joules


@dataclass
class _Gpu:
    index: int
    uuid: str
    name: str
    handle: Any
    architecture: int | None
    tags: dict[str, str]
    cuda_ordinal: int | None = None
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    failing: dict[str, int] = field(default_factory=dict)
    legacy_process_util: bool = False
    energy: _EnergyCounter = field(default_factory=_EnergyCounter)
    integrator: _Integrator | None = None
    cursors: dict[int, _Cursor] = field(default_factory=dict)
    process_cursor: _Cursor = field(default_factory=_Cursor)
    jump_logged: bool = False


@dataclass
class _ProcState:
    ancestors: tuple[int, ...]
    memory_max: int = 0


def parse_proc_stat(text: str) -> tuple[int, int]:
    """``/proc/<pid>/stat`` → (parent pid, start time in clock ticks since boot).

    The command name sits in parentheses and may itself hold spaces and parentheses, so the
    fields are counted from the last ``)``.
    """
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[19])


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` → its entries, or None when unset (every GPU is visible).

    An empty value hides every GPU. Whitespace around entries is ignored, as CUDA does.
    """
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",")] if value.strip() else []


def select_gpus(
    entries: Sequence[str] | None, uuids: Sequence[str], *, stop_at_invalid: bool
) -> list[int]:
    """Positions in ``uuids`` (NVML index order) chosen by ``entries``, in the order given.

    An entry is a decimal index or a (prefix of a) ``GPU-…`` UUID; None selects all. CUDA stops
    at the first entry it cannot resolve (``stop_at_invalid``, for ``CUDA_VISIBLE_DEVICES``);
    a configured list raises ValueError instead.
    """
    if entries is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in entries:
        found: int | None = None
        if entry.lstrip("-").isdigit():
            number = int(entry)
            if 0 <= number < len(uuids):
                found = number
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) == 1:
                found = matches[0]
        if found is None or found in chosen:
            if stop_at_invalid:
                break
            raise ValueError(f"GPU {entry!r} matches no single GPU here")
        chosen.append(found)
    return chosen


def value_of(value_type: int, value: Any) -> float | int:
    """Read an NVML ``c_nvmlValue_t`` union by its ``nvmlValueType_t``."""
    attribute = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[value_type]
    number: float | int = getattr(value, attribute)
    return number


# c_nvmlSample_t is {unsigned long long timeStamp; c_nvmlValue_t sampleValue} = 16 bytes; the
# union's members all start at its first byte. Formats by nvmlValueType_t.
_SAMPLE_SIZE = 16
_SAMPLE_FORMATS = tuple(
    "=Q" + member
    for member in (
        "d",
        "I4x",
        "Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "I4x",
        "Q",
        "q",
        "i4x",
        "H6x",
    )
)


def decode_samples(value_type: int, samples: Sequence[Any]) -> list[tuple[int, float | int]]:
    """``nvmlDeviceGetSamples``' list of ``c_nvmlSample_t`` → [(timestamp µs, value)].

    The binding returns a slice of one ctypes array; reading that memory in one go is about 15x
    faster than its structures' attribute access (``_PrintableStructure.__getattribute__``),
    which matters at tens of samples per type per GPU per tick. Anything else is read field by
    field.
    """
    if not samples:
        return []
    first, last = samples[0], samples[-1]
    base = getattr(first, "_b_base_", None)
    if (
        base is not None
        and base is getattr(last, "_b_base_", None)
        and ctypes.sizeof(first) == _SAMPLE_SIZE
        and ctypes.addressof(last) - ctypes.addressof(first) == _SAMPLE_SIZE * (len(samples) - 1)
    ):
        raw = ctypes.string_at(ctypes.addressof(first), _SAMPLE_SIZE * len(samples))
        return list(struct.iter_unpack(_SAMPLE_FORMATS[value_type], raw))
    return [(int(s.timeStamp), value_of(value_type, s.sampleValue)) for s in samples]


def select_new_samples(
    last_us: int, stamps: Sequence[int], *, probed: bool
) -> tuple[list[int], int, bool]:
    """Which samples of a buffer read are new: (their positions, the new cursor, went back?).

    A normal read passed ``last_us`` and the driver returned only later samples; a *probe*
    re-read the buffer from 0. If every probed sample is older than the cursor, the clock went
    backwards (driver reload): the buffer is FIFO, so the sample at the cursor has been evicted
    together with everything before it, and all that remains is new.
    """
    if not stamps:
        return [], last_us, False
    newest = max(stamps)
    if probed and newest < last_us:
        return list(range(len(stamps))), newest, True
    keep = [i for i, stamp in enumerate(stamps) if stamp > last_us]
    return keep, max(newest, last_us), False


class NvmlCollector:
    """Per-GPU power, energy, utilisation, memory, clocks; driver samples; per-process use."""

    name: ClassVar[str] = "nvml"
    config_class: ClassVar[type] = NvmlConfig

    def __init__(
        self,
        config: NvmlConfig,
        context: PluginContext,
        *,
        nvml: Any = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``nvml`` is the binding (default: ``pynvml``, imported in ``open``); tests pass a fake.
        ``environ`` (default ``os.environ``) is where ``CUDA_VISIBLE_DEVICES`` is read."""
        self._config = config
        self._context = context
        self._nvml = nvml
        self._environ = os.environ if environ is None else environ
        self._proc = Path(config.root) / "proc"
        self._executor: ThreadPoolExecutor | None = None
        self._initialized = False
        self._busy: Future[list[Point]] | None = None
        self._gpus: list[_Gpu] = []
        self._driver = ""
        self._procs: dict[tuple[int, int | None], _ProcState] = {}
        self._trees: dict[tuple[int, int | None], list[int]] = {}
        self._counts = {
            "gpus_lost": 0,
            "errors_transient": 0,
            "samples": 0,
            "sample_cursor_resets": 0,
            "ticks_skipped_busy": 0,
        }

    # -- lifecycle (event loop) ---------------------------------------------------------------

    async def open(self) -> None:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NoData("nvidia-ml-py is not installed (pip install 'nrg[nvml]')") from exc
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nrg-nvml")
        try:
            await asyncio.wrap_future(self._executor.submit(self._open_sync))
        except BaseException:
            await self.aclose()
            raise
        if self._config.gpus == "visible":
            ordered = sorted(self._gpus, key=lambda gpu: gpu.cuda_ordinal or 0)
            self._context.status["nvml_cuda_uuids"] = [gpu.uuid for gpu in ordered]

    async def collect(self, emit: Emit, now_ns: int) -> None:
        if self._executor is None:
            raise NrgError("nvml collector is not open")
        if self._busy is not None and not self._busy.done():
            # The previous tick is still stuck in the driver: queueing more work behind it would
            # only pile up stale reads.
            self._counts["ticks_skipped_busy"] += 1
            return
        roots = frozenset(int(pid) for pid in self._context.status.get("tracked_pids", ()))
        self._busy = self._executor.submit(self._tick, now_ns, roots)
        for point in await asyncio.wrap_future(self._busy):
            emit(point)

    async def aclose(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._initialized:
            self._initialized = False
            try:
                await asyncio.wrap_future(executor.submit(self._shutdown_sync))
            finally:
                executor.shutdown(wait=False)
        else:
            executor.shutdown(wait=False)

    def describe(self) -> str:
        names = ", ".join(f"{gpu.index}: {gpu.name}" for gpu in self._gpus)
        return f"{len(self._gpus)} GPU(s) ({names}), driver {self._driver}"

    def stats(self) -> dict[str, float | int]:
        live = sum(1 for gpu in self._gpus if not gpu.lost)
        return {"gpus": live, **self._counts}

    # -- worker thread ------------------------------------------------------------------------

    def _open_sync(self) -> None:
        nvml = self._nvml
        self._gpus, self._procs, self._trees = [], {}, {}  # a re-open starts afresh
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            reason = _INIT_REASONS.get(
                exc.value, f"nvmlInit failed: {exc} (NVML error {exc.value})"
            )
            raise NoData(reason) from None
        self._initialized = True
        try:
            self._discover()
        except nvml.NVMLError as exc:
            raise NoData(f"NVML failed while listing GPUs: {exc} (error {exc.value})") from None

    def _shutdown_sync(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _discover(self) -> None:
        nvml = self._nvml
        try:
            self._driver = str(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            self._driver = "unknown"
        found: list[tuple[int, Any, str, str]] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = str(nvml.nvmlDeviceGetUUID(handle))
                found.append((index, handle, uuid, str(nvml.nvmlDeviceGetName(handle))))
            except nvml.NVMLError as exc:
                if exc.value not in _LOST:
                    raise
                log.warning("NVML GPU %d is lost or needs a reset; leaving it out", index)
        if not found:
            raise NoData("no NVIDIA GPU found by NVML")
        uuids = [entry[2] for entry in found]
        picks, ordinals = self._pick(uuids, mixed=len({entry[3] for entry in found}) > 1)
        if not picks:
            raise NoData(f"no GPU selected (gpus = {self._config.gpus!r})")
        for position, ordinal in zip(picks, ordinals, strict=True):
            index, handle, uuid, name = found[position]
            try:
                architecture: int | None = int(nvml.nvmlDeviceGetArchitecture(handle))
            except nvml.NVMLError:
                architecture = None  # older drivers; probe the calls instead
            gpu = _Gpu(
                index=index,
                uuid=uuid,
                name=name,
                handle=handle,
                architecture=architecture,
                tags={"gpu": str(index), "uuid": uuid, "name": name},
                cuda_ordinal=ordinal,
            )
            if architecture is not None and architecture < ARCH_VOLTA:
                gpu.unsupported.add("energy")  # the counter exists from Volta on (as Zeus gates it)
            self._gpus.append(gpu)
        for gpu in self._gpus:
            self._prime(gpu)

    def _pick(self, uuids: Sequence[str], *, mixed: bool) -> tuple[list[int], list[int | None]]:
        spec = self._config.gpus.strip()
        if spec == "all":
            return list(range(len(uuids))), [None] * len(uuids)
        if spec == "visible":
            entries = parse_visible_devices(self._environ.get("CUDA_VISIBLE_DEVICES"))
            ordinals = entries and any(entry.lstrip("-").isdigit() for entry in entries)
            if ordinals and mixed and self._environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                # CUDA numbers fastest-first by default, NVML in PCI order. They agree on a machine
                # of identical GPUs; on a mixed one only UUIDs (or PCI_BUS_ID order) are exact.
                log.warning(
                    "CUDA_VISIBLE_DEVICES lists ordinals on a machine of different GPUs without"
                    " CUDA_DEVICE_ORDER=PCI_BUS_ID; reading them in PCI (NVML) order: list GPU"
                    " UUIDs to be exact"
                )
            picks = select_gpus(entries, uuids, stop_at_invalid=True)
            return picks, list(range(len(picks)))
        entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
        try:
            picks = select_gpus(entries, uuids, stop_at_invalid=False)
        except ValueError as exc:
            raise NoData(f"{exc} (GPUs here: {', '.join(uuids)})") from None
        return picks, [None] * len(picks)

    def _prime(self, gpu: _Gpu) -> None:
        """Move the sample cursors past what the driver buffered before we opened."""
        nvml = self._nvml
        try:
            if self._config.samples:
                for stype, _, _ in _SAMPLE_TYPES:
                    cursor = gpu.cursors.setdefault(stype, _Cursor())
                    got = self._call(
                        gpu, f"samples:{stype}", nvml.nvmlDeviceGetSamples, gpu.handle, stype, 0,
                        empty_codes=(ERROR_NOT_FOUND,),
                    )  # fmt: skip
                    if got:
                        cursor.last_us = max((t for t, _ in decode_samples(*got)), default=0)
            if "energy" not in gpu.unsupported:
                mj = self._call(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
                if mj is not None:
                    gpu.energy.update(int(mj))
        except _GpuLost as lost:
            self._lose(gpu, lost.code)

    def _tick(self, now_ns: int, roots: frozenset[int]) -> list[Point]:
        points: list[Point] = []
        processes: list[tuple[_Gpu, int, int | None, tuple[int, int] | None]] = []
        transient_before = self._counts["errors_transient"]
        for gpu in self._gpus:
            if gpu.lost:
                continue
            mark = len(points)
            try:
                self._read_gpu(gpu, now_ns, points)
                if self._config.processes:
                    processes.extend(self._read_processes(gpu, now_ns))
            except _GpuLost as lost:
                del points[mark:]  # what this GPU said in its last tick is not to be trusted
                processes = [entry for entry in processes if entry[0] is not gpu]
                self._lose(gpu, lost.code)
        if self._config.processes:
            self._process_points(now_ns, processes, roots, points)
        errors = self._counts["errors_transient"] - transient_before
        if not points and errors:
            raise NrgError(f"every NVML read failed this tick ({errors} errors)")
        return points

    def _lose(self, gpu: _Gpu, code: int) -> None:
        gpu.lost = True
        self._counts["gpus_lost"] += 1
        log.warning(
            "GPU %d (%s, %s) lost (NVML error %d): no longer read",
            gpu.index,
            gpu.name,
            gpu.uuid,
            code,
        )

    def _call(
        self,
        gpu: _Gpu,
        key: str,
        function: Callable[..., Any],
        *args: Any,
        empty_codes: Collection[int] = (),
        **kwargs: Any,
    ) -> Any:
        """One NVML call for one reading of one GPU; None when there is nothing to use.

        Raises _GpuLost; records NOT_SUPPORTED (never asked again) and transient errors.
        """
        if key in gpu.unsupported:
            return None
        nvml = self._nvml
        try:
            value = function(*args, **kwargs)
        except nvml.NVMLError as exc:
            code = int(exc.value)
            if code in empty_codes:
                self._recovered(gpu, key)
                return None
            if code in _LOST:
                raise _GpuLost(code) from None
            if code in _UNSUPPORTED:
                self._unsupported(gpu, key, f"{exc} (NVML error {code})")
                return None
            self._counts["errors_transient"] += 1
            if key not in gpu.failing:
                log.warning("GPU %d %s: NVML error %d (%s); retrying", gpu.index, key, code, exc)
            gpu.failing[key] = code
            return None
        except nvml.NVMLLibraryMismatchError:
            # The unversioned wrapper found no matching symbol in this driver.
            self._unsupported(gpu, key, "function missing in this driver")
            return None
        self._recovered(gpu, key)
        return value

    def _recovered(self, gpu: _Gpu, key: str) -> None:
        if gpu.failing and gpu.failing.pop(key, None) is not None:
            log.info("GPU %d %s: reading again", gpu.index, key)

    def _unsupported(self, gpu: _Gpu, key: str, why: str) -> None:
        gpu.unsupported.add(key)
        log.info("GPU %d (%s): %s not supported: %s; skipped from now on", gpu.index, gpu.name,
                 key, why)  # fmt: skip

    def _read_gpu(self, gpu: _Gpu, now_ns: int, points: list[Point]) -> None:
        nvml, call, handle = self._nvml, self._call, gpu.handle
        fields: dict[str, FieldValue] = {}
        instant: float | None = None
        values = call(gpu, "power_instant", nvml.nvmlDeviceGetFieldValues, handle,
                      [FI_DEV_POWER_INSTANT])  # fmt: skip
        if values is not None:
            element = values[0]
            if element.nvmlReturn == NVML_SUCCESS:
                instant = value_of(element.valueType, element.value) / 1000.0
            elif element.nvmlReturn in _LOST:
                raise _GpuLost(element.nvmlReturn)
            elif element.nvmlReturn in _UNSUPPORTED:
                self._unsupported(gpu, "power_instant", f"field 186: error {element.nvmlReturn}")
            else:
                self._counts["errors_transient"] += 1
        usage = call(gpu, "power_usage", nvml.nvmlDeviceGetPowerUsage, handle)
        if usage is not None:
            pre_ampere = gpu.architecture is not None and gpu.architecture < ARCH_AMPERE
            if not pre_ampere:
                fields["power_average_watts"] = usage / 1000.0
            elif "power_instant" in gpu.unsupported:
                instant = usage / 1000.0  # instantaneous before Ampere
        if instant is not None:
            fields["power_watts"] = instant
        if "energy" not in gpu.unsupported:
            mj = call(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            if mj is not None:
                fields["energy_joules"] = gpu.energy.update(int(mj))
        if "energy" in gpu.unsupported and instant is not None:
            if gpu.integrator is None:
                gpu.integrator = _Integrator()
            fields["energy_integrated_joules"] = gpu.integrator.update(now_ns, instant)
        rates = call(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            fields["utilization_ratio"] = rates.gpu / 100.0
            fields["memory_utilization_ratio"] = rates.memory / 100.0
        self._read_memory(gpu, fields)
        self._read_temperature(gpu, fields)
        sm = call(gpu, "sm_clock", nvml.nvmlDeviceGetClockInfo, handle, CLOCK_SM)
        if sm is not None:
            fields["sm_clock_hertz"] = int(sm) * 1_000_000
        mem = call(gpu, "memory_clock", nvml.nvmlDeviceGetClockInfo, handle, CLOCK_MEM)
        if mem is not None:
            fields["memory_clock_hertz"] = int(mem) * 1_000_000
        limit = call(gpu, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit is not None:
            fields["power_limit_watts"] = limit / 1000.0
        if fields:
            points.append(Point("gpu", gpu.tags, fields, now_ns))
        if self._config.samples:
            self._read_samples(gpu, now_ns, points)

    def _read_memory(self, gpu: _Gpu, fields: dict[str, FieldValue]) -> None:
        nvml = self._nvml
        info = self._call(gpu, "memory_v2", nvml.nvmlDeviceGetMemoryInfo, gpu.handle,
                          version=MEMORY_V2)  # fmt: skip
        if info is not None:
            fields["memory_reserved_bytes"] = int(info.reserved)
        elif "memory_v2" in gpu.unsupported:
            # Older driver: v1, whose `used` includes the memory the driver reserves.
            info = self._call(gpu, "memory", nvml.nvmlDeviceGetMemoryInfo, gpu.handle)
        if info is not None:
            fields["memory_used_bytes"] = int(info.used)
            fields["memory_total_bytes"] = int(info.total)

    def _read_temperature(self, gpu: _Gpu, fields: dict[str, FieldValue]) -> None:
        nvml = self._nvml
        celsius = self._call(gpu, "temperature_v", nvml.nvmlDeviceGetTemperatureV, gpu.handle,
                             TEMPERATURE_GPU)  # fmt: skip
        if celsius is None and "temperature_v" in gpu.unsupported:
            # A driver without the versioned call: the deprecated one still answers there.
            celsius = self._call(gpu, "temperature", nvml.nvmlDeviceGetTemperature, gpu.handle,
                                 TEMPERATURE_GPU)  # fmt: skip
        if celsius is not None:
            fields["temperature_celsius"] = int(celsius)

    def _read_samples(self, gpu: _Gpu, now_ns: int, points: list[Point]) -> None:
        by_time: dict[int, dict[str, FieldValue]] = {}
        for stype, name, scale in _SAMPLE_TYPES:
            cursor = gpu.cursors.setdefault(stype, _Cursor())
            if cursor.progress_ns is None:
                cursor.progress_ns = now_ns
            probed = now_ns - cursor.progress_ns >= _STALE_NS
            got = self._call(
                gpu, f"samples:{stype}", self._nvml.nvmlDeviceGetSamples, gpu.handle, stype,
                0 if probed else cursor.last_us, empty_codes=(ERROR_NOT_FOUND,),
            )  # fmt: skip
            if probed:
                cursor.progress_ns = now_ns
            if not got:
                continue
            decoded = decode_samples(*got)
            stamps = [stamp for stamp, _ in decoded]
            keep, cursor.last_us, went_back = select_new_samples(
                cursor.last_us, stamps, probed=probed
            )
            if went_back:
                self._went_back(gpu)
            if keep:
                cursor.progress_ns = now_ns
            for i in keep:
                stamp, value = decoded[i]
                by_time.setdefault(stamp, {})[name] = value * scale
        for stamp in sorted(by_time):
            points.append(Point("gpu_sample", gpu.tags, by_time[stamp], stamp * 1000))
        self._counts["samples"] += len(by_time)

    def _went_back(self, gpu: _Gpu) -> None:
        self._counts["sample_cursor_resets"] += 1
        if not gpu.jump_logged:
            gpu.jump_logged = True
            log.warning(
                "GPU %d: driver sample timestamps went backwards (driver reload?); cursor reset"
                " (further resets are only counted)",
                gpu.index,
            )

    def _read_processes(
        self, gpu: _Gpu, now_ns: int
    ) -> list[tuple[_Gpu, int, int | None, tuple[int, int] | None]]:
        """(gpu, pid, used bytes or None, (sm %, memory %) or None) per running compute process."""
        nvml = self._nvml
        running = self._call(
            gpu, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, gpu.handle
        )
        if not running:
            return []
        latest: dict[int, tuple[int, int, int]] = {}
        for sample in self._process_samples(gpu, now_ns):
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, int(sample.smUtil), int(sample.memUtil))
        out: list[tuple[_Gpu, int, int | None, tuple[int, int] | None]] = []
        for process in running:
            pid = int(process.pid)
            used = None if process.usedGpuMemory is None else int(process.usedGpuMemory)
            util = latest.get(pid)
            out.append((gpu, pid, used, None if util is None else (util[1], util[2])))
        return out

    def _process_samples(self, gpu: _Gpu, now_ns: int) -> list[Any]:
        nvml, cursor = self._nvml, gpu.process_cursor
        # NVML_SUCCESS (0) raised from the size call means "no samples" in the Python binding.
        empty = (ERROR_NOT_FOUND, NVML_SUCCESS)
        samples: Any = None
        if cursor.progress_ns is None:
            cursor.progress_ns = now_ns
        # Processes run but nothing new for a while: re-read from 0 in case the clock went back.
        probed = now_ns - cursor.progress_ns >= _STALE_NS
        since = 0 if probed else cursor.last_us
        if probed:
            cursor.progress_ns = now_ns
        if not gpu.legacy_process_util:
            samples = self._call(
                gpu, "process_utilization", nvml.nvmlDeviceGetProcessesUtilizationInfo,
                gpu.handle, since, empty_codes=empty,
            )  # fmt: skip
            if "process_utilization" in gpu.unsupported:
                gpu.unsupported.discard("process_utilization")
                gpu.legacy_process_util = True  # older driver: the pre-12.4 call
        if gpu.legacy_process_util:
            samples = self._call(
                gpu, "process_utilization_legacy", nvml.nvmlDeviceGetProcessUtilization,
                gpu.handle, since, empty_codes=empty,
            )  # fmt: skip
        if not samples:
            return []
        stamps = [int(sample.timeStamp) for sample in samples]
        keep, cursor.last_us, went_back = select_new_samples(cursor.last_us, stamps, probed=probed)
        if went_back:
            self._went_back(gpu)
        if keep:
            cursor.progress_ns = now_ns
        return [samples[i] for i in keep]

    def _start_time(self, pid: int) -> tuple[int, int] | None:
        try:
            return parse_proc_stat((self._proc / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            return None  # exited, or another pid namespace

    def _ancestors(self, pid: int) -> tuple[int, ...]:
        chain: list[int] = []
        current = pid
        while len(chain) < _MAX_ANCESTRY:
            stat = self._start_time(current)
            if stat is None or stat[0] <= 1:
                break
            current = stat[0]
            chain.append(current)
        return tuple(chain)

    def _process_points(
        self,
        now_ns: int,
        processes: Iterable[tuple[_Gpu, int, int | None, tuple[int, int] | None]],
        roots: frozenset[int],
        points: list[Point],
    ) -> None:
        seen: set[tuple[int, int | None]] = set()
        tree_now: dict[int, list[int]] = {root: [0, 0] for root in roots}
        for gpu, pid, used, util in processes:
            stat = self._start_time(pid)
            key = (pid, None if stat is None else stat[1])
            if stat is None:
                # Exited since NVML listed it (or another pid namespace): nothing says it is a
                # new process, so it stays the one last seen under this pid.
                key = next((known for known in self._procs if known[0] == pid), key)
            state = self._procs.get(key)
            if state is None:
                ancestors = () if stat is None else (stat[0], *self._ancestors(stat[0]))
                state = self._procs[key] = _ProcState(ancestors)
            seen.add(key)
            fields: dict[str, FieldValue] = {}
            if used is not None:
                state.memory_max = max(state.memory_max, used)
                fields["memory_used_bytes"] = used
                fields["memory_used_max_bytes"] = state.memory_max
                if pid in roots:
                    tree_now[pid][0] += used
                else:
                    root = next((a for a in state.ancestors if a in roots), None)
                    if root is not None:
                        tree_now[root][1] += used
            if util is not None:
                fields["sm_utilization_ratio"] = util[0] / 100.0
                fields["memory_utilization_ratio"] = util[1] / 100.0
            if fields:
                tags = {"gpu": gpu.tags["gpu"], "uuid": gpu.uuid, "pid": str(pid)}
                points.append(Point("gpu_process", tags, fields, now_ns))
        for key in [key for key in self._procs if key not in seen]:
            del self._procs[key]  # no longer on any GPU: a later process with this pid is new
        live_trees: dict[tuple[int, int | None], list[int]] = {}
        for root, (main, descendants) in sorted(tree_now.items()):
            stat = self._start_time(root)
            key = (root, None if stat is None else stat[1])
            peaks = self._trees.get(key, [0, 0, 0])
            current = (main, descendants, main + descendants)
            peaks = [max(peak, value) for peak, value in zip(peaks, current, strict=True)]
            live_trees[key] = peaks
            for scope, value, peak in zip(
                ("main", "descendants", "combined"), current, peaks, strict=True
            ):
                tags = {"tree": str(root), "scope": scope}
                fields = {"memory_used_bytes": value, "memory_used_max_bytes": peak}
                points.append(Point("gpu_process", tags, fields, now_ns))
        self._trees = live_trees
