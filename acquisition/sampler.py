"""In-process sampling: the agent's collectors on a background thread, without an agent.

:class:`Sampler` builds collectors through :mod:`acquisition.registry` from the same TOML config
the agent reads (:mod:`acquisition.config`), runs them with the agent's runners
(:mod:`acquisition.running`) on an asyncio loop of its own, in a daemon thread, and keeps every
point they emit in memory, in arrival order, with the config's global tags (``host``,
``experiment``, ``run``) added. With no config it runs the embedded default: every collector that
works on this machine. The ``hooks`` collector is never run in-process (it is the agent's socket
for training jobs); processors run only when asked (``processors=True``).

:class:`AgentSampler` has the same interface over an nrg agent already running on this machine:
it opens no source and reads back the points the agent's file sink writes.

Points use the agent's units (``energy_joules`` cumulative since the collector opened,
``power_watts``, ``memory_bytes``...); timestamps are Unix-epoch nanoseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acquisition.api import PluginContext
from acquisition.bus import Bus
from acquisition.config import Config, PluginSpec, parse_config
from acquisition.energy import ENERGY_COLLECTORS
from acquisition.errors import ConfigError, NoData
from acquisition.paths import data_dir, runtime_dir, state_dir
from acquisition.point import Point
from acquisition.registry import COLLECTORS, PROCESSORS, build_plugin, quick_unavailable
from acquisition.running import CollectorRunner, StreamRunner, SystemClock, last_readings

if TYPE_CHECKING:
    from acquisition.follow import Follower

__all__ = [
    "NOT_IN_PROCESS",
    "NOT_STARTED",
    "POWER_MEASUREMENTS",
    "UNKNOWN_COLLECTOR",
    "AgentSampler",
    "Sampler",
]

log = logging.getLogger("nrg.sampler")

NOT_IN_PROCESS = frozenset({"hooks"})
"""Collectors that only make sense inside an agent (the training jobs' socket)."""

NOT_STARTED = "the sampler was not started"
UNKNOWN_COLLECTOR = "unknown collector {name!r}; known collectors: {known}"
_PRECISE_BELOW_S = 0.05
_NS = 1_000_000_000

POWER_MEASUREMENTS = ("rapl", "gpu", "gpu_sample", "emonpi")
"""The measurements that carry power and energy readings."""


class Sampler:
    """Runs configured collectors in this process (see the module docstring).

    ``only`` restricts the collectors to those names (a name absent from the config runs with its
    defaults); ``interval_s`` overrides every collector's interval. ``start()`` returns once every
    collector has been opened (or found unavailable): ``available`` and ``unavailable`` are then
    filled. ``stop()`` stops the collectors and returns every point, in arrival order.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        interval_s: float | None = None,
        only: Collection[str] | None = None,
        processors: bool = False,
    ) -> None:
        if interval_s is not None and interval_s <= 0:
            raise ConfigError(f"interval_s must be > 0, got {interval_s!r}")
        self.config = config if config is not None else parse_config("", "<embedded default>")
        self.interval_s = interval_s if interval_s is not None else self.config.agent.interval
        self.tags = self.config.agent.global_tags()
        self._specs = _collector_specs(self.config, only)
        self._processor_specs = _processor_specs(self.config) if processors else []
        self.available: list[str] = []
        self.unavailable: dict[str, str] = {}
        self._points: list[Point] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runners: list[CollectorRunner | StreamRunner] = []
        self.started_ns = 0
        self.stopped_ns = 0

    # -- public API ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Open the collectors and start sampling; raises ConfigError for a bad config."""
        if self._thread is not None:
            raise RuntimeError("the sampler is already started")
        self._ready.clear()
        self._thread = threading.Thread(target=self._thread_main, name="nrg-sampler", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error

    def stop(self) -> list[Point]:
        """Stop sampling (collectors closed, processors flushed); every point, arrival order."""
        thread, loop, stop = self._thread, self._loop, self._stop_event
        if thread is None or loop is None or stop is None:
            raise RuntimeError(NOT_STARTED)
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = None
        return self.snapshot()

    def snapshot(self) -> list[Point]:
        """A copy of the points so far, in arrival order (safe while sampling)."""
        with self._lock:
            return list(self._points)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self.stop()

    # -- the background thread ----------------------------------------------------------------

    def _emit(self, point: Point) -> None:
        point = point.with_tags(self.tags)
        with self._lock:
            self._points.append(point)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start() if it failed before being ready
            if not self._ready.is_set():
                self._error = exc
            else:
                log.error("sampler stopped on an error: %r", exc)
        finally:
            self._ready.set()

    def _context(self) -> PluginContext:
        agent = self.config.agent
        return PluginContext(
            host=self.tags["host"],
            interval_s=self.interval_s,
            state_dir=Path(agent.state_dir).expanduser() if agent.state_dir else state_dir(),
            data_dir=Path(agent.data_dir).expanduser() if agent.data_dir else data_dir(),
            runtime_dir=runtime_dir(),
            tags=self.tags,
            # This process's tree is the tracked one: the NVML collector then gives its GPU
            # memory and use (gpu_process, scopes main/descendants/combined), as an agent does
            # for the job it runs.
            status={"tracked_pids": {os.getpid()}},
        )

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        context = self._context()
        bus = Bus()
        bus.add_sink(self._emit)
        for spec in self._processor_specs:
            bus.add_processor(spec.name, build_plugin(spec, context))
        opened: list[Any] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            for spec in self._specs:
                runner = await self._open(spec, context, bus)
                if runner is not None:
                    opened.append(runner.collector)
            self.started_ns = time.time_ns()
            self._ready.set()
            tasks = [asyncio.create_task(r.run()) for r in self._runners]
            await self._stop_event.wait()
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            if self._stop_event.is_set():  # stopped, not failed: the span ends on a reading
                await last_readings(self._runners, ENERGY_COLLECTORS)
            for instance in opened:
                try:
                    await instance.aclose()
                except Exception as exc:
                    log.warning("closing collector %s failed: %r", instance.name, exc)
            bus.flush_processors()
            self.stopped_ns = time.time_ns()

    async def _open(
        self, spec: PluginSpec, context: PluginContext, bus: Bus
    ) -> CollectorRunner | StreamRunner | None:
        """Build and open one collector; None (and a reason in ``unavailable``) when it cannot
        run here. A ConfigError, or any failure of a collector the config names, is raised."""
        label = spec.name if spec.index == 0 else f"{spec.name}-{spec.index}"
        interval = spec.interval or self.interval_s
        absent = None if spec.explicit else quick_unavailable(spec.name)
        if absent is not None:  # the agent's own reason, in the agent's words
            self.unavailable[label] = absent
            return None
        try:
            instance = build_plugin(spec, dataclasses.replace(context, interval_s=interval))
            await instance.open()
        except ConfigError:
            raise
        except (NoData, ImportError) as exc:
            self.unavailable[label] = _reason(exc)
            return None
        except Exception as exc:
            if spec.explicit:
                raise ConfigError(f"[{spec.where}] failed to open: {exc!r}") from exc
            self.unavailable[label] = f"failed to open: {exc!r}"
            return None
        runner: CollectorRunner | StreamRunner
        if hasattr(instance, "run") and not hasattr(instance, "collect"):
            runner = StreamRunner(label, instance, bus.emit)
        else:
            precise = self.config.agent.precise_wakeup
            runner = CollectorRunner(
                label,
                instance,
                bus.emit,
                interval_s=interval,
                timeout_s=spec.timeout,
                align=self.config.agent.align,
                clock=SystemClock(
                    precise=precise == "always"
                    or (precise == "auto" and interval < _PRECISE_BELOW_S)
                ),
            )
        self._runners.append(runner)
        self.available.append(label)
        return runner


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ImportError):
        return f"cannot import ({text})"
    return text


def _collector_specs(config: Config, only: Collection[str] | None) -> list[PluginSpec]:
    """The config's collectors (or the embedded default), minus agent-only ones, restricted to
    ``only``; a name in ``only`` that the config lacks runs with its defaults."""
    if only is not None:
        unknown = sorted(set(only) - set(COLLECTORS))
        if unknown:
            known = ", ".join(sorted(COLLECTORS))
            raise ConfigError(UNKNOWN_COLLECTOR.format(name=unknown[0], known=known))
    specs = list(config.collectors) or [
        PluginSpec("collectors", name, {}, explicit=False) for name in COLLECTORS
    ]
    specs = [s for s in specs if s.name not in NOT_IN_PROCESS]
    if only is None:
        return specs
    wanted = set(only)
    chosen = [s for s in specs if s.name in wanted]
    present = {s.name for s in chosen}
    for name in sorted(wanted - present - NOT_IN_PROCESS):
        chosen.append(PluginSpec("collectors", name, {}, explicit=False))
    return chosen


def _processor_specs(config: Config) -> list[PluginSpec]:
    return list(config.processors) or [
        PluginSpec("processors", name, {}, explicit=False) for name in PROCESSORS
    ]


class AgentSampler:
    """The sampler interface over an nrg agent already running on this machine: the points its
    file sink writes (``.lp`` files under ``data_dir``), followed with
    :class:`acquisition.follow.Follower` (each look reads only what the agent appended since the
    last, and never a file last changed well before ``start()``); nothing is opened in this
    process.

    ``measurements``: what to read (default: the power readings; None: everything); ``tags``:
    only the points carrying them (the agent's ``run``, so other runs in the same directory are
    left out); ``collectors``: what the agent opened (``available``, a list of labels) and why
    the others are missing (``unavailable``, label → reason), shown as the sampler's own;
    ``margin_s``: readings this long before ``start()`` are read too (they bracket the first
    events); ``latency_s``: how long a caller may wait at the end for the agent's readings after
    the last event to reach the file (its interval plus its flush interval).

    The agent samples at its own interval (1 s by default): for energy per operator, run it with
    a short interval (``[agent] interval = "10ms"`` and a short ``flush_interval``)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        measurements: Iterable[str] | None = POWER_MEASUREMENTS,
        margin_s: float = 5.0,
        latency_s: float = 3.0,
        tags: Mapping[str, str] | None = None,
        collectors: Mapping[str, Any] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.tags = dict(tags or {})
        """Only points carrying these tags are read (e.g. the agent's ``run``)."""
        # None where the agent did not say: the profiler then waits for its readings instead
        # of taking "no collector" for an answer.
        self.available: list[str] | None = (
            None if collectors is None else list(collectors.get("available", []))
        )
        self.unavailable: dict[str, str] | None = (
            None if collectors is None else dict(collectors.get("unavailable", {}))
        )
        self.measurements = tuple(measurements) if measurements is not None else None
        self.margin_s = margin_s
        self.latency_s = latency_s
        self.interval_s = latency_s / 30
        """How often a caller waiting for readings looks again."""
        self.start_ns = 0
        self.stop_ns: int | None = None
        self._follower: Follower | None = None

    def start(self) -> None:
        self.start_ns = time.time_ns()
        self.stop_ns = None
        self._follower = None

    def snapshot(self) -> list[Point]:
        """The agent's readings since ``start()`` (less the margin): each call reads only what
        the agent appended since the last one."""
        if self._follower is None:
            from acquisition.follow import Follower
            from acquisition.store import Query

            start = self.start_ns - int(self.margin_s * _NS)
            query = Query.of(self.measurements, start_ns=start, tags=self.tags)
            self._follower = Follower(self.data_dir, query)
        points = self._follower.points()
        if self.stop_ns is None:
            return points
        end = self.stop_ns + int(self.margin_s * _NS)
        return [p for p in points if p.time_ns < end]

    def stop(self) -> list[Point]:
        self.stop_ns = time.time_ns()
        return self.snapshot()
