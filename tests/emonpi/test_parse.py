"""Pure parts of the emonPi collector: line grammar, classification, layouts, energy, framing."""

from __future__ import annotations

import struct

import pytest

from acquisition.config import build_dataclass
from acquisition.errors import ConfigError
from acquisition.lineproto import encode_point
from acquisition.point import Point
from collectors.emonpi import (
    BUILTIN_LAYOUTS,
    WHY_ZEROS,
    EmonPiCollector,
    EmonPiConfig,
    EnergyCounter,
    JeeFrame,
    LayoutTable,
    LineBuffer,
    LineError,
    ValueLine,
    encode_frame,
    parse_layouts,
    parse_line,
)

from .conftest import StepClock

LAYOUTS = {layout.name: layout for layout in BUILTIN_LAYOUTS}
TABLE = LayoutTable(BUILTIN_LAYOUTS)

# The emonPi firmware's documented test vectors and synthetic ones (struct.pack, round-trip exact)
CLASSIC = "OK 5 96 1 211 255 51 1 73 94 215 0 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)"
TX_V2 = "OK 10 176 4 202 254 55 0 204 93"
CM = (
    "OK 5 123 0 0 0 96 1 211 255 51 1 73 94 102 8 48 117 48 117 48 117 48 117 48 117 "
    "210 4 0 0 0 0 0 0 238 59 0 0 55 255 255 255 (-0)"
)


def decode(line: str) -> dict[str, object]:
    frame = parse_line(line.encode())
    assert isinstance(frame, JeeFrame)
    layout = TABLE.find(frame.node, len(frame.payload))
    assert layout is not None
    return dict(layout.decode(frame.payload))


def test_classic_vector() -> None:
    frame = parse_line(CLASSIC.encode() + b"\r\n")
    assert frame == JeeFrame(5, frame.payload, 0) and len(frame.payload) == 24  # type: ignore[union-attr]
    assert TABLE.find(5, 24) is LAYOUTS["emonpi_classic"]
    # T2-T6 are 0: slots beyond the detected sensors, left out unless temp_sensors says otherwise
    assert decode(CLASSIC) == {
        "power1_watts": 352.0,
        "power2_watts": -45.0,
        "power1_plus_2_watts": 307.0,
        "vrms_volts": 241.37,
        "temp1_celsius": 21.5,
        "pulse_count": 1234,
    }


def test_classic_with_declared_sensors_keeps_real_zero_and_drops_failed_reads() -> None:
    layout = LAYOUTS["emonpi_classic"].with_temp_sensors(2)
    payload = struct.pack("<10hL", 352, -45, 307, 24137, 215, 0, -55, 0, 0, 0, 1234)
    assert layout.decode(payload) == {
        "power1_watts": 352.0,
        "power2_watts": -45.0,
        "power1_plus_2_watts": 307.0,
        "vrms_volts": 241.37,
        "temp1_celsius": 21.5,
        "temp2_celsius": 0.0,
        "pulse_count": 1234,
    }
    failed = struct.pack("<10hL", 352, -45, 307, 24137, -55, -55, 0, 0, 0, 0, 1)
    assert "temp1_celsius" not in layout.decode(failed)


def test_payloadtx_vector_without_rssi_and_trailing_space() -> None:
    frame = parse_line(TX_V2.encode() + b" \r\n")
    assert frame == JeeFrame(10, bytes([176, 4, 202, 254, 55, 0, 204, 93]), None)
    assert decode(TX_V2) == {
        "power1_watts": 1200.0,
        "power2_watts": -310.0,
        "power3_watts": 55.0,
        "vrms_volts": 240.12,
    }


def test_cm_vector_omits_30000_sentinels() -> None:
    assert decode(CM) == {
        "msg_count": 123,
        "power1_watts": 352.0,
        "power2_watts": -45.0,
        "power1_plus_2_watts": 307.0,
        "vrms_volts": 241.37,
        "temp1_celsius": 21.5,
        "pulse1_count": 1234,
        "pulse2_count": 0,
        "energy1_wh": 15342.0,
        "energy2_wh": -201.0,
    }


