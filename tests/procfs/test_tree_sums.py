"""A process tree's sums: the combined scope (main + descendants) reports PSS and swap only when
every member had them."""

from __future__ import annotations

from collectors.procfs.parsers import MemoryDetail, PidStat
from collectors.procfs.trees import Proc, Sum

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
