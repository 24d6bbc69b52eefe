"""Cumulative energy of an emonPi stream, from the firmware's Wh counters or integrated power."""

from __future__ import annotations

import re
from collections.abc import Mapping

from acquisition.point import FieldValue

__all__ = ["EnergyCounter"]

_POWER_RE = re.compile(r"power(\w*)_watts")
_WH_RE = re.compile(r"energy(\w*)_wh")


_Channel = tuple[str, str, str]


class EnergyCounter:
    """Cumulative ``energy<ch>_joules`` per channel of one (node, layout) stream.

    From the firmware's Wh counters (``energy<ch>_wh``) where the reading has them and ``mode`` is
    ``"auto"``: joules = Wh increase since the first frame × 3600; a counter that steps back (the
    device restored an older EEPROM value) adds nothing and counts a reset. Otherwise integrated
    from ``power<ch>_watts`` between consecutive frames: the trapezoid rule for snapshot powers;
    for ``averaged`` powers (the mean over the interval the frame closes) power × interval, which
    is exact. A gap longer than ``max_gap_s`` is not integrated (counted in ``gaps``).
    """

    def __init__(self, mode: str = "auto", max_gap_s: float = 30.0, averaged: bool = False) -> None:
        self.mode = mode
        self.averaged = averaged
        self.max_gap_ns = int(max_gap_s * 1e9)
        self.joules: dict[str, float] = {}
        self._last_wh: dict[str, float] = {}
        self._last_power: dict[str, tuple[float, int]] = {}
        self.gaps = 0
        self.counter_resets = 0
        # field names of a reading -> (Wh counter channels, power channels to integrate), each
        # as (field, channel, output field); a stream sends the same names frame after frame.
        self._plans: dict[tuple[str, ...], tuple[list[_Channel], list[_Channel]]] = {}

    def _plan(self, keys: tuple[str, ...]) -> tuple[list[_Channel], list[_Channel]]:
        counters: list[_Channel] = []
        powers: list[_Channel] = []
        if self.mode == "auto":
            for key in keys:
                m = _WH_RE.fullmatch(key)
                if m is not None:
                    counters.append((key, m.group(1), f"energy{m.group(1)}_joules"))
        counted = {ch for _, ch, _ in counters}
        for key in keys:
            m = _POWER_RE.fullmatch(key)
            if m is not None and m.group(1) not in counted:
                powers.append((key, m.group(1), f"energy{m.group(1)}_joules"))
        if len(self._plans) < 64:
            self._plans[keys] = (counters, powers)
        return counters, powers

    def update(
        self, fields: Mapping[str, FieldValue], mono_ns: int, device_reset: bool = False
    ) -> dict[str, float]:
        """Advance with one reading taken at monotonic ``mono_ns``; the energy fields to emit.

        ``device_reset`` (the message counter stepped back) re-bases the Wh counters without
        adding the step: what a rebooted unit restores from EEPROM is not energy used.
        """
        keys = tuple(fields)
        counters, powers = self._plans.get(keys) or self._plan(keys)
        out: dict[str, float] = {}
        joules = self.joules
        for key, ch, name in counters:
            value = fields[key]
            if not isinstance(value, int | float):
                continue
            last = self._last_wh.get(ch)
            total = joules.get(ch, 0.0)
            if last is not None and not device_reset:
                if value >= last:
                    total += (value - last) * 3600.0
                else:
                    self.counter_resets += 1
            self._last_wh[ch] = float(value)
            joules[ch] = total
            out[name] = total
        for key, ch, name in powers:
            value = fields[key]
            if not isinstance(value, int | float):
                continue
            prev = self._last_power.get(ch)
            total = joules.get(ch, 0.0)
            if prev is not None:
                dt = mono_ns - prev[1]
                if 0 <= dt <= self.max_gap_ns:
                    if self.averaged:
                        total += float(value) * dt / 1e9
                    else:
                        total += (prev[0] + float(value)) * 0.5 * dt / 1e9
                else:
                    self.gaps += 1
            self._last_power[ch] = (float(value), mono_ns)
            joules[ch] = total
            out[name] = total
        return out
