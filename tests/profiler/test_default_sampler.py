"""The default path: ``profile(config=PATH)`` runs the agent's own collectors in-process
(:class:`acquisition.sampler.Sampler`) from the agent's TOML, here a RAPL powercap tree at known
power."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from acquisition.profiler import profile
from tests.profiler.power import energy_between, powercap_tree

pytest.importorskip("acquisition.sampler")
torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, record_function  # noqa: E402


def test_config_path_samples_the_configured_rapl_tree(tmp_path: Path) -> None:
    t0 = time.time_ns()
    profiles = {"package-0": [(t0, 30.0)], "dram": [(t0, 6.0)]}
    with powercap_tree(profiles) as root:
        config = tmp_path / "nrg.toml"
        config.write_text(f'[[collectors.rapl]]\nroot = "{root}"\nbackend = "powercap"\n')
        with (
            profile(activities=[ProfilerActivity.CPU], config=config) as prof,
            record_function("sleep"),
        ):
            time.sleep(0.25)
    (sleep,) = [e for e in prof.energy_events() if e.name == "sleep"]
    expected = sum(energy_between(p, sleep.start_ns, sleep.end_ns) for p in profiles.values())
    assert sleep.total_j == pytest.approx(expected, abs=0.004 * 36 + sleep.error_j)
    assert set(sleep.by_source) == {"rapl:package-0", "rapl:dram-0"}
    points = prof.points()
    assert {p.measurement for p in points} == {"rapl"}
    gaps = sorted(b.time_ns - a.time_ns for a, b in zip(points[::2], points[2::2], strict=False))
    assert gaps[len(gaps) // 2] < 30_000_000  # sampled at the profiler's 10 ms, not the agent's 1 s
