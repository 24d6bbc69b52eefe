"""Plugin names → import paths, loaded lazily so the core never imports a plugin module itself.

Loading by name keeps the layer contract (``acquisition`` imports neither ``collectors`` nor
``sinks``) and keeps optional dependencies optional: ``pynvml`` is imported only when the nvml
collector is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from acquisition.api import PluginContext
from acquisition.config import COLLECTOR_KEYS, SINK_KEYS, PluginSpec, build_dataclass
from acquisition.errors import ConfigError

__all__ = ["COLLECTORS", "PROCESSORS", "SINKS", "build_plugin", "load_class"]

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
}
_COMMON_KEYS = {"collectors": COLLECTOR_KEYS, "sinks": SINK_KEYS}
_TABLES = {"collectors": COLLECTORS, "sinks": SINKS, "processors": PROCESSORS}


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
