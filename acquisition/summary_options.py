"""Command-line options of the run summary and its units, kept apart from the summary code so
that every ``nrg-collect`` start can declare them without importing it."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "DEFAULT_CARBON_INTENSITY",
    "DEFAULT_CARBON_SOURCE",
    "RAM_UNITS",
    "TIME_UNITS",
    "add_summary_arguments",
    "add_unit_arguments",
]

DEFAULT_CARBON_INTENSITY = 480.0
DEFAULT_CARBON_SOURCE = (
    "world average of electricity generation in 2023, 480 gCO2e/kWh "
    "(Ember, Global Electricity Review 2024)"
)
RAM_UNITS: dict[str, float] = {
    "bytes": 1.0,
    "kilobytes": 1e3,
    "megabytes": 1e6,
    "gigabytes": 1e9,
    "terabytes": 1e12,
}
"""gpu_tracker's memory units (decimal prefixes)."""
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}


def add_summary_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the summary a tracked run prints (also used by report and compare)."""
    g = parser.add_argument_group("run summary")
    g.add_argument(
        "--summary",
        choices=("text", "full", "json", "none"),
        default="text",
        help="summary printed on stderr when the tracked command exits: text (short), full "
        "(every resource figure, in gpu_tracker's layout), json, none (default: text)",
    )
    g.add_argument("--summary-file", metavar="FILE", help="also write the JSON summary here")
    add_unit_arguments(g)
    f = parser.add_argument_group("forecast")
    f.add_argument(
        "--epochs",
        type=_positive,
        metavar="N",
        help="the run takes N epochs: forecast its duration, energy and CO2e at each epoch end "
        "(a job's instrument(epochs=...) says it too)",
    )
    f.add_argument(
        "--steps-per-epoch",
        type=_positive,
        metavar="M",
        help="optimizer steps per epoch (default: as many as the last epoch had)",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_unit_arguments(g: Any) -> None:
    """gpu_tracker's unit options and the carbon intensity."""
    g.add_argument(
        "--ram-unit",
        choices=tuple(RAM_UNITS),
        default="gigabytes",
        help="unit of the summary's RAM figures (default: gigabytes)",
    )
    g.add_argument(
        "--gpu-ram-unit",
        choices=tuple(u for u in RAM_UNITS if u != "terabytes"),
        default="gigabytes",
        help="unit of its GPU memory figures (default: gigabytes)",
    )
    g.add_argument(
        "--time-unit",
        choices=tuple(TIME_UNITS),
        default="hours",
        help="unit of its compute time (default: hours)",
    )
    g.add_argument(
        "--carbon-intensity",
        type=_intensity,
        metavar="G_PER_KWH|COUNTRY",
        help="grams CO2e per kWh, or a country code of the packaged table (DE, FR …), for every "
        f"run (default: [report] carbon_intensity, else {DEFAULT_CARBON_INTENSITY:g}, the world "
        "average)",
    )


def _intensity(text: str) -> float | str:
    from acquisition.carbon import parse_intensity_argument

    return parse_intensity_argument(text)
