"""Property test of descendant discovery on generated process forests.

Hypothesis draws a forest (pid, parent, starttime; some children "started" before their parent,
as a reused pid's leftovers would look) and which pids are tracked. The tree is written as a
procfs directory (real captured file formats, see build_fixtures.py); the collector's ``scope=pid``
points of each tree must be exactly the members an independent recursive definition gives, with
the children files and with the ppid scan alike. A process belongs to one tree only: a tracked pid
below another tracked root starts its own tree, and the trees partition the tracked processes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.procfs import ProcfsCollector, ProcfsConfig
from tests.procfs.build_fixtures import CPU0, MEM0, T_SLEEP, process, system

Forest = dict[int, tuple[int, int]]  # pid -> (ppid, starttime)


@st.composite
def forests(draw: st.DrawFn) -> tuple[Forest, list[int], bool]:
    """A forest, the tracked pids, and whether each child is listed under two of its parent's
    threads (as when it moves from one to the other while they are read)."""
    pids = draw(st.lists(st.integers(100, 999), min_size=1, max_size=12, unique=True))
    forest: Forest = {}
    for i, pid in enumerate(pids):
        parent = draw(st.integers(-1, i - 1))
        ppid = 1 if parent < 0 else pids[parent]
        forest[pid] = (ppid, draw(st.integers(0, 50)))
    tracked = draw(st.lists(st.sampled_from(pids), min_size=1, max_size=3, unique=True))
    return forest, tracked, draw(st.booleans())


def members(forest: Forest, root: int, tracked: frozenset[int] = frozenset()) -> set[int]:
    """The root and, recursively, every child of a member that did not start before it and is
    not itself a tracked root (that one is its own tree)."""
    out = {root}
    for pid, (ppid, start) in forest.items():
        if ppid == root and pid != root and start >= forest[root][1] and pid not in tracked:
            out |= members(forest, pid, tracked)
    return out


def _write(base: Path, forest: Forest, twice: bool) -> None:
    system(base, CPU0, MEM0, forks=1)
    for pid, (ppid, start) in forest.items():
        kids = [c for c, (pp, _) in forest.items() if pp == pid]
        threads = {pid: kids, pid + 1000: kids} if twice else {pid: kids}  # tids above any pid
        process(base, T_SLEEP, pid, f"p{pid}", ppid, 1, 1, start, 10, children=threads)


async def _trees(base: Path, tracked: list[int], descendants: str) -> dict[str, list[int]]:
    """Per tree, the pids of its ``scope=pid`` points, sorted (a pid twice: a member counted
    twice)."""
    ctx = PluginContext(host="t", interval_s=1.0, state_dir=base, data_dir=base, runtime_dir=base)
    config = ProcfsConfig(
        root=str(base),
        pids=tracked,
        track_self=False,
        memory_detail=False,
        descendants=descendants,  # type: ignore[arg-type]
    )
    c = ProcfsCollector(config, ctx, clock_ticks=100, page_size=4096)
    points: list[Point] = []
    await c.open()
    try:
        await c.collect(points.append, 1)
    finally:
        await c.aclose()
    out: dict[str, list[int]] = {}
    for p in points:
        if p.measurement == "process" and p.tags["scope"] == "pid":
            out.setdefault(p.tags["tree"], []).append(int(p.fields["pid"]))
    return {tree: sorted(pids) for tree, pids in out.items()}


@settings(max_examples=60, deadline=None)
@given(forests())
@example(({500: (1, 0), 600: (500, 1), 700: (600, 2)}, [500], True))  # a chain, listed twice
async def test_collector_finds_exactly_the_descendants(
    case: tuple[Forest, list[int], bool],
) -> None:
    """Guards: each tree holds exactly its members, each once (a child listed under two of its
    parent's threads too), by the children files and by the scan alike."""
    forest, tracked, twice = case
    want = {str(r): sorted(members(forest, r, frozenset(tracked))) for r in tracked}
    every = [pid for tree in want.values() for pid in tree]
    assert len(every) == len(set(every)), "the oracle's trees overlap"
    base = Path(tempfile.mkdtemp(prefix="nrg-forest-"))
    try:
        _write(base, forest, twice)
        assert await _trees(base, tracked, "children") == want
        assert await _trees(base, tracked, "scan") == want
    finally:
        shutil.rmtree(base)


async def test_a_process_back_in_a_tree_takes_its_own_instance_not_one_it_had() -> None:
    """A notebook kernel (200) under a tracked Jupyter (100) is its own tree while its job is
    connected (its pid tracked), then back in Jupyter's: the ``instance`` it had there before
    went meanwhile to another kernel (300) of the same name, so it takes a free one. Two
    processes with one instance would write the same series, one overwriting the other."""
    base = Path(tempfile.mkdtemp(prefix="nrg-instances-"))
    try:
        ctx = PluginContext(
            host="t", interval_s=1.0, state_dir=base, data_dir=base, runtime_dir=base
        )
        config = ProcfsConfig(root=str(base), pids=[100], track_self=False, memory_detail=False)
        c = ProcfsCollector(config, ctx, clock_ticks=100, page_size=4096)
        tracked: set[int] = ctx.status["tracked_pids"]
        instances: list[dict[int, str]] = []

        def write(forks: int, kernels: list[int]) -> None:
            system(base, CPU0, MEM0, forks=forks)
            process(base, T_SLEEP, 100, "jupyter", 1, 1, 1, 10, 10, children={100: kernels})
            for pid in kernels:
                process(base, T_SLEEP, pid, "python3", 100, 1, 1, 20, 10)

        async def tick(forks: int, kernels: list[int]) -> None:
            write(forks, kernels)
            points: list[Point] = []
            await c.collect(points.append, len(instances) + 1)
            instances.append(
                {
                    int(p.fields["pid"]): p.tags["instance"]
                    for p in points
                    if p.tags.get("scope") == "pid" and p.tags["tree"] == "100"
                }
            )

        write(1, [200])
        await c.open()
        try:
            await tick(1, [200])  # the kernel in Jupyter's tree
            tracked.add(200)  # its job connects: a tree of its own
            await tick(2, [200, 300])  # another kernel starts meanwhile
            tracked.discard(200)  # the job disconnects: back in Jupyter's tree
            await tick(3, [200, 300])
        finally:
            await c.aclose()
        assert instances[0] == {100: "0", 200: "0"}
        assert instances[1] == {100: "0", 300: "0"}
        assert instances[2] == {100: "0", 200: "1", 300: "0"}
    finally:
        shutil.rmtree(base)
