"""Exclusive CPU time of each part of a running agent, for ``bench_agent_gpu.py``: wrappers
around its collectors, runners, bus, processors, sinks and encoder, timed with
``time.thread_time_ns`` on the event loop's thread (and the NVML worker's job on its own)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from acquisition.agent import Agent
from collectors.nvml import NvmlCollector

__all__ = ["Parts", "instrument", "timer_cost_ns"]


@dataclass
class Parts:
    """Exclusive CPU ns of each part on the loop's thread (a stack of wrapped calls)."""

    cpu: Counter[str] = field(default_factory=Counter)
    stack: list[str] = field(default_factory=list)
    mark: int = 0
    worker: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    children: Counter[str] = field(default_factory=Counter)
    """Timed calls made inside each part (half of their timers' cost lands on it)."""
    selects: int = 0
    """Passes of the event loop (each waits for I/O or a timer)."""
    sleeps: int = 0
    """Of which with a timeout: the loop had nothing ready and slept (a wake-up)."""

    def _enter(self, label: str) -> None:
        self.calls[label] += 1
        now = time.thread_time_ns()
        if self.stack:
            self.cpu[self.stack[-1]] += now - self.mark
            self.children[self.stack[-1]] += 1
        self.stack.append(label)
        self.mark = now

    def _exit(self) -> None:
        now = time.thread_time_ns()
        self.cpu[self.stack.pop()] += now - self.mark
        self.mark = now

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._enter(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self._exit()

        return timed

    def wrap_async(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """An async function timed step by step (its suspensions are not counted)."""

        async def timed(*args: Any, **kwargs: Any) -> Any:
            return await _Steps(self, label, fn(*args, **kwargs))

        return timed

    def wrap_worker(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A call on another thread: its own thread's CPU."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.worker[label] += time.thread_time_ns() - t0

        return timed


def timer_cost_ns(n: int = 20_000) -> float:
    """CPU ns a timed call adds to a call (this machine, now): what each part's figure is
    corrected by, per call."""
    parts = Parts()

    def noop() -> None:
        pass

    timed = parts.wrap("x", noop)
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time_ns()
        for _ in range(n):
            timed()
        t1 = time.thread_time_ns()
        for _ in range(n):
            noop()
        best = min(best, ((t1 - t0) - (time.thread_time_ns() - t1)) / n)
    return best


class _Steps:
    def __init__(self, parts: Parts, label: str, coro: Any) -> None:
        self.parts, self.label, self.coro = parts, label, coro

    def __await__(self) -> Generator[Any, Any, Any]:
        value: Any = None
        error: BaseException | None = None
        while True:
            self.parts._enter(self.label)
            try:
                sent = self.coro.throw(error) if error is not None else self.coro.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                self.parts._exit()
            try:
                value, error = (yield sent), None
            except BaseException as exc:
                value, error = None, exc


def instrument(agent: Agent, parts: Parts, skip: object = None) -> None:
    """Wrap every part of a started agent (see ``bench_agent_gpu``'s docstring); the sink
    whose ``offer`` belongs to ``skip`` (the bench's own tap) is left alone."""
    for c in agent.collectors:
        inst, runner = c.instance, c.runner
        if hasattr(inst, "collect"):
            inst.collect = parts.wrap_async(f"{c.label}: collect", inst.collect)
        if isinstance(inst, NvmlCollector):
            inst._tick = parts.wrap_worker("nvml: worker job", inst._tick)
        if hasattr(runner, "_on_deadline"):
            runner._on_deadline = parts.wrap("runners: timer callback", runner._on_deadline)
            runner.after_tick = parts.wrap("end of tick (flush due? stats?)", runner.after_tick)
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    select = selector.select

    def counted_select(timeout: float | None = None) -> Any:
        parts.selects += 1
        parts.sleeps += timeout is None or timeout > 0
        return select(timeout)

    selector.select = counted_select
    bus = agent.bus
    bus._dispatch = parts.wrap("bus: dispatch", bus._dispatch)  # type: ignore[method-assign]
    for name, proc, _, _ in bus._processors:
        proc.process = parts.wrap(f"processor {name}", proc.process)
    names = {id(r.offer.__self__): r.name for r in agent.sinks}
    for i, offer in enumerate(bus._offers):
        owner = getattr(offer, "__self__", None)
        label = (
            f"sink queue {names[id(owner)]} (offer)"
            if id(owner) in names
            else f"{type(owner).__name__}.offer"
        )
        if getattr(offer, "__self__", None) is not skip:
            bus._offers[i] = parts.wrap(label, offer)
    for r in agent.sinks:
        sink = r.sink
        sink.write = parts.wrap_async(f"sink {r.name}: write", sink.write)
        encoder = getattr(sink, "encoder", None)
        if encoder is not None:
            encoder.encode_many = parts.wrap("line-protocol encoder", encoder.encode_many)
