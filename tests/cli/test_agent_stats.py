"""The agent's final ``nrg_collect`` point per collector keeps counters cumulative, even when the
plugin clears them in ``aclose()``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest

from acquisition import registry
from acquisition.agent import Agent, default_config
from acquisition.config import parse_config
from acquisition.lineproto import decode_line
from acquisition.point import Point


class ResettingCollector:
    """Counts its reads and, like a careless plugin, clears the count when closed."""

    name: ClassVar[str] = "resetting"

    def __init__(self, config: Any, context: Any) -> None:
        self.reads = 0
        self.five_reads = asyncio.Event()

    async def open(self) -> None:
        pass

    async def collect(self, emit: Any, now_ns: int) -> None:
        self.reads += 1
        if self.reads >= 5:
            self.five_reads.set()
        emit(Point("resetting", {}, {"reads": self.reads}, now_ns))

    async def aclose(self) -> None:
        self.reads = 0

    def stats(self) -> dict[str, int]:
        return {"reads": self.reads}


def resetting_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str = "") -> Agent:
    """An agent ticking the resetting collector every 20 ms into a file, self-stats an hour
    apart; ``extra`` is more config."""
    monkeypatch.setitem(registry.COLLECTORS, "resetting", f"{__name__}:ResettingCollector")
    text = f"""
[agent]
interval = "20ms"
stats_interval = "1h"
state_dir = "{tmp_path}/state"
[[collectors.resetting]]
[[sinks.file]]
path = "{tmp_path}/nrg.lp"
"""
    return Agent(default_config(parse_config(text + extra)))


async def test_final_self_stats_keep_counters_a_plugin_resets_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = resetting_agent(tmp_path, monkeypatch, "[[processors.attribution]]\n")
    await agent.start()
    await agent.collectors[0].instance.five_reads.wait()
    await agent.shutdown()
    points = [decode_line(line) for line in (tmp_path / "nrg.lp").read_text().splitlines()]
    last_read = max(p.fields["reads"] for p in points if p.measurement == "resetting")
    final = [
        p for p in points if p.measurement == "nrg_collect" and p.tags["plugin"] == "resetting"
    ]
    assert len(final) == 1
    assert final[0].fields["reads"] == last_read


async def test_self_stats_ride_on_a_collector_tick_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Self-stats due are published at the end of a collector's tick (no timer of their own
    wakes the agent), in the same wake-up as the tick's points."""
    agent = resetting_agent(tmp_path, monkeypatch)
    seen: list[str] = []
    tick_after_stats = asyncio.Event()

    def record(point: Point) -> None:
        seen.append(point.measurement)
        if point.measurement == "resetting" and "nrg_collect" in seen:
            tick_after_stats.set()

    agent.bus.add_sink(record)
    await agent.start()
    await agent.collectors[0].instance.five_reads.wait()
    assert "nrg_collect" not in seen  # an hour away
    assert agent._stats_due is not None
    agent._stats_due -= 3600  # due now: the next tick publishes them
    await asyncio.wait_for(tick_after_stats.wait(), 5)
    await agent.shutdown()
    first = seen.index("nrg_collect")
    # Right after a tick's point, and before the next tick's.
    assert seen[first - 1] == "resetting"
    assert "resetting" in seen[first:]
