"""``list`` opens the serial port for real; ``--once`` waits for an emonPi frame (or says it
skipped it). The port is a real pseudo-terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.cli import ONCE_SKIPPED, ONCE_STREAM_WAIT_S
from acquisition.lineproto import decode_line

pytest.importorskip("serial_asyncio")
pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
FRAME = b"OK 5 96 1 211 255 51 1 73 94 215 0 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)\r\n"
"""A classic emonPi frame (node 5): power1 352 W, power2 -45 W, Vrms 241.37 V."""


@pytest.fixture
def pty_port() -> Iterator[tuple[int, str]]:
    master, slave = os.openpty()
    yield master, os.ttyname(slave)
    os.close(slave)
    os.close(master)


def _config(tmp_path: Path, port: str) -> Path:
    cfg = tmp_path / "emonpi.toml"
    cfg.write_text(
        f'[agent]\nstate_dir = "{tmp_path}/state"\n[[collectors.emonpi]]\nport = "{port}"\n'
    )
    return cfg


def _nrg(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NRG_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([NRG, *argv], capture_output=True, text=True, timeout=60, env=env)


def test_list_says_a_configured_port_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    missing = str(tmp_path / "ttyUSB7")
    out = _nrg("-c", str(_config(tmp_path, missing)), "list", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(None, 1) for line in out.stdout.splitlines())
    assert rows["emonpi"].startswith(f"unavailable: cannot open {missing}"), rows


def test_list_says_a_real_port_is_available(tmp_path: Path, pty_port: tuple[int, str]) -> None:
    _, port = pty_port
    out = _nrg("-c", str(_config(tmp_path, port)), "list", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(None, 1) for line in out.stdout.splitlines())
    assert rows["emonpi"].startswith(f"available: {port}"), rows


def _has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (its file descriptors under /proc)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            continue
    return False


def test_once_with_only_an_emonpi_waits_for_its_frame(
    tmp_path: Path, pty_port: tuple[int, str]
) -> None:
    """The frame comes only once the collector has the port open (a frame sent before is not
    one it could have read), and again every half second, as a monitor sends them, until
    ``--once`` has taken one and exited: however slowly the agent starts."""
    master, port = pty_port
    env = {**os.environ, "NRG_STATE_DIR": str(tmp_path / "state")}
    cmd = [NRG, "--once", "-c", str(_config(tmp_path, port))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def send_once_open() -> None:
        while proc.poll() is None:
            if _has_open(proc.pid, port):
                os.write(master, FRAME)
            time.sleep(0.5)

    writer = threading.Thread(target=send_once_open)
    writer.start()
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        writer.join()
    assert proc.returncode == 0, stderr
    points = [decode_line(line) for line in stdout.splitlines()]
    (emonpi,) = [p for p in points if p.measurement == "emonpi"]
    assert emonpi.tags["node"] == "5"
    assert emonpi.fields["power1_watts"] == 352.0


def test_once_says_when_no_frame_came(tmp_path: Path, pty_port: tuple[int, str]) -> None:
    _, port = pty_port
    out = _nrg("--once", "-c", str(_config(tmp_path, port)), tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert ONCE_SKIPPED.format(label="emonpi", wait=ONCE_STREAM_WAIT_S["emonpi"]) in out.stderr
    assert "emonpi" not in out.stdout
