"""The energy-aware profiler on torch releases whose ``export_chrome_trace`` differs: it passes on
what it is given and adds no keyword of its own (torch 2.11 has no ``use_python_export``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acquisition.profiler import profile
from tests.profiler.power import ProcessRaplSampler, Profile, powercap_tree

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def rapl_root() -> Iterator[Path]:
    t0 = time.time_ns()
    profiles: dict[str, Profile] = {"package-0": [(t0, 20.0)], "dram": [(t0, 5.0)]}
    with powercap_tree(profiles) as root:
        yield root


def record(rapl_root: Path) -> Any:
    with profile(activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(rapl_root)) as prof:
        a = torch.randn(64, 64)
        for _ in range(10):
            a = torch.tanh(a @ a)
        time.sleep(0.05)
    return prof


def test_export_on_a_torch_without_use_python_export(
    rapl_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = torch.profiler.profile.export_chrome_trace
    seen: list[tuple[Any, ...]] = []

    def export_2_11(self: Any, path: str) -> None:  # torch 2.11's signature
        seen.append((path,))
        original(self, path)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_2_11)
    prof = record(rapl_root)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert len(seen) == 1
    assert any(e.get("name") == "aten::mm" for e in trace["traceEvents"])
    assert trace["nrg"]["steps"] is not None


def test_arguments_reach_this_torchs_export(rapl_root: Path, tmp_path: Path) -> None:
    prof = record(rapl_root)
    with pytest.raises(TypeError):  # a keyword no torch has is not swallowed
        prof.export_chrome_trace(str(tmp_path / "a.json"), no_such_keyword=True)
    prof = record(rapl_root)
    prof.export_chrome_trace(str(tmp_path / "b.json"), use_python_export=False)
    assert json.loads((tmp_path / "b.json").read_text())["traceEvents"]
