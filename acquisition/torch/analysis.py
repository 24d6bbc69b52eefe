"""The model's one-off analysis: sizes, forward FLOPs and op graph, and where they go.

Runs once per session: at start when example inputs were given; else beside training, on a
thread of its own, from the first forward call's inputs: there it works on a private copy of
the model on the meta device (:func:`~acquisition.torch.complexity.meta_copy`: shapes without
data or hooks) and meta copies of the inputs, so training's tensors, buffers and random number
generators are never touched and the training thread only pays for the copies of the inputs.
That thread waits for the end of the first step (or the session's close), so the first step
runs alone, then works in short slices paced by a :class:`~acquisition.torch.pacing.Pacer`,
which gives the interpreter lock back to training between them; at close the pauses end.
Beside training it counts sizes and FLOPs only (a thread-local dispatch mode): graph capture
patches process-wide state (``torch.export``'s tracer, the warnings filters) that a training
forward running at the same moment would trip over, so the copy's graph is captured when the
session closes, after training's last step. Nothing here is on the per-step path.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acquisition.point import Point
from acquisition.torch import complexity
from acquisition.torch.complexity import Tick
from acquisition.torch.graph import GraphCapture, capture_graph
from acquisition.torch.launch import prefixed, unwrap_model
from acquisition.torch.pacing import Pacer

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "ANALYSIS_WAIT_S",
    "Analysis",
    "ModelAnalysis",
    "analyse_model",
    "meta_inputs",
    "write_graph",
]

log = logging.getLogger("acquisition.torch")

ANALYSIS_WAIT_S = 120.0
"""How long a session's close waits for an analysis still running beside training."""


@dataclass
class Analysis:
    """What one analysis produced."""

    points: list[Point]
    """``nrg_model`` points, one per module."""
    capture: GraphCapture | None
    graph_written: bool
    seconds: float
    """Wall time the analysis took."""
    sizes: Mapping[str, tuple[int, int]]
    flops: Mapping[str, int]


