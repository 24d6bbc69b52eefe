"""Fixtures for the NVML collector tests: a plugin context, a fake /proc, ticks on a fixed clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import FakeNvml

T0_NS = 1_763_884_800_000_000_000
"""Agent time of step 0; step k is ticked at T0_NS + k seconds."""


def write_stat(root: Path, pid: int, ppid: int, start: int, comm: str = "python") -> None:
    """A ``/proc/<pid>/stat`` line as the kernel writes it (52 fields)."""
    fields = ["S", str(ppid), *["0"] * 17, str(start), *["0"] * 32]
    (root / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / "proc" / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


@pytest.fixture
def context(tmp_path: Path) -> PluginContext:
    return PluginContext(
        host="test",
        interval_s=1.0,
        state_dir=tmp_path / "state",
        data_dir=tmp_path / "data",
        runtime_dir=tmp_path / "run",
    )


MakeCollector = Callable[..., tuple[NvmlCollector, FakeNvml]]


@pytest.fixture
def make(context: PluginContext, tmp_path: Path) -> MakeCollector:
    """``make(scenario, environ=None, **config)`` → (collector, fake); proc root is tmp_path."""

    def build(
        scenario: Mapping[str, Any], environ: Mapping[str, str] | None = None, **config: Any
    ) -> tuple[NvmlCollector, FakeNvml]:
        fake = FakeNvml(scenario)
        cfg = NvmlConfig(root=str(tmp_path), **config)
        return NvmlCollector(cfg, context, nvml=fake, environ=environ or {}), fake

    return build


async def tick(collector: NvmlCollector, fake: FakeNvml, step: int) -> list[Point]:
    """Move the fake driver to ``step`` and run one collect at that step's agent time."""
    fake.step = step
    points: list[Point] = []
    await collector.collect(points.append, T0_NS + step * 1_000_000_000)
    return points


def only(points: list[Point], measurement: str, **tags: str) -> list[Point]:
    return [
        p
        for p in points
        if p.measurement == measurement and all(p.tags.get(k) == v for k, v in tags.items())
    ]
