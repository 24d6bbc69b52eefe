"""The forecast from Python: ``Tracker(epochs=N)`` with ``t.epoch()`` marks on RAPL at a known
power (a powercap tree), and the training library's ``plan`` (what it sends, what it refuses);
the live line's forecast part."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from acquisition.config import parse_config
from acquisition.energy import EnergyTotals
from acquisition.forecast import TOTAL
from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.tracker import Tracker
from tests.answers.fakepower import powercap_tree

PACKAGE_W, DRAM_W = 20.0, 4.0
EPOCH_S = 0.3
INTERVAL_S = 0.02


def test_tracker_forecast_from_its_epochs() -> None:
    config = """
[[collectors.rapl]]
root = "{root}"
backend = "powercap"
"""
    with powercap_tree({"package-0": PACKAGE_W, "dram": DRAM_W}) as root:
        t = Tracker(parse_config(config.format(root=root)), interval_s=INTERVAL_S, epochs=5)
        with t:
            assert t.forecast() is None  # no epoch has ended
            t.epoch()
            time.sleep(EPOCH_S)
            t.epoch()
            first = t.forecast()
            time.sleep(EPOCH_S)
            t.epoch()
            second = t.forecast()
    assert first is not None and second is not None
    assert (first.epochs_done, second.epochs_done, second.epochs) == (1, 2, 5)
    watts = PACKAGE_W + DRAM_W
    for f in (first, second):
        epoch_s = (f.total_s.value - f.elapsed_s) / (5 - f.epochs_done)
        assert epoch_s == pytest.approx(EPOCH_S, rel=0.5)  # sleep() on a loaded machine
        energy = f.energy_total_j[TOTAL]
        expected = f.energy_spent_j[TOTAL] + watts * (f.total_s.value - f.elapsed_s)
        # The first epoch's energy starts at the tracker's first reading, up to one interval
        # after the epoch began: the per-epoch energy it extrapolates can miss that much.
        assert energy.value == pytest.approx(expected, rel=0.02 + INTERVAL_S / EPOCH_S)
        assert set(f.energy_total_j) >= {"rapl:package-0", "rapl:dram-0", TOTAL}
    # one epoch: no spread yet; two: an interval
    assert first.remaining_s.low == first.remaining_s.high
    assert second.remaining_s.low < second.remaining_s.value < second.remaining_s.high


def test_session_plan_is_sent_and_checked(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from acquisition.torch import instrument
    from acquisition.torch.session import PLAN_ERROR

    model = torch.nn.Linear(4, 2)
    with instrument(
        model,
        example_inputs=(torch.randn(2, 4),),
        run="planned",
        socket_path=tmp_path / "nobody.sock",
        fallback_dir=tmp_path / "fallback",
        graph=False,
        epochs=10,
    ) as session:
        session.plan(12, steps_per_epoch=30)
        with pytest.raises(ValueError) as err:
            session.plan(0)
        assert str(err.value) == PLAN_ERROR.format(key="epochs", value=0)
        with pytest.raises(ValueError, match="steps_per_epoch"):
            session.plan(3, steps_per_epoch=-1)
    points = [
        decode_line(line)
        for f in (tmp_path / "fallback").glob("*.lp")
        for line in f.read_text().splitlines()
        if line.startswith("nrg_plan")
    ]
    assert [(p.fields.get("epochs"), p.fields.get("steps_per_epoch")) for p in points] == [
        (10, None),
        (12, 30),
    ]
    assert all(p.tags["run"] == "planned" for p in points)


def test_live_line_shows_the_latest_forecast() -> None:
    totals = EnergyTotals()
    totals.offer(Point("rapl", {"socket": "0", "domain": "package"}, {"power_watts": 30.0}, 1))
    assert "epoch" not in totals.summary()
    fields = {
        "epochs_done": 2,
        "epochs": 10,
        "remaining_seconds": 240.0,
        "remaining_low_seconds": 200.0,
        "remaining_high_seconds": 300.0,
        "energy_joules": 120_300.0,
    }
    totals.offer(Point("nrg_forecast", {"source": "rapl:package-0"}, fields, 2))
    assert "epoch" not in totals.summary()  # only the total is shown
    totals.offer(Point("nrg_forecast", {"source": "total"}, fields, 2))
    assert totals.summary().endswith("epoch 2/10: 4.0 min left (3.3 min–5.0 min), 120.3 kJ total")
