"""Per-step aggregation of hook events (pure; the session runs it at step boundaries on the
training thread, or on its idle thread).

Input: the ``(module, perf_counter_ns, kind[, cuda_event])`` tuples of
:mod:`acquisition.torch.hooks`, in append order. Output: one :class:`StepRecord` per step
boundary with, per ``(module qualname, phase)``, the call count, inclusive time (enter to exit)
and exclusive ("self") time (inclusive minus the inclusive time of instrumented child calls), in
ns of ``time.perf_counter_ns``; on CUDA also GPU milliseconds between the events recorded at
enter and exit, inclusive and exclusive, and the step's interval on the GPU's own timeline
(:mod:`acquisition.torch.cuda`): a step boundary that carries a CUDA event is finished only once
the GPU has reached it (``query()``); the events after it wait in a backlog for the next feed, so
every event of a step is read in one batch and nothing here ever waits for the GPU.

Steps tile time: step *k* runs from the boundary of step *k-1* (for the first step, the first
event after the session started) to its own boundary. Modules that are not part of the
instrumented model (a loss module, another model) are transparent: their time stays in the
enclosing module's exclusive time. A call is accounted to the step in which it exits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.torch.hooks import (
    BWD_POST,
    BWD_PRE,
    EPOCH,
    FWD_POST,
    FWD_PRE,
    RESUME,
    RETIME,
    STEP,
    Event,
)

__all__ = [
    "ROOT_NAME",
    "ModuleTiming",
    "StepAggregator",
    "StepLines",
    "StepRecord",
    "step_points",
]

ROOT_NAME = "(root)"
"""How the root module (qualname ``""``) is written in the ``module`` tag."""

_PHASE = {FWD_PRE: "forward", FWD_POST: "forward", BWD_PRE: "backward", BWD_POST: "backward"}


@dataclass(slots=True)
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
    samples: int | None = None
    """Samples (batch size) the job said this step processed, if it said."""
    gpu_start_ns: int | None = None
    """Unix-epoch ns at which the GPU began this step's work (CUDA; None elsewhere)."""
    gpu_end_ns: int | None = None
    """Unix-epoch ns at which the GPU reached this step's boundary event (CUDA)."""


@dataclass
class _GpuSpan:
    key: tuple[Any, int]
    start: Any
    end: Any
    children: list[tuple[Any, Any]]


# A frame is a list, not an object: this loop runs for every event and allocation dominates.
# [module, start_ns, child_inclusive_ns, start_cuda_event, child_cuda_event_pairs]
_MODULE, _START, _CHILD, _EVENT, _CHILD_EVENTS = range(5)