def test_emontx4_frame_as_emonhub_logged_it() -> None:
    # emonhub: [3, 240, 11, 11, 11, 5, 5, 5, 0, 0, 0, 0, 0, 0, 19.12, 300, 300, 0], 52 bytes
    payload = struct.pack(
        "<L7h6l3hL", 3, 24000, 11, 11, 11, 5, 5, 5, 0, 0, 0, 0, 0, 0, 1912, 30000, 30000, 0
    )
    line = encode_frame(17, payload, -44)
    assert line.endswith(" (-44)")
    values = decode(line)
    assert values["vrms_volts"] == 240.0
    assert values["temp1_celsius"] == 19.12
    assert "temp2_celsius" not in values and "temp3_celsius" not in values
    assert [values[f"power{i}_watts"] for i in range(1, 7)] == [11.0, 11.0, 11.0, 5.0, 5.0, 5.0]
    assert values["msg_count"] == 3 and values["pulse_count"] == 0


@pytest.mark.parametrize(
    ("line", "node", "length"),
    [
        ("OK 10 0 100 0 200 0 100", 10, 6),  # big-endian example from the emonpi docs
        ("OK 5 0 1 0 2 0 3", 5, 6),
        ("OK 5 0 0 0 0 (-0)", 5, 4),  # emonhub readme
        ("OK 7 " + " ".join(["1"] * 40), 7, 40),  # 40 bytes, but not from the emonPi's node
        ("OK 19 1 2 3 4 5 6 7 8 9 10", 19, 10),
    ],
)
def test_frames_matching_no_layout_are_not_decoded(line: str, node: int, length: int) -> None:
    frame = parse_line(line.encode())
    assert isinstance(frame, JeeFrame) and (frame.node, len(frame.payload)) == (node, length)
    assert TABLE.find(node, length) is None


def test_rssi_forms() -> None:
    assert parse_line(b"OK 19 215 0 180 0 38 2 30 0 (-62)") == JeeFrame(
        19, bytes([215, 0, 180, 0, 38, 2, 30, 0]), -62
    )
    assert parse_line(b"OK 5 1 2 (-0)") == JeeFrame(5, b"\x01\x02", 0)
    assert parse_line(b"OK 5\t1  2   ") == JeeFrame(5, b"\x01\x02", None)
    assert encode_frame(5, b"\x01\x02", 0) == "OK 5 1 2 (-0)"
    assert encode_frame(5, b"", None) == "OK 5"


@pytest.mark.parametrize(
    "line",
    [
        "OK 5 256 1",
        "OK 256 1 2",
        "OK x 1 2",
        "OK 5 1 2 (abc)",
        "OK 5 1 2 (-44) 3",
        "OK 5 ٣ 1",  # a non-ASCII digit: int() would take it, the grammar does not
        "OK 5 1_0 2",
        "OK 5 +1 2",
        "OK 5 0x10",
        "OK",
        "OK (-0)",  # an RSSI but no node
        "OK 5 (-0) 1",
        "OK 5 " + " ".join(["1"] * 67),  # over JeeLib's 66-byte maximum
        "MSG:1,Vrms:abc,P1:10",
        "MSG:1,,P1:2",
        "{not json",
        '{"P1": "10"}',
        '{"P1": true}',
        '{"P1": {"x": 1}}',
        '{"P1": NaN}',
        "{}",
        '{"P 1": 5}',
        "{" * 5000,
    ],
)
def test_malformed_data_lines(line: str) -> None:
    with pytest.raises(LineError) as info:
        parse_line(line.encode())
    assert info.value.reason == "malformed"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty"),
        (b"  \r", "empty"),
        (b"\x01OK 5 1 2", "control"),
        (b"\xff\xfeOK", "not_utf8"),
        (b"OK 5 1\x00 2", "garbage"),
        (b" ? 5 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 (-80)", "bad_crc"),
        (b"[emonPi.29.30] E i5 g210 @ 433 MHz q1 USA 0 ", "settings"),
        (b"Settings: r3 b4 p25 g210 i5", "settings"),
        (b"Node 5 Freq 433Mhz Network 210", "settings"),
        (b"RFM69CW  Freq: 433MHz Group: 210 Node: 17 ", "settings"),
        (b" -> 4 b", "ack"),
        (b"CT 1 Cal: 90.90", "calibration"),
        (b"Vcal: 256.80", "calibration"),
        (b"|Vrms:240.1, I1:0.45, pf1:0.9812", "calibration"),
        (b"Reference voltage calibration: 1.0243", "calibration"),
        (b"emonPi V2.93", "text"),
        (b"OpenEnergyMonitor.org", "text"),
        (b"startup...", "text"),
        (b"Detected 2 CT'sDetect 1 DS18B20", "text"),
        (b"AC NOT detected - Apparent Power calc enabled", "text"),
        (b"|emonPiCM V1.1.4", "text"),
        (b"describe:EmonTX4CM", "text"),
        (b"No temperature sensors detected, disabling temperature", "text"),
        (b"Sending 4 bytes to node 0", "text"),
    ],
)
def test_non_data_lines_are_classified(raw: bytes, reason: str) -> None:
    with pytest.raises(LineError) as info:
        parse_line(raw)
    assert info.value.reason == reason


