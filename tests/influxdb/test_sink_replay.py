"""The InfluxDB sink's replay of its spool when replaying fails for a reason that is not the
server's (a disk that cannot read a record, a bug): the tries are numbered and backed off, a
readable batch is set aside in the dead-letter file, and a spilled batch is replayed on its own.

The sink's waits go through a fake ``asyncio.sleep`` that notes each delay and returns at once:
the backoff is read from what the sink asked to wait, never from the clock."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from typing import Any

import pytest

import sinks.influxdb
from acquisition.api import PluginContext
from acquisition.lineproto import LineEncoder
from sinks.influxdb import InfluxDBSink
from sinks.influxdb.spool import Spool
from sinks.influxdb.state import SinkState
from tests.influxdb.helpers import lines, make_points, make_sink, until
from tests.influxdb.scripted import Answer, Request, ScriptedServer, accept

_real_sleep = asyncio.sleep


class _Waits:
    """Stands for the ``asyncio`` module in the sink: its sleeps are noted (with the sink's
    status at that moment) and return at once; everything else is asyncio's own."""

    def __init__(self) -> None:
        self.sink: InfluxDBSink | None = None
        self.delays: list[float] = []
        self.statuses: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: object = None) -> object:
        if delay > 0:
            self.delays.append(delay)
            self.statuses.append(self.sink.status() if self.sink is not None else "")
        return await _real_sleep(0, result)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> _Waits:
    fake = _Waits()
    monkeypatch.setattr(sinks.influxdb, "asyncio", fake)
    return fake


async def left_by_an_earlier_run(sink: InfluxDBSink, *bodies: tuple[bytes, int]) -> None:
    """Spool ``bodies`` in ``sink``'s spool directory, as an earlier run whose server was down."""
    earlier = Spool(sink.spool.directory, max_bytes=1 << 20)
    await earlier.open()
    for body, points in bodies:
        await earlier.append(body, points)
    await earlier.close()


def encoded(context: PluginContext, start: int, n: int) -> list[bytes]:
    text = LineEncoder(context.tags).encode_many(make_points(start, n))
    return [line.encode() for line in text.splitlines()]


async def test_an_unreadable_record_gets_five_numbered_tries_each_backed_off_longer(
    context: PluginContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    waits: _Waits,
) -> None:
    """Guards: an earlier run left two records, A (points 0–1) and B (points 2–5); the disk
    cannot read B. A is replayed; then B is tried 5 times, numbered "1 of 5" to "5 of 5" (the
    count starts again after A's success), given up (4 points lost), and a later batch is
    delivered. Each failure turns the status to retrying with the error's words, and each next
    try waits longer: ``retry_initial`` 1 s, full jitter (half to all of the delay), so the
    waits before tries 2 to 5 lie in [1, 2], [2, 4], [4, 8] and [8, 16] s (1 s·2^k for the
    k-th failure, its half below)."""
    unreadable = lines(2, 4)

    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        if unreadable in data:
            raise OSError(errno.EIO, "Input/output error")
        return data

    with ScriptedServer(accept) as server:
        sink = make_sink(
            context, server.url, retry_initial=1.0, retry_max=1000.0, replay_batch_bytes=1
        )
        waits.sink = sink
        await left_by_an_earlier_run(sink, (lines(0, 2), 2), (unreadable, 4))
        monkeypatch.setattr(os, "pread", pread)
        await sink.open()
        await until(lambda: sink.lost_points == 4, "B to be given up", timeout=10)
        await sink.write(make_points(6, 3))
        await until(lambda: len(server.accepted) == 2, "the later batch", timeout=10)
        await sink.aclose()
    failed = [r.getMessage() for r in caplog.records if "replay failed" in r.getMessage()]
    assert [m.split("(")[1].split(")")[0] for m in failed] == [f"{k} of 5" for k in range(1, 6)]
    why = "OSError: [Errno 5] Input/output error"
    assert all(m.endswith(why) for m in failed)
    for k, delay in enumerate(waits.delays[:4], start=1):  # before tries 2, 3, 4, 5
        assert 2.0 ** (k - 1) <= delay <= 2.0**k, (k, waits.delays)
    assert waits.statuses[:4] == [f"retrying ({why}); spooling 4 points"] * 4
    assert server.accepted_lines() == [*lines(0, 2).splitlines(), *encoded(context, 6, 3)]
    stats = sink.stats()
    assert (stats["replayed_points"], stats["lost_points"], stats["replay_failures"]) == (5, 4, 5)


async def test_a_readable_batch_that_replay_keeps_failing_on_goes_to_the_dead_letter_file(
    context: PluginContext, caplog: pytest.LogCaptureFixture, waits: _Waits
) -> None:
    """Guards: a spool batch that can be read but whose replay fails 5 times in a row for a
    reason that is not the server's (here a bug: ``RuntimeError: boom``) is set aside so the
    rest of the spool moves on: its 4 lines go to the dead-letter file, each under the error,
    counted in ``dead_lettered_points``, not as lost, and the spool is empty. The next batch
    (points 0–2) is then delivered."""
    with ScriptedServer(accept) as server:
        sink = make_sink(context, server.url, retry_initial=0.001, retry_max=0.01)
        await left_by_an_earlier_run(sink, (lines(0, 4), 4))
        post, calls = sink._post, [0]

        async def fail_five_times(body: bytes) -> None:
            calls[0] += 1
            if calls[0] <= 5:
                raise RuntimeError("boom")
            await post(body)

        sink._post = fail_five_times  # type: ignore[method-assign]
        await sink.open()
        await until(lambda: sink.spool.records == 0, "the batch to be set aside", timeout=10)
        await sink.write(make_points(0, 3))
        await until(lambda: len(server.accepted) == 1, "the next batch", timeout=10)
        await sink.aclose()
    dead = sink.dead_letter_path.read_text().splitlines()
    assert dead[1::2] == lines(0, 4).decode().splitlines()
    assert all(d.startswith("# ") and d.endswith("RuntimeError: boom") for d in dead[0::2])
    stats = sink.stats()
    # the next batch came while the sink was still retrying: spooled, then replayed
    assert (stats["dead_lettered_points"], stats["lost_points"], stats["replayed_points"]) == (
        4,
        0,
        3,
    )
    assert stats["replay_failures"] == 5
    assert server.accepted_lines() == encoded(context, 0, 3)
    assert calls[0] == 6


