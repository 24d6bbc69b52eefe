from __future__ import annotations

import enum
import gc
import math
import resource
import weakref

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from acquisition import lineproto
from acquisition.errors import LineProtocolError
from acquisition.lineproto import (
    INT_RANGE_ERROR,
    MAX_INT,
    MAX_TIME_NS,
    MIN_INT,
    MIN_TIME_NS,
    TIME_RANGE_ERROR,
    LineEncoder,
    decode_line,
    encode_lines,
    encode_point,
)
from acquisition.point import FieldValue, Point
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


class _Level(enum.IntEnum):
    HIGH = 3


class _Count(int):
    pass


class _Ratio(float):
    pass


class _Name(str):
    pass


def test_subclasses_of_int_float_and_str_are_written_as_the_plain_values() -> None:
    """Guards: a field holding a subclass of int, float or str (an ``IntEnum`` member, numpy's
    ``float64``, a ``str`` subclass) is written as the plain value would be, on the first point
    of its series and on the next; integers at the 64-bit bounds themselves are kept, one past
    either bound is refused with the field and the value named."""
    fields = {
        "level": _Level.HIGH,
        "top": _Count(2**63 - 1),
        "bottom": _Count(-(2**63)),
        "ratio": _Ratio(0.5),
        "name": _Name('a "b"'),
    }
    # 2**63 - 1 = 9223372036854775807; -(2**63) = -9223372036854775808.
    line = (
        "m level=3i,top=9223372036854775807i,bottom=-9223372036854775808i,"
        'ratio=0.5,name="a \\"b\\"" 7\n'
    )
    enc = LineEncoder()
    assert enc.encode_many([Point("m", {}, fields, 7)] * 2) == line * 2
    for bad in ("9223372036854775808", "-9223372036854775809"):
        with pytest.raises(LineProtocolError) as err:
            enc.encode_many([Point("m", {}, {"top": _Count(int(bad))}, 7)])
        assert str(err.value) == f"field 'top' of 'm' is {bad}, outside the 64-bit integer range"


def test_cache_does_not_confuse_series_with_same_tag_values_in_other_keys() -> None:
    enc = LineEncoder()
    a = enc.encode(Point("m", {"a": "1"}, {"v": 1}, 0))
    b = enc.encode(Point("m", {"b": "1"}, {"v": 1}, 0))
    assert a != b


@pytest.mark.parametrize(
    "line",
    [
        "m",
        "m v=",
        "m v=1 abc",
        "m,t v=1 0",
        'm v="open 0',
        'm v="ab"c 0',  # text after a string's closing quote
        'm v=" 0',  # a lone quote: opened, never closed
        "m v=nan 0",
        "m v=1 2 3",
        "# c",
    ],
)
def test_decoder_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(LineProtocolError):
        decode_line(line)


def test_unsigned_fields_from_zero_up_and_no_lower() -> None:
    """Guards: an unsigned field of 0 (``0u``, a counter at its start) is read as 0, and a
    negative one is refused; the bound lies between -1 and 0."""
    assert decode_line("m v=0u 5").fields == {"v": 0}
    assert decode_line("m v=1u 5").fields == {"v": 1}
    with pytest.raises(LineProtocolError):
        decode_line("m v=-1u 5")


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
    time_ns=st.integers(min_value=MIN_TIME_NS, max_value=MAX_TIME_NS),
)


@given(points)
def test_compiled_formatters_write_what_the_general_path_writes(p: Point) -> None:
    first = LineEncoder({"host": "h"}).encode(p)
    enc = LineEncoder({"host": "h"})
    # The first sighting of a series takes the general path, the second compiles, the third
    # and later use the compiled formatter.
    assert [enc.encode(p) for _ in range(4)] == [first] * 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"v": math.nan, "n": 1}, "NaN and infinity"),
        ({"v": math.inf, "n": 1}, "NaN and infinity"),
        ({"v": 1.0, "n": MAX_INT + 1}, "64-bit integer range"),
        ({"v": 1, "n": 1}, None),  # another type: the general path writes it
        ({"v": 1.0}, None),  # fewer fields
        ({"v": 1.0, "x": 1}, None),  # another key
        ({"n": 2, "v": 0.5}, None),  # same keys, other order: same point
    ],
)
def test_points_that_differ_from_their_series_shape(
    fields: dict[str, float | int], message: str | None
) -> None:
    enc = LineEncoder()
    for _ in range(3):
        enc.encode(Point("m", {"t": "a"}, {"v": 0.5, "n": 2}, 7))
    odd = Point("m", {"t": "a"}, fields, 7)
    if message is None:
        assert decode_line(enc.encode(odd)) == Point("m", {"t": "a"}, fields, 7)
    else:
        with pytest.raises(LineProtocolError, match=message):
            enc.encode(odd)
    with pytest.raises(LineProtocolError, match="timestamp"):
        enc.encode(Point("m", {"t": "a"}, {"v": 0.5, "n": 2}, MAX_TIME_NS + 1))


