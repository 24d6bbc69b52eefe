"""A fake clock for the scheduler: time moves only when the test (or a collector) moves it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class FakeTimer:
    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, wall_start_ns: int = 1_700_000_000_000_000_000) -> None:
        self.mono = 10_000_000_000
        self.wall_offset = wall_start_ns - self.mono
        self._timers: list[tuple[int, int, FakeTimer]] = []
        self._ids = itertools.count()

    def monotonic_ns(self) -> int:
        return self.mono

    def time_ns(self) -> int:
        return self.mono + self.wall_offset

    def call_at(self, deadline_ns: int, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(callback)
        heapq.heappush(self._timers, (deadline_ns, next(self._ids), timer))
        return timer

    async def run_until(self, t_ns: int) -> None:
        """Advance to ``t_ns``, calling each timer exactly at its deadline, in order, from the
        loop (outside any task, as a real timer) and letting what it starts run."""
        while True:
            for _ in range(5):
                await asyncio.sleep(0)
            if not self._timers or self._timers[0][0] > t_ns:
                break
            deadline, _, timer = heapq.heappop(self._timers)
            self.mono = max(self.mono, deadline)
            if not timer.cancelled:
                asyncio.get_running_loop().call_soon(timer.callback)
        self.mono = max(self.mono, t_ns)
