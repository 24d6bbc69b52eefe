"""Pure parts of the InfluxDB sink: error classes, Retry-After, backoff, settings, token handling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.config import parse_config
from acquisition.errors import ConfigError
from sinks.influxdb import (
    REJECT,
    RETRY,
    SETTINGS,
    TOO_LARGE,
    InfluxDBConfig,
    InfluxDBSink,
    backoff_delay,
    classify_status,
    http,
    parse_retry_after,
    settings_hint,
)
from sinks.influxdb.config import Secrets
from sinks.influxdb.http import (
    Failure,
    V1Writer,
    V2Writer,
    describe_exception,
    silence_client_logs,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, REJECT),
        (422, REJECT),
        (413, TOO_LARGE),
        (401, SETTINGS),
        (403, SETTINGS),
        (404, SETTINGS),
        (405, SETTINGS),
        (408, RETRY),
        (429, RETRY),
        (499, SETTINGS),  # the last 4xx (a proxy's "client closed request"): not a retry
        (500, RETRY),
        (502, RETRY),
        (503, RETRY),
        (504, RETRY),
    ],
)
def test_classify_status(status: int, kind: str) -> None:
    assert classify_status(status) == kind


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("nan") is None  # not a number: ignored, not 0 s
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    # HTTP date: 2026-11-23 08:00:30 GMT, 30 s after "now".
    now = 1_795_420_800.0
    assert parse_retry_after("Mon, 23 Nov 2026 08:00:30 GMT", now_s=now) == 30.0
    assert parse_retry_after("Mon, 23 Nov 2026 07:59:00 GMT", now_s=now) == 0.0
    assert parse_retry_after("soon") is None


def test_backoff_is_exponential_jittered_and_capped() -> None:
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [backoff_delay(a, 0.5, 30.0, high) for a in range(8)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
    ]
    assert [backoff_delay(a, 0.5, 30.0, low) for a in range(3)] == [0.25, 0.5, 1.0]
    assert backoff_delay(10_000, 0.5, 30.0, high) == 30.0


def test_settings_hints_name_the_setting() -> None:
    config = InfluxDBConfig(url="http://db:8086", org="lab", bucket="energy")
    assert "token (or token_file)" in settings_hint(401, config)
    assert "bucket 'energy'" in settings_hint(403, config)
    assert settings_hint(404, config) == (
        "bucket 'energy' (org 'lab') does not exist at http://db:8086: create it or fix "
        "[[sinks.influxdb]] bucket / org / url"
    )


def make(context: PluginContext, **kw: object) -> InfluxDBSink:
    return InfluxDBSink(InfluxDBConfig(**kw), context)  # type: ignore[arg-type]


def test_token_from_file(context: PluginContext, tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("  s3cret-token\n")
    sink = make(context, token_file=str(tmp_path / "tok"))
    assert sink._secrets.token == "s3cret-token"


def test_token_settings_errors_never_echo_the_token(context: PluginContext, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="token or token_file, not both"):
        make(context, token="abc", token_file=str(tmp_path / "tok"))
    with pytest.raises(ConfigError, match="token_file: cannot read") as err:
        make(context, token_file=str(tmp_path / "missing"))
    assert "missing" in str(err.value)
    config = InfluxDBConfig(token="very-secret-value")
    assert "very-secret-value" not in repr(config)
    assert "very-secret-value" not in str(config)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "localhost:8086"}, "url: 'localhost:8086' is not an http"),
        ({"bucket": ""}, "bucket: must not be empty"),
        ({"fsync": "sometimes"}, "fsync:"),
        ({"timeout": 0.0}, "timeout: must be > 0"),
    ],
)
def test_bad_settings_are_config_errors(
    context: PluginContext, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make(context, **options)


def test_toml_keys_map_to_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLUX_TOKEN", "tok-from-env")
    config = parse_config(
        """
