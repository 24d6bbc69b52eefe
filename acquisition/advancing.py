"""Whether an energy source measures: the rule every energy collector applies to its counters.

A source proves that it measures when its counter moves (a wall meter: when a power reading is
not zero). Until then it is *pending* and writes no energy or power: a counter that never moves
would write zeros that look like a measurement. When a first window of :data:`WINDOW_S` has
passed without a move while the machine did at least :data:`MIN_WORK_S` CPU-seconds of work (the
work is not known for every source: a GPU or a machine on a wall meter always draws power, so the
window alone decides there), the source is *not advancing*: it is logged with its reason, said by
``nrg-collect list`` and in the summary's no-energy sentence, and not counted as a source. It
joins, and says so, the first time it moves later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ADVANCING",
    "MIN_WORK_S",
    "MSG_JOINS",
    "MSG_NOT_ADVANCING",
    "NOT_ADVANCING",
    "PENDING",
    "WINDOW_S",
    "Advance",
    "busy_cpu_seconds",
    "not_advancing",
]

log = logging.getLogger("nrg.advancing")

WINDOW_S = 2.0
"""Seconds a counter has to move in after it is first read."""
MIN_WORK_S = 0.2
"""CPU-seconds the machine must have used in that window for a counter that did not move to be
judged (an idle machine's counter may be too coarse to move)."""

PENDING = "pending"
ADVANCING = "advancing"
NOT_ADVANCING = "not advancing"

MSG_NOT_ADVANCING = "not advancing: {what} did not move in {window:.1f} s{work} ({why})"
MSG_JOINS = "%s: %s is advancing now: it joins the run from here"
MSG_STUCK_LOG = "%s: %s"

_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)
_USER_HZ = 100  # the kernel's USER_HZ: /proc/stat counts in 1/100 s on every architecture


def busy_cpu_seconds(root: Path | str) -> float | None:
    """CPU-seconds the machine has been busy, from ``<root>/proc/stat``; None if unreadable."""
    try:
        with open(Path(root) / "proc/stat", encoding="ascii") as f:
            first = f.readline().split()
        if first[0] != "cpu":
            return None
        values = [int(v) for v in first[1:]]
        return sum(values[i] for i in _BUSY_COLUMNS if i < len(values)) / _USER_HZ
    except (OSError, ValueError, IndexError):
        return None


@dataclass(eq=False, slots=True)
class Advance:
    """The proof that one counter measures: :meth:`observe` once per reading.

    ``plugin`` and ``what`` name it in the log (``rapl``, ``psys (socket 0)``); ``why`` is the
    likely reason when it does not move (a virtual machine's PMU, a hypervisor hiding RAPL).
    """

    plugin: str
    what: str
    why: str
    window_ns: int = int(WINDOW_S * 1e9)
    min_work_s: float = MIN_WORK_S
    state: str = PENDING
    since_ns: int | None = None
    work0: float | None = None
    detail: str = ""
    used_s: float | None = None
    waited_s: float = 0.0

    def observe(self, moved: bool, now_ns: int, work_s: float | None = None) -> bool:
        """One reading at monotonic ``now_ns`` (``work_s``: busy CPU-seconds so far, or None);
        True when its energy and power are to be written."""
        if self.state == ADVANCING:
            return True
        if moved:
            if self.state == NOT_ADVANCING:
                log.warning(MSG_JOINS, self.plugin, self.what)
            self.state = ADVANCING
            return True
        if self.since_ns is None:
            self.since_ns, self.work0 = now_ns, work_s
        elif self.state == PENDING and now_ns - self.since_ns >= self.window_ns:
            self._judge(now_ns, work_s)
        return False

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    def _judge(self, now_ns: int, work_s: float | None) -> None:
        used = None if work_s is None or self.work0 is None else work_s - self.work0
        if used is not None and used < self.min_work_s:
            return  # too idle to tell: wait for work
        assert self.since_ns is not None
        self.detail = _message([self.what], (now_ns - self.since_ns) / 1e9, used, self.why)
        self.state = NOT_ADVANCING
        self.used_s, self.waited_s = used, (now_ns - self.since_ns) / 1e9
        log.warning(MSG_STUCK_LOG, self.plugin, self.detail)

    def reason(self) -> str | None:
        """``not advancing: …`` once judged so (until it moves), else None."""
        return self.detail if self.state == NOT_ADVANCING else None


def _message(whats: list[str], window_s: float, used_s: float | None, why: str) -> str:
    work = "" if used_s is None else f" while the CPUs did {used_s:.1f} CPU-s of work"
    return MSG_NOT_ADVANCING.format(what=", ".join(whats), window=window_s, work=work, why=why)


def not_advancing(watches: list[Advance]) -> str | None:
    """The reason a collector measures nothing: every watch judged not advancing (those with
    the same reason said together), else None."""
    if not watches or any(w.state != NOT_ADVANCING for w in watches):
        return None
    by_why: dict[str, list[Advance]] = {}
    for w in watches:
        by_why.setdefault(w.why, []).append(w)
    parts = [
        _message([w.what for w in group], group[0].waited_s, group[0].used_s, why)
        for why, group in by_why.items()
    ]
    return "; ".join([parts[0], *(p.removeprefix("not advancing: ") for p in parts[1:])])
