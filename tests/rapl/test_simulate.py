"""``nrg-collect simulate rapl``: the tree it lays out is read by the real collector (counters
that wrap included), and a tracked run on it measures the simulated powers."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from collectors.rapl import RaplCollector, RaplConfig
from collectors.rapl.sim import BAD_POWER, config_table, layout, parse_watts, write_counters
from tests.rapl.scenarios import SteppedIO, context
from tests.simulated import NRG, sources, tracked_run_on_simulator

S = 1_000_000_000


def test_powers_parse_with_their_unit() -> None:
    assert [parse_watts(v) for v in ("25W", "5", "0.5kW", " 2.5 W ")] == [25.0, 5.0, 500.0, 2.5]
    with pytest.raises(ValueError) as info:
        parse_watts("25 watts")
    assert str(info.value) == BAD_POWER.format(value="25 watts")


def test_the_table_printed_is_valid_toml_naming_the_tree(tmp_path: Path) -> None:
    table = tomllib.loads(config_table(tmp_path))
    assert table == {"collectors": {"rapl": [{"root": str(tmp_path), "backend": "powercap"}]}}


async def test_the_collector_reads_the_tree_and_its_wraps(tmp_path: Path) -> None:
    """Counters that wrap every 4 J, read every 0.1 s at 25 W + 5 W: 2.5 J a step, so the
    package counter wraps several times; the collector's energy is power × time throughout."""
    zones = layout(tmp_path, 25.0, 5.0, sockets=2, max_range_uj=4_000_000)
    io = SteppedIO()
    collector = RaplCollector(RaplConfig(root=str(tmp_path), backend="powercap"), context(), io=io)
    await collector.open()
    points = []
    for k in range(1, 21):
        io.now = k * S // 10
        write_counters(tmp_path, zones, 0, k * S // 10, 4_000_000)
        await collector.collect(points.append, k * S // 10)
    last = {(p.tags["socket"], p.tags["domain"]): p.fields for p in points[-4:]}
    assert set(last) == {(s, d) for s in "01" for d in ("package", "dram")}
    for (_, domain), fields in last.items():
        watts = 25.0 if domain == "package" else 5.0
        assert fields["energy_joules"] == pytest.approx(watts * 2.0, abs=1e-6)  # since open, t=0
        assert fields["power_watts"] == pytest.approx(watts, rel=1e-6)
    assert collector.stats()["wraps"] >= 2 * 11  # both packages wrapped at least 11 times


@pytest.mark.slow
def test_simulate_and_a_tracked_run_measure_the_simulated_powers(short_tmp: Path) -> None:
    simulate = ["rapl", str(short_tmp / "rapl"), "--package", "25W", "--dram", "5W"]
    run = tracked_run_on_simulator(short_tmp, simulate, table_lines=3)
    measured = sources(run.summary)
    assert measured["rapl:package-0"]["mean_w"] == pytest.approx(25.0, abs=run.mean_w_bound(25.0))
    assert measured["rapl:dram-0"]["mean_w"] == pytest.approx(5.0, abs=run.mean_w_bound(5.0))


@pytest.mark.parametrize("period", ["0", "-1"])
def test_a_period_that_is_not_positive_is_refused(tmp_path: Path, period: str) -> None:
    for source in ("rapl", "nvml"):
        proc = subprocess.run(
            [NRG, "simulate", source, str(tmp_path / source), "--period", period],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2
        assert f"argument --period: must be > 0, got {period}" in proc.stderr
        assert not (tmp_path / source).exists()
