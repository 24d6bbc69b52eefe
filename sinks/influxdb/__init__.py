"""InfluxDB sink: pre-encoded line protocol to InfluxDB's v2 or v1 write API.

- ``api = "v2"``: ``POST /api/v2/write`` through ``influxdb-client`` (InfluxDB 2.x, 3.x, 1.8+
  through its compatibility endpoint, VictoriaMetrics). ``api = "v1"``: ``POST /write?db=&rp=``
  (InfluxDB 1.x, InfluxDB 3's v1 endpoint). Unset: detected from ``/ping``. Precision ns.

The sink owns retries and durability (the client library's own retries stay off):
- ``write(batch)`` posts directly while the spool is empty and the server answers; otherwise, or
  when a post fails with a retryable error, the batch goes to the on-disk spool
  (:mod:`sinks.influxdb.spool`) and a background task replays the spool oldest first, with
  exponential backoff, full jitter and a cap (``retry_max``), honouring ``Retry-After`` up to
  that cap.
- Retryable: connection refused/reset, no answer within ``timeout``, 5xx, 408, 429.
- 400 (bad line) and 422 (field type conflict, out of retention): the body is bisected until the
  rejected lines are isolated; the rest is written, each rejected line goes to the dead-letter
  file with the server's message and is counted; one log line per episode. 413 splits the body.
- 401/403/404 and other 4xx: a configuration problem. The points stay in the spool, the sink logs
  once which setting to fix and keeps retrying at the cap.
- ``spill(points)`` (the core calls it when its in-memory queue is full) appends to the spool
  without blocking the loop. Points reach the server in the order they left the core's queue.

The state (ok, replaying, retrying, settings) is a small state machine: :mod:`.state`.
Delivery is at least once: a batch whose answer is lost (crash, timeout after the server stored
it) is sent again; InfluxDB keeps one point per series and timestamp, so this is harmless there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import ClassVar

from acquisition.api import PluginContext
from acquisition.errors import ConfigError, WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from sinks.influxdb.config import (
    API_V1,
    API_V2,
    InfluxDBConfig,
    Secrets,
    settings_hint,
    spool_ident,
)
from sinks.influxdb.http import (
    REJECT,
    RETRY,
    SETTINGS,
    TOO_LARGE,
    Failure,
    V1Writer,
    V2Writer,
    backoff_delay,
    classify_status,
    detect_api,
    parse_retry_after,
)
from sinks.influxdb.order import TicketOrder
from sinks.influxdb.rejects import DeadLetter, bisect, lines_of
from sinks.influxdb.spool import Spool, SpoolBatch, parse_fsync_policy
from sinks.influxdb.state import Event, SinkState, StateMachine

__all__ = [
    "REJECT",
    "RETRY",
    "SETTINGS",
    "TOO_LARGE",
    "Failure",
    "InfluxDBConfig",
    "InfluxDBSink",
    "backoff_delay",
    "classify_status",
    "parse_retry_after",
    "settings_hint",
]

log = logging.getLogger(__name__)

_ENCODE_SLICE = 500
"""Points encoded between two yields to the event loop (~1 ms of work)."""
MAX_UNEXPECTED = 5
"""Unexpected errors (a bug, not the server) replaying the same spool batch before it is moved
to the dead-letter file, so one bad batch cannot stop replay for good."""
SLOW_ANSWER_S = 2.0
"""A post in flight longer than this shows in the status as waiting for an answer."""


class InfluxDBSink:
    """Writes batches to InfluxDB, spooling to disk whatever it cannot write now."""

    name: ClassVar[str] = "influxdb"
    config_class: ClassVar[type] = InfluxDBConfig

    def __init__(self, config: InfluxDBConfig, context: PluginContext) -> None:
        config.check()
        self.config = config
        self.context = context
        self._secrets = Secrets(config)
        try:
            policy = parse_fsync_policy(config.fsync)
        except ValueError as exc:
            raise ConfigError(f"[[sinks.influxdb]] fsync: {exc}") from None
        spool_dir = (
            Path(config.spool_dir).expanduser()
            if config.spool_dir
            else context.state_dir / "spool" / f"influxdb-{spool_ident(config)}"
        )
        self.spool = Spool(
            spool_dir,
            max_bytes=config.spool_max_bytes,
            segment_bytes=config.spool_segment_bytes,
            fsync=policy,
        )
        self.dead_letter = DeadLetter(
            Path(config.dead_letter).expanduser()
            if config.dead_letter
            else spool_dir / "dead-letter.lp",
            self.where,
        )
        self.dead_letter_path = self.dead_letter.path
        self._encoder = LineEncoder(context.tags)
        self._writer: V1Writer | V2Writer | None = None
        self.api = config.api
        """The API in use ("v1"/"v2"); empty until detected."""
        self._send_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._aborted = asyncio.Event()
        self._replayer: asyncio.Task[None] | None = None
        self.machine = StateMachine(self._on_state_change)
        self._detail = ""
        self._attempt = 0
        self._unexpected = 0
        self._retry_after: float | None = None
        self.last_backoff_s = 0.0
        """The delay before the latest replay attempt (backoff, at least Retry-After)."""
        self._inflight: asyncio.Task[None] | None = None
        self._post_started: float | None = None
        self._unspooled: collections.deque[tuple[bytes, int]] = collections.deque()
        self._order = TicketOrder(self._spool_nowait)
        # Counters published as nrg_collect self-stats.
        self.sent_points = 0
        self.replayed_points = 0
        self.spooled_points = 0
        self.retries = 0
        self.requests = 0
        self.lost_points = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover the spool (replaying what an earlier run left); the HTTP client is created
        at the first post (after detecting the API when ``api`` is unset)."""
        await self.spool.open()
        log.debug(
            "influxdb %s: spool %s (fsync %s, quota %d bytes)",
            self.where(),
            self.spool.directory,
            self.spool.policy.describe(),
            self.spool.max_bytes,
        )
        if self.spool.records:
            log.info(
                "influxdb %s: %d point(s) left in the spool by an earlier run; replaying",
                self.where(),
                self.spool.points,
            )
            self.machine.fire(Event.BACKLOG)
            self._wake.set()
        self._replayer = asyncio.create_task(self._replay_loop(), name="influxdb replay")

    async def aclose(self) -> None:
        """Finish the post in flight, give the replayer ``drain_timeout`` to empty the spool,
        then close everything. :meth:`abort` cuts both waits short."""
        await self._until_aborted(self._settle_at_close(), None)
        if self._replayer is not None:
            if self.spool.records and self.machine.healthy and not self._aborted.is_set():
                await self._until_aborted(self.wait_drained(), self.config.drain_timeout)
            self._replayer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replayer
            self._replayer = None
        self._order.place_all()
        await self.spool.flush()
        if self.spool.records:
            log.warning(
                "influxdb %s: %d point(s) stay in the spool %s for the next start",
                self.where(),
                self.spool.points,
                self.spool.directory,
            )
        await self.spool.close()
        if self._writer is not None:
            await self._writer.close()
            self._writer = None

    def abort(self) -> None:
        """Cut the final flush short (a second Ctrl-C/SIGTERM): the post in flight is cancelled
        and its batch spooled; ``aclose`` stops waiting for the spool to drain."""
        self._aborted.set()
        if self._inflight is not None and not self._inflight.done():
            self._inflight.cancel()

    async def _settle_at_close(self) -> None:
        try:
            await self._settle()
        except WriteError as exc:
            lost = sum(n for _, n in self._unspooled)
            self._unspooled.clear()
            self.lost_points += lost
            log.error("influxdb %s: %d point(s) lost: %s", self.where(), lost, exc)

    async def _until_aborted(self, work: Awaitable[None], timeout: float | None) -> None:
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._aborted.wait())
        try:
            await asyncio.wait({task, stop}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            for t in (task, stop):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    async def wait_drained(self) -> None:
        """Return when the spool is empty, or at once while the server is failing."""
        while self.spool.records and self.machine.healthy:
            self._progress.clear()
            await self._progress.wait()

    # --- the Sink protocol -------------------------------------------------------------------

    async def write(self, batch: Sequence[Point]) -> None:
        """Hand ``batch`` to the sink: posted now, or spooled when the spool is not empty or the
        post fails.

        One post may stay in flight after ``write`` returns, so the next batch is encoded while
        the server works on this one; the sink owns it from here (a failure spools it, and
        ``aclose`` waits for it). A later batch waits for the one in flight before it is sent or
        spooled, which keeps the order.
        """
        if not batch:
            return
        ticket = self._order.take()
        try:
            body = await self._encode(batch)
            await self._settle()
        except BaseException:
            self._order.place(ticket, None)  # the core keeps the batch and writes it again
            raise
        if self.spool.records or self.machine.state is not SinkState.OK or self._order.waiting:
            try:
                await self._to_spool(body, len(batch))
            finally:
                self._order.place(ticket, None)
            return
        self._order.hold(ticket, (body, len(batch)))  # spooled at close if never posted
        self._inflight = asyncio.create_task(self._send_direct(body, len(batch), ticket))

    async def _encode(self, batch: Sequence[Point]) -> bytes:
        """Encode in slices, yielding to the loop between them so the request in flight is
        sent and its answer read while this batch encodes (the server ingests meanwhile)."""
        encode_many = self._encoder.encode_many
        if self._inflight is None:
            return encode_many(batch).encode()
        parts = []
        for i in range(0, len(batch), _ENCODE_SLICE):
            if i:
                await asyncio.sleep(0)  # between two slices
            parts.append(encode_many(batch[i : i + _ENCODE_SLICE]))
        return "".join(parts).encode()

    async def flush(self) -> None:
        """Wait until the batch in flight is written or spooled."""
        await self._settle()

    async def _settle(self) -> None:
        """Wait for the post in flight; spool what a failed one could not spool then."""
        task = self._inflight
        if task is not None:
            # Waited for, never cancelled from here: a cancelled write() must not orphan it.
            await asyncio.wait({task})
            if self._inflight is task:
                self._inflight = None
        while self._unspooled:
            body, points = self._unspooled[0]
            await self._to_spool(body, points)  # raises a retryable WriteError if it fails again
            self._unspooled.popleft()

    async def _send_direct(self, body: bytes, points: int, ticket: int) -> None:
        try:
            async with self._send_lock:
                await self._deliver(body)
        except asyncio.CancelledError:  # abort(): keep the batch for the next start
            self._order.place(ticket, (body, points))
            raise
        except Failure as exc:
            self._note_failure(exc)
        except Exception as exc:  # unexpected: keep the batch rather than lose it
            log.exception("influxdb %s: write failed", self.where())
            self._note_failure(Failure(RETRY, f"{type(exc).__name__}: {exc}"))
        else:
            self.sent_points += points
            self._order.place(ticket, None)
            return
        try:
            await self._to_spool(body, points)
        except WriteError:
            self._unspooled.append((body, points))
        finally:
            self._order.place(ticket, None)

    def spill(self, points: Sequence[Point]) -> None:
        """The core's queue is full: keep ``points`` on disk (never blocks the loop)."""
        if not points:
            return
        ticket = self._order.take()
        body = self._encoder.encode_many(points).encode()
        self._order.place(ticket, (body, len(points)))

    def status(self) -> str:
        n = self.spool.points
        state = self.machine.state
        if state is SinkState.SETTINGS:
            return f"error: {self.machine.reason}; spooling {n} points"
        if state is SinkState.RETRYING:
            reason = self.machine.reason
            reason = reason if len(reason) <= 80 else reason[:79] + "…"
            return f"retrying ({reason}); spooling {n} points"
        started = self._post_started
        if started is not None and time.monotonic() - started > SLOW_ANSWER_S:
            waited = time.monotonic() - started
            return f"waiting {waited:.0f} s for an answer from {self.config.url}"
        if n:
            return f"replaying {n} points"
        return "ok"

    def stats(self) -> dict[str, float | int]:
        spool = self.spool
        return {
            "sent_points": self.sent_points,
            "replayed_points": self.replayed_points,
            "spooled_points": self.spooled_points,
            "spool_points": spool.points,
            "spool_bytes": spool.bytes,
            "spool_oldest_age_seconds": round(spool.oldest_age_s(), 3),
            "spool_dropped_points": spool.dropped_points,
            "spool_failed_points": spool.failed_points,
            "spool_corrupt_points": spool.corrupt_points,
            "spool_torn_records": spool.torn_records + spool.corrupt_records,
            "dead_lettered_points": self.dead_letter.points,
            "replay_failures": self.retries,
            "requests": self.requests,
            "lost_points": self.lost_points + spool.failed_points,
        }

    def where(self) -> str:
        if self.api == API_V1:
            return f"{self.config.url} database {self.config.db()}"
        return f"{self.config.url} bucket {self.config.bucket}"

    # --- spool -------------------------------------------------------------------------------

    def _spool_nowait(self, body: bytes, points: int) -> None:
        if self.spool.append_nowait(body, points):
            self.spooled_points += points
        self.machine.fire(Event.BACKLOG)
        self._wake.set()

    async def _to_spool(self, body: bytes, points: int) -> None:
        try:
            accepted = await self.spool.append(body, points)
        except OSError as exc:
            raise WriteError(exc.strerror or str(exc), retryable=True) from None
        if accepted:
            self.spooled_points += points
        self.machine.fire(Event.BACKLOG)
        self._wake.set()

    # --- posting -----------------------------------------------------------------------------

    async def _get_writer(self) -> V1Writer | V2Writer:
        if self._writer is None:
            api = self.config.api
            if not api:
                api, version = await detect_api(self.config, self._secrets)
                log.info(
                    "influxdb %s: the server is InfluxDB %s; writing through the %s API",
                    self.config.url,
                    version or "(version not given)",
                    api,
                )
            self.api = api
            self._writer = (
                V1Writer(self.config, self._secrets)
                if api == API_V1
                else V2Writer(self.config, self._secrets)
            )
        return self._writer

    async def _post(self, body: bytes) -> None:
        """One request; raises :class:`Failure`."""
        self.requests += 1
        self._post_started = time.monotonic()
        try:
            writer = await self._get_writer()
            await writer.post(body)
        finally:
            self._post_started = None

    async def _deliver(self, body: bytes) -> None:
        """Write ``body``; isolate and dead-letter lines the server rejects.

        Raises :class:`Failure` (RETRY or SETTINGS) when the body must stay for later; lines
        already written by then are written again later (at least once).
        """
        try:
            await self._post(body)
        except Failure as exc:
            if exc.kind not in (REJECT, TOO_LARGE):
                raise
            rejected = await bisect(self._post, body, exc)
        else:
            rejected = []
        if rejected:
            await self.dead_letter.keep(rejected)
        else:
            self.dead_letter.clean()

    # --- state -------------------------------------------------------------------------------

    def _note_failure(self, exc: Failure) -> None:
        self._retry_after = exc.retry_after_s
        if exc.kind == SETTINGS:
            hint = settings_hint(exc.status, self.config, self.api or API_V2, str(exc))
            self._detail = str(exc)
            self.machine.fire(Event.REFUSED, hint)
        else:
            self.machine.fire(Event.FAILED, f"HTTP {exc.status}: {exc}" if exc.status else str(exc))

    def _note_success(self, remaining: int) -> None:
        self.machine.fire(Event.ANSWERED)
        if not remaining:
            self.machine.fire(Event.DRAINED)
        self._attempt = 0

    def _on_state_change(self, old: SinkState, new: SinkState, reason: str) -> None:
        if new is SinkState.SETTINGS:
            log.error(
                "influxdb %s: %s (server said: %s); points are kept in the spool",
                self.where(),
                reason,
                self._detail,
            )
        elif new is SinkState.RETRYING:
            log.warning(
                "influxdb %s failing (%s); spooling to %s (logged once until it answers)",
                self.where(),
                reason,
                self.spool.directory,
            )
        elif old in (SinkState.RETRYING, SinkState.SETTINGS):
            log.warning("influxdb %s answers again; replaying the spool", self.where())

    # --- replay ------------------------------------------------------------------------------

    async def _backoff(self) -> None:
        cap = self.config.retry_max
        if self.machine.state is SinkState.SETTINGS:
            delay = cap
        else:
            delay = backoff_delay(self._attempt, self.config.retry_initial, cap)
        if self._retry_after is not None:  # the server asked for at least this, up to the cap
            delay = max(delay, min(self._retry_after, cap))
        self.last_backoff_s = delay
        await asyncio.sleep(delay)

    async def _replay_loop(self) -> None:
        spool = self.spool
        while True:
            await self._wake.wait()
            if not spool.records:
                self._wake.clear()
                self.machine.fire(Event.DRAINED)
                continue
            if not self.machine.healthy:
                await self._backoff()
            await self._replay_once()
            self._progress.set()

    async def _replay_once(self) -> None:
        spool = self.spool
        batch = None
        try:
            batch = await spool.read(self.config.replay_batch_bytes)
            if batch.payload:
                async with self._send_lock:
                    await self._deliver(batch.payload)
        except Failure as exc:
            self._attempt += 1
            self.retries += 1
            self._note_failure(exc)
            return
        except Exception as exc:  # a bug or a disk error must not end replaying for good
            await self._unexpected_in_replay(exc, batch)
            return
        self._unexpected = 0
        self._retry_after = None
        # The server has it: count it and update the state before the index shrinks (at the
        # start of commit), so no observer sees an empty spool with a stale state.
        self.replayed_points += batch.points
        self._note_success(remaining=spool.records - batch.records)
        try:
            await spool.commit(batch)
        except OSError as exc:  # the cursor could not be saved: sent again after a restart
            log.error("spool %s: cannot save the cursor: %s", spool.directory, exc)

    async def _unexpected_in_replay(self, exc: Exception, batch: SpoolBatch | None) -> None:
        self._unexpected += 1
        self._attempt += 1
        self.retries += 1
        log.error(
            "influxdb %s: replay failed (%d of %d): %s: %s",
            self.where(),
            self._unexpected,
            MAX_UNEXPECTED,
            type(exc).__name__,
            exc,
        )
        why = Failure(RETRY, f"{type(exc).__name__}: {exc}")
        self._note_failure(why)
        if self._unexpected < MAX_UNEXPECTED:
            return
        self._unexpected = 0
        await self._set_aside(batch, why)

    async def _set_aside(self, batch: SpoolBatch | None, why: Failure) -> None:
        """Replay failed :data:`MAX_UNEXPECTED` times in a row on the same batch: its lines go
        to the dead-letter file (or, when they cannot even be read, its oldest record is counted
        as lost), so the rest of the spool moves on."""
        spool = self.spool
        try:
            if batch is not None and batch.payload:
                await self.dead_letter.keep([(line, why) for line in lines_of(batch.payload)])
                await spool.commit(batch)
                return
            spool.roll()  # never append to a segment that cannot be read
            head = spool.oldest()
            if head is None:
                return
            # Counted first: the record leaves the index even when its cursor cannot be saved.
            self.lost_points += head.points
            log.error(
                "influxdb %s: %d point(s) of an unreadable spool record were given up "
                "(counted in lost_points): %s",
                self.where(),
                head.points,
                why,
            )
            await spool.commit(SpoolBatch(1, head.points, b"", (head,)))
        except OSError as err:
            log.error("influxdb %s: cannot set the batch aside: %s", self.where(), err)
