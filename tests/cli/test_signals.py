"""``nrg-collect -- CMD`` passes signals like a shell: the real agent on a real pty, real jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.job import ANNOUNCE_FORWARDED, ANNOUNCE_SIGNAL, ANNOUNCE_WAITING
from acquisition.lineproto import decode_line
from acquisition.point import Point
from tests.cli.pty_run import PtyProcess

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]

_CHECKPOINT_JOB = r"""
import pathlib, sys, time
import torch
from acquisition.torch import instrument

checkpoint = pathlib.Path(sys.argv[1])
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    with instrument(model, graph=False) as session:
        for step in range(100_000):
            loss = model(torch.randn(8, 4)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 5:
                print("READY", flush=True)
            time.sleep(0.02)
except KeyboardInterrupt:
    checkpoint.write_text(f"step {step}")
    print("CHECKPOINT SAVED", flush=True)
    sys.exit(3)
"""

_STUBBORN_JOB = r"""
import signal, sys, time
for name in sys.argv[1:]:
    signal.signal(getattr(signal, name), lambda n, f: print(f"GOT {signal.Signals(n).name}", flush=True))
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short: the hooks socket lives here and a Unix socket path is limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        yield Path(d)


def _config(workdir: Path) -> Path:
    cfg = workdir / "nrg.toml"
    cfg.write_text(
        f"""
[agent]
interval = "100ms"
flush_interval = "100ms"
stats_interval = "1s"
state_dir = "{workdir}/state"

[[collectors.procfs]]
[[collectors.hooks]]

[[sinks.file]]
path = "{workdir}/out/nrg.lp"
"""
    )
    return cfg


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRG_")}
    env.update(
        PYTHONPATH=str(REPO),
        NRG_RUNTIME_DIR=str(workdir / "run"),
        NRG_DATA_DIR=str(workdir / "data"),
        NRG_STATE_DIR=str(workdir / "state"),
        TERM="dumb",
    )
    return env


def _points(workdir: Path) -> list[Point]:
    return [
        decode_line(line)
        for path in sorted((workdir / "out").glob("*.lp*"))
        for line in path.read_text().splitlines()
    ]


def test_ctrl_c_reaches_only_the_job_which_saves_its_checkpoint_and_exit_code(
    workdir: Path,
) -> None:
    pytest.importorskip("torch")
    checkpoint = workdir / "ckpt"
    job = workdir / "job.py"
    job.write_text(_CHECKPOINT_JOB)
    cfg = _config(workdir)
    p = PtyProcess(
        [NRG, "-q", "-c", str(cfg), "--", sys.executable, str(job), str(checkpoint)],
        _env(workdir),
    )
    try:
        p.expect(b"READY")
        p.ctrl_c()
        code = p.wait()
    finally:
        p.kill()
    assert code == 3, p.text()
    assert checkpoint.read_text().startswith("step "), p.text()
    assert "CHECKPOINT SAVED" in p.text()
    assert ANNOUNCE_WAITING.split("{")[0] in p.text()
    assert "Terminated" not in p.text() and "SIGTERM" not in p.text()
    points = _points(workdir)
    runs = [pt for pt in points if pt.measurement == "nrg_run"]
    # the job's start and end; the agent's record of the command's exit status is nrg_job's
    assert [pt.fields["event"] for pt in runs] == ["start", "end"], runs
    jobs = [pt for pt in points if pt.measurement == "nrg_job"]
    assert [(pt.fields["event"], pt.fields.get("exit_code")) for pt in jobs] == [
        ("spawn", None),
        ("exit", 3),
    ]
    assert [pt for pt in points if pt.measurement == "nrg_step"], "no step reached the agent"
    # The job and the agent agree on the run: the agent passed NRG_RUN, derived from the script.
    agent_runs = {pt.tags.get("run") for pt in points if pt.measurement == "memory"}
    assert agent_runs == {runs[0].tags["run"]}
    assert runs[0].tags["run"].startswith("job.py-")


_HUP_JOB = r"""
import pathlib, signal, sys, time
done = pathlib.Path(sys.argv[1])
def hung_up(signum, frame):
    done.write_text("saved")
    sys.exit(5)
signal.signal(signal.SIGHUP, hung_up)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


def test_closing_the_terminal_hangs_up_the_job_once_and_the_agent_still_flushes(
    workdir: Path,
) -> None:
    job = workdir / "hup.py"
    job.write_text(_HUP_JOB)
    done = workdir / "saved"
    p = PtyProcess(
        [NRG, "-q", "-c", str(_config(workdir)), "--", sys.executable, str(job), str(done)],
        _env(workdir),
    )
    try:
        p.expect(b"READY\r\n")  # the whole line: the job must not be writing any more
        os.close(p.master)  # the terminal goes away: the kernel sends SIGHUP
        code = p.proc.wait(timeout=60)
    finally:
        p.kill()
    assert code == 5
    assert done.read_text() == "saved"
    assert any(pt.measurement == "memory" for pt in _points(workdir))


def test_second_ctrl_c_escalates_to_sigterm_and_exit_status_is_128_plus_n(
    workdir: Path,
) -> None:
    job = workdir / "stubborn.py"
    job.write_text(_STUBBORN_JOB)
    p = PtyProcess(
        [NRG, "-q", "-c", str(_config(workdir)), "--", sys.executable, str(job), "SIGINT"],
        _env(workdir),
    )
    try:
        p.expect(b"READY")
        p.ctrl_c()
        p.expect(b"GOT SIGINT")
        p.expect(ANNOUNCE_WAITING.split("{")[0].encode())
        p.ctrl_c()
        code = p.wait()
    finally:
        p.kill()
    assert code == 128 + signal.SIGTERM, p.text()
    announced = ANNOUNCE_SIGNAL.format(signame="SIGTERM", pid="", why="").split("(pid")[0]
    assert announced in p.text()


def test_kill_after_escalates_sigterm_then_sigkill_each_announced(workdir: Path) -> None:
    job = workdir / "stubborn.py"
    job.write_text(_STUBBORN_JOB)
    p = PtyProcess(
        [
            NRG,
            "-q",
            "--kill-after",
            "300ms",
            "-c",
            str(_config(workdir)),
            "--",
            sys.executable,
            str(job),
            "SIGINT",
            "SIGTERM",
        ],
        _env(workdir),
    )
    try:
        p.expect(b"READY")
        p.ctrl_c()
        code = p.wait()
    finally:
        p.kill()
    assert code == 128 + signal.SIGKILL, p.text()
    text = p.text()
    assert "GOT SIGINT" in text and "GOT SIGTERM" in text
    for name in ("SIGTERM", "SIGKILL"):
        assert ANNOUNCE_SIGNAL.format(signame=name, pid="", why="").split("(pid")[0] in text
    assert text.index("sending SIGTERM") < text.index("sending SIGKILL")


_TERM_JOB = r"""
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda n, f: got.append(n))
print("READY", flush=True)
while not got:
    time.sleep(0.02)
