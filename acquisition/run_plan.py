"""What ``nrg-collect`` adds to a config before the agent starts: the run's length for the
forecast (``--epochs``, ``--steps-per-epoch``) and the carbon intensity the run uses, resolved
once from ``[report]`` (a number, a country, a cloud region, or the live service) and recorded
with the run by ``processors.carbon``."""

from __future__ import annotations

import argparse

from acquisition.carbon import CarbonFigure, IntensityService, resolve_intensity, service_for
from acquisition.config import Config, PluginSpec, ReportConfig
from acquisition.errors import ConfigError
from acquisition.secrets import read_secret
from acquisition.summary_options import DEFAULT_CARBON_INTENSITY, DEFAULT_CARBON_SOURCE

__all__ = ["given_carbon", "plan_forecast", "prepare_run", "report_carbon", "report_service"]

FORECAST = "forecast"
CARBON = "carbon"
"""The processors' registry names (imported only when the agent builds them)."""


def report_service(report: ReportConfig) -> IntensityService | None:
    """The live intensity service ``[report]`` configures, or None."""
    if not report.carbon_service_url:
        return None
    token = read_secret(
        report.carbon_service_token,
        report.carbon_service_token_file,
        "carbon_service_token",
        "[report]",
    )
    return service_for(
        report.carbon_service_url,
        token,
        report.carbon_service_timeout,
        report.carbon_service_cache,
    )


def given_carbon(
    given: float | str, report: ReportConfig | None, live: bool = True
) -> CarbonFigure:
    """The figure of ``--carbon-intensity`` (a number, or a country asked of ``[report]``'s
    live service when one is configured)."""
    service = None
    if live and report is not None and isinstance(given, str):
        service = report_service(report)
    try:
        figure = resolve_intensity(given, "--carbon-intensity", service)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if figure is None:
        raise ConfigError("--carbon-intensity: expected a number or a country code")
    return figure


def report_carbon(report: ReportConfig, live: bool = True) -> CarbonFigure:
    """The figure ``[report]`` gives (``carbon_intensity``, else ``carbon_intensity_g_per_kwh``
    when set, else the world average); ``live``: ask the service when one is configured."""
    service = report_service(report) if live else None
    try:
        figure = resolve_intensity(report.carbon_intensity, "[report] carbon_intensity", service)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if figure is not None:
        return figure
    g = report.carbon_intensity_g_per_kwh
    if g != DEFAULT_CARBON_INTENSITY:
        return CarbonFigure(g, f"[report] carbon_intensity_g_per_kwh = {g:g} g/kWh")
    return CarbonFigure(g, DEFAULT_CARBON_SOURCE)


def plan_forecast(config: Config, epochs: int | None, steps_per_epoch: int | None) -> Config:
    """``config`` with ``--epochs``/``--steps-per-epoch`` given to its forecast processors (one
    is added when the config names processors but not this one)."""
    if not epochs and not steps_per_epoch:
        return config
    specs = [s for s in config.processors if s.name == FORECAST]
    if not specs:
        specs = [PluginSpec("processors", FORECAST, {})]
        config.processors.append(specs[0])
    for spec in specs:
        if epochs:
            spec.options["epochs"] = epochs
        if steps_per_epoch:
            spec.options["steps_per_epoch"] = steps_per_epoch
    return config


def prepare_run(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the forecast's plan and the run's carbon figure in its processors."""
    plan_forecast(config, getattr(args, "epochs", None), getattr(args, "steps_per_epoch", None))
    live = not getattr(args, "once", False)
    given = getattr(args, "carbon_intensity", None)
    if given is not None:
        figure = given_carbon(given, config.report, live=live)
    else:
        figure = report_carbon(config.report, live=live)
    specs = [s for s in config.processors if s.name == CARBON]
    if not specs:
        specs = [PluginSpec("processors", CARBON, {}, explicit=False)]
        config.processors.append(specs[0])
    for spec in specs:
        spec.options.setdefault("g_per_kwh", figure.g_per_kwh)
        spec.options.setdefault("source", figure.source)
    return config
