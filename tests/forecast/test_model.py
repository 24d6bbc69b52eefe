"""The forecast's statistics on plain numbers: the t quantiles, the prediction interval of a
sum of future values (its coverage checked by simulation), and the steps and epochs bases."""

from __future__ import annotations

import math
import random

import pytest

from acquisition.forecast import (
    EPOCH_BASIS_FROM,
    TOTAL,
    EpochFigures,
    predict_sum,
    t_quantile,
)
from acquisition.forecast import forecast_run as run_forecast


@pytest.mark.parametrize(
    ("df", "quantile"),
    # Student's t, 0.975 quantile (two-sided 95 %), from the standard tables.
    [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042), (40, 2.021), (60, 2.000),
     (120, 1.980), (10_000, 1.960)],
)  # fmt: skip
def test_t_quantile_matches_the_tables(df: int, quantile: float) -> None:
    assert t_quantile(df) == pytest.approx(quantile, abs=1.5e-3)


def test_t_quantile_needs_a_degree_of_freedom() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)


def test_predict_sum_by_hand() -> None:
    # mean 2, sd 1, n 3; two future values: 4 ± t(2) · 1 · √(2 + 4/3)
    got = predict_sum([1.0, 2.0, 3.0], 2)
    half = 4.303 * math.sqrt(2 + 4 / 3)
    assert got.value == pytest.approx(4.0)
    assert got.high == pytest.approx(4.0 + half, rel=1e-4)
    assert got.low == 0.0  # 4 − 7.86 clipped: a sum of durations is never negative
    narrow = predict_sum([10.0, 10.5, 9.5, 10.0], 3)
    assert narrow.low == pytest.approx(30 - 3.182 * math.sqrt(1 / 6) * math.sqrt(3 + 9 / 4))


def test_one_value_has_no_spread_and_nothing_left_is_zero() -> None:
    assert predict_sum([5.0], 3) == predict_sum([5.0], 3.0)
    one = predict_sum([5.0], 3)
    assert (one.value, one.low, one.high) == (15.0, 15.0, 15.0)
    none = predict_sum([1.0, 2.0], 0)
    assert (none.value, none.low, none.high) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("n", "m"), [(3, 1), (4, 6), (10, 20)])
def test_interval_covers_95_percent_of_future_sums(n: int, m: int) -> None:
    """Normal epochs: the interval of the sum of the next m, made from n seen, holds the true
    sum 95 % of the time (without the m²/n term, or with a normal quantile, it would not)."""
    rng = random.Random(27 + n * 100 + m)
    trials, hits = 4000, 0
    for _ in range(trials):
        seen = [rng.gauss(100.0, 10.0) for _ in range(n)]
        future = sum(rng.gauss(100.0, 10.0) for _ in range(m))
        est = predict_sum(seen, m)
        hits += est.low <= future <= est.high
    assert 0.935 <= hits / trials <= 0.965


def _epoch(steps: list[float], outside: float, watts: float) -> EpochFigures:
    return EpochFigures(
        duration_s=sum(steps) + outside,
        energy_j={"rapl:package-0": watts * (sum(steps) + outside)},
        step_durations_s=list(steps),
        step_energy_j={"rapl:package-0": [watts * s for s in steps]},
    )


def test_after_one_epoch_steps_and_time_outside_them_are_the_basis() -> None:
    epochs = [_epoch([1.0, 1.2, 0.8, 1.0], outside=2.0, watts=50.0)]
    f = run_forecast(
        epochs, 5, elapsed_s=7.0, spent_j={"rapl:package-0": 350.0}, counted=["rapl:package-0"],
        carbon_intensity_g_per_kwh=400.0,
    )  # fmt: skip
    assert f.basis == "steps" and f.epochs_done == 1
    # 4 epochs × (4 steps of 1 s + 2 s outside) left
    assert f.remaining_s.value == pytest.approx(24.0)
    assert f.total_s.value == pytest.approx(31.0)
    assert f.remaining_s.low < 24.0 < f.remaining_s.high
    e = f.energy_total_j[TOTAL]
    assert e.value == pytest.approx(350.0 + 50.0 * 24.0)
    assert f.co2e_g.value == pytest.approx(e.value / 3.6e6 * 400.0)
    assert f.energy_spent_j[TOTAL] == 350.0


def test_from_the_third_epoch_whole_epochs_are_the_basis() -> None:
    epochs = [_epoch([1.0] * 4, outside=o, watts=10.0) for o in (1.0, 3.0, 2.0)]
    f = run_forecast(epochs, 6, elapsed_s=15.0, spent_j={}, counted=["rapl:package-0"])
    assert EPOCH_BASIS_FROM == 3 and f.basis == "epochs"
    # epochs of 5, 7, 6 s: mean 6, sd 1; 3 left
    assert f.remaining_s.value == pytest.approx(18.0)
    half = 4.303 * 1.0 * math.sqrt(3 + 9 / 3)
    assert f.remaining_s.high == pytest.approx(18.0 + half, rel=1e-4)


def test_uncounted_sources_are_forecast_but_not_added() -> None:
    e = _epoch([1.0, 1.0], outside=0.0, watts=10.0)
    e.energy_j["rapl:core-0"] = 5.0
    e.step_energy_j["rapl:core-0"] = [2.5, 2.5]
    f = run_forecast([e], 2, elapsed_s=2.0, spent_j={}, counted=["rapl:package-0"])
    assert f.energy_total_j["rapl:core-0"].value == pytest.approx(5.0)
    assert f.energy_total_j[TOTAL].value == pytest.approx(20.0)


def test_a_forecast_needs_an_epoch() -> None:
    with pytest.raises(ValueError, match="finished epoch"):
        run_forecast([], 3, elapsed_s=0.0, spent_j={}, counted=[])
