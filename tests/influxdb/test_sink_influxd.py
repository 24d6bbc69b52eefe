"""Error semantics against a real influxd 1.6, behind the test-owned v2 path translator.

influxd is InfluxDB's own storage engine: exact int64, strings, booleans, ns timestamps, a 400 that
names the bad line, a field type conflict (422 as in 2.x, via the translator), 404 for an unknown
database, 401/403 from its real authentication.
"""

from __future__ import annotations

import logging

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from tests.influxdb.helpers import T0_NS, make_points, make_sink, until
from tests.servers import Influxd, V2Translator

pytestmark = pytest.mark.server

TOKEN = f"{Influxd.admin_user}:{Influxd.admin_password}"


@pytest.fixture
def db(influxd: Influxd, run_id: str) -> str:
    influxd.query(f'CREATE DATABASE "{run_id}"')
    return run_id


def values(influxd: Influxd, db: str, measurement: str = "m") -> list[tuple[int, object]]:
    return [(r["time"], r["v"]) for r in influxd.rows(f'SELECT "v" FROM "{measurement}"', db)]


async def test_types_and_nanoseconds_survive(
    influxd: Influxd, translator: V2Translator, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, translator.url, token=TOKEN, bucket=f"{db}/autogen")
    await sink.open()
    point = Point(
        "types",
        {"k": "a b,c=d"},
        {"i": 2**62 + 1, "f": 0.1, "b": True, "s": 'say "hi"\\'},
        T0_NS + 123,
    )
    await sink.write([point])
    await sink.aclose()
    (row,) = influxd.rows('SELECT * FROM "types"', db)
    assert row == {
        "time": T0_NS + 123,
        "i": 2**62 + 1,
        "f": 0.1,
        "b": True,
        "s": 'say "hi"\\',
        "k": "a b,c=d",
        "host": "testhost",
        "run": context.tags["run"],
    }


async def test_bad_line_is_dead_lettered_and_the_rest_stored(
    influxd: Influxd, translator: V2Translator, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db)
    await sink.open()
    batch = make_points(0, 10)
    # Valid line protocol that InfluxDB refuses: a field named "time" (400, the rest stored).
    batch[6] = Point("m", {"k": "a"}, {"time": 6.0}, T0_NS + 6_000_000)
    await sink.write(batch)
    await sink.aclose()
    assert values(influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(10) if i != 6]
    assert sink.stats()["dead_lettered_points"] == 1
    assert sink.stats()["sent_points"] == 10
    text = sink.dead_letter_path.read_text().splitlines()
    assert len(text) == 2
    assert text[0].startswith("# ") and "HTTP 400: partial write" in text[0]
    assert 'invalid field name: input field "time"' in text[0]
    assert text[1] == f"m,host=testhost,k=a,run={db} time=6.0 {T0_NS + 6_000_000}"


async def test_field_type_conflict_is_dead_lettered(
    influxd: Influxd, translator: V2Translator, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db)
    await sink.open()
    await sink.write([Point("c", {}, {"v": 1}, T0_NS)])  # v is an integer from now on
    batch = [Point("c", {}, {"v": i}, T0_NS + i) for i in range(1, 8)]
    batch[3] = Point("c", {}, {"v": 3.5}, T0_NS + 4)
    await sink.write(batch)
    await sink.aclose()
    assert values(influxd, db, "c") == [(T0_NS, 1)] + [(T0_NS + i, i) for i in (1, 2, 3, 5, 6, 7)]
    assert sink.stats()["dead_lettered_points"] == 1
    header, line = sink.dead_letter_path.read_text().splitlines()
    assert "HTTP 422: partial write: field type conflict" in header
    assert line == f"c,host=testhost,run={db} v=3.5 {T0_NS + 4}"


async def test_unknown_bucket_keeps_every_point_until_it_exists(
    influxd: Influxd, translator: V2Translator, context: PluginContext, run_id: str
) -> None:
    db = f"{run_id}_later"
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db)
    await sink.open()
    await sink.write(make_points(0, 50))
    await sink.write(make_points(50, 50))
    await sink.flush()
    assert sink.status() == (
        f"error: bucket '{db}' (org '-') does not exist at {translator.url}: create it or fix "
        "[[sinks.influxdb]] bucket / org / url; spooling 100 points"
    )
    await until(lambda: sink.retries >= 1, "a replay attempt")
    assert sink.stats()["spool_dropped_points"] == 0
    assert sink.stats()["dead_lettered_points"] == 0
    influxd.query(f'CREATE DATABASE "{db}"')
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    assert sink.status() == "ok"
    await sink.aclose()
    assert values(influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(100)]


