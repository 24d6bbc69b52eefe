"""Secrets in settings (API tokens, passwords): reading them from ``*_file`` keys, and keeping
them out of every message, log line and description.

Used by the InfluxDB sink and by ``report``/``compare`` reading from InfluxDB: both redact a
server's answer, an exception's text and anything else they show, in every form a secret could
come back in (an echoed ``Authorization: Basic`` header shows ``user:password`` in base64).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Final

from acquisition.errors import ConfigError

__all__ = ["REDACTED", "Redactor", "basic_auth", "read_secret", "v1_credentials"]

REDACTED: Final = "<token>"
_MIN_LEN: Final = 3  # shorter "secrets" would blank out ordinary words


def read_secret(value: str, file: str, key: str, table: str) -> str:
    """``value``, or the stripped text of ``file``; ``key`` and ``table`` (e.g. ``token`` and
    ``[[sinks.influxdb]]``) name the setting in errors, which never show the secret."""
    if value and file:
        raise ConfigError(f"{table}: set {key} or {key}_file, not both")
    if file:
        path = Path(file).expanduser()
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{table} {key}_file: cannot read {path}: {exc.strerror}") from None
    return value


def v1_credentials(token: str, username: str, password: str) -> tuple[str, str]:
    """The user and password for InfluxDB's v1 API: those given, else the two halves of an
    InfluxDB 1.8 ``"user:password"`` token."""
    if not username and not password and ":" in token:
        username, _, password = token.partition(":")
    return username, password


def basic_auth(username: str, password: str) -> str:
    """The base64 credentials of an ``Authorization: Basic`` header."""
    return base64.b64encode(f"{username}:{password}".encode()).decode()


class Redactor:
    """Replaces every given secret (and its forms) in a text by :data:`REDACTED`."""

    def __init__(self, *secrets: str, username: str = "", password: str = "") -> None:
        forms = [*secrets, password]
        if username or password:
            forms.append(basic_auth(username, password))
        for secret in secrets:
            if ":" in secret:  # "user:password" tokens (InfluxDB 1.8): the password alone too
                forms.append(secret.partition(":")[2])
        self._forms = sorted({f for f in forms if len(f) >= _MIN_LEN}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` without secrets (call before cutting ``text`` to length)."""
        for secret in self._forms:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text
