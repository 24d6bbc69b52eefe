"""The CUDA path: per-module GPU time from events recorded in the hooks (needs a real GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.torch import instrument
from tests.torch.conftest import Listener

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def need_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def test_gpu_seconds_per_module(listener: Listener) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.Tanh(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(512, 1024, device="cuda")
    with instrument(model, example_inputs=(x,), run="cuda") as session:
        for _ in range(3):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    assert session.backward_modules == []  # cleared at close
    points = [decode_line(line) for line in listener.text().splitlines()]
    modules = [p for p in points if p.measurement == "nrg_module"]
    assert {p.fields["step"] for p in modules} == {0, 1, 2}
    for p in modules:
        gpu = p.fields["gpu_seconds"]
        inclusive = p.fields["gpu_inclusive_seconds"]
        assert isinstance(gpu, float) and isinstance(inclusive, float)
        assert 0.0 <= gpu <= inclusive
    root = {
        p.fields["step"]: p
        for p in modules
        if p.tags["module"] == "(root)" and p.tags["phase"] == "forward"
    }
    children = [
        p for p in modules if p.tags["phase"] == "forward" and p.tags["module"] in ("0", "1", "2")
    ]
    # The root's GPU exclusive time is its inclusive time minus its children's inclusive times.
    for step, r in root.items():
        kids = sum(
            float(c.fields["gpu_inclusive_seconds"]) for c in children if c.fields["step"] == step
        )
        assert r.fields["gpu_seconds"] == pytest.approx(
            max(0.0, float(r.fields["gpu_inclusive_seconds"]) - kids), abs=1e-9
        )