def write_graph(
    path: Path,
    model: nn.Module,
    capture: GraphCapture,
    sizes: Mapping[str, tuple[int, int]],
    flops: Mapping[str, int],
    tags: Mapping[str, str],
) -> bool:
    """Write the graph document with per-module sizes and FLOPs; False (logged) on failure."""
    types = {n: type(m).__qualname__ for n, m in model.named_modules()}
    doc = dict(capture.doc)
    doc["experiment"] = tags.get("experiment", "")
    doc["run"] = tags["run"]
    doc["modules"] = {
        name: {"type": types[name], "params": p, "buffers": b, "flops": flops.get(name, 0)}
        for name, (p, b) in sizes.items()
        if name in types
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log.warning("nrg: cannot write the model graph to %s: %s", path, exc)
        return False
    return True


def analyse_model(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    graph_path: Path | None,
    graph: bool,
    tags: Mapping[str, str],
    model_tags: Mapping[str, str],
    time_ns: int,
    private: nn.Module | None = None,
    tick: Tick | None = None,
) -> Analysis:
    """Sizes, FLOPs (a failure to count them is logged, not raised) and, with ``graph``, the
    op graph written to ``graph_path``. With ``private`` (a copy of ``model``, or of the module
    its DDP/FSDP wrapper trains, that nothing else uses), FLOPs and graph come from running the
    copy, beside training, calling ``tick`` between short pieces of the work."""
    began = time.perf_counter()
    tick = tick or (lambda: None)
    sizes = complexity.module_sizes(model, tick)
    # The module a DDP/FSDP wrapper trains: the wrapper's forward runs collectives (an analysis
    # pass on some ranks only would leave them waiting) and torch.export cannot take it.
    inner, prefix = unwrap_model(model)
    run = inner if private is None else private
    if private is not None:  # a copy that cannot run raises: the model itself is analysed later
        flops = prefixed(complexity.module_flops_private(private, args, kwargs, tick), prefix)
    else:
        try:
            flops = prefixed(complexity.module_flops(inner, args, kwargs), prefix)
        except Exception as exc:  # a model the counter cannot run is still trained
            log.warning("nrg: FLOP counting failed (%s: %s)", type(exc).__name__, exc)
            flops = {}
    capture = None
    written = False
    if graph:
        capture = capture_graph(run, args, kwargs, preserve=private is None)
        if graph_path is not None:
            written = write_graph(graph_path, model, capture, sizes, flops, tags)
    points = complexity.model_points(sizes, flops, model_tags, time_ns)
    return Analysis(points, capture, written, time.perf_counter() - began, sizes, flops)


def meta_inputs(value: Any) -> Any:
    """``value`` (nested tuples, lists, dicts) with every tensor replaced by a meta tensor of
    the same shape, dtype and ``requires_grad``: microseconds, no memory."""
    import torch
    from torch.utils._pytree import tree_map

    def meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_like(x, device="meta", requires_grad=x.requires_grad)
        return x

    return tree_map(meta, value)


class ModelAnalysis:
    """A session's one analysis of its model: at start, beside training, or (when the copy
    cannot run) at a step boundary on the training thread. Never raises into training (a
    warning the user turned into an error excepted)."""

    def __init__(
        self,
        model: nn.Module,
        graph_path: Path | None,
        *,
        tags: Mapping[str, str],
        model_tags: Mapping[str, str],
        send: Callable[[list[Point]], None],
    ) -> None:
        self.model = model
        self.graph = graph_path is not None
        self.graph_path = graph_path
        self.tags = tags
        self.model_tags = model_tags
        self.time_ns = 0
        self.capture: GraphCapture | None = None
        self.due = False
        """The analysis beside training failed: the training thread does it at a step end."""
        self._send = send
        self._thread: threading.Thread | None = None
        self._deferred: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._meta: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        """Meta copies of the first call's inputs, for the analysis thread."""
        """The first call's inputs, kept until the analysis beside training has succeeded."""
        self._graph_later: tuple[nn.Module, tuple[Any, ...], dict[str, Any], Analysis] | None = None
        """The private copy, its inputs and its analysis: the graph is captured at close."""
        self._go = threading.Event()
        """Set at the end of the first step (or at close): the analysis beside training begins."""
        self.pacer = Pacer()

    def first_call(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], hooks: Any
    ) -> tuple[Any, ...] | None:
        """On the model's first forward (training thread): meta copies of the inputs go to the
        analysis thread, which waits for :meth:`step_ended`. Returns a RETIME event when the
        analysis had to run here instead."""
        from acquisition.torch.hooks import RETIME

        began = time.perf_counter()
        try:
            meta = meta_inputs((args, kwargs))
        except Exception as exc:  # inputs the pytree cannot map: analyse here, as before
            log.info("nrg: model analysis on the training thread (%r)", exc)
            self.here(args, kwargs, hooks)
            return (id(module), time.perf_counter_ns(), RETIME)
        self._deferred = (args, kwargs)
        self._meta = meta
        if self._thread is None:
            self.expect_first_call()
        log.info(
            "nrg: first forward call: %.1f ms on the training thread; the model analysis runs "
            "beside training from the first step's end",
            (time.perf_counter() - began) * 1e3,
        )
        return None

    def expect_first_call(self) -> None:
        """Start the analysis thread now (at session start): it waits for the first call's
        inputs and the first step's end, so the first step does not wait for a thread to
        start (the OS scheduling it: milliseconds on a loaded machine)."""
        self._thread = threading.Thread(
            target=self._aside_when_ready, name="nrg-torch-analysis", daemon=True
        )
        self._thread.start()

    def _aside_when_ready(self) -> None:
        self._go.wait()
        if self._meta is not None:  # None: no forward call, or analysed on the training thread
            self._aside(*self._meta)

    def step_ended(self) -> None:
        """A step ended (training thread): the analysis beside training may begin."""
        if not self._go.is_set():
            self._go.set()

    def here(self, args: tuple[Any, ...], kwargs: dict[str, Any], hooks: Any) -> None:
        """Analyse the model itself (training thread), without our hooks seeing it."""
        reinstall = hooks.forward_installed
        hooks.remove_forward()
        try:
            self._finish(self._run(args, kwargs, private=None))
        except Warning:
            raise
        except Exception:
            log.exception("nrg: model analysis failed; no graph or FLOPs")
        finally:
            if reinstall:
                hooks.install_forward()

    def late(self, hooks: Any) -> None:
        """The analysis the analysis thread could not do (training thread, at a step end)."""
        self.due = False
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            self.here(*deferred, hooks)

    def wait(self) -> bool:
        """Wait (bounded) for an analysis beside training, capture the graph it left for the
        end of training (the calling thread: training is over); whether one is still due."""
        self._go.set()
        self.pacer.release()  # training is over: full speed
        if self._thread is not None:
            self._thread.join(ANALYSIS_WAIT_S)
            if not self._thread.is_alive():
                self._capture_later()
        return self.due

    def _capture_later(self) -> None:
        later, self._graph_later = self._graph_later, None
        if later is None:
            return
        private, args, kwargs, result = later
        began = time.perf_counter()
        try:
            self.capture = capture_graph(private, args, kwargs, preserve=False)
            if self.graph_path is not None and not write_graph(
                self.graph_path, self.model, self.capture, result.sizes, result.flops, self.tags
            ):
                self.graph_path = None
        except Warning:
            raise
        except Exception:
            log.exception("nrg: model graph capture failed; no graph")
            self.graph_path = None
            return
        log.info(
            "nrg: model graph captured at the session's end in %.3f s", time.perf_counter() - began
        )

    def _aside(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        from acquisition.torch.complexity import meta_copy

        self._go.wait()
        tick = self.pacer.tick
        self.pacer.start()
        began = time.perf_counter()
        try:
            private = meta_copy(unwrap_model(self.model)[0], tick)
            result = self._run(args, kwargs, private=private, graph=False, tick=tick)
            result.seconds = time.perf_counter() - began  # the copy included
        except Exception as exc:
            log.info("nrg: model analysis beside training failed (%r); it runs at a step end", exc)
            self.due = True
            return
        self._deferred = None
        if self.graph:
            self._graph_later = (private, args, kwargs, result)
        self._finish(result)

    def _run(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        private: nn.Module | None,
        graph: bool | None = None,
        tick: Tick | None = None,
    ) -> Analysis:
        return analyse_model(
            self.model,
            args,
            kwargs,
            graph_path=self.graph_path,
            graph=self.graph if graph is None else graph,
            tags=self.tags,
            model_tags=self.model_tags,
            time_ns=self.time_ns,
            private=private,
            tick=tick,
        )

    def _finish(self, result: Analysis) -> None:
        self.capture = result.capture
        if self.graph and self._graph_later is None and not result.graph_written:
            self.graph_path = None
        paced = ""
        if self.pacer.pauses:
            paced = (
                f" ({self.pacer.paused_s:.3f} s of it in {self.pacer.pauses} pauses for training)"
            )
        log.info("nrg: model analysis (sizes, FLOPs, graph) took %.3f s%s", result.seconds, paced)
        self._send(result.points)
