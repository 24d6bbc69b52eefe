"""The summary's forecast check: the forecast made after the first epoch (``nrg_forecast``)
beside what the run really took, so the forecast's accuracy shows; and the summary's lines on
the carbon intensity and the forecast."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acquisition.point import Point

__all__ = ["extra_lines", "first_forecast"]

_MEASUREMENT = "nrg_forecast"
_TOTAL = "total"
_J_PER_KWH = 3.6e6


def _num(point: Point, key: str) -> float | None:
    value = point.fields.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _figure(point: Point, stem: str, unit: str, actual: float | None) -> dict[str, Any]:
    value = _num(point, f"{stem}_{unit}")
    out: dict[str, Any] = {
        "forecast": value,
        "low": _num(point, f"{stem}_low_{unit}"),
        "high": _num(point, f"{stem}_high_{unit}"),
        "actual": actual,
        "error_ratio": None,
        "covered": None,
    }
    if value is not None and actual:
        out["error_ratio"] = (value - actual) / actual
    if out["low"] is not None and out["high"] is not None and actual is not None:
        out["covered"] = out["low"] <= actual <= out["high"]
    return out


def _scaled(fig: dict[str, Any], factor: float) -> dict[str, Any]:
    out = dict(fig)
    for key in ("forecast", "low", "high", "actual"):
        if out[key] is not None:
            out[key] *= factor
    return out


def first_forecast(
    points: Iterable[Point], *, duration_s: float, energy_j: float | None, g_per_kwh: float
) -> dict[str, Any] | None:
    """The earliest ``source=total`` forecast of the run beside the actual duration, energy and
    CO₂e (``error_ratio`` = (forecast − actual) / actual; ``covered``: inside the interval);
    the CO₂e of both at the summary's intensity. None when the run has no forecast."""
    totals = [p for p in points if p.measurement == _MEASUREMENT and p.tags.get("source") == _TOTAL]
    if not totals:
        return None
    first = min(totals, key=lambda p: (_num(p, "epochs_done") or 0, p.time_ns))
    done, planned = _num(first, "epochs_done"), _num(first, "epochs")
    basis = first.fields.get("basis")
    energy = _figure(first, "energy", "joules", energy_j)
    return {
        "epochs_done": int(done) if done is not None else None,
        "epochs": int(planned) if planned is not None else None,
        "basis": basis if isinstance(basis, str) else None,
        "level": _num(first, "level_ratio"),
        "elapsed_s": _num(first, "elapsed_seconds"),
        "duration_s": _figure(first, "total", "seconds", duration_s),
        "energy_j": energy,
        "co2e_g": _scaled(energy, g_per_kwh / _J_PER_KWH),
    }


def _line(name: str, fig: dict[str, Any], unit: str) -> str:
    if fig.get("forecast") is None:
        return f"  {name}: n/a"
    text = f"  {name}: forecast {fig['forecast']:.4g} {unit}"
    if fig.get("low") is not None and fig.get("high") is not None:
        text += f" ({fig['low']:.4g}–{fig['high']:.4g})"
    if fig.get("actual") is not None:
        text += f", actual {fig['actual']:.4g} {unit}"
    if fig.get("error_ratio") is not None:
        text += f" ({fig['error_ratio'] * 100:+.1f} %"
        text += ", inside the interval)" if fig.get("covered") else ", outside the interval)"
    return text


def extra_lines(summary: Any) -> list[str]:
    """The carbon intensity's origin, then the first forecast beside what happened."""
    lines = [f"Carbon intensity: {summary.carbon_intensity_source}"]
    fc = getattr(summary, "forecast", None)
    if not fc:
        return lines
    level = f"{(fc.get('level') or 0.95) * 100:.0f} %"
    lines.append(
        f"Forecast after epoch {fc['epochs_done']} of {fc['epochs']} ({fc['basis']} basis, "
        f"{level} prediction intervals):"
    )
    lines.append(_line("duration", fc["duration_s"], "s"))
    lines.append(_line("energy", fc["energy_j"], "J"))
    lines.append(_line("CO2e", fc["co2e_g"], "g"))
    return lines
