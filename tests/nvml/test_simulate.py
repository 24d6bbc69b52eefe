"""``nrg-collect simulate nvml``: the GPUs it writes are read by the real nvml collector through
the fake binding (energy in mJ, power in mW, the driver's samples), and a tracked run on them
measures the simulated power."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from acquisition.api import PluginContext
from acquisition.errors import NoData
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.sim import config_table, layout, write_state
from tests.simulated import sources, tracked_run_on_simulator

S = 1_000_000_000
T0 = 1_795_000_000 * S
WATTS = 300.0


def test_the_table_printed_is_valid_toml_naming_the_directory(tmp_path: Path) -> None:
    table = tomllib.loads(config_table(tmp_path))
    assert table == {"collectors": {"nvml": [{"simulate": str(tmp_path)}]}}


async def test_the_collector_reads_the_simulated_gpus(
    tmp_path: Path, context: PluginContext
) -> None:
    """Two GPUs at 300 W, the state written as the simulator writes it every tenth of a second:
    the collector's energy (the counter since it opened) is power × time, its power 300 W, and
    the driver's power samples come at their own times, up to the state's."""
    powers = layout(tmp_path, WATTS, gpus=2, start_ns=T0)
    config = NvmlConfig(simulate=str(tmp_path), energy_interval=0.0, detail_interval=0.0)
    collector = NvmlCollector(config, context)
    await collector.open()
    points: list[Point] = []
    try:
        for k in range(1, 21):
            now = T0 + k * S // 10
            write_state(tmp_path, powers, T0, now)
            await collector.collect(points.append, now)
    finally:
        await collector.aclose()
    gpus = [p for p in points if p.measurement == "gpu"]
    last = {p.tags["gpu"]: p.fields for p in gpus[-2:]}
    assert set(last) == {"0", "1"}
    for fields in last.values():
        assert fields["energy_joules"] == pytest.approx(WATTS * 2.0, abs=1e-3)  # since open, t=0
        assert fields["power_watts"] == pytest.approx(WATTS)
    samples = [p for p in points if p.measurement == "gpu_sample" and p.tags["gpu"] == "0"]
    stamps = sorted(p.time_ns for p in samples if "power_watts" in p.fields)
    assert stamps and stamps[-1] <= T0 + 2 * S and len(stamps) >= 90  # every 20 ms for 2 s
    assert {p.fields["power_watts"] for p in samples if "power_watts" in p.fields} == {WATTS}


async def test_no_simulated_gpus_is_said(tmp_path: Path, context: PluginContext) -> None:
    collector = NvmlCollector(NvmlConfig(simulate=str(tmp_path / "none")), context)
    with pytest.raises(NoData, match="no simulated GPUs here"):
        await collector.open()


@pytest.mark.slow
def test_simulate_and_a_tracked_run_measure_the_simulated_power(short_tmp: Path) -> None:
    """The mean power and the energy (power × time) of a tracked run on the simulated GPU, to
    within what the simulator and the agent measured of their own lag (under load a counter
    can be tens of ms stale) and the summary's error bar."""
    run = tracked_run_on_simulator(
        short_tmp, ["nvml", str(short_tmp / "gpu"), "--power", "300W"], table_lines=2
    )
    gpu = sources(run.summary)["nvml:0"]
    assert gpu["mean_w"] == pytest.approx(WATTS, abs=run.mean_w_bound(WATTS))
    expected = WATTS * run.summary["duration_s"]
    assert gpu["energy_j"] == pytest.approx(expected, abs=run.energy_bound(WATTS, "nvml:0"))
