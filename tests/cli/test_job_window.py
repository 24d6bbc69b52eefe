"""A tracked command's window: ``Job.wait(emit)`` hands over the ``nrg_job`` spawn point when the
job runs and the exit point, with the job's status, when it ended."""

from __future__ import annotations

import asyncio
import os
import time

from acquisition.job import Job
from acquisition.point import Point


def test_spawn_and_exit_points_bound_the_command() -> None:
    seen: list[tuple[Point, int]] = []

    async def main() -> int:
        job = Job(["sh", "-c", "sleep 0.2; exit 3"])
        before = time.time_ns()
        await job.start(dict(os.environ))
        code = await job.wait(lambda p: seen.append((p, time.time_ns())))
        assert seen[0][0].time_ns >= before
        return code

    assert asyncio.run(main()) == 3
    (spawn, _), (exit_, emitted) = seen
    assert (spawn.measurement, spawn.fields["event"]) == ("nrg_job", "spawn")
    assert (exit_.fields["event"], exit_.fields["exit_code"]) == ("exit", 3)
    assert spawn.fields["pid"] == exit_.fields["pid"]
    assert exit_.time_ns - spawn.time_ns >= 200_000_000  # the command's own sleep
    assert exit_.time_ns <= emitted
