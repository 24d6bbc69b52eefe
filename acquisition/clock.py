"""The runners' clocks: monotonic deadlines, wall-clock timestamps, and sleeping until a deadline.

:class:`SystemClock` is the real one (``time.monotonic_ns``, ``time.time_ns``, asyncio sleeps);
tests substitute a fake :class:`Clock` whose time moves only when they move it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]

_PRECISE_WINDOW_NS = 2_000_000
"""Below this much remaining sleep, finish with a precise ``time.sleep`` (asyncio's epoll selector
rounds timeouts up to whole milliseconds, which makes plain ``asyncio.sleep`` 1–2 ms late)."""


class Clock(Protocol):
    """Time source of the runners; tests substitute a fake one."""

    def monotonic_ns(self) -> int: ...

    def time_ns(self) -> int: ...

    async def sleep_until(self, deadline_ns: int) -> None:
        """Return at or just after monotonic ``deadline_ns``."""


class SystemClock:
    """The real clocks. With ``precise`` the last ≤ 2 ms of a sleep are a blocking ``time.sleep``
    (no CPU spent), which keeps ticks well under 1 ms late."""

    def __init__(self, precise: bool = True) -> None:
        self.precise = precise

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def time_ns(self) -> int:
        return time.time_ns()

    async def sleep_until(self, deadline_ns: int) -> None:
        while True:
            remaining = deadline_ns - time.monotonic_ns()
            if remaining <= 0:
                return
            if not self.precise:
                await asyncio.sleep(remaining / 1e9)
                continue
            if remaining > _PRECISE_WINDOW_NS:
                await asyncio.sleep((remaining - _PRECISE_WINDOW_NS + 500_000) / 1e9)
                continue
            time.sleep(remaining / 1e9)
            return
