"""Hook events on real CPU torch: call trees, counts, exceptions, in-place ops, removal."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.torch.hooks import BWD_POST, BWD_PRE, FWD_POST, FWD_PRE, EventLog, ModuleHooks
from tests.torch.conftest import Listener
from tests.torch.models import Raises, Residual, Scaled, nested

KIND = {FWD_PRE: "pre", FWD_POST: "post", BWD_PRE: "bwd_pre", BWD_POST: "bwd"}


def trace(model: nn.Module, fn, backward: list[nn.Module] | None = None) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Run ``fn`` with the hooks in; return ``(event, qualname)`` for the model's modules."""
    log = EventLog()
    hooks = ModuleHooks(log)
    hooks.install_forward()
    if backward:
        hooks.set_backward(backward)
    try:
        fn()
    finally:
        hooks.remove_all()
    names = {id(m): n for n, m in model.named_modules()}
    return [(KIND[k], names[m]) for m, _, k, *_ in log.drain() if m in names]


def test_nested_sequential_with_a_reused_module() -> None:
    model = nested()
    x = torch.randn(2, 4)
    with torch.no_grad():
        events = trace(model, lambda: model(x))
    # The shared Linear has one qualname, "0", and is called twice.
    assert events == [
        ("pre", ""),
        ("pre", "0"),
        ("post", "0"),
        ("pre", "1"),
        ("pre", "1.0"),
        ("post", "1.0"),
        ("pre", "1.1"),
        ("post", "1.1"),
        ("post", "1"),
        ("pre", "0"),
        ("post", "0"),
        ("post", ""),
    ]


def test_kwargs_forward_is_recorded() -> None:
    model = Scaled()
    events = trace(model, lambda: model(torch.randn(2, 4), scale=3.0))
    assert events == [("pre", ""), ("pre", "fc"), ("post", "fc"), ("post", "")]


def test_exits_are_recorded_when_forward_raises() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Raises(), nn.Linear(4, 4))

    def run() -> None:
        with pytest.raises(ValueError, match="boom"):
            model(torch.randn(2, 4))

    assert trace(model, run) == [
        ("pre", ""),
        ("pre", "0"),
        ("post", "0"),
        ("pre", "1"),
        ("post", "1"),
        ("post", ""),
    ]


def test_backward_events_of_leaf_modules_in_autograd_order() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(3, 4)  # needs no grad: the first layer is timed all the same
    leaves = [model[0], model[1], model[2]]
    events = trace(model, lambda: model(x).sum().backward(), backward=leaves)
    assert events == [
        ("pre", ""),
        ("pre", "0"),
        ("post", "0"),
        ("pre", "1"),
        ("post", "1"),
        ("pre", "2"),
        ("post", "2"),
        ("post", ""),
        ("bwd_pre", "2"),
        ("bwd", "2"),
        ("bwd_pre", "1"),
        ("bwd", "1"),
        ("bwd_pre", "0"),
        ("bwd", "0"),
    ]


def test_no_grad_evaluation_has_no_backward_events() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    with torch.no_grad():
        events = trace(model, lambda: model(torch.randn(2, 4)), backward=[model[1]])
    assert events == [
        ("pre", ""),
        ("pre", "0"),
        ("post", "0"),
        ("pre", "1"),
        ("post", "1"),
        ("post", ""),
    ]


def _train(model: nn.Module, session_factory=None, steps: int = 3) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    for _ in range(steps):
        x = torch.randn(5, 4)
        out = model(x)
        out.sum().backward()
        opt.step()
        opt.zero_grad()
        outputs.append(out.detach().clone())
    return outputs


def test_in_place_ops_with_backward_on_train_unchanged(listener: Listener) -> None:
    # Full backward hooks would make torch raise here ("Output 0 of BackwardHookFunction is a
    # view and is being modified inplace"); the node hooks nrg uses do not wrap tensors.
    from acquisition.torch import instrument

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), Residual(), nn.Linear(4, 2))
    reference = copy.deepcopy(model)
    with instrument(model, example_inputs=(torch.randn(5, 4),), run="inplace") as session:
        assert session.backward_modules == ["0", "1", "2.fc", "2.act", "3"]
        got = _train(model)
    assert session.backward_modules == []  # cleared on close
    want = _train(reference)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    calls: Counter[tuple[int, str, str]] = Counter()
    for line in listener.text().splitlines():
        p = decode_line(line)
        if p.measurement == "nrg_module":
            calls[p.fields["step"], p.tags["module"], p.tags["phase"]] += p.fields["calls"]  # type: ignore[index,operator]
    assert {k[1]: v for k, v in calls.items() if k[0] == 2 and k[2] == "backward"} == {
        "0": 1,
        "1": 1,
        "2.fc": 1,
        "2.act": 1,
        "3": 1,
    }


def test_hooks_are_removed_and_the_model_is_unchanged() -> None:
    from acquisition.torch import instrument

    model = nested()
    reference = copy.deepcopy(model)
    before = {
        n: (
            dict(m._forward_hooks),
            dict(m._forward_pre_hooks),
            dict(m._backward_hooks),
            dict(m._backward_pre_hooks),
        )
        for n, m in model.named_modules()
    }
    global_before = _global_hook_state()
    with instrument(model, run="removal"):
        got = _train(model)
    want = _train(reference)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    after = {
        n: (
            dict(m._forward_hooks),
            dict(m._forward_pre_hooks),
            dict(m._backward_hooks),
            dict(m._backward_pre_hooks),
        )
        for n, m in model.named_modules()
    }
    assert after == before
    assert _global_hook_state() == global_before
    x = torch.randn(2, 4)
    assert torch.equal(model(x), reference(x))
    assert all(
        torch.equal(p, q)
        for p, q in zip(model.state_dict().values(), reference.state_dict().values(), strict=True)
    )


def _global_hook_state() -> tuple[int, ...]:
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    return (
        len(m._global_forward_pre_hooks),
        len(m._global_forward_hooks),
        len(m._global_forward_hooks_always_called),
        len(m._global_backward_hooks),
        len(m._global_backward_pre_hooks),
        len(m._global_module_registration_hooks),
        len(o._global_optimizer_post_hooks),
    )
