"""The procfs collector against this machine's real /proc, with real process trees.

A python root process forks ``sleep`` and ``sh -c 'sleep & wait'`` (a grandchild), then obeys
commands on stdin (burn CPU, reap a child, exit). psutil's recursive children() is the
independent oracle for which processes make up the tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from acquisition.api import PluginContext
from acquisition.errors import ConfigError, NoData
from acquisition.point import Point
from collectors.procfs import ProcfsCollector, ProcfsConfig

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux procfs")

_ROOT = r"""
import subprocess, sys, time
kids = [subprocess.Popen(["sleep", "120"]), subprocess.Popen(["sh", "-c", "sleep 120 & wait"])]
print(kids[0].pid, kids[1].pid, flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "burn":
        t0 = time.process_time()
        while time.process_time() - t0 < 0.3:
            pass
    elif cmd == "reap":
        kids[0].kill()
        kids[0].wait()
    elif cmd == "quit":
        for k in kids[1:]:
            k.kill()
            k.wait()
        break
    print("done", flush=True)
"""


@dataclass
class Tree:
    root: subprocess.Popen[str]
    sleep_pid: int
    sh_pid: int

    @property
    def pid(self) -> int:
        return self.root.pid

    def command(self, cmd: str) -> None:
        assert self.root.stdin is not None and self.root.stdout is not None
        self.root.stdin.write(cmd + "\n")
        self.root.stdin.flush()
        if cmd == "quit":
            self.root.wait()
        else:
            assert self.root.stdout.readline().strip() == "done"

    def descendants(self) -> set[int]:
        return {p.pid for p in psutil.Process(self.pid).children(recursive=True)}


@pytest.fixture
def tree() -> Iterator[Tree]:
    root = subprocess.Popen(
        [sys.executable, "-c", _ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert root.stdout is not None
    sleep_pid, sh_pid = map(int, root.stdout.readline().split())
    t = Tree(root, sleep_pid, sh_pid)
    # sh forks its sleep asynchronously: wait until the grandchild exists.
    while len(t.descendants()) < 3:
        time.sleep(0.01)
    yield t
    for pid in t.descendants() if root.poll() is None else set():
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    root.kill()
    root.wait()
    for pipe in (root.stdin, root.stdout):
        if pipe is not None:
            pipe.close()


def _context(tmp_path: Path) -> PluginContext:
    return PluginContext(
        host="test", interval_s=1.0, state_dir=tmp_path, data_dir=tmp_path, runtime_dir=tmp_path
    )


async def _opened(tmp_path: Path, **kw: object) -> ProcfsCollector:
    c = ProcfsCollector(ProcfsConfig(**kw), _context(tmp_path))  # type: ignore[arg-type]
    await c.open()
    return c


async def _tick(c: ProcfsCollector) -> list[Point]:
    out: list[Point] = []
    await c.collect(out.append, time.time_ns())
    return out


def _proc(points: list[Point], tree: int, scope: str, pid: int | None = None) -> list[Point]:
    return [
        p
        for p in points
        if p.measurement == "process"
        and p.tags["tree"] == str(tree)
        and p.tags["scope"] == scope
        and (pid is None or p.fields["pid"] == pid)
    ]


def _fds_on(pids: set[int]) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if any(target.startswith(f"/proc/{pid}/") for pid in pids):
            out.append(target)
    return out


async def test_real_tree_found_with_plausible_values(tree: Tree, tmp_path: Path) -> None:
    c = await _opened(tmp_path, pids=[tree.pid], track_self=False)
    try:
        # The first tick's ratios cover the time since open (test_procfs_golden checks them).
        await _tick(c)
        tree.command("burn")  # so that CPU ticks elapse between the two samples
        points = await _tick(c)
    finally:
        await c.aclose()
    members = {tree.pid} | tree.descendants()
    assert len(members) == 4
    pid_points = _proc(points, tree.pid, "pid")
    assert {int(p.fields["pid"]) for p in pid_points} == members
    comms = {int(p.fields["pid"]): p.tags["comm"] for p in pid_points}
    assert comms[tree.sleep_pid] == "sleep" and comms[tree.sh_pid] == "sh"
    for p in pid_points:
        f = p.fields
        assert isinstance(f["rss_bytes"], int) and f["rss_bytes"] > 0
        assert isinstance(f["private_bytes"], int) and f["private_bytes"] > 0
        assert isinstance(f["cpu_seconds"], float) and f["cpu_seconds"] >= 0.0
        assert 0.0 <= f["cpu_utilization_ratio"] <= 1.0  # type: ignore[operator]
        assert f["threads"] == 1
    (desc,) = _proc(points, tree.pid, "descendants")
    (comb,) = _proc(points, tree.pid, "combined")
    assert desc.fields["process_count"] == 3 and comb.fields["process_count"] == 4
    assert comb.fields["rss_bytes"] == sum(p.fields["rss_bytes"] for p in pid_points)  # type: ignore[misc]
    (total,) = [p for p in points if p.measurement == "cpu" and p.tags["cpu"] == "total"]
    assert 0.0 <= total.fields["utilization_ratio"] <= 1.0  # type: ignore[operator]
    cores = {p.tags["cpu"] for p in points if p.measurement == "cpu"}
    assert cores == {"total"} | {f"cpu{i}" for i in range(len(psutil.cpu_times(percpu=True)))}
    (mem,) = [p for p in points if p.measurement == "memory"]
    assert mem.fields["total_bytes"] == psutil.virtual_memory().total


async def test_cpu_burnt_between_ticks_shows_in_the_ratios(tree: Tree, tmp_path: Path) -> None:
    c = await _opened(tmp_path, pids=[tree.pid], track_self=False)
    try:
        before = _proc(await _tick(c), tree.pid, "main")[0].fields["cpu_seconds"]
        tree.command("burn")  # at least 0.3 s of CPU time in the root
        (main,) = _proc(await _tick(c), tree.pid, "main")
    finally:
        await c.aclose()
    f = main.fields
    assert f["cpu_seconds"] - before >= 0.29  # type: ignore[operator]  # ticks round down
    assert 0.0 < f["cpu_utilization_ratio"] <= 1.0  # type: ignore[operator]
    assert 0.0 < f["cpu_busy_share_ratio"] <= 1.0  # type: ignore[operator]
    assert f["cpu_cores"] == pytest.approx(
        f["cpu_utilization_ratio"] * len(psutil.cpu_times(percpu=True))
    )


async def test_exited_child_and_root_are_dropped_and_descriptors_closed(
    tree: Tree, tmp_path: Path
) -> None:
    c = await _opened(tmp_path, pids=[tree.pid], track_self=False)
    try:
        await _tick(c)
        held = _fds_on({tree.sleep_pid})
        assert held  # stat (and children) descriptors are kept open between ticks
        tree.command("reap")
        points = await _tick(c)
        assert _proc(points, tree.pid, "pid", tree.sleep_pid) == []
        assert _proc(points, tree.pid, "descendants")[0].fields["process_count"] == 2
        assert _fds_on({tree.sleep_pid}) == []
        everyone = {tree.pid} | tree.descendants()
        tree.command("quit")
        points = await _tick(c)
        assert [p for p in points if p.measurement == "process"] == []
        assert _fds_on(everyone) == []
        assert [p for p in await _tick(c) if p.measurement == "process"] == []
    finally:
        await c.aclose()


async def test_pids_added_to_the_shared_set_are_tracked(tree: Tree, tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    c = ProcfsCollector(ProcfsConfig(track_self=False), ctx)
    await c.open()
    try:
        assert [p for p in await _tick(c) if p.measurement == "process"] == []
        ctx.status["tracked_pids"].add(tree.pid)  # e.g. the hooks listener learnt a job's pid
        points = await _tick(c)
    finally:
        await c.aclose()
    assert _proc(points, tree.pid, "combined")[0].fields["process_count"] == 4


async def test_the_agent_tracks_itself_by_default(tmp_path: Path) -> None:
    c = await _opened(tmp_path)
    try:
        points = await _tick(c)
    finally:
        await c.aclose()
    (me,) = _proc(points, os.getpid(), "pid", os.getpid())
    assert me.fields["threads"] == psutil.Process().num_threads()


async def test_scan_and_children_find_the_same_tree(tree: Tree, tmp_path: Path) -> None:
    found = []
    for how in ("children", "scan"):
        c = await _opened(tmp_path, pids=[tree.pid], track_self=False, descendants=how)
        try:
            points = await _tick(c)
        finally:
            await c.aclose()
        found.append({p.fields["pid"] for p in _proc(points, tree.pid, "pid")})
    assert found[0] == found[1] == {tree.pid} | tree.descendants()


def _shape(points: list[Point]) -> set[tuple[str, tuple[str, ...], str, tuple[str, ...]]]:
    return {
        (p.measurement, tuple(sorted(p.tags)), p.tags.get("scope", ""), tuple(p.fields))
        for p in points
    }


async def test_psutil_fallback_emits_the_same_points(tree: Tree, tmp_path: Path) -> None:
    shapes, pids = [], []
    for backend in ("procfs", "psutil"):
        c = await _opened(tmp_path, pids=[tree.pid], track_self=False, backend=backend)
        try:
            await _tick(c)
            tree.command("burn")  # so the second tick has CPU deltas
            points = await _tick(c)
        finally:
            await c.aclose()
        shapes.append(_shape(points))
        pids.append({(p.fields["pid"], p.tags["comm"]) for p in _proc(points, tree.pid, "pid")})
    assert shapes[0] == shapes[1]
    assert pids[0] == pids[1]


async def test_missing_proc_and_bad_config(tmp_path: Path) -> None:
    with pytest.raises(NoData):
        await _opened(tmp_path, root=str(tmp_path))
    with pytest.raises(NoData):
        await _opened(tmp_path, root=str(tmp_path), backend="psutil")
    with pytest.raises(NoData):
        await _opened(tmp_path, root=str(tmp_path), backend="procfs")
    for bad in ({"pids": [0]}, {"memory_detail_interval": -1.0}, {"backend": "wmi"}):
        with pytest.raises(ConfigError):
            ProcfsCollector(ProcfsConfig(**bad), _context(tmp_path))


async def test_kept_descriptors_stay_within_the_budget(tree: Tree, tmp_path: Path) -> None:
    c = await _opened(tmp_path, pids=[tree.pid], track_self=False)
    src = c._source
    assert src is not None and hasattr(src, "max_kept")
    members = {tree.pid} | tree.descendants()
    for pid in members:
        src.release(pid)  # what the baseline at open kept
    src.max_kept = 3  # private: a tiny budget; files past it are opened per read
    try:
        for _ in range(3):
            points = await _tick(c)
            assert {int(p.fields["pid"]) for p in _proc(points, tree.pid, "pid")} == members
            assert len(_fds_on(members)) == 3
        tree.command("quit")
        await _tick(c)
        assert _fds_on(members) == []
        assert src._kept == 0  # type: ignore[attr-defined]
    finally:
        await c.aclose()
