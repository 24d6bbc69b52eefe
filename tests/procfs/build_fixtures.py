"""Derive the golden procfs scenarios from the files captured on this machine.

Each scenario under tests/fixtures/procfs/<name>/ has ``step0/proc/...`` (and ``step1`` ...):
real files from ``_captured/`` (see capture_procfs.py) with the values the scenario needs edited
in place: pid, comm, ppid, utime, stime, num_threads, starttime and rss of ``stat``, the cpu lines
of ``/proc/stat``, a few ``/proc/meminfo`` lines, ``smaps_rollup`` sizes. Every other byte stays
as captured. ``expected.lp`` and ``scenario.toml`` beside them are written by hand.

Run after changing a scenario: ``.venv/bin/python -m tests.procfs.build_fixtures``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "procfs"
CAPTURED = FIXTURES / "_captured" / "proc"
# Captured templates: a multi-threaded python root, a sleep, a sh.
T_PYTHON, T_SLEEP, T_SH = 19243, 19245, 19247

# System counters shared by most scenarios (USER_HZ 100, two CPUs, one second per step).
CPU0 = {
    "cpu": [10000, 0, 2000, 40000, 500, 0, 100, 0, 0, 0],
    "cpu0": [5000, 0, 1000, 20000, 250, 0, 50, 0, 0, 0],
    "cpu1": [5000, 0, 1000, 20000, 250, 0, 50, 0, 0, 0],
}
CPU1 = {
    "cpu": [10090, 0, 2015, 40080, 505, 0, 105, 5, 20, 0],
    "cpu0": [5030, 0, 1010, 20055, 255, 0, 50, 0, 0, 0],
    "cpu1": [5060, 0, 1005, 20025, 250, 0, 55, 5, 20, 0],
}
# MemTotal, MemFree, MemAvailable, SwapTotal, SwapFree in kB.
MEM0 = (16000000, 10000000, 12000000, 1000000, 1000000)
MEM1 = (16000000, 9000000, 11000000, 1000000, 900000)


def proc_stat(cpus: dict[str, list[int]], forks: int) -> bytes:
    lines = (CAPTURED / "stat").read_bytes().split(b"\n")
    rest = [
        f"processes {forks}".encode() if ln.startswith(b"processes ") else ln
        for ln in lines
        if not ln.startswith(b"cpu")
    ]
    head = [
        (f"{name}  " if name == "cpu" else f"{name} ").encode() + " ".join(map(str, v)).encode()
        for name, v in cpus.items()
    ]
    return b"\n".join(head + rest)


def meminfo(values: tuple[int, int, int, int, int]) -> bytes:
    keys = (b"MemTotal", b"MemFree", b"MemAvailable", b"SwapTotal", b"SwapFree")
    out = []
    for line in (CAPTURED / "meminfo").read_bytes().split(b"\n"):
        key = line.partition(b":")[0]
        if key in keys:
            v = values[keys.index(key)]
            line = key + b":" + f"{v} kB".encode().rjust(len(line) - len(key) - 1)
        out.append(line)
    return b"\n".join(out)


def pid_stat(
    template: int,
    pid: int,
    comm: str,
    ppid: int,
    utime: int,
    stime: int,
    start: int,
    rss: int,
    threads: int = 1,
) -> bytes:
    data = (CAPTURED / str(template) / "stat").read_bytes()
    rest = data[data.rindex(b")") + 2 :].split(b" ")
    for index, value in ((1, ppid), (11, utime), (12, stime), (17, threads), (19, start)):
        rest[index] = str(value).encode()
    rest[21] = str(rss).encode()
    return f"{pid} ({comm}) ".encode() + b" ".join(rest)


def smaps_rollup(template: int, **kb: int) -> bytes:
    out = []
    for line in (CAPTURED / str(template) / "smaps_rollup").read_bytes().split(b"\n"):
        key = line.partition(b":")[0].decode()
        if key in kb:
            line = f"{key}:".encode() + f"{kb[key]} kB".encode().rjust(len(line) - len(key) - 1)
        out.append(line)
    return b"\n".join(out)


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def system(
    step: Path,
    cpus: dict[str, list[int]],
    mem: tuple[int, int, int, int, int],
    forks: int | None = None,
) -> None:
    """/proc/stat and /proc/meminfo; the fork counter (``processes``) grows by 10 per step
    unless given."""
    if forks is None:
        forks = 5000 + 10 * int(step.name.removeprefix("step"))
    write(step / "proc" / "stat", proc_stat(cpus, forks))
    write(step / "proc" / "meminfo", meminfo(mem))


def process(
    step: Path,
    template: int,
    pid: int,
    comm: str,
    ppid: int,
    utime: int,
    stime: int,
    start: int,
    rss: int,
    children: dict[int, list[int]] | None = None,
    smaps: dict[str, int] | None = None,
    statm: bool = True,
    children_files: bool = True,
) -> None:
    """One /proc/<pid> directory; ``children`` maps tid -> child pids (default: one thread)."""
    d = step / "proc" / str(pid)
    tids = children if children is not None else {pid: []}
    write(d / "stat", pid_stat(template, pid, comm, ppid, utime, stime, start, rss, len(tids)))
    write(d / "status", (CAPTURED / str(template) / "status").read_bytes())
    if statm:
        write(d / "statm", (CAPTURED / str(template) / "statm").read_bytes())
    if smaps is not None:
        write(d / "smaps_rollup", smaps_rollup(template, **smaps))
    for tid, kids in tids.items():
        tstat = pid_stat(template, tid, comm, ppid, utime, stime, start, rss, len(tids))
        write(d / "task" / str(tid) / "stat", tstat)
        if children_files:
            write(d / "task" / str(tid) / "children", "".join(f"{k} " for k in kids).encode())


def smaps(
    private_clean: int, private_dirty: int, shared_clean: int, pss: int, swap: int
) -> dict[str, int]:
    return {
        "Private_Clean": private_clean,
        "Private_Dirty": private_dirty,
        "Shared_Clean": shared_clean,
        "Shared_Dirty": 0,
        "Pss": pss,
        "Swap": swap,
        "Rss": private_clean + private_dirty + shared_clean,
    }


def two_ticks_cpu_and_memory(base: Path) -> None:
    system(base / "step0", CPU0, MEM0)
    system(base / "step1", CPU1, MEM1)


def offline_cpu(base: Path) -> None:
    system(base / "step0", CPU0, MEM0)
    # cpu1 goes offline: its line disappears and the aggregate keeps its frozen counters.
    step1 = {
        "cpu": [10030, 0, 2010, 40055, 505, 0, 100, 0, 0, 0],
        "cpu0": [5030, 0, 1010, 20055, 255, 0, 50, 0, 0, 0],
    }
    system(base / "step1", step1, MEM0)
    # cpu1 is back: it has no previous sample at step1, so no cpu1 point at step2.
    step2 = {
        "cpu": [10060, 0, 2020, 40210, 510, 0, 100, 0, 0, 0],
        "cpu0": [5060, 0, 1020, 20110, 260, 0, 50, 0, 0, 0],
        "cpu1": [5000, 0, 1000, 20100, 250, 0, 50, 0, 0, 0],
    }
    system(base / "step2", step2, MEM0)


def tree_with_descendants(base: Path) -> None:
    s0, s1 = base / "step0", base / "step1"
    system(s0, CPU0, MEM0)
    system(s1, CPU1, MEM1)
    for step in (s0, s1):
        (step / "proc").mkdir(parents=True, exist_ok=True)
        (step / "proc" / "self").symlink_to("4242")
        # An unrelated process: never part of the tree.
        process(step, T_SLEEP, 777, "sleep", 1, 5, 5, 50, 100)
    process(
        s0,
        T_PYTHON,
        4242,
        "python",
        4000,
        300,
        100,
        100000,
        3000,
        children={4242: [4250], 4243: [4255]},
        smaps=smaps(0, 5000, 6000, 8000, 0),
    )
    process(
        s0,
        T_SH,
        4250,
        "sh",
        4242,
        10,
        5,
        100010,
        400,
        children={4250: [4260]},
        smaps=smaps(40, 120, 1400, 300, 0),
    )
    process(
        s0,
        T_PYTHON,
        4255,
        "pt_data_worker",
        4242,
        200,
        50,
        100020,
        2000,
        smaps=smaps(0, 3000, 5000, 5500, 100),
    )
    process(s0, T_SLEEP, 4260, "sleep", 4250, 0, 1, 100030, 420, smaps=smaps(0, 100, 1500, 250, 0))
    # step1: smaps_rollup changed, but 1 s < memory_detail_interval: the last known values stay.
    process(
        s1,
        T_PYTHON,
        4242,
        "python",
        4000,
        325,
        105,
        100000,
        3100,
        children={4242: [4250], 4243: [4255]},
        smaps=smaps(0, 6000, 6000, 9000, 0),
    )
    process(
        s1,
        T_SH,
        4250,
        "sh",
        4242,
        10,
        6,
        100010,
        400,
        children={4250: [4260]},
        smaps=smaps(40, 220, 1400, 400, 0),
    )
    process(
        s1,
        T_PYTHON,
        4255,
        "pt_data_worker",
        4242,
        245,
        55,
        100020,
        2500,
        children={4255: [4280]},
        smaps=smaps(0, 4000, 5000, 6500, 100),
    )
    process(s1, T_SLEEP, 4260, "sleep", 4250, 0, 1, 100030, 420, smaps=smaps(0, 200, 1500, 350, 0))
    # Born during the interval: all of its CPU time counts for it.
    process(s1, T_SLEEP, 4280, "sleep", 4255, 8, 2, 100150, 300, smaps=smaps(0, 200, 1000, 400, 0))


def pid_reused_between_ticks(base: Path) -> None:
    s0, s1 = base / "step0", base / "step1"
    system(s0, CPU0, MEM0)
    system(s1, CPU1, MEM1)
    process(s0, T_PYTHON, 4242, "python", 1, 80, 20, 200000, 1000, children={4242: [4250, 4256]})
    process(s0, T_PYTHON, 4250, "worker", 4242, 50, 10, 200100, 500)
    # Listed as a child, but started before the root: a reused pid, not a descendant.
    process(s0, T_SLEEP, 4256, "old", 4242, 1, 1, 150000, 100)
    process(s0, T_SLEEP, 5000, "trainer", 1, 40, 10, 3000, 800)
    process(s1, T_PYTHON, 4242, "python", 1, 100, 20, 200000, 1000, children={4242: [4250, 4257]})
    # pid 4250 now belongs to a new process (later starttime): a new child, not the old worker.
    process(s1, T_SLEEP, 4250, "sleep", 4242, 3, 1, 200500, 200)
    # Still listed, but reparented since: not a descendant.
    process(s1, T_SLEEP, 4257, "orphan", 1, 0, 0, 200300, 100)
    # The tracked root 5000 exited and its pid was reused: the tree is no longer followed.
    process(s1, T_SLEEP, 5000, "reused", 1, 0, 0, 9000, 100)


def process_vanishes(base: Path) -> None:
    s0, s1 = base / "step0", base / "step1"
    system(s0, CPU0, MEM0)
    # Nothing forked (same fork counter): the tree is walked again because a member is gone.
    system(s1, CPU1, MEM1, forks=5000)
    process(s0, T_PYTHON, 4242, "python", 1, 80, 20, 300000, 1000, children={4242: [4250, 4255]})
    process(s0, T_SLEEP, 4250, "sleep", 4242, 15, 5, 300010, 500)
    process(s0, T_SLEEP, 4255, "sleep", 4242, 25, 5, 300020, 600)
    process(s0, T_SLEEP, 4300, "sleep", 1, 8, 2, 300030, 100)
    # 4255 exited but the parent's children file still names it; root 4300 exited.
    process(s1, T_PYTHON, 4242, "python", 1, 88, 22, 300000, 1000, children={4242: [4250, 4255]})
    process(s1, T_SLEEP, 4250, "sleep", 4242, 19, 6, 300010, 500)


def no_smaps_rollup(base: Path) -> None:
    s0 = base / "step0"
    system(s0, CPU0, MEM0)
    # Rss from stat matches statm's resident field (3000 and 448 pages).
    process(s0, T_PYTHON, 4242, "python", 1, 50, 10, 500000, 3000, children={4242: [4250]})
    (s0 / "proc" / "4242" / "statm").write_bytes(b"22075 3000 1000 1 0 3746 0\n")
    process(s0, T_SLEEP, 4250, "sleep", 4242, 0, 1, 500010, 448)


def no_children_files(base: Path) -> None:
    s0 = base / "step0"
    system(s0, CPU0, MEM0)
    process(s0, T_PYTHON, 4242, "python", 1, 80, 20, 400000, 1000, children_files=False)
    process(s0, T_SH, 4250, "sh", 4242, 15, 5, 400010, 500, children_files=False)
    process(s0, T_SLEEP, 4260, "sleep", 4250, 0, 1, 400020, 420, children_files=False)
    # ppid names the root, but it started before the root: a reused pid's leftover.
    process(s0, T_SLEEP, 4270, "old", 4242, 0, 1, 399000, 420, children_files=False)
    process(s0, T_SLEEP, 777, "sleep", 1, 5, 5, 50, 100, children_files=False)


def no_fork_keeps_members(base: Path) -> None:
    s0, s1 = base / "step0", base / "step1"
    system(s0, CPU0, MEM0, forks=7000)
    system(s1, CPU1, MEM1, forks=7000)
    process(s0, T_PYTHON, 4242, "python", 1, 80, 20, 600000, 1000, children={4242: [4250]})
    process(s0, T_SLEEP, 4250, "sleep", 4242, 15, 5, 600010, 500)
    # Same fork counter: no process was created, so the members are kept without reading any
    # children file. Here the files are absent at step1 to show they are not read.
    process(s1, T_PYTHON, 4242, "python", 1, 90, 30, 600000, 1000, children_files=False)
    process(s1, T_SLEEP, 4250, "sleep", 4242, 25, 5, 600010, 500, children_files=False)


SCENARIOS = [
    two_ticks_cpu_and_memory,
    offline_cpu,
    tree_with_descendants,
    pid_reused_between_ticks,
    process_vanishes,
    no_smaps_rollup,
    no_children_files,
    no_fork_keeps_members,
]


def main() -> None:
    for build in SCENARIOS:
        base = FIXTURES / build.__name__
        for step in base.glob("step*"):
            shutil.rmtree(step)
        build(base)
        print(f"built {base}")


if __name__ == "__main__":
    main()