class StepAggregator:
    """Turns the event stream into per-step, per-module timings.

    ``names`` maps the module keys of the events (``id(module)`` from the hooks; any object that
    compares by equality) to qualnames; the session replaces it when modules are added.
    """

    def __init__(
        self, names: Mapping[Any, str], *, epoch: int = 0, samples_per_step: int | None = None
    ) -> None:
        self.names = names
        self.epoch = epoch
        self.samples_per_step = samples_per_step
        """Samples of a step whose boundary event carries none."""
        self.step = 0
        self.unmatched_exits = 0
        """Exits whose enter was never seen (hooks installed mid-call)."""
        self.unclosed_enters = 0
        """Enters whose exit never came (a frame skipped by a later exit of its parent)."""
        self._start_ns: int | None = None
        fwd: list[list[Any]] = []
        bwd: list[list[Any]] = []
        self._stacks = (fwd, fwd, bwd, bwd)  # indexed by event kind
        # (module, kind of the exit event) -> [calls, inclusive_ns, exclusive_ns]
        self._stats: dict[tuple[Any, int], list[int]] = {}
        self._gpu: list[_GpuSpan] = []
        self.gpu_time: Callable[..., int] | None = None
        """``(cuda_event, anchor) -> Unix-epoch ns`` of a completed event
        (:meth:`acquisition.torch.cuda.GpuTimeline.host_ns`); set on CUDA."""
        self.gpu_unresolved = 0
        """Module calls whose CUDA events could not be read (recorded on another stream)."""
        self._gpu_begin: Any = None
        """Where the current step began on the GPU: the previous step's end (ns), else the
        first CUDA event recorded in it (read when the step ends), else None."""
        self._backlog: list[Event] = []

    @property
    def pending(self) -> bool:
        """Whether module calls were recorded since the last step boundary."""
        return bool(self._stats)

    def feed(self, events: Sequence[Event], max_steps: int | None = None) -> list[StepRecord]:
        """Consume events; return the steps they completed.

        Module enters and exits (nearly every event) are handled inline; step, epoch and timing
        marks go to :meth:`_mark`. With ``max_steps``, the events after that many step
        boundaries wait in the backlog (on CUDA: the steps the GPU is still running).
        """
        done: list[StepRecord] = []
        events = self._pending(events, max_steps)
        names = self.names
        stacks = self._stacks
        stats = self._stats
        if self._start_ns is None and events:
            self._start_ns = events[0][1]  # the very first event starts the first step
        for ev in events:
            module, t, kind = ev[0], ev[1], ev[2]
            if kind in (FWD_PRE, BWD_PRE):
                if module in names:
                    gpu = ev[3] if len(ev) > 3 else None
                    if gpu is not None and self._gpu_begin is None:
                        self._gpu_begin = gpu
                    stacks[kind].append([module, t, 0, gpu, None])
            elif kind in (FWD_POST, BWD_POST):
                if module not in names:
                    continue
                stack = stacks[kind]
                if stack and stack[-1][_MODULE] == module:
                    frame = stack.pop()
                else:
                    found = self._unwind(stack, module)
                    if found is None:
                        continue
                    frame = found
                inclusive = t - frame[_START]
                key = (module, kind)
                timing = stats.get(key)
                if timing is None:
                    timing = stats[key] = [0, 0, 0]
                timing[0] += 1
                timing[1] += inclusive
                timing[2] += inclusive - frame[_CHILD]
                if stack:
                    stack[-1][_CHILD] += inclusive
                if frame[_EVENT] is not None and len(ev) > 3:
                    self._gpu_exit(stack, frame, key, ev[3])
            elif not self._mark(ev, done):
                self._backlog = list(events[events.index(ev) :])
                break
        return done

    def _pending(self, events: Sequence[Event], max_steps: int | None) -> Sequence[Event]:
        """The backlog then ``events``, cut after ``max_steps`` boundaries."""
        if self._backlog:
            events = [*self._backlog, *events]
            self._backlog = []
        if max_steps is not None:
            events = self._through_steps(events, max_steps)
        return events

    def _through_steps(self, events: Sequence[Event], steps: int) -> Sequence[Event]:
        """The events up to and including the ``steps``-th boundary; the rest to the backlog."""
        seen = 0
        for i, ev in enumerate(events):
            if ev[2] == STEP:
                seen += 1
                if seen == steps:
                    self._backlog = list(events[i + 1 :])
                    return events[: i + 1]
        if steps == 0:
            self._backlog = list(events)
            return []
        return events

    def _gpu_exit(self, stack: list[list[Any]], frame: list[Any], key: Any, end: Any) -> None:
        """Keep the CUDA event pair of a finished call (and give it to its parent's frame)."""
        self._gpu.append(_GpuSpan(key, frame[_EVENT], end, frame[_CHILD_EVENTS] or []))
        if stack:
            if stack[-1][_CHILD_EVENTS] is None:
                stack[-1][_CHILD_EVENTS] = []
            stack[-1][_CHILD_EVENTS].append((frame[_EVENT], end))

    def _mark(self, ev: Event, done: list[StepRecord]) -> bool:
        """A step boundary, an epoch change, or a restart of the clock (retime, resume).

        False for a step boundary whose CUDA event the GPU has not reached yet."""
        kind = ev[2]
        if kind == STEP:
            if len(ev) > 3 and not ev[3].query():
                return False
            done.append(self._finish(ev[1], ev[0], ev[3:]))
        elif kind == EPOCH:
            self.epoch = int(ev[0])
        elif kind == RETIME:
            stack = self._stacks[FWD_PRE]
            if stack and stack[-1][_MODULE] == ev[0]:
                stack[-1][_START] = ev[1]
            if not self._stats:
                self._start_ns = ev[1]
        elif kind == RESUME and not self._stats:
            self._start_ns = ev[1]
            if len(ev) > 3:
                self._gpu_begin = ev[3]
        return True

    @property
    def waiting(self) -> bool:
        """Whether events wait for the GPU to reach a step boundary."""
        return bool(self._backlog)

    def finish_pending(self, end_ns: int) -> StepRecord | None:
        """Close a last, unfinished step (module calls after the last boundary), if any."""
        if not self._stats:
            return None
        return self._finish(end_ns)

    def _unwind(self, stack: list[list[Any]], module: Any) -> list[Any] | None:
        """The frame of ``module`` below the top; frames above it never saw their exit."""
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][_MODULE] == module:
                self.unclosed_enters += len(stack) - 1 - i
                frame = stack[i]
                del stack[i:]
                return frame
        self.unmatched_exits += 1
        return None

    def _gpu_interval(self, mark: Sequence[Any]) -> tuple[int | None, int | None]:
        """The step's GPU interval from its boundary ``(cuda_event, anchor)``, if it has one."""
        if not mark or self.gpu_time is None:
            return None, None
        anchor = mark[1] if len(mark) > 1 else None
        end = self.gpu_time(mark[0], anchor)
        begin = self._gpu_begin
        start = begin if isinstance(begin, int) or begin is None else self.gpu_time(begin, anchor)
        self._gpu_begin = end
        return start, end

    def _finish(
        self, end_ns: int, samples: int | None = None, mark: Sequence[Any] = ()
    ) -> StepRecord:
        start = self._start_ns if self._start_ns is not None else end_ns
        names = self.names
        modules: dict[tuple[str, str], ModuleTiming] = {}
        by_key: dict[tuple[Any, int], ModuleTiming] = {}
        for key, (calls, inclusive, exclusive) in self._stats.items():
            name = names.get(key[0])
            if name is None:
                continue  # removed from the model since it ran
            timing = ModuleTiming(calls, inclusive, exclusive)
            modules[(name, _PHASE[key[1]])] = by_key[key] = timing
        if self._gpu:
            self.gpu_unresolved += _resolve_gpu(self._gpu, by_key)
            self._gpu = []
        gpu_start, gpu_end = self._gpu_interval(mark)
        self._stats.clear()  # in place: feed() holds a reference to it
        self.step += 1
        self._start_ns = end_ns
        if samples is None:
            samples = self.samples_per_step
        record = StepRecord(self.step - 1, self.epoch, start, end_ns, modules, samples)
        record.gpu_start_ns, record.gpu_end_ns = gpu_start, gpu_end
        return record