@pytest.mark.parametrize(
    ("value", "text"), [(1, "ok=1i"), (0.0, "ok=0.0"), ("yes", 'ok="yes"'), (False, "ok=false")]
)
def test_a_bool_field_holding_another_type_later_is_written_as_that_type(
    value: FieldValue, text: str
) -> None:
    """Guards: once a series with a bool field has its compiled formatter (third point), a later
    point whose field holds an int, a float or a string is written as that value, not as
    ``true``/``false`` by its truth."""
    enc = LineEncoder()
    for _ in range(3):
        assert enc.encode(Point("m", {"t": "a"}, {"ok": True}, 7)) == "m,t=a ok=true 7"
    assert enc.encode(Point("m", {"t": "a"}, {"ok": value}, 7)) == f"m,t=a {text} 7"


def test_golden_procfs_like_batch() -> None:
    """A batch as the agent writes it, checked against text written out by hand."""
    enc = LineEncoder({"host": "node-1", "run": "r 1"})
    batch = [
        Point(
            "process",
            {"tree": "42", "scope": "combined"},
            {"cpu_utilization_ratio": 0.25, "rss_bytes": 1 << 20},
            1_700_000_000_000_000_000 + i,
        )
        for i in range(3)
    ] + [
        Point("memory", {}, {"used_bytes": 5, "available_ratio": 0.5}, 9),
        Point("nrg_run", {"run": "mine"}, {"event": 'say "hi"', "ok": True}, 10),
    ]
    assert enc.encode_many(batch) == (
        "process,host=node-1,run=r\\ 1,scope=combined,tree=42 cpu_utilization_ratio=0.25,rss_bytes=1048576i 1700000000000000000\n"
        "process,host=node-1,run=r\\ 1,scope=combined,tree=42 cpu_utilization_ratio=0.25,rss_bytes=1048576i 1700000000000000001\n"
        "process,host=node-1,run=r\\ 1,scope=combined,tree=42 cpu_utilization_ratio=0.25,rss_bytes=1048576i 1700000000000000002\n"
        "memory,host=node-1,run=r\\ 1 used_bytes=5i,available_ratio=0.5 9\n"
        'nrg_run,host=node-1,run=mine event="say \\"hi\\"",ok=true 10\n'
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


# A quoted string field holding a space or a comma, but no backslash, must not take the decoder's
# plain path (which splits on every space and comma): these examples always run.
@example(Point("m", {}, {"s": "a b"}, 1))
@example(Point("m", {}, {"s": "a,b"}, 1))
@example(Point("m", {"t": "x"}, {"s": "one, two three", "v": 2}, 3))
@example(Point("m", {}, {"s": " ", "n": 1.5}, 0))
@example(Point("m", {}, {"a": "k=v", "b": "=,= "}, 0))
@example(Point("m", {}, {"v": MAX_INT, "w": MIN_INT}, MAX_TIME_NS))
@given(points)
def test_decode_line_inverts_encode(p: Point) -> None:
    back = decode_line(encode_point(p))
    assert back.measurement == p.measurement
    assert back.tags == dict(p.tags)
    assert back.fields == dict(p.fields)
    assert back.time_ns == p.time_ns


def test_quoted_strings_with_separators_never_use_the_plain_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def plain(line: str, default_time_ns: int | None) -> Point:
        raise AssertionError(f"plain path taken for {line!r}")

    monkeypatch.setattr(lineproto, "_decode_plain", plain)
    assert decode_line('m s="a b,c" 1').fields == {"s": "a b,c"}


@pytest.mark.parametrize(
    ("series", "fields", "tags", "values"),
    [
        ("m,t=a", "v=1i", {"t": "a"}, {"v": 1}),  # the plain path
        (r"m,t=a\ b", "v=1i", {"t": "a b"}, {"v": 1}),  # an escaped space
        ("m,t=a", 's="x y"', {"t": "a"}, {"s": "x y"}),  # a quoted string with a space
    ],
)
def test_a_line_without_a_timestamp_takes_the_default_time(
    series: str, fields: str, tags: dict[str, str], values: dict[str, int | str]
) -> None:
    """Guards: a line of two sections (series, fields), escaped or quoted or not, is a point at
    ``default_time_ns``; the series alone, escaped or not, is an error, not a point."""
    assert decode_line(f"{series} {fields}", default_time_ns=42) == Point("m", tags, values, 42)
    with pytest.raises(LineProtocolError):
        decode_line(series, default_time_ns=42)


# --- integers and timestamps outside what line protocol stores ----------------------------------


@pytest.mark.parametrize("value", [MAX_INT + 1, MIN_INT - 1, 2**64 - 1, 75557863725914323415040])
def test_encoder_rejects_integers_outside_int64_naming_field_and_value(value: int) -> None:
    with pytest.raises(LineProtocolError) as err:
        LineEncoder().encode_many([Point("process", {}, {"shared_bytes": value}, 0)])
    assert str(err.value) == INT_RANGE_ERROR.format(
        key="shared_bytes", measurement="process", value=value
    )


def test_encoder_keeps_the_int64_bounds_themselves() -> None:
    line = encode_point(Point("m", {}, {"a": MAX_INT, "b": MIN_INT}, MIN_TIME_NS))
    assert line == f"m a={MAX_INT}i,b={MIN_INT}i {MIN_TIME_NS}"


@pytest.mark.parametrize("t", [MAX_TIME_NS + 1, MIN_TIME_NS - 1, 2**63, 99999999999999999999999])
def test_encoder_rejects_timestamps_outside_influxdb_range(t: int) -> None:
    with pytest.raises(LineProtocolError) as err:
        encode_point(Point("nrg_big", {}, {"v": 1}, t))
    assert str(err.value) == TIME_RANGE_ERROR.format(measurement="nrg_big", value=t)


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("nrg_big v=99999999999999999999i 1", 99999999999999999999),
        (f"nrg_big v={MAX_INT + 1}i 1", MAX_INT + 1),
        (f"nrg_big v={MIN_INT - 1}i 1", MIN_INT - 1),
        (f"nrg_big v={MAX_INT + 1}u 1", MAX_INT + 1),
        ("nrg_big v=-1u 1", -1),
        (r"nrg_big,t=a\ b v=99999999999999999999i 1", 99999999999999999999),  # escaped path
    ],
)
def test_decoder_rejects_integers_outside_int64(line: str, value: int) -> None:
    with pytest.raises(LineProtocolError) as err:
        decode_line(line)
    assert str(err.value) == INT_RANGE_ERROR.format(key="v", measurement="nrg_big", value=value)


