"""Two energy profiles side by side, operator by operator (the fp32 vs bf16, eager vs compiled,
before vs after comparison).

Input: two traces written by :meth:`EnergyProfile.export_chrome_trace` (paths, ``.gz`` or not, or
the loaded JSON). Operators are matched by name and input shapes (the trace's ``Input Dims``;
profiler steps ``ProfilerStep#N`` all count as ``ProfilerStep*``);
per operator: calls, total time (µs), total energy (J) with its error bar, mean power (W), and the
difference of B against A. A difference is *significant* when it exceeds the two error bars
combined (root of the sum of squares).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acquisition.profiler.trace import ENERGY_ARG, ERROR_ARG, load_trace, trace_spans

__all__ = [
    "NO_ENERGY",
    "ComparedOp",
    "OpStats",
    "ProfileComparison",
    "compare_profiles",
    "format_comparison",
    "op_stats",
]

NO_ENERGY = (
    "{name} has no nrg energy: export it with acquisition.torch.profile(...)'s "
    "export_chrome_trace or an on_trace_ready handler"
)

TraceLike = str | os.PathLike[str] | Mapping[str, Any]


@dataclass
class OpStats:
    """One operator (name and input shapes) of one profile."""

    name: str
    input_shapes: str
    count: int = 0
    time_us: float = 0.0
    energy_j: float = 0.0
    error_j: float = 0.0
    _error_sq: float = 0.0

    @property
    def mean_power_w(self) -> float | None:
        return self.energy_j / (self.time_us / 1e6) if self.time_us > 0 else None


@dataclass
class ComparedOp:
    name: str
    input_shapes: str
    a: OpStats | None
    b: OpStats | None

    @property
    def energy_diff_j(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return self.b.energy_j - self.a.energy_j

    @property
    def time_diff_us(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return self.b.time_us - self.a.time_us

    @property
    def energy_error_j(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return math.hypot(self.a.error_j, self.b.error_j)

    @property
    def significant(self) -> bool | None:
        """Whether the energy difference exceeds the combined error bars."""
        diff, err = self.energy_diff_j, self.energy_error_j
        if diff is None or err is None:
            return None
        return abs(diff) > err


@dataclass
class ProfileComparison:
    a_name: str
    b_name: str
    ops: list[ComparedOp]
    a_total_j: float
    b_total_j: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: schema ``nrg.profile-compare/1``; times µs, energies J, powers W."""

        def side(stats: OpStats | None) -> dict[str, Any] | None:
            if stats is None:
                return None
            return {
                "count": stats.count,
                "time_us": stats.time_us,
                "energy_j": stats.energy_j,
                "error_j": stats.error_j,
                "mean_power_w": stats.mean_power_w,
            }

        return {
            "schema": "nrg.profile-compare/1",
            "a": self.a_name,
            "b": self.b_name,
            "window_energy_j": {"a": self.a_total_j, "b": self.b_total_j},
            "ops": [
                {
                    "name": op.name,
                    "input_shapes": op.input_shapes,
                    "a": side(op.a),
                    "b": side(op.b),
                    "time_diff_us": op.time_diff_us,
                    "energy_diff_j": op.energy_diff_j,
                    "energy_error_j": op.energy_error_j,
                    "significant": op.significant,
                }
                for op in self.ops
            ],
        }


def _load(trace: TraceLike) -> tuple[str, Mapping[str, Any]]:
    if isinstance(trace, Mapping):
        return "profile", trace
    return os.fspath(trace), load_trace(trace)


def _op_name(name: str) -> str:
    """``ProfilerStep#12`` → ``ProfilerStep*`` (as ``key_averages()`` groups them), so that the
    steps of two profiles match."""
    return "ProfilerStep*" if name.startswith("ProfilerStep#") else name


