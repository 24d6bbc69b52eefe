"""Property tests: no input crashes the parsers; every layout round-trips through a frame line."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from acquisition.point import Point
from collectors.emonpi import (
    BUILTIN_LAYOUTS,
    EmonPiCollector,
    EmonPiConfig,
    JeeFrame,
    Layout,
    LayoutTable,
    LineBuffer,
    LineError,
    ValueLine,
    encode_frame,
    parse_line,
)
from collectors.emonpi.sim import uart_misread

from .conftest import StepClock

_RANGES = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "h": (-(2**15), 2**15 - 1),
    "H": (0, 2**16 - 1),
    "i": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "l": (-(2**31), 2**31 - 1),
    "L": (0, 2**32 - 1),
}
_ALPHABET = st.sampled_from(
    [b"OK", b" ", b"\t", b"0", b"5", b"255", b"256", b"(-", b")", b":", b",", b"{", b"}", b'"',
     b"P1", b"MSG", b"?", b"\x01", b"\xff", b"\r", b"-", b".", b"e", b"[", b"|", b"\x00"]
)  # fmt: skip


def _codes(layout: Layout) -> list[str]:
    out: list[str] = []
    count = ""
    for c in layout.struct[1:]:
        if c.isdigit():
            count += c
        else:
            out.extend(c * int(count or "1"))
            count = ""
    return out


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_line_error(raw: bytes) -> None:
    try:
        result = parse_line(raw)
    except LineError as exc:
        assert exc.reason
    else:
        assert isinstance(result, JeeFrame | ValueLine)


@settings(max_examples=500)
@given(st.lists(_ALPHABET, max_size=40).map(b"".join))
def test_near_grammar_bytes_parse_or_raise_line_error(raw: bytes) -> None:
    try:
        result = parse_line(raw)
    except LineError:
        return
    if isinstance(result, JeeFrame):
        assert 0 <= result.node <= 255 and len(result.payload) <= 66
    else:
        assert result.values


_TOKENS = st.sampled_from(
    ["OK", "?", "5", "0", "255", "256", "007", "(-0)", "(-44)", "(44)", "(x)", "()", "-1", "a", ""]
)


@settings(max_examples=500)
@given(
    st.sampled_from(["OK", "OK", "?", "ok"]),
    st.lists(_TOKENS, max_size=6) | st.lists(_TOKENS, min_size=60, max_size=70),
    st.sampled_from([" ", "  ", "\t", " \t"]),
)
def test_token_sequences_parse_or_raise_line_error(head: str, tokens: list[str], sep: str) -> None:
    line = sep.join([head, *tokens])
    try:
        result = parse_line(line.encode())
    except LineError:
        return
    assert isinstance(result, JeeFrame)
    assert result.node == int(line.split()[1])
    assert len(result.payload) == len([t for t in line.split()[2:] if not t.startswith("(")])


@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_line_buffer_chunking_does_not_change_lines(data: bytes, cuts: list[int]) -> None:
    whole = LineBuffer(max_line=64)
    expected = whole.feed(data)
    pieces = LineBuffer(max_line=64)
    got: list[bytes] = []
    last = 0
    for cut in sorted(min(c, len(data)) for c in cuts):
        got += pieces.feed(data[last:cut])
        last = cut
    got += pieces.feed(data[last:])
    assert got == expected
    assert pieces.overlong == whole.overlong
    assert all(len(line) <= 64 and b"\n" not in line for line in got)


@settings(max_examples=60)
@given(st.binary(max_size=2000))
def test_collector_survives_any_stream(data: bytes) -> None:
    collector = EmonPiCollector(
        EmonPiConfig(max_line=128), None, wall_clock=StepClock(), mono_clock=StepClock(0)
    )
    points: list[Point] = []
    buf = LineBuffer(128)
    for line in buf.feed(data):
        collector.handle_line(line, points.append)
    stats = collector.stats()
    assert stats["points"] == len(points)
    assert stats["lines"] == data.count(b"\n") - buf.overlong


@st.composite
def layout_and_raw(draw: st.DrawFn) -> tuple[Layout, int, list[int | float]]:
    layout = draw(st.sampled_from(BUILTIN_LAYOUTS))
    node = draw(st.sampled_from(sorted(layout.nodes)))
    raws: list[int | float] = []
    for code, spec in zip(_codes(layout), layout.fields, strict=True):
        lo, hi = _RANGES[code]
        options = st.integers(lo, hi)
        if spec.missing:
            options = st.one_of(options, st.sampled_from(sorted(spec.missing)))
        raws.append(draw(options))
    return layout, node, raws


@given(layout_and_raw(), st.one_of(st.none(), st.integers(-120, 0)))
def test_every_layout_round_trips_through_a_frame_line(
    case: tuple[Layout, int, list[int | float]], rssi: int | None
) -> None:
    layout, node, raws = case
    payload = struct.pack(layout.struct, *raws)
    line = encode_frame(node, payload, rssi)
    frame = parse_line(line.encode() + b"\r\n")
    assert frame == JeeFrame(node, payload, rssi)
    assert LayoutTable(BUILTIN_LAYOUTS).find(node, len(payload)) is layout
    decoded = layout.decode(frame.payload)
    expected = {}
    for spec, raw in zip(layout.fields, raws, strict=True):
        if raw in spec.missing:
            continue
        if spec.unit == "count":
            expected[spec.key] = raw
        else:
            inverse = round(1 / spec.scale)
            expected[spec.key] = raw / inverse if spec.scale < 1 else float(raw)
    assert decoded == expected
    for key, value in decoded.items():
        assert type(value) is (int if key.endswith("_count") else float)
    if not any(raw in spec.missing for raw, spec in zip(raws, layout.fields, strict=True)):
        # and back: the physical values encode to the same payload
        assert layout.encode({k: float(v) for k, v in decoded.items()}) == payload


@pytest.mark.parametrize("bauds", [(115200, 38400), (38400, 115200), (115200, 9600)])
def test_wrong_baud_rate_never_decodes_a_frame(bauds: tuple[int, int]) -> None:
    line = b"OK 5 96 1 211 255 51 1 73 94 215 0 0 0 0 0 0 0 0 0 0 0 210 4 0 0 (-0)\r\n"
    garbled = uart_misread(line * 4, *bauds)
    assert garbled != line * 4
    for piece in garbled.split(b"\n"):
        try:
            parse_line(piece)
        except LineError:
            continue
        raise AssertionError(f"decoded a frame from misread bytes {piece!r}")


_layout_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        st.text(max_size=12),
        st.sampled_from(["<4h", "<10hL", "h", "999999999h", "<", "f", "watts", "power1", "x"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "node",
                    "nodes",
                    "struct",
                    "names",
                    "units",
                    "scales",
                    "missing",
                    "averaged",
                    "other",
                ]
            ),
            _layout_values,
            max_size=9,
        ),
        max_size=3,
    )
)
@example([{"name": "a", "node": 5, "struct": "<h", "names": ["a"], "units": ["w"],
           "missing": {"a": None}}])  # fmt: skip
@example([{"name": "a", "node": True, "struct": "<h", "names": ["a"], "units": ["w"]}])
def test_parse_layouts_raises_only_value_error(tables: list[dict[str, object]]) -> None:
    from collectors.emonpi import parse_layouts

    try:
        layouts = parse_layouts(tables)
    except ValueError:
        return
    assert all(not isinstance(t.get("node"), bool) for t in tables)
    for layout in layouts:
        assert layout.size <= 66