@pytest.mark.parametrize("t", [99999999999999999999999, MAX_TIME_NS + 1, MIN_TIME_NS - 1])
@pytest.mark.parametrize("fields", ["v=1i", 'v="a b"'])
def test_decoder_rejects_timestamps_outside_influxdb_range(t: int, fields: str) -> None:
    with pytest.raises(LineProtocolError) as err:
        decode_line(f"nrg_big {fields} {t}")
    assert str(err.value) == TIME_RANGE_ERROR.format(measurement="nrg_big", value=t)


def test_decoder_keeps_the_bounds_themselves() -> None:
    p = decode_line(f"m a={MAX_INT}i,b={MIN_INT}i,c={MAX_INT}u {MAX_TIME_NS}")
    assert p.fields == {"a": MAX_INT, "b": MIN_INT, "c": MAX_INT}
    assert p.time_ns == MAX_TIME_NS


@pytest.mark.parametrize("line", ["m v=1_000i 1", "m v=+5i 1", "m v=1i 1_0", "m v=١i 1"])
def test_decoder_takes_only_plain_digits_for_integers(line: str) -> None:
    with pytest.raises(LineProtocolError, match="bad"):
        decode_line(line)


# --- the series cache ------------------------------------------------------------------------------


def _series_point(i: int) -> Point:
    return Point("process", {"pid": str(i), "scope": "self"}, {"rss_bytes": i}, i)


class _Tags(dict[str, str]):
    """A tags dict that can be watched with a weak reference."""


