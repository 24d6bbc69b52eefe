"""A process tree's sums: the combined scope (main + descendants) reports PSS and swap only when
every member had them; the fields of a ``process`` point by hand, an idle tick's too."""

from __future__ import annotations

from collectors.procfs.parsers import MemoryDetail, PidStat
from collectors.procfs.trees import Proc, Sum, TickContext, process_fields

MB = 1 << 20


def proc(pid: int, detail: MemoryDetail | None) -> Proc:
    p = Proc(PidStat(pid, "python", "R", 1, 100, 20, 4, 1000 + pid, 256))
    p.detail = detail
    return p


def test_combined_pss_only_when_both_parts_have_it() -> None:
    """Guards: main has PSS (smaps_rollup read), a descendant has none (``statm`` only): the
    combined tree's PSS and swap are unknown (None), not main's alone; private and shared
    still add up: 10 + 3 = 13 MB and 2 + 1 = 3 MB."""
    main, descendants = Sum(), Sum()
    main.add(proc(10, MemoryDetail(10 * MB, 2 * MB, 11 * MB, 0)), 0)
    descendants.add(proc(11, MemoryDetail(3 * MB, 1 * MB, None, None)), 0)
    combined = main.merged(descendants)
    assert main.memory() == MemoryDetail(10 * MB, 2 * MB, 11 * MB, 0)
    assert combined.memory() == MemoryDetail(13 * MB, 3 * MB, None, None)
    assert descendants.merged(main).memory() == MemoryDetail(13 * MB, 3 * MB, None, None)
    both = main.merged(main)
    assert both.memory() == MemoryDetail(20 * MB, 4 * MB, 22 * MB, 0)
    assert combined.count == 2 and combined.rss == 512


def test_combined_memory_split_only_when_both_parts_have_one() -> None:
    """Guards: a descendant without any memory split (its smaps unreadable) makes the combined
    tree's split unknown, not main's 10 MB private alone."""
    main, descendants = Sum(), Sum()
    main.add(proc(10, MemoryDetail(10 * MB, 2 * MB, 11 * MB, 0)), 0)
    descendants.add(proc(11, None), 0)
    assert descendants.memory() is None
    assert main.merged(descendants).memory() is None
    assert descendants.merged(main).memory() is None


def test_process_fields_by_hand() -> None:
    """Guards the units and ratios of a ``process`` point. HZ 100, 4 KiB pages, 8 CPUs online;
    since the last tick the machine ran 800 ticks of which 400 busy, the tree 300. CPU 250
    ticks = 2.5 s; utilisation 300/800 = 0.375 of the machine = 0.375 × 8 = 3 cores; busy share
    300/400 = 0.75; RSS 1000 pages × 4096 = 4,096,000 bytes, of 8,192,000 used: 0.5."""
    tick = TickContext(
        hz=100,
        page_size=4096,
        d_total=800,
        d_busy=400,
        n_online=8,
        used_bytes=8_192_000,
        memory_detail=True,
    )
    f = process_fields(tick, True, 250, 300, 1000, 7, MemoryDetail(3 * MB, MB, 2 * MB, 0), 2)
    assert f == {
        "cpu_seconds": 2.5,
        "cpu_utilization_ratio": 0.375,
        "cpu_cores": 3.0,
        "cpu_busy_share_ratio": 0.75,
        "rss_bytes": 4_096_000,
        "private_bytes": 3 * MB,
        "shared_bytes": MB,
        "pss_bytes": 2 * MB,
        "swap_bytes": 0,
        "memory_used_share_ratio": 0.5,
        "threads": 7,
        "process_count": 2,
    }
    # a busy share above 1 (the tree's ticks and the machine's read a moment apart) is capped;
    # no history: no rates; a single process: no count; no PSS/swap where the source has none
    f = process_fields(tick, True, 0, 500, 1, 1, MemoryDetail(1, 1, None, None), -1)
    assert f["cpu_busy_share_ratio"] == 1.0
    assert "pss_bytes" not in f and "swap_bytes" not in f and "process_count" not in f
    f = process_fields(tick, False, 0, 0, 1, 1, None, 1)
    assert set(f) == {
        "cpu_seconds",
        "rss_bytes",
        "memory_used_share_ratio",
        "threads",
        "process_count",
    }


def test_a_tick_where_no_cpu_was_busy_has_no_busy_share() -> None:
    """Guards: a tick in which the machine ran 800 ticks, none of them busy (an idle machine,
    or two reads within one clock tick), gives the tree 0/800 = 0.0 of the machine and 0.0
    cores, and no busy share (0 of 0 busy ticks has no meaning), instead of failing the tick;
    from one busy tick on, the share is there."""
    tick = TickContext(
        hz=100,
        page_size=4096,
        d_total=800,
        d_busy=0,
        n_online=8,
        used_bytes=8_192_000,
        memory_detail=False,
    )
    f = process_fields(tick, True, 250, 0, 1000, 7, None, 2)
    assert f == {
        "cpu_seconds": 2.5,
        "cpu_utilization_ratio": 0.0,
        "cpu_cores": 0.0,
        "rss_bytes": 4_096_000,
        "memory_used_share_ratio": 0.5,
        "threads": 7,
        "process_count": 2,
    }
    # The fewest busy ticks there can be, 1 of 800: a tree that ran it has the whole busy
    # share, 1/1 = 1.0 (1/800 of the machine, 8/800 = 0.01 cores); one that did not, 0/1 = 0.0.
    tick.d_busy = 1
    f = process_fields(tick, True, 250, 1, 1000, 7, None, 2)
    assert (f["cpu_busy_share_ratio"], f["cpu_utilization_ratio"], f["cpu_cores"]) == (
        1.0,
        1 / 800,
        0.01,
    )
    assert process_fields(tick, True, 250, 0, 1000, 7, None, 2)["cpu_busy_share_ratio"] == 0.0


def test_a_tick_without_used_memory_has_no_memory_share() -> None:
    """Guards: when the machine's used memory reads 0 (``MemAvailable`` equal to ``MemTotal``,
    as some containers' meminfo says) a process point has no ``memory_used_share_ratio``, and
    the tick goes on (no division by zero); 1 byte used: 4096 bytes of RSS are 4096 times it."""
    args: dict[str, int] = {"hz": 100, "page_size": 4096, "d_total": 800, "d_busy": 400}
    for used, share in ((0, None), (1, 4096.0)):
        tick = TickContext(**args, n_online=8, used_bytes=used, memory_detail=False)
        f = process_fields(tick, True, 250, 300, 1, 7, None, 2)
        assert f.get("memory_used_share_ratio") == share
        assert f["rss_bytes"] == 4096
