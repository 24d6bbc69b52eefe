"""One HTTP write to InfluxDB and what its answer means.

- :class:`V2Writer`: ``POST /api/v2/write`` through ``influxdb-client``'s async API (its own
  retries off: the sink owns them).
- :class:`V1Writer`: ``POST /write?db=&rp=&precision=ns`` with ``aiohttp`` (InfluxDB 1.x has no
  v2 endpoint before 1.8), basic authentication when a user is set.
- :func:`detect_api`: ``GET /ping`` and its ``X-Influxdb-Version`` header (1.x → v1).

Every failure becomes a :class:`Failure` whose text says what happened in words (never an empty
exception text) with every secret redacted *before* the text is cut to length.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

from sinks.influxdb.config import API_V1, API_V2, InfluxDBConfig, Secrets

__all__ = [
    "REJECT",
    "RETRY",
    "SETTINGS",
    "TOO_LARGE",
    "Failure",
    "V1Writer",
    "V2Writer",
    "backoff_delay",
    "classify_status",
    "describe_exception",
    "detect_api",
    "parse_retry_after",
    "server_message",
    "silence_client_logs",
]

# Kinds of failure, from what the server (or the network) said.
RETRY = "retry"
"""Try the same body again later: the server is down, overloaded or slow."""
REJECT = "reject"
"""Some lines are bad (400/422): bisect and dead-letter them."""
TOO_LARGE = "too_large"
"""413: split the body."""
SETTINGS = "settings"
"""401/403/404 and other 4xx: the user must fix a setting; keep everything."""

NO_ANSWER = "no answer within {timeout:g} s from {url}"
"""A server that accepted the connection and never answered."""
MAX_MESSAGE = 1000
"""Characters of a server's message kept (after redaction)."""


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
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent or
    not a number. ``inf``/``1e999`` give ``inf``: the sink clamps to its ``retry_max``."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return None if math.isnan(seconds) else max(0.0, seconds)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)


