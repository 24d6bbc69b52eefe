"""``nrg-collect``: run the agent, track a command, print one round, list collectors, print a
sample config.

nrg-collect [GLOBAL OPTIONS] [-- COMMAND ...]   run the agent (and track COMMAND until it exits)
nrg-collect [GLOBAL OPTIONS] --once             one round of line protocol on stdout, then exit
nrg-collect [GLOBAL OPTIONS] list               each collector and why it is unavailable here
nrg-collect config                              a commented sample config covering every plugin
nrg-collect emonpi-sim [...]                    an emonPi simulator on a pseudo-terminal

Global options may come before the subcommand (``nrg-collect -c agent.toml list``) or after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acquisition import __version__
from acquisition.agent import Agent, default_config
from acquisition.config import Config, load_config, parse_config, parse_duration, sanitize_tag
from acquisition.energy import EnergyTotals, no_energy_message, say_when_still
from acquisition.errors import ConfigError, NoData
from acquisition.job import (
    Job,
    JobNotStartable,
    check_command,
    default_run_name,
    job_env,
    not_started_point,
)
from acquisition.lineproto import LineEncoder
from acquisition.live import live_line_wanted
from acquisition.point import Point
from acquisition.run_plan import prepare_run

__all__ = ["SUBCOMMANDS", "RunOutcome", "Subcommand", "after_run", "main"]

log = logging.getLogger("nrg")


# -- subcommands --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subcommand:
    """One ``nrg-collect NAME`` subcommand.

    ``target`` is ``"module:function"`` (imported only when the subcommand runs) or a callable;
    it is called with the argument list and returns the exit status. With ``global_options``
    the global options given before the subcommand (``-c FILE``, ``-v`` ...) are passed in
    front of its own arguments, so its parser sees ``nrg-collect -c cfg report X`` as
    ``["-c", "cfg", "X"]``.
    """

    target: str | Callable[[list[str]], int]
    help: str
    global_options: bool = True


SUBCOMMANDS: dict[str, Subcommand] = {
    "run": Subcommand(lambda argv: _main_run(argv, "run"), "run the agent (the default)"),
    "list": Subcommand(lambda argv: _main_run(argv, "list"), "collectors available here"),
    "config": Subcommand(lambda argv: _print_sample(), "print a commented sample config", False),
    "simulate": Subcommand("acquisition.simulate:main", "simulated RAPL, GPUs, emonPi", False),
    "emonpi-sim": Subcommand(
        "collectors.emonpi.sim:main", "emonPi simulator on a pseudo-terminal", False
    ),
    "report": Subcommand("acquisition.report.cli:report_main", "summaries of past runs"),
    "compare": Subcommand(
        "acquisition.report.cli:compare_main", "runs or experiments side by side"
    ),
    "index": Subcommand("acquisition.store_index:main", "step indexes for fast reports", False),
}
"""Subcommand name → handler; add a line here to add a subcommand."""


# -- after the tracked command ------------------------------------------------------------------


@dataclass
class RunOutcome:
    """What a finished tracked run hands to :func:`after_run`."""

    config: Config
    tags: dict[str, str]
    command: list[str]
    exit_code: int
    start_ns: int
    end_ns: int
    args: argparse.Namespace
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    """(collector, reason) for every collector that could not run here."""
    no_energy_reason: str = ""
    """Empty when an energy source was read; else why none was, and how to fix it."""


AFTER_RUN: list[Callable[[RunOutcome], None]] = []
"""Called in order by :func:`after_run` (e.g. a summary printer)."""


def after_run(outcome: RunOutcome, extra: Sequence[Callable[[RunOutcome], None]] = ()) -> None:
    """Runs once after the tracked command exited and the agent drained its sinks."""
    for hook in [*AFTER_RUN, *extra]:
        try:
            hook(outcome)
        except Exception as exc:  # a broken printer must not change the job's exit status
            log.error("after-run step %s failed: %r", getattr(hook, "__name__", hook), exc)


# -- argument parsing ---------------------------------------------------------------------------


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s nrg %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nrg-collect",
        usage="%(prog)s [options] [-- COMMAND ...]\n       %(prog)s {"
        + ",".join(SUBCOMMANDS)
        + "} ...",
        description="Measure the energy and resources of training runs (procfs, RAPL, NVML, "
        "emonPi) and write InfluxDB line protocol (local files by default).",
        epilog="Subcommands: "
        + "; ".join(f"'{name}' ({sub.help})" for name, sub in SUBCOMMANDS.items())
        + ". With '-- COMMAND', runs and tracks COMMAND and stops when it exits.",
    )
    p.add_argument("--config", "-c", metavar="FILE", help="TOML config (default: embedded)")
    p.add_argument("--once", action="store_true", help="print one round of line protocol, exit")
    p.add_argument("--interval", metavar="DURATION", help="collection interval, e.g. 100ms")
    p.add_argument("--experiment", help="experiment tag (else NRG_EXPERIMENT)")
    p.add_argument("--run", help="run tag (else NRG_RUN, else derived from COMMAND)")
    p.add_argument(
        "--track",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="track this process tree (repeatable)",
    )
    p.add_argument(
        "--kill-after",
        metavar="DURATION",
        help="after Ctrl-C or SIGTERM, escalate to SIGTERM then SIGKILL when COMMAND is still "
        "running this long after the last signal (default: only on a further Ctrl-C)",
    )
    p.add_argument(
        "--require-energy",
        action="store_true",
        help="exit 3 (before starting COMMAND) when no energy source is readable here",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no live status line")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    from acquisition.summary_options import add_summary_arguments

    add_summary_arguments(p)
    p.add_argument("--version", action="version", version=f"nrg {__version__}")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    rest: list[str] = args.command
    if rest and rest[0] in SUBCOMMANDS:
        before = argv[: len(argv) - len(rest)]
        sub = SUBCOMMANDS[rest[0]]
        sub_argv = [*before, *rest[1:]] if sub.global_options else rest[1:]
        return _dispatch(rest[0], sub, sub_argv)
    return _main_run(argv, "run")


def _dispatch(name: str, sub: Subcommand, argv: list[str]) -> int:
    func = sub.target
    if isinstance(func, str):
        module_name, _, attr = func.partition(":")
        try:
            func = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            print(f"nrg-collect {name}: not available: {exc}", file=sys.stderr)
            return 2
    assert callable(func)
    return int(func(argv))


def _print_sample() -> int:
    from acquisition.sample import sample_config

    sys.stdout.write(sample_config())
    return 0


def _main_run(argv: list[str], command: str) -> int:
    args = _parser().parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if command == "list" and args.command:
        print(f"nrg-collect list: unexpected arguments {args.command}", file=sys.stderr)
        return 2
    quiet_logs = args.once or command == "list"
    _setup_logging("debug" if args.verbose else "warning" if quiet_logs else "info")
    try:
        config = _load(args)
        if not args.verbose:
            logging.getLogger().setLevel(
                logging.WARNING if quiet_logs else config.agent.log_level.upper()
            )
        if command == "list":
            return asyncio.run(_list(config))
        if args.once:
            return asyncio.run(_once(config))
        if args.command:
            try:
                check_command(args.command)
            except JobNotStartable as exc:
                print(exc, file=sys.stderr)
                return exc.status
        return asyncio.run(_run(config, args))
    except ConfigError as exc:
        print(f"nrg-collect: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config) if args.config else parse_config("", "<embedded default>")
    agent = config.agent
    if args.interval:
        agent.interval = parse_duration(args.interval, "--interval")
        try:
            agent.validate()
        except ValueError as exc:
            raise ConfigError(f"--interval: {exc}") from exc
    if args.kill_after is not None:
        args.kill_after = parse_duration(args.kill_after, "--kill-after") or None
    if args.experiment:
        agent.experiment = args.experiment
    if args.run:
        agent.run = args.run
    return prepare_run(default_config(config), args)


# -- list and --once ----------------------------------------------------------------------------


async def _list(config: Config) -> int:
    """Open every configured collector once and say whether it works here, and why not."""
    agent = Agent(config)
    await agent.open_collectors(streams=True)
    rows: list[tuple[str, str]] = []
    for c in agent.collectors:
        problem, detail = await _probe(c.instance)
        if problem is not None:
            rows.append((c.label, f"unavailable: {problem}"))
            continue
        describe = getattr(c.instance, "describe", None)
        if not detail:
            detail = describe() if callable(describe) else "available"
        rows.append((c.label, f"available: {detail}" if detail != "available" else detail))
    for u in agent.state.unavailable:
        reason = u.reason if u.reason.startswith("unavailable") else f"unavailable: {u.reason}"
        rows.append((u.label, reason))
    for c in agent.collectors:
        try:
            await c.instance.aclose()
        except Exception as exc:
            log.debug("closing %s: %r", c.label, exc)
    order = {s.name: i for i, s in enumerate(config.collectors)}
    rows.sort(key=lambda r: order.get(r[0].split("-")[0], 99))
    width = max((len(r[0]) for r in rows), default=8)
    for label, text in rows:
        print(f"{label:<{width}}  {text}")
    return 0


async def _probe(instance: Any) -> tuple[str | None, str]:
    """(why a collector that opened still cannot read here, or None; what its probe found).
    Uses the plugin's ``probe()`` where it has one; a serial-port collector without one gets
    its port opened."""
    probe = getattr(instance, "probe", None)
    if callable(probe):
        try:
            result = probe()
            if asyncio.iscoroutine(result):
                result = await result
        except NoData as exc:
            return str(exc), ""
        except Exception as exc:
            return f"probe failed: {exc!r}", ""
        return None, result if isinstance(result, str) else ""
    port = getattr(instance, "port", None)
    if isinstance(port, str) and port:
        baudrate = getattr(getattr(instance, "config", None), "baudrate", 9600)
        return await asyncio.to_thread(_open_serial, port, int(baudrate)), ""
    return None, ""


def _open_serial(port: str, baudrate: int) -> str | None:
    try:
        import serial  # pyserial: only for the collectors that read a serial port
    except ImportError as exc:
        return f"pyserial is not installed ({exc})"
    try:
        serial.Serial(port, baudrate=baudrate, timeout=0, exclusive=True).close()
    except (OSError, ValueError) as exc:  # serial.SerialException is an OSError
        return f"cannot open {port}: {exc}"
    return None


ONCE_GAP_S = 0.1
"""``--once``: seconds between its two readings (rates need two); shorter if ``interval`` is."""
ONCE_STREAM_WAIT_S = {"emonpi": 10.0}
"""``--once``: how long to wait for a first reading of a push source (an emonPi sends a frame
every 5 to 10 s); other push sources (the hooks socket) are not read by ``--once``."""
ONCE_SKIPPED = "nrg-collect --once: {label}: no reading within {wait:g} s, skipped"
ONCE_NOTHING = "nrg-collect --once: no collector is available here"


async def _once(config: Config) -> int:
    """Two readings ONCE_GAP_S apart (so rates exist) and the first reading of each push source
    that has one; print the second round and those readings."""
    agent = Agent(config)
    await agent.open_collectors(streams=True)
    for u in agent.state.unavailable:
        log.info("%s: %s", u.label, u.reason)
    polled = [c for c in agent.collectors if hasattr(c.instance, "collect")]
    streams = [c for c in agent.collectors if c.label.split("-")[0] in ONCE_STREAM_WAIT_S]
    if not polled and not streams:
        print(ONCE_NOTHING, file=sys.stderr)
        await _close_all(agent)
        return 1
    started = time.monotonic()
    pushed = {c.label: _Received() for c in streams}
    tasks = [asyncio.create_task(c.instance.run(pushed[c.label].emit)) for c in streams]
    first: list[Point] = []
    second: list[Point] = []
    for round_points in (first, second):
        start = time.monotonic()
        for c in polled:
            await c.instance.collect(round_points.append, time.time_ns())
        if round_points is first and polled:
            gap = min(config.agent.interval, ONCE_GAP_S)
            await asyncio.sleep(max(0.0, gap - (time.monotonic() - start)))
    for c in streams:
        wait = ONCE_STREAM_WAIT_S[c.label.split("-")[0]]
        got = pushed[c.label]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(got.first.wait(), wait - (time.monotonic() - started))
        if not got.points:
            print(ONCE_SKIPPED.format(label=c.label, wait=wait), file=sys.stderr)
        second.extend(got.points)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await _close_all(agent)
    sys.stdout.write(LineEncoder(agent.tags).encode_many(second))
    sys.stdout.flush()
    return 0


class _Received:
    """Points a push source emitted, and an event set at the first."""

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.first = asyncio.Event()

    def emit(self, point: Point) -> None:
        self.points.append(point)
        self.first.set()


async def _close_all(agent: Agent) -> None:
    for c in agent.collectors:
        try:
            await c.instance.aclose()
        except Exception as exc:
            log.debug("closing %s: %r", c.label, exc)


# -- the agent, with or without a tracked command -----------------------------------------------


class _Signals:
    """SIGINT/SIGTERM while the agent runs: to the job while it runs, else stop; once stopping,
    a further signal cuts the final flush short."""

    def __init__(self, job: Job | None) -> None:
        self.job = job
        self.stop = asyncio.Event()
        self.abort = asyncio.Event()
        self.draining = False

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.on_signal, sig)

    def on_signal(self, signum: int) -> None:
        if self.job is not None and self.job.running:
            self.job.on_signal(signum)
        elif self.draining or self.stop.is_set():
            if not self.abort.is_set():
                _announce(MSG_FLUSH_ABORT)
            self.abort.set()
        else:
            _announce(MSG_STOPPING)
            self.stop.set()


MSG_STOPPING = "nrg: stopping; flushing what was collected (again to cut the flush short)"
MSG_FLUSH_ABORT = "nrg: cutting the final flush short; what is still queued goes to the spool"


def _announce(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # the terminal hung up
        pass


def _own_socket(config: Config, agent: Agent) -> str:
    """The hooks socket of a tracked job: ``NRG_SOCKET`` when set, else the ``socket_path`` the
    config gives, else ``hooks-<agent pid>.sock`` in the runtime dir, so that another agent
    listening on the default socket never receives this job's steps. Its listener ingests no
    fallback file (unless the config sets ``ingest``): those are other runs', left for an agent
    that runs without a command, and ingesting them would put them in this run."""
    for spec in config.collectors:
        if spec.name == "hooks":
            spec.options.setdefault("ingest", False)
    if os.environ.get("NRG_SOCKET"):
        return os.environ["NRG_SOCKET"]
    path = str(agent.context.runtime_dir / f"hooks-{os.getpid()}.sock")
    hooks = [spec for spec in config.collectors if spec.name == "hooks"]
    for spec in hooks:
        if spec.options.get("socket_path"):
            return str(spec.options["socket_path"])
    for spec in hooks:
        spec.options["socket_path"] = path
    return path


async def _run(config: Config, args: argparse.Namespace) -> int:
    start_ns = time.time_ns()
    command: list[str] = list(args.command)
    if command and not config.agent.run and not os.environ.get("NRG_RUN"):
        utc = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start_ns / 1e9))
        config.agent.run = sanitize_tag(default_run_name(command, utc))
    job = Job(command, kill_after=args.kill_after) if command else None
    signals = _Signals(job)
    signals.install()
    agent = Agent(config)
    tracked: set[int] = agent.context.status.setdefault("tracked_pids", set())
    tracked.update(args.track)
    socket_path = _own_socket(config, agent) if job is not None else ""
    summary = _attach_summary(agent, job) if job is not None else None
    await agent.start()
    labels = [c.label for c in agent.collectors]
    no_energy = no_energy_message(labels, [(u.label, u.reason) for u in agent.state.unavailable])
    if no_energy:
        _announce(no_energy + (f"\n{MSG_REQUIRE_ENERGY}" if args.require_energy else ""))
        if args.require_energy:
            await agent.shutdown()
            return 3
    # The energy collectors that opened may all be judged not advancing later: said then.
    still = asyncio.create_task(say_when_still(labels, agent.unavailable, _announce))
    tasks = [t for t in (still, _start_live(agent, args)) if t is not None]
    exit_code = 0
    try:
        if job is not None and not signals.stop.is_set():
            exit_code = await _track(job, agent, socket_path, tracked)
        else:
            await signals.stop.wait()
            exit_code = 130 if job is not None else 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        signals.draining = True
        await agent.shutdown(abort=signals.abort)
    if job is not None:
        after_run(
            RunOutcome(
                config=config,
                tags=dict(agent.tags),
                command=command,
                exit_code=exit_code,
                start_ns=start_ns,
                end_ns=time.time_ns(),
                args=args,
                unavailable=agent.unavailable(),
                no_energy_reason=no_energy,
            ),
            [summary] if summary is not None else [],
        )
    return exit_code


MSG_REQUIRE_ENERGY = "nrg-collect: --require-energy: not starting without an energy source"

MSG_RUN_MISMATCH = (
    "the job names its run {job!r} but this agent tags its own points run={agent!r}; the "
    "job's steps and the system data will not join. Start nrg-collect with --run {job}, or "
    "let instrument() take its run from NRG_RUN (no run= argument)"
)


class _RunWatch:
    """Says once when the job's ``nrg_run`` start names a run other than the agent's."""

    def __init__(self, agent_run: str) -> None:
        self.agent_run = agent_run
        self.said = False

    def offer(self, point: Point) -> None:
        if point.measurement != "nrg_run" or self.said:
            return
        job_run = point.tags.get("run")
        if job_run is not None and job_run != self.agent_run:
            self.said = True
            log.warning(MSG_RUN_MISMATCH.format(job=job_run, agent=self.agent_run))


def _attach_summary(agent: Agent, job: Job) -> Callable[[RunOutcome], None]:
    """Record the run's points from the bus; the returned step prints the run summary."""
    from acquisition.report.cli import attach_recorder, print_run_summary

    recorder = attach_recorder(agent)

    def print_summary(outcome: RunOutcome) -> None:
        print_run_summary(
            recorder,
            outcome.args,
            exit_code=outcome.exit_code,
            unavailable=dict(outcome.unavailable),
            tree=job.pid if job.process is not None else None,  # None: it never started
        )

    return print_summary


