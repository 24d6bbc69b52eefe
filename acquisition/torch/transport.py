"""Transport of line protocol from the training job to the agent, with a file fallback.

Sink: a ``SOCK_STREAM`` Unix socket (``NRG_SOCKET``, default ``<runtime dir>/hooks.sock``) where
the agent's ``hooks`` collector listens; lines are UTF-8, ``\\n``-terminated line protocol.
Fallback: ``<NRG_FALLBACK_DIR or <data dir>/spool-hooks>/nrg-<run>-<pid>.lp``, appended to
whenever the socket is absent, refuses, times out or breaks; ``influx write`` or the agent can
ingest it later. The socket is retried every ``retry_interval_s``.

Nothing is lost and training never waits: callers hand text to a bounded queue (a full queue
goes straight to the file); one background thread does the I/O. Because the protocol has no
acknowledgements, the text sent over the last ``replay_window_s`` is kept and also written to the
file when the connection breaks (a killed agent loses what sat unread in its socket buffer); on
close the sender half-closes the socket and waits for the agent to close its side, the sign
that it read everything, and otherwise replays the window too. Replayed lines are identical
points (same series, same timestamp), which a time-series database stores once.
"""

from __future__ import annotations

import collections
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from acquisition.paths import default_fallback_dir, default_socket_path

__all__ = ["Handover", "LineSender", "default_fallback_dir", "default_socket_path"]

_STOP = object()


class Handover:
    """Lines queued for the sender thread, in order, handed over in chunks.

    A chunk goes once ``max_bytes`` or ``max_s`` have gathered (at once with ``now``): each
    hand-over wakes the sender thread, whose wish for the interpreter lock costs the training
    thread more than the hand-over itself."""

    def __init__(
        self, send: Callable[[str], None], max_bytes: int = 32_768, max_s: float = 0.25
    ) -> None:
        self._send = send
        self._max_bytes = max_bytes
        self._max_s = max_s
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._bytes = 0
        self._handed_at = 0.0

    def add(self, text: str, *, now: bool = False) -> None:
        """Queue ``text`` (may be empty: then only hand over what waited long enough)."""
        with self._lock:
            if text:
                self._pending.append(text)
                self._bytes += len(text)
            if not self._pending:
                return
            if (
                not now
                and self._bytes < self._max_bytes
                and time.monotonic() - self._handed_at < self._max_s
            ):
                return
            chunk = "".join(self._pending)
            self._pending.clear()
            self._bytes = 0
            self._handed_at = time.monotonic()
            self._send(chunk)


class LineSender:
    """Sends newline-terminated line-protocol text to the agent, or to a file when it cannot."""

    def __init__(
        self,
        socket_path: Path,
        fallback_path: Path,
        *,
        queue_size: int = 4096,
        retry_interval_s: float = 3.0,
        send_timeout_s: float = 2.0,
        replay_window_s: float = 5.0,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.fallback_path = Path(fallback_path)
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._retry_interval_s = retry_interval_s
        self._send_timeout_s = send_timeout_s
        self._replay_window_s = replay_window_s
        self._recent: collections.deque[tuple[float, str]] = collections.deque()
        self._sock: socket.socket | None = None
        self._next_connect = 0.0
        self._file_lock = threading.Lock()
        self._file: TextIO | None = None
        self._thread: threading.Thread | None = None
        self.socket_bytes = 0
        """Bytes accepted by the socket."""
        self.fallback_bytes = 0
        """Bytes appended to the fallback file (including replays)."""
        self.connects = 0
        self.disconnects = 0

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def start(self) -> None:
        """Try the socket once (so the first lines go the right way) and start the thread."""
        self._try_connect()
        self._thread = threading.Thread(target=self._run, name="nrg-torch-sender", daemon=True)
        self._thread.start()

    def send(self, text: str) -> None:
        """Queue ``text`` (whole lines); never blocks."""
        if not text:
            return
        if self._thread is None:
            self._write_file(text)
            return
        try:
            self._queue.put_nowait(text)
        except queue.Full:
            self._write_file(text)

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver everything queued, end the connection cleanly, stop the thread."""
        thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()
            self._thread = None
        self._finish_connection(timeout_s)
        with self._file_lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None

    # --- background thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._deliver(item)  # type: ignore[arg-type]

    def _try_connect(self) -> None:
        self._next_connect = time.monotonic() + self._retry_interval_s
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._send_timeout_s)
        try:
            sock.connect(os.fspath(self.socket_path))
        except OSError:
            sock.close()
            return
        self._sock = sock
        self.connects += 1

    def _deliver(self, text: str) -> None:
        if self._sock is None and time.monotonic() >= self._next_connect:
            self._try_connect()
        sock = self._sock
        if sock is None:
            self._write_file(text)
            return
        try:
            sock.sendall(text.encode(), socket.MSG_NOSIGNAL)  # EPIPE, never SIGPIPE
        except OSError:
            self._drop_connection()
            self._write_file(text)
            return
        self.socket_bytes += len(text)
        now = time.monotonic()
        recent = self._recent
        recent.append((now, text))
        while recent and now - recent[0][0] > self._replay_window_s:
            recent.popleft()

    def _drop_connection(self) -> None:
        """The agent went away: what it may not have read goes to the file."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self.disconnects += 1
        self._next_connect = time.monotonic() + self._retry_interval_s
        replay = "".join(text for _, text in self._recent)
        self._recent.clear()
        if replay:
            self._write_file(replay)

    def _finish_connection(self, timeout_s: float) -> None:
        sock = self._sock
        if sock is None:
            return
        # Half-close and wait for the agent's EOF: it closes once it has read our last line.
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(timeout_s)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if not sock.recv(4096):
                    break
            else:
                raise TimeoutError
        except OSError:
            self._drop_connection()
            return
        sock.close()
        self._sock = None
        self._recent.clear()

    def _write_file(self, text: str) -> None:
        with self._file_lock:
            if self._file is None:
                self.fallback_path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.fallback_path, "a", encoding="utf-8")  # noqa: SIM115
            self._file.write(text)
            self._file.flush()
            self.fallback_bytes += len(text)
