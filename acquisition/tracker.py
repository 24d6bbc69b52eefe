"""``Tracker``: energy and resources of this process and its children, from Python.

    from acquisition import Tracker

    with Tracker() as t:                  # or Tracker(config="nrg.toml"), t.start() / t.stop()
        train()
        with t.window("eval"):            # nested windows: "eval", "eval/loader", ...
            evaluate()
    print(t.summary())                    # gpu_tracker's text layout; .to_dict(), .to_json()

Without an agent the collectors run in this process, on a background thread
(:class:`~acquisition.sampler.Sampler`), from the same TOML config the agent reads (no config:
every collector that works here). Where an agent already measures this machine, nothing is
opened twice: the points come from that agent's file sink directory
(:class:`~acquisition.sampler.AgentSampler`), read back for the tracked span. That happens by
itself inside a job that ``nrg-collect -- CMD`` runs (the agent puts its file sink directory in
``NRG_AGENT_DATA``), or with ``agent_data=DIR``; ``agent_data=False`` always samples in-process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from acquisition.config import Config, load_config
from acquisition.errors import NrgError
from acquisition.forecast import EpochFigures, Forecast, forecast_run
from acquisition.paths import ENV_AGENT_COLLECTORS, ENV_AGENT_DATA
from acquisition.point import Point
from acquisition.summary import RunSummary, SummaryOptions, counted_sources, summarize

__all__ = ["NOT_STARTED", "NO_SUCH_WINDOW", "Tracker", "WindowResult"]

NOT_STARTED = "the tracker is not running (call start() or use it in a with block)"
NO_SUCH_WINDOW = "no open window named {name!r}"
_SOURCES = ("rapl", "gpu", "emonpi")
_NS = 1_000_000_000
_STALE_S = 5.0


@dataclass
class WindowResult:
    """Energy and time of one window (Zeus's ``end_window`` result, per source)."""

    name: str
    start_ns: int
    end_ns: int
    energy_j: float
    sources: dict[str, float] = field(default_factory=dict)
    error_j: float | None = None
    """Mean power × the part of the window no two samples bracket (as in the summary)."""
    waited_ns: int = 0
    """The tracker's own waits inside the window (for the readings after a nested window's
    end): left out of its duration and energy."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns - self.waited_ns) / _NS

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start_ns": self.start_ns,
            "duration_s": self.duration_s,
            "energy_j": self.energy_j,
            "error_j": self.error_j,
            "sources": dict(self.sources),
            "waited_s": self.waited_ns / _NS,
        }


class Tracker:
    """Tracks this process tree's energy and resources (see the module docstring).

    ``config``: a path to the agent's TOML, or a parsed :class:`Config`; ``interval_s`` and
    ``only`` as for :class:`~acquisition.sampler.Sampler`; ``agent_data``: an agent's file sink
    directory to read instead of sampling (default: ``NRG_AGENT_DATA`` when set; False: always
    sample here; True: an agent must be named); the unit and carbon options as gpu_tracker's
    (``ram_unit``, ``gpu_ram_unit``, ``time_unit``); ``epochs``: the run's length, for
    :meth:`forecast` from the epochs marked with :meth:`epoch`."""

    def __init__(
        self,
        config: str | os.PathLike[str] | Config | None = None,
        *,
        interval_s: float | None = None,
        only: Collection[str] | None = None,
        agent_data: str | os.PathLike[str] | bool | None = None,
        ram_unit: Literal[
            "bytes", "kilobytes", "megabytes", "gigabytes", "terabytes"
        ] = "gigabytes",
        gpu_ram_unit: Literal["bytes", "kilobytes", "megabytes", "gigabytes"] = "gigabytes",
        time_unit: Literal["seconds", "minutes", "hours", "days"] = "hours",
        carbon_intensity_g_per_kwh: float | None = None,
        epochs: int | None = None,
    ) -> None:
        if isinstance(config, str | os.PathLike):
            config = load_config(config)
        self.config = config
        self.interval_s = interval_s
        self.only = only
        self.agent_data = _agent_dir(agent_data)
        extra: dict[str, Any] = {}
        if carbon_intensity_g_per_kwh is not None:
            extra = {
                "carbon_intensity_g_per_kwh": carbon_intensity_g_per_kwh,
                "carbon_intensity_source": "given to Tracker",
                "carbon_given": True,
            }
        self.options = SummaryOptions(
            ram_unit=ram_unit,
            gpu_ram_unit=gpu_ram_unit,
            time_unit=time_unit,
            tree=str(os.getpid()),
            **extra,
        )
        self.options.validate()
        self._sampler: Any = None
        self._points: list[Point] | None = None
        self.start_ns = 0
        self.stop_ns = 0
        self._open: dict[str, int] = {}
        self._stack: list[str] = []
        self.windows: list[WindowResult] = []
        self.epochs = epochs
        """The run's length in epochs, for :meth:`forecast`."""
        self._epoch_marks: list[int] = []
        self._waits: list[tuple[int, int]] = []
        self.waits_timed_out = 0
        """Waits for a reading after a window's end (or the stop) that ran out before every
        source had one (a starved machine; the energy up to the end is then extrapolated)."""

    # -- start / stop -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.start_ns > 0 and self.stop_ns == 0

    @property
    def available(self) -> list[str]:
        """Collectors opened in this process, or by the agent whose data is read (where it
        said: ``nrg-collect -- CMD`` does)."""
        return list(getattr(self._sampler, "available", None) or [])

    @property
    def unavailable(self) -> dict[str, str]:
        return dict(getattr(self._sampler, "unavailable", None) or {})

    def start(self) -> Tracker:
        if self.running:
            raise NrgError("the tracker is already running")
        self._points, self.stop_ns, self.windows = None, 0, []
        self._epoch_marks, self._waits = [], []
        from acquisition.sampler import AgentSampler, Sampler

        if self.agent_data is None:
            self._sampler = Sampler(self.config, interval_s=self.interval_s, only=self.only)
        else:
            # Resources too, not only power: the summary's memory and CPU figures.
            self._sampler = AgentSampler(
                self.agent_data, measurements=None, margin_s=60.0, **_agent_view(self.agent_data)
            )
        self._sampler.start()
        self.start_ns = time.time_ns()
        return self

    def stop(self) -> None:
        if not self.running:
            raise NrgError(NOT_STARTED)
        for name in reversed(self._stack):
            self.end_window(name)
        self.stop_ns = time.time_ns()
        self._wait_for_sample_after(self.stop_ns)
        self._points = self._own(self._sampler.stop())

    def __enter__(self) -> Tracker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.running:
            self.stop()

    # -- windows ------------------------------------------------------------------------------

    def begin_window(self, name: str) -> None:
        """Open a window; a window opened inside another is named ``outer/name``."""
        if not self.running:
            raise NrgError(NOT_STARTED)
        path = "/".join([*self._stack, name]) if self._stack else name
        self._open[path] = time.time_ns()
        self._stack.append(path)

    def end_window(self, name: str) -> WindowResult:
        """Close the innermost window called ``name`` (or its full ``outer/name``); its energy
        per source, once every source has a sample after its end."""
        path = next((p for p in reversed(self._stack) if p == name or p.endswith("/" + name)), None)
        if path is None:
            raise NrgError(NO_SUCH_WINDOW.format(name=name))
        with self._overhead() as end:
            start = self._open.pop(path)
            self._stack.remove(path)
            self._wait_for_sample_after(end)
            result = self._window_result(path, start, end, self._current_points())
            self.windows.append(result)
        return result

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[None]:
        self.begin_window(name)
        try:
            yield
        finally:
            self.end_window(name)

    # -- forecast -----------------------------------------------------------------------------

    def epoch(self) -> None:
        """Mark the start of an epoch (the first call: epoch 0); each later call ends one."""
        if not self.running:
            raise NrgError(NOT_STARTED)
        self._epoch_marks.append(time.time_ns())

    def forecast(self) -> Forecast | None:
        """The run's remaining and total duration, energy and CO2e, predicted from the epochs
        marked with :meth:`epoch` so far (``epochs`` given to the Tracker); None before the
        first epoch has ended. One epoch gives no spread: the interval needs two."""
        if self.epochs is None or len(self._epoch_marks) < 2:
            return None
        with self._overhead():
            return self._forecast(self._epoch_marks, self.epochs)

    def _forecast(self, marks: list[int], epochs: int) -> Forecast:
        self._wait_for_sample_after(marks[-1])
        points = [p for p in self._current_points() if p.measurement in _SOURCES]
        done = []
        for a, b in itertools.pairwise(marks):
            part = self._window_result("epoch", a, b, points)
            done.append(EpochFigures(part.duration_s, dict(part.sources)))
        spent = self._window_result("spent", self.start_ns, marks[-1], points)
        counted = sorted(counted_sources(spent.sources))
        return forecast_run(
            done,
            epochs,
            elapsed_s=spent.duration_s,
            spent_j=spent.sources,
            counted=counted,
            carbon_intensity_g_per_kwh=self.options.carbon_intensity_g_per_kwh,
        )

    # -- results ------------------------------------------------------------------------------

    def points(self) -> list[Point]:
        """Every point sampled so far (or read from the agent), arrival order."""
        return self._current_points()

    def summary(self) -> RunSummary:
        """The figures of the tracked span (a running tracker: up to now), less the tracker's
        own waits for readings at the windows' ends."""
        points = self._current_points()
        end = self.stop_ns or time.time_ns()
        if not self.start_ns:
            raise NrgError(NOT_STARTED)
        summary = summarize(
            points,
            self.options,
            unavailable=self.unavailable or None,
            window_ns=(self.start_ns, end),
            exclude_ns=self._waits,
        )
        summary.windows = [w.to_dict() for w in self.windows]
        return summary

    # -- internals ----------------------------------------------------------------------------

    def _current_points(self) -> list[Point]:
        if self._points is not None:
            return self._points
        if self._sampler is None:
            raise NrgError(NOT_STARTED)
        return self._own(self._sampler.snapshot())

    def _own(self, points: list[Point]) -> list[Point]:
        """An agent's points without its per-pid process points (the summary reads the tree
        totals); the in-process sampler's as they are."""
        if self.agent_data is None:
            return points
        return [p for p in points if p.measurement != "process" or p.tags.get("scope") != "pid"]

    @contextlib.contextmanager
    def _overhead(self) -> Iterator[int]:
        """The tracker's own time inside the tracked span (waiting for the readings after a
        window's end, computing its result), which the span and the windows around it leave
        out; yields its start."""
        began = time.time_ns()
        try:
            yield began
        finally:
            self._waits.append((began, time.time_ns()))

    def _wait_for_sample_after(self, t_ns: int) -> None:
        """Wait (at most a few intervals, or an agent's flush latency) until every power source
        has a sample at or after ``t_ns``, so the energy up to ``t_ns`` is bracketed rather
        than extrapolated."""
        interval = self.interval_s or self._sampler.interval_s
        latency = float(getattr(self._sampler, "latency_s", 0.0))
        # Returns as soon as the samples are in; the bound only matters on a starved machine.
        deadline = time.monotonic() + max(20 * interval, 2.0, latency)
        # A series with nothing this recent has ended (another run's, a source that stopped):
        # no reading of it will come, so it is not waited for.
        stale_ns = t_ns - int(max(_STALE_S, 3 * latency, 5 * interval) * _NS)
        while time.monotonic() < deadline:
            latest: dict[str, int] = {}
            for p in self._sampler.snapshot():
                if p.measurement in _SOURCES:
                    key = p.measurement + str(sorted(p.tags.items()))
                    latest[key] = max(latest.get(key, 0), p.time_ns)
            live = [t for t in latest.values() if t >= stale_ns]
            if not live or min(live) >= t_ns:
                return
            time.sleep(min(interval / 4, 0.05) if latency == 0 else interval)
        self.waits_timed_out += 1

    def _window_result(self, name: str, start: int, end: int, points: list[Point]) -> WindowResult:
        waits = [(a, min(b, end)) for a, b in self._waits if start <= a < end]
        waited = sum(b - a for a, b in waits)
        sources = [p for p in points if p.measurement in _SOURCES]
        if not sources:
            return WindowResult(name, start, end, 0.0, {}, waited_ns=waited)
        part = summarize(sources, self.options, window_ns=(start, end), exclude_ns=waits)
        per = {s.source: s.energy_j for s in part.energy.sources}
        counted = counted_sources(per)
        errors = [s.error_j for s in part.energy.sources if s.source in counted]
        error = None if any(e is None for e in errors) else sum(e or 0.0 for e in errors)
        total = sum(per[s] for s in counted)
        return WindowResult(name, start, end, total, per, error, waited)


def _agent_dir(agent_data: str | os.PathLike[str] | bool | None) -> Path | None:
    """The agent data directory to read from: the one given, else (None) the one
    ``nrg-collect -- CMD`` names in ``NRG_AGENT_DATA``; False or nothing: sample here."""
    if agent_data is False:
        return None
    if agent_data is None or agent_data is True:
        env = os.environ.get(ENV_AGENT_DATA, "")
        if not env:
            if agent_data is True:
                raise NrgError(f"agent_data=True: no agent names its data here ({ENV_AGENT_DATA})")
            return None
        return Path(env).expanduser()
    return Path(agent_data).expanduser()


def _agent_view(agent_data: Path) -> dict[str, Any]:
    """What ``nrg-collect -- CMD`` tells its job about the agent whose directory is read: the
    run to keep (other runs share the directory) and the collectors it opened, or why not."""
    if os.environ.get(ENV_AGENT_DATA) != str(agent_data):
        return {}
    run = os.environ.get("NRG_RUN", "")
    try:
        collectors = json.loads(os.environ.get(ENV_AGENT_COLLECTORS, "") or "{}")
    except ValueError:
        collectors = {}
    return {"tags": {"run": run} if run else None, "collectors": collectors}
