"""``bench/bench_gpu.py`` stays runnable: its CPU smoke mode runs every section, and without a GPU
the full run says so and exits cleanly."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_gpu.py"

pytestmark = pytest.mark.timeout(600)


def test_smoke_runs_every_section(tmp_path: Path) -> None:
    env = dict(os.environ, NRG_DATA_DIR=str(tmp_path / "data"), NRG_RUNTIME_DIR=str(tmp_path))
    env.pop("NRG_SOCKET", None)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for section in range(1, 7):
        assert f"== {section}." in out, out
    assert "instrument() default" in out and "torch.profiler" in out
    assert "FAILED" not in out and "agent run failed" not in out, out
    assert "\nok: " in out  # the profiler trace was exported
    assert "bench_gpu: done" in out


def test_without_a_gpu_it_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_gpu", bench)
    spec.loader.exec_module(bench)
    assert bench.main([]) == 0
    assert capsys.readouterr().out.strip() == bench.NO_GPU
