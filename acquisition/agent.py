"""The nrg-collect agent: builds plugins from the config, runs them on one asyncio loop, and
shuts down cleanly (stop collectors, drain the bus, flush every sink before a deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acquisition.api import PluginContext
from acquisition.bus import Bus, ProcessorStats
from acquisition.clock import Clock, SystemClock
from acquisition.config import Config, PluginSpec
from acquisition.energy import ENERGY_COLLECTORS
from acquisition.errors import ConfigError, NoData, install_hint
from acquisition.paths import data_dir, runtime_dir, state_dir
from acquisition.point import Point
from acquisition.registry import (
    COLLECTORS,
    PROCESSORS,
    build_plugin,
    check_extras,
    quick_unavailable,
)
from acquisition.running import CollectorRunner, StreamRunner, last_readings, share_grid
from acquisition.selfstats import cumulative_stats, plugin_stats
from acquisition.sinking import SinkRunner

__all__ = [
    "FLUSH_CUT_SHORT",
    "SINK_CLOSE_CUT_SHORT",
    "Agent",
    "Unavailable",
    "default_config",
    "plugin_label",
]

log = logging.getLogger("nrg.agent")


def default_config(config: Config) -> Config:
    """The embedded default: every collector that works here, the file sink, both processors."""
    if not config.collectors:
        config.collectors = [PluginSpec("collectors", n, {}, explicit=False) for n in COLLECTORS]
    if not config.sinks:
        config.sinks = [PluginSpec("sinks", "file", {}, explicit=False)]
    if not config.processors:
        config.processors = [PluginSpec("processors", n, {}, explicit=False) for n in PROCESSORS]
    return config


def plugin_label(spec: PluginSpec) -> str:
    """``procfs``, or ``procfs-1`` for a second instance."""
    return spec.name if spec.index == 0 else f"{spec.name}-{spec.index}"


@dataclass
class Unavailable:
    label: str
    reason: str


@dataclass
class _Collected:
    label: str
    runner: CollectorRunner | StreamRunner
    instance: Any


@dataclass
class AgentState:
    started_ns: int = 0
    unavailable: list[Unavailable] = field(default_factory=list)


class Agent:
    """Owns the bus, the runners and the plugin instances."""

    def __init__(self, config: Config, *, clock: Clock | None = None) -> None:
        check_extras(config.sinks)
        self.config = config
        agent = config.agent
        self._fixed_clock = clock
        self.clock: Clock = clock or SystemClock()  # for timestamps; runners get _clock_for()
        self.tags = agent.global_tags()
        self.context = PluginContext(
            host=self.tags["host"],
            interval_s=agent.interval,
            state_dir=Path(agent.state_dir).expanduser() if agent.state_dir else state_dir(),
            data_dir=Path(agent.data_dir).expanduser() if agent.data_dir else data_dir(),
            runtime_dir=runtime_dir(),
            tags=self.tags,
        )
        self.bus = Bus()
        self.collectors: list[_Collected] = []
        self.sinks: list[SinkRunner] = []
        self.processors: list[tuple[str, ProcessorStats, Any]] = []
        self.state = AgentState()
        self._tasks: list[asyncio.Task[None]] = []
        self._sink_tasks: list[asyncio.Task[None]] = []
        self._open_collectors: list[Any] = []
        self._last_stats: dict[str, dict[str, float | int | bool | str]] = {}
        self._stats_due: float | None = None
        """Monotonic time (s) the next self-stats are due; None while they are not published."""
        self._stats_timer: asyncio.TimerHandle | None = None
        self.socket_clash_fatal = False
        """True for a running agent: a hooks socket already in use is an error (``list`` only
        reports it)."""

    # -- building -----------------------------------------------------------------------------

    def _build(self, spec: PluginSpec) -> Any | None:
        """Build one plugin; None (recorded as unavailable) when the embedded default meets a
        plugin that cannot load here."""
        if not spec.explicit and spec.kind == "collectors":
            reason = quick_unavailable(spec.name)
            if reason is not None:
                self.state.unavailable.append(Unavailable(plugin_label(spec), reason))
                log.info("collector %s unavailable: %s", plugin_label(spec), reason)
                return None
        try:
            context = self.context
            if spec.kind == "collectors" and spec.interval:
                # Same shared status dict; only the collector's own interval differs.
                context = dataclasses.replace(context, interval_s=spec.interval)
            return build_plugin(spec, context)
        except ConfigError:
            raise
        except NoData as exc:
            self.state.unavailable.append(Unavailable(plugin_label(spec), str(exc)))
        except ImportError as exc:
            if spec.explicit:
                raise ConfigError(
                    f"[{spec.where}] cannot load: {exc} (install the matching extra: "
                    f"{install_hint(_EXTRAS.get(spec.name, spec.name))})"
                ) from exc
            self.state.unavailable.append(
                Unavailable(plugin_label(spec), f"unavailable: cannot import ({exc})")
            )
        return None

    def unavailable(self) -> list[tuple[str, str]]:
        """(label, reason) of each collector that measures nothing here: those that could not
        open, and the open ones whose counters are not advancing (their ``not_advancing()``)."""
        rows = [(u.label, u.reason) for u in self.state.unavailable]
        for c in self.collectors:
            check = getattr(c.instance, "not_advancing", None)
            reason = check() if callable(check) else None
            if reason:
                rows.append((c.label, reason))
        return rows

    def files_dir(self) -> Path | None:
        """The directory the agent's (first) file sink writes to; None without one."""
        for runner in self.sinks:
            where = getattr(runner.sink, "dir", None)
            if getattr(runner.sink, "name", "") == "file" and isinstance(where, Path):
                return where
        return None

    async def open_sinks(self) -> None:
        agent = self.config.agent
        for spec in self.config.sinks:
            sink = self._build(spec)
            if sink is None:
                continue
            await sink.open()
            runner = SinkRunner(
                plugin_label(spec),
                sink,
                batch_size=spec.batch_size or agent.batch_size,
                flush_interval_s=spec.flush_interval or agent.flush_interval,
                buffer_limit=spec.buffer_limit or agent.buffer_limit,
            )
            self.sinks.append(runner)
            self.bus.add_sink(runner.offer)
        if not self.sinks:
            raise ConfigError("no sink could be opened: nothing would be recorded")

    def open_processors(self) -> None:
        for spec in self.config.processors:
            proc = self._build(spec)
            if proc is not None:
                label = plugin_label(spec)
                self.processors.append((label, self.bus.add_processor(label, proc), proc))

    async def open_collectors(self, *, streams: bool = True) -> None:
        agent = self.config.agent
        for spec in self.config.collectors:
            label = plugin_label(spec)
            instance = self._build(spec)
            if instance is None:
                continue
            is_stream = _is_stream(instance)
            if (is_stream and not streams) or not await self._open_one(spec, label, instance):
                continue
            self._open_collectors.append(instance)
            runner: CollectorRunner | StreamRunner
            if is_stream:
                runner = StreamRunner(label, instance, self.bus.emit)
            else:
                runner = CollectorRunner(
                    label,
                    instance,
                    self.bus.emit,
                    interval_s=spec.interval or agent.interval,
                    timeout_s=spec.timeout,
                    align=agent.align,
                    clock=self._clock_for(spec.interval or agent.interval),
                    after_tick=self._after_tick,
                )
            self.collectors.append(_Collected(label, runner, instance))

    async def _open_one(self, spec: PluginSpec, label: str, instance: Any) -> bool:
        """``open()`` one collector; False (recorded as unavailable) when it cannot run here."""
        try:
            await instance.open()
        except NoData as exc:
            self._check_socket_clash(spec, instance)
            self.state.unavailable.append(Unavailable(label, str(exc)))
            reason = str(exc)
            log.log(
                logging.WARNING if spec.explicit else logging.INFO,
                "collector %s %s",
                label,
                reason if reason.startswith("unavailable") else f"unavailable: {reason}",
            )
            return False
        except ConfigError:
            raise
        except Exception as exc:
            if spec.explicit:
                raise ConfigError(f"[{spec.where}] failed to open: {exc!r}") from exc
            self.state.unavailable.append(Unavailable(label, f"failed to open: {exc!r}"))
            return False
        return True

    def _check_socket_clash(self, spec: PluginSpec, instance: Any) -> None:
        """A hooks socket another live agent listens on is an error for a running agent: the
        training jobs would send their steps to the other one."""
        path = getattr(instance, "path", None)
        if not self.socket_clash_fatal or spec.name != "hooks" or path is None:
            return
        if _socket_live(Path(path)):
            raise ConfigError(SOCKET_IN_USE.format(path=path))

    def _clock_for(self, interval_s: float) -> Clock:
        """A precise-wakeup clock where the interval is short enough for 1-2 ms to matter."""
        if self._fixed_clock is not None:
            return self._fixed_clock
        mode = self.config.agent.precise_wakeup
        return SystemClock(precise=mode == "always" or (mode == "auto" and interval_s < 0.05))

    async def start(self) -> None:
        """Open sinks, processors and collectors, and start their tasks."""
        self.state.started_ns = time.time_ns()
        self.socket_clash_fatal = True
        try:
            await self.open_sinks()
            self.open_processors()
            await self.open_collectors()
        except BaseException:
            await self._close_opened()
            raise
        for runner in self.sinks:
            self._sink_tasks.append(asyncio.create_task(runner.run(), name=f"sink {runner.name}"))
        if self.config.agent.shared_ticks:  # one grid: one wake-up per tick for them all
            share_grid((c.runner for c in self.collectors), self.clock.monotonic_ns())
        for c in self.collectors:
            self._tasks.append(asyncio.create_task(c.runner.run(), name=f"collector {c.label}"))
        self._start_stats()
        where = ", ".join(f"{r.name}" for r in self.sinks)
        labels = ", ".join(c.label for c in self.collectors) or "nothing"
        log.info("collecting from %s into %s", labels, where)

    # -- running ------------------------------------------------------------------------------

    def _start_stats(self) -> None:
        """Self-stats every ``stats_interval``: published by the collector tick that finds them
        due (no wake-up of their own), or by a fallback timer when no tick comes."""
        interval = self.config.agent.stats_interval
        if interval <= 0:
            return
        self._stats_due = time.monotonic() + interval
        self._arm_stats_timer()

    def _arm_stats_timer(self) -> None:
        if self._stats_due is None:
            return
        interval = self.config.agent.stats_interval
        grace = min(interval / 2, STATS_GRACE_S)
        loop = asyncio.get_running_loop()
        self._stats_timer = loop.call_at(self._stats_due + grace, self._publish_stats)

    def _stop_stats(self) -> None:
        self._stats_due = None
        if self._stats_timer is not None:
            self._stats_timer.cancel()
            self._stats_timer = None

    def _publish_stats(self) -> None:
        if self._stats_due is None:
            return
        if self._stats_timer is not None:
            self._stats_timer.cancel()
        interval = self.config.agent.stats_interval
        now = time.monotonic()
        self._stats_due += interval  # on a grid, so ticks keep finding them due in step
        if self._stats_due <= now:
            self._stats_due = now + interval
        self._arm_stats_timer()
        self.emit_self_stats()

    def _after_tick(self, interval_s: float) -> None:
        """A collector's tick is over: self-stats when due (give or take half a tick), then
        each sink flushes when due, all in the wake-up of that tick."""
        due = self._stats_due
        if due is not None:
            slack = min(interval_s, self.config.agent.stats_interval) / 2
            if time.monotonic() >= due - slack:
                self._publish_stats()
        for r in self.sinks:
            r.tick_ended(interval_s)

    def self_stats(self, now_ns: int | None = None) -> list[Point]:
        """``nrg_collect`` points: one per collector, sink, processor, and one for the bus."""
        now = now_ns or self.clock.time_ns()
        points = []
        for c in self.collectors:
            s = c.runner.stats
            fields: dict[str, float | int | bool | str] = {
                "runs": s.runs,
                "errors": s.errors,
                "timeouts": s.timeouts,
                "skipped_ticks": s.skipped_ticks,
                "points": s.points,
                "duration_seconds": (s.duration_ns_total / s.runs / 1e9) if s.runs else 0.0,
                "duration_max_seconds": s.duration_ns_max / 1e9,
                "lateness_max_seconds": s.lateness_ns_max / 1e9,
            }
            fields.update(cumulative_stats(self._last_stats.get(c.label, {}), c.instance))
            points.append(
                Point("nrg_collect", {"plugin": c.label, "kind": "collector"}, fields, now)
            )
        for r in self.sinks:
            ss = r.stats
            fields = {
                "points_in": ss.points_in,
                "points_written": ss.points_written,
                "dropped_points": ss.dropped_points,
                "spilled_points": ss.spilled_points,
                "rejected_points": ss.rejected_points,
                "unencodable_points": ss.unencodable_points,
                "write_errors": ss.write_errors,
                "retries": ss.retries,
                "queue_points": len(r.queue),
                "queue_max_points": ss.queue_max,
                "duration_seconds": (ss.write_ns_total / ss.batches_written / 1e9)
                if ss.batches_written
                else 0.0,
            }
            fields.update(plugin_stats(r.sink))
            points.append(Point("nrg_collect", {"plugin": r.name, "kind": "sink"}, fields, now))
        for label, ps, proc in self.processors:
            fields = {"points_in": ps.points_in, "points_out": ps.points_out, "errors": ps.errors}
            fields.update(plugin_stats(proc))
            points.append(Point("nrg_collect", {"plugin": label, "kind": "processor"}, fields, now))
        dropped = sum(r.stats.dropped_points for r in self.sinks)
        points.append(
            Point(
                "nrg_collect",
                {"plugin": "agent", "kind": "agent"},
                {
                    "points": self.bus.points,
                    "dropped_points": dropped,
                    "uptime_seconds": (now - self.state.started_ns) / 1e9,
                    "collectors": len(self.collectors),
                    "unavailable_collectors": len(self.state.unavailable),
                },
                now,
            )
        )
        return points

    def emit_self_stats(self) -> None:
        for p in self.self_stats():
            self.bus.emit(p)

    def status_line(self, window_points: int, window_s: float, energy: str = "") -> str:
        """``nrg ▸ <energy> · <rate> pts/s · <collectors> · <sinks>`` for the live line."""
        rate = window_points / window_s if window_s > 0 else 0.0
        sinks = " · ".join(
            f"{r.name}: {r.status()}" + (f" → {where}" if (where := _where(r.sink)) else "")
            for r in self.sinks
        )
        lead = f"{energy} · " if energy else ""
        return f"nrg ▸ {lead}{rate:,.0f} pts/s · {len(self.collectors)} collectors · {sinks}"

    async def run(self, stop: asyncio.Event) -> None:
        """Start, wait for ``stop``, then shut down."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.shutdown()

    async def shutdown(self, abort: asyncio.Event | None = None) -> None:
        """Stop collectors, emit final self-stats, flush every sink before the deadline.

        ``abort`` (a second Ctrl-C or SIGTERM) cuts the final flush short: what is still queued
        goes to the sink's spool where it has one, else it is counted as dropped, and it is said.
        """
        deadline = time.monotonic() + self.config.agent.shutdown_timeout
        self._stop_stats()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await last_readings((c.runner for c in self.collectors), ENERGY_COLLECTORS)
        await self._close_collectors()
        self.bus.flush_processors()
        self.emit_self_stats()
        for r in self.sinks:
            r.stop()
        aborted = await self._wait_sinks(deadline, abort)
        before = {r.name: (r.stats.spilled_points, r.stats.dropped_points) for r in self.sinks}
        for r in self.sinks:
            if not aborted:
                aborted = await _unless_aborted(r.close(deadline), abort)
            if aborted:  # what is still queued goes to the spool, or is counted as dropped
                r.abort_flush()
                await r.close(time.monotonic())
            await self._close_sink(r, deadline, abort)
        aborted = aborted or (abort is not None and abort.is_set())
        if aborted:
            spilled = sum(r.stats.spilled_points - before[r.name][0] for r in self.sinks)
            dropped_now = sum(r.stats.dropped_points - before[r.name][1] for r in self.sinks)
            log.warning(FLUSH_CUT_SHORT, spilled, dropped_now)
        dropped = sum(r.stats.dropped_points for r in self.sinks)
        if dropped:
            log.error("%d point(s) were dropped during this run (see nrg_collect)", dropped)

    async def _close_opened(self) -> None:
        """Start-up failed: close what was opened (collectors, then sinks) and nothing else."""
        for inst in [*self._open_collectors, *(r.sink for r in self.sinks)]:
            with contextlib.suppress(Exception):
                await inst.aclose()
        self._open_collectors.clear()

    async def _close_collectors(self) -> None:
        """``aclose()`` every collector; counters a plugin resets on close keep their last value
        in the final self-stats (counters are cumulative for the agent's life)."""
        for c in self.collectors:
            self._last_stats[c.label] = plugin_stats(c.instance)
        for inst in self._open_collectors:
            try:
                await inst.aclose()
            except Exception as exc:
                log.warning("closing collector %s failed: %r", getattr(inst, "name", inst), exc)
        self._open_collectors.clear()

    async def _close_sink(
        self, r: SinkRunner, deadline: float, abort: asyncio.Event | None
    ) -> None:
        """``aclose()`` one sink, bounded: by the shutdown deadline (at least CLOSE_GRACE_S), and
        at once when ``abort`` is set; a close cut short is said."""
        task = asyncio.ensure_future(r.sink.aclose())
        waiters: set[asyncio.Future[Any]] = {task}
        abort_task = None
        if abort is not None:
            abort_task = asyncio.ensure_future(abort.wait())
            waiters.add(abort_task)
        limit = max(deadline - time.monotonic(), CLOSE_GRACE_S)
        if abort is not None and abort.is_set():
            limit = CLOSE_GRACE_S
        await asyncio.wait(waiters, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        if abort_task is not None and not task.done() and abort_task.done():
            # Abort during the close: grant it the short grace, no more.
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
        if abort_task is not None:
            abort_task.cancel()
        sink_abort = getattr(r.sink, "abort", None)
        if not task.done() and callable(sink_abort):
            # Ask the sink to cut its own wait short (it spools a post in flight) before cancelling.
            sink_abort()
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
        if not task.done():
            task.cancel()
            log.warning(SINK_CLOSE_CUT_SHORT, r.name)
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await task
            except Exception as exc:
                log.warning("closing sink %s failed: %r", r.name, exc)

    async def _wait_sinks(self, deadline: float, abort: asyncio.Event | None) -> bool:
        """Wait for the sinks' final flush until done, the deadline, or ``abort``; True when
        ``abort`` cut it short."""
        if not self._sink_tasks:
            return False
        waiters: set[asyncio.Future[Any]] = set(self._sink_tasks)
        abort_task = asyncio.ensure_future(abort.wait()) if abort is not None else None
        if abort_task is not None:
            waiters.add(abort_task)
        pending = set(self._sink_tasks)
        while pending and (abort_task is None or not abort_task.done()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            waiters -= done - ({abort_task} if abort_task is not None else set())
        aborted = abort_task is not None and abort_task.done() and bool(pending)
        if abort_task is not None and not abort_task.done():
            abort_task.cancel()
        for t in pending:  # a write hung past the deadline (or cut short): only now cancel it
            t.cancel()
        for t in self._sink_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        return aborted


CLOSE_GRACE_S = 1.0
"""How long a sink's ``aclose()`` may still take once the final flush was cut short."""
STATS_GRACE_S = 0.25
"""How long past their due time self-stats wait for a collector's tick to publish them."""
SINK_CLOSE_CUT_SHORT = (
    "sink %s: closing cut short; a write still in flight is abandoned and may be lost"
)
FLUSH_CUT_SHORT = (
    "final flush cut short: %d point(s) kept in the spool for the next start, "
    "%d point(s) dropped (counted in nrg_collect dropped_points)"
)
"""Logged when a second Ctrl-C or SIGTERM interrupts the final flush."""

_EXTRAS = {"influxdb": "influx", "nvml": "nvml", "emonpi": "serial"}


async def _unless_aborted(coro: Coroutine[Any, Any, None], abort: asyncio.Event | None) -> bool:
    """Run ``coro`` to the end, or cancel it when ``abort`` is set first (then True)."""
    task = asyncio.ensure_future(coro)
    if abort is None:
        await task
        return False
    abort_task = asyncio.ensure_future(abort.wait())
    await asyncio.wait({task, abort_task}, return_when=asyncio.FIRST_COMPLETED)
    aborted = not task.done()
    abort_task.cancel()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return aborted


def _is_stream(instance: Any) -> bool:
    return hasattr(instance, "run") and not hasattr(instance, "collect")


def _socket_live(path: Path) -> bool:
    """True when something accepts connections on the Unix socket ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fsencode(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


SOCKET_IN_USE = (
    "another nrg-collect agent already listens on {path}: training jobs started now would "
    "send their steps there. Stop that agent, or give this one a socket of its own "
    "([[collectors.hooks]] socket_path, or NRG_SOCKET), or track the job with "
    "'nrg-collect -- COMMAND', which uses a socket of its own"
)


def _where(sink: Any) -> str:
    """Where a sink writes, the home directory written ``~`` (the live line is one row)."""
    try:
        path = str(sink.where()) if callable(getattr(sink, "where", None)) else ""
    except Exception:
        return ""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path
