"""Which InfluxDB ``report``/``compare --influx`` read from, and with which credentials.

Two sources, never mixed:

- ``--influx http://HOST:8086/NAME``: ``NAME`` is the database (InfluxDB 1.x and 3.x, ``db/rp``
  for a retention policy) or the bucket (InfluxDB 2.x). Credentials come from the environment:
  ``NRG_INFLUX_USER`` / ``NRG_INFLUX_PASSWORD`` (1.x; or the URL's ``user:password@``),
  ``NRG_INFLUX_TOKEN`` and ``NRG_INFLUX_ORG`` (2.x; a token alone also serves 3.x).
- ``--influx`` without a URL: the first ``[[sinks.influxdb]]`` of the config given with ``-c``,
  read the way the sink reads it (``url``, ``bucket``, ``org``, ``token``/``token_file``,
  ``database``, ``retention_policy``, ``username``, ``password``/``password_file``,
  ``timeout``; ``${ENV}`` already expanded by the config loader).

Each target knows how its user sets each setting, so that an error names the one to fix, and
redacts its secrets from anything it shows.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from acquisition.config import load_config, parse_duration
from acquisition.errors import ConfigError, NrgError
from acquisition.secrets import Redactor, read_secret, v1_credentials

__all__ = [
    "ENV_ORG",
    "ENV_PASSWORD",
    "ENV_TOKEN",
    "ENV_USER",
    "INFLUX_BAD_URL",
    "INFLUX_NEEDS_CONFIG",
    "INFLUX_NO_DATABASE",
    "INFLUX_NO_SINK",
    "InfluxTarget",
    "target_from_config",
    "target_from_url",
]

ENV_USER: Final = "NRG_INFLUX_USER"
ENV_PASSWORD: Final = "NRG_INFLUX_PASSWORD"
ENV_TOKEN: Final = "NRG_INFLUX_TOKEN"
ENV_ORG: Final = "NRG_INFLUX_ORG"
TABLE: Final = "[[sinks.influxdb]]"

INFLUX_NO_DATABASE = (
    "--influx {url}: name the database (InfluxDB 1.x, 3.x) or bucket (InfluxDB 2.x) as the "
    "URL's path, e.g. http://host:8086/nrg"
)
INFLUX_BAD_URL = "--influx {url}: not an http:// or https:// URL"
INFLUX_NEEDS_CONFIG = (
    "--influx without a URL reads the [[sinks.influxdb]] of the config given with -c FILE; "
    "give -c FILE, or a URL such as http://host:8086/nrg"
)
INFLUX_NO_SINK = (
    "--influx: {config} has no [[sinks.influxdb]] table; give a URL such as http://host:8086/nrg"
)


@dataclass(frozen=True)
class InfluxTarget:
    """A server, the data's place on it, the credentials, and how the user sets each of them.

    ``database``/``retention_policy`` are what InfluxQL reads (1.x, 3.x); ``bucket``/``org``
    what Flux reads (2.x). ``settings`` maps ``url``, ``database``, ``bucket``, ``org``,
    ``token`` and ``credentials`` to the words that name that setting in an error."""

    base: str
    database: str
    retention_policy: str
    bucket: str
    org: str
    token: str = field(repr=False)
    username: str
    password: str = field(repr=False)
    settings: Mapping[str, str]
    timeout_s: float = 60.0
    redactor: Redactor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        redactor = Redactor(self.token, username=self.username, password=self.password)
        object.__setattr__(self, "redactor", redactor)

    def redact(self, text: str) -> str:
        """``text`` without the token or password in any form."""
        return self.redactor.redact(text)

    def where(self, dialect: str) -> str:
        """Where the points are, for messages: the server and database (or bucket)."""
        if dialect == "flux":
            return f"{self.base}/{self.bucket}"
        rp = f"/{self.retention_policy}" if self.retention_policy else ""
        return f"{self.base}/{self.database}{rp}"


def _base(parts: urllib.parse.SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def target_from_url(url: str, env: Mapping[str, str] | None = None) -> InfluxTarget:
    """``--influx URL``: the name from the URL's path, credentials from ``NRG_INFLUX_*``."""
    env = os.environ if env is None else env
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NrgError(INFLUX_BAD_URL.format(url=_base(parts) + parts.path))
    name = parts.path.strip("/")
    if not name:
        raise NrgError(INFLUX_NO_DATABASE.format(url=_base(parts)))
    database, _, rp = name.partition("/")
    creds = f"{ENV_USER} and {ENV_PASSWORD} (InfluxDB 1.x) or {ENV_TOKEN} (InfluxDB 3.x)"
    return InfluxTarget(
        base=_base(parts),
        database=urllib.parse.unquote(database),
        retention_policy=urllib.parse.unquote(rp),
        bucket=urllib.parse.unquote(name),
        org=env.get(ENV_ORG, ""),
        token=env.get(ENV_TOKEN, ""),
        username=env.get(ENV_USER, urllib.parse.unquote(parts.username or "")),
        password=env.get(ENV_PASSWORD, urllib.parse.unquote(parts.password or "")),
        settings={
            "url": "the --influx URL",
            "database": "the database in the --influx URL's path",
            "bucket": "the bucket in the --influx URL's path",
            "org": ENV_ORG,
            "token": ENV_TOKEN,
            "credentials": creds,
        },
    )


def _text(options: Mapping[str, Any], key: str, default: str = "") -> str:
    value = options.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{TABLE} {key}: expected a string")
    return value


def target_from_config(path: str | None) -> InfluxTarget:
    """``--influx`` without a URL: the first ``[[sinks.influxdb]]`` of the config at ``path``."""
    if not path:
        raise NrgError(INFLUX_NEEDS_CONFIG)
    spec = next((s for s in load_config(path).sinks if s.name == "influxdb"), None)
    if spec is None:
        raise NrgError(INFLUX_NO_SINK.format(config=path))
    o = spec.options
    url = _text(o, "url", "http://localhost:8086")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{TABLE} url: {_base(parts)!r} is not an http(s) URL")
    bucket = _text(o, "bucket")
    database = _text(o, "database") or (bucket or "nrg").partition("/")[0]
    rp = _text(o, "retention_policy") or bucket.partition("/")[2]
    token = read_secret(_text(o, "token"), _text(o, "token_file"), "token", TABLE)
    password = read_secret(_text(o, "password"), _text(o, "password_file"), "password", TABLE)
    username, password = v1_credentials(token, _text(o, "username"), password)
    timeout = parse_duration(o["timeout"], f"{TABLE} timeout") if "timeout" in o else 60.0
    at = f"{TABLE} of {path}"
    return InfluxTarget(
        base=_base(parts),
        database=database,
        retention_policy=rp,
        bucket=bucket or (f"{database}/{rp}" if rp else database),
        org=_text(o, "org"),
        token=token,
        username=username,
        password=password,
        settings={
            "url": f"url in {at}",
            "database": f"database in {at}",
            "bucket": f"bucket in {at}",
            "org": f"org in {at}",
            "token": f"token (or token_file) in {at}",
            "credentials": f"username and password (or password_file) in {at}",
        },
        timeout_s=max(timeout, 60.0),
    )