def test_key_value_and_json_lines() -> None:
    assert parse_line(b"MSG:1,Vrms:246.81,P1:79,E1:0,pulse:1\r\n") == ValueLine(
        {"MSG": 1.0, "Vrms": 246.81, "P1": 79.0, "E1": 0.0, "pulse": 1.0}, "key_value"
    )
    assert parse_line(b"power1:100,power2:200") == ValueLine(
        {"power1": 100.0, "power2": 200.0}, "key_value"
    )
    assert parse_line(b'{"MSG":1,"Vrms":240.12,"P1":-5,"pulse":0}') == ValueLine(
        {"MSG": 1.0, "Vrms": 240.12, "P1": -5.0, "pulse": 0.0}, "json"
    )


def point_for(
    line: bytes, config: EmonPiConfig | None = None
) -> tuple[list[Point], dict[str, int | float]]:
    collector = EmonPiCollector(
        config or EmonPiConfig(), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    collector.handle_line(b"", points.append)  # past the first line, which may be cut
    collector.handle_line(line, points.append)
    return points, collector.stats()


def test_key_value_names_and_units() -> None:
    points, stats = point_for(
        b"MSG:7,Vrms:240.5,V2:239.1,P1:79,E1:12,T1:19.5,pulse:3,I1:0.45,pf1:0.98,pulse2:4,xyz:1"
    )
    assert [encode_point(p) for p in points] == [
        "emonpi,layout=key_value,node=serial msg_count=7i,vrms_volts=240.5,v2_volts=239.1,"
        "power1_watts=79.0,energy1_wh=12.0,temp1_celsius=19.5,pulse_count=3i,current1_amps=0.45,"
        "power_factor1_ratio=0.98,pulse2_count=4i,energy1_joules=0.0 1700000000000000000"
    ]
    assert stats["unknown_keys"] == 1 and stats["value_lines"] == 1


def test_configured_keys_and_text_node() -> None:
    config = EmonPiConfig(keys={"ct1": "power1_watts", "vrms": "vrms_raw"}, text_node="tx3e")
    points, stats = point_for(b"ct1:10,vrms:524,pulse:0", config)
    assert [encode_point(p) for p in points] == [
        "emonpi,layout=key_value,node=tx3e power1_watts=10.0,vrms_raw=524.0,pulse_count=0i,"
        "energy1_joules=0.0 1700000000000000000"
    ]
    assert stats["unknown_keys"] == 0


def test_fractional_count_rejects_the_line() -> None:
    points, stats = point_for(b"MSG:1.5,P1:10")
    assert points == [] and stats["malformed"] == 1


def test_rssi_field_and_own_readings() -> None:
    points, _ = point_for(b"OK 10 176 4 202 254 55 0 204 93 (-51)")
    assert points[0].fields["rssi_dbm"] == -51
    points, _ = point_for(b"OK 10 176 4 202 254 55 0 204 93 (-0)")
    assert "rssi_dbm" not in points[0].fields  # (-0) marks own readings, not a radio level


# --- layouts from config ------------------------------------------------------------------------


def test_user_layout_overrides_builtin_for_same_node_and_length() -> None:
    table = {
        "name": "my_tx",
        "node": 10,
        "struct": "<4h",
        "names": ["grid", "solar", "heatpump", "vrms"],
        "units": ["watts", "watts", "watts", "volts"],
        "scales": [1, 1, 1, 0.01],
    }
    config = build_dataclass(EmonPiConfig, {"layouts": [table]}, "collectors.emonpi")
    collector = EmonPiCollector(config)
    layout = collector.table.find(10, 8)
    assert layout is not None and layout.name == "my_tx"
    assert collector.table.find(5, 8) is LAYOUTS["payloadtx"]  # node 5 keeps the built-in
    assert layout.decode(bytes([176, 4, 202, 254, 55, 0, 204, 93])) == {
        "grid_watts": 1200.0,
        "solar_watts": -310.0,
        "heatpump_watts": 55.0,
        "vrms_volts": 240.12,
    }


def test_user_layout_with_missing_values_and_unsigned_codes() -> None:
    (layout,) = parse_layouts(
        [
            {
                "name": "tank",
                "nodes": [12, 13],
                "struct": "hH",
                "names": ["temp", "level"],
                "units": ["celsius", "percent"],
                "scales": [0.01, 0.5],
                "missing": {"temp": 30000},
                "averaged": True,
            }
        ]
    )
    assert layout.size == 4 and layout.nodes == {12, 13} and layout.averaged
    assert layout.decode(struct.pack("<hH", 30000, 101)) == {"level_percent": 50.5}
    assert layout.decode(struct.pack("<hH", -1234, 0)) == {
        "temp_celsius": -12.34,
        "level_percent": 0.0,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"struct": ">4h"}, "layouts[0].struct"),
        ({"struct": "<4x"}, "layouts[0].struct"),
        ({"struct": "<40l"}, "layouts[0].struct"),  # 160 bytes: over the radio maximum
        ({"names": ["a", "b", "c"]}, "layouts[0].names"),
        ({"names": ["a", "b", "c", "Vrms"]}, "layouts[0].names"),
        ({"names": ["a", "a", "c", "d"]}, "layouts[0].names"),
        ({"units": ["watts"]}, "layouts[0].units"),
        ({"scales": [1, 1]}, "layouts[0].scales"),
        ({"scales": [1, 1, 1, 0]}, "layouts[0].scales"),
        ({"scales": "1"}, "layouts[0].scales"),
        ({"node": 300}, "layouts[0].nodes"),
        ({"node": None}, "layouts[0].nodes"),
        ({"nodes": [1]}, "layouts[0].nodes"),  # both node and nodes
        ({"missing": {"zzz": 1}}, "layouts[0].missing"),
        ({"name": "Bad Name"}, "layouts[0].name"),
        ({"colour": "red"}, "layouts[0]: unknown key 'colour'"),
        ({"averaged": "yes"}, "layouts[0].averaged"),
    ],
)
def test_bad_layouts_are_config_errors_naming_the_key(
    change: dict[str, object], message: str
) -> None:
    table: dict[str, object] = {
        "name": "x",
        "node": 12,
        "struct": "<4h",
        "names": ["a", "b", "c", "d"],
        "units": ["watts"] * 4,
    }
    table.update(change)
    if table.get("node") is None:
        del table["node"]
    with pytest.raises(ConfigError) as info:
        build_dataclass(EmonPiConfig, {"layouts": [table]}, "collectors.emonpi")
    assert "[collectors.emonpi]" in str(info.value) and message in str(info.value)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"baudrate": 0}, "baudrate"),
        ({"energy": "guess"}, "energy"),
        ({"max_line": 4}, "max_line"),
        ({"temp_sensors": -2}, "temp_sensors"),
        ({"keys": {"ct1": "Power"}}, "keys.ct1"),
        ({"commands": ["5i\n"]}, "commands"),
        ({"max_gap": "soon"}, "max_gap"),
        ({"parity": "N"}, "parity"),
    ],
)
def test_bad_options(options: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_dataclass(EmonPiConfig, options, "collectors.emonpi")
    assert key in str(info.value)


def test_durations_in_config() -> None:
    config = build_dataclass(
        EmonPiConfig, {"max_gap": "1m", "reconnect_min": "50ms"}, "collectors.emonpi"
    )
    assert (config.max_gap, config.reconnect_min) == (60.0, 0.05)


def test_builtin_layouts_can_be_switched_off() -> None:
    collector = EmonPiCollector(EmonPiConfig(builtin_layouts=False))
    assert collector.table.find(5, 24) is None


# --- energy ---------------------------------------------------------------------------------------


def test_trapezoid_integration_and_gaps() -> None:
    counter = EnergyCounter("auto", max_gap_s=30.0)
    s = 1_000_000_000
    assert counter.update({"power1_watts": 100.0}, 0) == {"energy1_joules": 0.0}
    assert counter.update({"power1_watts": 200.0}, 5 * s) == {"energy1_joules": 750.0}
    assert counter.update({"power1_watts": -100.0}, 10 * s) == {"energy1_joules": 1000.0}
    # 40 s without frames: not integrated, counted
    assert counter.update({"power1_watts": 100.0}, 50 * s) == {"energy1_joules": 1000.0}
    assert counter.gaps == 1
    assert counter.update({"power1_watts": 100.0}, 60 * s) == {"energy1_joules": 2000.0}


def test_wh_counters_preferred_and_rebased() -> None:
    counter = EnergyCounter("auto", 30.0)
    s = 1_000_000_000
    first = counter.update({"power1_watts": 500.0, "energy1_wh": 15342.0}, 0)
    assert first == {"energy1_joules": 0.0}
    assert counter.update({"power1_watts": 500.0, "energy1_wh": 15344.0}, 10 * s) == {
        "energy1_joules": 7200.0
    }
    # counter steps back (EEPROM restore): nothing added, counted
    assert counter.update({"energy1_wh": 15300.0}, 20 * s) == {"energy1_joules": 7200.0}
    assert counter.counter_resets == 1
    assert counter.update({"energy1_wh": 15301.0}, 30 * s) == {"energy1_joules": 10800.0}
    # a device reset (MSG stepped back) re-bases without adding the step
    assert counter.update({"energy1_wh": 15400.0}, 40 * s, device_reset=True) == {
        "energy1_joules": 10800.0
    }


def test_averaged_power_is_integrated_over_the_interval_it_closes() -> None:
    # emonLibCM sends the mean power since its previous frame: power x interval is exact
    counter = EnergyCounter("integrate", 30.0, averaged=True)
    s = 1_000_000_000
    assert counter.update({"power1_watts": 100.0}, 0) == {"energy1_joules": 0.0}
    assert counter.update({"power1_watts": 200.0}, 10 * s) == {"energy1_joules": 2000.0}
    assert counter.update({"power1_watts": 50.0}, 20 * s) == {"energy1_joules": 2500.0}
    assert LAYOUTS["emonpi_cm"].averaged and LAYOUTS["emontx4"].averaged
    assert not LAYOUTS["emonpi_classic"].averaged and not LAYOUTS["payloadtx"].averaged


def test_integrate_mode_ignores_counters() -> None:
    counter = EnergyCounter("integrate", 30.0)
    counter.update({"power1_watts": 360.0, "energy1_wh": 1.0}, 0)
    assert counter.update({"power1_watts": 360.0, "energy1_wh": 9.0}, 10_000_000_000) == {
        "energy1_joules": 3600.0
    }


# --- framing ------------------------------------------------------------------------------------


def test_line_buffer_partials_crlf_and_overlong() -> None:
    buf = LineBuffer(max_line=20)
    assert buf.feed(b"OK 5 1") == []
    assert buf.feed(b" 2\r\nOK 5 3 4\r") == [b"OK 5 1 2\r"]
    assert buf.feed(b"\n") == [b"OK 5 3 4\r"]
    assert buf.feed(b"x" * 15) == [] and buf.pending == 15
    assert buf.feed(b"y" * 15) == [] and buf.pending == 0 and buf.overlong == 1
    assert buf.feed(b"z" * 100) == [] and buf.overlong == 1  # still the same long line
    assert buf.feed(b"tail\nOK 5 9\n") == [b"OK 5 9"]
    assert buf.feed(b"a" * 30 + b"\nb\n") == [b"b"] and buf.overlong == 2


# --- newest firmware (emon32: emonPi3, emonTx6) -------------------------------------------------


def test_emon32_lowercase_temperatures_analog_and_empty_sensor_slots() -> None:
    # emon32 prints t1..t8 and analog<n>; an empty slot reads 300.00 (raw 30000 at scale 0.01).
    points, stats = point_for(
        b"MSG:12,Vrms:241.02,P1:120,t1:21.25,t2:300.00,t3:30000,t8:-4.5,analog3:512"
    )
    assert [encode_point(p) for p in points] == [
        "emonpi,layout=key_value,node=serial msg_count=12i,vrms_volts=241.02,power1_watts=120.0,"
        "temp1_celsius=21.25,temp8_celsius=-4.5,analog3_value=512.0,energy1_joules=0.0 "
        "1700000000000000000"
    ]
    assert stats["unknown_keys"] == 0


def test_uppercase_t300_is_no_sensor_too() -> None:
    points, _ = point_for(b"MSG:1,T1:300.00,T2:18.5")
    assert points[0].fields["temp2_celsius"] == 18.5
    assert "temp1_celsius" not in points[0].fields


# --- plausibility -------------------------------------------------------------------------------


def test_frame_decoded_by_the_wrong_layout_is_counted_logged_once_and_not_emitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from collectors.emonpi import MSG_IMPLAUSIBLE

    # A node-5 8-byte frame is taken as payloadtx (<4h: power1..3 W, vrms x0.01 V). These bytes
    # are another layout's: power1 = 0x7530 = 30000 W, above the 25 kW a CT channel measures.
    bad = b"OK 5 48 117 0 0 0 0 40 94"  # 48 + 117*256 = 30000; 40 + 94*256 = 24104 -> 241.04 V
    good = b"OK 5 100 0 0 0 0 0 40 94"  # power1 = 100 W
    collector = EmonPiCollector(
        EmonPiConfig(), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    for line in (b"", bad, bad, good):
        collector.handle_line(line, points.append)
    assert [p.fields["power1_watts"] for p in points] == [100.0]
    assert collector.stats()["implausible_frames"] == 2
    logged = [r for r in caplog.records if r.msg == MSG_IMPLAUSIBLE]
    assert len(logged) == 1
    assert "power1_watts=30000.0" in logged[0].getMessage()
    assert "layout payloadtx" in logged[0].getMessage()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b"MSG:1,T1:-913.2", "temp1_celsius"),  # Wh counter bytes read as a temperature
        (b"MSG:1,T1:125.5", "temp1_celsius"),
        (b"MSG:1,Vrms:500.01", "vrms_volts"),
        (b"MSG:1,Vrms:-1", "vrms_volts"),
        (b"MSG:1,P2:-25000.5", "power2_watts"),
        (b"MSG:1,pf1:1.5", "power_factor1_ratio"),
    ],
)
def test_value_lines_outside_the_plausible_ranges_are_dropped(line: bytes, field: str) -> None:
    points, stats = point_for(line)
    assert points == []
    assert stats["implausible_frames"] == 1


