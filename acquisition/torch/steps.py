"""Per-step aggregation of hook events (pure; runs on the session's background thread).

Input: the ``(module, perf_counter_ns, kind[, cuda_event])`` tuples of
:mod:`acquisition.torch.hooks`, in append order. Output: one :class:`StepRecord` per step
boundary with, per ``(module qualname, phase)``, the call count, inclusive time (enter to exit)
and exclusive ("self") time (inclusive minus the inclusive time of instrumented child calls), in
ns of ``time.perf_counter_ns``; on CUDA also GPU milliseconds between the events recorded at
enter and exit, inclusive and exclusive.

Steps tile time: step *k* runs from the boundary of step *k-1* (for the first step, the first
event after the session started) to its own boundary. Modules that are not part of the
instrumented model (a loss module, another model) are transparent: their time stays in the
enclosing module's exclusive time. A call is accounted to the step in which it exits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acquisition.point import Point
from acquisition.torch.hooks import (
    BWD_POST,
    BWD_PRE,
    EPOCH,
    FWD_POST,
    FWD_PRE,
    RETIME,
    STEP,
    Event,
)

__all__ = ["ROOT_NAME", "ModuleTiming", "StepAggregator", "StepRecord", "step_points"]

ROOT_NAME = "(root)"
"""How the root module (qualname ``""``) is written in the ``module`` tag."""

_PHASE = {FWD_PRE: "forward", FWD_POST: "forward", BWD_PRE: "backward", BWD_POST: "backward"}


@dataclass
class ModuleTiming:
    """What one module did in one phase of one step."""

    calls: int = 0
    inclusive_ns: int = 0
    exclusive_ns: int = 0
    gpu_inclusive_ms: float | None = None
    gpu_exclusive_ms: float | None = None


@dataclass
class StepRecord:
    """One finished step; times in ``perf_counter_ns``."""

    step: int
    epoch: int
    start_ns: int
    end_ns: int
    modules: dict[tuple[str, str], ModuleTiming] = field(default_factory=dict)
    """Keyed by ``(qualname, phase)``; the root's qualname is ``""``."""


@dataclass
class _Frame:
    module: Any
    start_ns: int
    child_ns: int = 0
    start_event: Any = None
    child_events: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass
class _GpuSpan:
    key: tuple[str, str]
    start: Any
    end: Any
    children: list[tuple[Any, Any]]


