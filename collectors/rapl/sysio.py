"""The RAPL backends' only access to the machine: :class:`RaplIO` (tests subclass it)."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import time
from collections.abc import Callable

__all__ = ["RaplIO"]

_PERF_FLAG_FD_CLOEXEC = 8
_PERF_ATTR_SIZE_VER0 = 64
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "amd64": 298, "i386": 336, "i686": 336, "aarch64": 241}


class RaplIO:
    """Every access the RAPL backends make to the machine; tests subclass it to inject errors.

    Methods raise ``OSError`` as the underlying calls do (EACCES, EIO, ENOENT...)."""

    def __init__(self) -> None:
        self._syscall: Callable[..., int] | None = None

    def read_text(self, path: str) -> str:
        """A whole (small) sysfs or procfs file."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 65536)
            # A sysfs attribute arrives in one read; only a big file (cpuinfo) needs more.
            if len(data) == 65536:
                chunks = [data]
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
                data = b"".join(chunks)
        finally:
            os.close(fd)
        return data.decode("ascii", "replace")

    def open_msr(self, path: str) -> int:
        """An fd for ``/dev/cpu/N/msr``."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def pread_msr(self, fd: int, address: int) -> int:
        """The 64-bit little-endian register at ``address``; EIO where the CPU has none."""
        data = os.pread(fd, 8, address)
        if len(data) != 8:
            raise OSError(errno.EIO, f"short read of MSR {address:#x}")
        return int.from_bytes(data, "little")

    def perf_event_open(self, pmu_type: int, config: int, cpu: int) -> int:
        """A system-wide (pid -1) counting event on ``cpu``; returns its fd."""
        if self._syscall is None:
            nr = _SYS_PERF_EVENT_OPEN.get(platform.machine().lower())
            if nr is None:
                raise OSError(errno.ENOSYS, f"perf_event_open: unknown arch {platform.machine()}")
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syscall
            fn.restype = ctypes.c_long
            self._syscall = lambda *args: int(fn(ctypes.c_long(nr), *args))
        attr = struct.pack(
            "<IIQQQQQIIQ", pmu_type, _PERF_ATTR_SIZE_VER0, config, 0, 0, 0, 0, 0, 0, 0
        )
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = self._syscall(
            buf,
            ctypes.c_int(-1),
            ctypes.c_int(cpu),
            ctypes.c_int(-1),
            ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC),
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(
                err,
                f"perf_event_open(type={pmu_type}, config={config:#x}, cpu={cpu}): "
                f"{os.strerror(err)}",
            )
        return fd

    def read_counter(self, fd: int) -> int:
        """The 64-bit count of a perf event fd."""
        data = os.read(fd, 8)
        if len(data) != 8:
            raise OSError(errno.EIO, "short read of a perf counter")
        return int.from_bytes(data, "little")

    def close(self, fd: int) -> None:
        os.close(fd)

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()
