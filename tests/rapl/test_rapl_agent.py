"""The real ``nrg-collect`` with the RAPL collector on fixture trees and the process_power
processor wired from a config file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from acquisition.advancing import WINDOW_S
from acquisition.lineproto import decode_line
from collectors.rapl import WHY_FIRMWARE
from tests.rapl.scenarios import FIXTURES, install_tree

NRG = str(Path(sys.executable).with_name("nrg-collect"))


def _nrg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NRG, *args], capture_output=True, text=True, timeout=60, check=False)


def test_list_says_why_rapl_is_unavailable(tmp_path: Path) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(f'[[collectors.rapl]]\nroot = "{FIXTURES / "vm-none" / "tree"}"\n')
    done = _nrg("list", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    where = FIXTURES / "vm-none" / "tree" / "sys/class/powercap"
    assert (
        done.stdout
        == f"rapl  unavailable: no powercap zones in {where}, no MSR device, no power PMU\n"
    )


@contextmanager
def advancing(root: Path, watts: dict[str, float], period_s: float = 0.02) -> Iterator[None]:
    """The zones named in ``watts`` (zone id → W) advance as a real package would, watts ×
    elapsed time, while the context is open (each value written whole, by rename)."""
    zones = {os.path.realpath(root / "sys/class/powercap" / z): w for z, w in watts.items()}
    base = {z: int(Path(z, "energy_uj").read_text()) for z in zones}
    stop = threading.Event()

    def advance() -> None:
        start = time.monotonic()
        while not stop.wait(period_s):
            elapsed = time.monotonic() - start
            for z, w in zones.items():
                Path(z, "energy_uj.tmp").write_text(f"{base[z] + int(w * elapsed * 1e6)}\n")
                os.replace(Path(z, "energy_uj.tmp"), Path(z, "energy_uj"))

    writer = threading.Thread(target=advance)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join()


LAPTOP_ZONES = {
    "intel-rapl:0": 15.0,
    "intel-rapl:0:0": 9.0,
    "intel-rapl:0:1": 2.0,
    "intel-rapl:1": 20.0,
}


def test_list_describes_the_zones_found(tmp_path: Path) -> None:
    root = install_tree("laptop-psys-mmio", tmp_path)
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(f'[[collectors.rapl]]\nroot = "{root}"\n')
    with advancing(root, LAPTOP_ZONES):
        done = _nrg("list", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "rapl  available: powercap: package (socket 0), core (socket 0), uncore (socket 0), "
        "psys (socket 0)\n"
    )


def test_list_says_a_counter_that_never_moves_is_not_advancing(tmp_path: Path) -> None:
    """The fixture's counters stand still: after the rule's window, ``list`` says so, with
    the reason (no hypervisor flag in this tree's cpuinfo: the firmware)."""
    root = install_tree("laptop-psys-mmio", tmp_path)
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(f'[[collectors.rapl]]\nroot = "{root}"\n')
    with advancing(root, {"intel-rapl:0": 15.0}):  # the package moves, the others do not
        some = _nrg("list", "--config", str(cfg))
    assert some.stdout == (
        "rapl  available: powercap: package (socket 0), core (socket 0) not advancing, "
        "uncore (socket 0) not advancing, psys (socket 0) not advancing\n"
    )
    done = _nrg("list", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(
        r"rapl  unavailable: not advancing: package \(socket 0\), core \(socket 0\), "
        r"uncore \(socket 0\), psys \(socket 0\) did not move in (\d+\.\d) s \((.*)\)\n",
        done.stdout,
    )
    assert match is not None, done.stdout
    assert float(match[1]) >= WINDOW_S and match[2] == WHY_FIRMWARE


def test_once_prints_rapl_line_protocol(tmp_path: Path) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f'[agent]\ninterval = "100ms"\nhost = "xeon"\n\n[[collectors.rapl]]\nroot = "{root}"\n'
    )
    done = _nrg("--once", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    # The fixture's counters stand still: no point (never a zero power that looks measured).
    assert [decode_line(line) for line in done.stdout.splitlines()] == []
    with advancing(root, {"intel-rapl:0": 150.0, "intel-rapl:1:0": 12.0}, period_s=0.005):
        done = _nrg("--once", "--config", str(cfg))
    assert done.returncode == 0, done.stderr
    points = [decode_line(line) for line in done.stdout.splitlines()]
    # The ones that moved, with energy since open and power; never a wrap. A zone that stood
    # still at the first reading (its writer had not written yet) starts there: 0 J since open,
    # energy only, at the first reading's time, just before its first move.
    moved = [p for p in points if "power_watts" in p.fields]
    assert [dict(p.tags) for p in moved] == [
        {"domain": "package", "host": "xeon", "socket": "0"},
        {"domain": "dram", "host": "xeon", "socket": "1"},
    ]
    for p in moved:
        assert p.fields["energy_joules"] > 0 and p.fields["power_watts"] > 0  # type: ignore[operator]
        before = points[: points.index(p)]
        for still in [q for q in before if q.tags == p.tags]:
            assert still.fields == {"energy_joules": 0.0} and still.time_ns < p.time_ns
    assert len(points) <= 2 * len(moved)


def test_bad_rapl_option_is_a_startup_error(tmp_path: Path) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text('[[collectors.rapl]]\nbackend = "rapl-msr"\n')
    done = _nrg("list", "--config", str(cfg))
    assert done.returncode != 0
    assert (
        "[collectors.rapl[0]] backend: expected one of 'auto', 'powercap', 'msr', 'perf', "
        "got 'rapl-msr'" in done.stderr
    )


@pytest.mark.slow
def test_agent_records_rapl_and_process_power(tmp_path: Path) -> None:
    root = install_tree("xeon-2s-dram", tmp_path)
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f"""
[agent]
interval = "200ms"
flush_interval = "200ms"
state_dir = "{tmp_path}/state"

[[collectors.procfs]]
per_core = false

[[collectors.rapl]]
root = "{root}"

[[processors.process_power]]
scopes = ["combined"]

[[sinks.file]]
path = "{tmp_path}/out/nrg.lp"
fsync = "always"
"""
    )
    zones = {
        os.path.realpath(root / "sys/class/powercap" / z): w
        for z, w in (
            ("intel-rapl:0", 150),
            ("intel-rapl:0:0", 20),
            ("intel-rapl:1", 100),
            ("intel-rapl:1:0", 12),
        )
    }
    stop = threading.Event()
    base = {z: int(Path(z, "energy_uj").read_text()) for z in zones}
    written: dict[str, set[int]] = {z: {0} for z in zones}

    def advance() -> None:
        # The counters advance as a real package would: watts × elapsed time. (Writing is not
        # atomic, so the agent also meets torn, empty reads: they must cost nothing.)
        start = time.monotonic()
        while not stop.wait(0.02):
            elapsed = time.monotonic() - start
            for z, watts in zones.items():
                uj = int(watts * elapsed * 1e6)
                written[z].add(uj)
                Path(z, "energy_uj").write_text(f"{base[z] + uj}\n")

    writer = threading.Thread(target=advance)
    writer.start()
    try:
        proc = subprocess.Popen(
            [NRG, "--config", str(cfg), "--quiet"], stderr=subprocess.PIPE, text=True
        )
        # Wait for enough ticks (not a fixed time: a loaded machine starts the agent slowly).
        out = tmp_path / "out" / "nrg.lp"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("process_power,") >= 8:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        stop.set()
        writer.join()
    assert proc.returncode == 0, stderr
    points = [decode_line(line) for line in (tmp_path / "out" / "nrg.lp").read_text().splitlines()]
    rapl = [p for p in points if p.measurement == "rapl"]
    assert {(p.tags["socket"], p.tags["domain"]) for p in rapl} == {
        ("0", "package"),
        ("0", "dram"),
        ("1", "package"),
        ("1", "dram"),
    }
    package0 = [p.fields for p in rapl if (p.tags["socket"], p.tags["domain"]) == ("0", "package")]
    assert len(package0) >= 3  # torn reads of the rewritten file cost a few
    # However the writer and the agent were scheduled, every energy is a value the counter
    # really had, energy never decreases and power is never negative.
    package0_uj = written[os.path.realpath(root / "sys/class/powercap/intel-rapl:0")]
    energies_j = [f["energy_joules"] for f in package0]
    # (The agent opened at some counter value the writer had written: energies are relative to it.)
    offsets = [round(float(e) * 1e6) for e in energies_j]
    assert any(all(o + d in package0_uj for d in offsets) for o in package0_uj), energies_j
    assert energies_j == sorted(energies_j)
    assert float(energies_j[-1]) > 0.0
    # (A series' first point may be its last still reading: energy only, no power.)
    assert all(float(f["power_watts"]) >= 0.0 for f in package0 if "power_watts" in f)
    assert sum("power_watts" in f for f in package0) >= len(package0) - 1
    shares = [p for p in points if p.measurement == "process_power"]
    assert shares, "no process_power points"
    assert {p.tags["scope"] for p in shares} == {"combined"}
    # procfs's first tick has memory shares but no CPU share yet: such points carry only dram.
    cpu_watts = [p.fields["cpu_power_watts"] for p in shares if "cpu_power_watts" in p.fields]
    assert cpu_watts and all(float(w) >= 0.0 for w in cpu_watts)
    energies = [p.fields["cpu_energy_joules"] for p in shares if "cpu_energy_joules" in p.fields]
    assert energies == sorted(energies)


def test_bad_process_power_option_is_a_startup_error(tmp_path: Path) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f'[agent]\nstate_dir = "{tmp_path}/state"\n\n[[collectors.rapl]]\n\n'
        '[[processors.process_power]]\nscopes = ["combined", "tree"]\n\n'
        f'[[sinks.file]]\npath = "{tmp_path}/out.lp"\n'
    )
    done = _nrg("--config", str(cfg), "--quiet")
    assert done.returncode == 2
    assert done.stderr == (
        "nrg-collect: configuration error: [processors.process_power[0]] scopes: unknown "
        "['tree']; known: main, descendants, combined, pid\n"
    )