async def _track(job: Job, agent: Agent, socket_path: str, tracked: set[int]) -> int:
    """Start the job and wait for it; its exit status (127/126 when it cannot start)."""
    agent.bus.add_sink(_RunWatch(agent.tags.get("run", "")).offer)
    try:
        unavailable = {u.label: u.reason for u in agent.state.unavailable}
        collectors = {"available": [c.label for c in agent.collectors], "unavailable": unavailable}
        await job.start(job_env(agent.tags, socket_path, agent.files_dir(), collectors))
    except JobNotStartable as exc:
        print(exc, file=sys.stderr)
        agent.bus.emit(not_started_point(exc.status))
        return exc.status
    tracked.add(job.pid)
    return await job.wait(agent.bus.emit)


def _start_live(agent: Agent, args: argparse.Namespace) -> asyncio.Task[None] | None:
    """The live line (power, energy, points/s, sinks) on stderr when it is a terminal."""
    if not live_line_wanted(sys.stderr, args.quiet):
        return None
    from acquisition.live import LiveLine

    totals = EnergyTotals()
    agent.bus.add_sink(totals.offer)
    last = [agent.bus.points, time.monotonic()]

    def render() -> str:
        now, points = time.monotonic(), agent.bus.points
        line = agent.status_line(
            int(points - last[0]), now - last[1], totals.summary() or "no energy source"
        )
        last[:] = [points, now]
        return line

    return asyncio.create_task(LiveLine(render).run(), name="live line")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
