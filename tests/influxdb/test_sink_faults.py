"""The InfluxDB sink against a scripted real HTTP server: token redaction, 413 splitting, a hung
server, order after a spill, one log line per rejection episode, abort at shutdown, points lost
at close."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import sinks.influxdb
from acquisition.api import PluginContext
from acquisition.errors import WriteError
from acquisition.lineproto import LineEncoder
from sinks.influxdb import InfluxDBSink
from sinks.influxdb.http import MAX_MESSAGE, NO_ANSWER
from sinks.influxdb.spool import Spool
from sinks.influxdb.state import SinkState
from tests.influxdb.helpers import T0_NS, drain, make_points, make_sink, open_segments, until
from tests.influxdb.scripted import (
    Request,
    ScriptedServer,
    accept,
    echo_headers,
    hang,
    limit_size,
)


def lines_of(context: PluginContext, start: int, n: int) -> list[bytes]:
    text = LineEncoder(context.tags).encode_many(make_points(start, n))
    return [line.encode() for line in text.splitlines()]


def pieces(secret: str, n: int = 6) -> list[str]:
    """Every ``n``-character piece of ``secret``: none may appear anywhere."""
    return [secret[i : i + n] for i in range(len(secret) - n + 1)]


async def spooled_at_next_start(context: PluginContext, url: str) -> int:
    """The points a sink started afresh finds in the spool."""
    again = make_sink(context, url)
    await again.spool.open()
    try:
        return again.spool.points
    finally:
        await again.spool.close()


@pytest.mark.parametrize("status", [500, 400, 401])
async def test_an_echoed_token_never_reaches_a_log_or_a_file_at_debug_level(
    context: PluginContext, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    token = secrets.token_hex(20)
    caplog.set_level(logging.DEBUG)  # the client library's loggers too, and the root logger
    with ScriptedServer(echo_headers(status, token_at=MAX_MESSAGE - 5)) as server:
        sink = make_sink(context, server.url, token=token, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 4))
        await sink.flush()
        await until(lambda: len(server.writes) >= 2, "a retry or a bisection")
        status_text = sink.status()
        await sink.aclose()
    assert server.writes[0].headers["Authorization"] == f"Token {token}"  # it was echoed
    written = caplog.text + status_text
    dead = sink.dead_letter_path.read_text() if sink.dead_letter_path.exists() else ""
    if status == 400:
        assert "Authorization: Token <tok" in dead  # the message was kept, redacted
    for piece in pieces(token):
        assert piece not in written
        assert piece not in dead


async def test_413_splits_the_body_until_it_fits_and_keeps_the_order(
    context: PluginContext,
) -> None:
    with ScriptedServer(limit_size(700)) as server:
        sink = make_sink(context, server.url)
        await sink.open()
        await sink.write(make_points(0, 50))
        await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 0, 50)
    assert max(len(r.body) for r in server.accepted) <= 700
    assert len(server.writes) > len(server.accepted) > 1  # it had to split
    assert sink.stats()["dead_lettered_points"] == 0


async def test_a_hung_server_is_named_in_words_and_changes_the_state_at_once(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=0.3, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 10))
        await sink.flush()  # the first timeout
        assert sink.machine.state is SinkState.RETRYING
        expected = NO_ANSWER.format(timeout=0.3, url=server.url)
        assert sink.status() == f"retrying ({expected}); spooling 10 points"
        await sink.aclose()
    assert expected in caplog.text
    assert "Error: )" not in caplog.text and "()" not in caplog.text


async def test_a_post_in_flight_shows_as_waiting_only_past_two_seconds(
    context: PluginContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: the status says a post waits for an answer only once it has waited more than
    2 s, and says how long. The sink's clock is a fake one at 1000 s when the post starts (the
    server never answers): at 1000 s, 1001.5 s and exactly 1002 s the status is "ok"; at
    1002.1 s it reads "waiting 2 s" (2.1 s, shown to the second), at 1003.4 s "waiting 3 s"
    (1003.4 − 1000 = 3.4)."""
    now = [1000.0]
    monkeypatch.setattr(sinks.influxdb, "time", SimpleNamespace(monotonic=lambda: now[0]))
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=30.0, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 10))
        await until(lambda: len(server.writes) == 1, "the post to reach the server")
        assert sink.status() == "ok"
        now[0] = 1001.5
        assert sink.status() == "ok"
        now[0] = 1002.0
        assert sink.status() == "ok"
        now[0] = 1002.1
        assert sink.status() == f"waiting 2 s for an answer from {server.url}"
        now[0] = 1003.4
        assert sink.status() == f"waiting 3 s for an answer from {server.url}"
        sink.abort()
        await sink.aclose()


