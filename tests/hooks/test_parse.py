"""Pure line handling of the hooks listener: parse_hook_line and split_lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acquisition.lineproto import MAX_TIME_NS
from acquisition.point import Point
from collectors.hooks import (
    JOB_MEASUREMENTS,
    HookLineRejected,
    _LineBuffer,
    job_rank,
    parse_hook_line,
    split_lines,
)


def parse(raw: bytes, max_bytes: int = 1000) -> Point | None:
    return parse_hook_line(raw, host="h1", now_ns=42, max_bytes=max_bytes)


def reason(raw: bytes, max_bytes: int = 1000) -> str:
    with pytest.raises(HookLineRejected) as info:
        parse(raw, max_bytes)
    return info.value.reason


def test_nrg_line_gets_host_which_overrides_a_sent_one() -> None:
    point = parse(b"nrg_module,host=spoof,module=fc1,phase=forward calls=2i,step=0i 99")
    assert point == Point(
        "nrg_module",
        {"host": "h1", "module": "fc1", "phase": "forward"},
        {"calls": 2, "step": 0},
        99,
    )


def test_line_without_timestamp_gets_arrival_time() -> None:
    point = parse(b'nrg_run,run=r event="start"')
    assert point is not None and point.time_ns == 42


def test_blank_and_comment_lines_are_skipped() -> None:
    assert parse(b"") is None
    assert parse(b"   \r") is None
    assert parse(b"# nrg fallback file") is None


def test_reject_reasons() -> None:
    assert reason(b"cpu usage_ratio=0.5 1") == "measurement"
    assert reason(b"nrgstep x=1 1") == "measurement"
    assert reason(b"nrg_collect,plugin=file lost_points=0i 1") == "measurement"
    assert reason(b"nrg_energy energy_joules=1.0 1") == "measurement"
    assert reason(b"nrg_step x=9223372036854775808i 1") == "range"
    assert reason(b"nrg_step x=1i 9223372036854775808") == "range"
    assert reason(b"nrg_step x=1 " + b"1" * 100, max_bytes=50) == "too_long"
    assert reason(b"nrg_step x=\xc3 1") == "encoding"
    assert reason(b"nrg_step x= 1") == "syntax"
    assert reason(b"nrg_step 1") == "syntax"
    assert reason(b'nrg_step x="open 1') == "syntax"


def feed(chunks: list[bytes], max_bytes: int) -> tuple[list[bytes | None], bytes]:
    buf = _LineBuffer()
    out: list[bytes | None] = []
    for chunk in chunks:
        out.extend(split_lines(buf, chunk, max_bytes))
    return out, bytes(buf.data)


def test_split_lines_across_chunks() -> None:
    assert feed([b"a=1\nb", b"=2\n", b"c=3"], 10) == ([b"a=1", b"b=2"], b"c=3")


def test_overlong_line_is_reported_once_and_skipped_to_its_newline() -> None:
    lines, rest = feed([b"ok\n" + b"x" * 8, b"x" * 8, b"x" * 8, b"xx\nnext\n"], 10)
    assert lines == [b"ok", None, b"next"]
    assert rest == b""
    # Exactly max_bytes is allowed; one more is not, also when whole in one chunk.
    assert feed([b"y" * 10 + b"\n" + b"z" * 11 + b"\n"], 10) == ([b"y" * 10, None], b"")


@given(
    st.lists(st.binary(min_size=0, max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    st.integers(min_value=1, max_value=40),
)
def test_split_lines_matches_split_for_any_chunking(lines: list[bytes], cut: int) -> None:
    payload = b"".join(line + b"\n" for line in lines)
    chunks = [payload[i : i + cut] for i in range(0, len(payload), cut)]
    got, rest = feed(chunks, 20)
    assert got == [line if len(line) <= 20 else None for line in lines]
    assert rest == b""


def test_int64_bounds_are_inclusive() -> None:
    # Integers span int64; timestamps InfluxDB's range, two nanoseconds short of it at each end.
    top = parse(b"nrg_step x=9223372036854775807i,y=-9223372036854775808i 9223372036854775806")
    assert top is not None
    assert top.fields == {"x": 2**63 - 1, "y": -(2**63)}
    assert top.time_ns == MAX_TIME_NS == 2**63 - 2


def test_accepted_measurements_are_what_the_training_library_writes() -> None:
    assert sorted(JOB_MEASUREMENTS) == [
        "nrg_model",
        "nrg_module",
        "nrg_plan",
        "nrg_run",
        "nrg_step",
    ]
    for m in sorted(JOB_MEASUREMENTS):
        assert parse(m.encode() + b" x=1i 5") is not None


def test_job_tags_pid_overrides_rank_fills_in() -> None:
    tags = {"pid": "77", "rank": "2"}
    got = parse_hook_line(b"nrg_step,pid=1 x=1i 5", host="h", now_ns=0, max_bytes=99, job_tags=tags)
    assert got is not None and got.tags == {"host": "h", "pid": "77", "rank": "2"}
    got = parse_hook_line(
        b"nrg_step,rank=0 x=1i 5", host="h", now_ns=0, max_bytes=99, job_tags=tags
    )
    assert got is not None and got.tags == {"host": "h", "pid": "77", "rank": "0"}
    # Without job tags a sent pid tag is dropped: only the listener says which process sent.
    got = parse(b"nrg_step,pid=1 x=1i 5")
    assert got is not None and "pid" not in got.tags


def test_job_rank_from_environ() -> None:
    assert job_rank(b"HOME=/root\0RANK=4\0LOCAL_RANK=1\0") == "4"
    assert job_rank(b"LOCAL_RANK=1\0") == "1"
    assert job_rank(b"RANK=x\0LOCAL_RANK=2\0") == "2"
    assert job_rank(b"RANK=\0") is None
    assert job_rank(b"MY_RANK=3\0") is None
    assert job_rank(b"") is None


@given(st.binary(max_size=200))
def test_parse_hook_line_raises_only_hook_line_rejected(raw: bytes) -> None:
    try:
        point = parse_hook_line(raw, host="h", now_ns=1, max_bytes=150)
    except HookLineRejected as exc:
        assert exc.reason in ("too_long", "encoding", "syntax", "range", "measurement")
        return
    if point is not None:
        assert point.measurement in JOB_MEASUREMENTS
        assert -(2**63) <= point.time_ns < 2**63


@given(st.binary(max_size=300))
def test_job_rank_never_raises(raw: bytes) -> None:
    rank = job_rank(raw)
    assert rank is None or rank.isdigit()
