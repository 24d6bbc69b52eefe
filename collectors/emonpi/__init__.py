"""emonPi collector: wall power from the emonPi / emonTx serial stream.

Source: the ATmega (emonPi v1) or AVR-DB (emonPi2, emonTx4) prints one text line per reading on its
UART — ``/dev/ttyAMA0`` (``/dev/serial0``) on the Pi, ``/dev/ttyUSB0`` for a USB emonTx4 — 8N1 at
38400 baud (classic discrete-sampling firmware) or 115200 (emonPi_CM, emonPi2, emonTx4). A line is
either a JeeLib frame ``OK <node> <b0> … <bn> [(<rssi>)]`` whose bytes, in decimal, are the raw image
of a packed little-endian C struct (AVR ``int`` = int16, ``long`` = int32), or an already-scaled
``key:value,...`` / JSON line. There is no checksum on the serial line.

Frames are decoded by a layout chosen by *(node, payload length)*; both must match, and a frame that
matches no layout is counted, never decoded by guess. Every other line is classified (banner,
settings echo, calibration output, bad-CRC ``?`` frame, non-UTF-8 garbage...) and counted per
reason in :meth:`EmonPiCollector.stats`.

Read with ``pyserial_asyncio.open_serial_connection``; the collector owns reconnects (backoff from
``reconnect_min`` doubling to ``reconnect_max``; one log line per outage).

Emits ``emonpi`` points tagged ``node`` and ``layout``. Units: power W (``power1_watts``), voltage
V (``vrms_volts``), temperature °C (``temp1_celsius``), firmware energy counters Wh
(``energy1_wh``), cumulative energy since the collector opened J (``energy1_joules``, from the Wh
counters where the layout has them, else integrated from power between frames), RSSI dBm
(``rssi_dbm``), counts (``msg_count``, ``pulse_count``). The timestamp is the *receive* time of the
line (when its newline arrived), not the firmware's sampling time: classic firmware takes a
~200 ms snapshot every 5 s, CM firmware averages over ~9.8 s ending just before the line is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import re
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from acquisition.api import Emit, PluginContext
from acquisition.errors import ConfigError, NoData, NrgError
from acquisition.point import FieldValue, Point

__all__ = [
    "BUILTIN_LAYOUTS",
    "DEFAULT_PORTS",
    "KEY_NAMES",
    "REASONS",
    "EmonPiCollector",
    "EmonPiConfig",
    "EnergyCounter",
    "FieldSpec",
    "JeeFrame",
    "Layout",
    "LayoutTable",
    "LineBuffer",
    "LineError",
    "ValueLine",
    "encode_frame",
    "make_layout",
    "parse_jeelib",
    "parse_json_values",
    "parse_key_values",
    "parse_layouts",
    "parse_line",
]

log = logging.getLogger(__name__)

MEASUREMENT = "emonpi"
DEFAULT_PORTS = ("/dev/ttyAMA0", "/dev/serial0", "/dev/ttyUSB0")
MAX_PAYLOAD = 66
"""JeeLib ``RF12_MAXDATA``: no radio payload is longer."""

REASONS = (
    "empty",  # blank line
    "control",  # starts with SOH (\x01), ignored as emonhub does
    "not_utf8",  # undecodable bytes: line noise or a wrong baud rate
    "garbage",  # decodes but holds control characters: line noise or a wrong baud rate
    "malformed",  # looks like data (``OK ...``, ``{...}``, ``k:v``) but breaks the grammar
    "bad_crc",  # `` ? <node> <20 bytes> (<rssi>)``: RF packet that failed its CRC
    "settings",  # settings echo: ``[emonPi.29.30] E i5 g210 @ 433 MHz``, ``Settings: r3 ...``
    "ack",  # command acknowledgement: `` -> 4 b``
    "calibration",  # ``CT 1 Cal: 90.90``, ``|Vrms:240.1, I1:0.45, pf1:0.98``
    "text",  # banners, help text and anything else that is not data
)
"""Reasons a line yields no data, as :class:`LineError` carries them."""


# --- pure parsing -------------------------------------------------------------------------------


class LineError(NrgError, ValueError):
    """A serial line that carries no decodable reading; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class JeeFrame:
    """One ``OK`` line: the sending node, the payload bytes and the RSSI when printed."""

    node: int
    payload: bytes
    rssi: int | None = None


@dataclass(frozen=True, slots=True)
class ValueLine:
    """One already-scaled ``key:value`` or JSON line, values as printed."""

    values: dict[str, float]
    format: Literal["key_value", "json"]


_FRAME_RE = re.compile(r"OK[ \t]+(\d{1,3}(?:[ \t]+\d{1,3})*)(?:[ \t]+\((-?\d{1,4})\))?", re.ASCII)
_RSSI_RE = re.compile(r"\((-?\d{1,4})\)", re.ASCII)
_BYTE_VALUES = {str(i): i for i in range(256)}
_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_KEY_RE = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SETTINGS_RE = re.compile(r"^\[|^Settings:| @ |MHz|Mhz| i\d+\b.* g\d+\b")
_CALIBRATION_RE = re.compile(r"(?i)cal\w*\s*:|^\|\s*\w+:\s*-?[\d.]+\s*,")


