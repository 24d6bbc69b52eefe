"""A stand-in GPU at the ``torch.cuda.Event`` seam, for the CUDA path on a CPU machine.

It behaves as CUDA does where nrg depends on it: an event recorded at host time ``t`` is reached
by the GPU ``delay_ns`` later (the launch queue), except the first one after a
``synchronize()``, which runs at once (the queue is empty); ``query()`` says whether the GPU has
reached it; ``elapsed_time()`` of an event not yet reached raises as CUDA does ("device not
ready"); ``synchronize()`` waits until the GPU has caught up. Every call is logged with the thread
that made it.

Host times are exact: :func:`install` wraps ``time.perf_counter_ns`` so that the stand-in stamps
an event with the last host time the recording thread read (the session reads the clock just
before it records), making every GPU time a hand-computable ``host time + delay``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = ["Call", "StandInGpu", "install"]

NOT_READY = "CUDA error: device not ready"


@dataclass(frozen=True)
class Call:
    what: str
    thread: str


@dataclass
class StandInGpu:
    delay_ns: int
    drift: float = 0.0
    """The GPU clock runs this much faster than the host's (1e-4: 100 ppm)."""
    calls: list[Call] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)
    not_ready: int = 0
    _drained: bool = True
    _last: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def log(self, what: str) -> None:
        with self._lock:
            self.calls.append(Call(what, threading.current_thread().name))

    def host_now(self) -> int:
        """The last host time this thread read (or a fresh one)."""
        last = getattr(self._last, "value", None)
        return int(last) if last is not None else time.perf_counter_ns()

    def gpu_now(self) -> int:
        """The GPU's clock now."""
        host = time.perf_counter_ns()
        return host + round(host * self.drift)

    def synchronize(self) -> None:
        self.log("synchronize")
        latest = max((e.gpu_ns for e in self.records if e.gpu_ns is not None), default=0)
        while self.gpu_now() < latest:
            time.sleep(0.001)
        self._drained = True

    def record(self, event: Any) -> int:
        self.log("record")
        delay = 0 if self._drained else self.delay_ns
        self._drained = False
        with self._lock:
            self.records.append(event)
        host = self.host_now()
        return host + round(host * self.drift) + delay

    def event_class(self) -> type:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False, **_: Any) -> None:
                gpu.log("construct")
                self.enable_timing = enable_timing
                self.gpu_ns: int | None = None
                self.thread = ""

            def record(self, stream: Any = None) -> None:
                self.thread = threading.current_thread().name
                self.gpu_ns = gpu.record(self)

            def query(self) -> bool:
                gpu.log("query")
                return self.gpu_ns is not None and gpu.gpu_now() >= self.gpu_ns

            def synchronize(self) -> None:
                gpu.log("event.synchronize")
                assert self.gpu_ns is not None
                while gpu.gpu_now() < self.gpu_ns:
                    time.sleep(0.001)

            def elapsed_time(self, end: Any) -> float:
                gpu.log("elapsed_time")
                now = gpu.gpu_now()
                if self.gpu_ns is None or end.gpu_ns is None or now < max(self.gpu_ns, end.gpu_ns):
                    gpu.not_ready += 1
                    raise RuntimeError(NOT_READY)
                return (end.gpu_ns - self.gpu_ns) / 1e6

        return Event

    def threads(self, what: str) -> set[str]:
        return {c.thread for c in self.calls if c.what == what}


def install(monkeypatch: pytest.MonkeyPatch, delay_ns: int, drift: float = 0.0) -> StandInGpu:
    """Put a stand-in GPU behind ``torch.cuda`` and make nrg see the model on CUDA device 0."""
    import torch

    import acquisition.torch.cuda as gpu_timeline

    gpu = StandInGpu(delay_ns, drift)
    real = time.perf_counter_ns

    def perf_counter_ns() -> int:
        value = real()
        gpu._last.value = value
        return value

    monkeypatch.setattr(time, "perf_counter_ns", perf_counter_ns)
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    monkeypatch.setattr(gpu_timeline, "cuda_devices", lambda params: {0})
    return gpu