def test_tags_dicts_of_series_gone_are_not_kept_alive() -> None:
    """Guards: the encoder's index of tags dicts by identity keeps at most ``series_cache`` of
    them: 50 series, each with its own tags dict in its own batch and never seen again, leave
    at most 8 of their dicts alive with ``series_cache=8`` (a collector creating fresh dicts
    for a long run keeps a flat memory)."""
    enc = LineEncoder(series_cache=8)
    alive: list[weakref.ref[_Tags]] = []
    for i in range(50):
        tags = _Tags(pid=str(i))
        alive.append(weakref.ref(tags))
        assert enc.encode_many([Point("process", tags, {"v": i}, i)]) == (
            f"process,pid={i} v={i}i {i}\n"
        )
        del tags
    gc.collect()
    assert sum(ref() is not None for ref in alive) <= 8


def test_series_cache_is_bounded_and_keeps_the_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enc = LineEncoder({"host": "h"}, series_cache=100)
    built: list[str] = []
    real = enc._prefix

    def counting(measurement: str, tags: dict[str, str]) -> str:
        built.append(tags.get("pid", ""))
        return real(measurement, tags)

    monkeypatch.setattr(enc, "_prefix", counting)
    hot = Point("cpu", {"pid": "hot"}, {"v": 1}, 0)
    for i in range(1000):
        assert enc.encode_many([hot, _series_point(i)]) == (
            f"cpu,host=h,pid=hot v=1i 0\nprocess,host=h,pid={i},scope=self rss_bytes={i}i {i}\n"
        )
    assert enc.cached_series == 100
    assert built.count("hot") == 1  # used on every batch: never evicted
    assert len(built) == 1001
    enc.encode_many([_series_point(999), _series_point(0)])
    assert built[-1] == "0" and len(built) == 1002  # 999 was cached, 0 long gone


def test_memory_stays_flat_over_many_distinct_series() -> None:
    """200,000 distinct series, twelve times the cache: the cache stays at its size and the
    process's peak memory does not grow once it is full."""
    enc = LineEncoder({"host": "h", "run": "r"})
    batch = 10_000
    peaks = []
    for start in range(0, 200_000, batch):
        enc.encode_many([_series_point(i) for i in range(start, start + batch)])
        if start in (40_000, 190_000):
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    assert enc.cached_series == 16_384  # the documented cache size
    # Peak RSS from 40k to 200k distinct series: the cache is full at both points. An unbounded
    # cache would hold 150k more prefixes (88 MB measured).
    assert peaks[1] - peaks[0] < 16 * 2**20, peaks


def test_field_shapes_kept_are_bounded() -> None:
    """A stream whose field names never repeat gets the general path, not ever more code: at
    most 1,024 compiled shapes are kept (here 1,524 come)."""
    enc = LineEncoder()
    for i in range(1_524):
        p = Point("m", {"t": str(i)}, {f"f{i}": 1.0}, i)
        line = f"m,t={i} f{i}=1.0 {i}\n"
        assert enc.encode_many([p, p, p]) == line * 3
    assert len(enc._shapes) == 1_024


def test_field_keys_kept_are_bounded() -> None:
    """Escaped field keys are remembered up to 4,096 of them (every collector's together are a
    few hundred); keys past that are escaped anew each time, the same text, memory bounded."""
    enc = LineEncoder()
    points = [Point("m", {"t": str(i)}, {f"k {i}": 1}, i) for i in range(4_200)]
    text = enc.encode_many(points)
    assert text.endswith("m,t=4199 k\\ 4199=1i 4199\n") and text.count("\n") == 4_200
    assert len(enc._field_keys) == 4_096


def test_a_kept_tags_dict_finds_its_series_by_identity() -> None:
    """A collector that keeps one tags dict per series (each collector here does) finds its
    series by the dict's identity: the series cache, whose key is built from every tag, is
    asked once per series, never again; a dict changed in place is seen as its new series."""
    enc = LineEncoder()
    a, b = {"gpu": "0"}, {"gpu": "1"}
    points = [Point("gpu", t, {"w": 1.0}, i) for i, t in enumerate([a, b, a, b])]
    text = "gpu,gpu=0 w=1.0 0\ngpu,gpu=1 w=1.0 1\ngpu,gpu=0 w=1.0 2\ngpu,gpu=1 w=1.0 3\n"
    assert enc.encode_many(points) == text
    assert enc.encode_many(points) == text
    info = enc._series.cache_info()
    assert (info.hits, info.misses) == (0, 2)
    a["gpu"] = "2"
    assert enc.encode_many(points[:1]) == "gpu,gpu=2 w=1.0 0\n"
    assert enc._series.cache_info().misses == 3


