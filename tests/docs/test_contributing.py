"""The smallest collector of CONTRIBUTING.md works as printed: through the registry's loader and
the agent's config path, against a captured /proc/loadavg."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from acquisition.api import Collector, PluginContext
from acquisition.config import build_dataclass
from acquisition.errors import NoData
from acquisition.point import Point

ROOT = Path(__file__).resolve().parents[2]


def example_module() -> ModuleType:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, "CONTRIBUTING.md has no python example"
    module = ModuleType("collectors_loadavg_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(blocks[0], "CONTRIBUTING.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def test_the_example_collector_reads_a_captured_loadavg(tmp_path: Path) -> None:
    mod = example_module()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "loadavg").write_text("0.52 0.58 0.59 1/389 12345\n")
    config = build_dataclass(mod.LoadavgConfig, {"root": str(tmp_path)}, "collectors.loadavg")
    context = PluginContext("h", 1.0, tmp_path, tmp_path, tmp_path)
    collector = mod.LoadavgCollector(config, context)
    assert isinstance(collector, Collector)
    out: list[Point] = []

    async def run() -> None:
        await collector.open()
        await collector.collect(out.append, 7)
        await collector.aclose()

    asyncio.run(run())
    assert out == [Point("loadavg", {}, {"load_1m": 0.52, "load_5m": 0.58, "load_15m": 0.59}, 7)]

    absent = mod.LoadavgCollector(mod.LoadavgConfig(root=str(tmp_path / "none")), context)
    with pytest.raises(NoData, match="loadavg not found"):
        asyncio.run(absent.open())
