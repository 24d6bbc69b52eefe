"""Training-job listener: line protocol from ``acquisition.torch`` over a local Unix socket.

Source: a SOCK_STREAM Unix socket, by default ``platformdirs.user_runtime_dir("nrg")/hooks.sock``
(e.g. ``/run/user/1000/nrg/hooks.sock``); the ``socket_path`` key, else env ``NRG_SOCKET``, moves
it. The socket file is created mode 0600 in a 0700 directory, and each connection's peer is
checked with ``SO_PEERCRED``: only the agent's own user (and root) may send.

Each ``\\n``-terminated UTF-8 line is parsed as InfluxDB line protocol (timestamps Unix-epoch ns;
a line without one gets the arrival time). Only the measurements the training library writes are
accepted (:data:`JOB_MEASUREMENTS`: ``nrg_step``, ``nrg_module``, ``nrg_model``, ``nrg_run``,
``nrg_plan``); a job cannot write the agent's own measurements (``nrg_collect``, ``nrg_energy``, ``cpu``...). The
listener stamps the ``host`` tag and the ``pid`` tag (the sending process, from ``SO_PEERCRED``;
for a fallback file, the writer's pid from its name), and a ``rank`` tag from the job's
``RANK``/``LOCAL_RANK`` environment when the line has none; it adds each peer's pid to
``context.status["tracked_pids"]`` so the procfs collector follows the training process. Lines
longer than ``max_line_bytes``, undecodable or unparsable lines, integers outside int64 or
timestamps outside InfluxDB's range, other measurements, connections beyond ``max_connections``
and other users' connections are rejected, counted by reason (``stats()``, published in
``nrg_collect``) and logged once per reason.

On shutdown the listener stops reading new connections, drains what the peers already sent, and
removes the socket file if it is still the one it created.

Fallback files: when no agent listened, the training library appended the same lines to
``<fallback dir>/nrg-<run>-<pid>.lp`` (env ``NRG_FALLBACK_DIR``, else ``<data dir>/spool-hooks``).
Every ``ingest_interval`` the listener takes each such file whose writing process has exited,
renames it ``….lp.ingesting`` (a claim), feeds its lines through the same checks, and renames it
``….lp.ingested`` when done (kept for ``influx write`` or the user to delete).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import stat
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from acquisition.api import Emit, PluginContext
from acquisition.config import duration, option, size
from acquisition.errors import ConfigError, NoData
from acquisition.paths import default_fallback_dir, default_socket_path

from .lines import (
    JOB_MEASUREMENTS,
    REJECT_REASONS,
    HookLineRejected,
    LineBuffer,
    check_int64,
    job_rank,
    parse_hook_line,
    read_job_tags,
    split_lines,
)

__all__ = [
    "JOB_MEASUREMENTS",
    "MSG_DIR_OWNER",
    "MSG_DIR_WRITABLE",
    "REJECT_REASONS",
    "HookLineRejected",
    "HooksCollector",
    "HooksConfig",
    "LineBuffer",
    "check_int64",
    "check_socket_dir",
    "default_fallback_dir",
    "default_socket_path",
    "fallback_file_pid",
    "job_rank",
    "parse_hook_line",
    "read_job_tags",
    "split_lines",
]

log = logging.getLogger(__name__)

_LineBuffer = LineBuffer  # the name tests use

_MAX_UNIX_PATH = 107  # sun_path holds 108 bytes including the terminating NUL
_READ_CHUNK = 256 * 1024
# Bytes parsed before the event loop gets control back: dense garbage (short lines, ~2 µs each
# to reject) then costs the agent's sampling at most a few tens of ms.
_PARSE_SLICE = 32 * 1024
_DRAIN_TIMEOUT_S = 5.0
_PEERCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}
_FALLBACK_RE = re.compile(r"^nrg-.*-(\d+)\.lp(\.ingesting)?$")


@dataclass
class HooksConfig:
    """``[[collectors.hooks]]`` keys."""

    socket_path: str = option("", "default: $NRG_SOCKET, else <runtime dir>/hooks.sock")
    max_line_bytes: int = size(65_536, "longer lines are rejected (counted as too_long)")
    max_connections: int = option(64, "connections beyond this many are closed (counted)")
    allowed_uids: list[int] = field(
        default_factory=list,
        metadata={"doc": "uids allowed to send besides the agent's own and root"},
    )
    track_pids: bool = option(True, "add connected jobs' pids to the procfs tracked trees")
    ingest: bool = option(True, "ingest fallback files of jobs that ran without an agent")
    ingest_dir: str = option("", "default: $NRG_FALLBACK_DIR, else <data dir>/spool-hooks")
    ingest_interval: float = duration(30.0, "how often the fallback directory is scanned")

    def validate(self) -> None:
        if self.max_line_bytes < 64:
            raise ValueError("max_line_bytes must be at least 64")
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")


def fallback_file_pid(name: str) -> int | None:
    """The writer's pid from a fallback file name ``nrg-<run>-<pid>.lp[.ingesting]``."""
    m = _FALLBACK_RE.match(name)
    return int(m.group(1)) if m else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of a Unix-socket peer, or None where SO_PEERCRED is unavailable."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, opt, _PEERCRED.size)
    except OSError:
        return None
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid


