"""The runners' clocks: monotonic deadlines, wall-clock timestamps, and calling back at a deadline.

:class:`SystemClock` is the real one (``time.monotonic_ns``, ``time.time_ns``, the event loop's
timers); tests substitute a fake :class:`Clock` whose time moves only when they move it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "SystemClock", "Timer"]

_PRECISE_WINDOW_NS = 2_000_000
"""The last this much before a deadline is waited with a precise ``time.sleep`` (asyncio's epoll
selector rounds timeouts up to whole milliseconds, which makes a plain timer 1–2 ms late)."""


class Timer(Protocol):
    """A pending :meth:`Clock.call_at`."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time source of the runners; tests substitute a fake one."""

    def monotonic_ns(self) -> int: ...

    def time_ns(self) -> int: ...

    def call_at(self, deadline_ns: int, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` from the running event loop at or just after monotonic
        ``deadline_ns`` (a timer: no task is woken, no future is made)."""


class SystemClock:
    """The real clocks. With ``precise`` the timer fires up to 2 ms early and the rest is a
    blocking ``time.sleep`` (no CPU spent), which keeps ticks well under 1 ms late."""

    def __init__(self, precise: bool = True) -> None:
        self.precise = precise

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def time_ns(self) -> int:
        return time.time_ns()

    def call_at(self, deadline_ns: int, callback: Callable[[], None]) -> Timer:
        loop = asyncio.get_running_loop()
        remaining = deadline_ns - time.monotonic_ns()
        if not self.precise:
            return loop.call_later(max(remaining, 0) / 1e9, callback)

        def finish_precisely() -> None:
            rest = deadline_ns - time.monotonic_ns()
            if rest > 0:
                time.sleep(rest / 1e9)
            callback()

        early = max(remaining - _PRECISE_WINDOW_NS + 500_000, 0)
        return loop.call_later(early / 1e9, finish_precisely)
