"""The plugins' own counters in the agent's ``nrg_collect`` self-stats points."""

from __future__ import annotations

from typing import Any

__all__ = ["cumulative_stats", "plugin_stats"]


def plugin_stats(instance: Any) -> dict[str, float | int | bool | str]:
    """The plugin's own counters (its ``stats()``), the values a point can hold; {} without."""
    stats = getattr(instance, "stats", None)
    if not callable(stats):
        return {}
    try:
        values = stats()
    except Exception:
        return {}
    return {str(k): v for k, v in dict(values).items() if isinstance(v, int | float | bool | str)}


def cumulative_stats(
    before_close: dict[str, float | int | bool | str], instance: Any
) -> dict[str, float | int | bool | str]:
    """The plugin's stats now, where a counter that went down (reset by ``aclose()``) keeps the
    value it had before the close."""
    now = plugin_stats(instance)
    for key, old in before_close.items():
        new = now.get(key)
        if new is None or (
            isinstance(old, int | float)
            and isinstance(new, int | float)
            and not isinstance(old, bool)
            and not isinstance(new, bool)
            and new < old
        ):
            now[key] = old
    return now
