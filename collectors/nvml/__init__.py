"""NVIDIA GPUs through NVML, via the ``pynvml`` module of NVIDIA's ``nvidia-ml-py`` distribution.

Calls read (``pynvml`` names; units as NVML returns them → as emitted):

- ``nvmlDeviceGetFieldValues([NVML_FI_DEV_POWER_INSTANT])`` mW → ``gpu.power_watts`` (instant),
  in one call with ``NVML_FI_DEV_POWER_AVERAGE`` (185) → ``gpu.power_average_watts`` on Ampere and
  newer except GA100;
- ``nvmlDeviceGetPowerUsage`` mW, where field 185 gave nothing → ``gpu.power_average_watts``: a
  1 s trailing average on Ampere and newer except GA100 (A100, A30, A800); on GA100 and older
  GPUs it is instantaneous, is not emitted as an average, and stands in for ``power_watts`` when
  field 186 is not supported;
- ``nvmlDeviceGetTotalEnergyConsumption`` mJ since driver load (Volta+) → ``gpu.energy_joules``
  since the collector opened, reloads corrected, read every ``energy_interval`` (the call costs
  milliseconds of CPU); without the counter, instant power integrated over the agent's ticks →
  ``gpu.energy_integrated_joules``;
- ``nvmlDeviceGetUtilizationRates`` % → ``utilization_ratio``, ``memory_utilization_ratio``;
- ``nvmlDeviceGetMemoryInfo`` (v2, else v1) bytes → ``memory_used_bytes``, ``memory_total_bytes``,
  ``memory_reserved_bytes`` (v2 only);
- ``nvmlDeviceGetTemperatureV`` °C → ``temperature_celsius``;
- ``nvmlDeviceGetClockInfo(SM | MEM)`` MHz → ``sm_clock_hertz``, ``memory_clock_hertz``;
- ``nvmlDeviceGetEnforcedPowerLimit`` mW → ``power_limit_watts``;
- ``nvmlDeviceGetSamples`` (total power mW, GPU and memory utilisation %), everything the driver
  buffered since the last seen timestamp, each at its own driver timestamp (µs → ns) →
  ``gpu_sample`` points, emitted before the tick's ``gpu`` point;
- ``nvmlDeviceGetComputeRunningProcesses`` bytes and ``nvmlDeviceGetProcessesUtilizationInfo``
  (else the older ``nvmlDeviceGetProcessUtilization``) % → ``gpu_process`` points per process (the
  pid an integer field and an ``instance`` tag, the process's slot on that GPU; or the pid as a
  tag with ``pid_tag = true``), and per tracked process tree (main / descendants / combined,
  current and maximum GPU memory);
- ``<root>/proc/<pid>/stat`` (parent pid, start time) to key processes by (pid, start time) and
  to find the tracked trees they belong to.

Power, utilisation, memory and temperature are read every tick; the energy counter (and the
power sample buffer with it) every ``energy_interval``; clocks, power limit, processes and the
three sample buffers every ``detail_interval``; per-process utilisation every
``process_interval``. A buffer found to have overflowed between two reads makes that GPU's
buffers be read twice as often.

Every NVML call is a blocking ctypes call: all of them run on one worker thread owned by the
collector, one executor job per tick. Errors map to four outcomes: *not supported* (that reading
is skipped for that GPU from then on, logged once), *GPU lost* (that GPU is stopped, logged),
*library or driver absent* (``open`` raises :class:`NoData` with the reason) and anything else
(transient: counted, logged once per episode, retried next tick).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from acquisition.advancing import not_advancing
from acquisition.api import Emit, PluginContext
from acquisition.errors import NoData, NrgError, install_hint
from acquisition.point import FieldValue, Point

from .config import NvmlConfig
from .parse import (
    _INIT_REASONS,
    _LOST,
    _SAMPLE_TYPES,
    _STALE_NS,
    ARCH_VOLTA,
    ERROR_NOT_FOUND,
    NVML_SUCCESS,
    _is_number,
    decode_samples,
    is_ga100,
    lost_samples,
    parse_proc_stat,
    parse_visible_devices,
    power_usage_is_instant,
    select_gpus,
    select_new_samples,
    value_of,
)
from .processes import ProcessAccounting, ProcessReading
from .readings import Readings
from .state import Cadence, Cursor, Gpu, GpuLost, Integrator

__all__ = [
    "NvmlCollector",
    "NvmlConfig",
    "decode_samples",
    "is_ga100",
    "lost_samples",
    "parse_proc_stat",
    "parse_visible_devices",
    "power_usage_is_instant",
    "select_gpus",
    "select_new_samples",
    "value_of",
]

log = logging.getLogger(__name__)


class NvmlCollector(Readings):
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
        self._gpus: list[Gpu] = []
        self._driver = ""
        self._accounting = ProcessAccounting(self._proc, pid_tag=config.pid_tag)
        self._energy_due = Cadence(int(config.energy_interval * 1e9))
        self._detail_due = Cadence(int(config.detail_interval * 1e9))
        self._process_due = Cadence(int(config.process_interval * 1e9))
        self._counts = {
            "gpus_lost": 0,
            "errors_transient": 0,
            "samples": 0,
            "samples_lost": 0,
            "sample_cursor_resets": 0,
            "ticks_skipped_busy": 0,
        }
        self._read_lag_ns_max = 0

    # -- lifecycle (event loop) ---------------------------------------------------------------

    async def open(self) -> None:
        if self._nvml is None and self._config.simulate:
            from .sim import binding  # the GPUs nrg-collect simulate nvml runs

            self._nvml = binding(self._config.simulate)
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NoData(f"nvidia-ml-py is not installed ({install_hint('nvml')})") from exc
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
        self._busy = self._executor.submit(self._timed_tick, now_ns, roots, time.monotonic_ns())
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

    def read_all_next(self) -> None:
        """The next tick reads everything, whatever its cadence: the agent's last reading at
        stop brings the counter and the sample buffers up to the end of the span."""
        for cadence in (self._energy_due, self._detail_due, self._process_due):
            cadence.last_ns = None

    def describe(self) -> str:
        names = ", ".join(f"{gpu.index}: {gpu.name}" for gpu in self._gpus)
        return f"{len(self._gpus)} GPU(s) ({names}), driver {self._driver}"

    def not_advancing(self) -> str | None:
        """``not advancing: …`` when no GPU's energy counter moves; else None."""
        return not_advancing([gpu.advance for gpu in self._gpus if gpu.advance is not None])

    def stats(self) -> dict[str, float | int]:
        live = sum(1 for gpu in self._gpus if not gpu.lost)
        return {"gpus": live, **self._counts, "read_lag_max_seconds": self._read_lag_ns_max / 1e9}

    # -- worker thread ------------------------------------------------------------------------

    def _open_sync(self) -> None:
        nvml = self._nvml
        self._gpus = []  # a re-open starts afresh
        self._accounting.reset()
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
            gpu = Gpu(
                index=index,
                uuid=uuid,
                name=name,
                handle=handle,
                architecture=architecture,
                tags={"gpu": str(index), "uuid": uuid, "name": name},
                cuda_ordinal=ordinal,
                power_usage_instant=power_usage_is_instant(architecture, name),
                buffers=Cadence(int(self._config.detail_interval * 1e9)),
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
            ordinals = entries and any(_is_number(entry) for entry in entries)
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

    def _prime(self, gpu: Gpu) -> None:
        """Move the sample cursors past what the driver buffered before we opened."""
        nvml = self._nvml
        try:
            if self._config.samples:
                for stype, _, _ in _SAMPLE_TYPES:
                    cursor = gpu.cursors.setdefault(stype, Cursor())
                    got = self._call(
                        gpu, f"samples:{stype}", nvml.nvmlDeviceGetSamples, gpu.handle, stype, 0,
                        empty_codes=(ERROR_NOT_FOUND,),
                    )  # fmt: skip
                    if got:
                        stamps = [t for t, _ in decode_samples(*got)]
                        cursor.last_us, cursor.depth = max(stamps, default=0), len(stamps)
            if "energy" not in gpu.unsupported:
                mj = self._call(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
                if mj is not None:
                    gpu.energy.update(int(mj))
        except GpuLost as lost:
            self._lose(gpu, lost.code)

    def _timed_tick(self, now_ns: int, roots: frozenset[int], submitted_ns: int) -> list[Point]:
        """:meth:`_tick`, keeping the longest it ended after the tick handed it over: how much
        later than its points' time (the tick's) a reading may really have been made."""
        try:
            return self._tick(now_ns, roots)
        finally:
            lag = time.monotonic_ns() - submitted_ns
            self._read_lag_ns_max = max(self._read_lag_ns_max, lag)

    def _tick(self, now_ns: int, roots: frozenset[int]) -> list[Point]:
        points: list[Point] = []
        processes: list[ProcessReading] = []
        transient_before = self._counts["errors_transient"]
        energy, detail = self._energy_due.due(now_ns), self._detail_due.due(now_ns)
        utilisation = detail and self._process_due.due(now_ns)
        for gpu in self._gpus:
            if gpu.lost:
                continue
            mark = len(points)
            try:
                self._read_gpu(gpu, now_ns, points, energy=energy, detail=detail)
                if self._config.processes and detail:
                    processes.extend(self._read_processes(gpu, now_ns, utilisation))
            except GpuLost as lost:
                del points[mark:]  # what this GPU said in its last tick is not to be trusted
                processes = [entry for entry in processes if entry[0] is not gpu]
                self._lose(gpu, lost.code)
        if self._config.processes and detail:
            self._accounting.points(now_ns, processes, roots, points)
        errors = self._counts["errors_transient"] - transient_before
        if not points and errors:
            raise NrgError(f"every NVML read failed this tick ({errors} errors)")
        return points

    def _lose(self, gpu: Gpu, code: int) -> None:
        gpu.lost = True
        self._counts["gpus_lost"] += 1
        log.warning(
            "GPU %d (%s, %s) lost (NVML error %d): no longer read",
            gpu.index,
            gpu.name,
            gpu.uuid,
            code,
        )

    def _read_gpu(
        self, gpu: Gpu, now_ns: int, points: list[Point], *, energy: bool, detail: bool
    ) -> None:
        """One GPU's ``gpu`` point, after its ``gpu_sample`` points, so that a reader has the
        samples up to the counter reading when the counter arrives."""
        nvml, call, handle = self._nvml, self._call, gpu.handle
        fields: dict[str, FieldValue] = {}
        instant = self._read_power(gpu, fields)
        if energy and "energy" not in gpu.unsupported:
            mj = call(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            joules = None if mj is None else gpu.energy.update(int(mj))
            if joules is not None and gpu.energy_moves(joules, now_ns):
                fields["energy_joules"] = joules
        if "energy" in gpu.unsupported and instant is not None:
            if gpu.integrator is None:
                gpu.integrator = Integrator()
            fields["energy_integrated_joules"] = gpu.integrator.update(now_ns, instant)
        rates = call(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            fields["utilization_ratio"] = rates.gpu / 100.0
            fields["memory_utilization_ratio"] = rates.memory / 100.0
        self._read_memory(gpu, fields)
        self._read_temperature(gpu, fields)
        if detail:
            self._read_clocks(gpu, fields)
        if self._config.samples:
            types = self._buffers_due(gpu, now_ns, energy=energy, detail=detail)
            if types:
                self._read_samples(gpu, now_ns, points, types)
        if fields:
            points.append(Point("gpu", gpu.tags, fields, now_ns))

    def _buffers_due(
        self, gpu: Gpu, now_ns: int, *, energy: bool, detail: bool
    ) -> Sequence[tuple[int, str, float]]:
        """Which sample buffers this tick reads (each read costs about 0.3 ms of CPU): all three
        with the detail reads (or sooner where a buffer overflowed, see :meth:`_count_lost`); the
        power buffer also with each counter reading, so that the samples up to a reading arrive
        with it, and on every tick for a GPU without the counter (they are its energy then)."""
        if detail:
            gpu.buffers.mark(now_ns)
            return _SAMPLE_TYPES
        if gpu.buffers.due(now_ns):
            return _SAMPLE_TYPES
        if energy or "energy" in gpu.unsupported:
            return _SAMPLE_TYPES[:1]
        return ()

    def _read_samples(
        self, gpu: Gpu, now_ns: int, points: list[Point], types: Sequence[tuple[int, str, float]]
    ) -> None:
        by_time: dict[int, dict[str, FieldValue]] = {}
        lost: dict[str, int] = {}
        stale_ns = max(_STALE_NS, 2 * gpu.buffers.period_ns)
        for stype, name, scale in types:
            cursor = gpu.cursors.setdefault(stype, Cursor())
            if cursor.progress_ns is None:
                cursor.progress_ns = now_ns
            probed = now_ns - cursor.progress_ns >= stale_ns
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
            last_us = cursor.last_us
            keep, cursor.last_us, went_back = select_new_samples(last_us, stamps, probed=probed)
            if went_back:
                self._went_back(gpu)
            elif not probed:
                lost[name] = lost_samples(last_us, stamps, cursor.depth)
            cursor.depth = max(cursor.depth, len(stamps))
            if keep:
                cursor.progress_ns = now_ns
            for i in keep:
                stamp, value = decoded[i]
                by_time.setdefault(stamp, {})[name] = value * scale
        for stamp in sorted(by_time):
            points.append(Point("gpu_sample", gpu.tags, by_time[stamp], stamp * 1000))
        self._counts["samples"] += len(by_time)
        self._count_lost(gpu, {name: n for name, n in lost.items() if n})

    def _count_lost(self, gpu: Gpu, lost: dict[str, int]) -> None:
        """Samples the buffers dropped before this read (by field): counted, and this GPU's
        buffers read twice as often from then on (logged the first time)."""
        if not lost:
            return
        self._counts["samples_lost"] += sum(lost.values())
        gpu.buffers.period_ns //= 2
        level = logging.DEBUG if gpu.loss_logged else logging.WARNING
        gpu.loss_logged = True
        log.log(
            level,
            "GPU %d: the driver's sample buffers overflowed between two reads (%s samples lost);"
            " reading them every %.3g s from now on",
            gpu.index,
            ", ".join(f"{name} {n}" for name, n in lost.items()),
            gpu.buffers.period_ns / 1e9,
        )

    def _went_back(self, gpu: Gpu) -> None:
        self._counts["sample_cursor_resets"] += 1
        if not gpu.jump_logged:
            gpu.jump_logged = True
            log.warning(
                "GPU %d: driver sample timestamps went backwards (driver reload?); cursor reset"
                " (further resets are only counted)",
                gpu.index,
            )

    def _read_processes(self, gpu: Gpu, now_ns: int, utilisation: bool) -> list[ProcessReading]:
        """(gpu, pid, used bytes or None, (sm %, memory %) or None) per running compute process;
        the utilisation only when ``utilisation`` (every ``process_interval``)."""
        nvml = self._nvml
        running = self._call(
            gpu, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, gpu.handle
        )
        if not running:
            return []
        latest: dict[int, tuple[int, int, int]] = {}
        for sample in self._process_samples(gpu, now_ns) if utilisation else ():
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, int(sample.smUtil), int(sample.memUtil))
        out: list[ProcessReading] = []
        for process in running:
            pid = int(process.pid)
            used = None if process.usedGpuMemory is None else int(process.usedGpuMemory)
            util = latest.get(pid)
            out.append((gpu, pid, used, None if util is None else (util[1], util[2])))
        return out

    def _process_samples(self, gpu: Gpu, now_ns: int) -> list[Any]:
        nvml, cursor = self._nvml, gpu.process_cursor
        # NVML_SUCCESS (0) raised from the size call means "no samples" in the Python binding.
        empty = (ERROR_NOT_FOUND, NVML_SUCCESS)
        samples: Any = None
        if cursor.progress_ns is None:
            cursor.progress_ns = now_ns
        # Processes run but nothing new for a while: re-read from 0 in case the clock went back.
        probed = now_ns - cursor.progress_ns >= max(_STALE_NS, 2 * self._process_due.period_ns)
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