def op_stats(trace: Mapping[str, Any], name: str = "profile") -> dict[tuple[str, str], OpStats]:
    """Per (operator name, input shapes): calls, time, energy of one trace."""
    if "nrg" not in trace:
        raise ValueError(NO_ENERGY.format(name=name))
    events = trace.get("traceEvents", [])
    positions, _ = trace_spans(trace)
    out: dict[tuple[str, str], OpStats] = {}
    for pos in positions:
        event = events[pos]
        args = event.get("args") or {}
        if ENERGY_ARG not in args:
            continue
        shapes = str(args.get("Input Dims", ""))
        key = (_op_name(str(event.get("name", ""))), shapes)
        stats = out.get(key) or out.setdefault(key, OpStats(*key))
        stats.count += 1
        stats.time_us += float(event["dur"])
        stats.energy_j += float(args[ENERGY_ARG])
        stats._error_sq += float(args.get(ERROR_ARG, 0.0)) ** 2
    for stats in out.values():
        stats.error_j = math.sqrt(stats._error_sq)
    return out


def _window_energy(trace: Mapping[str, Any]) -> float:
    """Energy of the profile's window: its first CPU thread's account, plus each GPU's."""
    tracks = trace["nrg"].get("tracks", [])
    cpu = [t["window_energy_j"] for t in tracks if t["kind"] == "cpu"]
    gpu = [t["window_energy_j"] for t in tracks if t["kind"] == "gpu"]
    return float(max(cpu) if cpu else 0.0) + float(sum(gpu))


def compare_profiles(a: TraceLike, b: TraceLike) -> ProfileComparison:
    """Operators of ``a`` and ``b`` matched by name and input shapes (A's order by energy,
    then operators only B has)."""
    a_name, a_trace = _load(a)
    b_name, b_trace = _load(b)
    sa, sb = op_stats(a_trace, a_name), op_stats(b_trace, b_name)
    keys = sorted(sa, key=lambda k: -sa[k].energy_j)
    keys += sorted((k for k in sb if k not in sa), key=lambda k: -sb[k].energy_j)
    ops = [ComparedOp(k[0], k[1], sa.get(k), sb.get(k)) for k in keys]
    return ProfileComparison(a_name, b_name, ops, _window_energy(a_trace), _window_energy(b_trace))


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_comparison(cmp: ProfileComparison, row_limit: int = 30) -> str:
    """A text table: per operator A's and B's time and energy, the differences, and ``*`` where
    the energy difference exceeds the error bars."""
    head = ["Name", "Calls A", "Calls B", "Time A (ms)", "Time B (ms)", "ΔTime (ms)"]
    head += ["Energy A (J)", "Energy B (J)", "ΔEnergy (J)", "± (J)", "Power A (W)", "Power B (W)"]
    head += ["sig."]
    rows: list[Sequence[str]] = [head]
    for op in cmp.ops[:row_limit]:
        a, b = op.a, op.b
        diff_t = op.time_diff_us
        rows.append(
            [
                op.name if not op.input_shapes else f"{op.name} {op.input_shapes}",
                _num(a.count if a else None, "d"),
                _num(b.count if b else None, "d"),
                _num(a.time_us / 1e3 if a else None, ".3f"),
                _num(b.time_us / 1e3 if b else None, ".3f"),
                _num(diff_t / 1e3 if diff_t is not None else None, "+.3f"),
                _num(a.energy_j if a else None, ".4f"),
                _num(b.energy_j if b else None, ".4f"),
                _num(op.energy_diff_j, "+.4f"),
                _num(op.energy_error_j, ".4f"),
                _num(a.mean_power_w if a else None, ".2f"),
                _num(b.mean_power_w if b else None, ".2f"),
                {True: "*", False: "", None: "-"}[op.significant],
            ]
        )
    width = [max(len(r[i]) for r in rows) for i in range(len(head))]
    width[0] = min(width[0], 60)
    lines = [f"A: {cmp.a_name}", f"B: {cmp.b_name}"]
    for r in rows:
        name = r[0] if len(r[0]) <= width[0] else r[0][: width[0] - 3] + "..."
        cells = [name.ljust(width[0])] + [
            c.rjust(w) for c, w in zip(r[1:], width[1:], strict=False)
        ]
        lines.append("  ".join(cells).rstrip())
    lines.append(
        f"Window energy: A {cmp.a_total_j:.4f} J, B {cmp.b_total_j:.4f} J "
        f"({cmp.b_total_j - cmp.a_total_j:+.4f} J); * = difference beyond the error bars"
    )
    return "\n".join(lines) + "\n"
