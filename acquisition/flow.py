"""Helpers of the runners: backoff with jitter, logging once per outage, and finishing a
coroutine that was started by hand (a collect run directly until it first suspends)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["FailureLog", "Resumed", "backoff_delay"]


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    """Exponential backoff with full jitter in [base/2, min(cap, base·2^attempt)]."""
    ceiling = min(cap, base * (2 ** min(attempt, 30)))
    return random.uniform(min(base / 2, ceiling), ceiling)


class FailureLog:
    """Logs the first failure of an outage and the recovery, nothing in between."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self.failing = False
        self.failures = 0
        self._since = 0.0

    def failed(self, reason: object) -> None:
        self.failures += 1
        if not self.failing:
            self.failing = True
            self._since = time.monotonic()
            self._log.warning("%s failing: %s (logged once until it recovers)", self._what, reason)

    def ok(self) -> None:
        if self.failing:
            self._log.warning(
                "%s recovered after %d failure(s) over %.1f s",
                self._what,
                self.failures,
                time.monotonic() - self._since,
            )
            self.failing = False
            self.failures = 0


class Resumed:
    """Awaiting it finishes a coroutine already started with ``send(None)`` that yielded
    ``first``: what ``await coro`` would have done from there (values sent and exceptions
    thrown in, a cancellation included, go on to the coroutine)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    value = coro.send(sent)
                except StopIteration:
                    return
