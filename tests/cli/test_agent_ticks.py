"""The agent's collectors tick on one grid (``[agent] shared_ticks``): their ticks fall in the
same wake-up of the event loop instead of one wake-up each."""

from __future__ import annotations

from pathlib import Path

import pytest

from acquisition import registry
from acquisition.agent import Agent, default_config
from acquisition.config import parse_config
from acquisition.running import CollectorRunner


def _agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_extra: str) -> Agent:
    monkeypatch.setitem(
        registry.COLLECTORS, "resetting", "tests.cli.test_agent_stats:ResettingCollector"
    )
    text = f"""
[agent]
interval = "20ms"
stats_interval = "1h"
state_dir = "{tmp_path}/state"
{agent_extra}
[[collectors.resetting]]
[[collectors.resetting]]
interval = "60ms"
[[sinks.file]]
path = "{tmp_path}/nrg.lp"
"""
    return Agent(default_config(parse_config(text)))


@pytest.mark.parametrize("extra", ["", "shared_ticks = true"])
async def test_collectors_start_on_one_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str
) -> None:
    agent = _agent(tmp_path, monkeypatch, extra)
    await agent.start()
    try:
        runners = [c.runner for c in agent.collectors]
        assert len(runners) == 2
        assert all(isinstance(r, CollectorRunner) for r in runners)
        firsts = {r.first_ns for r in runners if isinstance(r, CollectorRunner)}
        assert len(firsts) == 1 and None not in firsts
    finally:
        await agent.shutdown()


async def test_shared_ticks_false_starts_each_grid_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(tmp_path, monkeypatch, "shared_ticks = false")
    await agent.start()
    try:
        assert [getattr(c.runner, "first_ns", 0) for c in agent.collectors] == [None, None]
    finally:
        await agent.shutdown()
