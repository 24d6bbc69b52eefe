"""The event bus: one ``emit`` for every collector, fan-out to processors and sink queues.

``emit`` never blocks and never awaits: it hands the point to each processor (synchronously, so
processors must be cheap) and offers it to each sink's bounded queue, which counts (or spills to
disk) what does not fit. Points a processor derives are delivered to the sinks and to the other
processors, never back to the processor that made them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from acquisition.api import Emit, Processor
from acquisition.point import Point

__all__ = ["Bus", "ProcessorStats"]

log = logging.getLogger("nrg.bus")

Offer = Callable[[Point], None]


@dataclass
class ProcessorStats:
    points_in: int = 0
    points_out: int = 0
    errors: int = 0


class Bus:
    """Synchronous fan-out; see the module docstring."""

    def __init__(self) -> None:
        self._offers: list[Offer] = []
        self._processors: list[tuple[str, Processor, ProcessorStats, Emit]] = []
        self.points = 0
        self._failing: set[str] = set()

    def add_sink(self, offer: Offer) -> None:
        """Register a sink queue's non-blocking ``offer``."""
        self._offers.append(offer)

    def add_processor(self, name: str, processor: Processor) -> ProcessorStats:
        stats = ProcessorStats()
        index = len(self._processors)

        def derived(point: Point) -> None:
            stats.points_out += 1
            self._dispatch(point, skip=index)

        self._processors.append((name, processor, stats, derived))
        return stats

    @property
    def processors(self) -> list[tuple[str, ProcessorStats]]:
        return [(name, stats) for name, _, stats, _ in self._processors]

    def flush_processors(self) -> None:
        """At shutdown: let processors that hold back points (waiting for late data) emit them
        through their optional ``flush(emit)``."""
        for name, processor, stats, derived in self._processors:
            flush = getattr(processor, "flush", None)
            if not callable(flush):
                continue
            try:
                flush(derived)
            except Exception as exc:
                stats.errors += 1
                log.warning("processor %s failed to flush: %r", name, exc)

    def emit(self, point: Point) -> None:
        """Hand one point to every processor and sink queue; never blocks."""
        self._dispatch(point, skip=-1)

    def _dispatch(self, point: Point, skip: int) -> None:
        self.points += 1
        for i, (name, processor, stats, derived) in enumerate(self._processors):
            if i == skip:
                continue
            stats.points_in += 1
            try:
                processor.process(point, derived)
            except Exception as exc:  # a buggy processor must not stop the data flow
                stats.errors += 1
                if name not in self._failing:
                    self._failing.add(name)
                    log.warning(
                        "processor %s failed on a %s point: %r (logged once)",
                        name,
                        point.measurement,
                        exc,
                    )
        for offer in self._offers:
            offer(point)
