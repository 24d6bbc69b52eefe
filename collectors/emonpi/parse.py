"""Pure parsing of the emonPi / emonTx serial lines: JeeLib frames, ``key:value`` and JSON lines,
and the line framing of the byte stream.

Every function here raises :class:`LineError` (a ``ValueError``) for a line it cannot use, its
``reason`` one of :data:`REASONS`, and nothing else; each runs in time linear in the line length.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Literal

from acquisition.errors import NrgError

__all__ = [
    "MAX_PAYLOAD",
    "REASONS",
    "JeeFrame",
    "LineBuffer",
    "LineError",
    "ValueLine",
    "encode_frame",
    "parse_jeelib",
    "parse_json_values",
    "parse_key_values",
    "parse_line",
]

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
# Each part of a number matches in exactly one way (no "\d+\.?\d*" split of a digit run), so a
# failed match backtracks in linear time whatever the length of the line.
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
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
