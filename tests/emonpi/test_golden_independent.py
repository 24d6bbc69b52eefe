"""An independent check of the emonPi golden files (tests/fixtures/emonpi/*.lp).

The golden files were produced by the collector itself; here every value in them is recomputed
from the transcript's bytes by a decoder written separately (``int.from_bytes`` on byte pairs,
no ``struct``, no layout table) and the golden line is read by a plain split (no line-protocol
decoder), so a bug shared by the collector and its golden files shows up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "emonpi"


def lp_rows(name: str) -> list[tuple[dict[str, str], dict[str, float], int]]:
    """(tags, fields as numbers, time) of each golden line, by splitting on ',', ' ' and '='."""
    rows = []
    for line in (FIXTURES / name).read_text().splitlines():
        series, fields, time_ns = line.split(" ")
        tags = dict(kv.split("=") for kv in series.split(",")[1:])
        values = {k: float(v.rstrip("i")) for k, v in (kv.split("=") for kv in fields.split(","))}
        rows.append((tags, values, int(time_ns)))
    return rows


def frames(name: str) -> list[tuple[int, bytes, int | None]]:
    """(node, payload, rssi) of every ``OK`` line of a transcript."""
    out = []
    for line in (FIXTURES / name).read_text().splitlines():
        parts = line.split()
        if not parts or parts[0] != "OK":
            continue
        rssi = int(parts.pop()[1:-1]) if parts[-1].startswith("(") else None
        out.append((int(parts[1]), bytes(int(b) for b in parts[2:]), rssi))
    return out


def i16(payload: bytes, index: int) -> int:
    return int.from_bytes(payload[2 * index : 2 * index + 2], "little", signed=True)


def u32(payload: bytes, offset: int) -> int:
    return int.from_bytes(payload[offset : offset + 4], "little", signed=False)


def test_payloadtx_by_hand() -> None:
    # First frame, node 5: "96 1" = 96 + 1*256 = 352 W; "123 0" = 123 W; "59 0" = 59 W;
    # "204 93" = 204 + 93*256 = 24012 -> 240.12 V.
    (node, payload, _), *_ = frames("payloadtx_38400.txt")
    assert node == 5
    assert [i16(payload, i) for i in range(4)] == [352, 123, 59, 24012]
    rows = lp_rows("payloadtx_38400.lp")
    assert rows[0][1]["power1_watts"] == 352.0
    assert rows[0][1]["vrms_volts"] == 240.12
    # Second frame, 5 s later: power1 368 W. Trapezoid: (352 + 368) / 2 * 5 s = 1800 J.
    assert rows[1][1]["power1_watts"] == 368.0
    assert rows[1][1]["energy1_joules"] == 1800.0
    # Node 10, first frame: "202 254" = 202 + 254*256 = 65226 -> -310 as int16.
    assert i16(frames("payloadtx_38400.txt")[3][1], 1) == -310


@pytest.mark.parametrize(
    ("transcript", "golden"),
    [("payloadtx_38400.txt", "payloadtx_38400.lp"), ("classic_38400.txt", "classic_38400.lp")],
)
def test_every_golden_value_from_an_independent_decoder(transcript: str, golden: str) -> None:
    rows = lp_rows(golden)
    decoded = [f for f in frames(transcript) if _layout(f[0], len(f[1])) is not None]
    assert len(decoded) == len(rows)
    last: dict[tuple[str, str], tuple[dict[str, float], int, dict[str, float]]] = {}
    for (node, payload, rssi), (tags, fields, t) in zip(decoded, rows, strict=True):
        layout = _layout(node, len(payload))
        assert tags == {"layout": layout, "node": str(node)}
        want = _decode(layout, payload)
        if rssi:  # (-0) marks the emonPi's own readings: no RSSI field
            want["rssi_dbm"] = float(rssi)
        # Energy: trapezoid between consecutive frames of the same (node, layout) stream.
        stream = (str(node), layout)
        energy = {f"energy{k[5:-6]}_joules": 0.0 for k in want if k.startswith("power")}
        if stream in last:
            prev, prev_t, prev_energy = last[stream]
            dt = (t - prev_t) / 1e9
            for key in energy:
                power = key.replace("energy", "power").replace("_joules", "_watts")
                energy[key] = prev_energy[key] + (prev[power] + want[power]) / 2 * dt
        last[stream] = (want, t, energy)
        assert fields == pytest.approx({**want, **energy}, rel=0, abs=1e-9), (node, t)


def _layout(node: int, length: int) -> str | None:
    if length == 8 and node in (5, 10):
        return "payloadtx"
    if length == 24 and node == 5:
        return "emonpi_classic"
    if length == 8 and 19 <= node <= 26:
        return "emonth"
    return None


def _decode(layout: str, p: bytes) -> dict[str, float]:
    if layout == "payloadtx":  # <4h: power1..3 W, vrms x0.01 V
        return {
            "power1_watts": float(i16(p, 0)),
            "power2_watts": float(i16(p, 1)),
            "power3_watts": float(i16(p, 2)),
            "vrms_volts": i16(p, 3) / 100,
        }
    if layout == "emonth":  # <4h, all x0.1: temp, temp_external °C, humidity %, battery V
        return {
            "temp_celsius": i16(p, 0) / 10,
            "temp_external_celsius": i16(p, 1) / 10,
            "humidity_percent": i16(p, 2) / 10,
            "battery_volts": i16(p, 3) / 10,
        }
    # emonpi_classic, <10hL: power1, power2, power1_plus_2 W, vrms x0.01 V, temp1..6 x0.1 °C
    # (raw -55 = failed read, 0 = no sensor: left out), pulse count (uint32 at byte 20).
    out = {
        "power1_watts": float(i16(p, 0)),
        "power2_watts": float(i16(p, 1)),
        "power1_plus_2_watts": float(i16(p, 2)),
        "vrms_volts": i16(p, 3) / 100,
    }
    for n in range(1, 7):
        raw = i16(p, 3 + n)
        if raw not in (-55, 0):
            out[f"temp{n}_celsius"] = raw / 10
    out["pulse_count"] = float(u32(p, 20))
    return out


def test_key_value_and_json_golden_from_the_printed_values() -> None:
    """emontx4_kv_115200: each value is the printed number under the documented field name;
    energy comes from the Wh counters, per stream (key_value and json are two streams), rebased
    when MSG steps back (a device reset). By hand: key_value MSG:2 has E4=4 against E4=2 at the
    reset line before it, so energy4_joules = (4 - 2) * 3600 = 7200; json MSG:4 has E1=3 against
    E1=2 at the stream's first line: energy1_joules = 3600."""
    import json

    names = {"MSG": "msg_count", "Vrms": "vrms_volts", "pulse": "pulse_count", "T1": "temp1_celsius",
             "I1": "current1_amps", "pf1": "power_factor1_ratio"}  # fmt: skip
    names |= {f"P{n}": f"power{n}_watts" for n in range(1, 7)}
    names |= {f"E{n}": f"energy{n}_wh" for n in range(1, 7)}
    readings: list[tuple[str, dict[str, float]]] = []
    for line in (FIXTURES / "emontx4_kv_115200.txt").read_text().splitlines():
        if line.startswith("{"):
            readings.append(("json", {k: float(v) for k, v in json.loads(line).items()}))
        elif line.startswith("MSG:") and "abc" not in line:
            pairs = (item.split(":") for item in line.split(","))
            readings.append(("key_value", {k: float(v) for k, v in pairs}))
        elif line.startswith("ct1:"):
            readings.append(("key_value", {"pulse": 0.0}))  # the only key with a built-in name
    rows = lp_rows("emontx4_kv_115200.lp")
    assert len(rows) == len(readings)
    base: dict[str, dict[str, float]] = {}
    last_msg: dict[str, float] = {}
    for (layout, values), (tags, fields, _) in zip(readings, rows, strict=True):
        assert tags == {"layout": layout, "node": "serial"}
        want = {names[k]: v for k, v in values.items() if k in names}
        msg = values.get("MSG")
        if msg is not None:
            if layout in last_msg and msg <= last_msg[layout]:
                base.pop(layout, None)  # device reset: counters rebased
            last_msg[layout] = msg
        counters = {k[6:-3]: v for k, v in want.items() if k.startswith("energy")}
        start = base.setdefault(layout, dict(counters))
        for ch, wh in counters.items():
            start.setdefault(ch, wh)
            want[f"energy{ch}_joules"] = (wh - start[ch]) * 3600
        assert fields == want, (layout, values)
