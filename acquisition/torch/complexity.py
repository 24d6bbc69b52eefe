"""Model complexity: parameters, buffers and forward FLOPs per module.

Sources: ``nn.Module.named_modules()`` / ``parameters()`` / ``buffers()`` (element counts) and
``torch.utils.flop_counter.FlopCounterMode(depth=None)`` over one forward pass under
``torch.no_grad()``. FlopCounterMode counts FLOPs = 2 × multiply-accumulates (matmul,
convolution, attention); element-wise ops count zero. Its keys are ``'<RootClass>'`` and
``'<RootClass>.<qualname>'``, mapped back to qualnames here.

Every figure is *inclusive*: a module counts its own and its descendants' parameters, buffers
and FLOPs, so the root carries the model totals; a tensor shared by two submodules is counted
once per module that owns it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from acquisition.point import Point
from acquisition.torch.steps import ROOT_NAME

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "meta_copy",
    "model_points",
    "module_flops",
    "module_flops_private",
    "module_sizes",
    "parse_flop_counts",
    "preserved_state",
]

Tick = Callable[[], None]
"""Called between short pieces of work (:meth:`acquisition.torch.pacing.Pacer.tick`)."""


def _no_tick() -> None:
    pass


def module_sizes(model: nn.Module, tick: Tick = _no_tick) -> dict[str, tuple[int, int]]:
    """``{qualname: (parameter elements, buffer elements)}``, inclusive of submodules;
    ``tick`` is called after each module (work paced beside training)."""
    sizes = {}
    for name, module in list(model.named_modules()):  # no pause while walking the tree
        sizes[name] = (
            sum(p.numel() for p in module.parameters()),
            sum(b.numel() for b in module.buffers()),
        )
        tick()
    return sizes


@contextlib.contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Run an analysis forward pass without side effects on training.

    Restores buffer values (batch-norm running statistics move in train mode), the CPU and CUDA
    random-number generator states (dropout draws), and each parameter's ``.grad``.
    """
    import torch

    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, p.grad) for p in model.parameters()]
    cpu_rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, saved in buffers:
                buf.copy_(saved)
        for param, grad in grads:
            param.grad = grad
        torch.random.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def parse_flop_counts(root_class: str, counts: Mapping[str, Mapping[Any, int]]) -> dict[str, int]:
    """Map FlopCounterMode's ``get_flop_counts()`` keys to qualnames, summing over ops."""
    out: dict[str, int] = {}
    prefix = root_class + "."
    for key, per_op in counts.items():
        if key == root_class:
            name = ""
        elif key.startswith(prefix):
            name = key[len(prefix) :]
        else:
            continue  # 'Global', or a module outside the model
        out[name] = out.get(name, 0) + int(sum(per_op.values()))
    return out


def module_flops(
    model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Forward FLOPs per qualname for one call ``model(*args, **kwargs)``; missing means 0."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, depth=None)  # type: ignore[arg-type]  # None: all depths
    with preserved_state(model), torch.no_grad(), counter:
        model(*args, **dict(kwargs or {}))
    return parse_flop_counts(type(model).__name__, counter.get_flop_counts())


def meta_copy(model: nn.Module, tick: Tick = _no_tick) -> nn.Module:
    """A copy of ``model`` on the meta device: the same modules and shapes, no data, no hooks.

    Parameters and buffers become meta tensors (no memory, no copy of their values); the hook
    dictionaries of every module are left empty in the copy, so nothing registered on the
    model runs when the copy does. Modules are copied one at a time, each after its
    submodules (one memo: the same copy as one ``deepcopy`` of the model), with ``tick``
    between them."""
    import copy

    import torch
    from torch import nn

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
    modules = list(model.modules())
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                memo[id(value)] = torch.empty_like(value, device="meta")
            elif "hook" in name and isinstance(value, dict):
                memo[id(value)] = type(value)()
        for value in module._buffers.values():
            if value is not None and id(value) not in memo:
                memo[id(value)] = torch.empty_like(value, device="meta")
        tick()
    # modules() lists a module before its submodules: reversed, each one's are in the memo.
    for module in reversed(modules[1:]):
        copy.deepcopy(module, memo)
        tick()
    return copy.deepcopy(model, memo)


def module_flops_private(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    tick: Tick = _no_tick,
) -> dict[str, int]:
    """:func:`module_flops` for a model no other thread uses (a :func:`meta_copy`), safe to run
    beside training: the same formulas (``torch.utils.flop_counter``'s registry), counted by a
    dispatch mode (thread-local) and attributed through hooks on this model's own modules,
    where ``FlopCounterMode`` tracks modules with global hooks that would also see the training
    thread's calls. ``tick`` is called at each module call and each operation."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    stack: list[str] = []
    counts: dict[str, int] = {}

    class Count(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            tick()
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                flops = int(formula(*args, **kwargs, out_val=out))
                for name in set(stack):
                    counts[name] = counts.get(name, 0) + flops
            return out

    def enter(name: str) -> None:
        tick()
        stack.append(name)

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(lambda m, a, n=name: enter(n)))
        handles.append(
            module.register_forward_hook(lambda m, a, o: stack.pop() and None, always_call=True)
        )
    try:
        with torch.no_grad(), Count():  # type: ignore[no-untyped-call]
            model(*args, **dict(kwargs or {}))
    finally:
        for handle in handles:
            handle.remove()
    return counts


def model_points(
    sizes: Mapping[str, tuple[int, int]],
    flops: Mapping[str, int],
    tags: Mapping[str, str],
    time_ns: int,
) -> list[Point]:
    """One ``nrg_model`` point per module: ``params``, ``buffers``, ``flops``, ``macs``."""
    points = []
    for name, (params, buffers) in sizes.items():
        module_flops_ = flops.get(name, 0)
        module_tags = dict(tags)
        module_tags["module"] = name or ROOT_NAME
        points.append(
            Point(
                "nrg_model",
                module_tags,
                {
                    "params": params,
                    "buffers": buffers,
                    "flops": module_flops_,
                    "macs": module_flops_ // 2,
                },
                time_ns,
            )
        )
    return points
