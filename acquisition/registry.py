"""Plugin names → import paths, loaded lazily so the core never imports a plugin module itself.

Loading by name keeps the layer contract (``acquisition`` imports neither ``collectors`` nor
``sinks``) and keeps optional dependencies optional: ``pynvml`` is imported only when the nvml
collector is used.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acquisition.api import PluginContext
from acquisition.config import COLLECTOR_KEYS, SINK_KEYS, PluginSpec, build_dataclass
from acquisition.errors import ConfigError, install_hint

__all__ = [
    "COLLECTORS",
    "EXTRA_MISSING",
    "PROCESSORS",
    "QUICK_CHECKS",
    "REQUIRES",
    "SINKS",
    "build_plugin",
    "check_extras",
    "load_class",
    "quick_unavailable",
]

COLLECTORS: dict[str, str] = {
    "procfs": "collectors.procfs:ProcfsCollector",
    "rapl": "collectors.rapl:RaplCollector",
    "nvml": "collectors.nvml:NvmlCollector",
    "emonpi": "collectors.emonpi:EmonPiCollector",
    "hooks": "collectors.hooks:HooksCollector",
}
SINKS: dict[str, str] = {
    "file": "sinks.file:FileSink",
    "stdout": "sinks.stdout:StdoutSink",
    "influxdb": "sinks.influxdb:InfluxDBSink",
}
PROCESSORS: dict[str, str] = {
    "process_power": "acquisition.processors.process_power:ProcessPowerShare",
    "attribution": "acquisition.processors.attribution:EnergyAttribution",
    "forecast": "acquisition.processors.forecast:RunForecast",
    "carbon": "acquisition.processors.carbon:CarbonRecord",
}
REQUIRES: dict[str, tuple[str, tuple[str, ...]]] = {
    "influxdb": ("influx", ("aiohttp", "influxdb_client")),
}
"""Plugins that import optional packages only once running: (their extra, those packages),
checked when the agent starts or lists, so a missing extra is a start-up error."""
EXTRA_MISSING = "[{where}] needs {module}, which is not installed: {hint}"

_COMMON_KEYS = {"collectors": COLLECTOR_KEYS, "sinks": SINK_KEYS}
_TABLES = {"collectors": COLLECTORS, "sinks": SINKS, "processors": PROCESSORS}


def _rapl_absent() -> str | None:
    powercap = Path("/sys/class/powercap")
    try:
        zones = any(p.name.startswith("intel-rapl") for p in powercap.iterdir())
    except OSError:
        zones = False
    if zones or Path("/dev/cpu/0/msr").exists():
        return None
    if Path("/sys/bus/event_source/devices/power").exists():
        return None
    return f"no powercap zones in {powercap}, no MSR device, no power PMU"


def _nvidia_absent() -> str | None:
    nodes = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")  # dxg: WSL2
    if any(os.path.exists(n) for n in nodes):
        return None
    return "no NVIDIA driver here (none of " + ", ".join(nodes) + " exists)"


_SERIAL_PORTS = ("/dev/ttyAMA0", "/dev/serial0", "/dev/ttyUSB0")
"""The ports the emonpi collector tries when none is configured."""


def _serial_absent() -> str | None:
    if any(os.path.exists(p) for p in _SERIAL_PORTS):
        return None
    return f"no serial port configured and none of {', '.join(_SERIAL_PORTS)} exists"


QUICK_CHECKS: dict[str, Callable[[], str | None]] = {
    "rapl": _rapl_absent,
    "nvml": _nvidia_absent,
    "emonpi": _serial_absent,
}
"""For the embedded default only (collectors nobody configured): a look at the device files a
collector needs, so that one which cannot work here is not even imported (its libraries, e.g.
pynvml or pyserial, stay unloaded). A configured collector is always built and opened."""


def quick_unavailable(name: str) -> str | None:
    """Why the unconfigured collector ``name`` cannot work here, or None when it may."""
    check = QUICK_CHECKS.get(name)
    return check() if check is not None else None


def load_class(kind: str, name: str) -> type[Any]:
    """The plugin class registered under ``name``; ConfigError for an unknown name."""
    table = _TABLES[kind]
    target = table.get(name)
    if target is None:
        known = ", ".join(sorted(table))
        raise ConfigError(f"[[{kind}.{name}]]: unknown plugin {name!r}; known {kind}: {known}")
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    cls: type[Any] = getattr(module, attr)
    return cls


def build_plugin(spec: PluginSpec, context: PluginContext) -> Any:
    """Import, validate options against the plugin's config dataclass, and construct."""
    cls = load_class(spec.kind, spec.name)
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        if spec.options:
            raise ConfigError(f"[{spec.where}] takes no options, got {sorted(spec.options)}")
        return cls(None, context)
    common = _COMMON_KEYS.get(spec.kind, set())
    config = build_dataclass(config_class, spec.options, spec.where, common)
    return cls(config, context)


def check_extras(specs: list[PluginSpec]) -> None:
    """ConfigError (:data:`EXTRA_MISSING`) for the first plugin whose extra is not installed."""
    for spec in specs:
        extra, modules = REQUIRES.get(spec.name, ("", ()))
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError:
                raise ConfigError(
                    EXTRA_MISSING.format(where=spec.where, module=module, hint=install_hint(extra))
                ) from None
