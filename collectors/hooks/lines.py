"""Pure handling of the lines a training job sends: framing, parsing, checks, job tags.

:func:`parse_hook_line` raises only :class:`HookLineRejected` (a ``ValueError``), whose ``reason``
is one of :data:`REJECT_REASONS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from acquisition.errors import LineProtocolError, LineProtocolRangeError
from acquisition.lineproto import decode_line
from acquisition.point import Point

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "JOB_MEASUREMENTS",
    "MSG_FIELD_RANGE",
    "MSG_MEASUREMENT",
    "MSG_TIME_RANGE",
    "REJECT_REASONS",
    "HookLineRejected",
    "LineBuffer",
    "check_int64",
    "job_rank",
    "parse_hook_line",
    "read_job_tags",
    "split_lines",
]

JOB_MEASUREMENTS = frozenset({"nrg_step", "nrg_module", "nrg_model", "nrg_run", "nrg_plan"})
"""The measurements a training job may send (what ``acquisition.torch`` writes)."""
REJECT_REASONS = ("too_long", "encoding", "syntax", "range", "measurement", "truncated")
"""Why a line is rejected; each is counted as ``rejected_<reason>``."""
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MSG_MEASUREMENT = "{measurement!r} is not one a job may send (accepted: {accepted})"
MSG_FIELD_RANGE = "field {field!r} = {value} is outside the int64 range"
MSG_TIME_RANGE = "timestamp {value} is outside the int64 range"
_RANK_VARS = (b"RANK", b"LOCAL_RANK")


class HookLineRejected(ValueError):
    """A line the listener does not accept; ``reason`` is one of :data:`REJECT_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_hook_line(
    raw: bytes,
    *,
    host: str,
    now_ns: int,
    max_bytes: int,
    job_tags: Mapping[str, str] | None = None,
) -> Point | None:
    """One received line (without its ``\\n``) → a Point stamped with ``host`` and ``job_tags``.

    ``job_tags`` holds ``pid`` (always overrides what the line says) and ``rank`` (only where the
    line has no non-empty ``rank``). Returns None for a blank or comment line; raises
    :class:`HookLineRejected` otherwise.
    """
    if len(raw) > max_bytes:
        raise HookLineRejected("too_long", f"{len(raw)} bytes > {max_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HookLineRejected("encoding", str(exc)) from None
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        point = decode_line(stripped, default_time_ns=now_ns)
    except LineProtocolRangeError as exc:
        raise HookLineRejected("range", str(exc)) from None
    except LineProtocolError as exc:
        raise HookLineRejected("syntax", str(exc)) from None
    if point.measurement not in JOB_MEASUREMENTS:
        raise HookLineRejected(
            "measurement",
            MSG_MEASUREMENT.format(
                measurement=point.measurement, accepted=", ".join(sorted(JOB_MEASUREMENTS))
            ),
        )
    check_int64(point)
    tags = dict(point.tags)
    tags.pop("pid", None)
    tags["host"] = host
    if job_tags:
        for key, value in job_tags.items():
            if key == "pid" or not tags.get(key):
                tags[key] = value
    return Point(point.measurement, tags, point.fields, point.time_ns)


def check_int64(point: Point) -> None:
    """HookLineRejected("range") when an integer field or the timestamp is outside int64.

    InfluxDB stores integers and timestamps as int64 and drops a point that holds a larger one
    without a word; here it is refused where it enters, and counted.
    """
    if not INT64_MIN <= point.time_ns <= INT64_MAX:
        raise HookLineRejected("range", MSG_TIME_RANGE.format(value=point.time_ns))
    for key, value in point.fields.items():
        if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise HookLineRejected("range", MSG_FIELD_RANGE.format(field=key, value=value))


def job_rank(environ: bytes) -> str | None:
    """The rank in a process's environment (``/proc/<pid>/environ``): ``RANK``, else
    ``LOCAL_RANK``, when it is a non-negative decimal integer."""
    found: dict[bytes, bytes] = {}
    for entry in environ.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in _RANK_VARS:
            found[key] = value
    for key in _RANK_VARS:
        value = found.get(key, b"")
        if value.isdigit() and len(value) <= 9:
            return value.decode("ascii")
    return None


def read_job_tags(pid: int, proc: str = "/proc") -> dict[str, str]:
    """``pid`` and, where the process's environment says it, ``rank`` of a sending job."""
    if pid <= 0:
        return {}
    tags = {"pid": str(pid)}
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            rank = job_rank(f.read(1 << 20))
    except OSError:
        rank = None
    if rank is not None:
        tags["rank"] = rank
    return tags


@dataclass
class LineBuffer:
    """Bytes received on one connection that do not yet end in a newline."""

    data: bytearray = field(default_factory=bytearray)
    discarding: bool = False
    """True while skipping the rest of a line already rejected as too long."""


def split_lines(buf: LineBuffer, chunk: bytes, max_bytes: int) -> Iterator[bytes | None]:
    """Feed ``chunk``; yield each complete line, and None once for each line over ``max_bytes``.

    Memory stays bounded by ``max_bytes``: an overlong line is dropped as it arrives.
    """
    data = buf.data
    data += chunk
    start = 0
    while True:
        nl = data.find(b"\n", start)
        if nl < 0:
            break
        if buf.discarding:
            buf.discarding = False
        elif nl - start > max_bytes:
            yield None
        else:
            yield bytes(data[start:nl])
        start = nl + 1
    del data[:start]
    if len(data) > max_bytes:
        if not buf.discarding:
            buf.discarding = True
            yield None
        data.clear()
