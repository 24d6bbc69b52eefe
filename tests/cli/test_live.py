"""The live line in a real terminal (tmux): below the job's output, never mixed into it; power
and energy per source; and what a run with no energy source says."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.energy import (
    FIX_EMONPI_PORT,
    FIX_NVML,
    FIX_RAPL_ABSENT,
    FIX_RAPL_PERMISSION,
    FIX_RAPL_STUCK,
    NO_ENERGY,
    NO_ENERGY_STILL,
    EnergyTotals,
    no_energy_message,
    no_energy_still,
)
from acquisition.point import Point
from collectors.rapl import WHY_FIRMWARE
from tests.answers.fakepower import powercap_tree
from tests.docs.execdocs import blocks, output_matches
from tests.rapl.scenarios import FIXTURES, install_tree

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]

_JOB = r"""
import time
for i in range(16):
    print(f"epoch {i}: accuracy 0.{i:02d}", flush=True)
    time.sleep(0.25)
"""
_LINE = re.compile(r"^epoch (\d+): accuracy 0\.(\d\d)$")


class Tmux:
    def __init__(self) -> None:
        self.name = f"nrg-test-{uuid.uuid4().hex[:8]}"

    def run(self, *argv: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.name, *argv], capture_output=True, text=True, timeout=30
        )
        return out.stdout

    def screen(self) -> list[str]:
        return self.run("capture-pane", "-p", "-t", "0").splitlines()

    def history(self) -> list[str]:
        return self.run("capture-pane", "-p", "-S", "-200", "-t", "0").splitlines()

    def close(self) -> None:
        self.run("kill-server")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    t = Tmux()
    yield t
    t.close()


def _wait(cond: object, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_live_line_stays_below_the_jobs_output_and_shows_power_and_energy(
    tmux: Tmux,
) -> None:
    """On simulated RAPL counters and a simulated GPU; the line at the job's last epoch is the
    one the docs show, their numbers aside."""
    with (
        tempfile.TemporaryDirectory(prefix="nrg-") as d,
        powercap_tree({"package-0": 30.0, "dram": 5.0}) as rapl,  # counters that measure
        simulated_gpu(Path(d) / "gpu") as gpu,
    ):
        work = Path(d)
        (work / "job.py").write_text(_JOB)
        cfg = work / "nrg.toml"
        cfg.write_text(
            f'[agent]\ninterval = "200ms"\nstate_dir = "{work}/state"\n'
            f'[[collectors.rapl]]\nroot = "{rapl}"\n{gpu}[[collectors.procfs]]\n'
            "[[collectors.hooks]]\n"
        )
        # The default file sink, under a home of its own (shown as ~ on the line).
        command = (
            f"env -u XDG_DATA_HOME -u NRG_DATA_DIR HOME={work} PYTHONPATH={REPO} TERM=xterm "
            f"NRG_RUNTIME_DIR={work}/run {NRG} -c {cfg} -- {sys.executable} {work}/job.py 2>&1; "
            "echo EXIT=$?; sleep 60"
        )
        tmux.run("new-session", "-d", "-x", "240", "-y", "12", command)
        _wait(lambda: tmux.screen() and tmux.screen()[-1].startswith("nrg ▸"), "the live line")
        _wait(lambda: any("epoch 8" in line for line in tmux.screen()), "epoch 8")
        screen = tmux.screen()
        status = screen[-1]
        assert "W" in status and "J" in status and "package-0" in status, status
        for line in screen[:-1]:
            assert "nrg ▸" not in line, screen
            assert not line.strip() or _LINE.match(line) or "nrg" in line, screen
        _wait(lambda: any("epoch 15" in line for line in tmux.screen()), "epoch 15")
        last = tmux.screen()[-1]
        _wait(lambda: any(line.startswith("EXIT=") for line in tmux.history()), "the exit")
        history = tmux.history()
    epochs = [int(m.group(1)) for line in history if (m := _LINE.match(line))]
    assert epochs == list(range(16)), history
    assert "EXIT=0" in history
    assert not any("nrg ▸" in line for line in history), "the live line was left behind"
    shown = docs_live_lines()
    assert shown, "no page shows the live line"
    for where, line in shown:
        assert output_matches([line], [last.rstrip()], numbers_vary=True), (
            f"{where} shows\n{line}\nthe live line is\n{last.rstrip()}"
        )


@contextlib.contextmanager
def simulated_gpu(directory: Path) -> Iterator[str]:
    """``nrg-collect simulate nvml`` at 500 W for the block (over 1 kJ by the job's last
    epoch, as the docs show); the table that reads it."""
    sim = subprocess.Popen(
        [NRG, "simulate", "nvml", str(directory), "--power", "500W"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert sim.stdout is not None
        yield "".join(sim.stdout.readline() for _ in range(2))
    finally:
        sim.terminate()
        sim.communicate(timeout=30)


def docs_live_lines() -> list[tuple[str, str]]:
    """Every live line README.md and docs/ show: (where, line)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [
        (b.where, line)
        for page in pages
        for b in blocks(page)
        for line in b.text.splitlines()
        if line.startswith("nrg ▸ ")
    ]