time.sleep(0.5)  # a second SIGTERM would arrive in this window
print(f"GOT SIGTERM x{len(got)}", flush=True)
"""


def test_sigterm_to_the_agent_group_reaches_the_job_once_without_a_terminal(
    workdir: Path,
) -> None:
    job = workdir / "term.py"
    job.write_text(_TERM_JOB)
    proc = subprocess.Popen(
        [NRG, "-q", "-c", str(_config(workdir)), "--", sys.executable, str(job)],
        env=_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        # To the agent's whole process group, as a service manager or CI runner does.
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "GOT SIGTERM x1" in out, out
    forwarded = ANNOUNCE_FORWARDED.format(signame="SIGTERM", pid="", kill_after="")
    assert forwarded.split("(pid")[0] in err
    assert any(pt.measurement == "memory" for pt in _points(workdir))


def test_a_command_that_is_not_found_starts_no_agent(workdir: Path) -> None:
    from acquisition.job import MSG_NOT_FOUND

    out = subprocess.run(
        [NRG, "-c", str(_config(workdir)), "--", "nrg-no-such-command-here"],
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 127
    assert MSG_NOT_FOUND.format(command="nrg-no-such-command-here") in out.stderr
    assert not (workdir / "out").exists(), "an agent ran and wrote points"
    assert "collecting from" not in out.stderr


def test_a_second_sigterm_cuts_a_hung_final_flush_short_and_spools_the_rest(
    workdir: Path,
) -> None:
    """A server that accepts and never answers: the final flush would wait for its deadline
    (60 s here); a second SIGTERM ends it at once, keeping what is queued in the spool."""
    import socket

    from acquisition.agent import FLUSH_CUT_SHORT
    from acquisition.cli import MSG_STOPPING

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    cfg = workdir / "hung.toml"
    cfg.write_text(
        f"""
[agent]
interval = "50ms"
stats_interval = "1s"
shutdown_timeout = "60s"
state_dir = "{workdir}/state"

[[collectors.procfs]]

[[sinks.influxdb]]
url = "http://127.0.0.1:{port}"
bucket = "nrg"
timeout = "60s"
spool_dir = "{workdir}/spool"
fsync = "never"
"""
    )
    proc = subprocess.Popen(
        [NRG, "-q", "-c", str(cfg)],
        env=_env(workdir),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the agent runs once it says where it collects
            if "collecting from" in line:
                break
        conn, _ = server.accept()  # the first write is in flight and will never get an answer
        proc.send_signal(signal.SIGTERM)
        for line in proc.stderr:  # two signals sent at once would merge into one
            if MSG_STOPPING in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)  # hang guard, far below the 60 s deadline
        conn.close()
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert FLUSH_CUT_SHORT.split("%d")[0] in err, err
    assert any((workdir / "spool").rglob("*")), "nothing was kept in the spool"
