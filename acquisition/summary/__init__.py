"""The run summary: energy per source, per epoch, per step and per module, CO₂e, and
gpu_tracker's resource figures, as a typed object, JSON (``nrg.summary/1``) or text."""

from __future__ import annotations

from acquisition.summary.build import (
    NO_ENERGY,
    REST_OF_SYSTEM,
    STEPS_WITHOUT_SOURCE,
    counted_sources,
    summarize,
)
from acquisition.summary.model import (
    DEFAULT_CARBON_INTENSITY,
    RAM_UNITS,
    SCHEMA,
    TIME_UNITS,
    EnergySummary,
    EpochSummary,
    ModuleShare,
    RunSummary,
    SourceEnergy,
    StepStats,
    SummaryOptions,
)
from acquisition.summary.text import format_text

__all__ = [
    "DEFAULT_CARBON_INTENSITY",
    "NO_ENERGY",
    "RAM_UNITS",
    "REST_OF_SYSTEM",
    "SCHEMA",
    "STEPS_WITHOUT_SOURCE",
    "TIME_UNITS",
    "EnergySummary",
    "EpochSummary",
    "ModuleShare",
    "RunSummary",
    "SourceEnergy",
    "StepStats",
    "SummaryOptions",
    "counted_sources",
    "format_text",
    "summarize",
]