def test_no_live_line_without_a_terminal() -> None:
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        env = {**os.environ, "NRG_DATA_DIR": d, "NRG_STATE_DIR": d, "NRG_RUNTIME_DIR": d}
        out = subprocess.run(
            [NRG, "--", "sh", "-c", "sleep 1.5"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert out.returncode == 0
    assert "nrg ▸" not in out.stderr and "\x1b[" not in out.stderr


def test_no_energy_message_names_each_source_reason_and_fix() -> None:
    text = no_energy_message(
        ["procfs", "hooks"],
        [
            ("rapl", "permission denied reading intel-rapl:0"),
            ("nvml", "NVML library libnvidia-ml.so.1 not found"),
        ],
    )
    assert text.startswith(NO_ENERGY)
    assert "rapl: permission denied reading intel-rapl:0" in text
    assert FIX_RAPL_PERMISSION in text and FIX_NVML in text
    assert "emonpi: not configured" in text
    # the ones a user can fix first: RAPL's permission, then the wall meter, then the GPU
    sources = [ln.split(":")[0].strip() for ln in text.splitlines()[1:] if ln[2:3].isalpha()]
    assert sources == ["rapl", "emonpi", "nvml"]
    text = no_energy_message([], [("rapl", "no powercap zones, no MSR device, no power PMU")])
    assert FIX_RAPL_ABSENT in text
    stuck = "not advancing: psys (socket 0) did not move in 2.0 s (a virtual machine)"
    text = no_energy_message(["rapl"], [])  # rapl is open: no message at start
    assert text == ""
    text = no_energy_message([], [("emonpi", "cannot open /dev/ttyUSB0"), ("rapl", stuck)])
    assert text.splitlines()[1:] == [
        "  emonpi: cannot open /dev/ttyUSB0",
        f"    fix: {FIX_EMONPI_PORT}",
        f"  rapl: {stuck}",
        f"    fix: {FIX_RAPL_STUCK}",
        "  nvml: not configured",
        f"    fix: {FIX_NVML}",
    ]
    assert no_energy_message(["procfs", "rapl"], []) == ""


def test_require_energy_exits_3_before_starting_the_command() -> None:
    from acquisition.cli import MSG_REQUIRE_ENERGY

    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        marker = Path(d) / "ran"
        cfg = Path(d) / "nrg.toml"
        cfg.write_text(
            f'[agent]\nstate_dir = "{d}/state"\n[[collectors.procfs]]\n'
            f'[[collectors.rapl]]\nroot = "{FIXTURES / "vm-none" / "tree"}"\n'
            f'[[sinks.file]]\npath = "{d}/out/nrg.lp"\n'
        )
        env = {**os.environ, "NRG_RUNTIME_DIR": d}
        out = subprocess.run(
            [NRG, "-q", "--require-energy", "-c", str(cfg), "--", "touch", str(marker)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 3, out.stderr
        assert not marker.exists()
    assert NO_ENERGY in out.stderr and MSG_REQUIRE_ENERGY in out.stderr
    assert FIX_RAPL_ABSENT in out.stderr


def test_no_energy_still_once_every_open_energy_collector_is_not_advancing() -> None:
    stuck = "not advancing: psys (socket 0) did not move in 2.0 s (a virtual machine)"
    gpu = "not advancing: GPU 0 energy counter did not move in 2.0 s (a driver)"
    assert no_energy_still(["procfs"], []) == ""  # none opened: said at start instead
    assert no_energy_still(["rapl", "nvml"], []) == ""  # not judged yet
    assert no_energy_still(["rapl", "nvml"], [("rapl", stuck)]) == ""  # the GPU may measure
    text = no_energy_still(["procfs", "rapl", "nvml"], [("rapl", stuck), ("nvml", gpu)])
    assert text.splitlines()[:3] == [
        NO_ENERGY_STILL,
        f"  rapl: {stuck}",
        f"    fix: {FIX_RAPL_STUCK}",
    ]
    assert "  nvml: " + gpu in text.splitlines()


def test_an_agent_whose_counters_never_move_says_it_measures_no_energy(tmp_path: Path) -> None:
    """A real agent on a powercap tree whose counters stand still (no proc/stat there: the
    window alone judges): once they are judged, stderr says what it says when no source is
    readable at all, with the reason and the fix, once."""
    root = install_tree("xeon-2s-dram", tmp_path)
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f'[agent]\ninterval = "100ms"\nstate_dir = "{tmp_path}/state"\n[[collectors.procfs]]\n'
        f'[[collectors.rapl]]\nroot = "{root}"\nbackend = "powercap"\n'
        f'[[sinks.file]]\npath = "{tmp_path}/out/nrg.lp"\n'
    )
    env = {**os.environ, "NRG_RUNTIME_DIR": str(tmp_path)}
    agent = subprocess.Popen(
        [NRG, "-q", "-c", str(cfg)], stderr=subprocess.PIPE, text=True, env=env
    )
    lines: list[str] = []
    assert agent.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(agent.stderr or ()), daemon=True)
    reader.start()
    try:
        _wait(lambda: any(NO_ENERGY_STILL in line for line in lines), "the sentence")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
        reader.join(60)
        agent.stderr.close()
    text = [line.rstrip("\n") for line in lines]
    start = text.index(NO_ENERGY_STILL)
    rapl, fix = text[start + 1 : start + 3]
    assert rapl.startswith(
        "  rapl: not advancing: package (socket 0), dram (socket 0), package (socket 1), "
        "dram (socket 1) did not move in "
    )
    assert rapl.endswith(f" s ({WHY_FIRMWARE})") and fix == f"    fix: {FIX_RAPL_STUCK}"
    assert text.count(NO_ENERGY_STILL) == 1
    assert NO_ENERGY not in text  # an energy collector opened: nothing said at start
    written = "".join(f.read_text() for f in (tmp_path / "out").glob("*.lp"))
    assert "\nrapl," not in "\n" + written  # and no zero it could be taken for


def test_energy_totals_keep_power_now_and_energy_so_far_per_source() -> None:
    totals = EnergyTotals()
    rapl = {"domain": "package", "socket": "0"}
    totals.offer(Point("rapl", rapl, {"energy_joules": 10.0}, 1))
    totals.offer(Point("rapl", rapl, {"energy_joules": 1510.0, "power_watts": 35.25}, 2))
    totals.offer(Point("gpu", {"gpu": "0"}, {"power_watts": 250.0, "energy_joules": 2.5e6}, 2))
    totals.offer(Point("cpu", {"cpu": "total"}, {"utilization_ratio": 0.5}, 2))
    assert totals.summary() == "gpu0 250.0 W 2.50 MJ · package-0 35.2 W 1.51 kJ"
