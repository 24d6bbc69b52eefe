"""Where the training thread's time goes in ``instrument()``'s default mode, part by part.

One session in its default mode; each part of the training thread's work is timed with the
thread's own CPU clock (``time.thread_time_ns``), step by step:

- hooks: a detailed step's forward, backward and optimizer step minus the median of the other
  steps' (the module hooks and the events they record);
- transitions: putting the module hooks in before a detailed step and taking them out after
  it (global forward hooks, autograd's device threads);
- processing: aggregating the steps the GPU has finished (the CUDA event pairs' reads
  included) and formatting their lines, at later step boundaries;
- boundary: the rest of every step boundary (the boundary event, ``query()``).

On a CPU machine the CUDA path runs against :class:`StandInEvent` (the ``--stand-in`` mode of
``bench/bench_cuda_hooks.py``): events that cost almost nothing, reached by the "GPU" a fixed
delay after they are recorded; the counts of records and ``elapsed_time`` reads it reports let
a GPU's per-call costs be added on top. On a GPU the same function runs with real events
(``bench/bench_gpu.py``, section 1).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

import acquisition.torch.cuda as gpu_timeline
from acquisition.torch import instrument
from acquisition.torch import launch as launching

__all__ = ["Parts", "StandInEvent", "measure_parts", "print_parts", "stand_in_gpu"]


class StandInEvent:
    """A ``torch.cuda.Event`` stand-in: the GPU reaches it ``delay_ns`` after its record."""

    delay_ns = 0
    records = 0
    reads = 0

    __slots__ = ("at",)

    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        self.at: int | None = None

    def record(self, stream: Any = None) -> None:
        StandInEvent.records += 1
        self.at = time.perf_counter_ns() + StandInEvent.delay_ns

    def query(self) -> bool:
        return self.at is not None and time.perf_counter_ns() >= self.at

    def synchronize(self) -> None:
        while not self.query():
            time.sleep(0.0005)

    def elapsed_time(self, end: StandInEvent) -> float:
        StandInEvent.reads += 1
        if self.at is None or end.at is None or not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return (end.at - self.at) / 1e6


def _synchronize() -> None:
    time.sleep(StandInEvent.delay_ns / 1e9)


@contextmanager
def stand_in_gpu(delay_ns: int) -> Iterator[None]:
    """nrg's CUDA path on the CPU: the model counts as on CUDA device 0, events are stand-ins."""
    saved = (torch.cuda.Event, torch.cuda.synchronize, gpu_timeline.cuda_devices)
    uuid = launching.cuda_uuid
    StandInEvent.delay_ns = delay_ns
    torch.cuda.Event = StandInEvent  # type: ignore[assignment,misc]
    torch.cuda.synchronize = _synchronize  # type: ignore[assignment]
    gpu_timeline.cuda_devices = lambda params: {0}
    launching.cuda_uuid = lambda model, cuda=None: ""
    try:
        yield
    finally:
        torch.cuda.Event, torch.cuda.synchronize, gpu_timeline.cuda_devices = saved  # type: ignore[assignment,misc]
        launching.cuda_uuid = uuid


