"""NVML constants (``nvml.h``) and the pure parts of the NVML collector: ``/proc/<pid>/stat``,
``CUDA_VISIBLE_DEVICES``, GPU selection, NVML value unions and sample buffers, GPU generations.

The parsers raise only ``ValueError``.
"""

from __future__ import annotations

import ctypes
import itertools
import re
import statistics
import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "decode_samples",
    "is_ga100",
    "lost_samples",
    "parse_proc_stat",
    "parse_visible_devices",
    "power_usage_is_instant",
    "select_gpus",
    "select_new_samples",
    "value_of",
]

# NVML constants (nvml.h). They are part of the C ABI and never change; keeping them here keeps
# the seam to the binding down to its functions and exception classes (a test checks them
# against pynvml).
NVML_SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_GPU_NOT_FOUND = 28
FI_DEV_POWER_AVERAGE = 185
FI_DEV_POWER_INSTANT = 186
TEMPERATURE_GPU = 0
CLOCK_SM = 1
CLOCK_MEM = 2
SAMPLING_TOTAL_POWER = 0
SAMPLING_GPU_UTIL = 1
SAMPLING_MEMORY_UTIL = 2
ARCH_VOLTA = 5
ARCH_AMPERE = 7
MEMORY_V2 = 0x02000028

_UNSUPPORTED = frozenset(
    {ERROR_NOT_SUPPORTED, ERROR_NO_PERMISSION, ERROR_FUNCTION_NOT_FOUND,
     ERROR_ARGUMENT_VERSION_MISMATCH}
)  # fmt: skip
_LOST = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_GPU_NOT_FOUND})
_INIT_REASONS = {
    ERROR_LIBRARY_NOT_FOUND: "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver here)",
    ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
    ERROR_NO_PERMISSION: "no permission to use NVML",
    ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (reboot?)",
}

# Sample types read from the driver's buffer: (type, field name, scale to SI).
_SAMPLE_TYPES = (
    (SAMPLING_TOTAL_POWER, "power_watts", 1e-3),
    (SAMPLING_GPU_UTIL, "utilization_ratio", 1e-2),
    (SAMPLING_MEMORY_UTIL, "memory_utilization_ratio", 1e-2),
)

# A buffer that yields nothing new for this long is re-read from the start once, which is how a
# timestamp that went backwards (driver reload, clock step) shows: the driver filters on
# ``timestamp > lastSeen`` and would otherwise answer NOT_FOUND forever.
_STALE_NS = 5_000_000_000
_MAX_ANCESTRY = 64

# GA100 is the one Ampere chip whose nvmlDeviceGetPowerUsage is instantaneous (nvml.h: "On Ampere
# (except GA100) or newer GPUs, the API returns power averaged over 1 sec interval. On GA100 and
# older architectures, instantaneous power is returned."). NVML reports the architecture, not the
# chip: GA100 is known by its products' names (A100, A30, A800).
_GA100_NAME_RE = re.compile(r"\bA(?:100|30|800)\b")


def is_ga100(name: str) -> bool:
    """Whether an NVML device name is a GA100 product (A100, A30, A800)."""
    return _GA100_NAME_RE.search(name) is not None


def power_usage_is_instant(architecture: int | None, name: str) -> bool | None:
    """Whether ``nvmlDeviceGetPowerUsage`` is instantaneous (True) or a 1 s average (False) on
    this GPU; None when the architecture is unknown (an older driver)."""
    if architecture is None:
        return None
    return architecture < ARCH_AMPERE or (architecture == ARCH_AMPERE and is_ga100(name))