def _resolve_gpu(spans: list[_GpuSpan], modules: dict[tuple[Any, int], ModuleTiming]) -> int:
    """Read CUDA event pairs of a step the GPU has finished; never waits.

    Returns how many calls could not be read (events on another stream, not yet run)."""
    unresolved = 0
    for span in spans:
        timing = modules.get(span.key)
        if timing is None:
            continue
        try:
            inclusive = float(span.start.elapsed_time(span.end))
            children = sum(float(s.elapsed_time(e)) for s, e in span.children)
        except RuntimeError:  # CUDA's "device not ready"
            unresolved += 1
            continue
        timing.gpu_inclusive_ms = (timing.gpu_inclusive_ms or 0.0) + inclusive
        timing.gpu_exclusive_ms = (timing.gpu_exclusive_ms or 0.0) + max(0.0, inclusive - children)
    return unresolved


def step_points(record: StepRecord, tags: Mapping[str, str], offset_ns: int) -> list[Point]:
    """``nrg_step`` and ``nrg_module`` points of one step (the wire contract).

    ``epoch`` is a tag (a decimal string: few values, what queries group by); ``step`` a field.
    ``offset_ns`` converts ``perf_counter_ns`` to Unix-epoch ns.
    """
    start = record.start_ns + offset_ns
    end = record.end_ns + offset_ns
    step_tags = dict(tags)
    step_tags["epoch"] = str(record.epoch)
    step_fields: dict[str, float | int] = {"step": record.step}
    if record.samples is not None:
        step_fields["samples"] = record.samples
    step_fields["start_time_ns"] = start
    step_fields["end_time_ns"] = end
    step_fields["duration_seconds"] = (end - start) / 1e9
    if record.gpu_start_ns is not None and record.gpu_end_ns is not None:
        step_fields["gpu_start_time_ns"] = record.gpu_start_ns
        step_fields["gpu_end_time_ns"] = record.gpu_end_ns
    points = [Point("nrg_step", step_tags, step_fields, end)]
    for (name, phase), timing in record.modules.items():
        fields: dict[str, float | int] = {
            "step": record.step,
            "calls": timing.calls,
            "inclusive_seconds": timing.inclusive_ns / 1e9,
            "exclusive_seconds": timing.exclusive_ns / 1e9,
        }
        if timing.gpu_exclusive_ms is not None:
            fields["gpu_seconds"] = timing.gpu_exclusive_ms / 1e3
            fields["gpu_inclusive_seconds"] = (timing.gpu_inclusive_ms or 0.0) / 1e3
        module_tags = dict(step_tags)
        module_tags["module"] = name or ROOT_NAME
        module_tags["phase"] = phase
        points.append(Point("nrg_module", module_tags, fields, end))
    return points


