"""InfluxDB sink: pre-encoded line protocol to ``POST /api/v2/write`` through ``influxdb-client``.

Works with InfluxDB 2.x and 3.x (``/api/v2/write``, token auth) and 1.8+ through its v2
compatibility endpoint (``token = "user:password"``, ``bucket = "db/rp"``); anything else that
speaks the v2 write API (VictoriaMetrics) too. Timestamps are sent with precision ns.

The sink owns retries and durability, the client's own retries stay off (its async API has none):
- ``write(batch)`` posts directly while the spool is empty and the server answers; otherwise, or
  when a post fails with a retryable error, the batch goes to the on-disk spool
  (:mod:`sinks.influxdb.spool`) and a background task replays the spool oldest first, with exponential
  backoff, full jitter and a cap, honouring ``Retry-After``.
- Retryable: connection refused/reset, timeouts, 5xx, 408, 429.
- 400 (bad line) and 422 (field type conflict, out of retention): the body is bisected until the
  rejected lines are isolated; the rest is written, each rejected line goes to the dead-letter
  file with the server's message and is counted. 413 splits the body the same way.
- 401/403/404 and other 4xx: a configuration problem. The points stay in the spool, the sink logs
  once which setting to fix (``token``, ``bucket``, ``org``) and keeps retrying at the cap.
- ``spill(points)`` (the core calls it when its in-memory queue is full) appends to the spool
  without blocking the loop.

Points are dropped only when the spool reaches ``spool_max_bytes``; counted in ``stats()``.
Delivery is at least once: a batch whose answer is lost (crash, timeout after the server stored
it) is sent again; InfluxDB keeps one point per series and timestamp, so this is harmless there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, ClassVar

import aiofiles

from acquisition.api import PluginContext
from acquisition.config import duration, size
from acquisition.errors import ConfigError, WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from sinks.influxdb.spool import Spool, parse_fsync_policy

__all__ = [
    "Failure",
    "InfluxDBConfig",
    "InfluxDBSink",
    "backoff_delay",
    "classify_status",
    "parse_retry_after",
]

log = logging.getLogger(__name__)

# Kinds of failure, from what the server (or the network) said.
RETRY = "retry"
"""Try the same body again later: the server is down, overloaded or slow."""
REJECT = "reject"
"""Some lines are bad (400/422): bisect and dead-letter them."""
TOO_LARGE = "too_large"
"""413: split the body."""
SETTINGS = "settings"
"""401/403/404 and other 4xx: the user must fix a setting; keep everything."""


@dataclass
class InfluxDBConfig:
    """``[[sinks.influxdb]]``; ``batch_size``, ``flush_interval`` and ``buffer_limit`` are handled
    by the core."""

    url: str = "http://localhost:8086"
    org: str = ""
    """Organization (2.x); ignored by 1.8 and 3.x ("-" is sent when empty)."""
    bucket: str = "nrg"
    """Bucket (2.x), database (3.x), or ``db/rp`` / ``db`` (1.8)."""
    token: str = ""
    """API token, usually ``"${INFLUX_TOKEN}"``; ``"user:password"`` for 1.8. Never logged."""
    token_file: str = ""
    """Read the token from this file instead (surrounding whitespace stripped)."""
    timeout: float = duration(10.0, "limit for one HTTP request")
    gzip: bool = False
    spool_dir: str = ""
    """Default: ``<state_dir>/spool/influxdb-<hash of url, org, bucket>``."""
    spool_max_bytes: int = size(
        1 << 30, "disk quota of unreplayed points; beyond it new points drop"
    )
    spool_segment_bytes: int = size(16 << 20, "size at which a new spool segment file starts")
    fsync: str = "always"
    """When spool appends reach the disk: "always", "never" or a duration such as "1s"."""
    dead_letter: str = ""
    """Rejected lines with the server's message. Default: ``<spool_dir>/dead-letter.lp``."""
    retry_initial: float = duration(0.5, "first backoff delay")
    retry_max: float = duration(30.0, "backoff cap")
    replay_batch_bytes: int = size(4 << 20, "largest body sent when replaying the spool")
    drain_timeout: float = duration(5.0, "at shutdown, how long to keep replaying the spool")

    def __repr__(self) -> str:  # the token must never reach a log line
        return f"InfluxDBConfig(url={self.url!r}, org={self.org!r}, bucket={self.bucket!r})"


