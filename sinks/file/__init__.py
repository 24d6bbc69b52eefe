"""File sink: appends line protocol to local ``.lp`` files — the embedded default destination.

Output replays into InfluxDB unchanged: ``influx write --bucket B --precision ns --file F``.
Files are named ``<prefix>-<UTC start time>.lp`` under ``dir`` (default: the per-user data dir,
e.g. ``~/.local/share/nrg/``) and rotate when they would exceed ``max_bytes``; ``max_files`` keeps
the newest N (0 keeps all). ``fsync``: ``"always"`` (after every batch: survives power loss),
``"interval"`` (at most every ``fsync_interval``), ``"never"`` (the OS decides). A batch is written
all or nothing: on an error (disk full) the file is truncated back and the batch is retried.
Writes go through ``aiofiles`` so they never block the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiofiles
import aiofiles.os

from acquisition.api import PluginContext
from acquisition.config import duration, size
from acquisition.errors import ConfigError, WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point

__all__ = ["FileConfig", "FileSink"]

log = logging.getLogger("nrg.sinks.file")


@dataclass
class FileConfig:
    dir: str = ""
    """Output directory (default: the per-user data dir, e.g. ~/.local/share/nrg)."""
    path: str = ""
    """A single fixed output file instead of dated files in ``dir`` (rotation renames it)."""
    prefix: str = "nrg"
    max_bytes: int = size(64 * 1024 * 1024, "rotate before a file exceeds this size")
    max_files: int = 0
    fsync: Literal["always", "interval", "never"] = "interval"
    fsync_interval: float = duration(5.0, "with fsync = 'interval'")

    def validate(self) -> None:
        if self.max_bytes < 1024:
            raise ValueError("max_bytes must be at least 1024")
        if self.max_files < 0:
            raise ValueError("max_files must be >= 0")


class FileSink:
    """Appends encoded batches to rotating ``.lp`` files."""

    name: ClassVar[str] = "file"
    config_class: ClassVar[type] = FileConfig

    def __init__(self, config: FileConfig, context: PluginContext) -> None:
        self.config = config
        self.encoder = LineEncoder(context.tags)
        self.dir = Path(config.dir).expanduser() if config.dir else context.data_dir
        self.fixed = Path(config.path).expanduser() if config.path else None
        if self.fixed is not None:
            self.dir = self.fixed.parent
        self.current: Path | None = None
        self._file: Any = None
        self._size = 0
        self._last_fsync = time.monotonic()
        self.lines_written = 0
        self.rotations = 0

    def where(self) -> str:
        return str(self.current or self.fixed or self.dir)

    async def open(self) -> None:
        try:
            await aiofiles.os.makedirs(self.dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"[sinks.file] cannot create output directory {self.dir}: {exc.strerror}"
            ) from exc
        await self._open_file()

    def _new_path(self) -> Path:
        if self.fixed is not None:
            return self.fixed
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = self.dir / f"{self.config.prefix}-{stamp}.lp"
        n = 1
        while path.exists():
            path = self.dir / f"{self.config.prefix}-{stamp}-{n}.lp"
            n += 1
        return path

    async def _open_file(self) -> None:
        path = self._new_path()
        try:
            self._file = await aiofiles.open(path, "ab", buffering=0)
        except OSError as exc:
            raise ConfigError(f"[sinks.file] cannot open {path}: {exc.strerror}") from exc
        self.current = path
        self._size = (await aiofiles.os.stat(path)).st_size

    async def _rotate(self) -> None:
        await self._close_file(fsync=True)
        if self.fixed is not None and self.current is not None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            await aiofiles.os.rename(self.current, self.current.with_suffix(f".{stamp}.lp"))
        self.rotations += 1
        await self._open_file()
        self._prune()

    def _prune(self) -> None:
        keep = self.config.max_files
        if keep <= 0:
            return
        pattern = (
            f"{self.fixed.stem}.*.lp" if self.fixed is not None else f"{self.config.prefix}-*.lp"
        )
        files = sorted(
            (p for p in self.dir.glob(pattern) if p != self.current),
            key=lambda p: p.stat().st_mtime,
        )
        for old in files[: max(0, len(files) - (keep - 1))]:
            try:
                old.unlink()
            except OSError as exc:
                log.warning("cannot remove old output file %s: %s", old, exc.strerror)

    async def write(self, batch: Sequence[Point]) -> None:
        data = self.encoder.encode_many(batch).encode()
        if self._file is None:
            await self._open_file()
        if self._size and self._size + len(data) > self.config.max_bytes:
            await self._rotate()
        start = self._size
        try:
            view = memoryview(data)
            while view:  # unbuffered: a write may be partial
                n = await self._file.write(view)
                view = view[n:]
            self._size += len(data)
            await self._maybe_fsync()
        except OSError as exc:
            await self._truncate_to(start)
            why = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
            raise WriteError(f"cannot write {self.current}: {why}", retryable=True) from exc
        self.lines_written += len(batch)

    async def _truncate_to(self, size: int) -> None:
        """Undo a partial write so the file holds whole batches only."""
        try:
            fd = self._file.fileno()
            await asyncio.to_thread(os.ftruncate, fd, size)
            await self._file.seek(size)
            self._size = size
        except (OSError, ValueError) as exc:
            log.error("cannot truncate %s after a failed write: %s", self.current, exc)

    async def _maybe_fsync(self) -> None:
        policy = self.config.fsync
        now = time.monotonic()
        if policy == "always" or (
            policy == "interval" and now - self._last_fsync >= self.config.fsync_interval
        ):
            await asyncio.to_thread(os.fsync, self._file.fileno())
            self._last_fsync = now

    async def _close_file(self, fsync: bool) -> None:
        if self._file is None:
            return
        try:
            if fsync and self.config.fsync != "never":
                await asyncio.to_thread(os.fsync, self._file.fileno())
        finally:
            await self._file.close()
            self._file = None

    async def aclose(self) -> None:
        await self._close_file(fsync=True)

    def stats(self) -> dict[str, int]:
        return {"file_bytes": self._size, "rotations": self.rotations}
