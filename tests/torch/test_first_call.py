"""The model analysis without example inputs: beside training, on a meta copy of the model, from
the first forward call's input shapes; on the training thread only when the copy cannot run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import acquisition.torch.analysis as analysis
from acquisition.lineproto import decode_line
from acquisition.torch import complexity, instrument, pacing
from tests.torch.conftest import Listener


class ItemModel(nn.Module):
    """``.item()`` in forward: no meta kernel can give a value, so the copy cannot run."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = float(x.abs().mean().item())
        return self.fc(x) * scale


def train(model: nn.Module, steps: int = 3, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 8)
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def dropout_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.BatchNorm1d(16), nn.Linear(16, 4))


def model_points(listener: Listener) -> dict[str, Any]:
    got = [decode_line(line) for line in listener.text().splitlines()]
    return {p.tags["module"]: p.fields for p in got if p.measurement == "nrg_model"}


def test_analysis_runs_beside_training_and_leaves_it_alone(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    threads: list[str] = []
    private = complexity.module_flops_private

    def spy(model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, int]:
        threads.append(threading.current_thread().name)
        assert all(p.device.type == "meta" for p in model.parameters())
        return private(model, *args, **kwargs)

    monkeypatch.setattr(complexity, "module_flops_private", spy)
    plain = train(dropout_model())
    caplog.set_level(logging.INFO, logger="acquisition.torch")
    with instrument(model := dropout_model(), run="aside") as session:
        losses = train(model)
    # The same losses: dropout draws, batch-norm statistics and gradients are training's own.
    assert losses == plain
    assert threads == ["nrg-torch-analysis"]
    assert session.capture is not None and session.capture.source == "torch.export"
    flops = model_points(listener)
    # Hand count for a batch of 16: 2 x 16 x (8 x 16 + 16 x 4) multiply-accumulates.
    assert flops["(root)"]["flops"] == 2 * 16 * (8 * 16 + 16 * 4)
    assert flops["0"]["flops"] == 2 * 16 * 8 * 16
    took = [r for r in caplog.records if "model analysis (sizes, FLOPs, graph) took" in r.message]
    assert len(took) == 1


def test_private_flops_equal_the_flop_counter() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10), nn.Softmax(-1)
    )
    x = torch.randn(2, 3, 8, 8)
    expected = complexity.module_flops(model, (x,))
    copy = complexity.meta_copy(model)
    assert complexity.module_flops_private(copy, (analysis.meta_inputs(x),)) == expected


def test_a_model_the_copy_cannot_run_is_analysed_at_a_step_end(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = complexity.module_flops

    def spy(model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, int]:
        threads.append(threading.current_thread().name)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(complexity, "module_flops", spy)
    with instrument(model := ItemModel(), run="late", graph=False):
        train(model, steps=3)
    assert threads == ["MainThread"]
    assert model_points(listener)["fc"]["flops"] == 2 * 16 * 8 * 4


class HoldsFirstStep(nn.Module):
    """Calls ``hold`` in its first forward (a function: the model's meta copy shares it)."""

    def __init__(self, hold: Callable[[], None]) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.hold = hold
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.calls == 0:
            self.hold()
        self.calls += 1
        return self.fc(x)


def test_the_analysis_begins_after_the_first_step_and_not_on_the_training_thread(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    order: list[str] = []
    threads: set[str] = set()
    began = threading.Event()

    def spy(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            threads.add(threading.current_thread().name)
            order.append(name)
            began.set()
            return real(*args, **kwargs)

        return call

    for name in ("meta_copy", "module_sizes", "module_flops_private", "module_flops"):
        monkeypatch.setattr(complexity, name, spy(name, getattr(complexity, name)))

    def hold() -> None:
        began.wait(1.0)  # time for an analysis that does not wait to show itself
        order.append("first forward")

    model = HoldsFirstStep(hold)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # Registered before the session's own hook: runs first, as the first step ends.
    handle = register_optimizer_step_post_hook(lambda *_: order.append("optimizer step"))
    try:
        with instrument(model, run="after-first", graph=False):
            for _ in range(2):
                opt.zero_grad()
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            assert began.wait(30)  # begun while the session runs, not at its close
    finally:
        handle.remove()
    assert threads == {"nrg-torch-analysis"}
    assert order.index("first forward") < order.index("optimizer step") < order.index("meta_copy")
    assert model_points(listener)["fc"]["flops"] == 2 * 4 * 8 * 4


def test_the_analysis_pauses_for_training_until_the_session_closes(
    listener: Listener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Every piece of work asks for a pause of days: only the session's close can end it.
    monkeypatch.setattr(pacing, "PACE_SLICE_S", 0.0)
    monkeypatch.setattr(pacing, "PACE_DUTY", 1e-9)
    monkeypatch.setattr(analysis, "ANALYSIS_WAIT_S", 30.0)
    caplog.set_level(logging.INFO, logger="acquisition.torch")
    waiting = threading.Event()

    class Watched(threading.Event):
        """The pacer's release event, telling when a pause has begun to wait on it."""

        def wait(self, timeout: float | None = None) -> bool:
            waiting.set()
            return super().wait(timeout)

    with instrument(model := dropout_model(), run="paced", graph=False) as session:
        pacer = session._model_analysis.pacer
        pacer._released = Watched()  # before the first step: the analysis has not begun
        train(model, steps=2)
        # On a loaded machine the analysis thread may start late: close only once it pauses.
        assert waiting.wait(60)
        assert not pacer.released  # training runs: paced
    assert pacer.released
    assert model_points(listener)["0"]["flops"] == 2 * 16 * 8 * 16
    took = [r.message for r in caplog.records if "model analysis (sizes, FLOPs" in r.message]
    assert len(took) == 1 and "in 1 pauses for training" in took[0], took


def test_the_first_step_starts_no_thread(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analysis thread starts with the session, not in the first forward call, where the
    training thread would wait for the OS to schedule it."""
    started: list[str] = []
    start = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", spy)
    model = dropout_model()
    with instrument(model, run="threads") as session:  # no example inputs
        at_start = list(started)
        train(model, steps=1)
        during = started[len(at_start) :]
    assert "nrg-torch-analysis" in at_start
    assert during == []
    assert session.capture is not None  # the analysis ran, beside training