class Failure(Exception):
    """A classified failed post."""

    def __init__(
        self, kind: str, message: str, status: int = 0, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after_s = retry_after_s


def classify_status(status: int) -> str:
    """What to do after an HTTP error status."""
    if status in (400, 422):
        return REJECT
    if status == 413:
        return TOO_LARGE
    if status >= 500 or status in (408, 429):
        return RETRY
    return SETTINGS


def parse_retry_after(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def backoff_delay(
    attempt: int, initial: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    """Exponential backoff with full jitter: uniform in [d/2, d], d = min(cap, initial·2^attempt)."""
    d = min(cap, initial * float(1 << min(attempt, 62)))
    return d * (0.5 + 0.5 * rand())


def settings_hint(status: int, config: InfluxDBConfig) -> str:
    """Which setting of ``[[sinks.influxdb]]`` to fix for an HTTP status."""
    if status == 401:
        return (
            "the token was rejected: set [[sinks.influxdb]] token (or token_file) to a valid "
            'API token ("user:password" for InfluxDB 1.8)'
        )
    if status == 403:
        return (
            f"the token may not write to bucket {config.bucket!r}: give it write permission "
            "or change [[sinks.influxdb]] token"
        )
    if status == 404:
        return (
            f"bucket {config.bucket!r} (org {config.org or '-'!r}) does not exist at "
            f"{config.url}: create it or fix [[sinks.influxdb]] bucket / org / url"
        )
    return f"the server refused the write (HTTP {status}): check [[sinks.influxdb]] url and bucket"


def _server_message(exc: Any) -> str:
    """The server's own words from an ApiException (JSON ``message``/``error``, header or body)."""
    headers = getattr(exc, "headers", None) or {}
    for key in ("X-Influxdb-Error", "X-Influx-Error", "X-Platform-Error-Code"):
        value = headers.get(key) if hasattr(headers, "get") else None
        if value:
            return str(value)
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        try:
            data = json.loads(body)
        except ValueError:
            return str(body).strip()[:1000]
        if isinstance(data, dict):
            for key in ("message", "error"):
                if data.get(key):
                    return str(data[key])
        return str(body).strip()[:1000]
    return str(getattr(exc, "reason", "") or "no message")


_ENCODE_SLICE = 500
"""Points encoded between two yields to the event loop (~1 ms of work)."""


def _lines(body: bytes) -> list[bytes]:
    return [line for line in body.split(b"\n") if line]


class InfluxDBSink:
    """Writes batches to InfluxDB's v2 write API, spooling to disk whatever it cannot write now."""

    name: ClassVar[str] = "influxdb"
    config_class: ClassVar[type] = InfluxDBConfig

    def __init__(self, config: InfluxDBConfig, context: PluginContext) -> None:
        self.config = config
        self.context = context
        self._token = self._resolve_token(config)
        if not config.url.startswith(("http://", "https://")):
            raise ConfigError(f"[[sinks.influxdb]] url: {config.url!r} is not an http(s) URL")
        if not config.bucket:
            raise ConfigError("[[sinks.influxdb]] bucket: must not be empty")
        if config.timeout <= 0:
            raise ConfigError("[[sinks.influxdb]] timeout: must be > 0")
        try:
            policy = parse_fsync_policy(config.fsync)
        except ValueError as exc:
            raise ConfigError(f"[[sinks.influxdb]] fsync: {exc}") from None
        ident = hashlib.sha256(f"{config.url}\0{config.org}\0{config.bucket}".encode()).hexdigest()
        spool_dir = (
            Path(config.spool_dir).expanduser()
            if config.spool_dir
            else context.state_dir / "spool" / f"influxdb-{ident[:12]}"
        )
        self.spool = Spool(
            spool_dir,
            max_bytes=config.spool_max_bytes,
            segment_bytes=config.spool_segment_bytes,
            fsync=policy,
        )
        self.dead_letter_path = (
            Path(config.dead_letter).expanduser()
            if config.dead_letter
            else spool_dir / "dead-letter.lp"
        )
        self._encoder = LineEncoder(context.tags)
        self._client: Any = None
        self._write_api: Any = None
        self._send_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._replayer: asyncio.Task[None] | None = None
        self._state = "ok"  # ok | retrying | replaying | settings
        self._reason = ""
        self._attempt = 0
        self._settings_logged = False
        self._retry_logged = False
        self._retry_after: float | None = None
        self.last_backoff_s = 0.0
        """The delay before the latest replay attempt (backoff, at least Retry-After)."""
        self._inflight: asyncio.Task[None] | None = None
        self._unspooled: collections.deque[tuple[bytes, int]] = collections.deque()
        # Counters published as nrg_collect self-stats.
        self.sent_points = 0
        self.replayed_points = 0
        self.spooled_points = 0
        self.dead_lettered_points = 0
        self.retries = 0
        self.requests = 0
        self.lost_points = 0

    @staticmethod
    def _resolve_token(config: InfluxDBConfig) -> str:
        if config.token and config.token_file:
            raise ConfigError("[[sinks.influxdb]]: set token or token_file, not both")
        if config.token_file:
            path = Path(config.token_file).expanduser()
            try:
                return path.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"[[sinks.influxdb]] token_file: cannot read {path}: {exc.strerror}"
                ) from None
        return config.token

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover the spool (replaying what an earlier run left) and create the HTTP client."""
        from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync

        await self.spool.open()
        self._client = InfluxDBClientAsync(
            url=self.config.url,
            token=self._token,
            org=self.config.org or "-",
            timeout=int(self.config.timeout * 1000),
            enable_gzip=self.config.gzip,
        )
        self._write_api = self._client.write_api()
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
            self._state = "replaying"
            self._wake.set()
        self._replayer = asyncio.create_task(self._replay_loop(), name="influxdb replay")

    async def aclose(self) -> None:
        """Finish the post in flight, give the replayer ``drain_timeout`` to empty the spool,
        then close everything."""
        try:
            await self._settle()
        except WriteError as exc:
            lost = sum(n for _, n in self._unspooled)
            self.lost_points += lost
            log.error("influxdb %s: %d point(s) lost: %s", self.where(), lost, exc)
        if self._replayer is not None:
            if self.spool.records and self._state in ("ok", "replaying"):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wait_drained(), self.config.drain_timeout)
            self._replayer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replayer
            self._replayer = None
        if self.spool.records:
            log.warning(
                "influxdb %s: %d point(s) stay in the spool %s for the next start",
                self.where(),
                self.spool.points,
                self.spool.directory,
            )
        await self.spool.close()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def wait_drained(self) -> None:
        """Return when the spool is empty, or at once while the server is failing."""
        while self.spool.records and self._state in ("ok", "replaying"):
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
        body = await self._encode(batch)
        await self._settle()
        if self.spool.records or self._state != "ok":
            await self._to_spool(body, len(batch))
            return
        self._inflight = asyncio.create_task(self._send_direct(body, len(batch)))

    async def _encode(self, batch: Sequence[Point]) -> bytes:
        """Encode in slices, yielding to the loop between them so the request in flight is
        sent and its answer read while this batch encodes (the server ingests meanwhile)."""
        encode_many = self._encoder.encode_many
        step = _ENCODE_SLICE
        if len(batch) <= step or self._inflight is None:
            return encode_many(batch).encode()
        parts = []
        for i in range(0, len(batch), step):
            parts.append(encode_many(batch[i : i + step]))
            await asyncio.sleep(0)
        return "".join(parts).encode()

    async def flush(self) -> None:
        """Wait until the batch in flight is written or spooled."""
        await self._settle()

    async def _settle(self) -> None:
        """Wait for the post in flight; spool what a failed one could not spool then."""
        task = self._inflight
        if task is not None:
            # Shielded, and forgotten only once done: a cancelled write() must not orphan it.
            await asyncio.shield(task)
            if self._inflight is task:
                self._inflight = None
        while self._unspooled:
            body, points = self._unspooled[0]
            await self._to_spool(body, points)  # raises a retryable WriteError if it fails again
            self._unspooled.popleft()

    async def _send_direct(self, body: bytes, points: int) -> None:
        async with self._send_lock:
            try:
                await self._deliver(body)
            except Failure as exc:
                self._note_failure(exc)
            except Exception as exc:  # unexpected: keep the batch rather than lose it
                log.exception("influxdb %s: write failed", self.where())
                self._note_failure(Failure(RETRY, f"{type(exc).__name__}: {exc}"))
            else:
                self.sent_points += points
                return
        try:
            await self._to_spool(body, points)
        except WriteError:
            self._unspooled.append((body, points))

    def spill(self, points: Sequence[Point]) -> None:
        """The core's queue is full: keep ``points`` on disk (never blocks the loop)."""
        if not points:
            return
        body = self._encoder.encode_many(points).encode()
        if self.spool.append_nowait(body, len(points)):
            self.spooled_points += len(points)
        self._wake.set()

    def status(self) -> str:
        n = self.spool.points
        if self._state == "settings":
            return f"error: {self._reason}; spooling {n} points"
        if self._state == "retrying":
            reason = self._reason if len(self._reason) <= 80 else self._reason[:79] + "…"
            return f"retrying ({reason}); spooling {n} points"
        if n:
            return f"replaying {n} points"
        return "ok"

    def stats(self) -> dict[str, float | int]:
        return {
            "sent_points": self.sent_points,
            "replayed_points": self.replayed_points,
            "spooled_points": self.spooled_points,
            "spool_points": self.spool.points,
            "spool_bytes": self.spool.bytes,
            "spool_oldest_age_seconds": round(self.spool.oldest_age_s(), 3),
            "spool_dropped_points": self.spool.dropped_points,
            "spool_torn_records": self.spool.torn_records + self.spool.corrupt_records,
            "dead_lettered_points": self.dead_lettered_points,
            "replay_failures": self.retries,
            "requests": self.requests,
            "lost_points": self.lost_points,
        }

    def where(self) -> str:
        return f"{self.config.url} bucket {self.config.bucket}"

    # --- internals ---------------------------------------------------------------------------

    async def _to_spool(self, body: bytes, points: int) -> None:
        try:
            accepted = await self.spool.append(body, points)
        except OSError as exc:
            raise WriteError(
                f"cannot spool to {self.spool.directory}: {exc}", retryable=True
            ) from None
        if accepted:
            self.spooled_points += points
        self._wake.set()

    async def _post(self, body: bytes) -> None:
        """One request; raises :class:`Failure`."""
        from influxdb_client.domain.write_precision import WritePrecision
        from influxdb_client.rest import ApiException

        self.requests += 1
        try:
            await self._write_api.write(
                bucket=self.config.bucket, record=body, write_precision=WritePrecision.NS
            )
        except ApiException as exc:
            status = int(exc.status or 0)
            message = self._redact(_server_message(exc))
            if status == 0:
                raise Failure(RETRY, message) from None
            headers: Any = exc.headers or {}
            retry_after = parse_retry_after(headers.get("Retry-After"))
            raise Failure(classify_status(status), message, status, retry_after) from None
        except (TimeoutError, OSError) as exc:
            raise Failure(RETRY, self._redact(f"{type(exc).__name__}: {exc}")) from None
        except Exception as exc:
            # aiohttp.ClientError and friends (connection reset, server disconnected).
            import aiohttp

            if isinstance(exc, aiohttp.ClientError):
                raise Failure(RETRY, self._redact(f"{type(exc).__name__}: {exc}")) from None
            raise

    async def _deliver(self, body: bytes) -> None:
        """Write ``body``; isolate and dead-letter lines the server rejects.

        Raises :class:`Failure` (RETRY or SETTINGS) when the body must stay for later; lines
        already written by then are written again later (at least once).
        """
        try:
            await self._post(body)
            return
        except Failure as exc:
            if exc.kind not in (REJECT, TOO_LARGE):
                raise
            first = exc
        # Depth-first over halves, left before right, so good lines keep their order.
        stack: list[tuple[list[bytes], Failure | None]] = [(_lines(body), first)]
        while stack:
            lines, why = stack.pop()
            if why is None:
                try:
                    await self._post(b"\n".join(lines) + b"\n")
                    continue
                except Failure as exc:
                    if exc.kind not in (REJECT, TOO_LARGE):
                        raise
                    why = exc
            if len(lines) == 1:
                await self._dead_letter(lines[0], why)
                continue
            mid = len(lines) // 2
            stack.append((lines[mid:], None))
            stack.append((lines[:mid], None))

    async def _dead_letter(self, line: bytes, why: Failure) -> None:
        self.dead_lettered_points += 1
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        message = " ".join(str(why).split())
        text = f"# {stamp} HTTP {why.status}: {message}\n".encode() + line + b"\n"
        self.dead_letter_path.parent.mkdir(parents=True, exist_ok=True)
        async with aiofiles.open(self.dead_letter_path, "ab") as f:
            await f.write(text)
        log.warning(
            "influxdb %s: HTTP %d rejected a line (kept in %s): %s",
            self.where(),
            why.status,
            self.dead_letter_path,
            message,
        )

    def _note_failure(self, exc: Failure) -> None:
        self._retry_after = exc.retry_after_s
        self._reason = f"HTTP {exc.status}: {exc}" if exc.status else str(exc)
        if exc.kind == SETTINGS:
            self._state = "settings"
            self._reason = settings_hint(exc.status, self.config)
            if not self._settings_logged:
                self._settings_logged = True
                log.error(
                    "influxdb %s: %s (server said: %s); points are kept in the spool",
                    self.where(),
                    self._reason,
                    exc,
                )
        else:
            self._state = "retrying"
            if not self._retry_logged:
                self._retry_logged = True
                log.warning(
                    "influxdb %s unreachable (%s); spooling to %s",
                    self.where(),
                    self._reason,
                    self.spool.directory,
                )

    def _note_success(self, remaining: int) -> None:
        if self._state in ("retrying", "settings"):
            log.info("influxdb %s answers again; replaying the spool", self.where())
        self._state = "replaying" if remaining else "ok"
        self._attempt = 0
        self._retry_logged = False
        self._settings_logged = False

    async def _replay_loop(self) -> None:
        spool = self.spool
        while True:
            await self._wake.wait()
            if not spool.records:
                self._wake.clear()
                if self._state == "replaying":
                    self._state = "ok"
                continue
            if self._state in ("retrying", "settings"):
                cap = self.config.retry_max
                delay = (
                    cap
                    if self._state == "settings"
                    else backoff_delay(self._attempt, self.config.retry_initial, cap)
                )
                if self._retry_after is not None:
                    delay = max(delay, self._retry_after)  # the server asked for at least this
                self.last_backoff_s = delay
                await asyncio.sleep(delay)
            try:
                batch = await spool.read(self.config.replay_batch_bytes)
                async with self._send_lock:
                    if batch.payload:
                        await self._deliver(batch.payload)
            except Failure as exc:
                self._attempt += 1
                self.retries += 1
                self._note_failure(exc)
                self._progress.set()
                continue
            except Exception as exc:  # a bug or a disk error must not end replaying for good
                log.exception("influxdb %s: replay failed", self.where())
                self._attempt += 1
                self._note_failure(Failure(RETRY, f"{type(exc).__name__}: {exc}"))
                self._progress.set()
                continue
            self._retry_after = None
            # The server has it: count it and update the state before the index shrinks (at the
            # start of commit), so no observer sees an empty spool with a stale state.
            self.replayed_points += batch.points
            self._note_success(remaining=spool.records - batch.records)
            await spool.commit(batch)
            self._progress.set()

    def _redact(self, text: str) -> str:
        token = self._token
        if token and token in text:
            text = text.replace(token, "<token>")
        return text
