"""Comparing two energy profiles operator by operator: matching by name and input shapes,
differences of time and energy, significance against the error bars, files and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acquisition.point import Point
from acquisition.profiler.compare import (
    NO_ENERGY,
    ComparedOp,
    OpStats,
    compare_profiles,
    format_comparison,
)
from acquisition.profiler.series import build_series
from acquisition.profiler.trace import add_energy, save_trace

T0 = 1_790_000_000_000_000_000
MS = 1_000_000
WATTS = 100.0


def series() -> Any:
    points = [
        Point("rapl", {"socket": "0", "domain": "package"}, {"energy_joules": WATTS * k / 1000},
              T0 + k * MS)
        for k in range(1001)
    ]  # fmt: skip
    return build_series(points)


def trace(ops: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """A trace with cpu ops (name, input dims, start ms, duration ms) on one thread."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start * 1000,
         "dur": dur * 1000, "args": {"Input Dims": dims}}
        for name, dims, start, dur in ops
    ]  # fmt: skip
    tr = {"baseTimeNanoseconds": T0, "traceEvents": events}
    add_energy(tr, series())
    return tr


A = trace(
    [
        ("aten::mm", "[[64, 64], [64, 64]]", 10, 10),
        ("aten::mm", "[[64, 64], [64, 64]]", 30, 10),
        ("aten::mm", "[[8, 8], [8, 8]]", 50, 2),
        ("aten::relu", "[[64, 64]]", 60, 5),
    ]
)
B = trace(
    [
        ("aten::mm", "[[64, 64], [64, 64]]", 10, 4),
        ("aten::mm", "[[64, 64], [64, 64]]", 30, 4),
        ("aten::mm", "[[8, 8], [8, 8]]", 50, 2),
        ("aten::relu", "[[64, 64]]", 60, 5),
        ("aten::to", "[[64, 64]]", 70, 3),
    ]
)


def test_operators_matched_by_name_and_shapes_with_differences() -> None:
    cmp = compare_profiles(A, B)
    ops = {(op.name, op.input_shapes): op for op in cmp.ops}
    big = ops[("aten::mm", "[[64, 64], [64, 64]]")]
    assert big.a is not None and big.b is not None
    assert (big.a.count, big.b.count) == (2, 2)
    assert big.a.energy_j == pytest.approx(WATTS * 0.020)
    assert big.energy_diff_j == pytest.approx(WATTS * (0.008 - 0.020))
    assert big.time_diff_us == pytest.approx(-12_000)
    assert big.a.mean_power_w == pytest.approx(WATTS)
    assert big.significant is True  # constant power: the error bars are 0
    small = ops[("aten::mm", "[[8, 8], [8, 8]]")]
    assert small.energy_diff_j == pytest.approx(0.0, abs=1e-12)
    assert small.significant is False
    only_b = ops[("aten::to", "[[64, 64]]")]
    assert only_b.a is None and only_b.significant is None
    assert cmp.ops[0] is big  # A's operators by energy first
    assert cmp.ops[-1] is only_b
    assert cmp.a_total_j == pytest.approx(WATTS * 0.055)  # the events' extent, 10..65 ms
    assert cmp.b_total_j == pytest.approx(WATTS * 0.063)


def test_significance_against_the_combined_error_bars() -> None:
    a = OpStats("op", "", 1, 1000.0, 1.00, 0.03)
    b = OpStats("op", "", 1, 1000.0, 1.04, 0.04)
    assert ComparedOp("op", "", a, b).energy_error_j == pytest.approx(0.05)
    assert ComparedOp("op", "", a, b).significant is False
    b.energy_j = 1.06
    assert ComparedOp("op", "", a, b).significant is True


def test_files_gzip_and_the_text_table(tmp_path: Path) -> None:
    save_trace(A, tmp_path / "a.json")
    save_trace(B, tmp_path / "b.json.gz")
    cmp = compare_profiles(tmp_path / "a.json", tmp_path / "b.json.gz")
    assert cmp.a_name.endswith("a.json") and cmp.b_name.endswith("b.json.gz")
    text = format_comparison(cmp)
    lines = text.splitlines()
    assert lines[0].startswith("A: ") and lines[1].startswith("B: ")
    assert "ΔEnergy (J)" in lines[2]
    big = next(line for line in lines if line.startswith("aten::mm [[64, 64], [64, 64]]"))
    assert big.rstrip().endswith("*")
    assert "-1.2000" in big


def test_a_trace_without_energy_is_refused(tmp_path: Path) -> None:
    plain = {"baseTimeNanoseconds": T0, "traceEvents": []}
    save_trace(plain, tmp_path / "plain.json")
    with pytest.raises(ValueError) as err:
        compare_profiles(A, tmp_path / "plain.json")
    assert str(err.value) == NO_ENERGY.format(name=str(tmp_path / "plain.json"))


def test_profiler_steps_of_both_profiles_match_whatever_their_numbers() -> None:
    a = trace([("ProfilerStep#3", "", 10, 20), ("ProfilerStep#4", "", 40, 20)])
    b = trace([("ProfilerStep#12", "", 10, 10), ("ProfilerStep#13", "", 40, 10)])
    (op,) = compare_profiles(a, b).ops
    assert op.name == "ProfilerStep*"
    assert op.a is not None and op.b is not None
    assert (op.a.count, op.b.count) == (2, 2)
    assert op.energy_diff_j == pytest.approx(WATTS * (0.020 - 0.040))


def test_comparison_as_json() -> None:
    data = json.loads(json.dumps(compare_profiles(A, B).to_dict()))
    assert data["schema"] == "nrg.profile-compare/1"
    ops = {(op["name"], op["input_shapes"]): op for op in data["ops"]}
    big = ops[("aten::mm", "[[64, 64], [64, 64]]")]
    assert big["a"]["count"] == 2 and big["b"]["energy_j"] == pytest.approx(WATTS * 0.008)
    assert big["energy_diff_j"] == pytest.approx(WATTS * (0.008 - 0.020))
    assert big["significant"] is True
    assert ops[("aten::to", "[[64, 64]]")]["a"] is None
    assert data["window_energy_j"]["a"] == pytest.approx(WATTS * 0.055)


def test_the_command_line_compares_two_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acquisition.cli import main
    from acquisition.report.cli import PROFILE_NEEDS_TWO

    save_trace(A, tmp_path / "a.json")
    save_trace(B, tmp_path / "b.json")
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert main(["compare", "--profile", a, b, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == compare_profiles(a, b).to_dict()
    assert main(["compare", "--profile", a, b]) == 0
    assert capsys.readouterr().out == format_comparison(compare_profiles(a, b))
    assert main(["compare", "--profile", a]) == 2
    assert PROFILE_NEEDS_TWO in capsys.readouterr().err
    assert main(["compare", "--profile", a, str(tmp_path / "missing.json")]) == 2
    assert "cannot read trace" in capsys.readouterr().err
