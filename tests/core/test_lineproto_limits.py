"""Line protocol's integer limits, from InfluxDB's own definition, not the encoder's constants:
integer fields are signed 64-bit, so the largest is 2**63 − 1 = 9223372036854775807 and the
smallest −2**63 = −9223372036854775808."""

from __future__ import annotations

import pytest

from acquisition.errors import LineProtocolError
from acquisition.lineproto import LineEncoder, encode_point
from acquisition.point import Point

INT64_MAX = 9_223_372_036_854_775_807  # 2**63 − 1, written out
INT64_MIN = -9_223_372_036_854_775_808  # −2**63


def test_the_int64_bounds_are_the_literal_ones() -> None:
    """Guards: the encoder's integer range is exactly int64's (a bound moved by one, e.g.
    2**63 for the maximum, would write a field InfluxDB rejects)."""
    assert INT64_MAX == 2**63 - 1 and INT64_MIN == -(2**63)
    line = encode_point(Point("m", {}, {"a": INT64_MAX, "b": INT64_MIN}, 1))
    assert line == "m a=9223372036854775807i,b=-9223372036854775808i 1"
    for outside in (INT64_MAX + 1, INT64_MIN - 1):
        with pytest.raises(LineProtocolError):
            LineEncoder().encode_many([Point("m", {}, {"a": outside}, 1)])


def test_the_time_bounds_are_influxdbs_literal_ones() -> None:
    """Guards: InfluxDB stores times from −9223372036854775806 to 9223372036854775806 ns
    (int64's range less the two values it reserves at each end): the bounds themselves are
    written, one further is refused."""
    latest, earliest = 9_223_372_036_854_775_806, -9_223_372_036_854_775_806
    assert encode_point(Point("m", {}, {"v": 1}, latest)) == f"m v=1i {latest}"
    assert encode_point(Point("m", {}, {"v": 1}, earliest)) == f"m v=1i {earliest}"
    for outside in (latest + 1, earliest - 1):
        with pytest.raises(LineProtocolError):
            encode_point(Point("m", {}, {"v": 1}, outside))
