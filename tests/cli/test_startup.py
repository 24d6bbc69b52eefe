"""The default path stays lean: libraries of plugins that cannot work here, and the live line's
renderer, are never imported (start-up time is measured by bench/bench_startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from acquisition.registry import quick_unavailable

REPO = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, sys
from acquisition import cli
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

# module -> the collector whose presence on this machine may legitimately load it
_NEVER = {
    "rich": None,
    "influxdb_client": None,
    "aiohttp": None,
    "torch": None,
    "pynvml": "nvml",
    "serial": "emonpi",
    "serial_asyncio": "emonpi",
}


@pytest.mark.parametrize("argv", [["-q", "--", "true"], ["--once"], ["list"]])
def test_default_path_imports_no_optional_library(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="nrg-") as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NRG_")}
        env.update(
            PYTHONPATH=str(REPO), NRG_DATA_DIR=d, NRG_STATE_DIR=d, NRG_RUNTIME_DIR=d, TERM="dumb"
        )
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["code"] == 0, out.stderr
    loaded = {m.split(".")[0] for m in result["modules"]}
    for module, collector in _NEVER.items():
        if collector is not None and quick_unavailable(collector) is None:
            continue  # that device exists here: its collector may load the library
        assert module not in loaded, f"{module} imported by nrg-collect {' '.join(argv)}"
