"""An InfluxDB sink configured where its extra is not installed: ``list`` and the agent's
start-up exit 2 with one line naming the extra, no traceback, nothing started."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from acquisition.errors import install_hint
from acquisition.registry import EXTRA_MISSING

# The packages of the 'influx' extra made unimportable, as in an environment without them
# (``sys.modules[name] = None`` is how Python marks a module that cannot be imported).
_RUN = """
import sys
sys.modules["aiohttp"] = None
sys.modules["influxdb_client"] = None
from acquisition.cli import main
sys.exit(main(sys.argv[1:]))
"""

_CONFIG = """
[[collectors.procfs]]
[[sinks.file]]
dir = "{data}"
[[sinks.influxdb]]
url = "http://127.0.0.1:9"
org = "lab"
bucket = "nrg"
token = "${{INFLUX_TOKEN}}"
"""


@pytest.mark.parametrize("argv", [["list"], ["--", sys.executable, "-c", "pass"]])
def test_influx_sink_without_its_extra_exits_2_naming_the_extra(
    tmp_path: Path, argv: list[str]
) -> None:
    config = tmp_path / "nrg.toml"
    config.write_text(_CONFIG.format(data=tmp_path / "data"))
    env = {"INFLUX_TOKEN": "secret", "PATH": "/usr/bin:/bin", "NRG_STATE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, "-c", str(config), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    expected = EXTRA_MISSING.format(
        where="sinks.influxdb[0]", module="aiohttp", hint=install_hint("influx")
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"nrg-collect: configuration error: {expected}"]
    assert "'.[influx]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "data").exists()  # nothing was started


def test_help_shows_the_command_form_the_subcommands_and_every_options_meaning() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "acquisition.cli", "--help"], capture_output=True, text=True
    )
    usage = proc.stdout.split("\n\n")[0]
    assert "[-- COMMAND ...]" in usage
    assert "{run,list,config,simulate," in usage
    for option in ("--ram-unit", "--gpu-ram-unit", "--time-unit"):
        assert re.search(rf"{option} {{[^}}]*}}\s+unit of ", proc.stdout), option