[[sinks.influxdb]]
url = "http://127.0.0.1:8086"
org = "lab"
bucket = "energy"
token = "${INFLUX_TOKEN}"
timeout = "2s"
batch_size = 1000
flush_interval = "500ms"
spool_max_bytes = "64MiB"
fsync = "1s"
retry_max = "1m"
"""
    )
    (spec,) = config.sinks
    assert (spec.batch_size, spec.flush_interval) == (1000, 0.5)
    from acquisition.config import build_dataclass

    built = build_dataclass(InfluxDBConfig, spec.options, spec.where)
    assert built.token == "tok-from-env"
    assert (built.timeout, built.spool_max_bytes, built.fsync, built.retry_max) == (
        2.0,
        64 << 20,
        "1s",
        60.0,
    )


async def test_spool_dir_is_per_destination(context: PluginContext) -> None:
    a = make(context, url="http://a:8086", bucket="x")
    b = make(context, url="http://b:8086", bucket="x")
    again = make(context, url="http://a:8086", bucket="x")
    assert a.spool.directory != b.spool.directory
    assert a.spool.directory == again.spool.directory
    assert a.spool.directory.parent == context.state_dir / "spool"


async def test_unreachable_server_spools_and_logs_once(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.influxdb.helpers import make_points, make_sink
    from tests.servers import free_port

    caplog.set_level(logging.WARNING)
    sink = make_sink(context, f"http://127.0.0.1:{free_port()}", drain_timeout=0.0)
    await sink.open()
    for k in range(3):
        await sink.write(make_points(10 * k, 10))
    await sink.flush()
    assert sink.spool.points == 30
    assert sink.status().startswith("retrying (ClientConnectorError")
    assert sink.status().endswith("spooling 30 points")
    await sink.aclose()
    assert sum("failing (" in r.getMessage() for r in caplog.records) == 1


async def test_a_cancelled_write_does_not_orphan_the_batch_in_flight(
    context: PluginContext,
) -> None:
    from tests.influxdb.helpers import make_points, make_sink

    # A server that accepts connections and never answers: the post in flight ends by timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        sink = make_sink(context, url, timeout=0.5, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 100))  # in flight until the timeout
        second = asyncio.create_task(sink.write(make_points(100, 10)))
        await asyncio.sleep(0.05)  # second is now waiting for the first
        second.cancel()  # as the core does at shutdown; the core keeps that batch itself
        with contextlib.suppress(asyncio.CancelledError):
            await second
        await sink.aclose()  # must wait for the first and spool it
    assert sink.stats()["lost_points"] == 0
    reopened = make_sink(context, url)
    await reopened.spool.open()
    assert reopened.spool.points == 100
    await reopened.spool.close()


# --- the state machine and the ticket order -------------------------------------------------------


def test_state_machine_transitions_and_who_hears_them() -> None:
    from sinks.influxdb.state import Event, SinkState, StateMachine

    heard: list[tuple[str, str, str]] = []
    machine = StateMachine(lambda old, new, why: heard.append((old.value, new.value, why)))
    S, E = SinkState, Event
    steps = [
        (E.ANSWERED, S.OK),  # nothing to change
        (E.BACKLOG, S.REPLAYING),
        (E.FAILED, S.RETRYING),
        (E.BACKLOG, S.RETRYING),  # still failing: more backlog changes nothing
        (E.REFUSED, S.SETTINGS),
        (E.DRAINED, S.SETTINGS),  # an empty spool does not mean the server answers
        (E.ANSWERED, S.REPLAYING),
        (E.DRAINED, S.OK),
    ]
    for event, expected in steps:
        assert machine.fire(event, f"because {event.value}") is expected, event
    assert heard == [
        ("ok", "replaying", "because backlog"),
        ("replaying", "retrying", "because failed"),
        ("retrying", "settings", "because refused"),
        ("settings", "replaying", "because answered"),
        ("replaying", "ok", "because drained"),
    ]
    assert machine.reason == ""  # healthy again: no reason left
    machine.fire(E.FAILED, "no answer")
    assert (machine.state, machine.reason, machine.healthy) == (S.RETRYING, "no answer", False)


def test_ticket_order_spools_in_ticket_order() -> None:
    from sinks.influxdb.order import TicketOrder

    spooled: list[bytes] = []
    order = TicketOrder(lambda body, n: spooled.append(body))
    a, b, c, d = (order.take() for _ in range(4))
    order.place(b, (b"b", 1))  # spilled while a is still in flight: waits
    order.place(d, (b"d", 1))
    assert spooled == [] and order.waiting
    order.place(a, (b"a", 1))  # a's post failed: spooled first, then b
    assert spooled == [b"a", b"b"]
    order.place(c, None)  # c was delivered directly: d may follow
    assert spooled == [b"a", b"b", b"d"] and not order.waiting
    e = order.take()
    order.place(order.take(), (b"f", 1))
    order.place_all()  # at close, whatever waits goes in order
    assert spooled[-1] == b"f" and e == 4


def test_a_held_body_is_spooled_at_close_only_if_its_ticket_was_never_placed() -> None:
    """Guards: a body posted directly (held) makes nothing wait and is not spooled once its post
    settles; a held body whose post never ran is spooled at close, before a later spill."""
    from sinks.influxdb.order import TicketOrder

    spooled: list[bytes] = []
    order = TicketOrder(lambda body, n: spooled.append(body))
    a = order.take()
    order.hold(a, (b"a", 1))
    assert not order.waiting  # a direct post does not send later batches to the spool
    order.place(a, None)  # delivered
    b = order.take()
    order.hold(b, (b"b", 1))  # its post is cancelled before it starts: never placed
    order.place(order.take(), (b"c", 1))  # spilled behind it: waits
    assert spooled == [] and order.waiting
    order.place_all()
    assert spooled == [b"b", b"c"]


@pytest.mark.parametrize("version", ["", "1.8.10"], ids=["v2", "v1"])
async def test_a_write_the_server_never_answers_ends_at_the_configured_timeout(
    context: PluginContext, version: str
) -> None:
    """Guards: ``timeout`` (seconds) bounds each write on both APIs (the InfluxDB 2 client
    takes milliseconds): a server that answers ``/ping`` but never a write gives up the post
    after 0.2 s, the batch is spooled and the status names the timeout."""
    from sinks.influxdb.http import NO_ANSWER
    from tests.influxdb.helpers import make_points, make_sink
    from tests.influxdb.scripted import ScriptedServer, hang

    with ScriptedServer(hang, version=version) as server:
        sink = make_sink(context, server.url, timeout=0.2, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 10))
        await asyncio.wait_for(sink.flush(), 30)  # a hang guard: without a timeout, forever
        assert sink.api == ("v1" if version else "v2")
        assert sink.spool.points == 10
        no_answer = NO_ANSWER.format(timeout=0.2, url=server.url)
        assert sink.status() == f"retrying ({no_answer}); spooling 10 points"
        await sink.aclose()


class _Kept(logging.Handler):
    """A handler that keeps the message of every record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def test_silencing_the_client_drops_only_its_own_records() -> None:
    """Guards: keeping influxdb-client's records (which may echo a token) out of the logs drops
    only those: a record logged on the root logger by other code (a plugin's
    ``logging.warning``) still reaches the root logger's handlers; one logged there from
    influxdb-client's own files does not."""
    silence_client_logs()
    root = logging.getLogger()
    handler = _Kept()
    seen = handler.seen
    root.addHandler(handler)
    try:
        for path, message in (
            ("/venv/site-packages/influxdb_client/rest.py", "Authorization: Token s3cret"),
            ("/srv/nrg_plugins/meter.py", "a plugin's warning"),
        ):
            root.handle(root.makeRecord("root", logging.WARNING, path, 1, message, (), None))
    finally:
        root.removeHandler(handler)
    assert seen == ["a plugin's warning"]


