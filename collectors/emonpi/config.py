"""``[[collectors.emonpi]]``: the collector's configuration keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .layouts import _NAME_RE, parse_layouts
from .parse import _KEY_RE

__all__ = ["EmonPiConfig"]


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
            "doc": "key:value/JSON keys -> field names, beside MSG, Vrms, Vn, Pn, En, Tn, tn, In, "
            "pfn, pulse, analogn"
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
