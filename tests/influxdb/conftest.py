"""Fixtures: real VictoriaMetrics and influxd (behind the v2 path translator) on loopback ports.

The VictoriaMetrics fixture also checks, after each test, that the server's silent-drop counters
(``vm_rows_invalid_total``, ``vm_rows_ignored_total``) did not move: a point the server dropped
while answering 204 would otherwise go unnoticed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from tests.servers import Influxd, V2Translator, VictoriaMetrics, have


@pytest.fixture
def run_id() -> str:
    """A unique ``run`` tag: each test finds its own points by it."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def context(tmp_path: Path, run_id: str) -> PluginContext:
    return PluginContext(
        host="testhost",
        interval_s=0.1,
        state_dir=tmp_path / "state",
        data_dir=tmp_path / "data",
        runtime_dir=tmp_path / "run",
        tags={"host": "testhost", "run": run_id},
    )


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[VictoriaMetrics]:
    if not have("victoria-metrics"):
        pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics)")
    server = VictoriaMetrics(tmp_path / "vm-data")
    try:
        server.start()
        before = server.total_counters()
        yield server
    finally:
        server.stop()
    after = server.total_counters()
    assert after == before, f"VictoriaMetrics dropped rows silently: {before} -> {after}"


@pytest.fixture(scope="module")
def influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Influxd]:
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def translator(influxd: Influxd) -> Iterator[V2Translator]:
    proxy = V2Translator(influxd)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