@pytest.mark.parametrize(
    ("user", "password", "hint"),
    [
        ("admin", "wrong-secret-123", "the token was rejected: set [[sinks.influxdb]] token"),
        ("reader", "reader-secret-456", "the token may not write to bucket"),
    ],
)
async def test_auth_errors_name_the_setting_and_never_show_the_token(
    influxd: Influxd,
    translator: V2Translator,
    context: PluginContext,
    db: str,
    caplog: pytest.LogCaptureFixture,
    user: str,
    password: str,
    hint: str,
) -> None:
    if user == "reader":
        influxd.query(f"CREATE USER reader WITH PASSWORD '{password}'")
    caplog.set_level(logging.DEBUG)
    sink = make_sink(context, translator.url, token=f"{user}:{password}", bucket=db)
    await sink.open()
    await sink.write(make_points(0, 10))
    await sink.flush()
    await until(lambda: sink.retries >= 1, "a replay attempt")
    status = sink.status()
    assert status.startswith(f"error: {hint}")
    assert status.endswith("spooling 10 points")
    await sink.aclose()
    assert sink.spool.points == 10
    assert password not in caplog.text
    assert password not in repr(sink.config)
    if user == "reader":
        influxd.query("DROP USER reader")
    assert values(influxd, db) == []


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured(
    influxd: Influxd,
    translator: V2Translator,
    context: PluginContext,
    db: str,
    status: int,
) -> None:
    body = b'{"code":"too many requests","message":"slow down"}'
    translator.answer_next(status, 2, {"Retry-After": "1"}, body)
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db, retry_max=2.0)
    await sink.open()
    await sink.write(make_points(0, 20))
    await sink.flush()
    assert sink.status() == f"retrying (HTTP {status}: slow down); spooling 20 points"
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    # The backoff is at most 0.1 s here, but the server asked for 1 s each time.
    assert sink.last_backoff_s == 1.0
    assert (sink.retries, sink.stats()["replayed_points"]) == (1, 20)
    await sink.aclose()
    assert values(influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(20)]


@pytest.mark.parametrize("retry_after", ["inf", "1e999", "99999999999", "nan"])
async def test_retry_after_is_clamped_to_retry_max(
    influxd: Influxd,
    translator: V2Translator,
    context: PluginContext,
    db: str,
    retry_after: str,
) -> None:
    translator.answer_next(503, 1, {"Retry-After": retry_after}, b'{"message":"later"}')
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db, retry_max=0.3)
    await sink.open()
    await sink.write(make_points(0, 20))
    await sink.flush()
    await until(lambda: sink.spool.records == 0, "the spool to drain", timeout=20)
    assert sink.last_backoff_s <= 0.3
    if retry_after != "nan":  # not a number: ignored, the plain backoff applies
        assert sink.last_backoff_s == 0.3
    await sink.aclose()
    assert values(influxd, db) == [(T0_NS + i * 1_000_000, float(i)) for i in range(20)]


async def test_replay_keeps_the_order_of_writes(
    influxd: Influxd, translator: V2Translator, context: PluginContext, db: str
) -> None:
    """InfluxDB keeps the last write of a series and time: rewriting the same points with new
    values while spooling shows, from the server, that replay went oldest first."""
    translator.answer_next(503, 1, {}, b'{"message":"starting up"}')
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db, replay_batch_bytes=1)
    await sink.open()
    for version in (1.0, 2.0, 3.0, 4.0):
        await sink.write([Point("o", {}, {"v": version}, T0_NS + i) for i in range(5)])
    await sink.flush()
    assert sink.spool.records == 4
    await until(lambda: sink.spool.records == 0, "the spool to drain")
    await sink.aclose()
    assert sink.stats()["requests"] == 5  # the 503, then one request per record
    assert values(influxd, db, "o") == [(T0_NS + i, 4.0) for i in range(5)]


async def test_bisection_isolates_several_bad_lines(
    influxd: Influxd, translator: V2Translator, context: PluginContext, db: str
) -> None:
    sink = make_sink(context, translator.url, token=TOKEN, bucket=db)
    await sink.open()
    batch = make_points(0, 50)
    bad = (0, 17, 18, 49)
    for i in bad:
        batch[i] = Point("m", {"k": "a"}, {"time": float(i)}, T0_NS + i * 1_000_000)
    await sink.write(batch)
    await sink.aclose()
    assert values(influxd, db) == [
        (T0_NS + i * 1_000_000, float(i)) for i in range(50) if i not in bad
    ]
    lines = sink.dead_letter_path.read_text().splitlines()
    assert lines[1::2] == [
        f"m,host=testhost,k=a,run={db} time={float(i)} {T0_NS + i * 1_000_000}" for i in bad
    ]
    assert all(h.startswith("# ") and "HTTP 400: partial write" in h for h in lines[::2])
    assert sink.stats()["dead_lettered_points"] == 4
