from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition.errors import LineProtocolError
from acquisition.lineproto import LineEncoder, decode_line, encode_lines, encode_point
from acquisition.point import Point
from tests.core import lp_reference


def test_simple_point_is_exact() -> None:
    p = Point("cpu", {"cpu": "total", "host": "a"}, {"utilization_ratio": 0.25, "n": 3}, 1700)
    assert encode_point(p) == "cpu,cpu=total,host=a utilization_ratio=0.25,n=3i 1700"


def test_every_escaping_rule() -> None:
    p = Point(
        "my measurement,x",
        {"tag key": "v=1,2 3", "b\\": "back\\slash"},
        {"field,key=": 'say "hi" \\ now', "flag": False, "on": True},
        1,
    )
    line = encode_point(p)
    assert line == (
        "my\\ measurement\\,x,b\\\\=back\\\\slash,tag\\ key=v\\=1\\,2\\ 3 "
        'field\\,key\\=="say \\"hi\\" \\\\ now",flag=false,on=true 1'
    )


def test_newlines_and_tabs_are_escaped_so_one_point_is_one_line() -> None:
    p = Point("m\n", {"t": "a\nb\tc\r"}, {"s": "x\ny"}, 5)
    line = encode_point(p)
    assert "\n" not in line and "\t" not in line and "\r" not in line
    assert line == 'm\\n,t=a\\nb\\tc\\r s="x\\ny" 5'
    assert decode_line(line) == p


def test_tags_are_sorted_and_empty_tag_values_left_out() -> None:
    p = Point("m", {"z": "1", "a": "2", "empty": ""}, {"v": 1.0}, 0)
    assert encode_point(p) == "m,a=2,z=1 v=1.0 0"


def test_default_tags_are_added_and_point_tags_win() -> None:
    enc = LineEncoder({"host": "h1", "run": "r1"})
    assert enc.encode(Point("m", {"run": "mine"}, {"v": 1}, 0)) == "m,host=h1,run=mine v=1i 0"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_rejected(bad: float) -> None:
    with pytest.raises(LineProtocolError, match="NaN and infinity"):
        encode_point(Point("m", {}, {"v": bad}, 0))


@pytest.mark.parametrize(
    ("point", "message"),
    [
        (Point("m", {}, {}, 0), "no fields"),
        (Point("", {}, {"v": 1}, 0), "measurement name is empty"),
        (Point("#m", {}, {"v": 1}, 0), "comment line"),
        (Point("m", {"": "x"}, {"v": 1}, 0), "tag key is empty"),
        (Point("m", {}, {"": 1}, 0), "field key is empty"),
        (Point("m", {}, {"v": [1]}, 0), "unsupported type list"),  # type: ignore[dict-item]
        (Point("m", {}, {"v": 1}, 1.5), "timestamp"),  # type: ignore[arg-type]
    ],
)
def test_invalid_points_get_clear_errors(point: Point, message: str) -> None:
    with pytest.raises(LineProtocolError, match=message):
        encode_point(point)


def test_encode_lines_terminates_every_line() -> None:
    pts = [Point("m", {}, {"v": i}, i) for i in range(3)]
    assert encode_lines(pts) == "m v=0i 0\nm v=1i 1\nm v=2i 2\n"


def test_cache_does_not_confuse_series_with_same_tag_values_in_other_keys() -> None:
    enc = LineEncoder()
    a = enc.encode(Point("m", {"a": "1"}, {"v": 1}, 0))
    b = enc.encode(Point("m", {"b": "1"}, {"v": 1}, 0))
    assert a != b


@pytest.mark.parametrize(
    "line",
    ["m", "m v=", "m v=1 abc", "m,t v=1 0", 'm v="open 0', "m v=nan 0", "m v=1 2 3", "# c"],
)
def test_decoder_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(LineProtocolError):
        decode_line(line)


text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
)
names = text.filter(lambda s: not s.startswith("#"))
field_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
)
points = st.builds(
    Point,
    measurement=names,
    tags=st.dictionaries(text, text, max_size=4),
    fields=st.dictionaries(text, field_values, min_size=1, max_size=4),
    time_ns=st.integers(min_value=0, max_value=2**63 - 1),
)


@given(points)
def test_independent_reader_recovers_every_point(p: Point) -> None:
    line = encode_point(p)
    assert "\n" not in line
    measurement, tags, fields, ts = lp_reference.parse(line)
    assert measurement == p.measurement
    assert tags == dict(p.tags)
    assert ts == p.time_ns
    assert fields.keys() == p.fields.keys()
    for k, v in p.fields.items():
        assert type(fields[k]) is type(v) and fields[k] == v


@given(points)
def test_decode_line_inverts_encode(p: Point) -> None:
    back = decode_line(encode_point(p))
    assert back.measurement == p.measurement
    assert back.tags == dict(p.tags)
    assert back.fields == dict(p.fields)
    assert back.time_ns == p.time_ns
