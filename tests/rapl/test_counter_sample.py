"""One RAPL counter read twice at the same monotonic time (a coarse clock, or two reads within
its resolution)."""

from __future__ import annotations

from fractions import Fraction

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