class Parts:
    """Thread CPU ns of each part, per step of the training thread."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self.steps: list[dict[str, int]] = []
        self.now: dict[str, int] = {}

    def wrap(self, owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not self.thread:
                return fn(*args, **kwargs)
            began = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.now[label] = self.now.get(label, 0) + time.thread_time_ns() - began

        setattr(owner, name, timed)

    def end_step(self, total_ns: int) -> None:
        self.now["total"] = total_ns
        self.steps.append(self.now)
        self.now = {}


def _train_step(model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def measure_parts(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, warmup: int, **kwargs: Any
) -> dict[str, float]:
    """Run ``steps`` steps of a default session (after ``warmup``) and return µs per part."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    parts = Parts()
    with tempfile.TemporaryDirectory(prefix="nrg-bench-parts-") as tmp:
        session = instrument(
            model,
            example_inputs=(x,),
            graph=False,
            run="bench-parts",
            socket_path=Path(tmp) / "absent.sock",
            fallback_dir=tmp,
            **kwargs,
        )
        session.start()
        every = session.module_detail_every
        assert session._hooks is not None and session._step_lines is not None
        parts.wrap(session, "_boundary", "boundary")
        parts.wrap(session, "_process", "processing")
        parts.wrap(session._hooks, "install_forward", "transitions")
        parts.wrap(session._hooks, "remove_forward", "transitions")
        parts.wrap(session, "_device_threads", "transitions")
        parts.wrap(session._aggregator, "feed", "aggregate")
        parts.wrap(session._step_lines, "lines", "lines")
        if hasattr(session._step_lines, "take"):  # lines formatted in slices
            parts.wrap(session._step_lines, "take", "lines")
        try:
            for i in range(warmup + steps):
                if i == warmup:
                    parts.steps.clear()
                    records, reads = StandInEvent.records, StandInEvent.reads
                began = time.thread_time_ns()
                _train_step(model, opt, x, y)
                parts.end_step(time.thread_time_ns() - began)
        finally:
            session.close()
    return _summary(
        parts.steps, every, warmup, StandInEvent.records - records, StandInEvent.reads - reads
    )


def _summary(
    rows: list[dict[str, int]], every: int, first: int, records: int, reads: int
) -> dict[str, float]:
    """µs per part; rows are steps ``first``, ``first + 1``, ...; step k is detailed when
    ``k % every == 0``."""

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    body = [r["total"] - r.get("boundary", 0) for r in rows]
    detailed = [b for i, b in enumerate(body) if (first + i) % every == 0]
    others = [b for i, b in enumerate(body) if (first + i) % every != 0] or detailed
    n = len(rows)
    cycles = n / every

    def per_cycle(label: str) -> float:
        return sum(r.get(label, 0) for r in rows) / cycles / 1e3

    rest = [r.get("boundary", 0) - r.get("processing", 0) - r.get("transitions", 0) for r in rows]
    out = {
        "every": float(every),
        "step": med([float(b) for b in others]) / 1e3,
        "hooks": (med([float(b) for b in detailed]) - med([float(b) for b in others])) / 1e3,
        "transitions": per_cycle("transitions"),
        "processing": per_cycle("processing"),
        "processing, most at one boundary": med(
            [
                max(r.get("processing", 0) for r in rows[i : i + every]) / 1e3
                for i in range(0, n - every + 1, every)
            ]
        ),
        "aggregate": per_cycle("aggregate"),
        "lines": per_cycle("lines"),
        "boundaries processing": sum(1 for r in rows if r.get("processing")) / cycles,
        "boundary": med([float(v) for v in rest]) / 1e3,
        "records": records / cycles,
        "elapsed_time reads": reads / cycles,
    }
    out["default, per step"] = (
        out["hooks"] + out["transitions"] + out["processing"]
    ) / every + out["boundary"]
    return out


def print_parts(figures: dict[str, float], label: str = "") -> None:
    every = int(figures["every"])
    print(f"\n== training thread's CPU per part, default mode{label} (detail every {every}) ==")
    print(f"a step without detail (median)           {figures['step']:10.1f} µs")
    rows: list[tuple[str, str]] = [
        ("hooks", "a) hooks of a detailed step"),
        ("transitions", "b) hooks in and out, per detailed step"),
        ("processing", "c) processing a detailed step, in all"),
        ("processing, most at one boundary", "   the most at one boundary of a cycle"),
        ("aggregate", "   of it: aggregation, event reads included"),
        ("lines", "   of it: line formatting"),
        ("boundary", "d) a step boundary, the rest (median)"),
        ("default, per step", "default: (a + b + c) / every + d"),
    ]
    for key, name in rows:
        print(f"{name:40} {figures[key]:10.1f} µs")
    if not figures["records"]:  # real CUDA events (or none): not counted
        return
    print(
        f"per detailed step: {figures['records']:.0f} event records, "
        f"{figures['elapsed_time reads']:.0f} elapsed_time reads, processed at "
        f"{figures['boundaries processing']:.1f} boundaries"
    )


