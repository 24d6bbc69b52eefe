"""The small protocols every plugin implements, and the context the core hands them.

A *collector* reads a source and emits points; a *stream collector* owns its read loop (serial
port, socket); a *processor* watches the bus and emits derived points; a *sink* writes batches.
Everything else (scheduling, timeouts, retries, batching, counting, logging once per outage) lives
in :mod:`acquisition.running`, so plugins stay small.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from acquisition.point import Point

__all__ = [
    "Collector",
    "Emit",
    "PluginContext",
    "Processor",
    "Sink",
    "StreamCollector",
]

Emit = Callable[[Point], None]
"""Non-blocking hand-off of one point to the bus."""


@dataclass(frozen=True)
class PluginContext:
    """What the agent tells every plugin when it builds it."""

    host: str
    interval_s: float
    state_dir: Path
    data_dir: Path
    runtime_dir: Path
    tags: Mapping[str, str] = field(default_factory=dict)
    """Global tags (``host``, ``experiment``, ``run``...) that sinks add to every point."""
    status: dict[str, Any] = field(default_factory=dict)
    """Shared, read-mostly facts between plugins (e.g. tracked pids), keyed by plugin name."""


@runtime_checkable
class Collector(Protocol):
    """A polled source: the core decides when ``collect`` runs."""

    name: ClassVar[str]

    async def open(self) -> None:
        """Probe the source; raise NoData (absent here) or ConfigError (fatal)."""

    async def collect(self, emit: Emit, now_ns: int) -> None:
        """Read once and emit points stamped ``now_ns`` (Unix epoch ns) unless the source has its
        own timestamps."""

    async def aclose(self) -> None:
        """Release what ``open`` took."""


@runtime_checkable
class StreamCollector(Protocol):
    """A push source that owns its read loop (serial port, socket)."""

    name: ClassVar[str]

    async def open(self) -> None: ...

    async def run(self, emit: Emit) -> None:
        """Read until cancelled; reconnecting is the collector's business."""

    async def aclose(self) -> None: ...


@runtime_checkable
class Processor(Protocol):
    """Sees every point on the bus (synchronously, so keep it cheap) and may emit derived ones.

    A processor that holds points back (waiting for late data) may also define
    ``flush(emit)``; the agent calls it once at shutdown, after the collectors stopped."""

    name: ClassVar[str]

    def process(self, point: Point, emit: Emit) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """A destination. The core owns batching, flush timing, retries and the final flush."""

    name: ClassVar[str]

    async def open(self) -> None: ...

    async def write(self, batch: Sequence[Point]) -> None:
        """Write all of ``batch`` or raise WriteError (``retryable`` says whether to try again)."""

    async def aclose(self) -> None: ...
