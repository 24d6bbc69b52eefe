"""Small helpers shared by the InfluxDB sink tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from acquisition.api import PluginContext
from acquisition.point import Point
from sinks.influxdb import InfluxDBConfig, InfluxDBSink

__all__ = ["T0_NS", "make_points", "make_sink", "until"]

T0_NS = 1_763_000_000_000_000_000
"""A fixed, millisecond-aligned start time (VictoriaMetrics keeps milliseconds)."""


def make_points(start: int, n: int, measurement: str = "m") -> list[Point]:
    """Points ``start..start+n-1``: one series, 1 ms apart, ``v`` = index (float), ``n`` = int."""
    return [
        Point(measurement, {"k": "a"}, {"v": float(i), "n": i}, T0_NS + i * 1_000_000)
        for i in range(start, start + n)
    ]


def make_sink(context: PluginContext, url: str, **options: Any) -> InfluxDBSink:
    config = replace(
        InfluxDBConfig(url=url, bucket="nrg", retry_initial=0.05, retry_max=0.5, fsync="never"),
        **options,
    )
    return InfluxDBSink(config, context)


async def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``cond`` (a hang guard, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)
