"""What an agent measured of its own timing, read back from its file sink's output: the tests
that compare a run with a known power derive their tolerances from it."""

from __future__ import annotations

from pathlib import Path

from acquisition.lineproto import decode_line
from acquisition.point import FieldValue

__all__ = ["read_lag_s", "tick_lateness_s"]


def _collector_stats(out: Path, plugin: str) -> list[dict[str, FieldValue]]:
    """The ``nrg_collect`` self-stats of collector ``plugin`` in the ``*.lp`` files under ``out``."""
    stats = [
        p.fields
        for f in sorted(out.glob("*.lp"))
        for p in map(decode_line, f.read_text().splitlines())
        if p.measurement == "nrg_collect" and p.tags.get("plugin") == plugin
    ]
    assert stats, f"no self-stats of {plugin} in {out}"
    return stats


def read_lag_s(out: Path, plugin: str) -> float:
    """How much later than its tick's time stamp ``plugin`` may have read (s): its reads' own lag
    where it keeps one (a collector reading on a thread), else its longest collect (a tick is
    stamped before its reads)."""
    stats = _collector_stats(out, plugin)
    key = "read_lag_max_seconds" if "read_lag_max_seconds" in stats[-1] else "duration_max_seconds"
    return max(float(s[key]) for s in stats)  # type: ignore[arg-type]


def tick_lateness_s(out: Path, plugin: str) -> float:
    """The latest ``plugin``'s ticks came after their deadlines (s)."""
    return max(float(s["lateness_max_seconds"]) for s in _collector_stats(out, plugin))  # type: ignore[arg-type]
