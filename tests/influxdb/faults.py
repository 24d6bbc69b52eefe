"""Fault-injection trials: the installed agent (``nrg-collect``) at 10 Hz against real servers on
loopback, with a file sink beside the InfluxDB sink as the record of what was produced.

Each trial takes a ``scale`` (1 = the short variant the ``faults`` tests run in CI; larger =
longer outages for ``bench/faults.py``), checks what must hold (raising AssertionError) and
returns its figures, which :func:`describe` prints as one line.

The servers: VictoriaMetrics (a real time-series database) and :class:`ScriptedServer` (a real
HTTP server that answers as a misbehaving InfluxDB or proxy would: hangs, echoes headers,
Retry-After: inf).
"""

from __future__ import annotations

import collections
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acquisition.lineproto import decode_line
from tests.influxdb.helpers import fill, small_disk
from tests.influxdb.scripted import Request, ScriptedServer, accept, hang
from tests.servers import VictoriaMetrics, have

__all__ = ["TRIALS", "Agent", "describe"]

NRG_COLLECT = Path(sys.executable).with_name("nrg-collect")
Figures = dict[str, Any]


class Agent:
    """One ``nrg-collect`` child at 10 Hz: procfs in, a file sink and one InfluxDB sink out.

    ``url=None`` leaves the InfluxDB sink out; ``extra`` is TOML appended to the configuration
    (e.g. another collector's table).
    """

    def __init__(
        self,
        tmp: Path,
        url: str | None,
        *,
        influx: dict[str, Any] | None = None,
        extra: str = "",
        file_dir: Path | None = None,
        verbose: bool = False,
        flush_interval: str = "200ms",
        env: dict[str, str] | None = None,
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.file_dir = file_dir or tmp / "out"
        self.log_path = tmp / "agent.log"
        self.verbose = verbose
        self.env = {**os.environ, **(env or {})}
        options = {
            "url": url,
            "bucket": "nrg",
            "retry_initial": "50ms",
            "retry_max": "500ms",
            "fsync": "never",
        }
        options.update(influx or {})
        sink = "\n".join(f"{k} = {_toml(v)}" for k, v in options.items())
        influx_table = f"[[sinks.influxdb]]\n{sink}\n" if url is not None else ""
        (tmp / "cfg.toml").write_text(
            f"""
[agent]
interval = "100ms"
run = "{tmp.name}"
host = "faults"
state_dir = "{tmp / "state"}"
data_dir = "{tmp / "data"}"
stats_interval = "500ms"
flush_interval = "{flush_interval}"
shutdown_timeout = "5s"
batch_size = 50
buffer_limit = 200

[[collectors.procfs]]
per_core = false

[[sinks.file]]
dir = "{self.file_dir}"
fsync = "never"

{influx_table}
{extra}
"""
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [str(NRG_COLLECT), "--config", str(self.tmp / "cfg.toml"), "--quiet"]
        if self.verbose:
            args.append("--verbose")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        start = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=self._log, env=self.env
        )
        deadline = time.monotonic() + 300  # a hang guard: start-up is slow on a loaded machine
        while b"collecting from" not in self.log_path.read_bytes()[start:]:
            assert self.proc.poll() is None, f"nrg-collect exited: {self.log()[-3000:]}"
            assert time.monotonic() < deadline, "nrg-collect did not start"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, float]:
        """Signal, wait; the exit status and the seconds it took to exit."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(120)
        finally:
            self._log.close()
        self.proc = None
        return rc, time.monotonic() - t0

    def kill(self) -> None:
        """SIGKILL (as a crash, or as the teardown after a failed trial)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self._log.close()
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self) -> list[str]:
        """Every line the file sink wrote (the record of what was produced); read while the
        agent runs, a last line without its newline is still being written and is left out."""
        out: list[str] = []
        for path in sorted(self.file_dir.glob("nrg-*.lp")):
            text = path.read_text()
            out.extend(line for line in text[: text.rfind("\n") + 1].split("\n") if line)
        return out

    def sink_stats(self, plugin: str = "influxdb") -> list[tuple[int, dict[str, Any]]]:
        """(time, fields) of a plugin's self-stats (the InfluxDB sink's by default), oldest
        first."""
        out = []
        for line in self.lines():
            if line.startswith("nrg_collect,") and f"plugin={plugin}" in line.split(" ", 1)[0]:
                point = decode_line(line)
                out.append((point.time_ns, dict(point.fields)))
        return out

    def wait_stat(
        self,
        cond: Callable[[dict[str, Any]], bool],
        after_ns: int,
        what: str,
        plugin: str = "influxdb",
    ) -> int:
        """Time of the first self-stat of ``plugin`` after ``after_ns`` that satisfies ``cond``."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for t, fields in self.sink_stats(plugin):
                if t > after_ns and cond(fields):
                    return t
            time.sleep(0.1)
        raise AssertionError(f"gave up waiting for {what}")


@contextmanager
def _agent(agent: Agent) -> Iterator[Agent]:
    try:
        yield agent
    finally:
        agent.kill()


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def _data_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("nrg_collect,")]


def _vm_samples(vm: VictoriaMetrics, run: str) -> collections.Counter[tuple[str, int]]:
    """(metric and labels, ms time) of every stored sample."""
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for series in vm.export(run):
        key = repr(sorted(series["metric"].items()))
        for ts in series["timestamps"]:
            counts[(key, int(ts))] += 1
    return counts


def _line_samples(lines: list[str]) -> collections.Counter[tuple[str, int]]:
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for line in lines:
        point = decode_line(line)
        for name in point.fields:
            labels = dict(point.tags)
            labels["__name__"] = f"{point.measurement}_{name}"
            counts[(repr(sorted(labels.items())), point.time_ns // 1_000_000)] += 1
    return counts


def _compare(produced: list[str], vm: VictoriaMetrics, run: str) -> tuple[int, int, int]:
    """(samples produced, missing on the server, stored more than once)."""
    want = _line_samples(produced)
    have = _vm_samples(vm, run)
    missing = sum((want - have).values())
    duplicated = sum(n - 1 for k, n in have.items() if n > 1 and k in want)
    return sum(want.values()), missing, duplicated


def _vm(tmp: Path) -> VictoriaMetrics:
    if not have("victoria-metrics"):
        raise _Skip("victoria-metrics is not installed")
    server = VictoriaMetrics(tmp / "vm")
    server.start()
    return server


class _Skip(Exception):
    """A trial that cannot run here (the reason is its message)."""


# --- trials ------------------------------------------------------------------------------------


def outage(tmp: Path, scale: float) -> Figures:
    """The database is down for 5 s × scale at 10 Hz: nothing missing or duplicated, replay in
    order as soon as it answers."""
    vm = _vm(tmp)
    try:
        with _agent(Agent(tmp / "a", vm.url)) as agent:
            agent.start()
            time.sleep(2)
            vm.stop()
            time.sleep(5 * scale)
            up_ns = time.time_ns()
            vm.start()
            drained_ns = agent.wait_stat(
                lambda f: f["spool_points"] == 0, up_ns, "the spool to drain"
            )
            time.sleep(1)
            rc, _ = agent.stop()
            assert rc == 0, agent.log()[-2000:]
            stats = agent.sink_stats()
            produced = _data_lines(agent.lines())
            total, missing, duplicated = _compare(produced, vm, agent.tmp.name)
            peak = max(f["spool_bytes"] for _, f in stats)
            replayed = stats[-1][1]["replayed_points"]
    finally:
        vm.stop()
    drain_s = max(1e-3, (drained_ns - up_ns) / 1e9)
    assert missing == 0, f"{missing} samples missing"
    # A batch in flight when the server stopped may have been stored without an answer.
    assert duplicated <= 50 * 10, f"{duplicated} samples stored twice"
    return {
        "outage_s": 5 * scale,
        "samples": total,
        "missing": missing,
        "duplicated": duplicated,
        "spool_peak_bytes": peak,
        "drain_s": round(drain_s, 2),
        "replay_points_per_s": round(replayed / drain_s),
    }


def hung_then_sigterm(tmp: Path, scale: float) -> Figures:
    """A server that accepts and never answers: the failure is said in words, the status changes
    at the first timeout; SIGTERM while it hangs exits in bounded time and a restart against a
    working server delivers everything."""
    with ScriptedServer(hang) as server:
        spool = {"spool_dir": str(tmp / "spool"), "timeout": "1s"}
        agent = Agent(tmp / "a", server.url, influx={**spool, "drain_timeout": "1s"})
        with _agent(agent):
            agent.start()
            time.sleep(3 * scale)
            rc, exit_s = agent.stop()
            log = agent.log()
            produced = _data_lines(agent.lines())
    assert rc == 0, log[-2000:]
    assert "no answer within 1 s from http://" in log, log[-2000:]
    assert "TimeoutError: )" not in log and "()" not in log
    with ScriptedServer(accept) as server:
        again = Agent(tmp / "a", server.url, influx=spool)
        with _agent(again):
            again.start()
            time.sleep(2)
            rc2, _ = again.stop()
            accepted = {x.decode() for x in server.accepted_lines()}
    missing = sum(1 for line in produced if line not in accepted)
    assert rc2 == 0 and missing == 0, f"{missing} of {len(produced)} lines missing after restart"
    return {"points": len(produced), "sigterm_exit_s": round(exit_s, 2), "missing_after_restart": 0}


def kill_9_with_a_spool(tmp: Path, scale: float) -> Figures:
    """kill -9 while the database is down; the next start replays the spool. What is lost is at
    most what the agent held in memory: the samples of the last flush interval."""
    vm = _vm(tmp)
    try:
        vm.stop()
        agent = Agent(tmp / "a", vm.url, flush_interval="500ms")
        with _agent(agent):
            agent.start()
            time.sleep(3 * scale)
            agent.kill()
        produced = _data_lines(agent.lines())
        vm.start()
        again = Agent(tmp / "a", vm.url, flush_interval="500ms")
        with _agent(again):
            again.start()
            time.sleep(2)
            again.stop()
        want = _line_samples(produced)
        have = _vm_samples(vm, agent.tmp.name)
        missing = want - have
    finally:
        vm.stop()
    times = sorted(t for _, t in want)
    lost_ms = (times[-1] - min(t for _, t in missing)) if missing else 0
    assert lost_ms <= 1000, f"lost the last {lost_ms} ms of samples"
    return {
        "samples": sum(want.values()),
        "missing": sum(missing.values()),
        "loss_window_ms": lost_ms,
        "flush_interval_ms": 500,
    }


def disk_full_under_the_file_sink(tmp: Path, scale: float) -> Figures:
    """The file sink's disk fills: the agent lives on, the InfluxDB sink keeps writing, the file
    never holds a torn or duplicated line, and writing resumes once space is free."""
    vm = _vm(tmp)
    try:
        with small_disk(tmp / "disk", 1 << 20) as disk:
            agent = Agent(tmp / "a", vm.url, file_dir=disk / "out")
            with _agent(agent):
                agent.start()
                time.sleep(1)
                filler = fill(disk)
                time.sleep(3 * scale)
                filler.unlink()
                freed_ns = time.time_ns()
                time.sleep(2)
                rc, _ = agent.stop()
                lines = agent.lines()
    finally:
        vm.stop()
    assert rc == 0
    data = _data_lines(lines)
    assert len(set(data)) == len(data), "a line was written twice"
    for line in lines:
        decode_line(line)  # every line whole
    after = sum(1 for line in data if decode_line(line).time_ns > freed_ns)
    assert after > 0, "writing did not resume after space was freed"
    return {"file_lines": len(data), "lines_after_freeing": after}


def token_never_written(tmp: Path, scale: float) -> Figures:
    """A server that echoes the request's headers into 500 and 400 answers, the agent at debug
    level: no piece of the token in its log or any file it wrote."""
    token = secrets.token_hex(24)
    calls = [0]

    def echo(req: Request) -> tuple[int, dict[str, str], bytes]:
        calls[0] += 1
        status = 500 if calls[0] % 2 else 400
        pad = "p" * 970
        body = f"{pad}Authorization: {req.headers.get('Authorization', '')}\n{req.headers}"
        return status, {"Content-Type": "text/plain"}, body.encode()

    with ScriptedServer(echo) as server:
        agent = Agent(
            tmp / "a",
            server.url,
            influx={"token": "${NRG_FAULTS_TOKEN}"},  # from the environment, not the file
            verbose=True,
            env={"NRG_FAULTS_TOKEN": token},
        )
        with _agent(agent):
            agent.start()
            time.sleep(3 * scale)
            agent.stop()
    assert any(r.headers.get("Authorization") == f"Token {token}" for r in server.writes)
    pieces = {token[i : i + 8] for i in range(len(token) - 7)}
    scanned = 0
    for path in [p for p in tmp.rglob("*") if p.is_file()]:
        text = path.read_bytes().decode("utf-8", "replace")
        scanned += len(text)
        leaked = [p for p in pieces if p in text]
        assert not leaked, f"a piece of the token in {path}"
    assert "DEBUG" in agent.log()
    return {"requests": len(server.writes), "bytes_scanned": scanned, "leaks": 0}


def full_spool_disk_then_another_outage(tmp: Path, scale: float) -> Figures:
    """The spool's disk fills during an outage; space is freed, the server returns, then a second
    outage: everything produced after the space was freed reaches the server."""
    vm = _vm(tmp)
    try:
        with small_disk(tmp / "disk", 1 << 20) as disk:
            vm.stop()
            agent = Agent(tmp / "a", vm.url, influx={"spool_dir": str(disk / "spool")})
            with _agent(agent):
                agent.start()
                time.sleep(1)
                filler = fill(disk)
                deadline = time.monotonic() + 60
                while "cannot write" not in agent.log():
                    assert time.monotonic() < deadline, "the spool never hit the full disk"
                    time.sleep(0.1)
                time.sleep(1)
                filler.unlink()
                freed_ns = time.time_ns()
                vm.start()
                agent.wait_stat(lambda f: f["spool_points"] == 0, freed_ns, "a drained spool")
                vm.stop()
                time.sleep(3 * scale)
                up_ns = time.time_ns()
                vm.start()
                agent.wait_stat(lambda f: f["spool_points"] == 0, up_ns, "a drained spool")
                time.sleep(1)
                rc, _ = agent.stop()
                stats = agent.sink_stats()[-1][1]
                after = [
                    line
                    for line in _data_lines(agent.lines())
                    if decode_line(line).time_ns > freed_ns + 500_000_000
                ]
                want = _line_samples(after)
                missing = sum((want - _vm_samples(vm, agent.tmp.name)).values())
    finally:
        vm.stop()
    assert rc == 0
    assert missing == 0, f"{missing} of {sum(want.values())} samples after freeing missing"
    return {
        "lost_while_full": stats["lost_points"],
        "samples_after_freeing": sum(want.values()),
        "missing_after_freeing": missing,
    }


def retry_after_infinity(tmp: Path, scale: float) -> Figures:
    """One 503 with ``Retry-After: inf``: delivery goes on after at most ``retry_max``."""
    answers = [0]

    def script(req: Request) -> tuple[int, dict[str, str], bytes]:
        answers[0] += 1
        if answers[0] == 1:
            return 503, {"Retry-After": "inf"}, b'{"message":"later"}'
        return 204, {}, b""

    with ScriptedServer(script) as server:
        agent = Agent(tmp / "a", server.url)
        with _agent(agent):
            agent.start()
            time.sleep(3 * scale)
            rc, _ = agent.stop()
            produced = _data_lines(agent.lines())
        writes = server.writes
    accepted = {x.decode() for x in server.accepted_lines()}
    missing = sum(1 for line in produced if line not in accepted)
    assert rc == 0 and missing == 0, f"{missing} of {len(produced)} lines never sent"
    gap = _arrival_gap(writes)  # a figure: the agent's retry_max (500 ms) plus scheduling
    return {"points": len(produced), "missing": 0, "first_retry_after_s": round(gap, 2)}


def _arrival_gap(writes: list[Request]) -> float:
    """Seconds between the first request (answered 503) and the next one."""
    return writes[1].at - writes[0].at if len(writes) >= 2 else float("inf")


TRIALS: dict[str, Callable[[Path, float], Figures]] = {
    "outage": outage,
    "hung_then_sigterm": hung_then_sigterm,
    "kill_9_with_a_spool": kill_9_with_a_spool,
    "disk_full_under_the_file_sink": disk_full_under_the_file_sink,
    "token_never_written": token_never_written,
    "full_spool_disk_then_another_outage": full_spool_disk_then_another_outage,
    "retry_after_infinity": retry_after_infinity,
}


def describe(name: str, figures: Figures) -> str:
    return f"{name:<38} " + " ".join(f"{k}={v}" for k, v in figures.items())


def skip_reason(exc: BaseException) -> str | None:
    """The reason a trial could not run here, or None when it failed."""
    if isinstance(exc, _Skip):
        return str(exc)
    if type(exc).__name__ == "Skipped":  # pytest.skip from small_disk
        return str(exc)
    return None


def run_trial_in_pytest(trial: Callable[[Path, float], Figures], name: str, tmp: Path) -> None:
    """Run one trial at scale 1 under pytest: a trial that cannot run here is skipped with its
    reason, any other failure fails the test; the figures line is printed."""
    import pytest

    try:
        figures = trial(tmp, 1.0)
    except Exception as exc:
        reason = skip_reason(exc)
        if reason is None:
            raise
        pytest.skip(reason)
    print(describe(name, figures))
