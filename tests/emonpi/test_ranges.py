"""Plausible ranges on real frames: an emonTH's humidity and temperature and an emonPi's mains
voltage at and just past their limits."""

from __future__ import annotations

import pytest

from acquisition.point import Point
from collectors.emonpi import EmonPiCollector, EmonPiConfig

from .conftest import StepClock


def emonth_frame(humidity_tenths: int, temp_tenths: int = 215, battery_tenths: int = 30) -> bytes:
    """An emonTH (node 19) frame: four little-endian int16 in tenths: the temperature given
    (21.5 °C), 18.0 °C, the humidity given, the battery voltage given (3.0 V)."""
    values = (temp_tenths, 180, humidity_tenths, battery_tenths)
    data = b"".join(v.to_bytes(2, "little", signed=True) for v in values)
    return b"OK 19 " + b" ".join(b"%d" % byte for byte in data)


def decode(line: bytes) -> tuple[list[Point], dict[str, int | float]]:
    collector = EmonPiCollector(
        EmonPiConfig(), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    collector.handle_line(b"", points.append)  # past the first line, which may be cut
    collector.handle_line(line, points.append)
    return points, collector.stats()


def test_the_frame_is_what_an_emonth_sends() -> None:
    # 1000 tenths = 0x03E8: bytes 232, 3; -1 = 0xFFFF: bytes 255, 255
    assert emonth_frame(1000) == b"OK 19 215 0 180 0 232 3 30 0"
    assert emonth_frame(-1) == b"OK 19 215 0 180 0 255 255 30 0"


@pytest.mark.parametrize("tenths", [0, 1000])
def test_humidity_from_0_to_100_percent_is_kept(tenths: int) -> None:
    """Guards: relative humidity spans 0–100 %; both ends are readings."""
    points, stats = decode(emonth_frame(tenths))
    (point,) = points
    assert point.fields["humidity_percent"] == pytest.approx(tenths / 10)
    assert point.fields["temp_celsius"] == pytest.approx(21.5)
    assert point.fields["battery_volts"] == pytest.approx(3.0)
    assert stats["implausible_frames"] == 0


@pytest.mark.parametrize("tenths", [-1, 1001, 1010, 30000])
def test_humidity_below_0_or_above_100_percent_drops_the_frame(tenths: int) -> None:
    """Guards: a humidity of -0.1 %, 100.1 %, 101 % or 3000 % is no reading (a damaged frame or
    one decoded with the wrong layout): nothing of the frame is emitted, and it is counted."""
    points, stats = decode(emonth_frame(tenths))
    assert points == []
    assert stats["implausible_frames"] == 1


@pytest.mark.parametrize("volts", ["0", "0.00", "0.6"])
def test_a_mains_voltage_near_0_volts_is_kept(volts: str) -> None:
    """Guards: an emonPi powered without its AC adapter measures no mains voltage and sends
    ``Vrms:0`` (or a little noise under 1 V): a real reading, kept with the frame's power."""
    points, stats = decode(b"MSG:12,Vrms:" + volts.encode() + b",P1:35,pulse:0")
    (point,) = points
    assert point.fields["vrms_volts"] == float(volts)
    assert point.fields["power1_watts"] == 35.0
    assert stats["implausible_frames"] == 0


@pytest.mark.parametrize("volts", ["-0.1", "500.1"])
def test_a_mains_voltage_below_0_or_above_500_volts_drops_the_frame(volts: str) -> None:
    """Guards: −0.1 V or 500.1 V RMS is no mains reading (a damaged line): the frame is dropped
    and counted."""
    points, stats = decode(b"MSG:12,Vrms:" + volts.encode() + b",P1:35,pulse:0")
    assert points == []
    assert stats["implausible_frames"] == 1


@pytest.mark.parametrize("tenths", [-550, 1250])
def test_temperature_from_minus_55_to_125_celsius_is_kept(tenths: int) -> None:
    """Guards: a DS18B20 reads −55 °C to +125 °C; both ends are readings."""
    points, stats = decode(emonth_frame(500, temp_tenths=tenths))
    (point,) = points
    assert point.fields["temp_celsius"] == pytest.approx(tenths / 10)
    assert stats["implausible_frames"] == 0


@pytest.mark.parametrize("tenths", [-551, -560, 1251, 1260])
def test_temperature_past_the_sensor_range_drops_the_frame(tenths: int) -> None:
    """Guards: −55.1 °C, −56 °C, 125.1 °C or 126 °C is past what the sensor can read: nothing
    of the frame is emitted, and it is counted."""
    points, stats = decode(emonth_frame(500, temp_tenths=tenths))
    assert points == []
    assert stats["implausible_frames"] == 1


@pytest.mark.parametrize("tenths", [0, 100])
def test_a_battery_from_0_to_10_volts_is_kept(tenths: int) -> None:
    """Guards: an emonTH's battery reads 0–10 V (two AA cells give 3 V; 0 V when they are flat);
    both ends are readings, kept with the frame's humidity."""
    points, stats = decode(emonth_frame(500, battery_tenths=tenths))
    (point,) = points
    assert point.fields["battery_volts"] == pytest.approx(tenths / 10)
    assert point.fields["humidity_percent"] == pytest.approx(50.0)
    assert stats["implausible_frames"] == 0


@pytest.mark.parametrize("tenths", [-1, 101])
def test_a_battery_below_0_or_above_10_volts_drops_the_frame(tenths: int) -> None:
    """Guards: −0.1 V or 10.1 V is no battery reading (a damaged frame or another node's
    layout): nothing of the frame is emitted, and it is counted."""
    points, stats = decode(emonth_frame(500, battery_tenths=tenths))
    assert points == []
    assert stats["implausible_frames"] == 1


@pytest.mark.parametrize("dbm", [-140, -1])
def test_a_radio_level_from_minus_140_to_0_dbm_is_kept(dbm: int) -> None:
    """Guards: the RFM69's received signal strength spans −140 to 0 dBm; −140 and −1 dBm are
    readings, kept with the frame's humidity."""
    points, stats = decode(emonth_frame(500) + b" (%d)" % dbm)
    (point,) = points
    assert point.fields["rssi_dbm"] == dbm
    assert point.fields["humidity_percent"] == pytest.approx(50.0)
    assert stats["implausible_frames"] == 0


@pytest.mark.parametrize("dbm", [-141, 1])
def test_a_radio_level_below_minus_140_or_above_0_dbm_drops_the_frame(dbm: int) -> None:
    """Guards: −141 dBm or +1 dBm is no radio level (a damaged line): nothing of the frame is
    emitted, and it is counted."""
    points, stats = decode(emonth_frame(500) + b" (%d)" % dbm)
    assert points == []
    assert stats["implausible_frames"] == 1


RANGES = [
    ("I1", "current1_amps", -200.0, 200.0),
    ("P2", "power2_watts", -25_000.0, 25_000.0),
    ("pf1", "power_factor1_ratio", -1.0, 1.0),
    ("V1", "v1_volts", 0.0, 500.0),
    ("T3", "temp3_celsius", -55.0, 125.0),
]


@pytest.mark.parametrize(("key", "field", "lowest", "highest"), RANGES)
def test_a_text_field_is_kept_at_both_ends_of_its_range(
    key: str, field: str, lowest: float, highest: float
) -> None:
    """Guards the documented range of each text key's field at both ends: a CT channel's
    current ±200 A and power ±25 kW, a power factor ±1, a voltage input 0–500 V, a temperature
    −55 to 125 °C; each end is a reading, kept with the rest of the frame."""
    for value in (lowest, highest):
        points, stats = decode(b"MSG:12,Vrms:230,%s:%r,pulse:0" % (key.encode(), value))
        (point,) = points
        assert (point.fields[field], point.fields["vrms_volts"]) == (value, 230.0)
        assert stats["implausible_frames"] == 0


@pytest.mark.parametrize(("key", "field", "lowest", "highest"), RANGES)
def test_a_text_field_just_past_its_range_drops_the_frame(
    key: str, field: str, lowest: float, highest: float
) -> None:
    """Guards: 0.1 past either end of a field's range (−200.1 A, 200.1 A, ±25,000.1 W, ±1.1,
    −0.1 V, 500.1 V, −55.1 °C, 125.1 °C) is a damaged frame: nothing of it is emitted, each
    one counted."""
    for value in (lowest - 0.1, highest + 0.1):
        points, stats = decode(b"MSG:12,Vrms:230,%s:%r,pulse:0" % (key.encode(), value))
        assert points == [], field
        assert stats["implausible_frames"] == 1


def test_field_ranges_are_remembered_for_at_most_1024_names() -> None:
    """Guards: a garbled stream of ever-new field names cannot grow the range cache past 1,024
    names, and a name past that is still checked against its range (not remembered)."""
    from collectors.emonpi.fields import implausible_field

    cache: dict[str, tuple[float, float] | None] = {}
    for i in range(1_100):
        assert implausible_field({f"x{i}": 1e9}, cache) is None  # no range: never implausible
    assert len(cache) == 1_024
    assert implausible_field({"humidity_percent": 100.1}, cache) == "humidity_percent=100.1"
    assert implausible_field({"humidity_percent": 100.0}, cache) is None
    assert "humidity_percent" not in cache
