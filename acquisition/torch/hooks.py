"""Module hooks of the training-side tracer: the hot path.

Source: torch's global module hooks (``torch.nn.modules.module.register_module_forward_pre_hook``
and ``register_module_forward_hook(..., always_call=True)``) and, for backward, pre- and
post-hooks on the autograd node that produced a leaf module's output
(``grad_fn.register_prehook`` / ``grad_fn.register_hook``).

Each hook body does one ``time.perf_counter_ns()`` and one ``list.append`` of a
``(module, t_ns, kind)`` tuple into the session's :class:`EventLog`; names, nesting and sums are
worked out later by :mod:`acquisition.torch.steps`, once per step. On CUDA the hooks also
record a ``torch.cuda.Event`` (a fourth tuple item) so GPU execution time can be resolved off the
hot path: the hooks fire when kernels are *launched*, not when they run. The backward hooks
run wherever autograd runs the node: the session switches autograd's device threads off on the
training thread for the steps that have module hooks, so on CUDA they run on the training thread
too, never as Python callbacks on autograd's device thread.

Why a list and not a preallocated ring: an indexed store into a preallocated ring measured
~0.5 µs per module call faster (``bench/bench_hooks.py``; some of that is the leaf check the real
post-hook does), but a ring overwrites unread events whenever the reader lags by a lap, and a
list never does; the reader drains it in place (slice + ``del``, each atomic under the GIL)
at every step boundary (or after 50 ms without one), so it stays small.
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
    "stream_recorder",
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
"""``(id(module) or payload, perf_counter_ns, kind)`` or, on CUDA, ``(..., cuda_event)``.

