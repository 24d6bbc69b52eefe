"""The tracked command of ``nrg-collect -- CMD``: started, signalled and waited for like a shell does.

On a terminal the job shares the agent's process group, which is the terminal's foreground group:
Ctrl-C reaches the job as SIGINT straight from the terminal, and the agent only waits. Away from a
terminal the job gets a process group of its own, so a signal sent to the agent's group reaches
the job once, through the agent. Every further SIGINT/SIGTERM to the agent (or each
``--kill-after`` period that passes) escalates one step: SIGINT, then SIGTERM, then SIGKILL, each
announced on stderr. The exit status is the job's, or 128 + n when signal n ended it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from acquisition.paths import ENV_AGENT_COLLECTORS, ENV_AGENT_DATA
from acquisition.point import FieldValue, Point

__all__ = [
    "ANNOUNCE_FORWARDED",
    "ANNOUNCE_SIGNAL",
    "ANNOUNCE_WAITING",
    "MSG_NOT_EXECUTABLE",
    "MSG_NOT_FOUND",
    "Job",
    "JobNotStartable",
    "check_command",
    "exit_status",
    "job_env",
    "not_started_point",
]

LADDER = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
"""The escalation steps, mildest first."""

MSG_NOT_FOUND = "nrg-collect: {command}: command not found"
MSG_NOT_EXECUTABLE = "nrg-collect: {command}: permission denied (not an executable file)"
ANNOUNCE_WAITING = (
    "nrg: the signal reached the job (pid {pid}); waiting for it to exit "
    "(again to escalate{kill_after})"
)
ANNOUNCE_FORWARDED = (
    "nrg: {signame} forwarded to the job (pid {pid}); waiting for it to exit "
    "(again to escalate{kill_after})"
)
ANNOUNCE_SIGNAL = "nrg: sending {signame} to the job (pid {pid}){why}"


class JobNotStartable(Exception):
    """The command cannot be run; ``status`` is the shell's code (127 not found, 126 not
    executable) and the message says which."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def check_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The executable ``argv[0]`` resolves to, as the shell would find it, or JobNotStartable."""
    command = argv[0]
    env = os.environ if env is None else env
    if "/" in command:
        path = Path(command)
        if not path.exists():
            raise JobNotStartable(MSG_NOT_FOUND.format(command=command), 127)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise JobNotStartable(MSG_NOT_EXECUTABLE.format(command=command), 126)
        return command
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise JobNotStartable(MSG_NOT_FOUND.format(command=command), 127)
    return found


def exit_status(returncode: int) -> int:
    """A shell's ``$?``: the exit code, or 128 + n when signal n ended the process."""
    return 128 - returncode if returncode < 0 else returncode


def _terminal_fd() -> int | None:
    for fd in (0, 2, 1):
        try:
            if os.isatty(fd):
                return fd
        except OSError:
            continue
    return None


def _foreground_on_terminal() -> bool:
    """True when this process group is the foreground group of the terminal it runs on (so a
    Ctrl-C there reached every member of the group, the job included)."""
    fd = _terminal_fd()
    if fd is None:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