def _detailed_step_events(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[Any]:
    """The hook events of one detailed step (stand-in CUDA events, reached at once)."""
    from acquisition.torch.hooks import STEP, EventLog, ModuleHooks

    log = EventLog()
    hooks = ModuleHooks(log, cuda=True)
    hooks.set_backward(m for m in model.modules() if next(m.children(), None) is None)
    hooks.install_forward()
    switch = gpu_timeline.backward_thread_switch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        if switch is not None:
            switch(False)
        _train_step(model, opt, x, y)
    finally:
        if switch is not None:
            switch(True)
        hooks.remove_all()
    boundary = StandInEvent()
    boundary.record()
    log.append((None, time.perf_counter_ns(), STEP, boundary, None))
    return log.drain()


def processing_slices(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, every: int, rounds: int
) -> dict[str, float]:
    """A detailed step's processing, all at one boundary against in slices (``spread=every``),
    interleaved in one process: µs in all and the most at one boundary (medians)."""
    from acquisition.torch.steps import StepAggregator, StepLines

    events = _detailed_step_events(model, x, y)
    names = {id(m): n for n, m in model.named_modules()}
    rows: dict[str | None, list[tuple[int, int]]] = {None: [], "sliced": []}
    lines = StepLines({"run": "bench"}, 0)  # its series' prefixes made once, as in a session
    for r in range(rounds + 1):
        for mode in (None, "sliced") if r % 2 else ("sliced", None):
            agg = StepAggregator(names)
            agg.gpu_time = lambda event, anchor: int(event.at)
            spread = every if mode else None
            costs, feed, done = [], events, 0
            while done == 0 or lines.queued:
                began = time.thread_time_ns()
                records = agg.feed(feed, 1 - done, spread) if done == 0 else []
                lines.queue(records)
                lines.take(spread)
                costs.append(time.thread_time_ns() - began)
                feed, done = [], done + len(records)
            if r:  # round 0 warms up
                rows[mode].append((sum(costs), max(costs)))
    out: dict[str, float] = {"events": float(len(events))}
    for mode, label in ((None, "at one boundary"), ("sliced", "in slices")):
        out[f"{label}, in all"] = statistics.median(c[0] for c in rows[mode]) / 1e3
        out[f"{label}, most at one"] = statistics.median(c[1] for c in rows[mode]) / 1e3
    return out


def first_step(
    make: Any, x: torch.Tensor, y: torch.Tensor, rounds: int, **kwargs: Any
) -> dict[str, float]:
    """The first step of a fresh session without example inputs against a plain one (fresh
    models after one warm step each, interleaved): the training thread's CPU ms and wall ms."""
    rows: dict[str, list[tuple[float, float]]] = {"plain": [], "session": []}
    with tempfile.TemporaryDirectory(prefix="nrg-bench-first-") as tmp:
        for r in range(rounds):
            for mode in list(rows)[:: 1 if r % 2 else -1]:
                model = make()
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                _train_step(model, opt, x, y)
                session = None
                if mode == "session":
                    session = instrument(
                        model,
                        run="first",
                        socket_path=Path(tmp) / "absent.sock",
                        fallback_dir=tmp,
                        graph_dir=tmp,
                        **kwargs,
                    ).start()
                cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
                _train_step(model, opt, x, y)
                cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
                if session is not None:
                    session.close()
                rows[mode].append((cpu / 1e6, wall / 1e6))
    out = {}
    for i, unit in enumerate(("CPU", "wall")):
        plain = statistics.median(row[i] for row in rows["plain"])
        out[f"first step, plain, {unit} ms"] = plain
        out[f"added, {unit} ms"] = statistics.median(row[i] for row in rows["session"]) - plain
    return out
