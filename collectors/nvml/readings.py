"""The NVML collector's single readings of one GPU, and how each call's errors are handled."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from acquisition.point import FieldValue

from .parse import (
    _LOST,
    _UNSUPPORTED,
    CLOCK_MEM,
    CLOCK_SM,
    FI_DEV_POWER_AVERAGE,
    FI_DEV_POWER_INSTANT,
    MEMORY_V2,
    NVML_SUCCESS,
    TEMPERATURE_GPU,
    value_of,
)
from .state import Gpu, GpuLost

__all__ = ["Readings"]

log = logging.getLogger("collectors.nvml")


class Readings:
    """Mixed into the collector: one NVML call per reading, errors sorted into their outcomes."""

    _nvml: Any
    _counts: dict[str, int]

    def _call(
        self,
        gpu: Gpu,
        key: str,
        function: Callable[..., Any],
        *args: Any,
        empty_codes: Collection[int] = (),
        **kwargs: Any,
    ) -> Any:
        """One NVML call for one reading of one GPU; None when there is nothing to use.

        Raises GpuLost; records NOT_SUPPORTED (never asked again) and transient errors.
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
                raise GpuLost(code) from None
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

    def _recovered(self, gpu: Gpu, key: str) -> None:
        if gpu.failing and gpu.failing.pop(key, None) is not None:
            log.info("GPU %d %s: reading again", gpu.index, key)

    def _unsupported(self, gpu: Gpu, key: str, why: str) -> None:
        gpu.unsupported.add(key)
        log.info("GPU %d (%s): %s not supported: %s; skipped from now on", gpu.index, gpu.name,
                 key, why)  # fmt: skip

    def _read_power(self, gpu: Gpu, fields: dict[str, FieldValue]) -> float | None:
        """``power_watts`` (instantaneous) and ``power_average_watts`` (1 s average); returns the
        instantaneous power in W, or None."""
        got = self._read_power_fields(gpu)
        instant = got.get("power_instant")
        usage = None
        if "power_average" in got:
            fields["power_average_watts"] = got["power_average"]
        else:
            usage = self._call(gpu, "power_usage", self._nvml.nvmlDeviceGetPowerUsage, gpu.handle)
        if usage is not None:
            if not gpu.power_usage_instant:
                fields["power_average_watts"] = usage / 1000.0
            elif "power_instant" in gpu.unsupported:
                instant = usage / 1000.0  # instantaneous before Ampere and on GA100
        if instant is not None:
            fields["power_watts"] = instant
        return instant

    def _read_power_fields(self, gpu: Gpu) -> dict[str, float]:
        """Fields 186 (instant) and, where it is a 1 s average, 185 in one call: W by reading."""
        wanted = [
            (fid, key)
            for fid, key in ((FI_DEV_POWER_INSTANT, "power_instant"),
                             (FI_DEV_POWER_AVERAGE, "power_average"))
            if key not in gpu.unsupported
            and (fid == FI_DEV_POWER_INSTANT or gpu.power_usage_instant is False)
        ]  # fmt: skip
        if not wanted:
            return {}
        values = self._call(gpu, "power_fields", self._nvml.nvmlDeviceGetFieldValues, gpu.handle,
                            [fid for fid, _ in wanted])  # fmt: skip
        if values is None and "power_fields" in gpu.unsupported:
            gpu.unsupported.update(key for _, key in wanted)
        got: dict[str, float] = {}
        for (fid, key), element in zip(wanted, values or (), strict=False):
            if element.nvmlReturn == NVML_SUCCESS:
                got[key] = value_of(element.valueType, element.value) / 1000.0
            elif element.nvmlReturn in _LOST:
                raise GpuLost(element.nvmlReturn)
            elif element.nvmlReturn in _UNSUPPORTED:
                self._unsupported(gpu, key, f"field {fid}: error {element.nvmlReturn}")
            else:
                self._counts["errors_transient"] += 1
        return got

    def _read_clocks(self, gpu: Gpu, fields: dict[str, FieldValue]) -> None:
        nvml, call, handle = self._nvml, self._call, gpu.handle
        sm = call(gpu, "sm_clock", nvml.nvmlDeviceGetClockInfo, handle, CLOCK_SM)
        if sm is not None:
            fields["sm_clock_hertz"] = int(sm) * 1_000_000
        mem = call(gpu, "memory_clock", nvml.nvmlDeviceGetClockInfo, handle, CLOCK_MEM)
        if mem is not None:
            fields["memory_clock_hertz"] = int(mem) * 1_000_000
        limit = call(gpu, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit is not None:
            fields["power_limit_watts"] = limit / 1000.0

    def _read_memory(self, gpu: Gpu, fields: dict[str, FieldValue]) -> None:
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

    def _read_temperature(self, gpu: Gpu, fields: dict[str, FieldValue]) -> None:
        nvml = self._nvml
        celsius = self._call(gpu, "temperature_v", nvml.nvmlDeviceGetTemperatureV, gpu.handle,
                             TEMPERATURE_GPU)  # fmt: skip
        if celsius is None and "temperature_v" in gpu.unsupported:
            # A driver without the versioned call: the deprecated one still answers there.
            celsius = self._call(gpu, "temperature", nvml.nvmlDeviceGetTemperature, gpu.handle,
                                 TEMPERATURE_GPU)  # fmt: skip
        if celsius is not None:
            fields["temperature_celsius"] = int(celsius)
