"""What reaches the server: each point once when a large batch is encoded while another is in
flight, a compressed body with ``gzip = true``, the spool an earlier run left, delivered before
close, and a batch written once it has drained, posted directly."""

from __future__ import annotations

import asyncio
import logging
import re
import threading

import pytest

from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from sinks.influxdb.segments import SegmentFiles
from tests.influxdb.helpers import make_points, make_sink, until
from tests.influxdb.scripted import Answer, Request, ScriptedServer, accept


def lines_of(context: PluginContext, start: int, n: int) -> list[bytes]:
    text = LineEncoder(context.tags).encode_many(make_points(start, n))
    return [line.encode() for line in text.splitlines()]


def busy(_: Request) -> Answer:
    return 503, {}, b'{"message":"busy"}'


async def test_a_large_batch_written_during_a_post_arrives_once(
    context: PluginContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a batch of 1,201 points written while the post before it is in flight (the server
    answers after 0.2 s) is encoded in slices; every point arrives exactly once, none twice at a
    slice boundary and none lost: 10 + 1,201 = 1,211 lines, indices 0..1210, all of them counted
    as sent directly (none spooled or replayed). Between two slices (500 + 500 + 201) the sink
    yields to the event loop, a pause of 0 s, and never waits: a wait there would hold every
    batch back by as much per 500 points. A batch of 500 is one slice (no pause), of 501 two."""
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, result: object = None) -> object:
        pauses.append(delay)
        return await real_sleep(delay, result)

    with ScriptedServer(accept) as server:
        server.set_script(accept, delay_s=0.2)
        sink = make_sink(context, server.url, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 10))  # in flight for 0.2 s
        monkeypatch.setattr(asyncio, "sleep", sleep)
        await sink.write(make_points(10, 1201))  # encoded meanwhile
        assert pauses == [0, 0]
        for n, between in ((500, []), (501, [0])):
            pauses.clear()
            await sink.write(make_points(10 + 1201, n))
            assert pauses == between, n
        monkeypatch.undo()
        await sink.flush()
        await sink.aclose()
        lines = server.accepted_lines()
    stats = sink.stats()
    total = 10 + 1201 + 500 + 501
    assert (stats["sent_points"], stats["spooled_points"], stats["replayed_points"]) == (
        total,
        0,
        0,
    )
    assert len(lines) == total
    indices = sorted(int(re.search(rb"[ ,]n=(\d+)i", line)[1]) for line in lines)  # type: ignore[index]
    assert indices == list(range(1211)) + sorted([*range(1211, 1711), *range(1211, 1712)])


@pytest.mark.parametrize(("version", "path"), [("", "/api/v2/write"), ("1.8.10", "/write")])
async def test_gzip_sends_a_compressed_body(
    context: PluginContext, version: str, path: str
) -> None:
    """Guards: with ``gzip = true`` the body on the wire is compressed, to InfluxDB 2 and 1.x
    alike: 1,000 points of one series (about 70 bytes a line, 70 kB) take a small fraction of
    that (under a fifth), and decompress to every line. The writes name the configured bucket
    and org (InfluxDB 2), or the database the bucket names (1.x)."""
    with ScriptedServer(accept, version=version) as server:
        sink = make_sink(
            context, server.url, gzip=True, drain_timeout=0.0, org="lab", bucket="energy"
        )
        await sink.open()
        await sink.write(make_points(0, 1000))
        await sink.flush()
        await sink.aclose()
        (req,) = server.accepted
    assert req.path == path
    where = ("bucket", "org") if path == "/api/v2/write" else ("db", "precision")
    assert tuple(req.query[k] for k in where) == (
        ("energy", "lab") if version == "" else ("energy", "ns")
    )
    assert req.headers["Content-Encoding"] == "gzip"
    assert len(req.body.splitlines()) == 1000
    assert int(req.headers["Content-Length"]) < len(req.body) / 5


async def test_close_delivers_the_spool_an_earlier_run_left(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: a sink started with points left in its spool (the server was busy during the
    earlier run) says so when it opens, and with a server that answers again waits at close, up
    to ``drain_timeout``, for them to be delivered: all 4 arrive before close returns, none stay
    in the spool, counted as replayed (the earlier run's as spooled, neither as sent directly).
    Its server never failed it, so it logs no warning (no "answers again")."""
    with ScriptedServer(busy) as server:
        earlier = make_sink(context, server.url, drain_timeout=0.0)
        await earlier.open()
        await earlier.write(make_points(0, 4))
        await earlier.flush()
        await earlier.aclose()
        assert earlier.stats()["spool_points"] == 4
        server.set_script(accept, delay_s=0.2)  # the replay is still in flight at close
        sink = make_sink(context, server.url, drain_timeout=60.0)
        caplog.set_level(logging.INFO)
        caplog.clear()  # the earlier run's own warnings
        await sink.open()
        assert sink.status() == "replaying 4 points"
        said = [r.getMessage() for r in caplog.records if "by an earlier run" in r.getMessage()]
        assert said == [
            f"influxdb {sink.where()}: 4 point(s) left in the spool by an earlier run; replaying"
        ]
        await sink.aclose()
        assert len(server.accepted_lines()) == 4
        stats = sink.stats()
        assert (stats["spool_points"], stats["sent_points"], stats["replayed_points"]) == (0, 0, 4)
        assert (earlier.stats()["sent_points"], earlier.stats()["spooled_points"]) == (0, 4)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("version", ["", "1.8.10"])
async def test_only_a_2xx_answer_counts_as_written(context: PluginContext, version: str) -> None:
    """Guards: a batch counts as written only when the server answers 2xx, to InfluxDB 2 and
    1.x alike. 299, the last 2xx, takes the first 5 points; 300 (Multiple Choices, as a proxy
    may answer; not a redirect to follow) does not: its 5 points stay in the spool, not counted
    as sent, and arrive once the server takes them: 5 + 5 = 10 lines, each once. Without an
    org, InfluxDB 2 writes name the org ``-`` (what InfluxDB 1.8's v2 endpoint expects), not
    an empty one."""
    answers = iter([299, 300])

    def script(_: Request) -> Answer:
        return next(answers, 204), {}, b""

    with ScriptedServer(script, version=version) as server:
        sink = make_sink(context, server.url, drain_timeout=0.0, retry_max=0.05)
        await sink.open()
        await sink.write(make_points(0, 5))
        await sink.flush()
        await sink.write(make_points(5, 5))
        await sink.flush()
        stats = sink.stats()
        assert (stats["sent_points"], stats["spool_points"]) == (5, 5)
        assert len(server.accepted_lines()) == 5
        await until(lambda: sink.stats()["spool_points"] == 0, "the replay of the 300's batch")
        await sink.aclose()
        lines = server.accepted_lines()
    indices = sorted(int(re.search(rb"[ ,]n=(\d+)i", line)[1]) for line in lines)  # type: ignore[index]
    assert indices == list(range(10))
    if version == "":
        assert {(r.query["bucket"], r.query["org"]) for r in server.writes} == {("nrg", "-")}


async def test_a_batch_written_while_the_drained_spool_saves_its_cursor_is_posted_directly(
    context: PluginContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: once the server has taken the last spooled record, the sink is back to posting
    directly even while the spool still saves its cursor (a slow disk): a batch written then
    (points 4–6) is sent at once, not spooled behind an empty spool; 4 points replayed, 3 sent,
    none spooled by this run, and the server gets 0–6 in order."""
    with ScriptedServer(busy) as server:
        earlier = make_sink(context, server.url, drain_timeout=0.0)
        await earlier.open()
        await earlier.write(make_points(0, 4))
        await earlier.aclose()
        saving, release = threading.Event(), threading.Event()
        real_commit = SegmentFiles.commit

        def slow_commit(files: SegmentFiles, cursor: tuple[int, int], below: int) -> None:
            saving.set()
            release.wait(10)  # a hang guard
            real_commit(files, cursor, below)

        monkeypatch.setattr(SegmentFiles, "commit", slow_commit)
        server.set_script(accept)
        sink = make_sink(context, server.url, drain_timeout=60.0)
        await sink.open()
        try:
            await until(saving.is_set, "the cursor save after the replay")
            assert (sink.spool.records, sink.status()) == (0, "ok")
            await sink.write(make_points(4, 3))
            await sink.flush()
        finally:
            release.set()
        await sink.aclose()
        assert server.accepted_lines() == lines_of(context, 0, 7)
    stats = sink.stats()
    assert (stats["replayed_points"], stats["sent_points"], stats["spooled_points"]) == (4, 3, 0)


@pytest.mark.parametrize(
    ("credentials", "authorization"),
    [
        # RFC 7617's example: base64("Aladdin:open sesame")
        ({"username": "Aladdin", "password": "open sesame"}, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
        ({"username": "Aladdin"}, "Basic QWxhZGRpbjo="),  # base64("Aladdin:")
        ({"password": "open sesame"}, "Basic Om9wZW4gc2VzYW1l"),  # base64(":open sesame")
        ({}, None),  # authentication off: no header at all
    ],
)
async def test_influxdb1_writes_carry_the_basic_credentials(
    context: PluginContext, credentials: dict[str, str], authorization: str | None
) -> None:
    """Guards: a write to InfluxDB 1.x carries ``Authorization: Basic`` with base64 of
    ``user:password`` whenever a user or a password is set, and no such header when neither
    is (a server with authentication off)."""
    with ScriptedServer(accept, version="1.8.10") as server:
        sink = make_sink(context, server.url, **credentials)
        await sink.open()
        await sink.write(make_points(0, 3))
        await sink.flush()
        await sink.aclose()
    assert sink.api == "v1"
    assert [r.headers.get("Authorization") for r in server.writes] == [authorization]
    assert len(server.accepted_lines()) == 3