def parse_jeelib(text: str) -> JeeFrame:
    """Parse a JeeLib ``OK <node> <byte>* [(<rssi>)]`` line (surrounding whitespace allowed).

    Raises :class:`LineError` (``malformed``) on anything else: non-decimal or out-of-range tokens,
    a node above 255, or more than 66 payload bytes.
    """
    tokens = text.split()
    rssi: int | None = None
    numbers: bytes | None = None
    if text.isascii() and len(tokens) >= 2 and tokens[0] == "OK":
        # Fast path: a table lookup both converts and validates the canonical "0".."255".
        last = tokens[-1]
        if last[0] == "(":
            m = _RSSI_RE.fullmatch(last)
            if m is not None:
                rssi = int(m.group(1))
                tokens.pop()
        try:
            numbers = bytes(map(_BYTE_VALUES.__getitem__, tokens[1:])) or None
        except KeyError:
            numbers = None
    if numbers is None:
        # Slow path: the strict grammar (leading zeros allowed), for a precise rejection.
        m = _FRAME_RE.fullmatch(text.strip())
        if m is None:
            raise LineError("malformed", f"not a JeeLib frame: {text[:80]!r}")
        try:
            numbers = bytes(map(int, m.group(1).split()))
        except ValueError:
            raise LineError("malformed", f"byte value above 255 in {text[:80]!r}") from None
        rssi = int(m.group(2)) if m.group(2) is not None else None
    if len(numbers) > MAX_PAYLOAD + 1:
        raise LineError("malformed", f"payload of {len(numbers) - 1} bytes exceeds {MAX_PAYLOAD}")
    return JeeFrame(numbers[0], numbers[1:], rssi)


def _number(text: str) -> float | None:
    if _NUMBER_RE.fullmatch(text) is None:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_key_values(text: str) -> dict[str, float]:
    """Parse ``key:value,key:value`` (keys ``[A-Za-z0-9_-]+``, decimal values, no spaces).

    One bad pair rejects the line, as emonhub does: :class:`LineError` ``malformed`` when at least
    one pair holds a number (a damaged data line), ``text`` when none does (``describe:EmonTX4CM``).
    """
    values: dict[str, float] = {}
    bad = False
    for item in text.strip().split(","):
        key, sep, raw = item.partition(":")
        value = _number(raw) if sep and _KEY_RE.fullmatch(key) else None
        if value is None:
            bad = True
        else:
            values[key] = value
    if bad:
        reason = "malformed" if values else "text"
        raise LineError(reason, f"not a key:value line: {text[:80]!r}")
    return values


def parse_json_values(text: str) -> dict[str, float]:
    """Parse a flat JSON object of numbers (``{"MSG":1,"Vrms":240.12,"P1":79}``).

    Raises :class:`LineError` ``malformed`` for invalid JSON, a non-object, a non-numeric or
    non-finite value, or a key outside ``[A-Za-z0-9_-]+``.
    """
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise LineError("malformed", f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict) or not obj:
        raise LineError("malformed", "JSON line is not a non-empty object")
    values: dict[str, float] = {}
    for key, value in obj.items():
        if not _KEY_RE.fullmatch(key) or isinstance(value, bool):
            raise LineError("malformed", f"JSON key {key!r} or its value is not usable")
        if not isinstance(value, int | float):
            raise LineError("malformed", f"JSON value of {key!r} is not a number")
        try:
            number = float(value)
        except OverflowError:
            raise LineError("malformed", f"JSON value of {key!r} is out of range") from None
        if not math.isfinite(number):
            raise LineError("malformed", f"JSON value of {key!r} is not finite")
        values[key] = number
    return values


def parse_line(raw: bytes) -> JeeFrame | ValueLine:
    """Classify one serial line (without or with its CR/LF) and parse it if it carries data.

    Returns a :class:`JeeFrame` or a :class:`ValueLine`; raises :class:`LineError` for every other
    line, its ``reason`` one of :data:`REASONS`. Never raises anything else.
    """
    raw = raw.strip(b" \t\r\n")
    if not raw:
        raise LineError("empty", "empty line")
    if raw[0] == 1:
        raise LineError("control", "line starts with SOH")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LineError("not_utf8", f"not UTF-8: {raw[:40]!r}") from None
    if not text.isprintable() and _CONTROL_RE.search(text):
        raise LineError("garbage", f"control characters in {text[:40]!r}")
    head = text[:2]
    if head == "OK":
        return parse_jeelib(text)
    if head[0] == "?":
        raise LineError("bad_crc", "RF packet with a bad CRC")
    if head[0] == "{":
        return ValueLine(parse_json_values(text), "json")
    if ":" in text and " " not in text and "\t" not in text:
        return ValueLine(parse_key_values(text), "key_value")
    if _SETTINGS_RE.search(text):
        raise LineError("settings", f"settings echo: {text[:80]!r}")
    if ">" in text:
        raise LineError("ack", f"command acknowledgement: {text[:80]!r}")
    if _CALIBRATION_RE.search(text):
        raise LineError("calibration", f"calibration output: {text[:80]!r}")
    raise LineError("text", f"not data: {text[:80]!r}")


def encode_frame(node: int, payload: bytes, rssi: int | None = None) -> str:
    """The JeeLib line (without CR/LF) for ``payload`` from ``node``; ``rssi=0`` prints ``(-0)``,
    the emonPi's mark for its own readings."""
    parts = ["OK", str(node), *map(str, payload)]
    if rssi is not None:
        parts.append(f"(-{-rssi})" if rssi <= 0 else f"({rssi})")
    return " ".join(parts)


