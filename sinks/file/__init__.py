"""File sink: appends line protocol to local ``.lp`` files — the embedded default destination.

Output replays into InfluxDB unchanged: ``influx write --bucket B --precision ns --file F``.
Files are named ``<prefix>-<UTC start time>.lp`` under ``dir`` (default: the per-user data dir,
e.g. ``~/.local/share/nrg/``) and rotate when they would exceed ``max_bytes``; ``max_files`` keeps
the newest N (0 keeps all) and ``max_total_bytes`` bounds them all together (default: a quarter of
the free space of the directory's filesystem when the sink opens), deleting the oldest first.
``compress = "gzip"`` compresses each rotated file to ``.lp.gz`` in the background. ``index``:
a finished file holding at least ``INDEX_MIN_STEP_LINES`` training-step lines or
``INDEX_MIN_LINES`` lines in all gets a step index beside it (:mod:`acquisition.store_index`),
written by a child process at low priority, so reports read columns instead of text.
``fsync``: ``"always"`` (after every batch: survives power loss), ``"interval"`` (at most every
``fsync_interval``), ``"never"`` (the OS decides). Files hold whole lines only: when the disk
fills in the middle of a batch, the lines that fit stay, the torn end is cut off, and the rest of
the batch is retried (:class:`~acquisition.errors.PartialWriteError`), so writing resumes as soon
as any space is free. A batch of up to ``DIRECT_WRITE_MAX`` bytes is appended directly from the
event loop (a write into the page cache takes microseconds, less than handing it to a thread);
larger writes, ``fsync``, truncation and opening files go through a thread (``asyncio.to_thread``,
``aiofiles.os``) so they never block the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gzip
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import aiofiles.os

from acquisition.api import PluginContext
from acquisition.config import duration, size
from acquisition.errors import ConfigError, PartialWriteError, WriteError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.store_index import INDEX_SUFFIX, index_path

__all__ = ["FileConfig", "FileSink"]

log = logging.getLogger("nrg.sinks.file")


@dataclass
class FileConfig:
    dir: str = ""
    """Output directory (default: the per-user data dir, e.g. ~/.local/share/nrg)."""
    path: str = ""
    """A single fixed output file instead of dated files in ``dir`` (rotation renames it)."""
    prefix: str = "nrg"
    """File names are ``<prefix>-<UTC start>.lp``."""
    max_bytes: int = size(64 * 1024 * 1024, "rotate before a file exceeds this size")
    max_files: int = 0
    """Keep the newest N files (the one being written included); 0 keeps all."""
    max_total_bytes: int = size(
        0, "bound on all files together, oldest deleted first; 0: a quarter of the free space"
    )
    compress: Literal["", "gzip"] = ""
    """"gzip": compress each rotated file to ``.lp.gz``."""
    fsync: Literal["always", "interval", "never"] = "interval"
    """always: after every batch; interval: every fsync_interval; never: leave it to the OS."""
    fsync_interval: float = duration(5.0, "with fsync = 'interval'")
    index: bool = True
    """Write a step index beside each finished file with many lines (steps or readings)."""

    def validate(self) -> None:
        if self.max_bytes < 1024:
            raise ValueError("max_bytes must be at least 1024")
        if self.max_files < 0:
            raise ValueError("max_files must be >= 0")
        if self.max_total_bytes < 0:
            raise ValueError("max_total_bytes must be >= 0")
        if 0 < self.max_total_bytes < self.max_bytes:
            raise ValueError("max_total_bytes must be 0 or at least max_bytes")


AUTO_TOTAL_FRACTION = 0.25
"""With ``max_total_bytes = 0``: this fraction of the free space when the sink opens."""
DIRECT_WRITE_MAX = 256 * 1024
"""Batches up to this many bytes are appended from the event loop itself; larger ones from a
thread (a write that large may wait for the kernel to write back dirty pages)."""
INDEX_MIN_STEP_LINES = 10_000
"""A finished file gets a step index when it holds at least this many step lines (below it,
reading the text takes a fraction of a second)..."""
INDEX_MIN_LINES = 100_000
"""...or this many lines in all (an 8-GPU host's collectors write about 600 a second)."""
INDEX_WAIT_S = 30.0
"""At close, how long to wait for index children before leaving them to finish alone (a
64 MiB file takes a few seconds)."""
_STEP_MEASUREMENTS = frozenset({"nrg_step", "nrg_energy"})
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


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
        self._fd: int | None = None
        self._size = 0
        self._last_fsync = time.monotonic()
        self.lines_written = 0
        self.rotations = 0
        self.deleted_files = 0
        self.max_total = config.max_total_bytes
        self._compressing: asyncio.Task[None] | None = None
        self._step_lines = 0
        """Step lines written to the current file (whether it is worth a step index)."""
        self._lines_before = 0
        """``lines_written`` when the current file was opened."""
        self._indexers: dict[int, Path] = {}
        """Index children not yet seen ending: pid → file."""
        self.indexes_started = 0
        self.index_failures = 0
        self._aborted = False

    def where(self) -> str:
        return str(self.current or self.fixed or self.dir)

    async def open(self) -> None:
        try:
            await aiofiles.os.makedirs(self.dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"[sinks.file] cannot create output directory {self.dir}: {exc.strerror}"
            ) from exc
        if not self.max_total:
            free = shutil.disk_usage(self.dir).free
            self.max_total = max(self.config.max_bytes, int(free * AUTO_TOTAL_FRACTION))
        await self._open_file()
        self._remove_stale_index_files()
        self._prune()

    def _new_path(self) -> Path:
        if self.fixed is not None:
            return self.fixed
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return _unused(self.dir, f"{self.config.prefix}-{stamp}")

    async def _open_file(self) -> None:
        path = self._new_path()
        try:
            fd = await asyncio.to_thread(os.open, path, _OPEN_FLAGS, 0o666)
        except OSError as exc:
            raise ConfigError(f"[sinks.file] cannot open {path}: {exc.strerror}") from exc
        self._fd = fd
        self.current = path
        self._size = os.fstat(fd).st_size
        self._step_lines = 0
        self._lines_before = self.lines_written

    async def _rotate(self) -> None:
        await self._close_file(fsync=True)
        worth_index = self._worth_index()
        rotated = self.current
        if self.fixed is not None and self.current is not None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            rotated = _unused(self.current.parent, f"{self.current.stem}.{stamp}")
            await aiofiles.os.rename(self.current, rotated)
        self.rotations += 1
        await self._open_file()
        if self.config.compress == "gzip" and rotated is not None:
            await self._wait_compressing()
            self._compressing = asyncio.create_task(self._compress(rotated, worth_index))
        else:
            if worth_index and rotated is not None:
                self._start_index(rotated)
            self._prune()

    async def _compress(self, path: Path, worth_index: bool) -> None:
        try:
            await asyncio.to_thread(_gzip_file, path)
            path = _gz(path)
        except OSError as exc:
            log.warning("cannot compress %s (kept as it is): %s", path, exc)
        if worth_index:
            self._start_index(path)
        self._prune()

    async def _wait_compressing(self) -> None:
        if self._compressing is not None:
            await self._compressing
            self._compressing = None

    def _worth_index(self) -> bool:
        lines = self.lines_written - self._lines_before
        return self.config.index and (
            self._step_lines >= INDEX_MIN_STEP_LINES or lines >= INDEX_MIN_LINES
        )

    def _start_index(self, path: Path) -> None:
        """Index a finished file in a child process of its own session at low priority (see
        :mod:`acquisition.store_index`): it carries on if the agent stops first."""
        self._reap_indexers()
        argv = [sys.executable, "-m", "acquisition.store_index", "--nice", str(path)]
        null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        try:
            pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=null, setsid=True)
        except OSError as exc:
            log.warning("cannot start indexing %s (reports read it as text): %s", path, exc)
            return
        self._indexers[pid] = path
        self.indexes_started += 1

    def _reap_indexers(self) -> None:
        """Log the index children that failed since the last look."""
        for pid, path in list(self._indexers.items()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                done, status = pid, 0
            if not done:
                continue
            del self._indexers[pid]
            code = os.waitstatus_to_exitcode(status)
            if code:
                self.index_failures += 1
                log.warning("indexing %s failed (exit %d); reports read it as text", path, code)

    def _old_files(self) -> list[Path]:
        """Finished output files of this sink, oldest first."""
        if self.fixed is not None:
            patterns = [f"{self.fixed.stem}.*.lp", f"{self.fixed.stem}.*.lp.gz"]
        else:
            patterns = [f"{self.config.prefix}-*.lp", f"{self.config.prefix}-*.lp.gz"]
        found = {p for pattern in patterns for p in self.dir.glob(pattern) if p != self.current}
        return sorted(found, key=_mtime)

    def _remove_stale_index_files(self) -> None:
        """Indexes whose file is gone, and halves of ones a stopped child was writing."""
        for idx in [*self.dir.glob(f"*{INDEX_SUFFIX}"), *self.dir.glob(f"*{INDEX_SUFFIX}.tmp")]:
            data = idx.with_name(idx.name.removesuffix(".tmp").removesuffix(INDEX_SUFFIX))
            if idx.name.endswith(".tmp") or not (data.exists() or _gz(data).exists()):
                with contextlib.suppress(OSError):
                    idx.unlink()

    def _prune(self) -> None:
        """Delete the oldest files beyond ``max_files`` or beyond ``max_total_bytes`` once the
        file being written reaches ``max_bytes``."""
        files = self._old_files()
        sizes = [_size(p) + _size(index_path(p)) for p in files]
        total = sum(sizes) + max(self._size, self.config.max_bytes)  # the current one when full
        keep = self.config.max_files
        excess = max(0, len(files) - (keep - 1)) if keep > 0 else 0
        for i, old in enumerate(files):
            if i >= excess and total <= self.max_total:
                break
            try:
                old.unlink()
            except OSError as exc:
                log.warning("cannot remove old output file %s: %s", old, exc.strerror)
                continue
            with contextlib.suppress(OSError):
                index_path(old).unlink(missing_ok=True)
            self.deleted_files += 1
            total -= sizes[i]

    async def write(self, batch: Sequence[Point]) -> None:
        data = self.encoder.encode_many(batch).encode()
        try:
            if self._fd is None:
                await self._open_file()
            if self._size and self._size + len(data) > self.config.max_bytes:
                await self._rotate()
        except (ConfigError, OSError) as exc:  # a full disk refusing a new file: try again later
            raise WriteError(str(exc), retryable=True) from exc
        start = self._size
        done = 0
        fd = self._fd
        assert fd is not None
        try:
            if len(data) <= DIRECT_WRITE_MAX:
                done = os.write(fd, data)
            view = memoryview(data)
            while done < len(data):  # a write may be partial
                done += await asyncio.to_thread(os.write, fd, view[done:])
            self._size += len(data)
            self._step_lines += sum(p.measurement in _STEP_MEASUREMENTS for p in batch)
            await self._maybe_fsync()
        except OSError as exc:
            raise await self._after_failed_write(exc, data, start, done) from exc
        self.lines_written += len(batch)

    async def _after_failed_write(
        self, exc: OSError, data: bytes, start: int, done: int
    ) -> WriteError:
        """Keep the whole lines that reached the file, cut the torn rest off."""
        keep = data.rfind(b"\n", None, done) + 1  # after the last newline written
        await self._truncate_to(start + keep)
        lines = data.count(b"\n", 0, keep)
        total = data.count(b"\n")
        self.lines_written += lines
        full = exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        why = "disk full" if full else exc.strerror
        message = f"cannot write {self.current}: {why}"
        if lines:
            return PartialWriteError(f"{message} ({lines} of {total} lines written)", written=lines)
        return WriteError(message, retryable=True)

    async def _truncate_to(self, size: int) -> None:
        """Undo a partial write so the file holds whole batches only."""
        try:
            if self._fd is None:
                raise ValueError("the file is closed")
            await asyncio.to_thread(os.ftruncate, self._fd, size)
            self._size = size  # appends (O_APPEND) continue at the new end
        except (OSError, ValueError) as exc:
            log.error("cannot truncate %s after a failed write: %s", self.current, exc)

    async def _maybe_fsync(self) -> None:
        policy = self.config.fsync
        now = time.monotonic()
        fd = self._fd
        if fd is not None and (
            policy == "always"
            or (policy == "interval" and now - self._last_fsync >= self.config.fsync_interval)
        ):
            await asyncio.to_thread(os.fsync, fd)
            self._last_fsync = now

    async def _close_file(self, fsync: bool) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            if fsync and self.config.fsync != "never":
                await asyncio.to_thread(os.fsync, fd)
        finally:
            self._fd = None
            os.close(fd)

    async def aclose(self) -> None:
        finished = self._fd is not None and self.fixed is None and self._worth_index()
        await self._close_file(fsync=True)
        await self._wait_compressing()
        if finished and self.current is not None:
            self._start_index(self.current)
        await self._wait_indexers()

    async def _wait_indexers(self) -> None:
        """Until the index children end (a report right after the agent stops then reads the
        indexes), for at most ``INDEX_WAIT_S`` or until :meth:`abort`: they carry on alone."""
        waited = 0.0
        self._reap_indexers()
        while self._indexers and waited < INDEX_WAIT_S and not self._aborted:
            await asyncio.sleep(0.05)
            waited += 0.05
            self._reap_indexers()

    def abort(self) -> None:
        """The agent's shutdown deadline passed: stop waiting for index children."""
        self._aborted = True

    def stats(self) -> dict[str, int]:
        return {
            "file_bytes": self._size,
            "rotations": self.rotations,
            "deleted_files": self.deleted_files,
            "indexes_started": self.indexes_started,
            "index_failures": self.index_failures,
        }


def _gzip_file(path: Path) -> None:
    """``path`` → ``path.gz`` (written aside, then renamed), then ``path`` removed."""
    target = _gz(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    path.unlink()


def _unused(directory: Path, stem: str) -> Path:
    """``<stem>.lp`` in ``directory``, else ``<stem>-1.lp``, ``<stem>-2.lp``…: the first name
    taken neither by a file nor by its compressed ``.gz`` (names carry the second they were made
    in: files rotated more than once a second, or a run restarted within one, must not
    overwrite each other)."""
    path = directory / f"{stem}.lp"
    n = 1
    while path.exists() or _gz(path).exists():
        path = directory / f"{stem}-{n}.lp"
        n += 1
    return path


def _gz(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def _mtime(path: Path) -> float:
    """A file's modification time; one whose time cannot be read (gone) counts as the oldest."""
    try:
        return path.stat().st_mtime
    except OSError:
        return -math.inf


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