def parse_proc_stat(text: str) -> tuple[int, int]:
    """``/proc/<pid>/stat`` → (parent pid, start time in clock ticks since boot).

    The command name sits in parentheses and may itself hold spaces and parentheses, so the
    fields are counted from the last ``)``. ValueError for anything else.
    """
    rest = text[text.rindex(")") + 2 :].split()
    if len(rest) < 20:
        raise ValueError(f"/proc/<pid>/stat has {len(rest)} fields after comm, expected 20+")
    return int(rest[1]), int(rest[19])


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` → its entries, or None when unset (every GPU is visible).

    An empty value hides every GPU. Whitespace around entries is ignored, as CUDA does.
    """
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",")] if value.strip() else []


def _is_number(entry: str) -> bool:
    """An ASCII decimal integer, optionally negative (CUDA reads ``-1`` as "stop here")."""
    digits = entry[1:] if entry.startswith("-") else entry
    return digits.isascii() and digits.isdigit()


def select_gpus(
    entries: Sequence[str] | None, uuids: Sequence[str], *, stop_at_invalid: bool
) -> list[int]:
    """Positions in ``uuids`` (NVML index order) chosen by ``entries``, in the order given.

    An entry is a decimal index or a (prefix of a) ``GPU-…`` UUID; None selects all. CUDA stops
    at the first entry it cannot resolve (``stop_at_invalid``, for ``CUDA_VISIBLE_DEVICES``);
    a configured list raises ValueError instead.
    """
    if entries is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in entries:
        found: int | None = None
        if _is_number(entry):
            number = int(entry)
            if 0 <= number < len(uuids):
                found = number
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) == 1:
                found = matches[0]
        if found is None or found in chosen:
            if stop_at_invalid:
                break
            raise ValueError(f"GPU {entry!r} matches no single GPU here")
        chosen.append(found)
    return chosen


def value_of(value_type: int, value: Any) -> float | int:
    """Read an NVML ``c_nvmlValue_t`` union by its ``nvmlValueType_t``."""
    attribute = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[value_type]
    number: float | int = getattr(value, attribute)
    return number


# c_nvmlSample_t is {unsigned long long timeStamp; c_nvmlValue_t sampleValue} = 16 bytes; the
# union's members all start at its first byte. Formats by nvmlValueType_t.
_SAMPLE_SIZE = 16
_SAMPLE_FORMATS = tuple(
    "=Q" + member
    for member in (
        "d",
        "I4x",
        "Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "I4x",
        "Q",
        "q",
        "i4x",
        "H6x",
    )
)


def decode_samples(value_type: int, samples: Sequence[Any]) -> list[tuple[int, float | int]]:
    """``nvmlDeviceGetSamples``' list of ``c_nvmlSample_t`` → [(timestamp µs, value)].

    The binding returns a slice of one ctypes array; reading that memory in one go is about 15x
    faster than its structures' attribute access (``_PrintableStructure.__getattribute__``),
    which matters at tens of samples per type per GPU per tick. Anything else is read field by
    field.
    """
    if not samples:
        return []
    first, last = samples[0], samples[-1]
    base = getattr(first, "_b_base_", None)
    if (
        base is not None
        and base is getattr(last, "_b_base_", None)
        and ctypes.sizeof(first) == _SAMPLE_SIZE
        and ctypes.addressof(last) - ctypes.addressof(first) == _SAMPLE_SIZE * (len(samples) - 1)
    ):
        raw = ctypes.string_at(ctypes.addressof(first), _SAMPLE_SIZE * len(samples))
        return list(struct.iter_unpack(_SAMPLE_FORMATS[value_type], raw))
    return [(int(s.timeStamp), value_of(value_type, s.sampleValue)) for s in samples]


def select_new_samples(
    last_us: int, stamps: Sequence[int], *, probed: bool
) -> tuple[list[int], int, bool]:
    """Which samples of a buffer read are new: (their positions, the new cursor, went back?).

    A normal read passed ``last_us`` and the driver returned only later samples; a *probe*
    re-read the buffer from 0. If every probed sample is older than the cursor, the clock went
    backwards (driver reload): the buffer is FIFO, so the sample at the cursor has been evicted
    together with everything before it, and all that remains is new.
    """
    if not stamps:
        return [], last_us, False
    newest = max(stamps)
    if probed and newest < last_us:
        return list(range(len(stamps))), newest, True
    keep = [i for i, stamp in enumerate(stamps) if stamp > last_us]
    return keep, max(newest, last_us), False


def lost_samples(last_us: int, stamps: Sequence[int], depth: int) -> int:
    """How many samples a driver buffer dropped before a read that returned ``stamps`` (the new
    samples, after the cursor ``last_us``): 0 unless the read came back full (at least ``depth``
    samples, the most any read of that buffer returned), else the gap between the cursor and
    the oldest new sample in sample periods (the median spacing of the new samples), less one.

    A buffer holds a fixed number of samples (FIFO): one read later than that span returns a
    full buffer that starts after the cursor. A read that is not full lost nothing, whatever
    its gap (a driver that paused sampling).
    """
    if last_us <= 0 or len(stamps) < 3 or len(stamps) < depth:
        return 0
    ordered = sorted(stamps)
    period = statistics.median(b - a for a, b in itertools.pairwise(ordered))
    if period <= 0:
        return 0
    return max(round((ordered[0] - last_us) / period) - 1, 0)