class Job:
    """One tracked command: start it, pass on signals, escalate, and wait for its exit status."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        kill_after: float | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.kill_after = kill_after
        self._announce = announce or _to_stderr
        self.process: asyncio.subprocess.Process | None = None
        self.shares_terminal = False
        self.level = -1
        """Index in LADDER of the strongest signal the job got so far (-1: none)."""
        self._timer: asyncio.TimerHandle | None = None
        self.started_ns = 0
        """Unix-epoch ns just before the job was spawned."""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, env: Mapping[str, str]) -> None:
        """Start the job (after :func:`check_command`); OSError becomes JobNotStartable."""
        self.shares_terminal = _foreground_on_terminal()
        self.started_ns = time.time_ns()
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                env=dict(env),
                # Away from a terminal: a group of its own, so one signal to our group does not
                # reach the job twice (once directly, once forwarded).
                process_group=None if self.shares_terminal else 0,
            )
        except OSError as exc:
            status = 126 if isinstance(exc, PermissionError) else 127
            raise JobNotStartable(
                f"nrg-collect: cannot start {self.argv[0]}: {exc.strerror or exc}", status
            ) from exc

    def event(self, event: str, exit_code: int | None = None) -> Point:
        """The ``nrg_job`` point of the job's ``spawn`` (stamped when it was started) or its
        ``exit`` (stamped now, with its exit status): together they bound the run's window."""
        fields: dict[str, FieldValue] = {"event": event, "pid": self.pid}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        when = self.started_ns if event == "spawn" else time.time_ns()
        return Point("nrg_job", {}, fields, when)

    async def wait(self, emit: Callable[[Point], None] | None = None) -> int:
        """Wait for the job; its exit status as a shell reports it. ``emit`` gets the job's
        ``nrg_job`` spawn point at once and its exit point at the end: the run's window."""
        assert self.process is not None
        if emit is not None:
            emit(self.event("spawn"))
        code = await self.process.wait()
        if self._timer is not None:
            self._timer.cancel()
        status = exit_status(code)
        if emit is not None:
            emit(self.event("exit", status))
        return status

    def on_signal(self, signum: int) -> None:
        """The agent received SIGINT/SIGTERM: pass it on (first time) or escalate."""
        if not self.running:
            return
        if self.level >= 0:
            self.escalate("")
            return
        hint = f", or wait {self.kill_after:g} s" if self.kill_after else ""
        if self._reached_job_already(signum):
            # The terminal delivered this signal to the job too: sending another would
            # interrupt its own cleanup.
            self.level = 0 if signum == signal.SIGINT else 1
            self._announce(ANNOUNCE_WAITING.format(pid=self.pid, kill_after=hint))
        else:
            sig = signal.Signals(signum)
            self.level = LADDER.index(sig) if sig in LADDER else 1
            self._send(sig)
            self._announce(
                ANNOUNCE_FORWARDED.format(signame=sig.name, pid=self.pid, kill_after=hint)
            )
        self._arm_timer()

    def _reached_job_already(self, signum: int) -> bool:
        """Ctrl-C on the terminal we share, or its hang-up, reached the whole group."""
        if not self.shares_terminal:
            return False
        if signum == signal.SIGHUP:
            # A closed terminal hangs up the session leader: a shell passes SIGHUP on to each
            # of its jobs (our group, the job included); when we lead the session, only we got it.
            return os.getsid(0) != os.getpid()
        return signum == signal.SIGINT and _foreground_on_terminal()

    def escalate(self, why: str) -> None:
        """Send the next signal of the ladder (SIGTERM, then SIGKILL) and say so."""
        if not self.running or self.level >= len(LADDER) - 1:
            return
        self.level += 1
        sig = LADDER[self.level]
        self._announce(ANNOUNCE_SIGNAL.format(signame=sig.name, pid=self.pid, why=why))
        self._send(sig)
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.kill_after and self.level < len(LADDER) - 1:
            loop = asyncio.get_running_loop()
            why = f": still running {self.kill_after:g} s after the last signal (--kill-after)"
            self._timer = loop.call_later(self.kill_after, self.escalate, why)

    def _send(self, sig: signal.Signals) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        try:
            self.process.send_signal(sig)
        except ProcessLookupError:
            pass


def _to_stderr(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # the terminal hung up
        pass


_PYTHON_OPTIONS_WITH_ARGUMENT = {"-W", "-X", "-Q"}
_LAUNCHERS = {"torchrun", "deepspeed", "accelerate", "uv", "poetry", "pipenv", "conda", "mpirun"}


def _is_interpreter(name: str) -> bool:
    return name.startswith(("python", "pypy")) or name in _LAUNCHERS


def job_name(argv: Sequence[str]) -> str:
    """What a run of ``argv`` is called: the script, not the interpreter.

    ``python train.py`` → ``train.py``; ``python -m pkg.train`` → ``pkg.train``; ``torchrun
    --nproc-per-node 2 train.py`` → ``train.py``; ``./job.sh`` → ``job.sh``."""
    first = Path(argv[0]).name or argv[0]
    if not _is_interpreter(first):
        return first
    python = first.startswith(("python", "pypy"))
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            return arg[2:]
        if arg == "-c":
            return first
        script = not arg.startswith("-") and (python or arg.endswith(".py") or "/" in arg)
        if script:
            return Path(arg).name or arg
        if arg in _PYTHON_OPTIONS_WITH_ARGUMENT:
            i += 1
        i += 1
    return first


def default_run_name(argv: Sequence[str], utc: str) -> str:
    """``train.py-20260101T120000Z``: the job's name and its UTC start time."""
    return f"{job_name(argv)}-{utc}"


def job_env(
    tags: Mapping[str, str],
    socket_path: str,
    files_dir: Path | None,
    collectors: Mapping[str, object],
) -> dict[str, str]:
    """The job's environment: the run's tags, its own hooks socket and, where the agent writes
    files, their directory and the agent's collectors (a ``Tracker`` in the job reads them
    instead of sampling again)."""
    env = dict(os.environ)
    for tag in ("experiment", "run"):
        if tag in tags:
            env[f"NRG_{tag.upper()}"] = tags[tag]
    env["NRG_SOCKET"] = socket_path
    if files_dir is not None:
        env[ENV_AGENT_DATA] = str(files_dir)
        env[ENV_AGENT_COLLECTORS] = json.dumps(collectors)
    return env


def not_started_point(status: int) -> Point:
    """The ``nrg_job`` exit point of a command that could not be started (it has no pid): its
    status as a shell gives it, 126 or 127. A started command's comes from :meth:`Job.wait`."""
    return Point("nrg_job", {}, {"event": "exit", "exit_code": status}, time.time_ns())
