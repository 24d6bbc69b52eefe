"""A tracked job gets a hooks socket of its own; a clash on the default socket is an error."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.agent import SOCKET_IN_USE
from acquisition.cli import MSG_RUN_MISMATCH
from acquisition.lineproto import decode_line
from acquisition.point import Point

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]

_JOB = r"""
import os, socket, sys
path = os.environ["NRG_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.sendall(b'nrg_run,run=own-socket event="start"\n')
s.shutdown(socket.SHUT_WR)
s.recv(1)  # the agent closes its side once it has read everything
print(path)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        yield Path(d)


def _config(workdir: Path, name: str) -> Path:
    cfg = workdir / f"{name}.toml"
    cfg.write_text(
        f"""
[agent]
interval = "200ms"
flush_interval = "100ms"
state_dir = "{workdir}/state-{name}"
[[collectors.procfs]]
[[collectors.hooks]]
[[sinks.file]]
path = "{workdir}/{name}/nrg.lp"
"""
    )
    return cfg


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRG_")}
    env.update(PYTHONPATH=str(REPO), NRG_RUNTIME_DIR=str(workdir / "run"))
    return env


def _points(path: Path) -> list[Point]:
    if not path.exists():
        return []
    return [decode_line(line) for line in path.read_text().splitlines()]


def test_tracked_job_uses_its_own_socket_beside_a_running_agent(workdir: Path) -> None:
    env = _env(workdir)
    standing = subprocess.Popen(
        [NRG, "-q", "-c", str(_config(workdir, "standing"))],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert standing.stderr is not None
        for line in standing.stderr:
            if "collecting from" in line:
                break
        default_socket = workdir / "run" / "hooks.sock"
        assert default_socket.is_socket()

        # A second agent on the same default socket: an error saying what to do.
        second = subprocess.run(
            [NRG, "-q", "-c", str(_config(workdir, "second"))],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stderr
        assert SOCKET_IN_USE.format(path=default_socket) in second.stderr

        job = workdir / "job.py"
        job.write_text(_JOB)
        tracked = subprocess.run(
            [NRG, "-q", "-c", str(_config(workdir, "tracked")), "--", sys.executable, str(job)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert tracked.returncode == 0, tracked.stderr
        assert Path(tracked.stdout.strip()) != default_socket
        # The job named its own run: the agent says the two will not join, and how to fix it.
        said = MSG_RUN_MISMATCH.format(job="own-socket", agent="job.py-X").split("job.py-X")[0]
        assert said in tracked.stderr
    finally:
        standing.terminate()
        standing.communicate(timeout=60)
    mine = [p for p in _points(workdir / "tracked" / "nrg.lp") if p.measurement == "nrg_run"]
    assert [p.tags["run"] for p in mine] == ["own-socket"]
    theirs = _points(workdir / "standing" / "nrg.lp")
    assert theirs and not [p for p in theirs if p.measurement == "nrg_run"]
