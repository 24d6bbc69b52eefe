"""The model analysis without example inputs: beside training, on a meta copy of the model, from
the first forward call's input shapes; on the training thread only when the copy cannot run."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import torch
from torch import nn

import acquisition.torch.analysis as analysis
from acquisition.lineproto import decode_line
from acquisition.torch import complexity, instrument
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
