"""Power sources as cumulative-energy series, the one shape every per-event computation reads.

Input: the points nrg's collectors emit (in-process through :class:`acquisition.sampler.Sampler`
or read back from a file), with the agent's units:

- ``rapl`` (tags ``socket``, ``domain``): ``energy_joules``, a cumulative counter (J);
- ``gpu_sample`` (tag ``gpu``): ``power_watts`` at the driver's own sample times (W), integrated
  by trapezoids; preferred over the ``gpu`` points' counter, which updates about every 100 ms;
- ``gpu`` (tag ``gpu``): ``energy_joules`` (J), else ``power_watts`` (W);
- ``emonpi`` (tag ``node``): ``power1_watts`` (W), the wall meter.

Source names are those of the attribution processor (``rapl:package-0``, ``rapl:dram-0``,
``nvml:0``, ``emonpi:5``). Energy over an interval is the difference of the cumulative series
interpolated linearly at its two edges, so energies of adjacent intervals add up exactly.

Error of an edge: linear interpolation is exact while the power is constant across the sample
interval that brackets the edge. If the power switched inside it between two levels, the
interpolated energy is off by at most ``(t - t0)(t1 - t)/(t1 - t0) × |ΔP|``; nrg takes ``|ΔP|`` as
the spread of the mean powers of that interval and its two neighbours. It is an estimate (a
constant power gives 0, a power step inside the interval its size), not a hard bound: power that
varies faster than the sampling is not seen by any sampler.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from acquisition.point import Point
from acquisition.processors.attribution import parse_source

__all__ = [
    "CPU_DOMAINS",
    "EnergySeries",
    "SeriesBuilder",
    "build_series",
    "cpu_sources",
    "gpu_names_by_uuid",
    "gpu_source",
]

_NS = 1_000_000_000
CPU_DOMAINS = ("package", "dram")
"""RAPL domains charged to CPU operators: they do not overlap (core and uncore lie inside the
package; psys covers the whole platform)."""


@dataclass(frozen=True)
class EnergySeries:
    """One source's cumulative energy (J, 0 at the first sample) at strictly increasing times
    (Unix-epoch ns)."""

    source: str
    kind: str
    """``rapl``, ``gpu`` or ``wall``."""
    domain: str
    times: list[int]
    joules: list[float]

    @property
    def first_ns(self) -> int:
        return self.times[0]

    @property
    def last_ns(self) -> int:
        return self.times[-1]

    def at(self, t: int) -> tuple[float, float] | None:
        """(cumulative J at ``t``, its error estimate J); None outside the sampled range."""
        times = self.times
        if not times or t < times[0] or t > times[-1]:
            return None
        i = bisect.bisect_left(times, t)
        if times[i] == t:
            return self.joules[i], 0.0
        t0, t1 = times[i - 1], times[i]
        e0, e1 = self.joules[i - 1], self.joules[i]
        value = e0 + (e1 - e0) * ((t - t0) / (t1 - t0))
        return value, (t - t0) * (t1 - t) / (t1 - t0) / _NS * self._spread(i)

    def __post_init__(self) -> None:
        # Spread of the mean powers around each sample interval, computed once: every edge of
        # every event looks it up.
        times, joules = self.times, self.joules
        powers = [
            (joules[k] - joules[k - 1]) * _NS / (times[k] - times[k - 1])
            for k in range(1, len(times))
        ]
        spread = [0.0]
        for k in range(len(powers)):
            near = powers[max(k - 1, 0) : k + 2]
            spread.append(max(near) - min(near))
        object.__setattr__(self, "_spreads", spread)

    def _spread(self, i: int) -> float:
        """Max − min of the mean powers (W) of sample intervals i-1..i+1 (interval i ends at
        ``times[i]``)."""
        spreads: list[float] = self._spreads  # type: ignore[attr-defined]
        return spreads[i]

    def energy(self, start: int, end: int) -> tuple[float, float] | None:
        """(J over [start, end], error estimate J); None unless samples bracket the interval."""
        a = self.at(start)
        b = self.at(end)
        if a is None or b is None:
            return None
        return b[0] - a[0], a[1] + b[1]

    def power(self) -> list[tuple[int, float]]:
        """Mean power (W) of each sample interval, stamped at the interval's start."""
        out = []
        for i in range(1, len(self.times)):
            dt = self.times[i] - self.times[i - 1]
            out.append((self.times[i - 1], (self.joules[i] - self.joules[i - 1]) * _NS / dt))
        return out