# --- layouts ------------------------------------------------------------------------------------

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*", re.ASCII)
_STRUCT_RE = re.compile(r"<?((?:\d*[bBhHiIlLqQf])+)", re.ASCII)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One struct member: output name and unit, scale, and raw values that mean "no reading"."""

    name: str
    unit: str
    scale: float = 1.0
    missing: frozenset[int] = frozenset()
    keep: bool = True
    """False drops the member from every reading (a sensor slot known to be empty)."""

    @property
    def key(self) -> str:
        """The field name in points: ``<name>_<unit>``."""
        return f"{self.name}_{self.unit}"


class Layout:
    """A payload layout: a packed little-endian struct and what each member means.

    ``averaged`` says the firmware sends each power as the mean over the interval since its last
    frame (emonLibCM/DB) rather than a short snapshot (classic discrete sampling).
    """

    __slots__ = ("_plan", "_struct", "averaged", "fields", "name", "nodes", "struct")

    def __init__(
        self,
        name: str,
        nodes: Iterable[int],
        struct_codes: str,
        fields: Sequence[FieldSpec],
        averaged: bool = False,
    ) -> None:
        self.name = name
        self.averaged = averaged
        self.nodes = frozenset(nodes)
        self.struct = "<" + struct_codes.lstrip("<")
        self.fields = tuple(fields)
        self._struct = struct.Struct(self.struct)
        self._plan = [_plan(f) for f in self.fields]

    @property
    def size(self) -> int:
        """Payload length in bytes."""
        return self._struct.size

    def decode(self, payload: bytes) -> dict[str, FieldValue]:
        """Scaled values keyed by field name; members holding a missing-value sentinel are left
        out. ``payload`` must be exactly :attr:`size` bytes."""
        out: dict[str, FieldValue] = {}
        for step, raw in zip(self._plan, self._struct.unpack(payload), strict=True):
            if step is None or raw in step[1]:
                continue
            key, _, divisor, multiplier = step
            if divisor:
                out[key] = raw / divisor
            elif multiplier:
                out[key] = float(raw * multiplier)
            else:
                out[key] = int(raw)
        return out

    def encode(self, values: Mapping[str, float | None]) -> bytes:
        """The payload for physical ``values`` keyed by field name (the simulator's and tests'
        inverse of :meth:`decode`); ``None`` or an absent key writes the member's first sentinel."""
        raws: list[int | float] = []
        for spec, code in zip(self.fields, _codes(self.struct), strict=True):
            value = values.get(spec.key)
            if value is None:
                if not spec.missing:
                    raise ValueError(f"layout {self.name}: no value for {spec.key}")
                raws.append(min(spec.missing))
            elif code == "f":
                raws.append(float(value) / spec.scale)
            else:
                raws.append(round(value / spec.scale))
        return self._struct.pack(*raws)

    def with_temp_sensors(self, count: int) -> Layout:
        """A copy for a unit with ``count`` temperature sensors: ``temp1..temp<count>`` keep a raw
        0 (a real 0.0 °C), later ``temp<n>`` members are dropped."""
        fields = []
        for spec in self.fields:
            m = re.fullmatch(r"temp(\d+)", spec.name)
            if m is None or spec.unit != "celsius":
                fields.append(spec)
            elif int(m.group(1)) <= count:
                fields.append(dataclasses.replace(spec, missing=spec.missing - {0}))
            else:
                fields.append(dataclasses.replace(spec, keep=False))
        return Layout(self.name, self.nodes, self.struct, fields, self.averaged)

    def __repr__(self) -> str:
        return f"Layout({self.name!r}, nodes={sorted(self.nodes)}, struct={self.struct!r})"


def _codes(fmt: str) -> list[str]:
    out: list[str] = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", fmt):
        out.extend(code * (int(count) if count else 1))
    return out


_Step = tuple[str, frozenset[int], int, float]


def _plan(spec: FieldSpec) -> _Step | None:
    """(key, sentinels, divisor, multiplier) to decode one member; None drops it.

    Counts stay ints (multiplier 0); every physical quantity is a float, so a field's type never
    changes between layouts (InfluxDB rejects a field that is int in one point, float in another).
    """
    if not spec.keep:
        return None
    if spec.unit == "count" and spec.scale == 1:
        return (spec.key, spec.missing, 0, 0.0)
    inverse = round(1 / spec.scale)
    if spec.scale < 1 and inverse and math.isclose(inverse * spec.scale, 1.0, rel_tol=1e-12):
        # Divide by 100 rather than multiply by 0.01: 24137 / 100 is exactly the float 241.37.
        return (spec.key, spec.missing, inverse, 0.0)
    return (spec.key, spec.missing, 0, spec.scale)


