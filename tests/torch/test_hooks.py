"""Hook events on real CPU torch: call trees, counts, exceptions, in-place ops, removal."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from acquisition.torch.hooks import BWD_POST, BWD_PRE, FWD_POST, FWD_PRE, EventLog, ModuleHooks
from acquisition.torch.session import NrgHookWarning
from tests.torch.models import Raises, Residual, Scaled, nested

KIND = {FWD_PRE: "pre", FWD_POST: "post", BWD_PRE: "bwd_pre", BWD_POST: "bwd"}


def trace(model: nn.Module, fn, backward: list[nn.Module] | None = None) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Run ``fn`` with the hooks in; return ``(event, qualname)`` for the model's modules."""
    log = EventLog()
    hooks = ModuleHooks(log)
    hooks.install_forward()
    if backward:
        hooks.install_backward(backward)
    try:
        fn()
    finally:
        hooks.remove_all()
    names = {m: n for n, m in model.named_modules()}
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


def test_backward_events_nest_on_safe_modules() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    events = trace(model, lambda: model(x).sum().backward(), backward=[model[1], model[2]])
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


def test_in_place_relu_with_backward_on_trains_and_warns_once() -> None:
    from acquisition.torch import instrument

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), Residual(), nn.Linear(4, 2))
    reference = copy.deepcopy(model)
    x = torch.randn(5, 4)
    with (
        pytest.warns(NrgHookWarning) as record,
        instrument(model, example_inputs=(x,), run="inplace") as session,
    ):
        assert session.backward_modules == ["2", "3"]
        got = _train(model)
    assert len(record) == 1
    message = str(record[0].message)
    assert "for 4 module(s)" in message
    assert "'0', '1', '2.act', '2.fc'" in message
    assert session.backward_unsafe == {
        "": "no input requires grad",
        "0": "in-place op aten.relu_.default on its output",
        "1": "in-place op aten.relu_.default on its input",
        "2.fc": "in-place op aten.add_.Tensor on its output",
        "2.act": "in-place op aten.relu_.default on its input",
    }
    assert session.backward_modules == []  # cleared on close: every hook is gone
    want = _train(reference)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


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