async def test_abort_cuts_the_final_flush_short_and_spools_the_batch(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=3600.0, drain_timeout=3600.0)
        await sink.open()
        await sink.write(make_points(0, 100))
        closing = asyncio.create_task(sink.aclose())
        await asyncio.sleep(0.2)
        assert not closing.done()  # waiting for the hung server
        sink.abort()
        await asyncio.wait_for(closing, 30)  # a hang guard
    assert sink.stats()["lost_points"] == 0
    assert await spooled_at_next_start(context, server.url) == 100


async def test_abort_right_after_a_write_spools_it_and_a_later_spill_in_order(
    context: PluginContext,
) -> None:
    """Guards: a second Ctrl-C that comes before the post of the latest batch has even started
    loses nothing: that batch (points 0–9) and a batch spilled after it (10–19) are both in the
    spool at close, in that order: 20 points, none counted lost."""
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=3600.0, drain_timeout=3600.0)
        await sink.open()
        await sink.write(make_points(0, 10))  # its post is created, not started yet
        sink.spill(make_points(10, 10))  # waits behind it, in order
        sink.abort()
        await asyncio.wait_for(sink.aclose(), 30)  # a hang guard
    # both batches went into the spool this way (held, then spilled): 10 + 10 counted spooled
    assert (sink.stats()["lost_points"], sink.stats()["spooled_points"]) == (0, 20)
    again = make_sink(context, server.url)
    await again.spool.open()
    assert again.spool.points == 20
    assert (await drain(again.spool)).splitlines() == lines_of(context, 0, 20)
    await again.spool.close()


async def test_a_batch_written_while_the_post_in_flight_is_aborted_goes_to_the_spool_behind_it(
    context: PluginContext,
) -> None:
    """Guards: at shutdown the core writes a batch (points 10–19) while the post before it
    (0–9) waits for a server that never answers; a second Ctrl-C aborts that post. The aborted
    batch goes to the spool at once and the waiting one behind it, not posted after the abort:
    the spool holds 20 points, every post the server saw holds 0–9 only (the first, and its
    replay from the spool before close), and the next start finds 0–19 in order."""
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=3600.0, drain_timeout=3600.0)
        await sink.open()
        await sink.write(make_points(0, 10))
        await until(lambda: len(server.writes) == 1, "the post to reach the server")
        second = asyncio.create_task(sink.write(make_points(10, 10)))  # waits for the first
        await asyncio.sleep(0)
        sink.abort()
        await asyncio.wait_for(second, 30)  # a hang guard
        assert sink.spool.points == 20
        await asyncio.wait_for(sink.aclose(), 30)  # a hang guard
    posts = [r.body.splitlines() for r in server.writes]
    assert posts == [lines_of(context, 0, 10)] * len(posts)
    assert (sink.stats()["spooled_points"], sink.stats()["lost_points"]) == (20, 0)
    again = make_sink(context, server.url)
    await again.spool.open()
    assert (await drain(again.spool)).splitlines() == lines_of(context, 0, 20)
    await again.spool.close()


async def test_a_spill_during_a_write_keeps_the_order(context: PluginContext) -> None:
    """A batch taken by the core before a spill reaches the server before the spilled one, also
    when the older one waited for the post in flight (the server answers slowly)."""
    with ScriptedServer(accept) as server:
        server.set_script(accept, delay_s=0.3)
        sink = make_sink(context, server.url)
        await sink.open()
        await sink.write(make_points(0, 10))  # in flight for 0.3 s
        older = asyncio.create_task(sink.write(make_points(10, 10)))  # waits for it
        await asyncio.sleep(0.05)
        sink.spill(make_points(20, 10))  # newer points, spilled meanwhile
        await older
        await sink.write(make_points(30, 10))
        await sink.flush()
        server.set_script(accept)
        await until(lambda: sink.spool.records == 0, "the spool to drain")
        await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 0, 40)


