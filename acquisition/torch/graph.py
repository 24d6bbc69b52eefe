"""The model's op graph, as a JSON document, and which modules can take backward hooks.

Source: ``torch.export.export(model, args, kwargs, strict=False)`` — for each ``call_function``
node its ATen op (``n.target``), owning module qualnames (``n.meta['nn_module_stack']``, the
same names as ``named_modules()``), and output shape and dtype (``n.meta['val']``, fake
tensors); placeholders are classified by ``ep.graph_signature.input_specs`` (parameter, buffer,
constant, user input). Models that export cannot take (data-dependent control flow, unsupported
ops) fall back to the deprecated ``torch.jit.trace(...).inlined_graph`` (node ``kind()``,
``scopeName()``, value types); the reason for the fallback and every warning the tracer raised
are logged and kept in the document's ``warnings`` list, nothing is suppressed silently.

Document (``format: "nrg-graph/1"``): ``nodes`` is a list of op nodes
``{"id", "kind": "op", "op", "module", "module_stack", "inputs", "outputs"}`` and data nodes
``{"id", "kind": "input"|"parameter"|"buffer"|"constant"|"activation", "shape", "dtype",
"target"?, "producer"?}``; ``inputs``/``outputs`` hold data-node ids; ``outputs`` at the top
level names the graph outputs. Shapes are lists of ints (symbolic sizes as strings).
"""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import acquisition.torch.complexity as complexity

if TYPE_CHECKING:
    from torch import nn

__all__ = ["GraphCapture", "capture_graph", "export_document"]

log = logging.getLogger("acquisition.torch")

FORMAT = "nrg-graph/1"


@dataclass
class GraphCapture:
    """A captured graph document and where it came from."""

    doc: dict[str, Any]
    source: str
    """``"torch.export"``, ``"torch.jit.trace"`` or ``"none"``."""


def _shape(value: Any) -> list[int | str] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    return [int(s) if isinstance(s, int) else str(s) for s in shape]


def _dtype(value: Any) -> str | None:
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _flat_nodes(args: Any) -> list[Any]:
    """The fx Nodes among (nested) node arguments."""
    from torch import fx

    out: list[Any] = []

    def visit(a: Any) -> None:
        if isinstance(a, fx.Node):
            out.append(a)
        elif isinstance(a, list | tuple):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)

    visit(args)
    return out


def _module_stack(node: Any) -> list[str]:
    stack = node.meta.get("nn_module_stack") or {}
    return [str(v[0]) for v in stack.values()]


def _placeholder_kinds(ep: Any) -> dict[str, tuple[str, str | None]]:
    kinds = {}
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        label = {
            "PARAMETER": "parameter",
            "BUFFER": "buffer",
            "CONSTANT_TENSOR": "constant",
            "USER_INPUT": "input",
        }.get(kind, kind.lower())
        name = getattr(spec.arg, "name", None)
        if name is not None:
            kinds[name] = (label, spec.target)
    return kinds


def export_document(ep: Any) -> dict[str, Any]:
    """The graph document of an ``ExportedProgram``."""
    kinds = _placeholder_kinds(ep)
    nodes: list[dict[str, Any]] = []
    graph_outputs: list[str] = []
    tuple_outputs: dict[str, list[str]] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem:
            producer = node.args[0].name
            tuple_outputs.setdefault(producer, []).append(node.name)
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            kind, target = kinds.get(node.name, ("input", None))
            data: dict[str, Any] = {"id": node.name, "kind": kind}
            if target is not None:
                data["target"] = target
            data["shape"], data["dtype"] = _shape(val), _dtype(val)
            nodes.append(data)
        elif node.op == "call_function" and node.target is operator.getitem:
            nodes.append(
                {
                    "id": node.name,
                    "kind": "activation",
                    "producer": "op:" + node.args[0].name,
                    "shape": _shape(val),
                    "dtype": _dtype(val),
                }
            )
        elif node.op == "call_function":
            stack = _module_stack(node)
            outputs = tuple_outputs.get(node.name)
            nodes.append(
                {
                    "id": "op:" + node.name,
                    "kind": "op",
                    "op": str(node.target),
                    "module": stack[-1] if stack else "",
                    "module_stack": stack,
                    "inputs": [a.name for a in _flat_nodes((node.args, node.kwargs))],
                    "outputs": outputs if outputs is not None else [node.name],
                }
            )
            if outputs is None and val is not None:
                nodes.append(
                    {
                        "id": node.name,
                        "kind": "activation",
                        "producer": "op:" + node.name,
                        "shape": _shape(val),
                        "dtype": _dtype(val),
                    }
                )
        elif node.op == "output":
            graph_outputs = [a.name for a in _flat_nodes(node.args)]
    return {"nodes": nodes, "outputs": graph_outputs}


