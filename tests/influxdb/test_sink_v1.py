"""The v1 write API (``POST /write?db=&rp=``) against a real influxd 1.6, directly: types, API
detection, a bad line, an outage, the settings hints (unknown database, bad password, and the
v2 endpoint that 1.6 does not have)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from sinks.influxdb.config import NO_V2_ENDPOINT
from tests.influxdb.helpers import T0_NS, make_points, make_sink, until
from tests.servers import Influxd, have

pytestmark = pytest.mark.server

CREDENTIALS = {"username": Influxd.admin_user, "password": Influxd.admin_password}


@pytest.fixture(scope="module")
def own_influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Influxd]:
    """An influxd of this module only: the outage test stops and restarts it."""
    if not have("influxd"):
        pytest.skip("influxd is not installed (apt-get install influxdb)")
    server = Influxd(tmp_path_factory.mktemp("influxd-v1"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def db(own_influxd: Influxd, run_id: str) -> str:
    own_influxd.query(f'CREATE DATABASE "{run_id}"')
    return run_id


def values(influxd: Influxd, db: str, measurement: str = "m") -> list[tuple[int, object]]:
    return [(r["time"], r["v"]) for r in influxd.rows(f'SELECT "v" FROM "{measurement}"', db)]


@pytest.mark.parametrize("api", ["v1", "", "1.8-style"])
async def test_v1_writes_exact_types_and_detects_the_api(
    own_influxd: Influxd, context: PluginContext, db: str, api: str
) -> None:
    if api == "1.8-style":  # the v2-compatibility settings of 1.8 work on the v1 API too
        token = f"{Influxd.admin_user}:{Influxd.admin_password}"
        sink = make_sink(context, own_influxd.url, token=token, bucket=f"{db}/autogen")
    else:
        sink = make_sink(context, own_influxd.url, api=api, database=db, **CREDENTIALS)
    await sink.open()
    point = Point("types", {"k": "a b"}, {"i": 2**62 + 1, "s": 'q "x"', "b": True}, T0_NS + 7)
    await sink.write([point, *make_points(0, 20)])
    await sink.aclose()
    assert sink.api == "v1"
    (row,) = own_influxd.rows('SELECT * FROM "types"', db)
    assert (row["time"], row["i"], row["s"], row["b"], row["k"]) == (
        T0_NS + 7,
        2**62 + 1,
        'q "x"',
        True,
        "a b",
    )
    assert values(own_influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(20)]
    assert sink.where() == f"{own_influxd.url} database {db}"


async def test_v1_bad_line_is_dead_lettered_and_the_rest_stored(
    own_influxd: Influxd, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, own_influxd.url, api="v1", database=db, **CREDENTIALS)
    await sink.open()
    batch = make_points(0, 10)
    batch[4] = Point("m", {"k": "a"}, {"time": 4.0}, T0_NS + 4_000_000)  # InfluxDB refuses it
    await sink.write(batch)
    await sink.aclose()
    assert values(own_influxd, db) == [
        (T0_NS + i * 1_000_000, float(i)) for i in range(10) if i != 4
    ]
    assert sink.stats()["dead_lettered_points"] == 1
    assert "HTTP 400" in sink.dead_letter_path.read_text()


async def test_v1_outage_spools_then_stores_everything_once_in_order(
    own_influxd: Influxd, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, own_influxd.url, api="v1", database=db, **CREDENTIALS)
    await sink.open()
    await sink.write(make_points(0, 10))
    await sink.flush()
    own_influxd.stop()
    try:
        for k in range(1, 4):
            await sink.write(make_points(10 * k, 10))
        await sink.flush()
        assert sink.status().startswith("retrying (")
        assert sink.spool.points == 30
    finally:
        own_influxd.start()
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    await sink.aclose()
    assert values(own_influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(40)]
    assert sink.stats()["lost_points"] == 0


@pytest.mark.parametrize(
    ("options", "hint"),
    [
        ({"api": "v1", "database": "no_such_db", **CREDENTIALS}, "database 'no_such_db' does"),
        ({"api": "v1", "username": "admin", "password": "wrong"}, "the credentials were rejected"),
        ({"api": "v2", "bucket": "nrg"}, NO_V2_ENDPOINT.split(":")[1].split("{")[0]),
    ],
)
async def test_v1_settings_errors_say_what_to_set(
    own_influxd: Influxd,
    context: PluginContext,
    db: str,
    options: dict[str, str],
    hint: str,
    tmp_path: Path,
) -> None:
    options = {"database": db, **options}
    sink = make_sink(context, own_influxd.url, drain_timeout=0.0, **options)
    await sink.open()
    await sink.write(make_points(0, 5))
    await sink.flush()
    status = sink.status()
    await sink.aclose()
    assert status.startswith("error: ") and hint in status, status
    assert "wrong" not in status