class StepAggregator:
    """Turns the event stream into per-step, per-module timings.

    ``names`` maps module objects to qualnames (from ``root.named_modules()``); the session may
    replace it when modules are added to the model.
    """

    def __init__(self, names: Mapping[Any, str], *, epoch: int = 0) -> None:
        self.names = names
        self.epoch = epoch
        self.step = 0
        self.unmatched_exits = 0
        """Exits whose enter was never seen (hooks installed mid-call)."""
        self.unclosed_enters = 0
        """Enters whose exit never came (a frame skipped by a later exit of its parent)."""
        self._start_ns: int | None = None
        self._stacks: dict[str, list[_Frame]] = {"forward": [], "backward": []}
        self._stats: dict[tuple[str, str], ModuleTiming] = {}
        self._gpu: list[_GpuSpan] = []

    @property
    def pending(self) -> bool:
        """Whether module calls were recorded since the last step boundary."""
        return bool(self._stats)

    def feed(self, events: Iterable[Event]) -> list[StepRecord]:
        """Consume events; return the steps they completed."""
        done: list[StepRecord] = []
        names = self.names
        for ev in events:
            obj, t, kind = ev[0], ev[1], ev[2]
            if self._start_ns is None:
                self._start_ns = t
            if kind in (FWD_PRE, BWD_PRE):
                if obj in names:
                    self._stacks[_PHASE[kind]].append(
                        _Frame(obj, t, start_event=ev[3] if len(ev) > 3 else None)
                    )
            elif kind in (FWD_POST, BWD_POST):
                name = names.get(obj)
                if name is not None:
                    self._exit(name, _PHASE[kind], obj, t, ev[3] if len(ev) > 3 else None)
            elif kind == STEP:
                done.append(self._finish(t))
            elif kind == EPOCH:
                self.epoch = int(obj)
            elif kind == RETIME:
                stack = self._stacks["forward"]
                if stack and stack[-1].module is obj:
                    stack[-1].start_ns = t
                if not self._stats:
                    self._start_ns = t
        return done

    def finish_pending(self, end_ns: int) -> StepRecord | None:
        """Close a last, unfinished step (module calls after the last boundary), if any."""
        if not self._stats:
            return None
        return self._finish(end_ns)

    def _exit(self, name: str, phase: str, module: Any, t: int, end_event: Any) -> None:
        stack = self._stacks[phase]
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].module is module:
                break
        else:
            self.unmatched_exits += 1
            return
        if i != len(stack) - 1:
            self.unclosed_enters += len(stack) - 1 - i
            del stack[i + 1 :]
        frame = stack.pop()
        inclusive = t - frame.start_ns
        key = (name, phase)
        timing = self._stats.get(key)
        if timing is None:
            timing = self._stats[key] = ModuleTiming()
        timing.calls += 1
        timing.inclusive_ns += inclusive
        timing.exclusive_ns += inclusive - frame.child_ns
        if stack:
            stack[-1].child_ns += inclusive
        if end_event is not None and frame.start_event is not None:
            self._gpu.append(_GpuSpan(key, frame.start_event, end_event, frame.child_events))
            if stack:
                stack[-1].child_events.append((frame.start_event, end_event))

    def _finish(self, end_ns: int) -> StepRecord:
        start = self._start_ns if self._start_ns is not None else end_ns
        record = StepRecord(self.step, self.epoch, start, end_ns, self._stats)
        if self._gpu:
            _resolve_gpu(self._gpu, record.modules)
            self._gpu = []
        self._stats = {}
        self.step += 1
        self._start_ns = end_ns
        return record


def _resolve_gpu(spans: list[_GpuSpan], modules: dict[tuple[str, str], ModuleTiming]) -> None:
    """Read CUDA event pairs (blocking this background thread, never the training thread)."""
    spans[-1].end.synchronize()
    for span in spans:
        span.end.synchronize()
        inclusive = float(span.start.elapsed_time(span.end))
        children = sum(float(s.elapsed_time(e)) for s, e in span.children)
        timing = modules[span.key]
        timing.gpu_inclusive_ms = (timing.gpu_inclusive_ms or 0.0) + inclusive
        timing.gpu_exclusive_ms = (timing.gpu_exclusive_ms or 0.0) + max(0.0, inclusive - children)


def step_points(record: StepRecord, tags: Mapping[str, str], offset_ns: int) -> list[Point]:
    """``nrg_step`` and ``nrg_module`` points of one step (wire contract, interfaces §5).

    ``offset_ns`` converts ``perf_counter_ns`` to Unix-epoch ns.
    """
    start = record.start_ns + offset_ns
    end = record.end_ns + offset_ns
    points = [
        Point(
            "nrg_step",
            dict(tags),
            {
                "step": record.step,
                "epoch": record.epoch,
                "start_time_ns": start,
                "end_time_ns": end,
                "duration_seconds": (end - start) / 1e9,
            },
            end,
        )
    ]
    for (name, phase), timing in record.modules.items():
        fields: dict[str, float | int] = {
            "step": record.step,
            "epoch": record.epoch,
            "calls": timing.calls,
            "inclusive_seconds": timing.inclusive_ns / 1e9,
            "exclusive_seconds": timing.exclusive_ns / 1e9,
        }
        if timing.gpu_exclusive_ms is not None:
            fields["gpu_seconds"] = timing.gpu_exclusive_ms / 1e3
            fields["gpu_inclusive_seconds"] = (timing.gpu_inclusive_ms or 0.0) / 1e3
        module_tags = dict(tags)
        module_tags["module"] = name or ROOT_NAME
        module_tags["phase"] = phase
        points.append(Point("nrg_module", module_tags, fields, end))
    return points
