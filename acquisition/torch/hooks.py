"""Module hooks of the training-side tracer: the hot path.

Source: torch's global module hooks (``torch.nn.modules.module.register_module_forward_pre_hook``
and ``register_module_forward_hook(..., always_call=True)``) and, where safe, per-module full
backward hooks (``Module.register_full_backward_pre_hook`` / ``register_full_backward_hook``).

Each hook body does one ``time.perf_counter_ns()`` and one ``list.append`` of a
``(module, t_ns, kind)`` tuple into the session's :class:`EventLog`; names, nesting and sums are
worked out later by :mod:`acquisition.torch.steps` on a background thread. On CUDA the hooks also
record a ``torch.cuda.Event`` (a fourth tuple item) so GPU execution time can be resolved off the
hot path: the hooks fire when kernels are *launched*, not when they run.

Why a list and not a preallocated ring: in CPython a bound ``list.append`` measured the same per
call as an indexed store into a preallocated ring (see ``bench/bench_hooks.py``), and a list never
overwrites unread events when the reader lags; the reader drains it in place (slice + ``del``,
each atomic under the GIL) every few milliseconds, so it stays small.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = [
    "BWD_POST",
    "BWD_PRE",
    "EPOCH",
    "FWD_POST",
    "FWD_PRE",
    "RESUME",
    "RETIME",
    "STEP",
    "Event",
    "EventLog",
    "ModuleHooks",
]

FWD_PRE = 0
FWD_POST = 1
BWD_PRE = 2
BWD_POST = 3
STEP = 4
"""A step boundary; the first item is None."""
EPOCH = 5
"""An epoch change; the first item is the new epoch number (int)."""
RETIME = 6
"""The module's open call (and, if nothing finished yet, the step) restarts now: the session
spent the time since its enter on one-off analysis (graph export, FLOP count)."""
RESUME = 7
"""Recording resumes after a pause; a step with no module call yet starts now."""

Event = tuple[Any, ...]
"""``(module_or_payload, perf_counter_ns, kind)`` or, on CUDA, ``(..., cuda_event)``."""


class EventLog:
    """Append-only event list written by hooks on any thread, drained by one reader."""

    __slots__ = ("append", "events")

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.append: Callable[[Event], None] = self.events.append

    def drain(self) -> list[Event]:
        """Remove and return every event appended so far, oldest first.

        Writers only ever append, so the first ``n`` items are stable while we copy and delete
        them (each of the two list operations holds the GIL throughout).
        """
        events = self.events
        n = len(events)
        if not n:
            return []
        chunk = events[:n]
        del events[:n]
        return chunk


def _make_cpu_hooks(append: Callable[[Event], None]) -> tuple[Callable[..., None], ...]:
    from time import perf_counter_ns

    # Default arguments turn global look-ups into fast locals: this is the hot path.
    def fwd_pre(module: Any, args: Any, _a: Any = append, _t: Any = perf_counter_ns) -> None:
        _a((module, _t(), 0))

    def fwd_post(
        module: Any, args: Any, output: Any, _a: Any = append, _t: Any = perf_counter_ns
    ) -> None:
        _a((module, _t(), 1))

    def bwd_pre(module: Any, grad_output: Any, _a: Any = append, _t: Any = perf_counter_ns) -> None:
        _a((module, _t(), 2))

    def bwd_post(
        module: Any, grad_input: Any, grad_output: Any, _a: Any = append, _t: Any = perf_counter_ns
    ) -> None:
        _a((module, _t(), 3))

    return fwd_pre, fwd_post, bwd_pre, bwd_post


def _make_cuda_hooks(append: Callable[[Event], None]) -> tuple[Callable[..., None], ...]:
    from time import perf_counter_ns

    import torch

    event_cls: Any = torch.cuda.Event

    def _mark(module: Any, kind: int) -> None:
        ev = event_cls(enable_timing=True)
        ev.record()
        append((module, perf_counter_ns(), kind, ev))

    def fwd_pre(module: Any, args: Any) -> None:
        _mark(module, 0)

    def fwd_post(module: Any, args: Any, output: Any) -> None:
        _mark(module, 1)

    def bwd_pre(module: Any, grad_output: Any) -> None:
        _mark(module, 2)

    def bwd_post(module: Any, grad_input: Any, grad_output: Any) -> None:
        _mark(module, 3)

    return fwd_pre, fwd_post, bwd_pre, bwd_post


class ModuleHooks:
    """The hooks one session adds, and their removal.

    Forward hooks are global (every ``nn.Module`` call in the process; the aggregator ignores
    modules outside the instrumented model). The forward post-hook is registered without kwargs
    and with ``always_call=True``: torch then calls it with ``output=None`` when ``forward``
    raises, so module exits are recorded on exceptions too (with kwargs it would be re-called
    with the wrong arity and the exit lost). Backward hooks are per module, on the modules that
    :func:`acquisition.torch.graph.backward_safety` cleared.
    """

    def __init__(self, log: EventLog, *, cuda: bool = False) -> None:
        self._lock = threading.Lock()
        make = _make_cuda_hooks if cuda else _make_cpu_hooks
        self.fwd_pre, self.fwd_post, self.bwd_pre, self.bwd_post = make(log.append)
        self._forward: list[RemovableHandle] = []
        self._backward: list[RemovableHandle] = []
        self.backward_modules: list[nn.Module] = []

    @property
    def forward_installed(self) -> bool:
        return bool(self._forward)

    def install_forward(self) -> None:
        from torch.nn.modules import module as torch_module

        with self._lock:
            if self._forward:
                return
            self._forward = [
                torch_module.register_module_forward_pre_hook(self.fwd_pre),
                torch_module.register_module_forward_hook(self.fwd_post, always_call=True),
            ]

    def remove_forward(self) -> None:
        with self._lock:
            handles, self._forward = self._forward, []
        for handle in handles:
            handle.remove()

    def install_backward(self, modules: Iterable[nn.Module]) -> None:
        with self._lock:
            for module in modules:
                self.backward_modules.append(module)
                self._backward.append(module.register_full_backward_pre_hook(self.bwd_pre))
                self._backward.append(module.register_full_backward_hook(self.bwd_post))

    def pause(self) -> None:
        """Remove every hook but remember the backward set, for :meth:`resume`."""
        self.remove_forward()
        with self._lock:
            handles, self._backward = self._backward, []
        for handle in handles:
            handle.remove()

    def resume(self) -> None:
        with self._lock:
            modules, self.backward_modules = self.backward_modules, []
        self.install_backward(modules)
        self.install_forward()

    def remove_all(self) -> None:
        self.remove_forward()
        with self._lock:
            handles, self._backward = self._backward, []
            self.backward_modules = []
        for handle in handles:
            handle.remove()
