"""The CUDA path on a CPU machine: real CPU torch, a stand-in GPU at the ``torch.cuda.Event``
seam (:mod:`tests.torch.cuda_standin`) lagging the host by a known queue delay."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import torch
from torch import nn

import acquisition.torch.cuda as gpu_timeline
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.torch import instrument
from acquisition.torch.hooks import STEP
from acquisition.torch.steps import StepAggregator
from tests.torch.conftest import Listener
from tests.torch.cuda_standin import StandInGpu, install

DELAY_NS = 20_000_000
STEPS = 6
FORWARD_CALLS = 4  # the root and its three children
BACKWARD_LEAVES = 3  # Linear, ReLU, Linear: one autograd node each
DETAILED = 2 * FORWARD_CALLS + 2 * BACKWARD_LEAVES + 1  # enter/exit events + the boundary


def train(
    gpu: StandInGpu, every: int = 2, pause_s: float = 0.0
) -> tuple[list[int], list[bool], bool]:
    """CUDA events recorded per step, autograd's multithreading before each backward, and
    after the session; ``pause_s`` after each step (data loading), in which the aggregator
    thread wakes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    per_step: list[int] = []
    threads: list[bool] = []
    with instrument(model, example_inputs=(x,), run="standin", module_detail_every=every):
        for _ in range(STEPS):
            before = len(gpu.records)
            opt.zero_grad()
            loss = model(x).square().mean()
            threads.append(torch.autograd.is_multithreading_enabled())
            loss.backward()
            opt.step()
            per_step.append(len(gpu.records) - before)
            time.sleep(pause_s)
    return per_step, threads, torch.autograd.is_multithreading_enabled()


def points(listener: Listener, measurement: str) -> list[Point]:
    got = [decode_line(line) for line in listener.text().splitlines()]
    return [p for p in got if p.measurement == measurement]


