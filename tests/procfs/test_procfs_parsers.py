"""Pure procfs parsers and derivations: literal kernel text and hypothesis round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.procfs import (
    CpuTimes,
    MemInfo,
    MemoryDetail,
    PidStat,
    cpu_ratio_fields,
    meminfo_from_fields,
    memory_detail_from_smaps_rollup,
    memory_detail_from_statm,
    memory_fields,
    parse_children,
    parse_forks,
    parse_meminfo,
    parse_pid_stat,
    parse_proc_stat,
    parse_smaps_rollup,
    parse_statm,
)

# Captured on the 2-CPU test VM (kernel 6.18).
STAT = (
    b"cpu  6487 0 1885 52851 348 0 63 2 0 0\n"
    b"cpu0 893 0 645 29144 67 0 40 1 0 0\n"
    b"cpu1 5594 0 1240 23707 280 0 23 1 0 0\n"
    b"intr 119152 0 0 0 0 0\n"
    b"ctxt 199239\n"
    b"btime 1763881234\n"
)
PID_STAT = (
    b"8207 (cat) R 8204 8204 2726 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 57994 3133440 395 "
    b"18446744073709551615 94698980196352 94698980216233 140724602394496 0 0 0 0 0 0 0 0 0 17 "
    b"0 0 0 0 0 0 94698980232240 94698980233856 94699043573760 140724602395361 "
    b"140724602395381 140724602395381 140724602396651 0\n"
)
SMAPS_ROLLUP = b"""55ebd0f9b000-7ffd75aff000 ---p 00000000 00:00 0                          [rollup]
Rss:                1620 kB
Pss:                 255 kB
Pss_Dirty:           112 kB
Shared_Clean:       1468 kB
Shared_Dirty:          0 kB
Private_Clean:        40 kB
Private_Dirty:       112 kB
Swap:                  0 kB
"""


def test_proc_stat_cpu_lines() -> None:
    cpus = parse_proc_stat(STAT)
    assert list(cpus) == ["total", "cpu0", "cpu1"]
    assert cpus["total"] == CpuTimes(6487, 0, 1885, 52851, 348, 0, 63, 2, 0, 0)
    assert cpus["cpu1"].user == 5594


def test_proc_stat_old_kernel_with_fewer_columns() -> None:
    cpus = parse_proc_stat(b"cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\n")
    assert cpus["total"] == CpuTimes(1, 2, 3, 4, 0, 0, 0, 0, 0, 0)


def test_pid_stat_fields_by_man_page_number() -> None:
    s = parse_pid_stat(PID_STAT)
    assert s == PidStat(8207, "cat", "R", 8204, 7, 3, 1, 57994, 395)


def test_pid_stat_comm_with_spaces_and_parentheses() -> None:
    line = PID_STAT.replace(b"(cat)", b"(a) (b c) ))")
    s = parse_pid_stat(line)
    assert (s.comm, s.ppid, s.starttime) == ("a) (b c) )", 8204, 57994)


def test_children_and_statm() -> None:
    assert parse_children(b"19245 19247 ") == [19245, 19247]
    assert parse_children(b"") == []
    assert parse_statm(b"730 448 420 5 0 89 0\n") == (730, 448, 420, 5, 0, 89, 0)


def test_smaps_rollup_skips_the_header_and_converts_kib() -> None:
    r = parse_smaps_rollup(SMAPS_ROLLUP)
    assert r["Rss"] == 1620 * 1024
    assert "55ebd0f9b000-7ffd75aff000 ---p 00000000 00" not in r
    assert memory_detail_from_smaps_rollup(r) == MemoryDetail(
        152 * 1024, 1468 * 1024, 255 * 1024, 0
    )


def test_empty_smaps_rollup_of_a_zombie_is_zero() -> None:
    assert memory_detail_from_smaps_rollup(parse_smaps_rollup(b"")) == MemoryDetail(0, 0, 0, 0)


def test_statm_detail_is_resident_minus_shared() -> None:
    assert memory_detail_from_statm((730, 448, 420, 5, 0, 89, 0), 4096) == MemoryDetail(
        28 * 4096, 420 * 4096, None, None
    )


def test_meminfo_all_keys_and_selected_keys() -> None:
    text = (
        b"MemTotal:       24684096 kB\nMemFree:        23981832 kB\n"
        b"MemAvailable:   24158388 kB\nHugePages_Total:       0\nSwapTotal:             0 kB\n"
    )
    full = parse_meminfo(text)
    assert full == {
        "MemTotal": 24684096 * 1024,
        "MemFree": 23981832 * 1024,
        "MemAvailable": 24158388 * 1024,
        "HugePages_Total": 0,
        "SwapTotal": 0,
    }
    assert parse_meminfo(text, (b"MemFree", b"SwapFree", b"SwapTotal")) == {
        "MemFree": 23981832 * 1024,
        "SwapTotal": 0,
    }


def test_meminfo_without_memavailable_and_lxc_overshoot() -> None:
    old = {"MemTotal": 1000, "MemFree": 100, "Buffers": 50, "Cached": 250}
    assert meminfo_from_fields(old) == MemInfo(1000, 400, 100, 0, 0)
    lxc = {"MemTotal": 1000, "MemFree": 300, "MemAvailable": 5000}
    assert meminfo_from_fields(lxc).available == 300


def test_memory_fields_used_is_total_minus_available() -> None:
    f = memory_fields(MemInfo(1000, 750, 100, 400, 100))
    assert f == {
        "total_bytes": 1000,
        "available_bytes": 750,
        "used_bytes": 250,
        "free_bytes": 100,
        "used_ratio": 0.25,
        "swap_total_bytes": 400,
        "swap_used_bytes": 300,
    }


def test_cpu_ratios_none_without_elapsed_ticks() -> None:
    t = CpuTimes(1, 0, 1, 1)
    assert cpu_ratio_fields(t, t) is None


def test_cpu_ratios_clamp_a_backwards_iowait() -> None:
    prev = CpuTimes(100, 0, 0, 100, 50)
    cur = CpuTimes(150, 0, 0, 200, 40)  # iowait went back by 10
    f = cpu_ratio_fields(prev, cur)
    assert f is not None
    # total delta 50 + 100 - 10 = 140; idle+iowait delta 90: busy 50
    assert f["utilization_ratio"] == 50 / 140
    assert f["iowait_ratio"] == 0.0


# --- property tests ---------------------------------------------------------------------------

comm_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00\n"), max_size=16)
u64 = st.integers(min_value=0, max_value=2**63 - 1)


@given(
    pid=st.integers(1, 4_194_304),
    comm=comm_text,
    state=st.sampled_from("RSDZTtXIP"),
    ppid=st.integers(0, 4_194_304),
    utime=u64,
    stime=u64,
    threads=st.integers(1, 100_000),
    start=u64,
    rss=u64,
    tail=st.integers(0, 30),
)
def test_pid_stat_round_trip(
    pid: int,
    comm: str,
    state: str,
    ppid: int,
    utime: int,
    stime: int,
    threads: int,
    start: int,
    rss: int,
    tail: int,
) -> None:
    # man field 3 onwards; index = field number - 3.
    fields = [state, ppid, 1, 1, 0, -1, 4194304, 10, 0, 0, 0, utime, stime, 0, 0, 20, 0, threads]
    fields += [0, start, 3133440, rss] + [7] * tail
    line = f"{pid} ({comm}) {' '.join(map(str, fields))}\n".encode()
    s = parse_pid_stat(line)
    assert s == PidStat(pid, comm, state, ppid, utime, stime, threads, start, rss)


@given(st.lists(st.lists(st.integers(0, 2**60), min_size=4, max_size=10), min_size=1, max_size=9))
def test_proc_stat_round_trip(rows: list[list[int]]) -> None:
    names = ["cpu"] + [f"cpu{i}" for i in range(len(rows) - 1)]
    text = "".join(f"{n} {' '.join(map(str, r))}\n" for n, r in zip(names, rows, strict=True))
    cpus = parse_proc_stat((text + "intr 1 2 3\nctxt 9\n").encode())
    assert list(cpus) == ["total", *names[1:]]
    for n, r in zip(["total", *names[1:]], rows, strict=True):
        assert list(cpus[n]) == r + [0] * (10 - len(r))


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_()]{0,20}", fullmatch=True),
        st.tuples(st.integers(0, 2**50), st.booleans()),
        max_size=30,
    )
)
def test_meminfo_round_trip(entries: dict[str, tuple[int, bool]]) -> None:
    text = "".join(f"{k}:{v:>16}{' kB' if kb else ''}\n" for k, (v, kb) in entries.items())
    want = {k: v * 1024 if kb else v for k, (v, kb) in entries.items()}
    assert parse_meminfo(text.encode()) == want
    keys = [k.encode() for k in list(entries)[::2]]
    assert parse_meminfo(text.encode(), keys) == {k.decode(): want[k.decode()] for k in keys}


ticks = st.integers(0, 10**6)


@given(
    prev=st.tuples(*[ticks] * 10),
    inc=st.tuples(*[ticks] * 10),
)
def test_cpu_ratios_add_up_and_stay_in_range(prev: tuple[int, ...], inc: tuple[int, ...]) -> None:
    # guest is part of user (and guest_nice of nice), as the kernel accounts it.
    p = list(prev)
    p[0] += p[8]
    p[1] += p[9]
    d = list(inc)
    d[0] += d[8]
    d[1] += d[9]
    a = CpuTimes(*p)
    b = CpuTimes(*[x + y for x, y in zip(p, d, strict=True)])
    fields = cpu_ratio_fields(a, b)
    f = {k: float(v) for k, v in (fields or {}).items()}
    total = sum(d[:8])
    if total == 0:
        assert fields is None
        return
    assert fields is not None
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in fields.values())
    parts = f["user_ratio"] + f["system_ratio"] + f["steal_ratio"] + f["guest_ratio"]
    assert f["utilization_ratio"] == pytest.approx(parts, abs=1e-12)
    assert f["utilization_ratio"] == pytest.approx(1 - (inc[3] + inc[4]) / total, abs=1e-12)


# --- values beyond int64 and malformed text: ValueError only ------------------------------------

U64_MAX = b"18446744073709551615"  # 2**64 - 1, what a broken kernel or a damaged capture shows


def test_values_beyond_int64_are_unreadable() -> None:
    with pytest.raises(ValueError, match="int64"):
        parse_statm(b"100 " + U64_MAX + b" 20 1 0 50 0\n")
    with pytest.raises(ValueError, match="int64"):
        parse_pid_stat(PID_STAT.replace(b" 395 ", b" " + U64_MAX + b" "))
    with pytest.raises(ValueError, match="int64"):
        parse_proc_stat(b"cpu  1 2 3 " + U64_MAX + b"\n")
    with pytest.raises(ValueError, match="int64"):
        parse_smaps_rollup(b"Rss: " + U64_MAX + b" kB\n")
    with pytest.raises(ValueError, match="int64"):
        parse_children(b"12 " + U64_MAX)
    # 2**63 - 1 itself is a valid int64.
    assert parse_statm(b"1 9223372036854775807 0 0 0 0 0") == (1, 2**63 - 1, 0, 0, 0, 0, 0)


def test_meminfo_value_beyond_int64_in_bytes_is_left_out() -> None:
    # 2**53 kB is 2**63 bytes: one more than int64 holds.
    text = b"MemTotal: 9007199254740992 kB\nMemFree: 9007199254740991 kB\nCached: x kB\n"
    assert parse_meminfo(text) == {"MemFree": 9007199254740991 * 1024}
    assert parse_meminfo(text, [b"MemTotal", b"MemFree"]) == {"MemFree": 9007199254740991 * 1024}


def test_meminfo_without_total_or_free_is_a_value_error() -> None:
    from collectors.procfs.parsers import MSG_MEMINFO_MISSING

    with pytest.raises(ValueError) as info:
        meminfo_from_fields({"MemFree": 1})
    assert str(info.value) == MSG_MEMINFO_MISSING.format(key="MemTotal")
    with pytest.raises(ValueError) as info:
        meminfo_from_fields({"MemTotal": 1})
    assert str(info.value) == MSG_MEMINFO_MISSING.format(key="MemFree")


def test_memory_fields_of_huge_values_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="int64"):
        memory_fields(MemInfo(10**250, 1, 1, 0, 0))
    with pytest.raises(ValueError, match="int64"):
        meminfo_from_fields({"MemTotal": 10**250, "MemFree": 1})


def test_truncated_pid_stat_and_statm_are_value_errors() -> None:
    with pytest.raises(ValueError):
        parse_pid_stat(PID_STAT[:60])
    with pytest.raises(ValueError):
        parse_statm(b"1 2")


# Fuzz targets: each parser raises ValueError (its documented type) or returns, for any bytes.
_procfs_bytes = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from(
            [
                b"cpu",
                b"cpu0",
                b" ",
                b"  ",
                b"\n",
                b"(",
                b")",
                b"kB",
                b":",
                b"-",
                b"1",
                b"0",
                b"9" * 25,
                U64_MAX,
                b"\xff",
                b"MemTotal",
                b"MemFree",
                b"processes ",
                b"intr",
            ]
        ),
        max_size=40,
    ).map(b"".join),
)


@given(_procfs_bytes)
def test_fuzz_byte_parsers_raise_only_value_error(data: bytes) -> None:
    for parser in (
        parse_proc_stat,
        parse_pid_stat,
        parse_children,
        parse_smaps_rollup,
        parse_statm,
        parse_meminfo,
        parse_forks,
    ):
        try:
            parser(data)  # type: ignore[operator]
        except ValueError:
            pass


@given(_procfs_bytes)
def test_fuzz_meminfo_to_memory_fields_raise_only_value_error(data: bytes) -> None:
    try:
        fields = memory_fields(meminfo_from_fields(parse_meminfo(data)))
    except ValueError:
        return
    assert all(-(2**63) <= v < 2**63 for v in fields.values() if isinstance(v, int))


@given(
    st.dictionaries(
        st.sampled_from(
            ["MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree"]
        ),
        st.integers(-(10**30), 10**300),
        max_size=7,
    )
)
def test_fuzz_meminfo_from_fields_raises_only_value_error(fields: dict[str, int]) -> None:
    try:
        memory_fields(meminfo_from_fields(fields))
    except ValueError:
        pass


def test_instances_are_bounded_slots_per_tree_and_comm() -> None:
    from collectors.procfs.trees import Instances

    inst = Instances()
    inst.update("1", [("python", 1), ("worker", 10), ("worker", 11), ("worker", 12)])
    assert [inst.get("1", "worker", p) for p in (10, 11, 12)] == [0, 1, 2]
    assert inst.get("1", "python", 1) == 0
    # Worker 11 exits and 13 starts: 13 takes the free slot 1; the others keep theirs.
    inst.update("1", [("python", 1), ("worker", 10), ("worker", 12), ("worker", 13)])
    assert [inst.get("1", "worker", p) for p in (10, 12, 13)] == [0, 2, 1]
    # Another tree numbers its own processes.
    inst.update("2", [("worker", 11)])
    assert inst.get("2", "worker", 11) == 0
    inst.forget("1")
    inst.update("1", [("worker", 13)])
    assert inst.get("1", "worker", 13) == 0
