"""The Unix-socket transport and its file fallback, against a real socket peer."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from acquisition.torch.transport import LineSender, default_fallback_dir, default_socket_path
from tests.torch.conftest import Listener

LINES = [f"nrg_step,run=r step={i}i {1_000 + i}\n" for i in range(200)]


def test_defaults_follow_the_environment(private_dirs: Path) -> None:
    assert default_socket_path() == private_dirs / "absent.sock"
    assert default_fallback_dir() == private_dirs / "fallback"


def test_lines_reach_the_agent_and_no_file_is_written(listener: Listener, tmp_path: Path) -> None:
    assert stat.S_IMODE(listener.path.stat().st_mode) == 0o600
    sender = LineSender(listener.path, tmp_path / "fb.lp")
    sender.start()
    for line in LINES:
        sender.send(line)
    sender.close()
    assert listener.text() == "".join(LINES)
    assert not (tmp_path / "fb.lp").exists()
    assert (sender.connects, sender.disconnects, sender.fallback_bytes) == (1, 0, 0)


def test_no_agent_means_every_line_goes_to_the_file(tmp_path: Path) -> None:
    sender = LineSender(tmp_path / "nobody.sock", tmp_path / "spool" / "fb.lp")
    sender.start()
    for line in LINES:
        sender.send(line)
    sender.close()
    assert (tmp_path / "spool" / "fb.lp").read_text() == "".join(LINES)
    assert sender.socket_bytes == 0


def test_agent_killed_mid_run_loses_nothing(listener: Listener, tmp_path: Path) -> None:
    fallback = tmp_path / "fb.lp"
    sender = LineSender(listener.path, fallback, retry_interval_s=3600)
    sender.start()
    for line in LINES[:100]:
        sender.send(line)
    # Wait until the thread has handed the first half to the socket, then kill the agent.
    while sender.socket_bytes < len("".join(LINES[:100])):
        time.sleep(0.001)
    listener.kill()
    for line in LINES[100:]:
        sender.send(line)
    sender.close()
    received = {line + "\n" for line in listener.text().split("\n")[:-1]}
    spooled = fallback.read_text().splitlines(keepends=True)
    assert received | set(spooled) == set(LINES)
    assert sender.disconnects == 1
    # Whatever went to the file went there whole and in order.
    assert spooled == sorted(spooled, key=LINES.index)


def test_agent_that_never_reads_the_end_gets_a_replay(tmp_path: Path) -> None:
    import os
    import socket

    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.fspath(path))
    server.listen(1)
    sender = LineSender(path, tmp_path / "fb.lp")
    sender.start()
    conn, _ = server.accept()
    for line in LINES[:10]:
        sender.send(line)
    sender.close(timeout_s=0.2)  # the peer never closes: no proof it read the lines
    assert (tmp_path / "fb.lp").read_text() == "".join(LINES[:10])
    conn.close()
    server.close()
