"""Fault-injection trials of the hook socket: the installed agent (``nrg-collect``) at 10 Hz with
the hooks collector listening and a file sink as the record of what it produced and counted.

Each trial takes a ``scale`` (1 = the short variant the ``faults`` tests run in CI; larger = more
garbage, a longer line, more connections for ``bench/faults.py``), checks what must hold (raising
AssertionError) and returns its figures, which :func:`describe` prints as one line. The agent is
started by :class:`tests.influxdb.faults.Agent`; the counts come from the hooks collector's
``nrg_collect`` self-stats as the file sink wrote them.
"""

from __future__ import annotations

import itertools
import os
import random
import resource
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from acquisition.lineproto import decode_line
from collectors.hooks import REJECT_REASONS
from tests.influxdb.faults import Agent, Figures, _agent, _Skip, describe, skip_reason

__all__ = ["TRIALS", "describe", "skip_reason"]

MAX_CONNECTIONS = 64  # the collector's default, written into the configuration
STEP = b"nrg_step,experiment=faults,run=faults step=%di,duration_seconds=0.5\n"
FORGED = (
    b"nrg_collect,plugin=influxdb,kind=sink lost_points=0i\n",
    b"nrg_energy,host=faults,source=rapl energy_joules=1e9\n",
    b"cpu,cpu=total utilization_ratio=0.0\n",
)
INVALID_UTF8 = (
    b"nrg_step,run=\xff\xfe step=1i\n",
    b"\xc3\x28 v=1i\n",
    b"nrg_step step=1i \xed\xa0\x80\n",  # a UTF-16 surrogate encoded as UTF-8
)
MALFORMED = (
    b"nrg_step\n",
    b"nrg_step step=\n",
    b"nrg_step,=x step=1i\n",
    b"nrg_step step=1i not-a-time\n",
    b'nrg_step step="unterminated\n',
    b"nrg_step step=1i 1 2\n",
)
DENSE = b"x\n" * 524_288  # 1 MiB of the cheapest lines to send: the most rejects per byte
PROC_MEASUREMENT = "memory"  # procfs writes one per tick: the agent's sampling clock
INTERVAL_S = 0.1  # the agent's interval (tests.influxdb.faults.Agent: 10 Hz)


# --- the agent with the hooks collector ----------------------------------------------------------


@contextmanager
def _hooked_agent(tmp: Path, *, sock_dir: Path | None = None) -> Iterator[tuple[Agent, Path]]:
    """A started agent listening on a socket in a fresh short directory (Unix socket addresses
    are limited to 107 bytes; pytest's tmp paths can be longer); killed on the way out."""
    with ExitStack() as stack:
        if sock_dir is None:
            sock_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nrg-hf-")))
        path = sock_dir / "run" / "hooks.sock"
        hooks = (
            "[[collectors.hooks]]\n"
            f'socket_path = "{path}"\n'
            f"max_connections = {MAX_CONNECTIONS}\n"
            "ingest = false\n"
        )
        agent = stack.enter_context(_agent(Agent(tmp / "a", None, extra=hooks)))
        agent.start()
        yield agent, path


def _connect(path: Path) -> socket.socket:
    """A connection; while the listen backlog is full (EAGAIN), tried again until accepted."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)  # a hang guard for the sends
    deadline = time.monotonic() + 60
    while True:
        try:
            sock.connect(os.fsencode(path))
            return sock
        except BlockingIOError:
            if time.monotonic() > deadline:
                sock.close()
                raise
            time.sleep(0.001)


def _send(path: Path, data: bytes) -> None:
    """Send on a new connection and wait until the agent has read it all and closed its end (a
    sender that does not wait piles up connections beyond max_connections, which are refused)."""
    with _connect(path) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"", "the agent sent something back"


def _hook_stats(agent: Agent) -> dict[str, Any]:
    """The latest self-stats of the hooks collector."""
    stats = agent.sink_stats("hooks")
    assert stats, "no nrg_collect self-stats of the hooks collector in the file sink's output"
    return stats[-1][1]


def _wait_hooks(agent: Agent, cond: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """The first self-stats of the hooks collector written from now on that satisfy ``cond``."""
    after_ns = time.time_ns()
    t = agent.wait_stat(cond, after_ns, what, plugin="hooks")
    return next(fields for at, fields in agent.sink_stats("hooks") if at == t and cond(fields))


def _rejected(fields: dict[str, Any]) -> int:
    return sum(int(fields[f"rejected_{r}"]) for r in REJECT_REASONS)


def _sample_times(agent: Agent) -> list[int]:
    """The times of the procfs samples in the file sink's output, in order."""
    times = {
        decode_line(line).time_ns
        for line in agent.lines()
        if line.startswith(PROC_MEASUREMENT + ",")
    }
    return sorted(times)


