"""``Tracker`` against real workloads: a process tree with known allocations (this process and
two children holding known RSS, checked against /proc), RAPL at known power on a powercap tree,
windows, and reading an agent's files instead of sampling."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acquisition.config import parse_config
from acquisition.errors import NrgError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.summary import format_text
from acquisition.tracker import NO_SUCH_WINDOW, NOT_STARTED, Tracker
from tests.answers.fakepower import powercap_tree, stale_s

PACKAGE_W, DRAM_W = 20.0, 4.0
STALE_S = 0.05
"""How stale a reading may be on an idle machine; what was measured under load is added."""
MB = 1_000_000

_CHILD = r"""
import sys, time
block = bytearray(int(sys.argv[1]))
for i in range(0, len(block), 4096):
    block[i] = 1  # touch every page: resident
print("ready", flush=True)
sys.stdin.read()  # hold until the parent closes stdin
"""


def vm_rss(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, from /proc's children lists."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out += [int(child), *descendants(int(child))]
    return out


def threads_waited_s() -> float:
    """Seconds the threads of this process alive now (the sampler's among them) have spent
    runnable but waiting for a CPU so far (take the difference over a span); 0 where the kernel
    keeps no scheduler statistics."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def late_s(root: Path, waited_s: float) -> float:
    """STALE_S, plus the fixture writer's longest gap between rewrites and the time the
    sampling threads waited for a CPU (a reading is stamped before it is read)."""
    return STALE_S + stale_s(root) + waited_s


def process_ticks_after(tracker: Tracker, t_ns: int) -> set[int]:
    return {p.time_ns for p in tracker.points() if p.measurement == "process" and p.time_ns > t_ns}


def rapl_config(root: Path) -> str:
    return f"""
[[collectors.rapl]]
root = "{root}"
backend = "powercap"
[[collectors.procfs]]
memory_detail_interval = "0s"
per_core = true
"""


def test_process_tree_memory_and_energy() -> None:
    """The children start before the tracker: a child being forked briefly shows its parent's
    whole RSS (vfork/fork before exec), a real peak but not the one this test knows."""
    sizes = (120 * MB, 60 * MB)
    parent_block = bytearray(80 * MB)
    for i in range(0, len(parent_block), 4096):
        parent_block[i] = 1
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in sizes
    ]
    for c in children:
        assert c.stdout is not None and c.stdout.readline() == "ready\n"
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        tracker = Tracker(parse_config(rapl_config(root)), interval_s=0.05, ram_unit="megabytes")
        waited0 = threads_waited_s()
        with tracker:
            # the truth while they hold their memory (every descendant: the two children and
            # the fixture's counter writer), then a few ticks of sampling after it
            truth_children = sum(vm_rss(pid) for pid in descendants(os.getpid()))
            truth_main = vm_rss(os.getpid())
            after = time.time_ns()
            deadline = time.monotonic() + 60
            while len(process_ticks_after(tracker, after)) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            late = late_s(root, threads_waited_s() - waited0)
        for c in children:
            c.communicate("")
        s = tracker.summary()
    ram = s.resources["max_ram"]
    assert ram["unit"] == "megabytes"
    assert s.resources["tree"] == str(os.getpid())
    assert ram["descendants"]["total_rss"] == pytest.approx(truth_children / MB, rel=0.05)
    assert ram["descendants"]["total_rss"] > sum(sizes) / MB  # the blocks are in it
    assert ram["main"]["total_rss"] == pytest.approx(truth_main / MB, rel=0.1)
    assert ram["combined"]["total_rss"] >= ram["main"]["total_rss"] + sum(sizes) / MB
    assert ram["combined"]["private_rss"] is not None
    assert s.resources["cpu_utilization"]["system_core_count"] == os.cpu_count()
    # energy: the sources at known power over the tracked span
    watts = PACKAGE_W + DRAM_W
    assert s.energy.total_j == pytest.approx(watts * s.duration_s, abs=2 * watts * late)
    assert s.no_energy_reason is None
    del parent_block


def test_windows_nested_and_energy() -> None:
    with powercap_tree({"package-0": PACKAGE_W}) as root:
        t = Tracker(parse_config(rapl_config(root)), interval_s=0.02, only=["rapl"])
        waited0 = threads_waited_s()
        with t:
            with t.window("train"):
                time.sleep(0.3)
                with t.window("eval"):
                    time.sleep(0.2)
            t.begin_window("tail")
            time.sleep(0.1)
            tail = t.end_window("tail")
            late = late_s(root, threads_waited_s() - waited0)
        s = t.summary()
    names = [w["name"] for w in s.windows]
    assert names == ["train/eval", "train", "tail"]
    for w in s.windows:  # within the stale-counter bound and the window's own error bar
        assert w["energy_j"] == pytest.approx(
            PACKAGE_W * w["duration_s"], abs=2 * PACKAGE_W * late + w["error_j"]
        )
    assert tail.error_j is not None
    assert tail.energy_j == pytest.approx(
        PACKAGE_W * tail.duration_s, abs=2 * PACKAGE_W * late + tail.error_j
    )
    assert s.to_dict()["windows"][0]["name"] == "train/eval"
    assert "Max RAM:" in format_text(s, full=True)
    assert "n/a" not in str(s)


def test_reads_an_agents_files_instead_of_sampling(tmp_path: Path) -> None:
    now = time.time_ns()
    points = []
    for i in range(-20, 100):
        t = now + i * 50_000_000
        seconds = (t - now) / 1e9 + 10
        points.append(
            Point(
                "rapl",
                {"host": "h", "socket": "0", "domain": "package"},
                {"energy_joules": PACKAGE_W * seconds},
                t,
            )
        )
    (tmp_path / "nrg-x.lp").write_text(LineEncoder().encode_many(points))
    t = Tracker(agent_data=tmp_path)
    with t:
        time.sleep(0.3)
    assert t.available == []  # nothing was opened here
    s = t.summary()
    assert s.energy.total_j == pytest.approx(PACKAGE_W * s.duration_s, rel=1e-6)


def test_misuse() -> None:
    t = Tracker(only=["procfs"])
    with pytest.raises(NrgError, match="not running"):
        t.stop()
    assert str(NOT_STARTED)
    with t, pytest.raises(NrgError) as info:
        t.end_window("nope")
    assert str(info.value) == NO_SUCH_WINDOW.format(name="nope")


def test_import_acquisition_stays_light() -> None:
    code = (
        "import sys, acquisition\n"
        "assert 'acquisition.tracker' not in sys.modules\n"
        "assert 'torch' not in sys.modules\n"
        "from acquisition import Tracker\n"
        "assert Tracker.__module__ == 'acquisition.tracker'\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
