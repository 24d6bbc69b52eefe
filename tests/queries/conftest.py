"""Fixtures: a real influxd 1.6 loaded with the known runs through the InfluxDB sink's v1 API;
the pinned npm tools for Flux checks."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from acquisition.queries import load_query, render
from sinks.influxdb import InfluxDBConfig, InfluxDBSink
from tests.queries.known_run import KnownRun, build
from tests.servers import Influxd, have

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
DB = "nrg"


@pytest.fixture(scope="session")
def known() -> KnownRun:
    return build()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, known: KnownRun) -> Iterator[Influxd]:
    """influxd 1.6 with database ``nrg`` holding the known runs, written by the v1 sink."""
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    try:
        server.start()
        server.query(f"CREATE DATABASE {DB}")
        write_v1(server, DB, known.points, tmp_path_factory.mktemp("sink-state"))
        yield server
    finally:
        server.stop()


BATCH = 5000
"""Points per ``write``, as the agent's core hands the sink its batches."""


def write_v1(server: Influxd, db: str, points: Sequence[Point], state_dir: Path) -> None:
    """Write ``points`` into ``db`` with the InfluxDB sink on its v1 API (``POST /write``), as
    ``[[sinks.influxdb]] api = "v1"`` does; fails unless the sink stored every point."""
    config = InfluxDBConfig(
        url=server.url,
        api="v1",
        database=db,
        username=server.admin_user,
        password=server.admin_password,
        fsync="never",
    )
    context = PluginContext("loader", 1.0, state_dir, state_dir / "data", state_dir / "run")
    sink = InfluxDBSink(config, context)

    async def run() -> None:
        await sink.open()
        for i in range(0, len(points), BATCH):
            await sink.write(points[i : i + BATCH])
        await sink.aclose()

    asyncio.run(run())
    stats = sink.stats()
    assert sink.api == "v1"
    assert (stats["lost_points"], stats["dead_lettered_points"], sink.spool.points) == (0, 0, 0)
    assert sink.sent_points + sink.replayed_points == len(points)


def influxql(
    server: Influxd, name: str, params: dict[str, Any], *, db: str = DB
) -> list[list[dict[str, Any]]]:
    """Run library query ``name``: per statement, its rows as dicts (tags merged in)."""
    text = render(load_query(name, "influxql"), params)
    data = server.query(text, db)
    out = []
    for result in data["results"]:
        rows = []
        for series in result.get("series", []):
            for values in series["values"]:
                row = dict(zip(series["columns"], values, strict=True))
                row.update(series.get("tags", {}))
                rows.append(row)
        out.append(rows)
    return out


@pytest.fixture(scope="session")
def node() -> str:
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    if not (TOOLS / "node_modules" / "@influxdata" / "flux-lsp-browser").is_dir():
        pytest.skip("npm tools missing: run `npm ci --prefix tools`")
    return binary