async def test_a_spilled_batch_is_replayed_though_nothing_else_is_written(
    context: PluginContext,
) -> None:
    """Guards: a batch the core spills (its queue was full) while the sink is idle is replayed
    without waiting for a later write: the 5 points reach the server, counted as spooled and
    replayed, none left in the spool."""
    with ScriptedServer(accept) as server:
        sink = make_sink(context, server.url, drain_timeout=0.0)
        await sink.open()
        sink.spill(make_points(0, 5))
        await until(lambda: len(server.accepted) == 1, "the spilled batch", timeout=10)
        await sink.aclose()
    assert server.accepted_lines() == encoded(context, 0, 5)
    stats = sink.stats()
    assert (stats["spooled_points"], stats["replayed_points"], stats["spool_points"]) == (5, 5, 0)


async def test_after_a_spill_the_spool_had_no_room_for_batches_are_posted_directly_again(
    context: PluginContext,
) -> None:
    """Guards: a spilled batch the spool has no room for (10 points, about 800 bytes, against a
    quota of 300 bytes) is dropped and counted; the spool is still empty, so the sink goes back
    to posting directly: the next batch (2 points) is sent at once, not queued for the spool
    (where it would be dropped too)."""
    with ScriptedServer(accept) as server:
        sink = make_sink(context, server.url, drain_timeout=0.0, spool_max_bytes=300)
        await sink.open()
        sink.spill(make_points(0, 10))
        await until(lambda: sink.machine.state is SinkState.OK, "the state ok again", timeout=5)
        await sink.write(make_points(10, 2))
        await sink.flush()
        await sink.aclose()
    assert server.accepted_lines() == encoded(context, 10, 2)
    stats = sink.stats()
    assert (stats["spool_dropped_points"], stats["sent_points"], stats["spooled_points"]) == (
        10,
        2,
        0,
    )


def answers_503_then_204() -> Any:
    """A 503 to the first post, 204 to every later one."""
    first = iter([503])

    def script(_: Request) -> Answer:
        status = next(first, 204)
        return status, {}, b'{"message":"busy"}' if status != 204 else b""

    return script


async def test_a_batch_written_while_the_post_before_it_fails_arrives_after_it(
    context: PluginContext,
) -> None:
    """Guards: a batch written while the post before it is in flight waits for that post's
    outcome. The first post (points 0–9) fails (503) and is spooled; the second batch (10–19)
    is then spooled behind it, not posted directly ahead of it, though the server answers again:
    the server gets 0–19 in order, all 20 through the spool."""
    with ScriptedServer(answers_503_then_204()) as server:
        sink = make_sink(context, server.url, retry_initial=0.001, retry_max=0.01)
        await sink.open()
        await sink.write(make_points(0, 10))  # in flight
        await sink.write(make_points(10, 10))
        await sink.flush()
        await until(lambda: sink.spool.records == 0, "the spool to drain", timeout=10)
        await sink.aclose()
    assert server.accepted_lines() == encoded(context, 0, 20)
    stats = sink.stats()
    assert (stats["sent_points"], stats["spooled_points"], stats["replayed_points"]) == (0, 20, 20)


async def test_closing_returns_once_the_spool_is_delivered_not_at_drain_timeout(
    context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards: closing waits for the spool an earlier run left to be delivered, and no longer:
    with ``drain_timeout`` an hour, close returns as soon as the 4 points are in (a hang guard
    of 10 s, never reached)."""
    caplog.set_level(logging.INFO)
    with ScriptedServer(accept) as server:
        sink = make_sink(context, server.url, drain_timeout=3600.0)
        await left_by_an_earlier_run(sink, (lines(0, 4), 4))
        await sink.open()
        await asyncio.wait_for(sink.aclose(), 10)
    assert server.accepted_lines() == lines(0, 4).splitlines()
    assert (sink.stats()["replayed_points"], sink.stats()["spool_points"]) == (4, 0)


async def test_closing_after_a_first_replayed_record_waits_for_the_next_one(
    context: PluginContext,
) -> None:
    """Guards: closing while the replay of an earlier run's spool is under way, one record
    delivered (A, points 0–1) and the next (B, points 2–5) still posted (the server takes 0.1 s
    to answer it), waits for B and returns: all 6 points delivered, none left in the spool."""

    def slow_b(req: Request) -> Answer:
        if lines(2, 1) in req.body:
            time.sleep(0.1)
        return 204, {}, b""

    with ScriptedServer(slow_b) as server:
        sink = make_sink(context, server.url, drain_timeout=3600.0, replay_batch_bytes=1)
        await left_by_an_earlier_run(sink, (lines(0, 2), 2), (lines(2, 4), 4))
        await sink.open()
        await until(lambda: sink.replayed_points == 2, "A to be replayed", timeout=10)
        await asyncio.wait_for(sink.aclose(), 10)  # a hang guard
    assert server.accepted_lines() == lines(0, 6).splitlines()
    assert (sink.stats()["replayed_points"], sink.stats()["spool_points"]) == (6, 0)