def test_on_error_keeps_the_rest_of_the_batch() -> None:
    good = [Point("process", {"pid": "1"}, {"rss_bytes": 5}, i) for i in range(3)]
    bad = [
        Point("process", {"pid": "1"}, {"rss_bytes": 2**64 - 1}, 3),  # after compiling
        Point("process", {"pid": "2"}, {"rss_bytes": 1.0 * math.inf}, 4),  # a new series
        Point("process", {"pid": "1"}, {"rss_bytes": 5}, MAX_TIME_NS + 1),
        Point("", {}, {"v": 1}, 5),
    ]
    refused: list[tuple[Point, str]] = []
    text = LineEncoder().encode_many(
        [*good, *bad, good[0]], on_error=lambda p, e: refused.append((p, str(e)))
    )
    assert text == "".join(f"process,pid=1 rss_bytes=5i {i}\n" for i in (0, 1, 2, 0))
    assert [p for p, _ in refused] == bad
    assert refused[0][1] == INT_RANGE_ERROR.format(
        key="rss_bytes", measurement="process", value=2**64 - 1
    )
    with pytest.raises(LineProtocolError):
        LineEncoder().encode_many([*good, *bad])


# --- runs of one series in a batch -----------------------------------------------------------------


def test_one_tag_dict_under_two_measurements_keeps_both_names() -> None:
    tags = {"cpu": "total"}
    batch = [Point(m, tags, {"v": i}, i) for i, m in enumerate(["cpu", "cpu", "mem", "mem", "cpu"])]
    assert LineEncoder().encode_many(batch) == (
        "cpu,cpu=total v=0i 0\ncpu,cpu=total v=1i 1\nmem,cpu=total v=2i 2\n"
        "mem,cpu=total v=3i 3\ncpu,cpu=total v=4i 4\n"
    )


_TAG_POOL = [{}, {"t": "a"}, {"t": "b"}, {"t": "a", "u": "x y"}, {"u": "x y", "t": "a"}, {"t": ""}]
batch_items = st.lists(
    st.tuples(
        st.sampled_from(["m", "n"]),
        st.integers(min_value=0, max_value=len(_TAG_POOL) - 1),
        st.booleans(),  # the pool's dict itself, or an equal fresh copy
        st.dictionaries(st.sampled_from(["v", "w", "x y"]), field_values, min_size=1, max_size=3),
        st.integers(min_value=MIN_TIME_NS, max_value=MAX_TIME_NS),
    ),
    max_size=30,
)


@given(batch_items)
@example(
    [
        ("m", 3, False, {"w": False, "v": 0, "x y": 0}, 0),
        ("m", 4, False, {"x y": 0, "v": 0, "w": False}, 0),
    ]
)
@example([("m", 0, False, {"v": "\x0c"}, 0)])  # a form feed is not a line break
def test_a_batch_writes_what_its_points_write_one_by_one(
    items: list[tuple[str, int, bool, dict[str, float | int | bool | str], int]],
) -> None:
    """Runs of one series (shared or equal tag dicts) take a shortcut inside a batch; one point
    per call never does. Both encoders see the same points in the same order and write the same
    points, each field with its type; the text differs at most in field order (a point holding
    its series' previous fields in another order gets them in that order)."""
    batch = [
        Point(m, _TAG_POOL[i] if shared else dict(_TAG_POOL[i]), fields, t)
        for m, i, shared, fields, t in items
    ]
    one_by_one = LineEncoder({"host": "h"})
    batched = LineEncoder({"host": "h"}).encode_many(batch).split("\n")
    single = "".join(
        one_by_one.encode_many([Point(p.measurement, dict(p.tags), p.fields, p.time_ns)])
        for p in batch
    ).split("\n")

    def typed(line: str) -> tuple[object, ...]:
        if not line:  # after the last newline
            return ()
        measurement, tags, fields, time_ns = lp_reference.parse(line)
        return measurement, tags, {k: (type(v), v) for k, v in fields.items()}, time_ns

    assert [typed(line) for line in batched] == [typed(line) for line in single]
    assert [len(line) for line in batched] == [len(line) for line in single]


def test_a_tags_dict_changed_in_place_between_batches_is_noticed() -> None:
    tags = {"pid": "1"}
    enc = LineEncoder()
    for _ in range(3):
        assert enc.encode_many([Point("m", tags, {"v": 1}, 0)]) == "m,pid=1 v=1i 0\n"
    tags["pid"] = "2"
    assert enc.encode_many([Point("m", tags, {"v": 1}, 0)]) == "m,pid=2 v=1i 0\n"
    assert enc.encode_many([Point("n", tags, {"v": 1}, 0)]) == "n,pid=2 v=1i 0\n"