def test_range_limits_themselves_are_plausible() -> None:
    points, stats = point_for(b"MSG:1,T1:-55,T2:125,Vrms:500,P1:-25000,P2:25000,pf1:-1")
    assert len(points) == 1 and stats["implausible_frames"] == 0


# --- linear-time number parsing -----------------------------------------------------------------


def test_a_long_digit_run_is_rejected_in_linear_time() -> None:
    # With a pattern that splits a digit run two ways (\d+\.?\d*) this line backtracks
    # quadratically: hours for a million digits, past the suite's timeout. Linear: milliseconds.
    with pytest.raises(LineError) as info:
        parse_line(b"T1:" + b"1" * 1_000_000 + b"e")
    assert info.value.reason == "text"
    with pytest.raises(LineError):
        parse_line(b"T1:1," + b"P1:" + b"2" * 1_000_000 + b".5e+")
    # A 400-digit number matches the pattern but is infinite as a float: a damaged line.
    with pytest.raises(LineError) as info:
        parse_line(b"T1:2,P1:" + b"1" * 400)
    assert info.value.reason == "malformed"


async def test_stats_survive_aclose_for_the_final_report() -> None:
    collector = EmonPiCollector(
        EmonPiConfig(), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    for line in (b"", CLASSIC.encode(), b"garbage line", b"MSG:1,T1:-913.2"):
        collector.handle_line(line, points.append)
    before = collector.stats()
    await collector.aclose()
    assert collector.stats() == before
    assert (before["frames"], before["text"], before["implausible_frames"]) == (1, 1, 1)


def test_a_meter_that_sends_only_zeros_is_not_advancing_then_joins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Frames every 5 s with zero power on every channel: the voltage is written, power and
    energy are not (a zero would look like a measurement); after the window the collector says
    why; the first non-zero power joins, with the energy integrated from there."""
    collector = EmonPiCollector(
        EmonPiConfig(), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    collector.handle_line(b"", points.append)
    for _ in range(3):
        collector.handle_line(b"MSG:1,Vrms:240.5,P1:0,P2:0", points.append)
    assert [dict(p.fields) for p in points] == [{"msg_count": 1, "vrms_volts": 240.5}] * 3
    assert collector.not_advancing() == (
        f"not advancing: node serial power did not move in 5.0 s ({WHY_ZEROS})"
    )
    collector.handle_line(b"MSG:2,Vrms:240.5,P1:100,P2:0", points.append)
    collector.handle_line(b"MSG:3,Vrms:240.5,P1:100,P2:0", points.append)
    # (key:value lines carry the mean power of the interval they close: power × 5 s)
    assert [p.fields.get("energy1_joules") for p in points[3:]] == [500.0, 1000.0]
    assert points[3].fields["power2_watts"] == 0.0  # a real zero beside a measuring channel
    assert collector.not_advancing() is None
    assert "emonpi: node serial power is advancing now: it joins the run from here" in (
        caplog.messages
    )
