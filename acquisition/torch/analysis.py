"""The model's one-off analysis: sizes, forward FLOPs and op graph, and where they go.

Runs once per session: at start when example inputs were given, else on the model's first
forward call. Nothing here is on the per-step path.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acquisition.point import Point
from acquisition.torch import complexity
from acquisition.torch.graph import GraphCapture, capture_graph

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Analysis", "analyse_model", "write_graph"]

log = logging.getLogger("acquisition.torch")


@dataclass
class Analysis:
    """What one analysis produced."""

    points: list[Point]
    """``nrg_model`` points, one per module."""
    capture: GraphCapture | None
    graph_written: bool
    seconds: float
    """Wall time the analysis took."""


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
) -> Analysis:
    """Sizes, FLOPs (a failure to count them is logged, not raised) and, with ``graph``, the
    op graph written to ``graph_path``."""
    began = time.perf_counter()
    sizes = complexity.module_sizes(model)
    try:
        flops = complexity.module_flops(model, args, kwargs)
    except Exception as exc:  # a model FlopCounterMode cannot run is still trained
        log.warning("nrg: FLOP counting failed (%s: %s)", type(exc).__name__, exc)
        flops = {}
    capture = None
    written = False
    if graph:
        capture = capture_graph(model, args, kwargs)
        if graph_path is not None:
            written = write_graph(graph_path, model, capture, sizes, flops, tags)
    points = complexity.model_points(sizes, flops, model_tags, time_ns)
    return Analysis(points, capture, written, time.perf_counter() - began)
