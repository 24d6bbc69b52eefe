"""emon32 firmware (emonPi3, emonTx6) key names beyond the first nine sensors."""

from __future__ import annotations

import pytest

from collectors.emonpi.fields import key_field


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("t1", "temp1_celsius"),
        ("t10", "temp10_celsius"),
        ("t12", "temp12_celsius"),
        ("T10", "temp10_celsius"),
        ("pf10", "power_factor10_ratio"),
        ("pf12", "power_factor12_ratio"),
    ],
)
def test_two_digit_temperature_keys_are_mapped(key: str, field: str) -> None:
    """Guards: emon32 numbers its temperature sensors t1…t12 (up to 12 on an emonTx6 with an
    expansion board), so t10 and above map like t1; so are its 12 CT channels' power factors."""
    assert key_field(key) == field


def test_three_digit_temperature_keys_are_not_sensors() -> None:
    """No board has 100 sensors: a three-digit key stays unknown (configured by ``keys``)."""
    assert key_field("t100") is None
