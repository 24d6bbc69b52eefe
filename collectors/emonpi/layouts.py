"""Payload layouts of JeeLib frames: packed little-endian C structs keyed by (node, length).

A layout names each struct member, its unit, scale and the raw values that mean "no reading";
:func:`make_layout` checks a layout built from these declarative parts (the built-in ones below,
or the ``layouts`` config key through :func:`parse_layouts`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acquisition.point import FieldValue

from .parse import MAX_PAYLOAD

__all__ = [
    "BUILTIN_LAYOUTS",
    "FieldSpec",
    "Layout",
    "LayoutTable",
    "make_layout",
    "parse_layouts",
]

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
    _check_identifier("name", name)
    nodes = list(nodes)
    if not nodes or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 255 for n in nodes
    ):
        raise ValueError(f"nodes: {nodes!r} must be a non-empty list of integers 0..255")
    n = _check_struct(struct_codes)
    names = list(names)
    units = list(units)
    scales = [1.0] * n if scales is None else [float(s) for s in scales]
    for key, seq in (("names", names), ("units", units), ("scales", scales)):
        if len(seq) != n:
            raise ValueError(f"{key}: {len(seq)} entries for {n} struct members ({struct_codes!r})")
    for key, seq in (("names", names), ("units", units)):
        for item in seq:
            _check_identifier(key, item)
    if len(set(names)) != n:
        raise ValueError(f"names: duplicates in {names!r}")
    for s in scales:
        if not math.isfinite(s) or s == 0:
            raise ValueError(f"scales: {s!r} must be finite and non-zero")
    sentinels = _sentinels(names, missing or {})
    fields = [
        FieldSpec(nm, unit, scale, sentinels.get(nm, frozenset()))
        for nm, unit, scale in zip(names, units, scales, strict=True)
    ]
    return Layout(name, nodes, struct_codes, fields, averaged)


def _check_identifier(key: str, item: object) -> None:
    if not isinstance(item, str) or not _NAME_RE.fullmatch(item):
        raise ValueError(f"{key}: {item!r} is not a lowercase identifier")


def _check_struct(struct_codes: object) -> int:
    """The member count of a struct format; ValueError when it is not a usable one."""
    if not isinstance(struct_codes, str) or not _STRUCT_RE.fullmatch(struct_codes):
        raise ValueError(
            f"struct: {struct_codes!r} is not a little-endian struct format (e.g. '<4h'; codes "
            "b B h H i I l L q Q f; AVR int is h, long is l)"
        )
    try:
        size = struct.calcsize("<" + struct_codes.lstrip("<"))
    except (struct.error, OverflowError, MemoryError) as exc:
        raise ValueError(f"struct: {struct_codes!r}: {exc}") from None
    if size > MAX_PAYLOAD:
        raise ValueError(f"struct: {struct_codes!r} is {size} bytes, over {MAX_PAYLOAD}")
    n = len(_codes(struct_codes.lstrip("<")))
    if n == 0:
        raise ValueError(f"struct: {struct_codes!r} has no members")
    return n


def _sentinels(
    names: Sequence[str], missing: Mapping[str, Iterable[int]]
) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for key, raw in missing.items():
        if key not in names:
            raise ValueError(f"missing: {key!r} is not one of names")
        values = [raw] if isinstance(raw, int) else list(raw) if isinstance(raw, list) else None
        if values is None or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise ValueError(f"missing.{key}: {raw!r} must be raw integers")
        out[key] = frozenset(values)
    return out


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
