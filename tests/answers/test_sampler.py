"""The in-process sampler: real collectors (procfs on this machine's /proc, RAPL on a powercap
tree driven at known powers) on the sampler's own thread and loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from acquisition.agent import Agent, default_config
from acquisition.config import parse_config
from acquisition.errors import ConfigError
from acquisition.point import Point
from acquisition.registry import QUICK_CHECKS
from acquisition.sampler import NOT_STARTED, UNKNOWN_COLLECTOR, Sampler
from tests.answers.fakepower import powercap_tree

PACKAGE_W = 20.0
DRAM_W = 4.0
STALE_S = 0.05
"""How stale a counter file may be when read under load (the writer rewrites it every ~1 ms)."""


def rapl_config(root: Path, extra: str = "") -> str:
    return f"""
[agent]
host = "box"
run = "r1"
[[collectors.rapl]]
root = "{root}"
backend = "powercap"
{extra}
"""


def wait_for(sampler: Sampler, measurement: str, n: int) -> None:
    deadline = time.monotonic() + 60
    while sum(p.measurement == measurement for p in sampler.snapshot()) < n:
        assert time.monotonic() < deadline, f"no {n} {measurement} points in 60 s"
        time.sleep(0.01)


def energy_between(points: list[Point], domain: str) -> tuple[float, float]:
    """(joules, seconds) between the first and last reading of one RAPL domain."""
    series = [p for p in points if p.measurement == "rapl" and p.tags.get("domain") == domain]
    first, last = series[0], series[-1]
    joules = float(last.fields["energy_joules"]) - float(first.fields["energy_joules"])
    return joules, (last.time_ns - first.time_ns) / 1e9


def test_rapl_energy_is_power_times_time() -> None:
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        sampler = Sampler(parse_config(rapl_config(root)), interval_s=0.02)
        sampler.start()
        assert sampler.available == ["rapl"]
        assert sampler.unavailable == {}
        wait_for(sampler, "rapl", 2 * 25)
        points = sampler.stop()
    for domain, watts in (("package", PACKAGE_W), ("dram", DRAM_W)):
        joules, seconds = energy_between(points, domain)
        assert seconds > 0.4
        assert joules == pytest.approx(watts * seconds, abs=2 * watts * STALE_S)
    assert {p.tags["host"] for p in points} == {"box"}
    assert {p.tags["run"] for p in points} == {"r1"}


def test_points_in_arrival_order_and_snapshot_is_a_prefix() -> None:
    with (
        powercap_tree({"package-0": PACKAGE_W}) as root,
        Sampler(parse_config(rapl_config(root)), interval_s=0.01) as sampler,
    ):
        wait_for(sampler, "rapl", 10)
        early = sampler.snapshot()
        wait_for(sampler, "rapl", len(early) + 10)
        final = sampler.stop()
    assert final[: len(early)] == early
    assert len(final) > len(early)
    package = [p.time_ns for p in final if p.tags.get("domain") == "package"]
    assert package == sorted(package)


def test_only_picks_collectors_and_reports_unavailable(tmp_path: Path) -> None:
    sampler = Sampler(parse_config(rapl_config(tmp_path)), only=["rapl", "procfs"])
    sampler.start()
    try:
        assert sampler.available == ["procfs"]
        assert set(sampler.unavailable) == {"rapl"}
        assert "powercap" in sampler.unavailable["rapl"]
        wait_for(sampler, "cpu", 1)
    finally:
        points = sampler.stop()
    assert {p.measurement for p in points} >= {"memory", "process"}
    assert not any(p.measurement == "rapl" for p in points)


def test_embedded_default_never_runs_hooks() -> None:
    with Sampler(interval_s=0.05) as sampler:
        wait_for(sampler, "memory", 1)
        assert "procfs" in sampler.available
        assert "hooks" not in sampler.available
        assert "hooks" not in sampler.unavailable
        # every collector of the embedded default is accounted for, one way or the other
        assert set(sampler.available) | set(sampler.unavailable) == {
            "procfs",
            "rapl",
            "nvml",
            "emonpi",
        }


def test_unknown_collector_name() -> None:
    with pytest.raises(ConfigError) as info:
        Sampler(only=["rapel"])
    assert str(info.value).startswith(UNKNOWN_COLLECTOR.split("{")[0])
    assert "rapel" in str(info.value)


def test_bad_plugin_option_raises_from_start(tmp_path: Path) -> None:
    sampler = Sampler(parse_config(rapl_config(tmp_path, 'colour = "red"')))
    with pytest.raises(ConfigError, match="colour"):
        sampler.start()
    assert not sampler.running


def test_stop_before_start() -> None:
    with pytest.raises(RuntimeError, match=NOT_STARTED):
        Sampler(only=["procfs"]).stop()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="interval_s"):
        Sampler(interval_s=0)


def test_in_process_reasons_are_the_agents(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where a source is absent (no driver, no powercap, no serial port: the device files the
    agent looks at, made absent here whatever this host has), the in-process sampler says why
    in the agent's words."""
    absent = {
        "rapl": "no powercap zones, no MSR device, no power PMU",
        "nvml": "no NVIDIA driver here (none of /dev/nvidiactl exists)",
        "emonpi": "no serial port configured and none of /dev/ttyAMA0 exists",
    }
    for name, reason in absent.items():
        monkeypatch.setitem(QUICK_CHECKS, name, lambda reason=reason: reason)
    monkeypatch.setenv("NRG_STATE_DIR", str(tmp_path))
    agent = Agent(default_config(parse_config("", "<embedded default>")))
    asyncio.run(agent.open_collectors(streams=False))
    by_agent = {u.label: u.reason for u in agent.state.unavailable}
    sampler = Sampler(only=list(absent))
    sampler.start()
    sampler.stop()
    assert sampler.unavailable == {name: by_agent[name] for name in absent} == absent


def test_a_stopped_sampler_ends_on_a_reading() -> None:
    """``stop()`` takes one last reading of each collector: a span that ends between two ticks
    ends on a reading, not up to an interval after the last one."""
    with powercap_tree({"package-0": PACKAGE_W}) as root:
        sampler = Sampler(parse_config(rapl_config(root)), interval_s=30.0)
        sampler.start()
        # The first tick, at start. Not its point: a counter read twice within its ~1 ms
        # update writes nothing until it moves (the advancing rule), here the next tick, 30 s on.
        deadline = time.monotonic() + 60
        while sampler._runners[0].stats.runs < 1:
            assert time.monotonic() < deadline, "no first tick in 60 s"
            time.sleep(0.01)
        time.sleep(0.5)
        stopping = time.time_ns()
        points = sampler.stop()
    package = [p for p in points if p.tags.get("domain") == "package"]
    # The first tick's reading(s) at start (a series may also begin with its last still
    # reading), then the last reading at stop: nothing in between at a 30 s interval.
    assert len(package) in (2, 3)
    assert package[-2].time_ns < stopping - 400_000_000
    assert package[-1].time_ns >= stopping
    joules, seconds = energy_between(points, "package")
    assert seconds >= 0.5
    assert joules == pytest.approx(PACKAGE_W * seconds, abs=2 * PACKAGE_W * STALE_S)
