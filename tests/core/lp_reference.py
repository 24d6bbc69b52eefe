"""An independent line-protocol reader for tests, written from the InfluxDB grammar with a
character-class state machine (it shares no code with acquisition.lineproto)."""

from __future__ import annotations

from typing import Any

CONTROL = {"n": "\n", "r": "\r", "t": "\t"}


def _read_token(line: str, pos: int, stops: str) -> tuple[str, int]:
    out = []
    while pos < len(line) and line[pos] not in stops:
        if line[pos] == "\\" and pos + 1 < len(line):
            out.append(CONTROL.get(line[pos + 1], line[pos + 1]))
            pos += 2
        else:
            out.append(line[pos])
            pos += 1
    return "".join(out), pos


def _read_field_value(line: str, pos: int) -> tuple[Any, int]:
    if line[pos] == '"':
        pos += 1
        out = []
        while line[pos] != '"':
            if line[pos] == "\\":
                out.append(CONTROL.get(line[pos + 1], line[pos + 1]))
                pos += 2
            else:
                out.append(line[pos])
                pos += 1
        return "".join(out), pos + 1
    end = pos
    while end < len(line) and line[end] not in ", ":
        end += 1
    raw = line[pos:end]
    if raw == "true":
        return True, end
    if raw == "false":
        return False, end
    if raw.endswith("i"):
        return int(raw[:-1]), end
    return float(raw), end


def parse(line: str) -> tuple[str, dict[str, str], dict[str, Any], int]:
    measurement, pos = _read_token(line, 0, ", ")
    tags: dict[str, str] = {}
    while line[pos] == ",":
        key, pos = _read_token(line, pos + 1, "=")
        value, pos = _read_token(line, pos + 1, ", ")
        tags[key] = value
    assert line[pos] == " ", f"expected space at {pos} in {line!r}"
    pos += 1
    fields: dict[str, Any] = {}
    while True:
        key, pos = _read_token(line, pos, "=")
        value, pos = _read_field_value(line, pos + 1)
        fields[key] = value
        if line[pos] == " ":
            break
        assert line[pos] == ",", f"expected comma at {pos} in {line!r}"
        pos += 1
    ts = int(line[pos + 1 :])
    return measurement, tags, fields, ts
