"""Graph capture (torch.export, jit.trace fallback), backward safety, parameters and FLOPs."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from acquisition.torch.complexity import module_flops, module_sizes, parse_flop_counts
from acquisition.torch.graph import capture_graph
from tests.torch.models import DataDependent, Scaled


def test_export_graph_has_ops_modules_shapes_and_data_nodes() -> None:
    model = nn.Sequential(nn.Linear(4, 3), Residual_like())
    capture = capture_graph(model, (torch.randn(2, 4),))
    assert capture.source == "torch.export"
    doc = capture.doc
    ops = [
        (n["op"], n["module"], n["inputs"], n["outputs"]) for n in doc["nodes"] if n["kind"] == "op"
    ]
    assert ops == [
        ("aten.linear.default", "0", ["input", "p_0_weight", "p_0_bias"], ["linear"]),
        ("aten.split.Tensor", "1", ["linear"], ["getitem", "getitem_1"]),
        ("aten.mul.Tensor", "1", ["getitem", "getitem_1"], ["mul"]),
    ]
    data = {n["id"]: (n["kind"], n["shape"], n["dtype"]) for n in doc["nodes"] if n["kind"] != "op"}
    assert data == {
        "p_0_weight": ("parameter", [3, 4], "float32"),
        "p_0_bias": ("parameter", [3], "float32"),
        "input": ("input", [2, 4], "float32"),
        "linear": ("activation", [2, 3], "float32"),
        "getitem": ("activation", [2, 2], "float32"),
        "getitem_1": ("activation", [2, 1], "float32"),
        "mul": ("activation", [2, 2], "float32"),
    }
    assert doc["outputs"] == ["mul"]


class Residual_like(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.split(2, dim=1)
        return a * b


def test_capture_leaves_training_state_alone() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    x = torch.randn(8, 4)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    capture_graph(model, (x,))
    module_flops(model, (x,))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_kwargs_reach_export() -> None:
    capture = capture_graph(Scaled(), (torch.randn(2, 4),), {"scale": 2.0})
    assert capture.source == "torch.export"
    assert [n["op"] for n in capture.doc["nodes"] if n["kind"] == "op"] == [
        "aten.linear.default",
        "aten.mul.Tensor",
    ]


def test_data_dependent_model_falls_back_to_jit_trace_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="acquisition.torch")
    capture = capture_graph(DataDependent(), (torch.randn(2, 4),))
    assert capture.source == "torch.jit.trace"
    warnings_ = capture.doc["warnings"]
    assert warnings_[0].startswith("torch.export failed (")
    assert any(w.startswith("TracerWarning") for w in warnings_[1:])
    assert any(
        "falling back to the deprecated torch.jit.trace" in r.message for r in caplog.records
    )
    ops = [(n["op"], n["module"]) for n in capture.doc["nodes"] if n["kind"] == "op"]
    assert ops[0] == ("aten::linear", "fc")
    assert ops[-1] == ("aten::mul", "")


def test_sizes_and_flops_per_module() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8 * 5 * 5, 10)
    )
    sizes = module_sizes(model)
    assert sizes == {
        "": (224 + 16 + 2010, 8 + 8 + 1),
        "0": (224, 0),
        "1": (16, 17),
        "2": (0, 0),
        "3": (2010, 0),
    }
    flops = module_flops(model, (torch.randn(2, 3, 5, 5),))
    conv = 2 * 2 * 8 * 5 * 5 * 3 * 3 * 3  # 2 × batch × out channels × pixels × kernel volume
    linear = 2 * 2 * 200 * 10
    assert flops == {"": conv + linear, "0": conv, "3": linear}


def test_parse_flop_counts_maps_keys_to_qualnames() -> None:
    counts = {
        "Global": {"mm": 10},
        "Net": {"mm": 10},
        "Net.a.b": {"mm": 4, "bmm": 2},
        "Other": {"mm": 1},
    }
    assert parse_flop_counts("Net", counts) == {"": 10, "a.b": 6}
