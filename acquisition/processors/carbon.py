"""Carbon intensity: the figure a run used and its origin, recorded with the run.

An ``nrg_carbon`` point with the figure and where it came from, at the agent's first point and
at every job's start, so that
``report`` and ``compare`` later give each run the figure it had (a live service's answer of
that time, not of the day of the report).

The figure is resolved once when the agent starts (``[report] carbon_intensity``, the table or
the live service); ``nrg-collect`` hands it to this processor as ``g_per_kwh`` and ``source``.
It is also put in the agent's shared status (``status["carbon"]``) for the forecast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from acquisition.api import Emit, PluginContext
from acquisition.config import option
from acquisition.point import Point
from acquisition.processors.steps import run_key, run_tags
from acquisition.summary_options import DEFAULT_CARBON_INTENSITY, DEFAULT_CARBON_SOURCE

__all__ = ["MEASUREMENT", "STATUS_KEY", "CarbonConfig", "CarbonRecord"]

MEASUREMENT = "nrg_carbon"
STATUS_KEY = "carbon"


@dataclass
class CarbonConfig:
    """``[[processors.carbon]]`` keys (set by ``nrg-collect`` from ``[report]``)."""

    g_per_kwh: float = option(DEFAULT_CARBON_INTENSITY, "grams CO2e per kWh of this run's grid")
    source: str = option(DEFAULT_CARBON_SOURCE, "where the figure comes from")

    def validate(self) -> None:
        if not self.g_per_kwh >= 0:
            raise ValueError("g_per_kwh must be >= 0")


class CarbonRecord:
    """Bus processor: records the run's carbon intensity as ``nrg_carbon`` points."""

    name: ClassVar[str] = "carbon"
    config_class: ClassVar[type] = CarbonConfig

    def __init__(self, config: CarbonConfig, context: PluginContext) -> None:
        self._config = config
        self._started = False
        context.status[STATUS_KEY] = (config.g_per_kwh, config.source)

    def process(self, point: Point, emit: Emit) -> None:
        if point.measurement == MEASUREMENT:
            return
        if not self._started:
            self._started = True
            emit(self._point({}, point.time_ns))
        if point.measurement == "nrg_run" and point.fields.get("event") == "start":
            emit(self._point(run_tags(run_key(point.tags)), point.time_ns))

    def _point(self, tags: dict[str, str], time_ns: int) -> Point:
        fields: dict[str, Any] = {
            "g_per_kwh": self._config.g_per_kwh,
            "source": self._config.source,
        }
        return Point(MEASUREMENT, tags, fields, time_ns)

    def describe(self) -> str:
        return f"carbon intensity {self._config.g_per_kwh:g} g/kWh ({self._config.source})"
