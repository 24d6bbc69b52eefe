"""The one data type of nrg: a point in the InfluxDB data model.

A point is a measurement name, string tags (what you group or filter by), typed fields (what you
plot: int, float, bool or str) and a Unix-epoch timestamp in nanoseconds. Field names carry their SI
unit (``energy_joules``, ``power_watts``, ``memory_bytes``, ``utilization_ratio``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FieldValue", "Point"]

FieldValue = float | int | bool | str


@dataclass(frozen=True, slots=True)
class Point:
    """One timestamped observation; immutable once emitted."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    time_ns: int

    def with_tags(self, extra: Mapping[str, str]) -> Point:
        """A copy with ``extra`` tags added (existing tags win)."""
        merged = dict(extra)
        merged.update(self.tags)
        return Point(self.measurement, merged, self.fields, self.time_ns)