@given(st.lists(st.tuples(batch_items, st.sampled_from([None, "a", "b", "x y", ""])), max_size=6))
def test_batches_over_kept_tag_dicts_write_what_fresh_dicts_write(
    batches: list[
        tuple[list[tuple[str, int, bool, dict[str, float | int | bool | str], int]], str | None]
    ],
) -> None:
    """Tag dicts reused across batches (as collectors keep them), some changed in place between
    batches: the encoder writes what it writes for fresh copies of them, one point per call."""
    pool = [dict(t) for t in _TAG_POOL]
    enc = LineEncoder({"host": "h"}, series_cache=4)
    reference = LineEncoder({"host": "h"})
    for items, change in batches:
        # Fields in one order: a series' formatter writes a later point's fields in the order
        # of the point it was compiled for, and the two encoders compile at different times.
        batch = [Point(m, pool[i], dict(sorted(f.items())), t) for m, i, _, f, t in items]
        expected = "".join(
            reference.encode_many([Point(p.measurement, dict(p.tags), p.fields, p.time_ns)])
            for p in batch
        )
        assert enc.encode_many(batch) == expected
        if change is not None:
            pool[1]["t"] = change
            pool[3]["u"] = change


def test_a_series_whose_fields_change_shape_keeps_a_formatter_for_each_shape() -> None:
    """A field present on some ticks only (a ratio that needs a busy machine) gives a series two
    shapes: each is written by its own compiled formatter, as the general path writes it."""
    enc = LineEncoder({"host": "h"})
    general_calls: list[str] = []
    general = enc._general

    def counting(prefix: str, point: Point) -> str:
        general_calls.append(prefix)
        return general(prefix, point)

    enc._general = counting  # type: ignore[method-assign]
    busy = {"cpu_seconds": 1.5, "busy_share_ratio": 0.25, "threads": 3}
    idle = {"cpu_seconds": 1.5, "threads": 3}
    shapes = [busy, busy, idle, busy, idle, idle, busy, idle, busy]
    batch = [Point("process", {"scope": "main"}, f, 1_000 + i) for i, f in enumerate(shapes)]
    lines = [enc.encode(p) for p in batch]
    assert lines == [LineEncoder({"host": "h"}).encode(p) for p in batch]
    assert len(general_calls) == 2  # the series' first sighting, then its second (it compiles)
    general_calls.clear()
    assert enc.encode_many(batch) == "".join(line + "\n" for line in lines)
    assert general_calls == []


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("ab", "expected 'series fields [timestamp]', got 1 parts"),
        ("ab v=1 1 2", "expected 'series fields [timestamp]', got 4 parts"),
        ("ab,host v=1 1", "tag 'host' is not key=value"),
        ("ab,=x v=1 1", "tag '=x' is not key=value"),
        ("ab,host= v=1 1", "tag 'host' has an empty value"),
        ("ab v 1", "field 'v' is not key=value"),
        ("ab =1 1", "field '=1' is not key=value"),
        ("ab v= 1", "field 'v' has an empty value"),
        ("ab v=1 x", "bad timestamp 'x'"),
    ],
)
def test_a_malformed_line_gets_the_same_error_with_or_without_escapes(
    line: str, error: str
) -> None:
    """Guards: reading a file, a malformed line is named by the same error whether or not it
    has an escape (lines with one take another parser): the measurement ``ab`` and ``a\\ b``
    (an escaped space) give the same message, word for word."""
    for measurement in ("ab", "a\\ b"):
        with pytest.raises(LineProtocolError) as caught:
            decode_line(line.replace("ab", measurement, 1))
        assert str(caught.value) == error


def test_fresh_tags_dicts_are_indexed_by_identity_1024_times_then_16_a_batch() -> None:
    """Guards the bound on the by-identity index's work for a collector that builds a fresh tags
    dict for every point (such dicts never hit): 1,024 insertions at first, then 16 per batch
    as a probe, so a batch of 2,000 such points indexes 1,024 and the next one 16 more."""
    enc = lineproto.LineEncoder()

    def fresh(first: int, n: int) -> list[Point]:
        return [Point("m", {"host": f"h{i}"}, {"v": 1}, 0) for i in range(first, first + n)]

    enc.encode_many(fresh(0, 2000))
    assert len(enc._by_id) == 1024
    enc.encode_many(fresh(2000, 100))
    assert len(enc._by_id) == 1024 + 16
