"""Tags a tracked run derives: the run name from the script, sanitised, shared with the job."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from acquisition.config import AgentConfig, sanitize_tag
from acquisition.job import job_name
from acquisition.lineproto import LineEncoder, decode_line
from acquisition.point import Point

NRG = str(Path(sys.executable).with_name("nrg-collect"))
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["python", "train.py", "--lr", "0.1"], "train.py"),
        (["/usr/bin/python3.11", "-u", "-W", "ignore", "src/train.py"], "train.py"),
        (["python3", "-m", "pkg.train", "--epochs", "3"], "pkg.train"),
        (["python", "-mpkg.train"], "pkg.train"),
        (["python", "-c", "print(1)"], "python"),
        (["torchrun", "--nproc-per-node", "2", "train.py"], "train.py"),
        (["uv", "run", "scripts/fit.py"], "fit.py"),
        (["./job.sh", "a"], "job.sh"),
        (["make", "train"], "make"),
    ],
)
def test_run_name_comes_from_the_script_not_the_interpreter(argv: list[str], name: str) -> None:
    assert job_name(argv) == name


def test_a_name_that_is_not_utf8_is_sanitised_and_encodes() -> None:
    raw = os.fsdecode(b"job\xff.sh")  # how Python hands such a file name over
    tags = AgentConfig(run=raw, host="h").global_tags({})
    assert tags["run"] == "job\ufffd.sh"
    line = LineEncoder(tags).encode(Point("m", {}, {"v": 1}, 1))
    assert line.encode("utf-8")  # would raise UnicodeEncodeError with the raw name
    assert sanitize_tag("a\nb\x00c") == "a b c"


@pytest.mark.slow
def test_a_tracked_command_whose_name_is_not_utf8_keeps_every_point() -> None:
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        work = Path(d)
        script = os.path.join(os.fsencode(work), b"job\xff.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nsleep 0.5\n")
        os.chmod(script, 0o755)
        cfg = work / "nrg.toml"
        cfg.write_text(
            f'[agent]\ninterval = "100ms"\nflush_interval = "100ms"\n'
            f'state_dir = "{work}/state"\n[[collectors.procfs]]\n'
            f'[[sinks.file]]\npath = "{work}/out/nrg.lp"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("NRG_")}
        env.update(PYTHONPATH=str(REPO), NRG_RUNTIME_DIR=str(work / "run"))
        out = subprocess.run(
            [os.fsencode(NRG), b"-q", b"-c", os.fsencode(cfg), b"--", script],
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert b"dropped" not in out.stderr, out.stderr
        points = [decode_line(line) for line in (work / "out" / "nrg.lp").read_text().splitlines()]
    memory = [p for p in points if p.measurement == "memory"]
    assert memory, "no point was written"
    assert {p.tags["run"].split("-")[0] for p in memory} == {"job\ufffd.sh"}
