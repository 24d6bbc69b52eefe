"""Fixtures of the training-side tests: real CPU torch, private dirs, a real Unix-socket peer."""

from __future__ import annotations

import os
import socket
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from acquisition.torch.launch import LAUNCHERS

# This CPU wheel warns at import when NumPy is absent (it is not a dependency of nrg); with
# warnings as errors that would fail every test here, so the one message is filtered at import.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    import torch  # noqa: F401


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every nrg path and tag variable at the test's own directory."""
    launchers = [name for entry in LAUNCHERS for name in entry[1:]]
    ids = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE")
    for name in ("NRG_EXPERIMENT", "NRG_RUN", "LOCAL_RANK", *launchers, *ids):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NRG_SOCKET", str(tmp_path / "absent.sock"))
    monkeypatch.setenv("NRG_FALLBACK_DIR", str(tmp_path / "fallback"))
    monkeypatch.setenv("NRG_GRAPH_DIR", str(tmp_path / "graphs"))
    monkeypatch.setenv("NRG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("NRG_RUNTIME_DIR", str(tmp_path / "run"))
    return tmp_path


class Listener:
    """A minimal agent stand-in: accepts connections on a real Unix socket, keeps every byte.

    Closes each connection after the peer's EOF (as the real listener does), so the sender's
    end-of-run handshake completes. ``kill()`` drops everything at once, like a killed agent.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = bytearray()
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(os.fspath(path))
        os.chmod(path, 0o600)
        self._server.listen(8)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                self.connections += 1
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                conn.close()
                return
            with self._lock:
                self.data += chunk

    def text(self) -> str:
        with self._lock:
            return self.data.decode()

    def kill(self) -> None:
        """Close the listening socket and every connection without reading further."""
        self._server.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
        os.unlink(self.path)


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    path = tmp_path / "hooks.sock"
    monkeypatch.setenv("NRG_SOCKET", str(path))
    peer = Listener(path)
    yield peer
    if path.exists():
        peer.kill()
