"""``profile(agent_data=DIR)``: the readings of the real ``nrg-collect`` agent already running here
(RAPL on a powercap tree at known power, written by its file sink), instead of sampling in the
training process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acquisition.profiler import profile
from acquisition.sampler import AgentSampler
from acquisition.store import Store
from tests.profiler.power import energy_between, powercap_tree

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, record_function  # noqa: E402

pytestmark = pytest.mark.slow
NRG = str(Path(sys.executable).with_name("nrg-collect"))


def test_energy_from_a_running_agents_file_sink(tmp_path: Path) -> None:
    t0 = time.time_ns()
    profiles = {"package-0": [(t0, 40.0)], "dram": [(t0, 8.0)]}
    data = tmp_path / "data"
    with powercap_tree(profiles) as root:
        config = tmp_path / "nrg.toml"
        config.write_text(
            f"""
[agent]
interval = "20ms"
flush_interval = "50ms"
state_dir = "{tmp_path}/state"
data_dir = "{data}"

[[collectors.rapl]]
root = "{root}"
backend = "powercap"

[[sinks.file]]
path = "{data}/nrg.lp"
fsync = "never"
"""
        )
        agent = subprocess.Popen([NRG, "--config", str(config), "--quiet"])
        try:
            deadline = time.monotonic() + 60
            # the data directory is there before the file sink's first file
            while not (any(data.glob("*.lp")) and any(Store(data).points(["rapl"]))):
                assert agent.poll() is None, "the agent exited"
                assert time.monotonic() < deadline, "no rapl points from the agent"
                time.sleep(0.05)
            with (
                profile(activities=[ProfilerActivity.CPU], agent_data=data) as prof,
                record_function("sleep"),
            ):
                time.sleep(0.3)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
    assert isinstance(prof.sampler, AgentSampler)
    (sleep,) = [e for e in prof.energy_events() if e.name == "sleep"]
    expected = sum(energy_between(p, sleep.start_ns, sleep.end_ns) for p in profiles.values())
    assert sleep.total_j is not None
    assert sleep.total_j == pytest.approx(expected, abs=0.004 * 48 + sleep.error_j)
    assert set(sleep.by_source) == {"rapl:package-0", "rapl:dram-0"}
