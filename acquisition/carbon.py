"""Carbon intensity of the grid a run used: a number, a country's yearly mean, a cloud region's
grid, or a live intensity service; always with where the figure came from.

``[report] carbon_intensity`` takes ``480`` (g CO₂e/kWh), ``"DE"`` (a country code of the
packaged table, ``acquisition/data/carbon-intensity.toml``), or ``{cloud = "aws", region =
"eu-west-1"}`` (the region's country). With ``carbon_service_url`` set, the country's figure
comes from a live service of Electricity Maps' shape (``GET
<url>/v3/carbon-intensity/latest?zone=DE``, header ``auth-token``, JSON ``carbonIntensity``),
kept for ``carbon_service_cache`` seconds; when it does not answer, the table's figure is used
and that is said once.
"""

from __future__ import annotations

import logging
import math
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "SERVICE_FALLBACK",
    "SETTING_ERROR",
    "CarbonFigure",
    "IntensityService",
    "ServiceError",
    "carbon_table",
    "check_setting",
    "parse_intensity_argument",
    "resolve_intensity",
    "service_for",
]

log = logging.getLogger(__name__)

TABLE_PATH = Path(__file__).with_name("data") / "carbon-intensity.toml"
SETTING_ERROR = (
    'expected a number (g CO2e/kWh), a country code such as "DE", or a cloud region such as '
    '{{cloud = "aws", region = "eu-west-1"}}; got {value!r}'
)
UNKNOWN_COUNTRY = "no figure for country {code!r} in the packaged table; known: {known}"
UNKNOWN_REGION = "no grid known for {cloud} region {region!r}; known: {known}"
UNKNOWN_CLOUD = "unknown cloud {cloud!r}; known: {known}"
SERVICE_FALLBACK = (
    "carbon intensity service {url} did not answer for zone {zone} ({reason}); using {figure}"
)
"""Logged once per service and zone."""
LATEST_PATH = "/v3/carbon-intensity/latest"


@dataclass(frozen=True)
class CarbonFigure:
    """Grams CO₂e per kWh and where the figure comes from (shown beside every CO₂e)."""

    g_per_kwh: float
    source: str
    zone: str = ""
    """The country or zone code, when the figure is a place's."""


class ServiceError(Exception):
    """The live intensity service gave no usable figure."""


@cache
def carbon_table() -> dict[str, Any]:
    """The packaged table (``source``, ``world``, ``countries``, ``clouds``)."""
    with TABLE_PATH.open("rb") as f:
        return tomllib.load(f)


def _table_figure(code: str) -> CarbonFigure:
    table = carbon_table()
    entry = table["countries"].get(code)
    if entry is None:
        known = ", ".join(sorted(table["countries"]))
        raise ValueError(UNKNOWN_COUNTRY.format(code=code, known=known))
    source = entry.get("source", table["source"]["name"])
    text = (
        f"{entry['name']} ({code}), yearly mean {entry['year']}: {entry['g_per_kwh']:g} g/kWh "
        f"({source}, {table['source']['licence']})"
    )
    return CarbonFigure(float(entry["g_per_kwh"]), text, code)


def _region_country(cloud: str, region: str) -> str:
    clouds = carbon_table()["clouds"]
    regions = clouds.get(cloud.lower())
    if regions is None:
        raise ValueError(UNKNOWN_CLOUD.format(cloud=cloud, known=", ".join(sorted(clouds))))
    code = regions.get(region.lower())
    if code is None:
        known = ", ".join(sorted(regions))
        raise ValueError(UNKNOWN_REGION.format(cloud=cloud, region=region, known=known))
    return str(code)


def check_setting(value: object) -> tuple[str, str] | float | None:
    """The setting's form: a number, a place ``(code, label)``, or None when unset (``""``);
    ValueError with a one-line message when it is none of the accepted forms."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ValueError(SETTING_ERROR.format(value=value))
        return float(value)
    if isinstance(value, str) and value.strip():
        code = value.strip().upper()
        _table_figure(code)
        return code, code
    if isinstance(value, Mapping) and set(value) == {"cloud", "region"}:
        cloud, region = value["cloud"], value["region"]
        if isinstance(cloud, str) and isinstance(region, str):
            return _region_country(cloud, region), f"{cloud} {region}"
    raise ValueError(SETTING_ERROR.format(value=value))


class IntensityService:
    """A live carbon-intensity service (Electricity Maps' API), its answers cached."""

    def __init__(
        self, url: str, token: str = "", timeout_s: float = 5.0, cache_s: float = 900.0
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, float]] = {}
        self._said: set[str] = set()
        self.requests = 0

    def latest(self, zone: str) -> float:
        """The zone's latest intensity (g CO₂e/kWh); ServiceError when there is none."""
        hit = self._cache.get(zone)
        if hit is not None and time.monotonic() - hit[0] < self.cache_s:
            return hit[1]
        import json  # here: every agent start imports this module, few ask a service
        import urllib.error
        import urllib.parse
        import urllib.request

        query = urllib.parse.urlencode({"zone": zone})
        request = urllib.request.Request(f"{self.url}{LATEST_PATH}?{query}")
        if self.token:
            request.add_header("auth-token", self.token)
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                data = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            raise ServiceError(f"HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceError(f"no answer: {reason}") from None
        except ValueError:
            raise ServiceError("the answer is not JSON") from None
        value = data.get("carbonIntensity") if isinstance(data, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ServiceError("the answer has no carbonIntensity")
        self._cache[zone] = (time.monotonic(), float(value))
        return float(value)

    def figure(self, zone: str, fallback: CarbonFigure) -> CarbonFigure:
        """The service's figure for ``zone``, else ``fallback`` (said once per zone)."""
        try:
            value = self.latest(zone)
        except ServiceError as exc:
            if zone not in self._said:
                self._said.add(zone)
                log.warning(
                    SERVICE_FALLBACK.format(
                        url=self.url, zone=zone, reason=exc, figure=fallback.source
                    )
                )
            return CarbonFigure(
                fallback.g_per_kwh,
                f"{fallback.source}; the live service did not answer ({exc})",
                zone,
            )
        return CarbonFigure(value, f"live, zone {zone}: {value:g} g/kWh ({self.url})", zone)


_SERVICES: dict[tuple[str, str], IntensityService] = {}


def service_for(url: str, token: str, timeout_s: float, cache_s: float) -> IntensityService:
    """One service per URL and token in this process, so its cache and its "said once" serve
    the agent's start, the run's summary and every run of a report."""
    key = (url, token)
    if key not in _SERVICES:
        _SERVICES[key] = IntensityService(url, token, timeout_s, cache_s)
    return _SERVICES[key]


def resolve_intensity(
    value: object, where: str, service: IntensityService | None = None
) -> CarbonFigure | None:
    """The figure of a ``carbon_intensity`` setting; None when unset. ``where`` names the
    setting in the figure's source and in errors (ValueError, one line)."""
    try:
        form = check_setting(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if form is None:
        return None
    if isinstance(form, float):
        return CarbonFigure(form, f"{where} = {form:g} g/kWh")
    code, label = form
    figure = _table_figure(code)
    if label != code:
        figure = CarbonFigure(figure.g_per_kwh, f"{label} -> {figure.source}", code)
    return service.figure(code, figure) if service is not None else figure


def parse_intensity_argument(text: str) -> float | str:
    """``--carbon-intensity``: a number, or a country code of the table."""
    try:
        return float(text)
    except ValueError:
        pass
    code = text.strip().upper()
    try:
        _table_figure(code)
    except ValueError as exc:
        import argparse

        raise argparse.ArgumentTypeError(str(exc)) from None
    return code