# --- the collector ----------------------------------------------------------------------------


@dataclass
class _Connection:
    writer: asyncio.StreamWriter
    pid: int


MSG_DIR_OWNER = (
    "[collectors.hooks] {dir} belongs to uid {owner}, not to this agent (uid {uid}): another user "
    "could replace the socket; remove it or set socket_path (or NRG_SOCKET) elsewhere"
)
MSG_DIR_WRITABLE = (
    "[collectors.hooks] {dir} is writable by other users (mode {mode:o}) and not sticky: they "
    "could replace the socket; chmod go-w it or set socket_path (or NRG_SOCKET) elsewhere"
)


def check_socket_dir(directory: Path) -> None:
    """ConfigError when someone else could swap the socket in ``directory``: it belongs to another
    user (root aside), or others may write to it without the sticky bit (as /tmp has)."""
    st = directory.stat()
    uid = os.getuid()
    if st.st_uid not in (uid, 0):
        raise ConfigError(MSG_DIR_OWNER.format(dir=directory, owner=st.st_uid, uid=uid))
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise ConfigError(MSG_DIR_WRITABLE.format(dir=directory, mode=stat.S_IMODE(st.st_mode)))


class HooksCollector:
    """Stream collector: a Unix-socket listener for the training job's ``nrg_*`` lines."""

    name: ClassVar[str] = "hooks"
    config_class: ClassVar[type] = HooksConfig

    def __init__(self, config: HooksConfig, context: PluginContext) -> None:
        self._config = config
        self._context = context
        self.path = (
            Path(config.socket_path).expanduser()
            if config.socket_path
            else default_socket_path(context.runtime_dir)
        )
        self._server: asyncio.base_events.Server | None = None
        self._inode: tuple[int, int] | None = None
        self._emit: Emit | None = None
        self._connections: dict[asyncio.Task[Any], _Connection] = {}
        self._added_pids: dict[int, int] = {}
        self.ingest_dir = (
            Path(config.ingest_dir).expanduser() if config.ingest_dir else default_fallback_dir()
        )
        self._allowed_uids = {os.geteuid(), 0, *config.allowed_uids}
        self._logged: set[str] = set()
        self._counts: dict[str, int] = {
            "lines_accepted": 0,
            **{f"rejected_{r}": 0 for r in REJECT_REASONS},
            "connections_total": 0,
            "connections_refused_limit": 0,
            "connections_refused_uid": 0,
            "files_ingested": 0,
            "lines_ingested": 0,
        }

    # -- lifecycle --

    async def open(self) -> None:
        """Bind the socket (0600); NoData when another live agent already listens there."""
        path = self.path
        if len(os.fsencode(path)) > _MAX_UNIX_PATH:
            raise ConfigError(
                f"[collectors.hooks] socket_path {str(path)!r} is longer than "
                f"{_MAX_UNIX_PATH} bytes, the limit of a Unix socket address"
            )
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
        check_socket_dir(path.parent)
        self._remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Linux gives the socket file the mode of the socket's inode (less the umask): set it
            # before bind so the file is never reachable by others, then chmod to be sure.
            os.fchmod(sock.fileno(), 0o600)
            sock.bind(os.fsencode(path))
            os.chmod(path, 0o600)
            sock.listen(min(self._config.max_connections, socket.SOMAXCONN))
            sock.setblocking(False)
            st = os.stat(path)
            self._inode = (st.st_dev, st.st_ino)
            self._server = await asyncio.start_unix_server(
                self._serve, sock=sock, start_serving=False
            )
        except BaseException:
            sock.close()
            raise

    @staticmethod
    def _remove_stale(path: Path) -> None:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(f"[collectors.hooks] {path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(os.fsencode(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)  # left behind by an agent that died
            return
        except OSError:
            pass  # e.g. EACCES: someone else's live socket
        finally:
            probe.close()
        raise NoData(f"another agent already listens on {path}")

    async def run(self, emit: Emit) -> None:
        """Serve connections until cancelled."""
        if self._server is None:
            raise RuntimeError("open() first")
        self._emit = emit
        await self._server.start_serving()
        while True:
            if self._config.ingest:
                await self.ingest_fallback_files()
            await asyncio.sleep(self._config.ingest_interval if self._config.ingest else 3600)

    async def aclose(self) -> None:
        """Stop listening, drain what peers already sent, remove our socket file."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in self._connections.values():
            sock = conn.writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                # Reads still return what is queued, then EOF; the peer's next send fails and
                # its library falls back to its spool file.
                sock.shutdown(socket.SHUT_RD)
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_DRAIN_TIMEOUT_S)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._unlink_own_socket()

    def _unlink_own_socket(self) -> None:
        if self._inode is None:
            return
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._inode = None

    # -- connections --

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._counts["connections_total"] += 1
        task = asyncio.current_task()
        assert task is not None
        cred = peer_credentials(writer.get_extra_info("socket"))
        pid = cred[0] if cred else 0
        if cred is not None and cred[1] not in self._allowed_uids:
            self._refuse(writer, "uid", f"uid {cred[1]} (pid {pid}) is not allowed to send")
            return
        if len(self._connections) >= self._config.max_connections:
            self._refuse(writer, "limit", f"{self._config.max_connections} connections open")
            return
        self._connections[task] = _Connection(writer, pid)
        self._track(pid)
        try:
            await self._read(reader, read_job_tags(pid))
        except (ConnectionError, OSError) as exc:
            log.debug("hooks connection from pid %d ended: %r", pid, exc)
        finally:
            del self._connections[task]
            self._untrack(pid)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _refuse(self, writer: asyncio.StreamWriter, reason: str, detail: str) -> None:
        self._counts[f"connections_refused_{reason}"] += 1
        self._log_once(f"refused_{reason}", "hooks: refused a connection: %s", detail)
        writer.close()

    async def _read(self, reader: asyncio.StreamReader, job_tags: Mapping[str, str]) -> None:
        buf = LineBuffer()
        while True:
            chunk = await reader.read(_PARSE_SLICE)
            if not chunk:
                break
            self._feed(buf, chunk, "lines_accepted", job_tags)
            # read() returns buffered data without yielding: let the collectors' ticks run.
            await asyncio.sleep(0)
        self._finish(buf)

    def _feed(
        self, buf: LineBuffer, chunk: bytes, counter: str, job_tags: Mapping[str, str]
    ) -> None:
        """Split, check and emit the complete lines in ``chunk``."""
        limit = self._config.max_line_bytes
        host = self._context.host
        now = time.time_ns()
        for line in split_lines(buf, chunk, limit):
            if line is None:
                self._reject("too_long", f"a line longer than {limit} bytes")
                continue
            try:
                point = parse_hook_line(
                    line, host=host, now_ns=now, max_bytes=limit, job_tags=job_tags
                )
            except HookLineRejected as exc:
                self._reject(exc.reason, str(exc))
                continue
            if point is not None:
                self._counts[counter] += 1
                assert self._emit is not None
                self._emit(point)

    def _finish(self, buf: LineBuffer) -> None:
        if buf.data.strip() and not buf.discarding:
            self._reject("truncated", f"{len(buf.data)} bytes without a final newline")

    # -- fallback files --

    async def ingest_fallback_files(self) -> None:
        """Ingest every fallback file whose writer has exited (see the module docstring)."""
        try:
            names = sorted(os.listdir(self.ingest_dir))
        except OSError:
            return  # no directory yet: no job ever fell back
        for name in names:
            pid = fallback_file_pid(name)
            if pid is None or (not name.endswith(".ingesting") and _pid_alive(pid)):
                continue
            path = self.ingest_dir / name
            claimed = path if name.endswith(".ingesting") else path.with_name(name + ".ingesting")
            try:
                if claimed != path:
                    os.rename(path, claimed)  # another agent may have claimed it first
                await self._ingest(claimed, {"pid": str(pid)})
                os.rename(
                    claimed,
                    claimed.with_name(claimed.name.removesuffix(".ingesting") + ".ingested"),
                )
            except OSError as exc:
                self._log_once("ingest", "hooks: cannot ingest %s: %s", path, exc)
                continue
            self._counts["files_ingested"] += 1

    async def _ingest(self, path: Path, job_tags: Mapping[str, str]) -> None:
        buf = LineBuffer()
        with open(path, "rb") as f:  # reads go through to_thread below
            while chunk := await asyncio.to_thread(f.read, _READ_CHUNK):
                for at in range(0, len(chunk), _PARSE_SLICE):
                    self._feed(buf, chunk[at : at + _PARSE_SLICE], "lines_ingested", job_tags)
                    await asyncio.sleep(0)
        self._finish(buf)

    def _reject(self, reason: str, detail: str) -> None:
        self._counts[f"rejected_{reason}"] += 1
        self._log_once(
            reason, "hooks: rejected a line (%s); further rejects are only counted", detail
        )

    def _log_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(msg, *args)

    def _track(self, pid: int) -> None:
        if not (self._config.track_pids and pid > 0):
            return
        pids: set[int] = self._context.status.setdefault("tracked_pids", set())
        if pid in self._added_pids:
            self._added_pids[pid] += 1
        elif pid not in pids:
            pids.add(pid)
            self._added_pids[pid] = 1

    def _untrack(self, pid: int) -> None:
        n = self._added_pids.get(pid)
        if n is None:
            return
        if n > 1:
            self._added_pids[pid] = n - 1
            return
        del self._added_pids[pid]
        self._context.status.get("tracked_pids", set()).discard(pid)

    # -- reporting --

    def stats(self) -> dict[str, float | int]:
        out: dict[str, float | int] = dict(self._counts)
        out["connections_open"] = len(self._connections)
        return out

    def status(self) -> str:
        rejected = sum(self._counts[f"rejected_{r}"] for r in REJECT_REASONS)
        return f"{len(self._connections)} job(s), {self._counts['lines_accepted']} lines" + (
            f", {rejected} rejected" if rejected else ""
        )

    def describe(self) -> str:
        return f"training-job events on {self.path}"