def make_layout(
    name: str,
    nodes: Iterable[int],
    struct_codes: str,
    names: Sequence[str],
    units: Sequence[str],
    scales: Sequence[float] | None = None,
    missing: Mapping[str, Iterable[int]] | None = None,
    averaged: bool = False,
) -> Layout:
    """Build and check a layout; ValueError (naming the key) when the parts do not fit."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"name: {name!r} is not a lowercase identifier")
    nodes = list(nodes)
    if not nodes or not all(isinstance(n, int) and 0 <= n <= 255 for n in nodes):
        raise ValueError(f"nodes: {nodes!r} must be a non-empty list of integers 0..255")
    if not isinstance(struct_codes, str) or not _STRUCT_RE.fullmatch(struct_codes):
        raise ValueError(
            f"struct: {struct_codes!r} is not a little-endian struct format (e.g. '<4h'; codes "
            "b B h H i I l L q Q f; AVR int is h, long is l)"
        )
    codes = _codes(struct_codes.lstrip("<"))
    size = struct.calcsize("<" + struct_codes.lstrip("<"))
    if size > MAX_PAYLOAD:
        raise ValueError(f"struct: {struct_codes!r} is {size} bytes, over {MAX_PAYLOAD}")
    n = len(codes)
    if n == 0:
        raise ValueError(f"struct: {struct_codes!r} has no members")
    names = list(names)
    units = list(units)
    scales = [1.0] * n if scales is None else [float(s) for s in scales]
    for key, seq in (("names", names), ("units", units), ("scales", scales)):
        if len(seq) != n:
            raise ValueError(f"{key}: {len(seq)} entries for {n} struct members ({struct_codes!r})")
    for key, seq in (("names", names), ("units", units)):
        for item in seq:
            if not isinstance(item, str) or not _NAME_RE.fullmatch(item):
                raise ValueError(f"{key}: {item!r} is not a lowercase identifier")
    if len(set(names)) != n:
        raise ValueError(f"names: duplicates in {names!r}")
    for s in scales:
        if not math.isfinite(s) or s == 0:
            raise ValueError(f"scales: {s!r} must be finite and non-zero")
    sentinels: dict[str, frozenset[int]] = {}
    for key, raw in (missing or {}).items():
        if key not in names:
            raise ValueError(f"missing: {key!r} is not one of names")
        values = [raw] if isinstance(raw, int) else list(raw)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ValueError(f"missing.{key}: {raw!r} must be raw integers")
        sentinels[key] = frozenset(values)
    fields = [
        FieldSpec(nm, unit, scale, sentinels.get(nm, frozenset()))
        for nm, unit, scale in zip(names, units, scales, strict=True)
    ]
    return Layout(name, nodes, struct_codes, fields, averaged)


def _seq(prefix: str, count: int, start: int = 1) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + count)]


# Classic firmware: -55 raw (-5.5 °C) is a failed DS18B20 read and 0 fills the slots beyond the
# sensors it detected. A real 0.0 °C is also 0 raw, so 0 is only kept where ``temp_sensors`` says
# a sensor is fitted: writing 0 °C for an absent sensor would be a made-up reading.
_TEMPS_CLASSIC = {f"temp{i}": [-55, 0] for i in range(1, 7)}
_TEMPS_CM = {f"temp{i}": [30000] for i in range(1, 7)}  # emonLibCM: no sensor (300.00 °C)

_CM_NAMES = [
    *("msg", "power1", "power2", "power1_plus_2", "vrms"),
    *_seq("temp", 6),
    *("pulse1", "pulse2", "energy1", "energy2"),
]

BUILTIN_LAYOUTS: tuple[Layout, ...] = (
    # The 4-int16 PayloadTX {power1, power2, power3, Vrms}: emonTx V2 example, node 10, and the
    # frame this project was first specified around on the emonPi's node 5.
    make_layout(
        "payloadtx",
        [5, 10],
        "<4h",
        ["power1", "power2", "power3", "vrms"],
        ["watts"] * 3 + ["volts"],
        [1, 1, 1, 0.01],
    ),
    make_layout(
        "emonpi_classic",
        [5],
        "<10hL",
        ["power1", "power2", "power1_plus_2", "vrms", *_seq("temp", 6), "pulse"],
        ["watts"] * 3 + ["volts"] + ["celsius"] * 6 + ["count"],
        [1, 1, 1, 0.01] + [0.1] * 6 + [1],
        _TEMPS_CLASSIC,
    ),
    make_layout(
        "emonpi_cm",
        [5],
        "<L10h2L2l",
        _CM_NAMES,
        ["count"] + ["watts"] * 3 + ["volts"] + ["celsius"] * 6 + ["count"] * 2 + ["wh"] * 2,
        [1, 1, 1, 1, 0.01] + [0.01] * 6 + [1, 1, 1, 1],
        _TEMPS_CM,
        averaged=True,
    ),
    make_layout(
        "emontx_shield",
        [6],
        "<5h",
        [*_seq("power", 4), "vrms"],
        ["watts"] * 4 + ["volts"],
        [1, 1, 1, 1, 0.01],
    ),
    make_layout(
        "emontx3",
        [7, 8, 9, 10],
        "<11hL",
        [*_seq("power", 4), "vrms", *_seq("temp", 6), "pulse"],
        ["watts"] * 4 + ["volts"] + ["celsius"] * 6 + ["count"],
        [1] * 4 + [0.01] + [0.1] * 6 + [1],
        _TEMPS_CLASSIC,
    ),
    make_layout(
        "emontx4",
        [17, 18],
        "<L7h6l3hL",
        ["msg", "vrms", *_seq("power", 6), *_seq("energy", 6), *_seq("temp", 3), "pulse"],
        ["count", "volts"] + ["watts"] * 6 + ["wh"] * 6 + ["celsius"] * 3 + ["count"],
        [1, 0.01] + [1] * 12 + [0.01] * 3 + [1],
        {f"temp{i}": [30000] for i in range(1, 4)},
        averaged=True,
    ),
    make_layout(
        "emonpi2",
        [27, 28],
        "<L7h6lL",
        ["msg", "v1", *_seq("power", 6), *_seq("energy", 6), "pulse"],
        ["count", "volts"] + ["watts"] * 6 + ["wh"] * 6 + ["count"],
        [1, 0.01] + [1] * 12 + [1],
        averaged=True,
    ),
    make_layout(
        "emon_db_3phase",
        [27],
        "<L9h6lL",
        ["msg", "v1", "v2", "v3", *_seq("power", 6), *_seq("energy", 6), "pulse"],
        ["count"] + ["volts"] * 3 + ["watts"] * 6 + ["wh"] * 6 + ["count"],
        [1, 0.01, 0.01, 0.01] + [1] * 12 + [1],
        averaged=True,
    ),
    make_layout(
        "emonth",
        range(19, 27),
        "<4h",
        ["temp", "temp_external", "humidity", "battery"],
        ["celsius", "celsius", "percent", "volts"],
        [0.1] * 4,
    ),
    make_layout(
        "emonth_pulse",
        range(19, 27),
        "<4hL",
        ["temp", "temp_external", "humidity", "battery", "pulse"],
        ["celsius", "celsius", "percent", "volts", "count"],
        [0.1] * 4 + [1],
    ),
)
"""Layouts known without configuration, keyed on (node, length) by :class:`LayoutTable`."""


class LayoutTable:
    """(node, payload length) → layout. Later layouts override earlier ones for the same key."""

    def __init__(self, layouts: Iterable[Layout]) -> None:
        self._by_key: dict[tuple[int, int], Layout] = {}
        for layout in layouts:
            for node in layout.nodes:
                self._by_key[(node, layout.size)] = layout

    def find(self, node: int, length: int) -> Layout | None:
        """The layout for a frame, or None when node and length do not both match one."""
        return self._by_key.get((node, length))

    def layouts(self) -> list[Layout]:
        """Distinct layouts in the table."""
        seen: dict[int, Layout] = {}
        for layout in self._by_key.values():
            seen.setdefault(id(layout), layout)
        return list(seen.values())


_LAYOUT_KEYS = {
    "name",
    "nodes",
    "node",
    "struct",
    "names",
    "units",
    "scales",
    "missing",
    "averaged",
}


def parse_layouts(tables: Sequence[Mapping[str, Any]]) -> list[Layout]:
    """Layouts from the ``layouts`` config key; ValueError naming ``layouts[i].key``."""
    out: list[Layout] = []
    for i, table in enumerate(tables):
        where = f"layouts[{i}]"
        if not isinstance(table, Mapping):
            raise ValueError(f"{where}: expected a table, got {table!r}")
        unknown = set(table) - _LAYOUT_KEYS
        if unknown:
            raise ValueError(
                f"{where}: unknown key {sorted(unknown)[0]!r}; known keys: "
                + ", ".join(sorted(_LAYOUT_KEYS))
            )
        for key in ("name", "struct", "names", "units"):
            if key not in table:
                raise ValueError(f"{where}.{key}: missing")
        if ("node" in table) == ("nodes" in table):
            raise ValueError(f"{where}.nodes: give exactly one of node = N or nodes = [N, ...]")
        nodes = [table["node"]] if "node" in table else table["nodes"]
        if not isinstance(nodes, list):
            raise ValueError(f"{where}.nodes: expected a list of integers, got {nodes!r}")
        for key in ("names", "units", "scales"):
            if key in table and not isinstance(table[key], list):
                raise ValueError(f"{where}.{key}: expected a list, got {table[key]!r}")
        scales = table.get("scales")
        if scales is not None and not all(
            isinstance(s, int | float) and not isinstance(s, bool) for s in scales
        ):
            raise ValueError(f"{where}.scales: {scales!r} must be numbers")
        missing = table.get("missing", {})
        if not isinstance(missing, Mapping):
            raise ValueError(f"{where}.missing: expected a table of name = raw value(s)")
        averaged = table.get("averaged", False)
        if not isinstance(averaged, bool):
            raise ValueError(f"{where}.averaged: expected true or false, got {averaged!r}")
        try:
            out.append(
                make_layout(
                    table["name"],
                    nodes,
                    table["struct"],
                    table["names"],
                    table["units"],
                    scales,
                    missing,
                    averaged,
                )
            )
        except ValueError as exc:
            raise ValueError(f"{where}.{exc}") from None
    return out


KEY_NAMES: dict[str, str] = {"MSG": "msg_count", "Vrms": "vrms_volts", "pulse": "pulse_count"}
"""Field names for the keys of emonLibCM/DB ``key:value`` and JSON lines (plus the patterns in
:func:`_key_field`); other keys need a ``keys`` entry in the config."""

_KEY_PATTERNS = (
    (re.compile(r"P(\d{1,2})", re.ASCII), "power{}_watts"),
    (re.compile(r"power(\d{1,2})", re.ASCII), "power{}_watts"),
    (re.compile(r"E(\d{1,2})", re.ASCII), "energy{}_wh"),
    (re.compile(r"T(\d{1,2})", re.ASCII), "temp{}_celsius"),
    (re.compile(r"V(\d)", re.ASCII), "v{}_volts"),
    (re.compile(r"I(\d{1,2})", re.ASCII), "current{}_amps"),
    (re.compile(r"pf(\d{1,2})", re.ASCII), "power_factor{}_ratio"),
    (re.compile(r"pulse(\d)", re.ASCII), "pulse{}_count"),
)


def _key_field(key: str) -> str | None:
    name = KEY_NAMES.get(key)
    if name is not None:
        return name
    for pattern, template in _KEY_PATTERNS:
        m = pattern.fullmatch(key)
        if m:
            return template.format(int(m.group(1)))
    return None


# --- energy -------------------------------------------------------------------------------------

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


# --- line framing -------------------------------------------------------------------------------


class LineBuffer:
    """Splits a byte stream on ``\\n`` with a bounded buffer.

    A line longer than ``max_line`` bytes is dropped whole (counted once in ``overlong``, its bytes
    in ``dropped_bytes``) and the buffer never holds more than ``max_line`` bytes plus one read.
    """

    def __init__(self, max_line: int = 1024) -> None:
        self.max_line = max_line
        self.overlong = 0
        self.dropped_bytes = 0
        self._rest = b""
        self._skipping = False

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held."""
        return len(self._rest)

    def feed(self, data: bytes) -> list[bytes]:
        """Complete lines in ``data`` (after what earlier calls left), without the ``\\n``."""
        buf = self._rest + data if self._rest else data
        parts = buf.split(b"\n")
        rest = parts.pop()
        limit = self.max_line
        lines: list[bytes] = []
        for part in parts:
            if self._skipping:
                self._skipping = False  # the tail of an overlong line
                self.dropped_bytes += len(part) + 1
            elif len(part) > limit:
                self.overlong += 1
                self.dropped_bytes += len(part) + 1
            else:
                lines.append(part)
        if len(rest) > limit:
            if not self._skipping:
                self.overlong += 1
                self._skipping = True
            self.dropped_bytes += len(rest)
            rest = b""
        self._rest = rest
        return lines


