"""Global options before or after the subcommand; the subcommand table."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from acquisition import cli

NRG = str(Path(sys.executable).with_name("nrg-collect"))


@pytest.mark.parametrize("order", ["before", "after"])
def test_global_options_before_or_after_the_subcommand(order: str) -> None:
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        cfg = Path(d) / "only-procfs.toml"
        cfg.write_text(f'[agent]\nstate_dir = "{d}/state"\n[[collectors.procfs]]\n')
        argv = ["-c", str(cfg), "list"] if order == "before" else ["list", "-c", str(cfg)]
        env = {**os.environ, "NRG_DATA_DIR": f"{d}/data", "NRG_STATE_DIR": f"{d}/state"}
        out = subprocess.run([NRG, *argv], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert [line.split()[0] for line in out.stdout.splitlines()] == ["procfs"]
        assert not (Path(d) / "data").exists(), "an agent ran and wrote points"


def test_a_plugged_in_subcommand_gets_the_global_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []

    def report(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setitem(cli.SUBCOMMANDS, "report", cli.Subcommand(report, "past runs"))
    assert cli.main(["-c", "agent.toml", "-v", "report", "run-1", "--format", "json"]) == 7
    assert seen == [["-c", "agent.toml", "-v", "run-1", "--format", "json"]]


def test_after_run_hooks_see_the_outcome_and_cannot_change_the_exit_status(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    outcomes: list[cli.RunOutcome] = []

    def broken(outcome: cli.RunOutcome) -> None:
        raise RuntimeError("printer failed")

    monkeypatch.setattr(cli, "AFTER_RUN", [outcomes.append, broken])
    monkeypatch.setenv("NRG_RUNTIME_DIR", str(tmp_path / "run"))
    cfg = tmp_path / "nrg.toml"
    cfg.write_text(
        f'[agent]\nstate_dir = "{tmp_path}/state"\n[[collectors.procfs]]\n'
        f'[[sinks.file]]\npath = "{tmp_path}/out/nrg.lp"\n'
    )
    code = cli.main(["-q", "-c", str(cfg), "--", "sh", "-c", "exit 4"])
    assert code == 4
    (outcome,) = outcomes
    assert outcome.exit_code == 4 and outcome.command == ["sh", "-c", "exit 4"]
    assert outcome.tags["run"].startswith("sh-")
    assert outcome.end_ns >= outcome.start_ns
