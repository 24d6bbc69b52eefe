"""Work beside training in short slices, so that the training thread never waits long for the
interpreter lock.

Python threads share one lock. A thread that runs Python beside training takes the lock each
time training releases it (every torch call does, briefly) and keeps it for up to the
interpreter's switch interval (5 ms), so a continuous stretch of such work slows every operation
training launches meanwhile. A :class:`Pacer` bounds that: its owner calls :meth:`Pacer.tick`
often (at each module, each operation, each object copied); after a slice of work the tick
sleeps, lock released, long enough that the work takes at most ``duty`` of the wall time. When
training is over, :meth:`Pacer.release` ends the pauses (a sleeping tick returns at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["PACE_DUTY", "PACE_SLICE_S", "Pacer"]

PACE_SLICE_S = 0.002
"""Work between two pauses, seconds."""
PACE_DUTY = 0.25
"""The share of wall time paced work may take; each pause is ``slice × (1/duty − 1)``."""


class Pacer:
    """Slices of work with pauses in between, until released."""

    def __init__(
        self,
        slice_s: float | None = None,
        duty: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        slice_s = PACE_SLICE_S if slice_s is None else slice_s
        duty = PACE_DUTY if duty is None else duty
        if slice_s < 0 or not 0 < duty <= 1:
            raise ValueError(f"slice_s >= 0 and 0 < duty <= 1, got {slice_s!r}, {duty!r}")
        self.slice_s = slice_s
        self.rest = 1 / duty - 1
        """Seconds of pause per second of work."""
        self.pauses = 0
        self.paused_s = 0.0
        """Seconds spent in pauses (a release cuts one short)."""
        self._clock = clock
        self._released = threading.Event()
        self._since = clock()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def start(self) -> None:
        """A slice begins now (the work before it was not this pacer's)."""
        self._since = self._clock()

    def tick(self) -> None:
        """Pause if the slice of work since the last pause is over; a no-op once released."""
        if self._released.is_set():
            return
        began = self._clock()
        worked = began - self._since
        if worked < self.slice_s:
            return
        # The lock is free while it waits; release() ends the wait.
        self._released.wait(min(worked * self.rest, threading.TIMEOUT_MAX))
        self._since = self._clock()
        self.pauses += 1
        self.paused_s += self._since - began

    def release(self) -> None:
        """No more pauses, from now on (also for a tick sleeping now)."""
        self._released.set()
