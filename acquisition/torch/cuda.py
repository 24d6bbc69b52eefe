"""Steps on the GPU's own timeline: one CUDA event per step boundary, mapped to host time.

The CPU runs ahead of the GPU by up to the depth of the launch queue, so the host time of a
step boundary (``optimizer.step()`` returning) is not when that step's kernels ran. On CUDA the
session records one ``torch.cuda.Event`` on the current stream at each step boundary; the GPU
reaches it once every kernel launched before it on that stream has run, so two adjacent
boundary events enclose exactly the step's kernels.

Event times are mapped to Unix-epoch ns through an *anchor*: right after
``torch.cuda.synchronize()`` the GPU is idle, so an event recorded then runs as soon as it is
launched, at the host time read just before ``record()`` (its error is the launch latency, a few
µs). ``anchor.elapsed_time(event)`` (ms, signed, about 0.5 µs resolution) then places any event
on the host clock. The two clocks drift apart (crystals differ by tens of ppm): the session
re-anchors at a step boundary every :data:`ANCHOR_EVERY_S` seconds, and the rate measured
between the last two anchors corrects the drift in between. A re-anchor waits once for the
queue to drain; the GPU then idles for one launch latency.

Threads: :meth:`GpuTimeline.anchor` and :meth:`GpuTimeline.mark` run on the training thread;
:meth:`GpuTimeline.host_ns` runs on the session's aggregator thread, only for events that
``query()`` has reported complete, so it never blocks.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = [
    "ANCHOR_EVERY_S",
    "Anchor",
    "GpuTimeline",
    "backward_thread_switch",
    "cuda_devices",
]

ANCHOR_EVERY_S = 30.0
"""Seconds between re-anchors: at 50 ppm of drift the rate correction leaves well under 1 ms."""


class Anchor(NamedTuple):
    """A CUDA event whose host time is known, and the GPU-to-host clock rate at that time."""

    event: Any
    host_ns: int
    rate: float


def cuda_devices(params: Iterable[Any]) -> set[int]:
    """CUDA device indices holding any of ``params`` (empty: the model is not on CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return set()
    return {int(p.device.index or 0) for p in params if p.is_cuda}


def backward_thread_switch() -> Any:
    """torch's switch for autograd's device threads (``torch._C._set_multithreading_enabled``,
    thread-local, in every torch since 2.0), or None where this torch lacks it."""
    import torch

    return getattr(torch._C, "_set_multithreading_enabled", None)


class GpuTimeline:
    """Boundary events and anchors of one session (see the module docstring)."""

    def __init__(self, offset_ns: int, *, anchor_every_s: float | None = None) -> None:
        import torch

        self._event_cls: Any = torch.cuda.Event
        self._synchronize: Any = torch.cuda.synchronize
        self.offset_ns = offset_ns
        """``time.time_ns() - time.perf_counter_ns()`` of the session."""
        every = ANCHOR_EVERY_S if anchor_every_s is None else anchor_every_s
        self.anchor_every_ns = int(every * 1e9)
        self.current: Anchor | None = None
        """The latest anchor (replaced whole, so a reader on another thread sees one anchor)."""
        self.anchors = 0
        self._anchored_perf = 0

    def synchronize(self) -> None:
        """Wait for every kernel queued so far (training thread only)."""
        self._synchronize()

    def anchor(self) -> Anchor:
        """Drain the queue and record an anchor event at a known host time."""
        self._synchronize()
        event = self._event_cls(enable_timing=True)
        perf = time.perf_counter_ns()
        event.record()
        host = perf + self.offset_ns
        rate = 1.0
        previous = self.current
        if previous is not None:
            event.synchronize()  # at once: the queue was empty
            gpu_ns = float(previous.event.elapsed_time(event)) * 1e6
            if gpu_ns > 0:
                rate = (host - previous.host_ns) / gpu_ns
        self.current = Anchor(event, host, rate)
        self.anchors += 1
        self._anchored_perf = perf
        return self.current

    def due(self, perf_ns: int) -> bool:
        """Whether the anchor is old enough to be renewed at this step boundary."""
        return perf_ns - self._anchored_perf >= self.anchor_every_ns

    def mark(self) -> tuple[Any, Anchor | None]:
        """Record one event on the current stream; with the anchor to map it by."""
        event = self._event_cls(enable_timing=True)
        event.record()
        return event, self.current

    def host_ns(self, event: Any, anchor: Anchor | None = None) -> int:
        """Unix-epoch ns at which the GPU reached ``event`` (which must have completed)."""
        if anchor is None:
            anchor = self.current
        if anchor is None:
            raise RuntimeError("GPU timeline not anchored")
        return anchor.host_ns + round(float(anchor.event.elapsed_time(event)) * 1e6 * anchor.rate)