def _jit_document(model: nn.Module, args: tuple[Any, ...]) -> dict[str, Any]:
    import torch

    traced = torch.jit.trace(model, args, check_trace=False)  # type: ignore[no-untyped-call]
    graph = traced.inlined_graph
    nodes: list[dict[str, Any]] = []
    inputs = list(graph.inputs())[1:]  # the first input is the module itself
    for value in inputs:
        nodes.append({"id": value.debugName(), "kind": "input", **_jit_type(value)})
    for node in graph.nodes():
        kind = node.kind()
        if kind == "prim::GetAttr":
            out = node.output()
            if isinstance(out.type(), torch._C.TensorType):
                nodes.append({"id": out.debugName(), "kind": "parameter", **_jit_type(out)})
            continue
        if not kind.startswith("aten::"):
            continue
        scope = node.scopeName()
        stack = [s.removeprefix("__module.") for s in scope.split("/") if s] if scope else []
        outs = list(node.outputs())
        nodes.append(
            {
                "id": "op:" + outs[0].debugName() if outs else "op:" + kind,
                "kind": "op",
                "op": kind,
                "module": stack[-1] if stack else "",
                "module_stack": ["", *stack] if stack and stack[0] != "" else stack,
                "inputs": [v.debugName() for v in node.inputs()],
                "outputs": [v.debugName() for v in outs],
            }
        )
        for out in outs:
            nodes.append(
                {
                    "id": out.debugName(),
                    "kind": "activation",
                    "producer": "op:" + outs[0].debugName(),
                    **_jit_type(out),
                }
            )
    return {"nodes": nodes, "outputs": [v.debugName() for v in graph.outputs()]}


def _jit_type(value: Any) -> dict[str, Any]:
    t = value.type()
    try:
        sizes = t.sizes()
    except (AttributeError, RuntimeError):
        sizes = None
    try:
        dtype = t.scalarType()
    except (AttributeError, RuntimeError):
        dtype = None
    return {"shape": sizes, "dtype": None if dtype is None else str(dtype).lower()}


def capture_graph(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    *,
    preserve: bool = True,
) -> GraphCapture:
    """Export (or trace) ``model(*args, **kwargs)`` without side effects on training state
    (``preserve=False``: a private copy of the model, whose state and the process's random
    number generators are left alone)."""
    import contextlib

    import torch

    def state() -> contextlib.AbstractContextManager[None]:
        return complexity.preserved_state(model) if preserve else contextlib.nullcontext()

    header: dict[str, Any] = {
        "format": FORMAT,
        "torch_version": str(torch.__version__),
        "model": type(model).__qualname__,
        "warnings": [],
    }
    kwargs = dict(kwargs or {})
    try:
        with state():
            ep = torch.export.export(model, args, kwargs=kwargs, strict=False)
    except Exception as exc:  # export raises many types; every one means "use the fallback"
        reason = f"torch.export failed ({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
        log.warning("nrg: %s; falling back to the deprecated torch.jit.trace", reason)
        header["warnings"].append(reason)
    else:
        header["source"] = "torch.export"
        header.update(export_document(ep))
        return GraphCapture(header, "torch.export")
    if kwargs:
        message = "torch.jit.trace cannot pass keyword arguments; no graph recorded"
        log.warning("nrg: %s", message)
        header["warnings"].append(message)
        header.update(source="none", nodes=[], outputs=[])
        return GraphCapture(header, "none")
    try:
        with state(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            doc = _jit_document(model, args)
    except Exception as exc:  # the tracer's failures are as varied as export's
        message = f"torch.jit.trace failed ({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
        log.warning("nrg: %s; no graph recorded", message)
        header["warnings"].append(message)
        header.update(source="none", nodes=[], outputs=[])
        return GraphCapture(header, "none")
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:300]}"
        log.warning("nrg: torch.jit.trace: %s", text)
        header["warnings"].append(text)
    header["source"] = "torch.jit.trace"
    header.update(doc)
    return GraphCapture(header, "torch.jit.trace")
