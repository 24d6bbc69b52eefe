"""Golden tests: captured /proc trees (tests/fixtures/procfs/<scenario>/stepN) against expected.lp.

Each scenario's ``scenario.toml`` gives the collector config and the timestamp of each step; the
collector's root is a symlink switched from one step's tree to the next between ticks, and its
line protocol must equal ``expected.lp`` (written by hand, comments explain the arithmetic).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.config import build_dataclass
from acquisition.lineproto import encode_lines
from acquisition.point import Point
from collectors.procfs import ProcfsCollector, ProcfsConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "procfs"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.lp").exists())


def _context(tmp_path: Path) -> PluginContext:
    return PluginContext(
        host="test",
        interval_s=1.0,
        state_dir=tmp_path,
        data_dir=tmp_path,
        runtime_dir=tmp_path,
    )


def _expected(name: str) -> list[str]:
    text = (FIXTURES / name / "expected.lp").read_text()
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


async def _run(name: str, tmp_path: Path, **overrides: object) -> list[str]:
    spec = tomllib.loads((FIXTURES / name / "scenario.toml").read_text())
    root = tmp_path / "root"
    # The fixtures hold the values of a 100 Hz, 4 KiB-page machine, whatever this one is.
    table = {"clock_ticks": 100, "page_size": 4096, **spec["config"], "root": str(root)}
    table.update(overrides)
    config = build_dataclass(ProcfsConfig, table, f"collectors.procfs ({name})")
    collector = ProcfsCollector(config, _context(tmp_path))
    points: list[Point] = []
    steps = sorted((FIXTURES / name).glob("step*"))
    assert len(steps) == len(spec["times_ns"])
    root.symlink_to(steps[0], target_is_directory=True)
    await collector.open()
    try:
        for step, t in zip(steps, spec["times_ns"], strict=True):
            root.unlink()
            root.symlink_to(step, target_is_directory=True)
            await collector.collect(points.append, t)
    finally:
        await collector.aclose()
    return encode_lines(points).splitlines()


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_matches_expected_line_protocol(name: str, tmp_path: Path) -> None:
    assert await _run(name, tmp_path) == _expected(name)


def test_every_scenario_named_in_the_brief_is_present() -> None:
    assert set(SCENARIOS) >= {
        "two_ticks_cpu_and_memory",
        "tree_with_descendants",
        "pid_reused_between_ticks",
        "process_vanishes",
        "no_smaps_rollup",
        "offline_cpu",
        "no_children_files",
    }


async def test_scan_finds_the_same_tree_as_children_files(tmp_path: Path) -> None:
    """Forcing the ppid scan on a tree that has children files gives the same output."""
    assert await _run("tree_with_descendants", tmp_path, descendants="scan") == _expected(
        "tree_with_descendants"
    )


async def test_without_per_process_and_per_core_only_sums_remain(tmp_path: Path) -> None:
    lines = await _run("tree_with_descendants", tmp_path, per_process=False, per_core=False)
    want = [
        ln
        for ln in _expected("tree_with_descendants")
        if "scope=pid" not in ln and not ln.startswith("cpu,cpu=cpu")
    ]
    assert lines == want


async def test_memory_detail_refreshed_when_due(tmp_path: Path) -> None:
    """With a 0 s interval step1's smaps_rollup values are read: 4242's Private_Dirty 6000 kB."""
    lines = await _run("tree_with_descendants", tmp_path, memory_detail_interval=0.0)
    main = [ln for ln in lines if ln.startswith("process,scope=main") and "1700000001" in ln]
    assert len(main) == 1
    assert ",private_bytes=6144000i,shared_bytes=6144000i,pss_bytes=9216000i," in main[0]


async def test_memory_detail_off_leaves_the_fields_out(tmp_path: Path) -> None:
    lines = await _run("tree_with_descendants", tmp_path, memory_detail=False)
    assert not [ln for ln in lines if "private_bytes" in ln or "pss_bytes" in ln]
    assert len(lines) == len(_expected("tree_with_descendants"))


async def test_page_size_and_clock_ticks_config_keys(tmp_path: Path) -> None:
    """A tree captured on a 64 KiB-page, USER_HZ=1000 machine: rss is 16x and cpu_seconds 1/10
    of what the 4 KiB, 100 Hz expectation says (the config keys win over this machine's)."""
    lines = await _run("tree_with_descendants", tmp_path, page_size=65536, clock_ticks=1000)
    want = _expected("tree_with_descendants")
    assert len(lines) == len(want)

    def field(line: str, key: str) -> float:
        fields = line.split(" ")[1].split(",")
        (value,) = [f.split("=")[1] for f in fields if f.startswith(key + "=")]
        return float(value.rstrip("i"))

    checked = 0
    for got, exp in zip(lines, want, strict=True):
        if got.startswith("process,"):
            # 4096 -> 65536 bytes per page: x16; 100 -> 1000 ticks per second: /10.
            assert field(got, "rss_bytes") == field(exp, "rss_bytes") * 16
            assert field(got, "cpu_seconds") == pytest.approx(field(exp, "cpu_seconds") / 10)
            checked += 1
    assert checked > 0


async def test_a_tracked_child_of_a_tracked_root_is_counted_in_its_own_tree_only(
    tmp_path: Path,
) -> None:
    """tree_with_descendants tracks the agent's own tree 4242; tracking its child 4250 (sh, with
    its sleep 4260) as well takes those two out of 4242's tree: every process is in one tree."""
    base = await _run("tree_with_descendants", tmp_path)
    (tmp_path / "b").mkdir()
    both = await _run("tree_with_descendants", tmp_path / "b", pids=[4250])

    def pids_by_tree(lines: list[str]) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for ln in lines:
            if ",scope=pid," in ln:
                tree = ln.split(",tree=")[1].split(" ")[0]
                pid = int(ln.split(",pid=")[1].split("i")[0])
                out.setdefault(tree, set()).add(pid)
        return out

    single, split = pids_by_tree(base), pids_by_tree(both)
    assert single == {"4242": {4242, 4250, 4255, 4260, 4280}}
    assert split == {"4242": {4242, 4255, 4280}, "4250": {4250, 4260}}

    def combined(lines: list[str], key: str) -> dict[str, float]:
        out = {}
        for ln in lines:
            if ln.startswith("process,scope=combined,") and ln.endswith(" 1700000001000000000"):
                tree = ln.split(",tree=")[1].split(" ")[0]
                fields = dict(kv.split("=") for kv in ln.split(" ")[1].split(","))
                out[tree] = float(fields[key].rstrip("i"))
        return out

    # Summed over the trees, CPU and memory equal the one-tree total: nothing counted twice.
    # Step1 busy share of 4242's whole tree: (30 + 1 + 50 + 0 + 10) / 115 ticks = 91 / 115.
    for key in ("cpu_busy_share_ratio", "cpu_cores", "rss_bytes", "process_count"):
        whole = combined(base, key)["4242"]
        assert sum(combined(both, key).values()) == pytest.approx(whole, rel=1e-12), key
    assert combined(base, "cpu_busy_share_ratio")["4242"] == pytest.approx(91 / 115)


async def test_first_collect_after_open_already_has_rates(tmp_path: Path) -> None:
    """open() samples step0 (the baseline); the first collect, at step1, emits exactly the
    step1 lines of the expectation: ratios over the interval since open, no extra tick."""
    spec = tomllib.loads((FIXTURES / "tree_with_descendants" / "scenario.toml").read_text())
    root = tmp_path / "root"
    table = {"clock_ticks": 100, "page_size": 4096, **spec["config"], "root": str(root)}
    config = build_dataclass(ProcfsConfig, table, "collectors.procfs")
    collector = ProcfsCollector(config, _context(tmp_path))
    step0, step1 = sorted((FIXTURES / "tree_with_descendants").glob("step*"))
    root.symlink_to(step0, target_is_directory=True)
    await collector.open()
    root.unlink()
    root.symlink_to(step1, target_is_directory=True)
    points: list[Point] = []
    try:
        await collector.collect(points.append, spec["times_ns"][1])
    finally:
        await collector.aclose()
    t1 = str(spec["times_ns"][1])
    want = [ln for ln in _expected("tree_with_descendants") if ln.endswith(" " + t1)]
    got = encode_lines(points).splitlines()

    def without_detail(lines: list[str]) -> list[str]:
        # Memory detail is first read at the first collect (step1 files), not at open.
        return [re.sub(r",(private|shared|pss|swap)_bytes=\d+i", "", ln) for ln in lines]

    assert without_detail(got) == without_detail(want)
    assert any("cpu_utilization_ratio" in ln for ln in got)
