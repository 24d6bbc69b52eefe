"""Fixtures: a real influxd 1.6 loaded with the known runs; the pinned npm tools for Flux checks."""

from __future__ import annotations

import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.lineproto import encode_lines
from acquisition.queries import load_query, render
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
    """influxd 1.6 with database ``nrg`` holding the known runs, written to ``/write``."""
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    try:
        server.start()
        server.query(f"CREATE DATABASE {DB}")
        auth = {"u": server.admin_user, "p": server.admin_password}
        query = urllib.parse.urlencode({"db": DB, "precision": "ns", **auth})
        body = encode_lines(known.points).encode()
        request = urllib.request.Request(f"{server.url}/write?{query}", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
        yield server
    finally:
        server.stop()


def influxql(server: Influxd, name: str, params: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Run library query ``name``: per statement, its rows as dicts (tags merged in)."""
    text = render(load_query(name, "influxql"), params)
    data = server.query(text, DB)
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
