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


async def test_final_self_stats_keep_counters_a_plugin_resets_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.COLLECTORS, "resetting", f"{__name__}:ResettingCollector")
    cfg = default_config(
        parse_config(
            f"""
[agent]
interval = "20ms"
stats_interval = "1h"
state_dir = "{tmp_path}/state"
[[collectors.resetting]]
[[sinks.file]]
path = "{tmp_path}/nrg.lp"
[[processors.attribution]]
"""
        )
    )
    agent = Agent(cfg)
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
