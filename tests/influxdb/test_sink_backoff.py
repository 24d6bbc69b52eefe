"""The InfluxDB sink's retry delay: after an answer that needs the user (401/403/404), across
episodes, and the tries of a spool record that cannot be read."""

from __future__ import annotations

import errno
import os

import pytest

from acquisition.api import PluginContext
from sinks.influxdb import InfluxDBSink
from sinks.influxdb.spool import Spool
from sinks.influxdb.state import SinkState
from tests.influxdb.helpers import lines, make_points, make_sink, until
from tests.influxdb.scripted import Answer, Request, ScriptedServer


def refuse(status: int) -> object:
    def script(_: Request) -> Answer:
        return status, {"Content-Type": "application/json"}, b'{"message":"not allowed"}'

    return script


_HINTS = {
    401: "the token was rejected: set [[sinks.influxdb]] token",
    403: "the token may not write to bucket 'nrg'",
    404: "bucket 'nrg' (org '-') does not exist",
}


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_settings_error_retries_at_the_cap_not_the_initial_delay(
    context: PluginContext, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    """Guards: after a 401/403/404 (a token or bucket to fix) the sink waits ``retry_max``
    (0.3 s here) between tries, not ``retry_initial`` (0.05 s): asking every 50 ms cannot help
    until the user fixes the setting. The user is told once, as an error: which setting to fix,
    the server's own words, and that the points wait in the spool."""
    with ScriptedServer(refuse(status)) as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, retry_initial=0.05, retry_max=0.3, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 4))
        await sink.flush()
        assert sink.machine.state is SinkState.SETTINGS
        await until(lambda: len(server.writes) >= 2, "a second try")
        assert sink.last_backoff_s == 0.3
        sink.abort()
        await sink.aclose()
    assert sink.stats()["lost_points"] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors  # once, though the server refused twice
    assert _HINTS[status] in errors[0]
    assert "not allowed" in errors[0]  # the server's words
    assert errors[0].endswith("points are kept in the spool")


_V1_HINTS = {
    401: "the credentials were rejected: set [[sinks.influxdb]] username and password",
    403: "user '' may not write to database 'nrg': grant it WRITE",
    404: "database 'nrg' does not exist at {url}: create it (CREATE DATABASE nrg)",
}


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_settings_error_of_an_influxdb_1_server_names_its_own_settings(
    context: PluginContext, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    """Guards: the setting to fix after a 401/403/404 is told in the terms of the API the sink
    writes through: an InfluxDB 1.8 server (found from its version) is told about the
    username, password and database, not a token and a bucket, and the sink is named by its
    URL and database."""
    with ScriptedServer(refuse(status), version="1.8.10") as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 4))
        await sink.flush()
        assert (sink.api, sink.machine.state) == ("v1", SinkState.SETTINGS)
        sink.abort()
        await sink.aclose()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"influxdb {server.url} database nrg: ")
    assert _V1_HINTS[status].format(url=server.url) in errors[0]


async def test_a_huge_retry_after_waits_retry_max_at_most(context: PluginContext) -> None:
    """Guards: ``Retry-After: 3600`` is obeyed up to ``retry_max`` (0.3 s), not for an hour."""
    answers = iter([(503, {"Retry-After": "3600"}, b'{"message":"later"}')])

    def script(_: Request) -> Answer:
        return next(answers, (204, {}, b""))

    with ScriptedServer(script) as server:
        sink = make_sink(context, server.url, retry_initial=0.05, retry_max=0.3, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 4))
        await sink.flush()
        await until(lambda: sink.spool.records == 0, "the spool to drain")
        assert sink.last_backoff_s == 0.3
        await sink.aclose()
    assert len(server.accepted) == 1


def answers(*statuses: int) -> object:
    """Answer each post with the next status (a 503 says "later"), then 204 for ever."""
    queue = iter(statuses)

    def script(_: Request) -> Answer:
        status = next(queue, 204)
        return status, {}, b'{"message":"busy"}' if status != 204 else b""

    return script


