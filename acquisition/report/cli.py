"""Command-line entry points: ``nrg-collect report``, ``nrg-collect compare`` and the summary a
tracked run (``nrg-collect -- CMD``) prints when CMD exits.

What ``acquisition.cli`` calls:

- ``add_summary_arguments(parser)`` on the main parser (``--summary``, ``--summary-file``,
  ``--ram-unit``, ``--gpu-ram-unit``, ``--time-unit``, ``--carbon-intensity``);
- ``attach_recorder(agent)`` before the tracked command starts, and after it exited and the
  agent shut down, ``print_run_summary(recorder, args, exit_code=…, unavailable=…, tree=…)``;
- ``report_main(argv)`` / ``compare_main(argv)`` for the two subcommands.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from acquisition.carbon import CarbonFigure
from acquisition.config import load_config
from acquisition.errors import ConfigError, NrgError
from acquisition.gc_pause import gc_paused
from acquisition.paths import data_dir
from acquisition.report.compare import compare
from acquisition.report.formats import (
    compare_csv,
    compare_text,
    list_text,
    ranks_csv,
    ranks_text,
    summaries_csv,
    summaries_json,
    summaries_text,
)
from acquisition.report.recorder import SummaryRecorder, attach_recorder
from acquisition.report.runs import (
    PointSource,
    RunInfo,
    find_runs,
    load_run,
    load_run_columns,
    select_runs,
)
from acquisition.run_plan import given_carbon, report_carbon
from acquisition.store import Store
from acquisition.summary import RunSummary, SummaryOptions, format_text, summarize
from acquisition.summary_options import add_summary_arguments, add_unit_arguments

__all__ = [
    "add_summary_arguments",
    "attach_recorder",
    "compare_main",
    "print_run_summary",
    "report_main",
]

HTML_NEEDS_OUTPUT = "--format html needs -o FILE"


def _report_table(config_path: str | None) -> dict[str, Any]:
    """The ``[report]`` settings the config file sets (validated as the agent does); {} when it
    sets none, so the summary can say where its carbon intensity came from."""
    if not config_path:
        return {}
    try:
        data = tomllib.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {config_path}: {exc}") from exc
    table = data.get("report")
    if not table:
        return {}
    report = load_config(config_path).report
    return {key: getattr(report, key) for key in table}


def carbon_figure(args: argparse.Namespace, table: Mapping[str, Any]) -> CarbonFigure | None:
    """The carbon intensity from ``--carbon-intensity``, else ``[report] carbon_intensity``,
    else ``[report] carbon_intensity_g_per_kwh``; None when none is set (the default)."""
    config = getattr(args, "config", None)
    report = load_config(config).report if config else None
    given = getattr(args, "carbon_intensity", None)
    if given is not None:
        return given_carbon(given, report)
    if report is None or not (
        table.get("carbon_intensity") or "carbon_intensity_g_per_kwh" in table
    ):
        return None
    return report_carbon(report)


def summary_options(args: argparse.Namespace, tree: str | None = None) -> SummaryOptions:
    """Units and carbon intensity from the command line, then ``[report]`` of the config."""
    figure = carbon_figure(args, _report_table(getattr(args, "config", None)))
    kwargs: dict[str, Any] = {}
    if figure is not None:
        kwargs = {
            "carbon_intensity_g_per_kwh": figure.g_per_kwh,
            "carbon_intensity_source": figure.source,
            "carbon_given": getattr(args, "carbon_intensity", None) is not None,
        }
    options = SummaryOptions(
        ram_unit=getattr(args, "ram_unit", "gigabytes"),
        gpu_ram_unit=getattr(args, "gpu_ram_unit", "gigabytes"),
        time_unit=getattr(args, "time_unit", "hours"),
        tree=tree,
        **kwargs,
    )
    try:
        options.validate()
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return options


def print_run_summary(
    recorder: SummaryRecorder,
    args: argparse.Namespace,
    *,
    exit_code: int | None,
    unavailable: Mapping[str, str] | None = None,
    tree: int | str | None = None,
    stream: TextIO | None = None,
) -> RunSummary | None:
    """Print (and write to ``--summary-file``) the tracked run's summary; None when nothing
    was recorded at all."""
    points = recorder.points()
    if not points:
        return None
    options = summary_options(args, tree=str(tree) if tree is not None else None)
    summary = summarize(points, options, exit_code=exit_code, unavailable=unavailable)
    if recorder.thinned:
        summary.notes.append(
            f"{recorder.thinned} samples were thinned out to bound memory; energies are exact, "
            "peaks and means are from the samples kept"
        )
    out = stream or sys.stderr
    mode = getattr(args, "summary", "text")
    if mode in ("text", "full"):
        out.write("\n" + format_text(summary, full=mode == "full"))
    elif mode == "json":
        out.write(summary.to_json() + "\n")
    out.flush()
    if getattr(args, "summary_file", None):
        Path(args.summary_file).write_text(summary.to_json() + "\n", encoding="utf-8")
    return summary


# -- report and compare -------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE", help="agent config (its file sink's dir)")
    p.add_argument(
        "--data",
        metavar="DIR",
        action="append",
        help="directory (or file) of .lp/.lp.gz files; again for each host's directory of a "
        "run that spans hosts (read as one)",
    )
    p.add_argument(
        "--influx",
        metavar="URL",
        nargs="?",
        const="",
        help="read from InfluxDB instead of files, with the query library (Flux for InfluxDB "
        "2.x, InfluxQL for 1.x and 3.x, chosen by the server's version): "
        "http://HOST:8086/DATABASE (or /BUCKET); credentials from NRG_INFLUX_USER and "
        "NRG_INFLUX_PASSWORD (1.x), NRG_INFLUX_TOKEN and NRG_INFLUX_ORG (2.x; a token alone "
        "for 3.x). Without URL: the [[sinks.influxdb]] of the config given with -c",
    )
    p.add_argument("--format", choices=("text", "json", "csv", "html"), default="text")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    add_unit_arguments(p)


def data_location(args: argparse.Namespace) -> Path | list[Path]:
    """``--data`` (each one given), else the config's first file sink's directory, else its
    ``data_dir``, else the default data directory."""
    if args.data:
        paths = [Path(d).expanduser() for d in args.data]
        return paths[0] if len(paths) == 1 else paths
    if args.config:
        config = load_config(args.config)
        for spec in config.sinks:
            if spec.name == "file":
                if spec.options.get("path"):
                    return Path(str(spec.options["path"])).expanduser().parent
                if spec.options.get("dir"):
                    return Path(str(spec.options["dir"])).expanduser()
        if config.agent.data_dir:
            return Path(config.agent.data_dir).expanduser()
    return data_dir()


def influx_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with a bare ``--influx`` written ``--influx=``, so that the run name after it
    is not taken for its optional URL (a URL has a scheme: ``http://`` or ``https://``)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--influx" and (i + 1 == len(out) or "://" not in out[i + 1]):
            out[i] = "--influx="
    return out


def _source(args: argparse.Namespace) -> tuple[PointSource, str]:
    """The files (``--data``, the config's file sink, the default data dir) or ``--influx``
    (its URL, else the config's ``[[sinks.influxdb]]``)."""
    if args.influx is not None:
        from acquisition.report.influx import open_influx
        from acquisition.report.influx_target import target_from_config, target_from_url

        url, config = args.influx, args.config
        influx = open_influx(target_from_url(url) if url else target_from_config(config))
        return influx, influx.where
    where = data_location(args)
    if isinstance(where, list):
        return Store(where), ", ".join(str(w) for w in where)
    return Store(where), str(where)


def _write(args: argparse.Namespace, text: str) -> None:
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _summaries(
    store: PointSource, infos: Sequence[RunInfo], options: SummaryOptions
) -> list[RunSummary]:
    out = []
    for info in infos:
        points, columns = load_run_columns(store, info)
        out.append(summarize(points, options, columns=columns))
    return out


PROFILE_NEEDS_TWO = "--profile compares exactly two trace files"


def _run_cli(func: Any, argv: Sequence[str]) -> int:
    try:
        with gc_paused():  # the whole command: many objects, no cycles (acquisition.gc_pause)
            return int(func(argv))
    except (NrgError, ValueError) as exc:
        print(f"nrg-collect: {exc}", file=sys.stderr)
        return 2


def report_main(argv: Sequence[str]) -> int:
    """``nrg-collect report [RUN|EXPERIMENT…] [--list] [--format …] [--data DIR]``."""
    return _run_cli(_report, argv)


def compare_main(argv: Sequence[str]) -> int:
    """``nrg-collect compare A B … [--format …]``: side by side, against A."""
    return _run_cli(_compare, argv)


def _report(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="nrg-collect report", description="Summaries of past runs.")
    p.add_argument("names", nargs="*", metavar="RUN|EXPERIMENT", help="default: the newest run")
    p.add_argument("--list", action="store_true", help="list the runs found")
    p.add_argument(
        "--by",
        choices=("run", "rank"),
        default="run",
        help="rank: one row per rank of a distributed run (host, GPU, steps, time, energy, "
        "waits for the slowest rank) instead of the summary (text and csv; json always has "
        "per_rank)",
    )
    _common(p)
    args = p.parse_args(influx_argv(argv))
    store, where = _source(args)
    options = summary_options(args)
    runs = find_runs(store)
    if args.list:
        rows = [(info, summarize(info.points, options, columns=info.columns)) for info in runs]
        _write(args, list_text(rows))
        return 0
    groups = select_runs(runs, args.names, str(where))
    infos = [info for group in groups for info in group]
    summaries = _summaries(store, infos, options)
    if args.format == "html":
        if not args.output:
            raise NrgError(HTML_NEEDS_OUTPUT)
        from acquisition.report.html import report_html

        points = {id(s): load_run(store, info) for s, info in zip(summaries, infos, strict=True)}
        _write(args, report_html(summaries, [points[id(s)] for s in summaries]))
        return 0
    if args.by == "rank" and args.format in ("text", "csv"):
        render_ranks = ranks_text if args.format == "text" else ranks_csv
        _write(args, render_ranks(summaries))
        return 0
    render = {"text": summaries_text, "json": summaries_json, "csv": summaries_csv}
    _write(args, render[args.format](summaries))
    return 0


def _compare_profiles(args: argparse.Namespace) -> int:
    """``compare --profile a.json b.json``: two energy-annotated traces, operator by operator."""
    if len(args.names) != 2:
        raise NrgError(PROFILE_NEEDS_TWO)
    from acquisition.profiler import compare_profiles, format_comparison

    try:
        result = compare_profiles(*args.names)
    except OSError as exc:
        raise NrgError(f"cannot read trace {exc.filename}: {exc.strerror}") from None
    if args.format == "json":
        import json

        _write(args, json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        _write(args, format_comparison(result))
    return 0


def _compare(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="nrg-collect compare",
        description="Runs or experiments side by side; differences against the first.",
    )
    p.add_argument("names", nargs="+", metavar="RUN|EXPERIMENT")
    p.add_argument(
        "--profile",
        action="store_true",
        help="NAMES are two traces from acquisition.torch.profile: compare them operator by "
        "operator",
    )
    _common(p)
    args = p.parse_args(influx_argv(argv))
    if args.profile:
        return _compare_profiles(args)
    store, where = _source(args)
    options = summary_options(args)
    groups = select_runs(find_runs(store), args.names, str(where))
    summaries = [_summaries(store, group, options) for group in groups]
    result = compare(args.names, summaries)
    if args.format == "html":
        if not args.output:
            raise NrgError(HTML_NEEDS_OUTPUT)
        from acquisition.report.html import compare_html

        _write(args, compare_html(result, summaries))
    elif args.format == "json":
        import json

        _write(args, json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
    elif args.format == "csv":
        _write(args, compare_csv(result))
    else:
        _write(args, compare_text(result))
    return 0