def gpu_source(device: int) -> str:
    """The source name of CUDA device ``device`` (NVML index assumed equal to it)."""
    return f"nvml:{device}"


def _bare_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def gpu_names_by_uuid(
    uuid_sources: Mapping[str, str], cuda_uuids: Mapping[int, str]
) -> dict[int, str]:
    """CUDA ordinal → source name, by the GPUs' UUIDs (NVML's ``GPU-…`` form or CUDA's bare
    form; ``uuid_sources`` as :attr:`SeriesBuilder.uuids`): CUDA and NVML number GPUs
    differently when ``CUDA_VISIBLE_DEVICES`` is set."""
    by_uuid = {_bare_uuid(uuid): name for uuid, name in uuid_sources.items()}
    return {
        ordinal: by_uuid[_bare_uuid(uuid)]
        for ordinal, uuid in cuda_uuids.items()
        if _bare_uuid(uuid) in by_uuid
    }


def cpu_sources(series: Mapping[str, EnergySeries]) -> list[str]:
    """The sources charged to CPU operators: RAPL package and DRAM of every socket."""
    return sorted(
        name for name, s in series.items() if s.kind == "rapl" and s.domain in CPU_DOMAINS
    )


def _cumulate(times: list[int], watts: list[float]) -> list[float]:
    out = [0.0]
    for i in range(1, len(times)):
        out.append(out[-1] + (times[i] - times[i - 1]) * (watts[i] + watts[i - 1]) / 2 / _NS)
    return out


class _Samples:
    """(time ns, value) pairs of one source in compact arrays: 16 bytes a reading, where the
    points themselves take about 500."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("q")
        self.values = array("d")

    def add(self, t: int, v: float) -> None:
        self.times.append(t)
        self.values.append(v)

    def __len__(self) -> int:
        return len(self.times)

    def increasing(self) -> tuple[list[int], list[float]]:
        """Sorted by time, one per timestamp (the last read wins)."""
        by_time = dict(sorted(zip(self.times, self.values, strict=True)))
        return list(by_time), list(by_time.values())


class SeriesBuilder:
    """Power sources gathered from points as they come (:meth:`add`), kept compact;
    :meth:`series` gives the cumulative series of the readings so far."""

    def __init__(self) -> None:
        self._counters: dict[str, _Samples] = defaultdict(_Samples)
        self._powers: dict[str, _Samples] = defaultdict(_Samples)
        self._gpu_samples: dict[str, _Samples] = defaultdict(_Samples)
        self._meta: dict[str, tuple[str, str]] = {}
        self.uuids: dict[str, str] = {}
        """GPU UUID (bare, lower case) → source name."""
        self.readings = 0

    def add(self, points: Iterable[Point]) -> SeriesBuilder:
        for point in points:
            self._add(point)
        return self

    def _add(self, point: Point) -> None:
        if point.measurement in ("gpu", "gpu_sample") and "uuid" in point.tags:
            name = gpu_source(int(point.tags.get("gpu", "0")))
            self.uuids.setdefault(_bare_uuid(point.tags["uuid"]), name)
        if point.measurement == "gpu_sample":
            value = point.fields.get("power_watts")
            if isinstance(value, int | float) and not isinstance(value, bool):
                name = gpu_source(int(point.tags.get("gpu", "0")))
                self._gpu_samples[name].add(point.time_ns, float(value))
                self._meta[name] = ("gpu", "")
                self.readings += 1
            return
        reading = parse_source(point)
        if reading is None:
            return
        self._meta[reading.source] = (reading.kind, reading.domain)
        target = self._counters if reading.counter else self._powers
        target[reading.source].add(point.time_ns, reading.value)
        self.readings += 1

    def series(self) -> dict[str, EnergySeries]:
        """Every source with at least two readings."""
        series: dict[str, EnergySeries] = {}
        for name, (kind, domain) in self._meta.items():
            if len(self._gpu_samples.get(name, ())) >= 2:
                times, watts = self._gpu_samples[name].increasing()
                joules = _cumulate(times, watts)
            elif len(self._counters.get(name, ())) >= 2:
                times, raw = self._counters[name].increasing()
                joules = [v - raw[0] for v in raw]
            elif len(self._powers.get(name, ())) >= 2:
                times, watts = self._powers[name].increasing()
                joules = _cumulate(times, watts)
            else:
                continue
            series[name] = EnergySeries(name, kind, domain, times, joules)
        return series


def build_series(points: Iterable[Point]) -> dict[str, EnergySeries]:
    """Every power source found in ``points``, as cumulative series of at least two samples."""
    return SeriesBuilder().add(points).series()
