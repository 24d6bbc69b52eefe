"""Answers from stored points: ``nrg-collect report`` and ``compare``, the tracked run's summary,
and the HTML report. Entry points for the command line are in :mod:`acquisition.report.cli`."""

from __future__ import annotations

from acquisition.report.compare import Comparison, compare
from acquisition.report.recorder import SummaryRecorder, attach_recorder
from acquisition.report.runs import RunInfo, find_runs, load_run

__all__ = [
    "Comparison",
    "RunInfo",
    "SummaryRecorder",
    "attach_recorder",
    "compare",
    "find_runs",
    "load_run",
]
