"""The cyclic collector paused over a report's reading and summary (acquisition.gc_pause)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from acquisition.errors import NrgError
from acquisition.gc_pause import gc_paused
from acquisition.point import Point
from acquisition.report import cli
from acquisition.summary import build, summarize


def test_paused_inside_and_enabled_again_after_even_on_an_error() -> None:
    """Guards: no collection inside, nested pauses keep it paused, and the collector runs
    again after, whatever ends the block."""
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError), gc_paused():
        _ = 1 / 0
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_summary_is_made_with_the_collector_paused_and_leaves_it_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guards: summarize pauses the collector while it works, never after (a Tracker
    summarises inside a training process), an error included."""
    seen: list[bool] = []
    real = build.resources

    def probe(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "resources", probe)
    points = [
        Point("rapl", {"domain": "package"}, {"energy_joules": float(t)}, t * 10**9)
        for t in range(3)
    ]
    summarize(points)
    assert seen == [False]
    assert gc.isenabled()
    with pytest.raises(ValueError):
        summarize([])
    assert gc.isenabled()


def test_a_report_command_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards: ``nrg-collect report`` pauses the collector for the whole command (finding,
    loading, summarising and printing), and leaves it running, an error included."""
    seen: list[bool] = []

    def command(argv: Any) -> int:
        seen.append(gc.isenabled())
        if argv:
            raise NrgError("no such run")
        return 0

    monkeypatch.setattr(cli, "_report", command)
    assert cli.report_main([]) == 0
    assert cli.report_main(["x"]) == 2
    assert seen == [False, False]
    assert gc.isenabled()
