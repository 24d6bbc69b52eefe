"""Run a command on a real pseudo-terminal, as an interactive shell would: the command leads a
new session whose controlling terminal is the pty, so Ctrl-C (``\\x03`` written to the master)
reaches its foreground process group through the kernel's line discipline."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

_LAUNCH = (
    "import fcntl, os, sys, termios\n"
    "os.setsid()\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


class PtyProcess:
    """A process on the slave side of a pty; the test holds the master."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None = None) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(env),
            cwd=cwd,
            close_fds=True,
        )
        os.close(slave)
        self.output = b""

    def _read_some(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every slave end closed
            return False
        if not chunk:
            return False
        self.output += chunk
        return True

    def expect(self, text: bytes, timeout: float = 60.0) -> None:
        """Read until ``text`` has appeared (AssertionError with the output so far if not)."""
        end = time.monotonic() + timeout
        while text not in self.output:
            left = end - time.monotonic()
            assert left > 0, f"{text!r} not seen; output so far:\n{self.text()}"
            if not self._read_some(min(left, 0.2)) and self.proc.poll() is not None:
                assert text in self.output, f"{text!r} not seen; output:\n{self.text()}"

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for exit, reading everything it printed."""
        end = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < end, f"still running; output:\n{self.text()}"
            self._read_some(0.2)
        while select.select([self.master], [], [], 0.1)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.output += chunk
        os.close(self.master)
        return self.proc.returncode

    def text(self) -> str:
        return self.output.decode("utf-8", "replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
