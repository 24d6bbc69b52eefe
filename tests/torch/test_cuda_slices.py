"""A detailed step's events are worked through in slices over the boundaries that follow it, each
read only once the GPU has run it, none lost; one ``elapsed_time`` per module call."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch
from torch import nn

import acquisition.torch.steps as steps_module
from acquisition.lineproto import decode_line
from acquisition.torch import instrument
from acquisition.torch.hooks import STEP
from acquisition.torch.steps import StepAggregator
from tests.torch.conftest import Listener
from tests.torch.cuda_standin import StandInGpu, install

DELAY_NS = 5_000_000
STEPS = 9
EVERY = 3
FORWARD_CALLS = 4  # the root and its three children
BACKWARD_LEAVES = 3
DETAILED = 2 * FORWARD_CALLS + 2 * BACKWARD_LEAVES + 1  # enter/exit events + the boundary
SLICE = 4


def train(gpu: StandInGpu) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    with instrument(
        model, example_inputs=(x,), run="slices", module_detail_every=EVERY, flush_interval_s=60.0
    ):
        for _ in range(STEPS):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            time.sleep(2 * DELAY_NS / 1e9)  # the GPU reaches this boundary before the next


def test_a_detailed_step_is_processed_in_slices(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(steps_module, "PROCESS_SLICE", SLICE, raising=False)
    gpu = install(monkeypatch, DELAY_NS)
    feed = StepAggregator.feed
    slices: list[tuple[int, int, bool]] = []  # (events aggregated, events ready, all reached)

    def spy(self: StepAggregator, events: Any, max_steps: Any = None, *spread: Any) -> Any:
        pending = [*self._backlog, *events]
        if threading.current_thread().name != "MainThread" or max_steps is None:
            return feed(self, events, max_steps, *spread)
        ready, seen = 0, 0
        for ready, ev in enumerate(pending, 1):  # noqa: B007 (the count is what we want)
            seen += ev[2] == STEP
            if seen == max_steps:
                break
        done = feed(self, events, max_steps, *spread)
        read = pending[: len(pending) - len(self._backlog)]
        reached = all(ev[3].query() for ev in pending[:ready] if ev[2] == STEP)
        slices.append((len(read), ready, reached))
        return done

    monkeypatch.setattr(StepAggregator, "feed", spy)
    train(gpu)
    assert slices
    for aggregated, ready, reached in slices:
        # Bounded work per boundary: a slice, never the whole detailed step at once.
        assert aggregated <= max(SLICE, -(-ready // EVERY))
        assert aggregated < DETAILED
        assert reached  # only events of steps the GPU has finished
    assert gpu.not_ready == 0  # no event was read before the GPU reached it
    # Nothing lost: every step, and every call of the detailed steps, with its GPU time.
    got = [decode_line(line) for line in listener.text().splitlines()]
    steps = [p for p in got if p.measurement == "nrg_step"]
    assert sorted(int(p.fields["step"]) for p in steps) == list(range(STEPS))
    modules = [p for p in got if p.measurement == "nrg_module"]
    assert sorted({int(p.fields["step"]) for p in modules}) == list(range(0, STEPS, EVERY))
    per_step = (FORWARD_CALLS + BACKWARD_LEAVES) * len(range(0, STEPS, EVERY))
    assert len(modules) == per_step
    assert all(p.fields["calls"] == 1 for p in modules)
    assert all(isinstance(p.fields["gpu_seconds"], float) for p in modules)


def test_one_elapsed_time_per_module_call(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = install(monkeypatch, DELAY_NS)
    train(gpu)
    reads = sum(1 for c in gpu.calls if c.what == "elapsed_time")
    calls = (FORWARD_CALLS + BACKWARD_LEAVES) * len(range(0, STEPS, EVERY))
    # A step's GPU interval: its end's reading, and the first step's start; a module call: one
    # reading (its exclusive time subtracts its children's readings, read again before).
    assert reads == calls + STEPS + 1
    got = [decode_line(line) for line in listener.text().splitlines()]
    root = [p for p in got if p.measurement == "nrg_module" and p.tags["module"] == "(root)"]
    children = [
        p
        for p in got
        if p.measurement == "nrg_module"
        and p.tags["phase"] == "forward"
        and p.tags["module"] != "(root)"
    ]
    for p in root:  # exclusive = inclusive minus the children's inclusive, on the GPU
        inside = sum(
            float(c.fields["gpu_inclusive_seconds"])
            for c in children
            if c.fields["step"] == p.fields["step"]
        )
        expected = max(0.0, float(p.fields["gpu_inclusive_seconds"]) - inside)
        assert float(p.fields["gpu_seconds"]) == pytest.approx(expected, abs=1e-9)


def test_lines_are_formatted_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    from acquisition.torch.steps import ModuleTiming, StepLines, StepRecord

    monkeypatch.setattr(steps_module, "PROCESS_SLICE", SLICE, raising=False)
    modules = {(f"m{i}", "forward"): ModuleTiming(1, 10 + i, 10 + i) for i in range(20)}
    records = [StepRecord(k, 0, 100 * k, 100 * k + 50, dict(modules)) for k in range(2)]
    whole = StepLines({"run": "r"}, 0)
    expected = "".join(whole.lines(r) for r in records)
    lines = StepLines({"run": "r"}, 0)
    lines.queue(records)
    chunks = []
    while lines.queued:
        left = sum(len(e[1]) + (not e[2]) for e in lines._todo)
        chunk = lines.take(spread=EVERY)
        assert chunk.count("\n") <= max(SLICE, -(-left // EVERY)) < 2 * len(modules)
        chunks.append(chunk)
    assert "".join(chunks) == expected  # nothing lost, nothing twice, in order
    assert len(chunks) > 2


def test_events_read_are_recorded_again(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = install(monkeypatch, DELAY_NS)
    train(gpu)
    constructed = sum(1 for c in gpu.calls if c.what == "construct")
    detailed = len(range(0, STEPS, EVERY))
    module_events = DETAILED - 1
    # The first detailed step constructs its events; later ones record those read since again
    # (all but the one that starts a step, which the step's GPU interval reads at its end).
    # Besides: one event per boundary and the anchor.
    assert constructed <= module_events + (detailed - 1) + STEPS + 1
    assert gpu.not_ready == 0
    got = [decode_line(line) for line in listener.text().splitlines()]
    modules = [p for p in got if p.measurement == "nrg_module"]
    assert len(modules) == (FORWARD_CALLS + BACKWARD_LEAVES) * detailed
    assert all(float(p.fields["gpu_seconds"]) >= 0.0 for p in modules)