A module is recorded by its ``id()``: a tuple of ints is one the garbage collector stops
tracking, so the events of a step (tens of thousands in a large model) are never promoted to
the old generations, whose full collections would scan every object of the process."""


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


def _make_cpu_hooks(
    append: Callable[[Event], None], leaves: dict[Any, Any]
) -> tuple[Callable[..., None], Callable[..., None], Callable[..., Any]]:
    from functools import partial
    from time import perf_counter_ns

    # Default arguments turn global look-ups into fast locals: this is the hot path.
    def bwd_pre(key: int, grad_output: Any, _a: Any = append, _t: Any = perf_counter_ns) -> None:
        _a((key, _t(), 2))

    def bwd_post(
        key: int, grad_input: Any, grad_output: Any, _a: Any = append, _t: Any = perf_counter_ns
    ) -> None:
        _a((key, _t(), 3))

    def fwd_pre(
        module: Any, args: Any, _a: Any = append, _t: Any = perf_counter_ns, _id: Any = id
    ) -> None:
        _a((_id(module), _t(), 0))

    def fwd_post(
        module: Any,
        args: Any,
        output: Any,
        _a: Any = append,
        _t: Any = perf_counter_ns,
        _leaves: Any = leaves,
        _id: Any = id,
    ) -> None:
        _a((_id(module), _t(), 1))
        node_hooks = _leaves.get(module)
        if node_hooks is not None:
            node = getattr(output, "grad_fn", None)  # None under no_grad and for non-tensors
            if node is not None:
                node.register_prehook(node_hooks[0])
                node.register_hook(node_hooks[1])

    def node_hooks(module: Any) -> tuple[Callable[..., None], Callable[..., None]]:
        return partial(bwd_pre, id(module)), partial(bwd_post, id(module))

    return fwd_pre, fwd_post, node_hooks


def stream_recorder(event_cls: Any) -> Callable[[Any], None]:
    """``record(event)`` on the current CUDA stream, at a third of ``Event.record()``'s cost.

    ``Event.record()`` builds the current stream's Python object on every call (≈ 5 of its 9 µs
    on an H200's host); this keeps that object and asks only for the stream's raw id (≈ 0.1 µs),
    fetching the object again when the id changed (``with torch.cuda.stream(s):``). Events of
    another class (a stand-in) are recorded by their own ``record()``."""
    import torch

    base = getattr(torch._C, "_CudaEventBase", None)
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if base is None or raw_stream is None or not issubclass(event_cls, base):
        return lambda event: event.record()
    base_record = base.record
    current_device, current_stream = torch.cuda.current_device, torch.cuda.current_stream
    cached: list[Any] = [None, None]  # the stream object, its raw id

    def record(event: Any) -> None:
        if raw_stream(current_device()) != cached[1]:
            stream = current_stream()
            cached[0], cached[1] = stream, stream.cuda_stream
        base_record(event, cached[0])

    return record


def _make_cuda_hooks(
    append: Callable[[Event], None], leaves: dict[Any, Any], pool: list[Any]
) -> tuple[Callable[..., None], Callable[..., None], Callable[..., Any]]:
    from functools import partial
    from time import perf_counter_ns

    import torch

    event_cls: Any = torch.cuda.Event
    record = stream_recorder(event_cls)
    take = pool.pop

    def _mark(module: Any, kind: int) -> None:
        try:
            ev = take()  # an event already read, recorded again: no construction
        except IndexError:
            ev = event_cls(enable_timing=True)
        t = perf_counter_ns()
        record(ev)  # on the current stream; read by the aggregator once the step has run
        append((id(module), t, kind, ev))

    def fwd_pre(module: Any, args: Any) -> None:
        _mark(module, 0)

    def bwd_pre(module: Any, grad_output: Any) -> None:
        _mark(module, 2)

    def bwd_post(module: Any, grad_input: Any, grad_output: Any) -> None:
        _mark(module, 3)

    def fwd_post(module: Any, args: Any, output: Any) -> None:
        _mark(module, 1)
        node_hooks = leaves.get(module)
        if node_hooks is not None:
            node = getattr(output, "grad_fn", None)
            if node is not None:
                node.register_prehook(node_hooks[0])
                node.register_hook(node_hooks[1])

    def node_hooks(module: Any) -> tuple[Callable[..., None], Callable[..., None]]:
        return partial(bwd_pre, module), partial(bwd_post, module)

    return fwd_pre, fwd_post, node_hooks


class ModuleHooks:
    """The hooks one session adds, and their removal.

    Forward hooks are global (every ``nn.Module`` call in the process; the aggregator ignores
    modules outside the instrumented model). The forward post-hook is registered without kwargs
    and with ``always_call=True``: torch then calls it with ``output=None`` when ``forward``
    raises, so module exits are recorded on exceptions too (with kwargs it would be re-called
    with the wrong arity and the exit lost).

    Backward is timed without module backward hooks: torch's full backward hooks wrap a module's
    inputs and outputs in a ``BackwardHookFunction``, which makes any in-place op on them raise
    (``ReLU(inplace=True)``, ``out += x``), fires at once for modules whose inputs need no grad,
    and cost ~3 % of a ResNet-18 step on CPU. Instead, when a *leaf* module in
    ``backward_leaves`` returns a tensor with a ``grad_fn``, the forward post-hook puts a pre-hook
    and a post-hook on that autograd node: they fire when the node's backward starts and ends,
    which for the usual single-op leaves (linear, convolution, norm, activation, pooling) is the
    module's whole backward. The node is freed with the graph after ``backward()``, and the hooks
    with it; in-place ops later on the output do not matter (they add a node, this one still
    runs).
    """

    def __init__(self, log: EventLog, *, cuda: bool = False) -> None:
        self._lock = threading.Lock()
        self.backward_leaves: dict[Any, Any] = {}
        """Leaf module → its two node hooks, made once; the post-hook reads this on every call."""
        self.event_pool: list[Any] = []
        """CUDA events whose reading is done, for the hooks to record again (appended by the
        aggregator; ``list.append`` and ``list.pop`` are atomic)."""
        if cuda:
            hooks = _make_cuda_hooks(log.append, self.backward_leaves, self.event_pool)
        else:
            hooks = _make_cpu_hooks(log.append, self.backward_leaves)
        self.fwd_pre, self.fwd_post, self._node_hooks = hooks
        self._forward: list[RemovableHandle] = []

    @property
    def forward_installed(self) -> bool:
        return bool(self._forward)

    def set_backward(self, modules: Iterable[nn.Module]) -> None:
        """Time the backward of these leaf modules (replaces the previous set)."""
        fresh = {module: self._node_hooks(module) for module in modules}
        with self._lock:
            for module in [m for m in self.backward_leaves if m not in fresh]:
                del self.backward_leaves[module]
            self.backward_leaves.update(fresh)

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

    def remove_all(self) -> None:
        """Remove the global hooks; node hooks already placed die with their autograd graph."""
        self.remove_forward()
        self.set_backward(())