async def test_the_clients_own_warnings_are_printed_nowhere(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Guards: influxdb-client sets its loggers to WARNING whenever a client is made, and they do
    not propagate: without a handler of their own, Python's last-resort handler would print
    their warnings (which may echo a token) on the agent's stderr. After silencing, a client
    made and a warning and an error logged on each of its loggers print nothing. (pytest hangs
    its capture handlers on loggers that do not propagate; the agent has none: they are taken
    off while the client logs, and put back.)"""
    from influxdb_client.client._base import LOGGERS_NAMES
    from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync

    silence_client_logs()
    lib = logging.getLogger("influxdb_client")
    pytests = [h for h in lib.handlers if type(h).__module__.startswith("_pytest")]
    client = InfluxDBClientAsync(url="http://127.0.0.1:9", token="s3cret-token", org="-")
    for handler in pytests:
        lib.removeHandler(handler)
    try:
        for name in LOGGERS_NAMES:
            logger = logging.getLogger(name)
            logger.warning("Authorization: Token s3cret-token")
            logger.error("Authorization: Token s3cret-token")
    finally:
        for handler in pytests:
            lib.addHandler(handler)
        await client.close()
    out, err = capfd.readouterr()
    assert "s3cret" not in out + err


def test_a_network_failure_is_told_in_words() -> None:
    """Guards: the reason a write failed, as the status line and the log say it: a timeout as
    the seconds waited and the URL, a closed connection as such, an exception without text by
    its name and the URL (never an empty reason), any other by its name and text."""
    url = "http://db:8086"

    class ServerDisconnectedError(Exception):  # aiohttp's, by name
        pass

    assert describe_exception(TimeoutError(), url, 2.5) == "no answer within 2.5 s from " + url
    assert describe_exception(ServerDisconnectedError("x"), url, 2.5) == (
        "http://db:8086 closed the connection without answering"
    )
    assert describe_exception(OSError(), url, 2.5) == (
        "OSError while writing to http://db:8086 (no details given)"
    )
    assert describe_exception(ConnectionResetError("  "), url, 2.5) == (
        "ConnectionResetError while writing to http://db:8086 (no details given)"
    )
    assert describe_exception(ConnectionRefusedError(111, "refused"), url, 2.5) == (
        "ConnectionRefusedError: [Errno 111] refused"
    )


async def test_the_influxdb2_writer_silences_the_client_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guards: an InfluxDB 2 sink keeps influxdb-client's records (which may echo the token)
    out of the logs from the moment its writer exists, whatever ran before in the process: a
    critical record of the client's own logger and one the client logs on the root logger
    reach no handler of the root logger; another module's record still does."""
    lib, root = logging.getLogger("influxdb_client"), logging.getLogger()
    saved = (lib.level, lib.propagate, list(lib.handlers), list(root.filters))
    monkeypatch.setattr(http, "_silenced", False)  # as in a process that has not written yet
    lib.setLevel(logging.NOTSET)
    lib.propagate = True
    lib.handlers = []
    root.filters = []
    handler = _Kept()
    seen = handler.seen
    root.addHandler(handler)
    try:
        config = InfluxDBConfig(token="s3cret-token")
        await V2Writer(config, Secrets(config)).close()
        logging.getLogger("influxdb_client.rest").critical("Authorization: Token s3cret")
        path = "/venv/site-packages/influxdb_client/rest.py"
        root.handle(root.makeRecord("root", logging.WARNING, path, 1, "body", (), None))
        logging.getLogger("nrg.other").warning("kept")
    finally:
        root.removeHandler(handler)
        lib.setLevel(saved[0])
        lib.propagate, lib.handlers, root.filters = saved[1], saved[2], saved[3]
    assert seen == ["kept"]


async def test_the_influxdb2_client_waits_the_configured_timeout() -> None:
    """Guards: the InfluxDB 2 client is given the sink's ``timeout`` in the milliseconds it
    takes: 2.5 s is 2500 ms, 0.2 s is 200 ms (not a thousandth more or less)."""
    for seconds, ms in ((2.5, 2500), (0.2, 200)):
        config = InfluxDBConfig(token="s3cret-token", timeout=seconds)
        writer = V2Writer(config, Secrets(config))
        try:
            assert writer._client.conf.timeout == ms
        finally:
            await writer.close()


async def test_a_writer_passes_an_error_of_its_own_on_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guards: an InfluxDB 1 write that fails for a reason that is not the network (a bug: here
    aiohttp's ``post`` raising ``RuntimeError("boom")``) raises that very error, which the sink
    then says by its type and words; a network error (``ConnectionResetError``) becomes a
    retryable failure that names it."""
    import aiohttp

    config = InfluxDBConfig(url="http://127.0.0.1:9", bucket="nrg", username="u", password="pw")
    writer = V1Writer(config, Secrets(config))
    boom = RuntimeError("boom")

    def raising(error: Exception) -> object:
        def post(*args: object, **kwargs: object) -> object:
            raise error

        return post

    monkeypatch.setattr(aiohttp.ClientSession, "post", raising(boom))
    with pytest.raises(RuntimeError) as info:
        await writer.post(b"m v=1 1\n")
    assert info.value is boom
    monkeypatch.setattr(aiohttp.ClientSession, "post", raising(ConnectionResetError(104, "reset")))
    with pytest.raises(Failure) as failed:
        await writer.post(b"m v=1 1\n")
    assert (failed.value.kind, str(failed.value)) == (
        RETRY,
        "ConnectionResetError: [Errno 104] reset",
    )
    await writer.close()
