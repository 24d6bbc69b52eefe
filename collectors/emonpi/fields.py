"""Field names for ``key:value`` / JSON keys, and the plausible range of every decoded field.

Keys: emonLibCM/DB print ``MSG``, ``Vrms``, ``V<n>``, ``P<n>``, ``E<n>``, ``T<n>``, ``I<n>``,
``pf<n>``, ``pulse``; the emon32 firmware (emonPi3, emonTx6) prints temperatures as lowercase
``t<n>`` and analog inputs as ``analog<n>``. A temperature of 300 (``300.00``, the text form of the
raw ``30000`` "no sensor" sentinel) is no reading.

Ranges (:data:`PLAUSIBLE`): a reading with a field outside its range was decoded with the wrong
layout (a frame of the right length from a node using another layout) or is damaged; it is not
emitted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from acquisition.point import FieldValue

__all__ = ["KEY_NAMES", "NO_SENSOR_CELSIUS", "PLAUSIBLE", "implausible_field", "key_field"]

KEY_NAMES: dict[str, str] = {"MSG": "msg_count", "Vrms": "vrms_volts", "pulse": "pulse_count"}
"""Field names for the keys of emonLibCM/DB ``key:value`` and JSON lines (plus the patterns in
:func:`_key_field`); other keys need a ``keys`` entry in the config."""

_KEY_PATTERNS = (
    (re.compile(r"P(\d{1,2})", re.ASCII), "power{}_watts"),
    (re.compile(r"power(\d{1,2})", re.ASCII), "power{}_watts"),
    (re.compile(r"E(\d{1,2})", re.ASCII), "energy{}_wh"),
    (re.compile(r"T(\d{1,2})", re.ASCII), "temp{}_celsius"),
    (re.compile(r"t(\d{1,2})", re.ASCII), "temp{}_celsius"),  # emon32 (emonPi3, emonTx6)
    (re.compile(r"analog(\d)", re.ASCII), "analog{}_value"),  # emon32: as printed
    (re.compile(r"V(\d)", re.ASCII), "v{}_volts"),
    (re.compile(r"I(\d{1,2})", re.ASCII), "current{}_amps"),
    (re.compile(r"pf(\d{1,2})", re.ASCII), "power_factor{}_ratio"),
    (re.compile(r"pulse(\d)", re.ASCII), "pulse{}_count"),
)


def key_field(key: str) -> str | None:
    name = KEY_NAMES.get(key)
    if name is not None:
        return name
    for pattern, template in _KEY_PATTERNS:
        m = pattern.fullmatch(key)
        if m:
            return template.format(int(m.group(1)))
    return None


NO_SENSOR_CELSIUS = frozenset({300.0, 30000.0})
"""Temperatures that mean an empty sensor slot in text lines (printed ``300.00``, or raw)."""

PLAUSIBLE: tuple[tuple[re.Pattern[str], float, float], ...] = (
    (re.compile(r"temp\w*_celsius"), -55.0, 125.0),  # DS18B20 range
    (re.compile(r"v\w*_volts"), 0.0, 500.0),  # mains RMS voltage (vrms_volts, v1_volts)
    (re.compile(r"battery_volts"), 0.0, 10.0),
    (re.compile(r"power\w*_watts"), -25_000.0, 25_000.0),  # one CT channel
    (re.compile(r"current\w*_amps"), -200.0, 200.0),
    (re.compile(r"power_factor\w*_ratio"), -1.0, 1.0),
    (re.compile(r"humidity_percent"), 0.0, 100.0),
    (re.compile(r"rssi_dbm"), -140.0, 0.0),
)
"""(field name pattern, lowest, highest) for decoded fields; other fields are not checked."""

_RANGE_CACHE_MAX = 1024


def _bounds(name: str) -> tuple[float, float] | None:
    for pattern, lo, hi in PLAUSIBLE:
        if pattern.fullmatch(name):
            return lo, hi
    return None


def implausible_field(
    fields: Mapping[str, FieldValue], cache: dict[str, tuple[float, float] | None]
) -> str | None:
    """The first field outside its plausible range, as ``name=value``, or None.

    ``cache`` remembers the range of each field name seen (names repeat frame after frame).
    """
    for name, value in fields.items():
        if name in cache:
            bounds = cache[name]
        else:
            bounds = _bounds(name)
            if len(cache) < _RANGE_CACHE_MAX:
                cache[name] = bounds
        if bounds is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not bounds[0] <= value <= bounds[1]:
            return f"{name}={value}"
    return None
