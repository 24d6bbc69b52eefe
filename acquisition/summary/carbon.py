"""The carbon intensity of a summary: the one given for it (``--carbon-intensity``, a
Tracker's argument), else the one the run recorded (``nrg_carbon``, what the agent resolved
when the run started), else the summary options' (``[report]`` or the world average)."""

from __future__ import annotations

from collections.abc import Iterable

from acquisition.point import Point

__all__ = ["run_carbon"]

_MEASUREMENT = "nrg_carbon"


def run_carbon(
    points: Iterable[Point], g_per_kwh: float, source: str, given: bool
) -> tuple[float, str]:
    """(g CO₂e/kWh, where it comes from) for the run of ``points``."""
    if given:
        return g_per_kwh, source
    recorded = [p for p in points if p.measurement == _MEASUREMENT]
    if not recorded:
        return g_per_kwh, source
    first = min(recorded, key=lambda p: p.time_ns)
    value, text = first.fields.get("g_per_kwh"), first.fields.get("source")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return g_per_kwh, source
    where = text if isinstance(text, str) and text else "recorded with the run"
    return float(value), f"{where} (recorded with the run)"