def backoff_delay(
    attempt: int, initial: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    """Exponential backoff with full jitter: uniform in [d/2, d], d = min(cap, initial·2^attempt)."""
    d = min(cap, initial * float(1 << min(attempt, 62)))
    return d * (0.5 + 0.5 * rand())


def server_message(headers: Any, body: Any, reason: str, redact: Callable[[str], str]) -> str:
    """The server's own words (error header, JSON ``message``/``error`` or the body), redacted
    and then cut to :data:`MAX_MESSAGE` characters."""
    for key in ("X-Influxdb-Error", "X-Influx-Error", "X-Platform-Error-Code"):
        value = headers.get(key) if hasattr(headers, "get") else None
        if value:
            return _cut(redact(str(value)))
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if body:
        text = redact(str(body))
        try:
            data = json.loads(text)
        except ValueError:
            return _cut(text.strip())
        if isinstance(data, dict):
            for key in ("message", "error"):
                if data.get(key):  # decoded: a secret JSON-escaped in the body shows now
                    return _cut(redact(str(data[key])))
        return _cut(text.strip())
    return _cut(redact(reason or "no message"))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def describe_exception(exc: BaseException, url: str, timeout: float) -> str:
    """A network failure in words: what happened and where."""
    if isinstance(exc, TimeoutError):
        return NO_ANSWER.format(timeout=timeout, url=url)
    text = str(exc).strip()
    name = type(exc).__name__
    if name == "ServerDisconnectedError":
        return f"{url} closed the connection without answering"
    if not text:
        return f"{name} while writing to {url} (no details given)"
    return f"{name}: {text}"


class _DropLibraryRecords(logging.Filter):
    """Drops records that influxdb-client logs through the root logger (it does so with a
    server's raw answer, which may echo the request's ``Authorization`` header)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "influxdb_client" not in record.pathname


_silenced = False


def silence_client_logs() -> None:
    """Keep influxdb-client's loggers from printing headers or bodies at any log level."""
    global _silenced
    if _silenced:
        return
    _silenced = True
    # Its records end at this handler, whatever their level (the client sets its loggers to
    # WARNING itself): none reaches the root logger or Python's last-resort handler on stderr.
    lib = logging.getLogger("influxdb_client")
    lib.propagate = False
    lib.addHandler(logging.NullHandler())
    logging.getLogger().addFilter(_DropLibraryRecords())


class _Writer:
    """Shared by both APIs: the URL for messages, the secrets for redaction."""

    api = ""

    def __init__(self, config: InfluxDBConfig, secrets: Secrets) -> None:
        self.config = config
        self.secrets = secrets

    def network_failure(self, exc: BaseException) -> Failure:
        return Failure(
            RETRY,
            self.secrets.redact(describe_exception(exc, self.config.url, self.config.timeout)),
        )

    def http_failure(self, status: int, headers: Any, body: Any, reason: str) -> Failure:
        message = server_message(headers, body, reason, self.secrets.redact)
        retry_after = parse_retry_after(headers.get("Retry-After") if headers else None)
        return Failure(classify_status(status), message, status, retry_after)

    async def close(self) -> None:
        pass


class V2Writer(_Writer):
    """``POST /api/v2/write`` with influxdb-client's async API."""

    api = API_V2

    def __init__(self, config: InfluxDBConfig, secrets: Secrets) -> None:
        from influxdb_client.client.influxdb_client_async import InfluxDBClientAsync

        super().__init__(config, secrets)
        silence_client_logs()
        self._client: Any = InfluxDBClientAsync(
            url=config.url,
            token=secrets.token,
            org=config.org or "-",
            timeout=int(config.timeout * 1000),
            enable_gzip=config.gzip,
        )
        self._write_api: Any = self._client.write_api()

    async def post(self, body: bytes) -> None:
        from influxdb_client.domain.write_precision import WritePrecision
        from influxdb_client.rest import ApiException

        try:
            await self._write_api.write(
                bucket=self.config.bucket, record=body, write_precision=WritePrecision.NS
            )
        except ApiException as exc:
            status = int(exc.status or 0)
            if status == 0:
                raise Failure(
                    RETRY, server_message({}, exc.body, str(exc.reason), self.secrets.redact)
                ) from None
            raise self.http_failure(status, exc.headers or {}, exc.body, str(exc.reason)) from None
        except Exception as exc:
            raise _network(self, exc) from None

    async def close(self) -> None:
        await self._client.close()


class V1Writer(_Writer):
    """``POST /write?db=&rp=&precision=ns`` with aiohttp (InfluxDB 1.x)."""

    api = API_V1

    def __init__(self, config: InfluxDBConfig, secrets: Secrets) -> None:
        super().__init__(config, secrets)
        self._session: Any = None
        params = {"db": config.db(), "precision": "ns"}
        if config.rp():
            params["rp"] = config.rp()
        self._params = params

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if self.secrets.username or self.secrets.password:
            headers["Authorization"] = "Basic " + self.secrets.basic_auth()
        if self.config.gzip:
            headers["Content-Encoding"] = "gzip"
        return headers

    async def post(self, body: bytes) -> None:
        import gzip
        import io

        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.timeout)
            )
        # A file-like body: aiohttp (3.14+) warns that a large body of raw bytes could block the
        # event loop, and streams a file-like one in chunks instead.
        data = io.BytesIO(gzip.compress(body, 1) if self.config.gzip else body)
        url = self.config.url.rstrip("/") + "/write"
        try:
            async with self._session.post(
                url, params=self._params, data=data, headers=self._headers()
            ) as resp:
                if resp.status < 300:
                    return
                text = await resp.read()
                raise self.http_failure(resp.status, resp.headers, text, str(resp.reason))
        except Failure:
            raise
        except Exception as exc:
            raise _network(self, exc) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _network(writer: _Writer, exc: Exception) -> Exception:
    """A network failure as a retryable :class:`Failure`; anything else unchanged."""
    import aiohttp

    if isinstance(exc, TimeoutError | OSError | aiohttp.ClientError):
        return writer.network_failure(exc)
    return exc


async def detect_api(config: InfluxDBConfig, secrets: Secrets) -> tuple[str, str]:
    """(api, version) from ``GET /ping``: ``X-Influxdb-Version`` 1.x → v1, anything else → v2.

    Raises :class:`Failure` (RETRY) when the server does not answer; the caller asks again.
    """
    import aiohttp

    url = config.url.rstrip("/") + "/ping"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.timeout)) as s,
            s.get(url) as resp,
        ):
            version = resp.headers.get("X-Influxdb-Version", "")
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        raise Failure(
            RETRY, secrets.redact(describe_exception(exc, config.url, config.timeout))
        ) from None
    version = version.lstrip("v")
    return (API_V1 if version.startswith("1.") else API_V2), version