def test_events_threads_and_blocking_calls(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = install(monkeypatch, DELAY_NS)
    per_step, multithreading, after = train(gpu, pause_s=0.1)
    # One CUDA event per step boundary; module events only in the detailed steps (0, 2, 4).
    assert per_step == [DETAILED, 1] * (STEPS // 2)
    # Backward of a detailed step runs on the training thread (the node hooks with it); the
    # other steps, and the job after the session, keep autograd's device threads.
    assert multithreading == [False, True] * (STEPS // 2)
    assert after is True
    # Every event is recorded, and every wait is made, by the training thread; the aggregator
    # thread only asks query() and reads events the GPU has reached.
    assert gpu.threads("record") == {"MainThread"}
    assert gpu.threads("synchronize") | gpu.threads("event.synchronize") <= {"MainThread"}
    assert "nrg-torch-steps" in gpu.threads("query")
    assert gpu.not_ready == 0
    modules = points(listener, "nrg_module")
    assert {p.fields["step"] for p in modules} == {0, 2, 4}
    backward = [p for p in modules if p.tags["phase"] == "backward"]
    assert len(backward) == 3 * BACKWARD_LEAVES
    for p in modules:
        assert isinstance(p.fields["gpu_seconds"], float)


@pytest.mark.parametrize("anchor_every_s", [None, 0.0])
def test_steps_on_the_gpu_timeline(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, anchor_every_s: float | None
) -> None:
    gpu = install(monkeypatch, DELAY_NS)
    if anchor_every_s is not None:  # re-anchor at every step boundary
        monkeypatch.setattr(gpu_timeline, "ANCHOR_EVERY_S", anchor_every_s)
    train(gpu)
    steps = sorted(points(listener, "nrg_step"), key=lambda p: int(p.fields["step"]))
    assert [p.fields["step"] for p in steps] == list(range(STEPS))
    # By hand: the GPU reaches each boundary DELAY_NS after the host recorded it, and the
    # first step's kernels began DELAY_NS after its first module call.
    first = steps[0].fields
    assert first["gpu_start_time_ns"] == int(first["start_time_ns"]) + DELAY_NS
    for p in steps:
        assert p.fields["gpu_end_time_ns"] == int(p.fields["end_time_ns"]) + DELAY_NS
    for before, after in itertools.pairwise(steps):
        assert after.fields["gpu_start_time_ns"] == before.fields["gpu_end_time_ns"]
    syncs = len([c for c in gpu.calls if c.what == "synchronize"])
    # One anchor at start, one wait at close; re-anchoring adds one per step.
    assert syncs == 2 + (STEPS if anchor_every_s == 0.0 else 0)


def test_cpu_steps_have_no_gpu_fields(listener: Listener) -> None:
    model = nn.Sequential(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with instrument(model, run="cpu"):
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    steps = points(listener, "nrg_step")
    assert len(steps) == 2
    assert all("gpu_start_time_ns" not in p.fields for p in steps)
    assert torch.autograd.is_multithreading_enabled()


def test_the_aggregator_reads_whole_steps_the_gpu_has_run(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = install(monkeypatch, DELAY_NS)
    feed = StepAggregator.feed
    batches: list[tuple[str, list[int], bool]] = []

    def spy(
        self: StepAggregator, events: Any, max_steps: int | None = None, spread: Any = None
    ) -> Any:
        pending = [*self._backlog, *events]
        done = feed(self, events, max_steps, spread)
        read = pending[: len(pending) - len(self._backlog)]
        reached = all(ev[3].query() for ev in read if ev[2] == STEP)
        batches.append((threading.current_thread().name, [ev[2] for ev in read], reached))
        return done

    monkeypatch.setattr(StepAggregator, "feed", spy)
    train(gpu, pause_s=0.15)  # three wake-ups of the aggregator after each step
    on_thread = [b for b in batches if b[0] == "nrg-torch-steps" and b[1]]
    assert on_thread  # the aggregator thread did the reading while training ran
    for _, kinds, reached in on_thread:
        # Each batch ends at a step boundary, whose event the GPU had reached: no event of a
        # step the GPU is still running is read.
        assert kinds[-1] == STEP
        assert reached


def test_step_boundaries_read_the_steps_the_gpu_has_run(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While steps keep coming, the training thread reads them at its step boundaries, each
    batch once the GPU has reached its last boundary; the aggregator thread, whose wish for the
    GIL would stall kernel launches, stays idle."""
    gpu = install(monkeypatch, DELAY_NS)
    feed = StepAggregator.feed
    batches: list[tuple[str, list[int], bool, bool]] = []
    training = True

    def spy(
        self: StepAggregator, events: Any, max_steps: int | None = None, spread: Any = None
    ) -> Any:
        pending = [*self._backlog, *events]
        done = feed(self, events, max_steps, spread)
        read = pending[: len(pending) - len(self._backlog)]
        reached = all(ev[3].query() for ev in read if ev[2] == STEP)
        name = threading.current_thread().name
        batches.append((name, [ev[2] for ev in read], reached, training))
        return done

    monkeypatch.setattr(StepAggregator, "feed", spy)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    with instrument(model, example_inputs=(x,), run="inline", flush_interval_s=60.0):
        for _ in range(STEPS):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            time.sleep(1.5 * DELAY_NS / 1e9)  # the GPU reaches this boundary before the next
        training = False
    during = [b for b in batches if b[3] and b[1]]
    # Each boundary after the first reads the step before it (the GPU has run it by then).
    assert len(during) == STEPS - 1
    for name, kinds, reached, _ in during:
        assert name == "MainThread"
        assert kinds[-1] == STEP and kinds.count(STEP) == 1
        assert reached
    assert "nrg-torch-steps" not in gpu.threads("query")
    assert len(points(listener, "nrg_step")) == STEPS


def test_anchors_correct_the_drift_between_the_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    drift = 1e-3  # the GPU clock 1000 ppm fast: 1 ms per second
    gpu = install(monkeypatch, DELAY_NS, drift)
    timeline = gpu_timeline.GpuTimeline(offset_ns=0)
    timeline.anchor()
    time.sleep(0.3)
    timeline.anchor()  # the rate, from the GPU time between the two anchors
    assert timeline.current is not None
    assert timeline.current.rate == pytest.approx(1 / (1 + drift), rel=1e-6)
    time.sleep(0.3)
    host = time.perf_counter_ns()
    event, anchor = timeline.mark()
    gpu.synchronize()
    # By hand: the GPU reached the event DELAY_NS (its own clock) after the host recorded it,
    # i.e. DELAY_NS / (1 + drift) of host time; uncorrected, 0.3 s at 1000 ppm is 300 µs off.
    expected = host + DELAY_NS / (1 + drift)
    assert abs(timeline.host_ns(event, anchor) - expected) < 1_000
