"""One RAPL counter read twice at the same monotonic time (a coarse clock, or two reads within
its resolution)."""

from __future__ import annotations

import logging
from fractions import Fraction

import pytest

from collectors.rapl.backends import Counter


class Clock:
    """The narrowest stand-in for the collector's I/O: only its monotonic clock is read."""

    def __init__(self, now: int) -> None:
        self.now = now

    def monotonic_ns(self) -> int:
        return self.now


def test_two_reads_at_the_same_time_give_energy_and_no_power() -> None:
    """Guards: a read at the same monotonic time as the previous one emits the energy and no
    power (instead of dividing by a zero interval). Ticks of 1 µJ: 1000 → 3000 is 2000 µJ =
    0.002 J; then 5000 one second later: 0.004 J in all, 2000 µJ / 1 s = 0.002 W."""
    raws = iter([1000, 3000, 5000])
    c = Counter({"domain": "package"}, "energy_uj", lambda: next(raws), Fraction(1, 10**6), 2**32)
    clock = Clock(10**9)
    assert c.first(clock) is None  # type: ignore[arg-type]
    assert c.sample(clock) == {"energy_joules": 0.002}  # type: ignore[arg-type]
    clock.now += 10**9
    assert c.sample(clock) == {"energy_joules": 0.004, "power_watts": 0.002}  # type: ignore[arg-type]


def test_two_reads_at_the_same_time_in_a_unit_that_is_not_one_over_n() -> None:
    """Guards: the energy of a read at the same monotonic time is right in every unit, not
    only in units of 1/n J: the 15.3 µJ tick of DRAM on server CPUs (153/10⁷ J). 1000 → 3000 is
    2000 ticks × 15.3 µJ = 0.0306 J; then 5000 one second later: 4000 × 15.3 µJ = 0.0612 J in
    all, 2000 × 15.3 µJ / 1 s = 0.0306 W."""
    raws = iter([1000, 3000, 5000])
    unit = Fraction(153, 10**7)
    c = Counter({"domain": "dram"}, "MSR 0x619", lambda: next(raws), unit, 2**32)
    clock = Clock(10**9)
    assert c.first(clock) is None  # type: ignore[arg-type]
    assert c.sample(clock) == {"energy_joules": pytest.approx(0.0306, rel=1e-12)}  # type: ignore[arg-type]
    clock.now += 10**9
    assert c.sample(clock) == {  # type: ignore[arg-type]
        "energy_joules": pytest.approx(0.0612, rel=1e-12),
        "power_watts": pytest.approx(0.0306, rel=1e-12),
    }


def test_a_failing_counter_is_logged_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    """Guards: a counter that cannot be read is warned about once when it starts failing (not
    at every tick), said to read again once when it recovers, and warned about again when a new
    episode starts; every failed read is counted. Reads: ok, fail ×3, ok, fail ×2, ok: two
    warnings, two "reads again", five errors."""
    script = [1000, None, None, None, 2000, None, None, 3000]
    values = iter(script)

    def read() -> int:
        v = next(values)
        if v is None:
            raise OSError(5, "Input/output error")
        return v

    c = Counter({"domain": "package"}, "energy_uj", read, Fraction(1, 10**6), 2**32)
    clock = Clock(10**9)
    caplog.set_level(logging.INFO, logger="collectors.rapl")
    for _ in script:
        clock.now += 10**9
        c.sample(clock)  # type: ignore[arg-type]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    again = [r for r in caplog.records if r.getMessage() == "rapl: energy_uj reads again"]
    assert (len(warnings), len(again), c.errors) == (2, 2, 5)
    assert all("cannot read energy_uj" in r.getMessage() for r in warnings)
    assert c.total == 2000  # 1000 → 2000 → 3000 µJ: nothing lost across the failures