class StepLines:
    """Line protocol for steps, fast: the same text as encoding :func:`step_points`.

    This runs once per step beside training, so its per-step work matters:
    each series' ``measurement,tags`` prefix (per epoch) is escaped once, by the shared
    :class:`~acquisition.lineproto.LineEncoder`, and only the fields are formatted per step
    (``int`` with the ``i`` suffix, ``float`` as ``repr``, as the encoder writes them).
    """

    def __init__(self, tags: Mapping[str, str], offset_ns: int) -> None:
        self._tags = dict(tags)
        self._offset_ns = offset_ns
        self._encoder = LineEncoder()
        self._prefixes: dict[tuple[int, str, str], str] = {}
        self._prefix_epoch = -1

    def _prefix(self, measurement: str, tags: Mapping[str, str]) -> str:
        line = self._encoder.encode(Point(measurement, tags, {"x": 0}, 0))
        return line[: -len(" x=0i 0")]

    def _series(self, epoch: int, name: str, phase: str) -> str:
        """The prefix of one series; kept for the current epoch only (epochs do not return)."""
        if epoch != self._prefix_epoch:
            self._prefixes.clear()
            self._prefix_epoch = epoch
        tags = dict(self._tags)
        tags["epoch"] = str(epoch)
        if not phase:
            prefix = self._prefix("nrg_step", tags)
        else:
            tags["module"] = name or ROOT_NAME
            tags["phase"] = phase
            prefix = self._prefix("nrg_module", tags)
        self._prefixes[(epoch, name, phase)] = prefix
        return prefix

    def lines(self, record: StepRecord) -> str:
        start = record.start_ns + self._offset_ns
        end = record.end_ns + self._offset_ns
        epoch = record.epoch
        prefixes = self._prefixes
        step_prefix = prefixes.get((epoch, "", "")) or self._series(epoch, "", "")
        head = f" step={record.step}i,"
        samples = "" if record.samples is None else f"samples={record.samples}i,"
        on_gpu = ""
        if record.gpu_start_ns is not None and record.gpu_end_ns is not None:
            on_gpu = (
                f",gpu_start_time_ns={record.gpu_start_ns}i,gpu_end_time_ns={record.gpu_end_ns}i"
            )
        out = [
            f"{step_prefix}{head}{samples}start_time_ns={start}i,end_time_ns={end}i,"
            f"duration_seconds={(end - start) / 1e9!r}{on_gpu} {end}\n"
        ]
        for (name, phase), timing in record.modules.items():
            prefix = prefixes.get((epoch, name, phase)) or self._series(epoch, name, phase)
            gpu = ""
            if timing.gpu_exclusive_ms is not None:
                gpu = (
                    f",gpu_seconds={timing.gpu_exclusive_ms / 1e3!r}"
                    f",gpu_inclusive_seconds={(timing.gpu_inclusive_ms or 0.0) / 1e3!r}"
                )
            inclusive = timing.inclusive_ns
            seconds = repr(inclusive / 1e9)
            # A leaf's exclusive time is its inclusive time: one float formatted, not two.
            exclusive = timing.exclusive_ns
            own = seconds if exclusive == inclusive else repr(exclusive / 1e9)
            out.append(
                f"{prefix}{head}calls={timing.calls}i,inclusive_seconds={seconds},"
                f"exclusive_seconds={own}{gpu} {end}\n"
            )
        return "".join(out)
