"""Fixtures for the emonPi tests: real pseudo-terminal pairs and a running collector."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tty
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from acquisition.point import Point
from collectors.emonpi import EmonPiCollector, EmonPiConfig

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "emonpi"
T0_NS = 1_700_000_000_000_000_000
STEP_NS = 5_000_000_000


class StepClock:
    """A clock that advances 5 s on every call: exact timestamps whatever the read chunking."""

    def __init__(self, start_ns: int = T0_NS, step_ns: int = STEP_NS) -> None:
        self.now = start_ns - step_ns
        self.step = step_ns

    def __call__(self) -> int:
        self.now += self.step
        return self.now


class Pty:
    """One pseudo-terminal pair: the test writes the device side (master), the collector opens
    the slave's path with pyserial-asyncio."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        os.set_blocking(self.master, False)
        self.path = os.ttyname(self.slave)
        self.closed = False

    async def write(self, data: bytes, chunk: int = 4096) -> None:
        """Write everything without blocking the loop (the collector reads on the same loop)."""
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.master, view[:chunk])
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            view = view[n:]
            await asyncio.sleep(0)

    def read_available(self) -> bytes:
        """What the collector wrote to the port so far."""
        try:
            return os.read(self.master, 65536)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        """Unplug: close both ends."""
        if not self.closed:
            self.closed = True
            os.close(self.master)
            os.close(self.slave)


@pytest.fixture
def pty_pair() -> Iterator[Pty]:
    pty = Pty()
    yield pty
    pty.close()


async def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``cond`` on the loop; fails the test (not a timing assertion) if it never holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.002)


@dataclass
class Running:
    collector: EmonPiCollector
    points: list[Point] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def stat(self, key: str) -> int | float:
        return self.collector.stats()[key]

    def lines_seen(self) -> int:
        s = self.collector.stats()
        return int(s["lines"] + s["overlong"])


def fast_config(port: str, **options: Any) -> EmonPiConfig:
    """A config for ``port`` that retries within tens of milliseconds."""
    return EmonPiConfig(port=port, reconnect_min=0.02, reconnect_max=0.1, **options)


@contextlib.asynccontextmanager
async def running(config: EmonPiConfig, *, clocks: bool = True) -> AsyncIterator[Running]:
    """Open the collector, run it as a task until the block ends, then cancel and close it."""
    kwargs = {"wall_clock": StepClock(), "mono_clock": StepClock(0)} if clocks else {}
    collector = EmonPiCollector(config, None, **kwargs)
    await collector.open()
    state = Running(collector)
    state.task = asyncio.create_task(collector.run(state.points.append))
    try:
        yield state
    finally:
        state.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await state.task
        await collector.aclose()
        # let the transport's close callbacks run before the loop goes away
        await asyncio.sleep(0.01)
