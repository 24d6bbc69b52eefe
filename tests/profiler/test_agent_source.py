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
from tests.answers.fakepower import stale_s
from tests.profiler.power import energy_between, powercap_tree
from tests.selfstats import read_lag_s

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, record_function  # noqa: E402

pytestmark = pytest.mark.slow
NRG = str(Path(sys.executable).with_name("nrg-collect"))


def test_energy_from_a_running_agents_file_sink(tmp_path: Path) -> None:
    """An operator's energy from the agent's readings is power × its time, to within what the
    counters' writer and the agent measured of their own lag, and the event's error bar."""
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
            writer_stale_s = stale_s(root)  # read before the tree goes
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
    assert isinstance(prof.sampler, AgentSampler)
    (sleep,) = [e for e in prof.energy_events() if e.name == "sleep"]
    expected = sum(energy_between(p, sleep.start_ns, sleep.end_ns) for p in profiles.values())
    assert sleep.total_j is not None
    # each reading's counter lags its time stamp by up to the writer's stalest, or was read up
    # to the agent's longest collect after it: at 48 W, that much energy either way
    offset_s = writer_stale_s + read_lag_s(data, "rapl")
    assert sleep.total_j == pytest.approx(expected, abs=48 * offset_s + sleep.error_j)
    assert set(sleep.by_source) == {"rapl:package-0", "rapl:dram-0"}
