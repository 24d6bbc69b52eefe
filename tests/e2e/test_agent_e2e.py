"""The real ``nrg-collect`` as a subprocess: 20 Hz for a few seconds, SIGTERM, check the file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.registry import COLLECTORS

NRG = str(Path(sys.executable).with_name("nrg-collect"))
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, hz: int) -> Path:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f"""
[agent]
interval = "{1000 // hz}ms"
flush_interval = "200ms"
stats_interval = "1s"
state_dir = "{tmp_path}/state"
run = "e2e"

[[collectors.procfs]]

[[sinks.file]]
path = "{tmp_path}/out/nrg.lp"
fsync = "always"
"""
    )
    return cfg


def _read(path: Path) -> list[Point]:
    return [decode_line(line) for line in path.read_text().splitlines()]


def test_agent_at_20_hz_records_every_tick_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 20)
    proc = subprocess.Popen(
        [NRG, "--config", str(cfg), "--quiet"], stderr=subprocess.PIPE, text=True
    )
    out = tmp_path / "out" / "nrg.lp"
    deadline = time.monotonic() + 120  # the agent's start, seconds at a load average of 10
    while not (out.exists() and out.stat().st_size) and proc.poll() is None:
        assert time.monotonic() < deadline, "the agent wrote nothing in 120 s"
        time.sleep(0.05)
    time.sleep(3.0)  # 3 s of ticks once it runs
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    points = _read(out)
    assert {p.tags["run"] for p in points} == {"e2e"}
    assert all(p.tags["host"] for p in points)

    stats = [p for p in points if p.measurement == "nrg_collect"]
    final_procfs = [p for p in stats if p.tags["plugin"] == "procfs"][-1]
    final_file = [p for p in stats if p.tags["plugin"] == "file"][-1]
    final_agent = [p for p in stats if p.tags["plugin"] == "agent"][-1]
    runs = final_procfs.fields["runs"]
    assert isinstance(runs, int) and runs >= 20  # ~3 s at 20 Hz on a loaded 2-core machine

    # Every tick is present: one memory point per collect, no tick lost between collect and file.
    memory = [p for p in points if p.measurement == "memory"]
    assert len(memory) == runs
    assert final_procfs.fields["errors"] == 0
    # Ticks that ran plus ticks skipped cover the whole run on the 50 ms grid.
    span_ticks = (memory[-1].time_ns - memory[0].time_ns) / 50e6
    assert runs + final_procfs.fields["skipped_ticks"] >= span_ticks  # type: ignore[operator]

    # Timestamps strictly increase per series.
    last: dict[tuple[str, tuple[tuple[str, str], ...]], int] = defaultdict(int)
    for p in points:
        if p.measurement == "nrg_collect":
            continue
        key = (p.measurement, tuple(sorted(p.tags.items())))
        assert p.time_ns > last[key], f"{key} went backwards"
        last[key] = p.time_ns

    # Self-stats: nothing dropped, and everything offered to the sink was written.
    assert final_file.fields["dropped_points"] == 0
    assert final_agent.fields["dropped_points"] == 0
    assert {"cpu", "memory", "process"} <= {p.measurement for p in points}


def test_once_prints_cpu_memory_and_process_line_protocol(tmp_path: Path) -> None:
    out = subprocess.run(
        [NRG, "--once", "--interval", "200ms"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NRG_RUN": "once-test"},
    )
    assert out.returncode == 0, out.stderr
    points = [decode_line(line) for line in out.stdout.splitlines()]
    kinds = {p.measurement for p in points}
    assert {"cpu", "memory", "process"} <= kinds
    total = next(p for p in points if p.measurement == "cpu" and p.tags["cpu"] == "total")
    assert 0.0 <= total.fields["utilization_ratio"] <= 1.0  # type: ignore[operator]
    assert all(p.tags["run"] == "once-test" for p in points)


def test_bad_config_key_is_a_clear_startup_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[[collectors.procfs]]\nrooot = '/'\n")
    out = subprocess.run([NRG, "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "configuration error: [collectors.procfs[0]] unknown key 'rooot'" in out.stderr


def test_list_says_why_collectors_are_unavailable(tmp_path: Path) -> None:
    """RAPL pointed at a captured VM tree (no powercap, no MSR device, no power PMU): the row
    says every reason, whatever this host's /sys holds."""
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f"""
[[collectors.procfs]]
root = "{FIXTURES / "procfs/two_ticks_cpu_and_memory/step0"}"

[[collectors.rapl]]
root = "{FIXTURES / "rapl/vm-none/tree"}"
"""
    )
    out = subprocess.run([NRG, "-c", str(cfg), "list"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(None, 1) for line in out.stdout.splitlines())
    assert rows["procfs"].startswith("available")
    where = FIXTURES / "rapl/vm-none/tree/sys/class/powercap"
    assert rows["rapl"] == f"unavailable: no powercap zones in {where}, no MSR device, no power PMU"


def test_config_prints_a_sample_that_parses_as_printed_and_uncommented() -> None:
    from acquisition.config import parse_config
    from acquisition.sample import uncomment

    out = subprocess.run([NRG, "config"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert "[agent]" in out.stdout and "# [[collectors.procfs]]" in out.stdout
    assert parse_config(out.stdout).collectors == []
    assert [s.name for s in parse_config(uncomment(out.stdout)).collectors] == list(COLLECTORS)