async def test_the_backoff_starts_again_after_the_server_answers(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: no delay before any replay (0 s); then the delay before a replay grows with
    each failed try of an episode and starts from ``retry_initial`` again once the server has
    answered. ``retry_initial`` 1 ms: the 7th try of the first episode waits 1 ms·2⁶ = 64 ms
    less jitter (32 to 64 ms); the first try of the next episode 1 ms less jitter (0.5 to
    1 ms), not 1 ms·2⁷ as the attempts would give had they not been reset. Each episode is
    logged once as failing and once as answering again; the counters add up: 4 + 2 points
    spooled and replayed, none sent directly, 6 failed replays, 10 requests."""
    script = answers(*[503] * 7, 204, 503)  # 1 direct + 6 replays fail; then 1 direct fails
    with ScriptedServer(script) as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, retry_initial=0.001, retry_max=10.0)
        await sink.open()
        assert sink.last_backoff_s == 0.0  # no replay tried yet: no delay
        await sink.write(make_points(0, 4))
        await sink.flush()
        await until(lambda: sink.spool.records == 0, "the first episode to end")
        assert 0.032 <= sink.last_backoff_s <= 0.064
        assert sink.machine.state is SinkState.OK
        await sink.write(make_points(4, 2))
        await sink.flush()
        await until(lambda: sink.spool.records == 0, "the second episode to end")
        assert 0.0005 <= sink.last_backoff_s <= 0.001
        await sink.aclose()
    assert len(server.writes) == 10 and len(server.accepted) == 2
    stats = sink.stats()
    assert (stats["sent_points"], stats["spooled_points"], stats["replayed_points"]) == (0, 6, 6)
    assert (stats["replay_failures"], stats["requests"], stats["lost_points"]) == (6, 10, 0)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failing (" in m for m in messages) == 2
    assert sum("answers again" in m for m in messages) == 2


async def test_a_spool_record_that_cannot_be_read_is_given_up_after_five_tries(
    context: PluginContext, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: replay failing for a reason that is not the server's (here the disk: every read
    of the spool's oldest record fails with EIO) tries the same record 5 times, each failure
    logged with its number and counted in ``replay_failures``, then gives that record up (its
    points counted in ``lost_points``) and moves on. Two unreadable records in a row (4 and 2
    points) each get their own 5 tries, 1 to 5 each time: 5 + 5 = 10 failures (the first post's
    503 was a write, not a replay), 4 + 2 = 6 points lost; the third record (3 points), read
    at its first try, is delivered."""
    sinks: list[InfluxDBSink] = []
    reads_failed: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        if sinks and sinks[0].lost_points < 4 + 2:
            reads_failed.append(offset)
            raise OSError(errno.EIO, "Input/output error")
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    with ScriptedServer(answers(503)) as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, retry_initial=0.001, retry_max=0.01)
        sinks.append(sink)
        await sink.open()
        await sink.write(make_points(0, 4))  # refused (503): spooled
        await sink.flush()
        await sink.write(make_points(4, 2))  # spooled behind it
        await sink.flush()
        await sink.write(make_points(6, 3))
        await sink.flush()
        await until(lambda: sink.spool.records == 0, "the spool to drain")
        await sink.aclose()
    assert len(reads_failed) == 5 + 5
    assert (sink.lost_points, sink.replayed_points) == (4 + 2, 3)
    assert sink.stats()["replay_failures"] == 5 + 5
    failed = [r.getMessage() for r in caplog.records if "replay failed" in r.getMessage()]
    tries = [f"{k} of 5" for k in range(1, 6)]
    assert [m.split("(")[1].split(")")[0] for m in failed] == tries + tries
    assert len(server.accepted) == 1
    assert server.accepted[0].body.decode().count("\n") == 3


@pytest.mark.parametrize("status", [401, 503])
async def test_a_replay_the_server_refuses_is_noted_and_backed_off(
    context: PluginContext, status: int
) -> None:
    """Guards: a replay of the spool an earlier run left (the sink starts "replaying", a healthy
    state) that the server refuses is noted like a refused write, so the next try waits: a 401
    (a token to fix) puts the sink in its settings state, the status says why and the retry
    waits ``retry_max`` (30 ms); a 503 with ``Retry-After: 0.02`` puts it in "retrying", and the
    next try waits the 20 ms asked for (the backoff itself at most 1 ms·2¹ = 2 ms here), then
    delivers the 4 points. Not noted, the sink would stay "replaying" and post again at once."""
    refusals = iter([(status, {"Retry-After": "0.02"}, b'{"message":"no"}')])
    script = refuse(401) if status == 401 else lambda _: next(refusals, (204, {}, b""))
    with ScriptedServer(script) as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, retry_initial=0.001, retry_max=0.03)
        earlier = Spool(sink.spool.directory, max_bytes=1 << 20)  # an earlier run's 4 points
        await earlier.open()
        await earlier.append(lines(0, 4), 4)
        await earlier.close()
        await sink.open()
        if status == 401:
            await until(lambda: len(server.writes) >= 2, "a second try")
            assert sink.machine.state is SinkState.SETTINGS
            assert sink.status().startswith("error: the token was rejected: set [[sinks")
            assert sink.status().endswith("; spooling 4 points")
            assert sink.last_backoff_s == 0.03
            sink.abort()
        else:
            await until(lambda: sink.spool.records == 0, "the spool to drain")
            assert sink.last_backoff_s == 0.02
            assert len(server.writes) == 2 and sink.replayed_points == 4
        await sink.aclose()
    assert sink.stats()["replay_failures"] >= 1 and sink.stats()["lost_points"] == 0
