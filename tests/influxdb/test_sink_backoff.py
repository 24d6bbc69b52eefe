"""The InfluxDB sink's retry delay after an answer that needs the user (401/403/404)."""

from __future__ import annotations

import pytest

from acquisition.api import PluginContext
from sinks.influxdb.state import SinkState
from tests.influxdb.helpers import make_points, make_sink, until
from tests.influxdb.scripted import Answer, Request, ScriptedServer


def refuse(status: int) -> object:
    def script(_: Request) -> Answer:
        return status, {"Content-Type": "application/json"}, b'{"message":"not allowed"}'

    return script


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_settings_error_retries_at_the_cap_not_the_initial_delay(
    context: PluginContext, status: int
) -> None:
    """Guards: after a 401/403/404 (a token or bucket to fix) the sink waits ``retry_max``
    (0.3 s here) between tries, not ``retry_initial`` (0.05 s): asking every 50 ms cannot help
    until the user fixes the setting."""
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