def _waited_s(agent: Agent) -> float:
    """Seconds the agent's event-loop thread has so far spent runnable but waiting for a CPU
    (``/proc/<pid>/schedstat``, second field): time that load elsewhere on the machine took from
    it. 0 where the kernel keeps no scheduler statistics (the floor is then the strict one)."""
    assert agent.proc is not None
    try:
        return int(Path(f"/proc/{agent.proc.pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _lateness_s(agent: Agent) -> float:
    """The procfs collector's latest ``lateness_max_seconds`` self-stat: the longest its tick
    had to wait for the event loop (or for a CPU) so far."""
    stats = agent.sink_stats("procfs")
    return float(stats[-1][1]["lateness_max_seconds"]) if stats else 0.0


def _sampling(agent: Agent, start_ns: int, end_ns: int, waited_s: float = 0.0) -> Figures:
    """Samples taken while the fault lasted: at least half of what the measured conditions
    allow, the nominal 10 Hz over the time the agent had a CPU (the window less ``waited_s``,
    its measured wait for one), and no fewer than one per interval plus the largest lateness its
    self-stats admit; no gap longer than the floor allows beyond that wait."""
    times = [t for t in _sample_times(agent) if start_ns <= t <= end_ns]
    window_s = (end_ns - start_ns) / 1e9
    ran_s = max(window_s - waited_s, 0.0)
    late_s = _lateness_s(agent)
    allowed = min(ran_s / INTERVAL_S, window_s / (INTERVAL_S + late_s))
    edges = [start_ns, *times, end_ns]
    gap_s = max(b - a for a, b in itertools.pairwise(edges)) / 1e9
    assert len(times) >= int(allowed / 2), (
        f"{len(times)} samples in {window_s:.1f} s of the fault ({waited_s:.1f} s of it waiting "
        f"for a CPU, ticks up to {late_s:.2f} s late): fewer than half of {allowed:.0f}"
    )
    assert gap_s < max(2.0, window_s / 2) + waited_s, f"sampling stopped for {gap_s:.1f} s"
    return {
        "fault_s": round(window_s, 1),
        "waited_s": round(waited_s, 2),
        "lateness_max_s": round(late_s, 2),
        "samples_during": len(times),
        "samples_nominal": int(window_s * 10),
        "max_gap_s": round(gap_s, 2),
    }


def _check_log(agent: Agent, fields: dict[str, Any]) -> int:
    """The listener's warnings: one per reason that occurred (later ones only counted), and no
    error or traceback anywhere in the agent's log. Returns how many there were."""
    log = agent.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    warned = sum(1 for line in log.splitlines() if " WARNING collectors.hooks:" in line)
    reasons = [f"rejected_{r}" for r in REJECT_REASONS]
    reasons += ["connections_refused_limit", "connections_refused_uid"]
    assert warned == sum(1 for r in reasons if fields[r]), (warned, fields)
    return warned


def _steps(agent: Agent) -> list[str]:
    return [line for line in agent.lines() if line.startswith("nrg_step,")]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# --- garbage -------------------------------------------------------------------------------------


def _stream(path: Path, unit: bytes, seconds: float) -> int:
    """Send ``unit`` again and again on one connection for ``seconds``; the bytes sent, once the
    agent has read them all."""
    sent = 0
    with _connect(path) as sock:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sock.sendall(unit)
            sent += len(unit)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b"", "the agent sent something back"
    return sent


def _skipped(line: bytes) -> bool:
    """A line the listener ignores without counting: blank or a comment (after UTF-8 decoding)."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False
    return not text or text.startswith("#")


def _garbage_round(rng: random.Random) -> tuple[bytes, int]:
    """One connection's worth of garbage and how many of its lines must be rejected."""
    noise = rng.randbytes(64 * 1024) + b"\n"
    lines = [*noise.split(b"\n")[:-1]]
    expected = sum(1 for line in lines if not _skipped(line))
    fixed = FORGED + INVALID_UTF8 + MALFORMED
    return noise + b"".join(fixed), expected + len(fixed)


def garbage_on_the_socket(tmp: Path, scale: float) -> Figures:
    """For 1 s × scale, connection after connection of random bytes, invalid UTF-8, malformed
    line protocol and forged agent measurements; then for 1 s × scale one connection streaming
    dense garbage (2-byte lines). The agent keeps sampling through both, every line is rejected
    and counted by reason, none is written, and a valid step afterwards is accepted."""
    rng = random.Random(19)
    with _hooked_agent(tmp) as (agent, path):
        start_ns, waited0 = time.time_ns(), _waited_s(agent)
        deadline = time.monotonic() + scale
        sent = rounds = expected = 0
        while time.monotonic() < deadline:
            data, n = _garbage_round(rng)
            _send(path, data)
            sent += len(data)
            rounds += 1
            expected += n
        dense_ns, waited1 = time.time_ns(), _waited_s(agent)
        dense = _stream(path, DENSE, scale)
        sent += dense
        expected += dense // 2
        end_ns, waited2 = time.time_ns(), _waited_s(agent)
        _send(path, STEP % 1)
        # _send waited for the agent to read each connection: all garbage was seen before the step.
        _wait_hooks(agent, lambda f: f["lines_accepted"] >= 1, "the valid step")
        time.sleep(0.5)
        _sampling(agent, start_ns, dense_ns, waited1 - waited0)
        dense_figures = _sampling(agent, dense_ns, end_ns, waited2 - waited1)
        figures = _sampling(agent, start_ns, end_ns, waited2 - waited0)
        rc, _ = agent.stop()
        fields = _hook_stats(agent)
        lines = agent.lines()
        steps = _steps(agent)
    assert rc == 0, agent.log()[-2000:]
    assert fields["lines_accepted"] == 1, fields
    assert _rejected(fields) == expected, (expected, fields)
    assert fields["rejected_measurement"] >= len(FORGED) * rounds, fields
    assert fields["rejected_encoding"] >= len(INVALID_UTF8) * rounds, fields
    assert fields["rejected_syntax"] >= len(MALFORMED) * rounds + dense // 2, fields
    assert fields["connections_total"] == rounds + 2, fields
    assert fields["connections_refused_limit"] == 0, fields
    warnings = _check_log(agent, fields)
    # What the listener passes on carries the sender's pid: only the one step may.
    from_job = [x for x in lines if f",pid={os.getpid()}" in x.split(" ", 1)[0]]
    assert from_job == steps and len(steps) == 1, from_job
    assert not [x for x in lines if "plugin=influxdb" in x or x.startswith("nrg_energy,")]
    return {
        "connections": rounds,
        "bytes": sent,
        "rejected": _rejected(fields),
        **{r: fields[f"rejected_{r}"] for r in ("encoding", "syntax", "measurement")},
        "step_accepted": 1,
        "warnings": warnings,
        **figures,
        "dense_s": dense_figures["fault_s"],
        "dense_samples": dense_figures["samples_during"],
        "dense_max_gap_s": dense_figures["max_gap_s"],
    }


# --- an oversize line ----------------------------------------------------------------------------


def oversize_line(tmp: Path, scale: float) -> Figures:
    """One line of 50 MB × scale without a newline: the agent's memory stays bounded (RSS of
    the child from /proc), the line is counted as too_long, and a valid step on the same
    connection after its newline and one on a fresh connection are accepted."""
    size = int(50e6 * scale)
    chunk = b"x" * (1 << 20)
    with _hooked_agent(tmp) as (agent, path):
        assert agent.proc is not None
        pid = agent.proc.pid
        rss_before = _rss_kib(pid)
        rss_peak = rss_before
        t0 = time.monotonic()
        with _connect(path) as sock:
            sock.sendall(b'nrg_step step=1i,pad="')  # a line that starts as a valid one
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
                rss_peak = max(rss_peak, _rss_kib(pid))
            sock.sendall(b"x" * (size % len(chunk)))
            send_s = time.monotonic() - t0
            sock.sendall(b'"\n' + STEP % 1)
        _send(path, STEP % 2)
        fields = _wait_hooks(agent, lambda f: f["lines_accepted"] >= 2, "both valid steps")
        rss_peak = max(rss_peak, _rss_kib(pid))
        rc, _ = agent.stop()
        fields = _hook_stats(agent)
        steps = _steps(agent)
    growth_mib = (rss_peak - rss_before) / 1024
    assert rc == 0, agent.log()[-2000:]
    assert fields["rejected_too_long"] == 1 and _rejected(fields) == 1, fields
    assert fields["lines_accepted"] == 2 and len(steps) == 2, (fields, steps)
    warnings = _check_log(agent, fields)
    # The listener holds at most max_line_bytes (64 KiB) of a line and one read (256 KiB); a
    # copy of the line would be 50 MB × scale.
    assert growth_mib < 25, f"the agent's RSS grew by {growth_mib:.1f} MiB"
    return {
        "line_mb": round(size / 1e6),
        "send_mb_per_s": round(size / 1e6 / max(send_s, 1e-3)),
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_peak_mib": round(rss_peak / 1024, 1),
        "rejected_too_long": fields["rejected_too_long"],
        "steps_accepted": 2,
        "warnings": warnings,
    }


# --- a connection flood --------------------------------------------------------------------------


def _raise_fd_limit(want: int) -> int:
    """Raise this process's open-file limit towards ``want``; the limit it got."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def _closed_by_peer(sock: socket.socket) -> bool:
    """True when the agent closed this connection (a read that would not wait says EOF)."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        sock.settimeout(timeout)


def _open_flood(path: Path, n: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            socks.append(_connect(path))
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def connection_flood(tmp: Path, scale: float) -> Figures:
    """1,000 × scale connections opened and held: the agent keeps sampling, closes every one
    beyond max_connections and counts it; a step on a held connection it kept, and one on a new
    connection after the flood, are accepted."""
    want = int(1000 * scale)
    limit = _raise_fd_limit(want + 256)
    n = min(want, limit - 256)
    if n <= MAX_CONNECTIONS:
        raise _Skip(f"the open-file limit ({limit}) leaves room for {n} connections")
    with _hooked_agent(tmp) as (agent, path):
        start_ns, waited0 = time.time_ns(), _waited_s(agent)
        t0 = time.monotonic()
        socks = _open_flood(path, n)
        try:
            open_s = time.monotonic() - t0
            fields = _wait_hooks(
                agent, lambda f: f["connections_total"] >= n, "every connection accepted or refused"
            )
            assert fields["connections_open"] == MAX_CONNECTIONS, fields
            by_peer = [_closed_by_peer(s) for s in socks]
            closed = [s for s, c in zip(socks, by_peer, strict=True) if c]
            kept = [s for s, c in zip(socks, by_peer, strict=True) if not c]
            assert kept, "the agent kept none of the connections"
            kept[0].sendall(STEP % 1)
            fields = _wait_hooks(agent, lambda f: f["lines_accepted"] >= 1, "a step while flooded")
            end_ns, waited = time.time_ns(), _waited_s(agent) - waited0
        finally:
            for s in socks:
                s.close()
        _wait_hooks(agent, lambda f: f["connections_open"] == 0, "the flood's connections closed")
        _send(path, STEP % 2)
        after = _wait_hooks(agent, lambda f: f["lines_accepted"] >= 2, "a step after the flood")
        figures = _sampling(agent, start_ns, end_ns, waited)
        rc, _ = agent.stop()
        steps = _steps(agent)
    assert rc == 0, agent.log()[-2000:]
    assert fields["connections_refused_limit"] == n - MAX_CONNECTIONS, fields
    assert len(closed) == n - MAX_CONNECTIONS and len(kept) == MAX_CONNECTIONS, len(closed)
    assert after["lines_accepted"] == 2 and len(steps) == 2, (after, steps)
    assert _rejected(after) == 0, after
    warnings = _check_log(agent, after)
    return {
        "connections": n,
        "open_s": round(open_s, 2),
        "kept": len(kept),
        "refused_limit": fields["connections_refused_limit"],
        "steps_accepted": 2,
        "warnings": warnings,
        **figures,
    }


# --- the socket file is owner-only ---------------------------------------------------------------

_CONNECT_AS = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError:
    sys.exit(13)
try:  # the agent may close before the line is sent
    s.sendall(sys.argv[2].encode())
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
except ConnectionError:
    pass
"""


def _other_python() -> str | None:
    """A Python the other user (nobody) can run (the test's own may live under /root)."""
    for exe in ("/usr/bin/python3", sys.executable):
        try:
            probe = subprocess.run(
                [exe, "-I", "-c", "pass"], user=65534, group=65534, extra_groups=[], cwd="/"
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return exe
    return None


def _as_nobody(python: str, path: Path, line: str) -> int:
    """Exit status of a process of another user (nobody) that connects and sends ``line``:
    13 when the connection is refused by the file's permissions."""
    proc = subprocess.run(
        [python, "-I", "-c", _CONNECT_AS, str(path), line],
        user=65534,
        group=65534,
        extra_groups=[],
        capture_output=True,
        timeout=60,
        cwd="/",
    )
    assert proc.returncode in (0, 13), proc.stderr.decode(errors="replace")
    return proc.returncode


def socket_owner_only(tmp: Path, scale: float) -> Figures:
    """The socket file is created mode 0600, owned by the agent's user, in a directory it creates
    mode 0700, whatever the umask. As root, also: another user is refused by the file mode, and
    (with the mode loosened by hand) by the peer-credential check, which counts it."""
    del scale  # nothing to stretch
    with tempfile.TemporaryDirectory(prefix="nrg-hf-") as d, ExitStack() as stack:
        old = os.umask(0)  # the child inherits it: modes must not come from the umask
        try:
            agent, path = stack.enter_context(_hooked_agent(tmp, sock_dir=Path(d)))
        finally:
            os.umask(old)
        st, dir_st = path.lstat(), path.parent.stat()
        figures: Figures = {
            "socket_mode": oct(stat.S_IMODE(st.st_mode)),
            "dir_mode": oct(stat.S_IMODE(dir_st.st_mode)),
        }
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600, figures
        assert stat.S_IMODE(dir_st.st_mode) == 0o700, figures
        assert st.st_uid == dir_st.st_uid == os.geteuid()
        python = _other_python() if os.geteuid() == 0 else None
        if python is not None:
            figures.update(_other_user(agent, path, python))
        else:
            figures["other_user"] = "not_tried(needs_root_and_a_python_nobody_can_run)"
        rc, _ = agent.stop()
    assert rc == 0, agent.log()[-2000:]
    return figures


def _other_user(agent: Agent, path: Path, python: str) -> Figures:
    # Open the way to the file only: the file's own mode must refuse the other user.
    os.chmod(path.parent.parent, 0o755)
    os.chmod(path.parent, 0o755)
    refused_by_mode = _as_nobody(python, path, (STEP % 1).decode())
    assert refused_by_mode == 13, f"another user could connect (exit {refused_by_mode})"
    # Loosened by hand, the file lets the connection through; the peer check still refuses it.
    os.chmod(path, 0o666)
    rc = _as_nobody(python, path, (STEP % 2).decode())
    assert rc == 0, rc
    fields = _wait_hooks(agent, lambda f: f["connections_refused_uid"] >= 1, "the uid refusal")
    time.sleep(0.5)
    fields = _hook_stats(agent)
    assert fields["connections_refused_uid"] == 1 and fields["lines_accepted"] == 0, fields
    assert not _steps(agent)
    _check_log(agent, fields)
    return {"other_user_by_mode": "refused", "other_user_by_peer_check": "refused"}


TRIALS: dict[str, Callable[[Path, float], Figures]] = {
    "hooks_garbage_on_the_socket": garbage_on_the_socket,
    "hooks_oversize_line": oversize_line,
    "hooks_connection_flood": connection_flood,
    "hooks_socket_owner_only": socket_owner_only,
}