async def test_a_failed_post_goes_to_the_spool_before_a_later_spill(
    context: PluginContext,
) -> None:
    def slow_503(req: Request) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.3)
        return 503, {}, b'{"message":"overloaded"}'

    with ScriptedServer(slow_503) as server:
        sink = make_sink(context, server.url)
        await sink.open()
        await sink.write(make_points(0, 10))  # in flight, then fails
        await asyncio.sleep(0.05)
        sink.spill(make_points(10, 10))
        await sink.flush()
        server.set_script(accept)
        await until(lambda: sink.spool.records == 0, "the spool to drain")
        await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 0, 20)


async def test_rejections_are_logged_once_per_episode_with_counts(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    def reject(req: Request) -> tuple[int, dict[str, str], bytes]:
        return 400, {}, b'{"message":"unable to parse: bad line"}'

    caplog.set_level(logging.WARNING)
    with ScriptedServer(reject) as server:
        sink = make_sink(context, server.url)
        await sink.open()
        for k in range(3):
            await sink.write(make_points(20 * k, 20))
            await sink.flush()
        server.set_script(accept)
        await sink.write(make_points(60, 5))
        await sink.aclose()
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(rejected) == 2, [r.getMessage() for r in rejected]
    assert "rejected 20 line(s)" in rejected[0].getMessage()
    assert "60 line(s) were rejected in all" in rejected[1].getMessage()
    assert sink.stats()["dead_lettered_points"] == 60
    dead = sink.dead_letter_path.read_text().splitlines()
    assert dead[1::2] == [line.decode() for line in lines_of(context, 0, 60)]
    assert server.accepted_lines() == lines_of(context, 60, 5)


@pytest.mark.parametrize(
    ("version", "api", "shown"),
    [("1.6.7", "v1", "1.6.7"), ("v2.7.4", "v2", "2.7.4"), ("", "v2", "(version not given)")],
)
async def test_the_api_is_detected_from_ping(
    context: PluginContext, caplog: pytest.LogCaptureFixture, version: str, api: str, shown: str
) -> None:
    """Guards: without ``api`` set, the API is the one the server's version calls for, and the
    sink says once which server it found and which API it writes through (a server that gives
    no version: said so, and v2)."""
    caplog.set_level(logging.INFO, logger="sinks.influxdb")
    with ScriptedServer(accept, version=version) as server:
        sink = make_sink(context, server.url, bucket="nrg/short")
        await sink.open()
        await sink.write(make_points(0, 3))
        await sink.aclose()
    assert sink.api == api
    (req,) = server.accepted
    if api == "v1":
        assert (req.path, req.query) == ("/write", {"db": "nrg", "rp": "short", "precision": "ns"})
    else:
        assert (req.path, req.query["bucket"]) == ("/api/v2/write", "nrg/short")
    found = [r.getMessage() for r in caplog.records if "the server is" in r.getMessage()]
    assert found == [
        f"influxdb {server.url}: the server is InfluxDB {shown}; writing through the {api} API"
    ]


def test_sink_without_spool_dir_uses_the_state_dir(context: PluginContext, tmp_path: Path) -> None:
    sink = InfluxDBSink(make_sink(context, "http://127.0.0.1:1").config, context)
    assert sink.spool.directory.is_relative_to(context.state_dir)


async def test_an_unreadable_spool_record_is_given_up_after_a_few_tries_and_counted(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """A segment deleted under the agent's feet: replay fails on it a bounded number of times,
    its points are counted as lost, and what comes after is delivered."""
    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=0.2, retry_initial=0.01, retry_max=0.02)
        await sink.open()
        await sink.write(make_points(0, 10))
        await sink.flush()  # spooled after the timeout
        for seg in sink.spool.directory.glob("seg-*.nrgspool"):
            seg.unlink()
        server.set_script(accept)
        await until(lambda: sink.spool.records == 0, "the spool to move on")
        await sink.write(make_points(10, 5))
        await until(lambda: len(server.accepted) == 1, "the next batch to arrive")
        await sink.aclose()
    assert sink.stats()["lost_points"] == 10
    assert server.accepted_lines() == lines_of(context, 10, 5)
    assert "given up" in caplog.text


async def test_a_record_given_up_when_its_cursor_cannot_be_saved_is_logged_and_counted(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: when an unreadable record is given up but the spool cannot save its cursor (here
    ``cursor.tmp`` is a directory), an error says the batch could not be set aside and why;
    the record's 10 points still count as lost (they are gone), and once the disk allows it
    the next batch is delivered."""

    def set_aside_errors() -> list[str]:
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        return [e for e in errors if "cannot set the batch aside" in e]

    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=0.2, retry_initial=0.01, retry_max=0.02)
        await sink.open()
        try:
            await sink.write(make_points(0, 10))
            await sink.flush()  # spooled after the timeout
            for seg in sink.spool.directory.glob("seg-*.nrgspool"):
                seg.unlink()
            blocker = sink.spool.directory / "cursor.tmp"
            blocker.mkdir()
            server.set_script(accept)
            # The record leaves the index before its cursor fails to save: wait for the error.
            await until(lambda: bool(set_aside_errors()), "the record to be given up")
            assert sink.spool.records == 0
            assert all("cursor.tmp" in e for e in set_aside_errors())
            assert sink.stats()["lost_points"] == 10
            blocker.rmdir()
            await sink.write(make_points(10, 5))
            await until(lambda: len(server.accepted) == 1, "the next batch to arrive")
        finally:
            await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 10, 5)
    assert sink.stats()["lost_points"] == 10


async def test_the_runner_cuts_closing_short_at_the_shutdown_deadline(
    context: PluginContext,
) -> None:
    from acquisition.sinking import SinkRunner

    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=3600.0, drain_timeout=3600.0)
        await sink.open()
        runner = SinkRunner("influxdb", sink, batch_size=100, flush_interval_s=1, buffer_limit=1000)
        for p in make_points(0, 100):
            runner.offer(p)
        deadline = time.monotonic() + 0.3
        await runner.close(deadline)  # the batch is posted; the server never answers
        await asyncio.wait_for(runner.close_sink(deadline), 30)  # a hang guard
    assert sink.stats()["lost_points"] == 0
    assert await spooled_at_next_start(context, server.url) == 100


async def test_closing_with_points_the_server_did_not_take_says_how_many_stay_and_where(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: a sink closed while the server refuses its token (401: a setting to fix) keeps
    the 30 points written in its spool and says so in one warning, with their number and the
    spool's directory, so that the user knows they are not lost and where they wait; the next
    start finds the 30. The spool is closed with the sink: none of its segment files stays
    open, nor its writer thread."""

    def refuse(_: Request) -> tuple[int, dict[str, str], bytes]:
        return 401, {}, b'{"message":"unauthorized access"}'

    caplog.set_level(logging.WARNING, logger="sinks.influxdb")
    threads = set(threading.enumerate())
    with ScriptedServer(refuse) as server:
        sink = make_sink(context, server.url)
        await sink.open()
        await sink.write(make_points(0, 30))
        await sink.flush()
        assert open_segments(sink.spool.directory) == 1  # the segment written to
        await sink.aclose()
        assert open_segments(sink.spool.directory) == 0
    assert set(threading.enumerate()) <= threads
    stay = [r.getMessage() for r in caplog.records if "stay in the spool" in r.getMessage()]
    assert stay == [
        f"influxdb {server.url} bucket nrg: 30 point(s) stay in the spool "
        f"{sink.spool.directory} for the next start"
    ]
    assert sink.stats()["lost_points"] == 0
    assert await spooled_at_next_start(context, server.url) == 30


async def test_points_neither_the_server_nor_the_spool_takes_are_counted_and_said_at_close(
    context: PluginContext, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a batch whose post fails (503) while the spool's disk refuses every write (full)
    is lost, and closing says so: its 4 points counted in ``lost_points`` and one error naming
    the count and the disk's reason in words (no errno number before them); the spool holds
    nothing for the next start."""
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if threading.current_thread().name.startswith("nrg-spool"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with ScriptedServer(lambda _: (503, {}, b'{"message":"busy"}')) as server:
        sink = make_sink(context, server.url, drain_timeout=0.0)
        await sink.open()
        monkeypatch.setattr(os, "write", write)
        await sink.write(make_points(0, 4))
        await sink.aclose()
    assert len(server.writes) == 1
    said = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert said == [
        f"influxdb {sink.where()}: 4 point(s) lost: "
        f"spool {sink.spool.directory} cannot write: {os.strerror(errno.ENOSPC)}"
    ]
    assert (sink.stats()["lost_points"], sink.stats()["spool_points"]) == (4, 0)


async def test_a_batch_a_full_disk_refuses_at_close_is_counted_lost_not_said_to_stay(
    context: PluginContext, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a batch whose post had not started when the sink was aborted (a second Ctrl-C)
    is spooled at close; when the disk refuses that write (full), its 10 points are counted in
    ``lost_points`` (the spool's failed points are the sink's lost ones), and closing does not
    say that points stay in the spool for the next start: none do."""
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if threading.current_thread().name.startswith("nrg-spool"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with ScriptedServer(hang) as server:
        sink = make_sink(context, server.url, timeout=3600.0, drain_timeout=3600.0)
        await sink.open()
        monkeypatch.setattr(os, "write", write)
        await sink.write(make_points(0, 10))  # its post is created, not started yet
        sink.abort()
        await asyncio.wait_for(sink.aclose(), 30)  # a hang guard
    assert [r.getMessage() for r in caplog.records if "stay in the spool" in r.getMessage()] == []
    assert (sink.stats()["lost_points"], sink.stats()["spool_points"]) == (10, 0)
    assert await spooled_at_next_start(context, server.url) == 0


async def test_the_age_of_the_oldest_spooled_point_is_given_to_the_millisecond(
    context: PluginContext,
) -> None:
    """Guards: ``spool_oldest_age_seconds`` is the age of the oldest record in the spool in
    seconds, to the millisecond. An earlier run spooled 4 points at T; the sink's spool clock
    reads T + 1.234567891 s: 1.235 s (not 1.23 nor 1.2346)."""
    spooled_at = T0_NS
    sink = make_sink(context, "http://127.0.0.1:1")
    earlier = Spool(sink.spool.directory, max_bytes=1 << 20, clock_ns=lambda: spooled_at)
    await earlier.open()
    await earlier.append(b"m v=1i 1\nm v=2i 2\nm v=3i 3\nm v=4i 4\n", 4)
    await earlier.close()
    await sink.spool.open()
    try:
        sink.spool._clock_ns = lambda: spooled_at + 1_234_567_891  # a fake clock
        assert sink.stats()["spool_oldest_age_seconds"] == 1.235
    finally:
        await sink.spool.close()


async def test_torn_and_corrupt_spool_records_are_both_counted_in_the_sink_stats(
    context: PluginContext,
) -> None:
    """Guards: ``spool_torn_records`` counts every spool record skipped, torn or corrupt. An
    earlier run left 4 records of 10 points (the server was busy); the last one is torn (its
    tail cut off, found at the next start) and the second gets a flipped bit once the spool is
    open (found at replay by its checksum). The replay delivers records 1 and 3: 20 points;
    skipped: 1 torn + 1 corrupt = 2 records, 10 corrupt points."""
    busy: tuple[int, dict[str, str], bytes] = (503, {}, b'{"message":"busy"}')
    with ScriptedServer(lambda _: busy, version="1.8.10") as server:
        earlier = make_sink(context, server.url, drain_timeout=0.0)
        await earlier.open()
        for k in range(4):
            await earlier.write(make_points(10 * k, 10))
            await earlier.flush()
        await earlier.aclose()
        (segment,) = earlier.spool.directory.glob("seg-*.nrgspool")
        with open(segment, "r+b") as f:  # the last record never fully reached the disk
            f.truncate(segment.stat().st_size - 100)
        sink = make_sink(context, server.url, drain_timeout=60.0, retry_max=0.05)
        await sink.open()
        data = segment.read_bytes()
        at = data.index(b"n=15i")  # inside the second record's payload
        with open(segment, "r+b") as f:
            f.seek(at)
            f.write(b"N")
        server.set_script(accept)
        await until(lambda: sink.spool.records == 0, "the replay")
        await sink.aclose()
    stats = sink.stats()
    assert (stats["spool_torn_records"], stats["spool_corrupt_points"]) == (2, 10)
    assert stats["replayed_points"] == 20
    assert server.accepted_lines() == lines_of(context, 0, 10) + lines_of(context, 20, 10)


async def test_a_write_refused_by_a_full_disk_does_not_hold_back_later_batches(
    context: PluginContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards against points kept back in memory: a post fails (503) while the spool's disk is
    full, so the next write is refused (the core keeps that batch and writes it again). Once the
    disk has room again, the batch written again (points 4–7) and a batch spilled after it
    (8–11) go to the spool behind the first (0–3) and reach the server before close returns:
    12 points in order, each once, none left in the spool; all 12 went through the spool."""
    real_write = os.write
    full = threading.Event()
    full.set()

    def write(fd: int, data: bytes) -> int:
        if full.is_set() and threading.current_thread().name.startswith("nrg-spool"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with ScriptedServer(lambda _: (503, {}, b'{"message":"busy"}')) as server:
        sink = make_sink(context, server.url, drain_timeout=60.0, retry_max=0.05)
        await sink.open()
        await sink.write(make_points(0, 4))  # its post fails, and so does spooling it
        with pytest.raises(WriteError):
            await sink.write(make_points(4, 4))  # the core keeps this batch
        full.clear()  # the disk has room again
        await sink.write(make_points(4, 4))  # written again by the core
        sink.spill(make_points(8, 4))
        server.set_script(accept)
        await until(lambda: sink.spool.records == 0, "the spool to drain")
        await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 0, 12)
    stats = sink.stats()
    assert (stats["spool_points"], stats["lost_points"]) == (0, 0)
    assert (stats["sent_points"], stats["spooled_points"], stats["replayed_points"]) == (0, 12, 12)


@pytest.mark.parametrize(
    ("length", "shown"),
    [
        (80, "HTTP 503: " + "x" * 70),  # 10 + 70 = 80 characters: whole, the longest kept so
        (81, "HTTP 503: " + "x" * 69 + "…"),  # 10 + 71 = 81: the first 79 and "…", 80 in all
    ],
)
async def test_the_status_shows_a_failure_reason_of_up_to_80_characters(
    context: PluginContext, length: int, shown: str
) -> None:
    """Guards: the status line shows why the sink retries in at most 80 characters: a reason
    of 80 or fewer whole, a longer one as its first 79 and "…". The server answers 503 with a
    message of ``length - 10`` characters after the 10 of "HTTP 503: "."""
    body = ('{"message":"' + "x" * (length - 10) + '"}').encode()
    with ScriptedServer(lambda _: (503, {}, body), version="1.8.10") as server:
        sink = make_sink(context, server.url, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 2))
        await sink.flush()
        status = sink.status()
        await sink.aclose()
    assert status == f"retrying ({shown}); spooling 2 points"
    assert len(shown) == min(length, 80)


async def test_an_unexpected_error_of_a_direct_post_is_said_and_its_batch_kept(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: a post that fails in a way the sink does not expect (a bug, not the server's
    answer) turns the sink to retrying with the error's type and words in its status line and
    its log, and keeps the batch (spooled, then replayed); a replayed batch whose cursor cannot
    be saved (``cursor.tmp`` a directory) is said with the reason. The next batch follows in
    order: 0–4 then 5–9, each once, none lost."""

    def cursor_errors() -> list[str]:
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        return [e for e in errors if "cannot save the cursor" in e]

    with ScriptedServer(accept) as server:
        sink = make_sink(context, server.url, retry_initial=0.01, retry_max=0.02)
        await sink.open()
        post, calls = sink._post, [0]

        async def fail_once(body: bytes) -> None:
            calls[0] += 1
            if calls[0] == 1:
                raise RuntimeError("boom")
            await post(body)

        sink._post = fail_once  # type: ignore[method-assign]
        blocker = sink.spool.directory / "cursor.tmp"
        blocker.mkdir(parents=True)
        await sink.write(make_points(0, 5))
        await sink.flush()
        assert sink.status() == "retrying (RuntimeError: boom); spooling 5 points"
        await until(lambda: bool(cursor_errors()), "the replayed batch's cursor to fail")
        assert all("cursor.tmp" in e for e in cursor_errors())
        blocker.rmdir()
        await sink.write(make_points(5, 5))
        await until(lambda: len(server.accepted_lines()) == 10, "the 10 points")
        await sink.aclose()
    assert server.accepted_lines() == lines_of(context, 0, 10)
    assert sink.stats()["lost_points"] == 0
    assert "write failed" in caplog.text and "RuntimeError: boom" in caplog.text
