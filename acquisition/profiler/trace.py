"""Energy in Chrome trace JSON (the format of ``export_chrome_trace``, read by Perfetto,
chrome://tracing and TensorBoard's trace view).

:func:`add_energy` adds to a trace:

- counter events (``"ph": "C"``) per power source: ``nrg power <source>`` (W, the mean power of
  each sample interval) and ``nrg energy <source>`` (J, cumulative from the trace's first event);
- on every complete (``"ph": "X"``) operator, annotation and kernel event, ``args``
  ``nrg_energy_j``, ``nrg_self_energy_j`` and ``nrg_energy_error_j`` (J; see
  :mod:`acquisition.profiler.energy` for the model);
- a top-level ``"nrg"`` object: schema ``nrg.profile/1``, the sources, the window and each
  thread's and GPU's account (window energy = Σ self energies + outside).

Trace times are ``ts`` (µs, float) from ``baseTimeNanoseconds`` (Unix-epoch ns).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from acquisition.profiler.energy import EnergyResult, Span, compute_energy
from acquisition.profiler.series import EnergySeries

__all__ = [
    "DEVICE_CATEGORIES",
    "ENERGY_ARG",
    "ERROR_ARG",
    "SCHEMA",
    "SELF_ENERGY_ARG",
    "add_energy",
    "load_trace",
    "save_trace",
    "trace_spans",
]

SCHEMA = "nrg.profile/1"
ENERGY_ARG = "nrg_energy_j"
SELF_ENERGY_ARG = "nrg_self_energy_j"
ERROR_ARG = "nrg_energy_error_j"
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_SKIPPED_CATEGORIES = frozenset(
    {"Trace", "ac2g", "cuda_runtime", "cuda_driver", "overhead", "gpu_user_annotation"}
)
"""Events that are no operator of their own: the trace's span itself, flow arrows, runtime calls
(their time is inside the operator that made them), and annotations copied onto the GPU timeline
(they span kernels, which carry the GPU's energy)."""


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A trace file as JSON (``.gz`` decompressed)."""
    p = Path(path)
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    trace: dict[str, Any] = json.loads(raw)
    return trace


def save_trace(trace: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as JSON (gzip-compressed when ``path`` ends in ``.gz``)."""
    data = json.dumps(trace).encode()
    p = Path(path)
    p.write_bytes(gzip.compress(data) if p.suffix == ".gz" else data)


def _base_ns(trace: Mapping[str, Any]) -> int:
    return int(trace.get("baseTimeNanoseconds", 0))


def _track(event: Mapping[str, Any]) -> tuple[str, Hashable] | None:
    if event.get("ph") != "X" or "dur" not in event or "ts" not in event:
        return None
    cat = event.get("cat", "")
    if cat in _SKIPPED_CATEGORIES:
        return None
    if cat in DEVICE_CATEGORIES:
        args = event.get("args") or {}
        return ("gpu", int(args.get("device", event.get("pid", 0))))
    return ("cpu", (event.get("pid"), event.get("tid")))


def trace_spans(trace: Mapping[str, Any]) -> tuple[list[int], list[Span]]:
    """Positions in ``traceEvents`` and spans (Unix-epoch ns) of the events that get energy."""
    base = _base_ns(trace)
    positions: list[int] = []
    spans: list[Span] = []
    for i, event in enumerate(trace.get("traceEvents", ())):
        track = _track(event)
        if track is None:
            continue
        start = base + round(float(event["ts"]) * 1000)
        end = start + round(float(event["dur"]) * 1000)
        positions.append(i)
        spans.append(Span(track, start, end))
    return positions, spans


def _host_pid(trace: Mapping[str, Any]) -> Any:
    for event in trace.get("traceEvents", ()):
        if event.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            return event.get("pid")
    return 0


def _counters(
    trace: Mapping[str, Any], series: Mapping[str, EnergySeries], window: tuple[int, int]
) -> list[dict[str, Any]]:
    """Power and cumulative-energy counter events, from the sample before the window to the one
    after it."""
    base = _base_ns(trace)
    pid = _host_pid(trace)
    out: list[dict[str, Any]] = []
    for name, s in sorted(series.items()):
        start_at = s.at(max(window[0], s.first_ns))
        e0 = start_at[0] if start_at else 0.0
        for i, (t, watts) in enumerate(s.power()):
            if t > window[1]:
                break
            if s.times[i + 1] < window[0]:
                continue
            ts = (t - base) / 1000
            out.append(_counter(pid, f"nrg power {name}", ts, "W", watts))
        for t, joules in zip(s.times, s.joules, strict=True):
            if window[0] <= t <= window[1]:
                ts = (t - base) / 1000
                out.append(_counter(pid, f"nrg energy {name}", ts, "J", joules - e0))
    return out


def _counter(pid: Any, name: str, ts: float, unit: str, value: float) -> dict[str, Any]:
    return {"ph": "C", "cat": "nrg", "name": name, "pid": pid, "ts": ts, "args": {unit: value}}


def _account(result: EnergyResult) -> list[dict[str, Any]]:
    return [
        {
            "track": list(t.track[1]) if isinstance(t.track[1], tuple) else t.track[1],
            "kind": t.track[0],
            "sources": t.sources,
            "window_energy_j": t.window_j,
            "events_self_energy_j": t.events_j,
            "outside_energy_j": t.outside_j,
        }
        for t in result.tracks
    ]


def _window(trace: Mapping[str, Any], spans: list[Span]) -> tuple[int, int] | None:
    """The profiler's recording window: its ``Trace`` event, else the events' extent."""
    base = _base_ns(trace)
    for event in trace.get("traceEvents", ()):
        if event.get("cat") == "Trace" and event.get("ph") == "X":
            start = base + round(float(event["ts"]) * 1000)
            end = start + round(float(event["dur"]) * 1000)
            if spans:
                start = min(start, min(s.start_ns for s in spans))
                end = max(end, max(s.end_ns for s in spans))
            return start, end
    return None


def add_energy(
    trace: dict[str, Any],
    series: Mapping[str, EnergySeries],
    gpu_names: Mapping[int, str] | None = None,
    cpu_scale: float = 1.0,
) -> EnergyResult:
    """Add energy to ``trace`` in place (see the module docstring); the computed energies.
    ``gpu_names``, ``cpu_scale``: see :func:`compute_energy`."""
    positions, spans = trace_spans(trace)
    result = compute_energy(spans, series, _window(trace, spans), gpu_names, cpu_scale)
    events = trace.setdefault("traceEvents", [])
    for pos, energy in zip(positions, result.events, strict=True):
        if energy.total_j is None:
            continue
        args = events[pos].setdefault("args", {})
        args[ENERGY_ARG] = energy.total_j
        args[ERROR_ARG] = energy.error_j
        if energy.self_j is not None:
            args[SELF_ENERGY_ARG] = energy.self_j
    events.extend(_counters(trace, series, result.window))
    trace["nrg"] = {
        "schema": SCHEMA,
        "cpu_scale": cpu_scale,
        "sources": result.sources,
        "window_ns": list(result.window),
        "tracks": _account(result),
        "unmeasured_events": result.unmeasured,
    }
    return result
