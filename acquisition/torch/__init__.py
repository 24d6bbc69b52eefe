"""Training-side instrumentation for PyTorch: what ran, and when, sent to the nrg agent.

::

    with acquisition.torch.instrument(model, experiment="mnist", run="lr3e-4") as session:
        for epoch in range(3):
            session.epoch(epoch)
            for x, y in loader:
                ...  # forward, backward, optimizer.step(): each optimizer step is one step

or, where ``with`` does not fit, ``session = instrument(model).start()`` … ``session.close()``.

Importing this package does not import torch; :func:`instrument` does. Nothing here imports the
agent side (collectors, sinks, the bus): the two meet only through line protocol on a Unix
socket, or the fallback file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from acquisition.errors import install_hint

if TYPE_CHECKING:
    from torch import nn

    from acquisition.torch.session import Session

__all__ = ["instrument", "profile"]


def __getattr__(name: str) -> Any:
    # ``profile`` (the energy-aware torch.profiler.profile) needs the agent's collectors, so it
    # lives in acquisition.profiler, outside this package; it is imported on first use only.
    if name == "profile":
        from acquisition.profiler import profile

        return profile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def instrument(
    model: nn.Module,
    *,
    example_inputs: Any = None,
    example_kwargs: Mapping[str, Any] | None = None,
    experiment: str | None = None,
    run: str | None = None,
    rank: int | str | None = None,
    socket_path: str | os.PathLike[str] | None = None,
    fallback_dir: str | os.PathLike[str] | None = None,
    graph_dir: str | os.PathLike[str] | None = None,
    graph: bool = True,
    backward: bool = True,
    auto_step: bool = True,
    flush_interval_s: float = 0.05,
    samples_per_step: int | None = None,
    module_detail_every: int | None = None,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
) -> Session:
    """A session for ``model``; start it with ``with`` or ``.start()``.

    - ``example_inputs``/``example_kwargs``: one batch for the model graph and FLOP count at
      start; without them both are taken from the model's first forward call.
    - ``experiment``, ``run``, ``rank``: tags (defaults: ``NRG_EXPERIMENT``, ``NRG_RUN`` or
      ``<UTC time>-<pid>``, ``RANK``/``LOCAL_RANK``).
    - ``socket_path`` (``NRG_SOCKET``), ``fallback_dir`` (``NRG_FALLBACK_DIR``), ``graph_dir``
      (``NRG_GRAPH_DIR``): where lines, undeliverable lines and the graph JSON go.
    - ``graph``: record the op graph; ``backward``: time backward where hooks are safe;
      ``auto_step``: an optimizer step of this model's optimizer ends a step (``session.step()``
      takes over when called).
    - ``samples_per_step``: the batch size, written as each step's ``samples`` field (a call
      of ``session.step(samples=n)`` gives its own step's count).
    - ``module_detail_every``: per-module timing (``nrg_module``) on every Nth step, counted
      from step 0; the steps between have their ``nrg_step`` point only and no module hooks
      at all. Default: every step for a model of up to 48 modules, else every
      ⌈modules / 48⌉-th step (a 200-module model: every 5th).
    - ``epochs``, ``steps_per_epoch``: the run's length, for the forecast the agent makes at
      each epoch end (as ``session.plan()``).
    """
    try:
        import torch  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"acquisition.torch needs torch: {install_hint('torch')}") from exc
    from acquisition.torch.session import Session

    return Session(
        model,
        example_inputs=example_inputs,
        example_kwargs=example_kwargs,
        experiment=experiment,
        run=run,
        rank=rank,
        socket_path=socket_path,
        fallback_dir=fallback_dir,
        graph_dir=graph_dir,
        graph=graph,
        backward=backward,
        auto_step=auto_step,
        flush_interval_s=flush_interval_s,
        samples_per_step=samples_per_step,
        module_detail_every=module_detail_every,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
    )
