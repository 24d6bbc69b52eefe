"""``nrg-collect``: run the agent, print one round, list collectors, print a sample config.

nrg-collect [--config FILE] [--interval 1s] [--experiment E] [--run R] [--track PID]...
            [--quiet] [-- COMMAND ...]
nrg-collect --once [--config FILE]     one round of line protocol on stdout, then exit
nrg-collect list [--config FILE]       each collector and why it is unavailable here
nrg-collect config                     a commented sample config covering every plugin
nrg-collect emonpi-sim [...]           an emonPi simulator on a pseudo-terminal
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import os
import signal
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acquisition import __version__
from acquisition.agent import Agent, default_config
from acquisition.config import AgentConfig, Config, load_config, parse_config
from acquisition.errors import ConfigError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.registry import COLLECTORS, PROCESSORS, SINKS, load_class

__all__ = ["main", "sample_config"]

log = logging.getLogger("nrg")

_SUBCOMMANDS = {
    "emonpi-sim": "collectors.emonpi.sim:main",
    "report": "acquisition.report.cli:report_main",
    "compare": "acquisition.report.cli:compare_main",
}


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s nrg %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nrg-collect",
        description="Measure the energy and resources of training runs (procfs, RAPL, NVML, "
        "emonPi) and write InfluxDB line protocol (local files by default).",
        epilog="Subcommands: 'list' (collectors available here), 'config' (sample config), "
        "'emonpi-sim' (serial simulator). With '-- COMMAND', runs and tracks COMMAND and stops "
        "when it exits.",
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
    p.add_argument("--quiet", "-q", action="store_true", help="no live status line")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"nrg {__version__}")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    from acquisition.report.cli import add_summary_arguments

    add_summary_arguments(p)
    return p


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config) if args.config else parse_config("", "<embedded default>")
    agent = config.agent
    if args.interval:
        from acquisition.config import parse_duration

        agent.interval = parse_duration(args.interval, "--interval")
        agent.validate()
    if args.experiment:
        agent.experiment = args.experiment
    if args.run:
        agent.run = args.run
    return default_config(config)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _SUBCOMMANDS:
        module_name, _, attr = _SUBCOMMANDS[argv[0]].partition(":")
        try:
            func = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            print(f"nrg-collect {argv[0]}: not available: {exc}", file=sys.stderr)
            return 2
        return int(func(argv[1:]))
    if argv and argv[0] == "config":
        sys.stdout.write(sample_config())
        return 0
    command = "run"
    if argv and argv[0] in ("list", "run"):
        command = argv.pop(0)
    args = _parser().parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
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
        return asyncio.run(_run(config, args))
    except ConfigError as exc:
        print(f"nrg-collect: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _list(config: Config) -> int:
    """Open every configured collector once and say whether it works here, and why not."""
    agent = Agent(config)
    await agent.open_collectors(streams=True)
    rows: list[tuple[str, str]] = []
    for c in agent.collectors:
        describe = getattr(c.instance, "describe", None)
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


async def _once(config: Config) -> int:
    """Two readings one interval apart (so rates exist); print the second round."""
    agent = Agent(config)
    await agent.open_collectors(streams=False)
    for u in agent.state.unavailable:
        log.info("%s: %s", u.label, u.reason)
    if not agent.collectors:
        print("nrg-collect --once: no collector is available here", file=sys.stderr)
        return 1
    first: list[Point] = []
    second: list[Point] = []
    for sink in (first, second):
        start = time.monotonic()
        for c in agent.collectors:
            await c.instance.collect(sink.append, time.time_ns())
        if sink is first:
            await asyncio.sleep(max(0.0, config.agent.interval - (time.monotonic() - start)))
    for c in agent.collectors:
        await c.instance.aclose()
    encoder = LineEncoder(agent.tags)
    sys.stdout.write(encoder.encode_many(second))
    sys.stdout.flush()
    return 0


async def _run(config: Config, args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    child: asyncio.subprocess.Process | None = None
    if args.command and not config.agent.run and not os.environ.get("NRG_RUN"):
        config.agent.run = (
            f"{Path(args.command[0]).name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        )
    agent = Agent(config)
    tracked: set[int] = agent.context.status.setdefault("tracked_pids", set())
    tracked.update(args.track)
    from acquisition.report.cli import attach_recorder, print_run_summary

    recorder = attach_recorder(agent) if args.command else None
    await agent.start()
    exit_code = 0
    waiters: list[asyncio.Task[Any]] = []
    if args.command:
        env = dict(os.environ)
        for tag in ("experiment", "run"):
            if tag in agent.tags:
                env[f"NRG_{tag.upper()}"] = agent.tags[tag]
        try:
            child = await asyncio.create_subprocess_exec(*args.command, env=env)
        except OSError as exc:
            print(f"nrg-collect: cannot start {args.command[0]}: {exc.strerror}", file=sys.stderr)
            await agent.shutdown()
            return 127
        tracked.add(child.pid)
        waiters.append(asyncio.create_task(child.wait()))
        waiters[0].add_done_callback(lambda _t: stop.set())
    status_task = None
    if sys.stderr.isatty() and not args.quiet:
        status_task = asyncio.create_task(_live_status(agent))
    try:
        await stop.wait()
    finally:
        if status_task is not None:
            status_task.cancel()
            sys.stderr.write("\n")
        if child is not None and child.returncode is None:
            child.send_signal(signal.SIGTERM)
            await child.wait()
        await agent.shutdown()
    if child is not None and child.returncode is not None:
        exit_code = child.returncode
        if exit_code < 0:  # ended by signal n: report it as a shell does
            exit_code = 128 - exit_code
    if recorder is not None and child is not None:
        print_run_summary(
            recorder,
            args,
            exit_code=exit_code,
            unavailable={u.label: u.reason for u in agent.state.unavailable},
            tree=child.pid,
        )
    return exit_code


async def _live_status(agent: Agent) -> None:
    last_points, last_t = agent.bus.points, time.monotonic()
    while True:
        await asyncio.sleep(1.0)
        now = time.monotonic()
        line = agent.status_line(agent.bus.points - last_points, now - last_t)
        last_points, last_t = agent.bus.points, now
        sys.stderr.write("\r\x1b[2K" + line[:200])
        sys.stderr.flush()


# -- sample config ------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if value is None:
        return '""  # unset'
    return repr(str(value))


def _dataclass_lines(cls: type[Any], commented: bool) -> list[str]:
    lines = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        doc = f.metadata.get("doc", "")
        kind = typing.get_origin(hints[f.name])
        if kind is typing.Literal:
            doc = (
                (doc + "; " if doc else "")
                + "one of "
                + ", ".join(map(repr, typing.get_args(hints[f.name])))
            )
        if f.metadata.get("duration"):
            default = f"{default:g}s"
        prefix = "# " if commented else ""
        comment = f"  # {doc}" if doc else ""
        lines.append(f"{prefix}{f.name} = {_toml_value(default)}{comment}")
    return lines


def sample_config() -> str:
    """A commented TOML config with every key of the agent and of every plugin, at its default."""
    out = [
        "# nrg-collect configuration (TOML). Every key is shown at its default; uncomment to change.",
        "# Strings may use ${ENV} or ${ENV:-default}; durations take 500ms, 2s, 1m; sizes 64MiB.",
        "# Without any [[collectors.*]] table every collector that works here runs; without any",
        "# [[sinks.*]] table points go to the file sink.",
        "",
        "[agent]",
        *_dataclass_lines(AgentConfig, commented=True),
    ]
    for kind, table, extra in (
        (
            "collectors",
            COLLECTORS,
            '# interval = "1s"  # this collector\'s own interval\n# timeout = "5s"',
        ),
        ("sinks", SINKS, '# batch_size = 5000\n# flush_interval = "1s"\n# buffer_limit = 100000'),
        ("processors", PROCESSORS, ""),
    ):
        for name in table:
            out.append("")
            try:
                cls = load_class(kind, name)
            except ImportError as exc:
                out.append(f"# [[{kind}.{name}]]  (not installed here: {exc})")
                continue
            doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
            if doc:
                out.append(f"# {doc[0]}")
            out.append(f"# [[{kind}.{name}]]")
            if extra:
                out.extend(extra.splitlines())
            config_class = getattr(cls, "config_class", None)
            if config_class is not None:
                out.extend(_dataclass_lines(config_class, commented=True))
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
