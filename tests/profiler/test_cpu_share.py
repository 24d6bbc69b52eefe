"""``cpu_share=True``: CPU energy scaled by this process's share of the machine's busy CPU time,
from literal procfs texts, a fixture tree, the energy model, and a live profile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from acquisition.profiler import profile
from acquisition.profiler.energy import compute_energy
from acquisition.profiler.series import build_series
from acquisition.profiler.share import CpuShare, parse_machine_busy, parse_process_cpu
from tests.profiler.power import ProcessRaplSampler, energy_between, powercap_tree
from tests.profiler.test_energy_math import T0, cpu, rapl_points

STAT = "cpu  {user} 5 {system} 90000 300 7 11 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n"
SELF = "4242 (python (x) ) R 1 4242 4242 0 -1 4194304 9 0 0 0 {utime} {stime} 0 0 20 0 3 0\n"


def test_parsers_read_busy_ticks_and_the_process_ticks() -> None:
    # busy = user + nice + system + irq + softirq + steal; idle and iowait left out
    assert (
        parse_machine_busy(STAT.format(user=100, system=40, steal=2)) == 100 + 5 + 40 + 7 + 11 + 2
    )
    # comm may hold spaces and parentheses: fields are counted after the last ")"
    assert parse_process_cpu(SELF.format(utime=30, stime=12)) == 42
    with pytest.raises(ValueError):
        parse_machine_busy("intr 1\n")


def write(root: Path, user: int, system: int, utime: int, stime: int) -> None:
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/stat").write_text(STAT.format(user=user, system=system, steal=0))
    (root / "proc/self/stat").write_text(SELF.format(utime=utime, stime=stime))


def test_share_over_a_fixture_tree(tmp_path: Path) -> None:
    write(tmp_path, user=1000, system=500, utime=100, stime=50)
    share = CpuShare(tmp_path)
    share.start()
    assert share.ratio() is None  # no busy time yet
    write(tmp_path, user=1300, system=600, utime=180, stime=70)  # machine +400, process +100
    assert share.ratio() == pytest.approx(100 / 400)
    (tmp_path / "proc/stat").unlink()
    assert share.ratio() is None


def test_the_energy_model_scales_cpu_sources_only() -> None:
    series = build_series(rapl_points({"package": 40.0, "dram": 8.0}))
    spans = [cpu(0, 100), cpu(10, 30)]
    whole = compute_energy(spans, series, (T0, T0 + 200_000_000))
    quarter = compute_energy(spans, series, (T0, T0 + 200_000_000), cpu_scale=0.25)
    for a, b in zip(whole.events, quarter.events, strict=True):
        assert b.total_j == pytest.approx(0.25 * a.total_j)  # type: ignore[operator]
        assert b.self_j == pytest.approx(0.25 * a.self_j)  # type: ignore[operator]
        assert b.by_source["rapl:package-0"] == pytest.approx(0.25 * a.by_source["rapl:package-0"])
    (track,) = quarter.tracks
    assert track.window_j == pytest.approx(0.25 * 48.0 * 0.2)
    assert track.events_j + track.outside_j == pytest.approx(track.window_j)


def test_a_live_profile_charges_its_share() -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, record_function

    t0 = time.time_ns()
    profiles = {"package-0": [(t0, 30.0)], "dram": [(t0, 6.0)]}
    with (
        powercap_tree(profiles) as root,
        profile(
            activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(root), cpu_share=True
        ) as prof,
        record_function("busy"),
    ):
        torch.ones(8).sum()
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    ratio = prof.cpu_share_ratio()
    assert ratio is not None and 0.0 < ratio <= 1.0
    (busy,) = [e for e in prof.energy_events() if e.name == "busy"]
    whole = sum(energy_between(p, busy.start_ns, busy.end_ns) for p in profiles.values())
    assert busy.total_j == pytest.approx(ratio * whole, abs=0.004 * 36 + busy.error_j)
    steps = prof.step_energies()
    assert steps[0].energy_j == pytest.approx(
        ratio
        * sum(energy_between(p, steps[0].start_ns, steps[0].end_ns) for p in profiles.values()),
        abs=0.004 * 36 + steps[0].error_j,
    )
