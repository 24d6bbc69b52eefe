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

Bounded work per call: with ``max_steps`` (the steps the GPU has finished) and ``spread``, one
:meth:`StepAggregator.feed` aggregates at most ``max(PROCESS_SLICE, ⌈ready / spread⌉)`` of the
``ready`` events, so a detailed step's events are worked through over the boundaries that follow
it instead of at one; its CUDA event pairs are read as its calls are aggregated, one
``elapsed_time`` per call (a parent's exclusive GPU time subtracts its children's readings).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    "PROCESS_SLICE",
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

PROCESS_SLICE = 128
"""Events one sliced :meth:`StepAggregator.feed` aggregates at least (if that many are ready)."""


@dataclass(slots=True)
class ModuleTiming:
    """What one module did in one phase of one step."""

    calls: int
    inclusive_ns: int
    exclusive_ns: int
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


@dataclass(slots=True)
class _GpuSpan:
    """One call's CUDA event pair; ``ms`` (inclusive) once read."""

    key: tuple[Any, int]
    start: Any
    end: Any
    children: list[_GpuSpan] | None
    ms: float | None = None


# A frame is a list, not an object: this loop runs for every event and allocation dominates.
# [module, start_ns, child_inclusive_ns, start_cuda_event, child_gpu_spans]
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
        """Calls whose CUDA events are read when their step ends (fed before it was reached)."""
        self._gpu_ms: dict[tuple[Any, int], list[float]] = {}
        """(module, exit kind) -> [GPU ms inclusive, exclusive] read so far in this step."""
        self._read_now = False
        self.recycle: Callable[[Any], None] | None = None
        """Takes back a module call's CUDA event once read (the hooks' event pool)."""
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

    def feed(
        self, events: Sequence[Event], max_steps: int | None = None, spread: int | None = None
    ) -> list[StepRecord]:
        """Consume events; return the steps they completed.

        Module enters and exits (nearly every event) are handled inline; step, epoch and timing
        marks go to :meth:`_mark`. With ``max_steps``, the events after that many step
        boundaries wait in the backlog (on CUDA: the steps the GPU is still running), and the
        CUDA events before them are read as their calls end; with ``spread`` too, only a slice
        of them is aggregated now (see the module docstring), the rest waits.
        """
        done: list[StepRecord] = []
        events = self._pending(events, max_steps, spread)
        self._read_now = max_steps is not None
        names = self.names
        stacks = self._stacks
        stats = self._stats
        if self._start_ns is None and events:
            self._start_ns = events[0][1]  # the very first event starts the first step
        for i, ev in enumerate(events):
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
                self._backlog = [*events[i:], *self._backlog]
                break
        return done

    def _pending(
        self, events: Sequence[Event], max_steps: int | None, spread: int | None = None
    ) -> Sequence[Event]:
        """The backlog then ``events``, cut after ``max_steps`` boundaries, then to a slice."""
        if self._backlog:
            events = [*self._backlog, *events]
            self._backlog = []
        if max_steps is not None:
            events = self._through_steps(events, max_steps)
            if spread is not None:
                n = max(PROCESS_SLICE, -(-len(events) // spread))
                if len(events) > n:
                    self._backlog = [*events[n:], *self._backlog]
                    events = events[:n]
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
        """The CUDA event pair of a finished call: read now (its step has run on the GPU) or
        when its step ends; given to its parent's frame, whose exclusive time subtracts it."""
        span = _GpuSpan(key, frame[_EVENT], end, frame[_CHILD_EVENTS])
        if stack:
            if stack[-1][_CHILD_EVENTS] is None:
                stack[-1][_CHILD_EVENTS] = []
            stack[-1][_CHILD_EVENTS].append(span)
        if self._read_now:
            self._read(span)
        else:
            self._gpu.append(span)

    def _read(self, span: _GpuSpan) -> None:
        """One ``elapsed_time`` for the call; never waits (a call not run yet, on another
        stream, or with a child not read, counts in :attr:`gpu_unresolved`)."""
        children = 0.0
        for child in span.children or ():
            if child.ms is None:
                self.gpu_unresolved += 1
                return
            children += child.ms
        try:
            inclusive = float(span.start.elapsed_time(span.end))
        except RuntimeError:  # CUDA's "device not ready"
            self.gpu_unresolved += 1
            return
        span.ms = inclusive
        recycle = self.recycle
        if recycle is not None:
            if span.start is not self._gpu_begin:  # the step's start: read when it ends
                recycle(span.start)
            recycle(span.end)
        sums = self._gpu_ms.get(span.key)
        if sums is None:
            sums = self._gpu_ms[span.key] = [0.0, 0.0]
        sums[0] += inclusive
        sums[1] += max(0.0, inclusive - children)

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
        for span in self._gpu:  # in exit order: children before their parents
            self._read(span)
        self._gpu = []
        for key, (gpu_inclusive, gpu_exclusive) in self._gpu_ms.items():
            found = by_key.get(key)
            if found is not None:
                found.gpu_inclusive_ms, found.gpu_exclusive_ms = gpu_inclusive, gpu_exclusive
        self._gpu_ms.clear()
        gpu_start, gpu_end = self._gpu_interval(mark)
        self._stats.clear()  # in place: feed() holds a reference to it
        self.step += 1
        self._start_ns = end_ns
        if samples is None:
            samples = self.samples_per_step
        record = StepRecord(self.step - 1, self.epoch, start, end_ns, modules, samples)
        record.gpu_start_ns, record.gpu_end_ns = gpu_start, gpu_end
        return record


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
        self._todo: deque[list[Any]] = deque()
        """[record, its (module, phase) items not formatted yet, step line written]"""

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
        """The step's line and its modules' lines."""
        return self._step_line(record) + self._module_lines(record, record.modules.items())

    def queue(self, records: Sequence[StepRecord]) -> None:
        """Records whose lines :meth:`take` formats, in order."""
        self._todo.extend([r, list(r.modules.items()), False] for r in records)

    @property
    def queued(self) -> bool:
        return bool(self._todo)

    def take(self, spread: int | None = None) -> str:
        """Lines of the queued records, in order: all, or with ``spread`` a slice of at most
        ``max(PROCESS_SLICE, ⌈queued lines / spread⌉)`` lines (the rest stays queued)."""
        todo = self._todo
        budget = sum(len(entry[1]) + (not entry[2]) for entry in todo)
        if spread is not None:
            budget = min(budget, max(PROCESS_SLICE, -(-budget // spread)))
        out = []
        while todo and budget > 0:
            entry = todo[0]
            record, items = entry[0], entry[1]
            if not entry[2]:
                entry[2] = True
                out.append(self._step_line(record))
                budget -= 1
            n = min(budget, len(items))
            out.append(self._module_lines(record, items[:n]))
            del items[:n]
            budget -= n
            if not items:
                todo.popleft()
        return "".join(out)

    def _step_line(self, record: StepRecord) -> str:
        start = record.start_ns + self._offset_ns
        end = record.end_ns + self._offset_ns
        epoch = record.epoch
        step_prefix = self._prefixes.get((epoch, "", "")) or self._series(epoch, "", "")
        samples = "" if record.samples is None else f"samples={record.samples}i,"
        on_gpu = ""
        if record.gpu_start_ns is not None and record.gpu_end_ns is not None:
            on_gpu = (
                f",gpu_start_time_ns={record.gpu_start_ns}i,gpu_end_time_ns={record.gpu_end_ns}i"
            )
        return (
            f"{step_prefix} step={record.step}i,{samples}start_time_ns={start}i,"
            f"end_time_ns={end}i,duration_seconds={(end - start) / 1e9!r}{on_gpu} {end}\n"
        )

    def _module_lines(
        self, record: StepRecord, items: Iterable[tuple[tuple[str, str], ModuleTiming]]
    ) -> str:
        end = record.end_ns + self._offset_ns
        epoch = record.epoch
        prefixes = self._prefixes
        head = f" step={record.step}i,"
        out = []
        for (name, phase), timing in items:
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
