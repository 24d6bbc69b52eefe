"""``[[sinks.influxdb]]``: the settings of the InfluxDB sink, their checks and the hints that
name which setting to fix when the server refuses a write."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from acquisition.config import duration, size
from acquisition.errors import ConfigError
from acquisition.secrets import Redactor, basic_auth, read_secret, v1_credentials

__all__ = ["API_V1", "API_V2", "InfluxDBConfig", "Secrets", "settings_hint", "spool_ident"]

API_V1 = "v1"
"""``POST /write?db=&rp=&precision=ns``: InfluxDB 1.x (and 3.x's v1 compatibility endpoint)."""
API_V2 = "v2"
"""``POST /api/v2/write``: InfluxDB 2.x, 3.x, 1.8+ (compatibility endpoint), VictoriaMetrics."""

TABLE = "[[sinks.influxdb]]"

NO_V2_ENDPOINT = (
    "the server at {url} has no /api/v2/write{version}: it speaks the InfluxDB 1.x API; set "
    '[[sinks.influxdb]] api = "v1" and database = "<name>" (or leave api unset to detect it)'
)
"""The 404 of a 1.x server (before 1.8) asked for the v2 write endpoint."""


@dataclass
class InfluxDBConfig:
    """``[[sinks.influxdb]]``; ``batch_size``, ``flush_interval`` and ``buffer_limit`` are handled
    by the core."""

    url: str = "http://localhost:8086"
    """Base URL of the InfluxDB server (http or https)."""
    api: str = ""
    """"v2" (``/api/v2/write``), "v1" (``/write``), or empty: detected from ``/ping``'s
    ``X-Influxdb-Version`` (1.x → v1, anything else → v2)."""
    org: str = ""
    """Organization (v2 API on 2.x); ignored by 1.8 and 3.x ("-" is sent when empty)."""
    bucket: str = "nrg"
    """Bucket (2.x), database (3.x), or ``db/rp`` / ``db`` (1.8 through the v2 API)."""
    token: str = ""
    """API token, usually ``"${INFLUX_TOKEN}"``; ``"user:password"`` for 1.8. Never logged."""
    token_file: str = ""
    """Read the token from this file instead (surrounding whitespace stripped)."""
    database: str = ""
    """v1 API: the database (default: ``bucket`` up to its first ``/``)."""
    retention_policy: str = ""
    """v1 API: the retention policy (default: the database's default one)."""
    username: str = ""
    """v1 API: user name (HTTP basic authentication); empty when auth is off."""
    password: str = ""
    """v1 API: that user's password, usually ``"${INFLUX_PASSWORD}"``. Never logged."""
    password_file: str = ""
    """v1 API: read the password from this file instead."""
    timeout: float = duration(10.0, "limit for one HTTP request")
    gzip: bool = False
    """Compress request bodies with gzip."""
    spool_dir: str = ""
    """Default: ``<state_dir>/spool/influxdb-<hash of the destination>``."""
    spool_max_bytes: int = size(
        1 << 30, "disk quota of unreplayed points; beyond it new points drop"
    )
    spool_segment_bytes: int = size(16 << 20, "size at which a new spool segment file starts")
    fsync: str = "always"
    """When spool appends reach the disk: "always", "never" or a duration such as "1s"."""
    dead_letter: str = ""
    """Rejected lines with the server's message. Default: ``<spool_dir>/dead-letter.lp``."""
    retry_initial: float = duration(0.5, "first backoff delay")
    retry_max: float = duration(5.0, "backoff cap; also the most a Retry-After is honoured")
    replay_batch_bytes: int = size(4 << 20, "largest body sent when replaying the spool")
    drain_timeout: float = duration(5.0, "at shutdown, how long to keep replaying the spool")

    def __repr__(self) -> str:  # the token must never reach a log line
        return (
            f"InfluxDBConfig(url={self.url!r}, api={self.api!r}, org={self.org!r}, "
            f"bucket={self.bucket!r}, database={self.database!r})"
        )

    def db(self) -> str:
        return self.database or self.bucket.partition("/")[0]

    def rp(self) -> str:
        return self.retention_policy or self.bucket.partition("/")[2]

    def check(self) -> None:
        """Raise :class:`ConfigError` naming the key of the first bad setting."""
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"[[sinks.influxdb]] url: {self.url!r} is not an http(s) URL")
        if self.api not in ("", API_V1, API_V2):
            raise ConfigError(f'[[sinks.influxdb]] api: {self.api!r} is not "v1", "v2" or empty')
        if not self.bucket and not self.database:
            raise ConfigError("[[sinks.influxdb]] bucket: must not be empty")
        if self.timeout <= 0:
            raise ConfigError("[[sinks.influxdb]] timeout: must be > 0")
        if self.retry_initial <= 0 or self.retry_max < self.retry_initial:
            raise ConfigError(
                "[[sinks.influxdb]] retry_initial / retry_max: need 0 < retry_initial <= retry_max"
            )


class Secrets:
    """The token and password, and every form in which they could come back in a server's
    answer (an echoed ``Authorization`` header shows basic auth in base64)."""

    def __init__(self, config: InfluxDBConfig) -> None:
        self.token = read_secret(config.token, config.token_file, "token", TABLE)
        self.password = read_secret(config.password, config.password_file, "password", TABLE)
        # A 1.8 "user:password" token: the same credentials on the v1 API.
        self.username, self.password = v1_credentials(self.token, config.username, self.password)
        self._redactor = Redactor(self.token, username=self.username, password=self.password)

    def basic_auth(self) -> str:
        return basic_auth(self.username, self.password)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``<token>`` (call before cutting ``text``)."""
        return self._redactor.redact(text)


def spool_ident(config: InfluxDBConfig) -> str:
    """A short hash of the destination: one spool directory per server and database/bucket."""
    if config.api == API_V1:
        key = f"{config.url}\0v1\0{config.db()}\0{config.rp()}"
    else:
        key = f"{config.url}\0{config.org}\0{config.bucket}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def settings_hint(
    status: int, config: InfluxDBConfig, api: str = API_V2, server_said: str = ""
) -> str:
    """Which setting of ``[[sinks.influxdb]]`` to fix for an HTTP status."""
    if status == 401:
        if api == API_V1:
            return (
                "the credentials were rejected: set [[sinks.influxdb]] username and password "
                "(or password_file) of a user that may write"
            )
        return (
            "the token was rejected: set [[sinks.influxdb]] token (or token_file) to a valid "
            'API token ("user:password" for InfluxDB 1.8)'
        )
    if status == 403:
        if api == API_V1:
            return (
                f"user {config.username!r} may not write to database {config.db()!r}: grant "
                "it WRITE or change [[sinks.influxdb]] username"
            )
        return (
            f"the token may not write to bucket {config.bucket!r}: give it write permission "
            "or change [[sinks.influxdb]] token"
        )
    if status == 404:
        return _not_found_hint(config, api, server_said)
    return f"the server refused the write (HTTP {status}): check [[sinks.influxdb]] url and bucket"


def _not_found_hint(config: InfluxDBConfig, api: str, server_said: str) -> str:
    if api == API_V1:
        return (
            f"database {config.db()!r} does not exist at {config.url}: create it "
            f"(CREATE DATABASE {config.db()}) or fix [[sinks.influxdb]] database / url"
        )
    if "page not found" in server_said or "path not found" in server_said:
        return NO_V2_ENDPOINT.format(url=config.url, version="")
    return (
        f"bucket {config.bucket!r} (org {config.org or '-'!r}) does not exist at "
        f"{config.url}: create it or fix [[sinks.influxdb]] bucket / org / url"
    )
