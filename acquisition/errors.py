"""Exceptions shared by the core and every plugin."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LineProtocolError",
    "LineProtocolRangeError",
    "NoData",
    "NrgError",
    "PartialWriteError",
    "WriteError",
    "install_hint",
]


def install_hint(extra: str) -> str:
    """How to install one of nrg's extras, in the words every message uses."""
    return f"pip install '.[{extra}]' in nrg's checkout"


class NrgError(Exception):
    """Base class of every error nrg raises on purpose."""


class ConfigError(NrgError):
    """A configuration is invalid; fatal at startup. The message names the table and key."""


class NoData(NrgError):
    """A source is absent on this machine (no RAPL, no GPU, no serial port).

    Raised by ``open()``; the agent then runs on without that collector and ``nrg-collect list``
    shows the message as the reason.
    """


class LineProtocolError(NrgError, ValueError):
    """A point cannot be written as line protocol, or a line cannot be parsed."""


class LineProtocolRangeError(LineProtocolError):
    """An integer field outside int64, or a timestamp outside InfluxDB's range."""


class WriteError(NrgError):
    """A sink could not write a batch.

    ``retryable`` says whether the same batch may succeed later (server down, timeout, 5xx);
    ``retry_after_s`` carries a server's Retry-After hint when it gave one.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class PartialWriteError(WriteError):
    """A sink wrote the first ``written`` points of a batch, whole, and could not write the rest
    (a disk with room for part of the batch). The core counts those as written and retries only
    the rest, so a partly written batch is never written twice."""

    def __init__(
        self,
        message: str,
        *,
        written: int,
        retryable: bool = True,
        retry_after_s: float | None = None,
    ):
        super().__init__(message, retryable=retryable, retry_after_s=retry_after_s)
        self.written = written