# --- the collector ------------------------------------------------------------------------------


def _opt(default: Any, doc: str) -> Any:
    """A config field with its one-line doc for ``nrg-collect config``."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class EmonPiConfig:
    """``[[collectors.emonpi]]`` options."""

    root: str = _opt("/", "prefix for the default ports (fixture trees, containers)")
    port: str = _opt(
        "",
        'serial device, /dev/serial/by-id link or pyserial URL (rfc2217://, socket://); "" '
        "takes the first of /dev/ttyAMA0, /dev/serial0, /dev/ttyUSB0 that exists",
    )
    baudrate: int = _opt(38400, "38400 classic emonPi; 115200 emonPi_CM, emonPi2, emonTx4")
    layouts: list[dict[str, Any]] = field(
        default_factory=list,
        metadata={
            "doc": "extra layouts {name, node|nodes, struct, names, units, scales, missing}; "
            "one with a built-in's (node, length) replaces it"
        },
    )
    builtin_layouts: bool = _opt(True, "use the built-in layouts")
    temp_sensors: int = _opt(
        -1, "temperature sensors fitted: temp1..N kept (0 included), later slots dropped; -1 all"
    )
    keys: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "doc": "key:value/JSON keys -> field names, beside MSG, Vrms, Vn, Pn, En, Tn, In, "
            "pfn, pulse"
        },
    )
    text_node: str = _opt("serial", "node tag of key:value/JSON lines (they carry no node id)")
    energy: Literal["auto", "integrate"] = _opt(
        "auto", "auto: energy_joules from Wh counters where a layout has them, else integrated"
    )
    max_gap: float = field(
        default=30.0,
        metadata={"duration": True, "doc": "longest gap between frames integrated into energy"},
    )
    commands: list[str] = field(
        default_factory=list,
        metadata={"doc": 'firmware commands sent after each open, e.g. ["5i", "210g"]'},
    )
    max_line: int = _opt(1024, "longest line kept, in bytes; longer ones are dropped and counted")
    reconnect_min: float = field(
        default=0.5, metadata={"duration": True, "doc": "first retry delay after a port failure"}
    )
    reconnect_max: float = field(
        default=10.0, metadata={"duration": True, "doc": "retry delay cap (doubling backoff)"}
    )

    def validate(self) -> None:
        """ValueError naming the key when an option is out of range."""
        if self.baudrate <= 0:
            raise ValueError(f"baudrate: {self.baudrate} must be positive")
        if self.temp_sensors < -1:
            raise ValueError(f"temp_sensors: {self.temp_sensors} must be -1 (all) or a count")
        if self.energy not in ("auto", "integrate"):
            raise ValueError(f"energy: {self.energy!r} must be 'auto' or 'integrate'")
        if self.max_line < 16:
            raise ValueError(f"max_line: {self.max_line} is too small (at least 16)")
        if not 0 < self.reconnect_min <= self.reconnect_max:
            raise ValueError("reconnect_min must be > 0 and <= reconnect_max")
        for key, name in self.keys.items():
            if not _KEY_RE.fullmatch(key) or not _NAME_RE.fullmatch(name):
                raise ValueError(f"keys.{key}: {name!r} must be a lowercase field name")
        for cmd in self.commands:
            if not cmd.isascii() or not cmd.isprintable():
                raise ValueError(f"commands: {cmd!r} must be printable ASCII")
        parse_layouts(self.layouts)


_HINTS = (
    ("multiple access", "another process (emonhub?) may be reading the port; only one may own it"),
    ("exclusively lock", "another nrg-collect holds the port"),
    ("Permission denied", "add the user to the dialout group or fix the device's udev rule"),
    ("No such file", "no such device (USB unplugged? UART disabled in config.txt?)"),
)

_STAT_KEYS = (
    "lines",
    "frames",
    "value_lines",
    "points",
    *REASONS,
    "partial",
    "overlong",
    "unknown_layout",
    "unknown_keys",
    "msg_missed",
    "device_resets",
    "counter_resets",
    "energy_gaps",
    "connects",
    "disconnects",
    "open_errors",
)

_BAUD_WINDOW = 512
"""Bytes after a connect before the wrong-baud-rate hint is judged (then on every read, until it
has been given once for that connect)."""


class EmonPiCollector:
    """Stream collector for the emonPi / emonTx serial port (see the module docstring)."""

    name: ClassVar[str] = "emonpi"
    config_class: ClassVar[type] = EmonPiConfig

    def __init__(
        self,
        config: EmonPiConfig,
        context: PluginContext | None = None,
        *,
        wall_clock: Callable[[], int] = time.time_ns,
        mono_clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        try:
            config.validate()
            user = parse_layouts(config.layouts)
        except ValueError as exc:
            raise ConfigError(f"[collectors.emonpi] {exc}") from exc
        self.config = config
        self.context = context
        self._wall = wall_clock
        self._mono = mono_clock
        layouts = [*(BUILTIN_LAYOUTS if config.builtin_layouts else ()), *user]
        if config.temp_sensors >= 0:
            layouts = [layout.with_temp_sensors(config.temp_sensors) for layout in layouts]
        self.table = LayoutTable(layouts)
        self._keys = dict(config.keys)
        self.port = config.port
        self._counts: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self._energy: dict[tuple[str, str], EnergyCounter] = {}
        self._msg: dict[tuple[str, str], int] = {}
        self._logged: set[object] = set()
        self._writer: asyncio.StreamWriter | None = None
        self._outage: str | None = None
        self._outage_since = 0.0
        self._first_line = True
        self._window = [0, 0, 0]  # bytes read, decoded, noise since connect (baud-rate hint)
        self._baud_warned = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Pick the port; NoData when none is configured and none of the usual ones exists."""
        try:
            import serial_asyncio  # noqa: F401
        except ImportError as exc:
            raise NoData(
                f"pyserial-asyncio is not installed ({exc}): pip install 'nrg[serial]'"
            ) from None
        if not self.port:
            tried = []
            for candidate in DEFAULT_PORTS:
                path = os.path.join(self.config.root, candidate.lstrip("/"))
                tried.append(path)
                if os.path.exists(path):
                    self.port = path
                    break
            else:
                raise NoData(f"no serial port configured and none of {', '.join(tried)} exists")

    async def aclose(self) -> None:
        """Close the port if a run left it open."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def describe(self) -> str:
        """One line for ``nrg-collect list``."""
        names = ", ".join(layout.name for layout in self.table.layouts())
        return f"{self.port or 'no port'} at {self.config.baudrate} baud; layouts: {names}"

    def stats(self) -> dict[str, int | float]:
        """Counters since start: lines and frames read, points emitted, lines dropped per reason,
        connects and port errors."""
        out: dict[str, int | float] = dict(self._counts)
        for counter in self._energy.values():
            out["energy_gaps"] += counter.gaps
            out["counter_resets"] += counter.counter_resets
        return out

    def status(self) -> str:
        """Short state for the live terminal line."""
        c = self._counts
        state = f"down ({self._outage})" if self._outage else "ok"
        return f"{state}, {c['frames'] + c['value_lines']} readings"

    # -- serial loop -------------------------------------------------------------------------

    async def run(self, emit: Emit) -> None:
        """Read the port until cancelled, reopening it with backoff when it fails."""
        import serial_asyncio

        cfg = self.config
        delay = cfg.reconnect_min
        while True:
            try:
                reader, writer = await serial_asyncio.open_serial_connection(
                    url=self.port, baudrate=cfg.baudrate, exclusive=True
                )
            except (OSError, ValueError) as exc:  # SerialException is an OSError
                self._counts["open_errors"] += 1
                self._port_failed(f"cannot open: {exc}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, cfg.reconnect_max)
                continue
            self._writer = writer
            self._connected()
            delay = cfg.reconnect_min
            reason = "end of file"
            try:
                await self._send_commands(writer)
                await self._read(reader, emit)
            except (OSError, ValueError) as exc:
                reason = str(exc) or type(exc).__name__
            finally:
                self._writer = None
                writer.close()
            self._counts["disconnects"] += 1
            self._port_failed(f"lost: {reason}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.reconnect_max)

    def _connected(self) -> None:
        self._counts["connects"] += 1
        self._first_line = True
        self._window = [0, 0, 0]
        self._baud_warned = False
        if self._outage is not None:
            log.info(
                "emonpi %s: port is back after %.1f s",
                self.port,
                time.monotonic() - self._outage_since,
            )
            self._outage = None

    def _port_failed(self, reason: str) -> None:
        if self._outage is None:
            hint = next((h for needle, h in _HINTS if needle in reason), "")
            log.warning(
                "emonpi %s: port %s%s; retrying with backoff up to %g s",
                self.port,
                reason,
                f" ({hint})" if hint else "",
                self.config.reconnect_max,
            )
            self._outage = reason
            self._outage_since = time.monotonic()

    async def _send_commands(self, writer: asyncio.StreamWriter) -> None:
        for cmd in self.config.commands:
            writer.write(cmd.encode("ascii") + b"\r\n")
            await writer.drain()
            # The ATmega's serial buffer is small and it answers each command before the next.
            await asyncio.sleep(0.1)

    async def _read(self, reader: asyncio.StreamReader, emit: Emit) -> None:
        buffer = LineBuffer(self.config.max_line)
        handle = self.handle_line
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                overlong, dropped = buffer.overlong, buffer.dropped_bytes
                for line in buffer.feed(data):
                    handle(line, emit)
                self._counts["overlong"] += buffer.overlong - overlong
                window = self._window
                window[0] += len(data)
                window[2] += buffer.dropped_bytes - dropped
                if not self._baud_warned and window[0] >= _BAUD_WINDOW:
                    self._check_baud()
        finally:
            if buffer.pending:
                self._counts["partial"] += 1

    # -- per line ----------------------------------------------------------------------------

    def handle_line(self, raw: bytes, emit: Emit) -> None:
        """Parse one line (without ``\\n``) received now and emit its point, or count why not."""
        counts = self._counts
        counts["lines"] += 1
        try:
            parsed = parse_line(raw)
        except LineError as exc:
            reason = exc.reason
            if self._first_line and reason != "empty":
                reason = "partial"  # a line cut at connect time, not a property of the device
            counts[reason] += 1
            if reason in ("not_utf8", "garbage"):
                self._window[2] += len(raw) + 1
            self._first_line = False
            return
        self._first_line = False
        self._window[1] += len(raw) + 1
        wall_ns = self._wall()
        mono_ns = self._mono()
        if isinstance(parsed, JeeFrame):
            layout = self.table.find(parsed.node, len(parsed.payload))
            if layout is None:
                counts["unknown_layout"] += 1
                self._log_once(
                    ("layout", parsed.node, len(parsed.payload)),
                    "emonpi %s: node %d sent %d-byte frames that match no layout (add one under "
                    "layouts)",
                    self.port,
                    parsed.node,
                    len(parsed.payload),
                )
                return
            counts["frames"] += 1
            fields = layout.decode(parsed.payload)
            if not fields:  # every member held its "no reading" sentinel
                return
            if parsed.rssi:  # "(-0)" marks the emonPi's own readings: no radio, no RSSI
                fields["rssi_dbm"] = parsed.rssi
            node, layout_name, averaged = str(parsed.node), layout.name, layout.averaged
        else:
            counts["value_lines"] += 1
            mapped = self._map_keys(parsed.values)
            if mapped is None:
                counts["malformed"] += 1
                return
            fields = mapped
            # key:value and JSON lines come from emonLibCM/DB firmware, which averages
            node, layout_name, averaged = self.config.text_node, parsed.format, True
        self._emit_reading(node, layout_name, averaged, fields, wall_ns, mono_ns, emit)

    def _map_keys(self, values: Mapping[str, float]) -> dict[str, FieldValue] | None:
        """Field names for printed keys; None when a count is not an integer (a damaged line)."""
        fields: dict[str, FieldValue] = {}
        for key, value in values.items():
            name = self._keys.get(key)
            if name is None:
                name = _key_field(key)
                if name is not None and len(self._keys) < 1024:
                    self._keys[key] = name
            if name is None:
                self._counts["unknown_keys"] += 1
                self._log_once(
                    ("key", key),
                    "emonpi %s: key %r has no field name; map it under keys (e.g. keys = "
                    '{ %s = "name_unit" })',
                    self.port,
                    key,
                    key,
                )
                continue
            if name.endswith("_count"):
                if not value.is_integer() or abs(value) >= 2**63:
                    return None
                fields[name] = int(value)
            else:
                fields[name] = value
        return fields

    def _emit_reading(
        self,
        node: str,
        layout_name: str,
        averaged: bool,
        fields: dict[str, FieldValue],
        wall_ns: int,
        mono_ns: int,
        emit: Emit,
    ) -> None:
        stream = (node, layout_name)
        msg = fields.get("msg_count")
        reset = False
        if isinstance(msg, int):
            last = self._msg.get(stream)
            if last is not None:
                if msg > last + 1:
                    self._counts["msg_missed"] += msg - last - 1
                elif msg <= last:
                    self._counts["device_resets"] += 1
                    reset = True
            self._msg[stream] = msg
        counter = self._energy.get(stream)
        if counter is None:
            counter = self._energy[stream] = EnergyCounter(
                self.config.energy, self.config.max_gap, averaged
            )
        if not fields:
            return
        fields.update(counter.update(fields, mono_ns, reset))
        self._counts["points"] += 1
        emit(Point(MEASUREMENT, {"node": node, "layout": layout_name}, fields, wall_ns))

    def _check_baud(self) -> None:
        # Judged on bytes, not lines: at the wrong rate a newline is rarely read as one.
        total, decoded, noise = self._window
        if decoded * 4 < total and noise * 2 >= total:
            self._baud_warned = True
            other = 115200 if self.config.baudrate != 115200 else 38400
            log.warning(
                "emonpi %s: %d of the first %d bytes are noise (not UTF-8, control characters, "
                "no line ends) and few decoded: the baud rate %d is probably wrong (try %d; "
                "classic emonPi firmware uses 38400, emonPi_CM, emonPi2 and emonTx4 115200)",
                self.port,
                noise,
                total,
                self.config.baudrate,
                other,
            )

    def _log_once(self, key: object, msg: str, *args: object) -> None:
        if key in self._logged or len(self._logged) >= 256:
            return
        self._logged.add(key)
        log.warning(msg, *args)
