"""report and compare on stored runs of known power: distributed runs, experiments, the
differences and their significance, run listing, and the recorder's memory bound."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from acquisition.errors import ConfigError, NrgError
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.report import SummaryRecorder, compare, find_runs, load_run
from acquisition.report.cli import (
    compare_main,
    print_run_summary,
    report_main,
    summary_options,
)
from acquisition.report.formats import list_text
from acquisition.report.influx_target import INFLUX_NO_DATABASE
from acquisition.report.runs import NO_SUCH_RUN, RunInfo, select_runs
from acquisition.store import Store
from acquisition.summary import SummaryOptions, summarize
from tests.answers.runs import NS, T0, KnownRun


def store_runs(d: Path, runs: list[KnownRun], untag_sources: bool = False) -> Path:
    d.mkdir(exist_ok=True)
    for i, run in enumerate(runs):
        pts = run.points()
        if untag_sources:  # an agent that tags nothing: its points carry no run
            pts = [
                Point(
                    p.measurement,
                    {k: v for k, v in p.tags.items() if k not in ("run", "experiment")},
                    p.fields,
                    p.time_ns,
                )
                if p.measurement in ("rapl", "emonpi")
                else p
                for p in pts
            ]
        (d / f"nrg-{i:03d}.lp").write_text(LineEncoder().encode_many(pts))
    return d


def test_distributed_run_is_one_run(tmp_path: Path) -> None:
    a = KnownRun(host="h1", rank="0")
    b = KnownRun(host="h2", rank="1", package_w=35.0)
    store = Store(store_runs(tmp_path / "d", [a, b]))
    runs = find_runs(store)
    assert [(r.experiment, r.run) for r in runs] == [("e1", "r1")]
    assert runs[0].hosts == {"h1", "h2"}
    s = summarize(load_run(store, runs[0]))
    assert s.hosts == ["h1", "h2"] and s.ranks == ["0", "1"]
    expected = (a.inside_w + b.inside_w) * a.duration_s
    assert s.energy.total_j == pytest.approx(expected, rel=1e-9)
    per_host = {h["host"]: h for h in s.per_host}
    assert per_host["h2"]["energy_j"] == pytest.approx(b.inside_w * b.duration_s, rel=1e-9)
    assert per_host["h1"]["ranks"][0]["steps"] == a.epochs * a.steps
    # the two ranks' steps with the same number are one step of the run, of both hosts' energy
    assert s.steps.count == a.epochs * a.steps
    assert s.steps.samples == 2 * a.epochs * a.steps * (a.samples or 0)
    assert s.steps.energy_j is not None
    assert s.steps.energy_j["mean"] == pytest.approx((a.inside_w + b.inside_w) * a.step_s, rel=1e-9)


def test_sources_of_an_untagged_agent_join_the_run(tmp_path: Path) -> None:
    run = KnownRun()
    store = Store(store_runs(tmp_path / "d", [run], untag_sources=True))
    (info,) = find_runs(store)
    s = summarize(load_run(store, info))
    assert s.energy.total_j == pytest.approx(run.inside_w * run.duration_s, rel=1e-9)


def test_compare_runs_differences_and_significance() -> None:
    base = summarize(KnownRun(run="a").points())
    same = summarize(KnownRun(run="b").points())
    hotter = summarize(KnownRun(run="c", package_w=45.0).points())
    c = compare(["a", "b", "c"], [[base], [same], [hotter]])
    fig = {f.name: f for f in c.figures}
    energy = fig["energy"].values
    run = KnownRun()
    assert energy[2].diff == pytest.approx(20.0 * run.duration_s, rel=1e-6)
    assert energy[2].diff_ratio == pytest.approx(20.0 / run.inside_w, rel=1e-6)
    assert energy[2].significant is True
    assert energy[1].diff == pytest.approx(0.0, abs=1e-9)
    assert energy[1].significant is False
    step = fig["energy per step"].values
    assert step[2].diff == pytest.approx(20.0 * run.step_s, rel=1e-6)
    assert fig["energy rapl:package-0"].values[2].diff == pytest.approx(20.0 * run.duration_s)


def test_compare_experiments_mean_sd_n() -> None:
    a = [summarize(KnownRun(run=f"a{i}", package_w=w).points()) for i, w in enumerate((20.0, 30.0))]
    b = [summarize(KnownRun(run=f"b{i}", package_w=w).points()) for i, w in enumerate((60.0, 70.0))]
    c = compare(["A", "B"], [a, b])
    energy = next(f for f in c.figures if f.name == "energy").values
    d = KnownRun().duration_s
    dram = KnownRun().dram_w
    assert energy[0].n == 2 and energy[0].value == pytest.approx((25.0 + dram) * d)
    assert energy[0].sd == pytest.approx(10.0 * d / 2**0.5)
    assert energy[1].diff == pytest.approx(40.0 * d)
    assert energy[1].significant is True  # 40 W apart, runs 10 W apart


def _with_rss(run: KnownRun, combined_bytes: list[int]) -> list[Point]:
    pts = run.points()
    for i, rss in enumerate(combined_bytes):
        tags = {"host": "h1", "run": run.run, "tree": "4242", "scope": "combined"}
        fields = {"rss_bytes": rss, "cpu_cores": 0.5, "threads": 3}
        pts.append(Point("process", tags, fields, run.job_start + i * NS))
    return pts


@pytest.mark.parametrize("unit", ["bytes", "megabytes", "gigabytes"])
def test_compare_peak_memory_is_in_decimal_megabytes(unit: str) -> None:
    """Guards: compare's peak memory is the combined RSS peak in MB (10**6 bytes, the unit
    it states), whatever unit the summaries were made in, to a fraction of a megabyte. Peaks
    320_500_000 and 500_250_000 bytes: 320.5 MB and 500.25 MB, 179.75 MB apart (in MiB it
    would read 305.7 and 477.1; whole megabytes, 320 and 500)."""
    opts = SummaryOptions(ram_unit=unit)  # type: ignore[arg-type]
    a = summarize(_with_rss(KnownRun(run="a"), [100_000_000, 320_500_000]), opts)
    b = summarize(_with_rss(KnownRun(run="b"), [500_250_000, 200_000_000]), opts)
    fig = next(f for f in compare(["a", "b"], [[a], [b]]).figures if f.name.startswith("peak"))
    assert fig.unit == "MB"
    values = [v.value for v in fig.values]
    assert values == [pytest.approx(320.5, rel=1e-12), pytest.approx(500.25, rel=1e-12)]
    assert fig.values[1].diff == pytest.approx(179.75, rel=1e-12)


def test_select_and_errors(tmp_path: Path) -> None:
    store = Store(
        store_runs(tmp_path / "d", [KnownRun(run="x"), KnownRun(run="y", t0=T0 + 100 * NS)])
    )
    runs = find_runs(store)
    assert [r.run for r in select_runs(runs, [], "d")[0]] == ["y"]  # the newest
    assert [r.run for r in select_runs(runs, ["e1"], "d")[0]] == ["x", "y"]
    with pytest.raises(NrgError) as info:
        select_runs(runs, ["zz"], "d")
    assert str(info.value) == NO_SUCH_RUN.format(name="zz", where="d")


def test_report_main_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = store_runs(tmp_path / "d", [KnownRun(run="x"), KnownRun(run="y", t0=T0 + 100 * NS)])
    assert report_main(["--data", str(d), "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out[1:]] == ["x", "y"]
    assert report_main(["--data", str(d), "x", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"] == "x"
    assert compare_main(["--data", str(d), "x", "y", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("figure,unit,label,value")
    assert report_main(["--influx", "http://127.0.0.1:1/nrg"]) == 2
    assert "cannot reach InfluxDB at http://127.0.0.1:1" in capsys.readouterr().err
    assert report_main(["--influx", "http://127.0.0.1:1"]) == 2
    assert INFLUX_NO_DATABASE.format(url="http://127.0.0.1:1") in capsys.readouterr().err
    assert report_main(["--data", str(tmp_path / "nothing")]) == 2


def test_ten_thousand_runs_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = []
    for i in range(10_000):
        tags = {"run": f"r{i:05d}", "host": "h"}
        for event, dt in (("start", 0), ("end", 5 * NS)):
            lines.append(Point("nrg_run", tags, {"event": event}, T0 + i * 10 * NS + dt))
    (tmp_path / "nrg.lp").write_text(LineEncoder().encode_many(lines))
    assert report_main(["--data", str(tmp_path), "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 10_001
    assert out[1].split()[1] == "r00000" and out[-1].split()[1] == "r09999"
    assert all(line.split()[-3] == "5.0s" for line in out[1:])


def test_carbon_intensity_from_report_table(tmp_path: Path) -> None:
    cfg = tmp_path / "nrg.toml"
    cfg.write_text("[report]\ncarbon_intensity_g_per_kwh = 56.0\n")
    args = argparse.Namespace(config=str(cfg), carbon_intensity=None)
    assert summary_options(args).carbon_intensity_g_per_kwh == 56.0
    args.carbon_intensity = 100.0
    assert summary_options(args).carbon_intensity_g_per_kwh == 100.0
    cfg.write_text("[report]\ncarbon = 1\n")
    with pytest.raises(ConfigError, match="carbon_intensity_g_per_kwh"):
        summary_options(argparse.Namespace(config=str(cfg), carbon_intensity=None))


def test_recorder_bounded_and_exact(tmp_path: Path) -> None:
    run = KnownRun(tick_s=0.01)
    pts = run.points()
    full = summarize(pts)
    rec = SummaryRecorder(max_points=300, tags={"host": "h1"})
    for p in pts:
        rec.offer(p)
    assert rec.thinned > 0
    assert len(rec.sampled) <= 300
    s = summarize(rec.points())
    assert s.energy.total_j == pytest.approx(full.energy.total_j, rel=1e-9)
    assert s.steps.energy_j == pytest.approx(full.steps.energy_j)  # type: ignore[arg-type]
    assert {m.module: m.energy_j for m in s.modules} == pytest.approx(
        {m.module: m.energy_j for m in full.modules}
    )
    out = io.StringIO()
    args = argparse.Namespace(summary="text", summary_file=str(tmp_path / "s.json"), config=None)
    printed = print_run_summary(rec, args, exit_code=0, stream=out)
    assert printed is not None and "thinned" in printed.notes[0]
    assert out.getvalue().startswith("\nnrg summary: run r1")
    assert json.loads((tmp_path / "s.json").read_text())["exit_code"] == 0


def test_list_columns_stay_aligned_with_long_names() -> None:
    rows = []
    for experiment, run in (("e", "short"), ("an-experiment-name-of-30-chars", "r" * 45)):
        known = KnownRun(run=run, experiment=experiment)
        info = RunInfo(experiment, run, {"h1"}, known.t0, known.t0)
        rows.append((info, summarize(known.points())))
    lines = list_text(rows).splitlines()
    header = lines[0]
    for line in lines[1:]:
        # every column starts where its header does
        for name, value in (("run", line.split()[1]), ("host", "h1")):
            assert line.index(value) == header.index(name), (name, line)
        assert len(line) == len(header)


def test_compare_single_runs_with_one_epoch_and_a_meter_only_one_has() -> None:
    """Guards: comparing single runs, every figure with a value counts one run (n = 1); a run of
    one epoch has that epoch's energy per epoch and no error bar (one value has no standard
    error, and is no crash); a source only the second run has (a wall meter) is shown for it,
    with no difference against the first, which has none."""
    a = summarize(KnownRun(run="a", epochs=1).points())
    b = summarize(KnownRun(run="b", epochs=1, wall_w=200.0).points())
    fig = {f.name: f for f in compare(["a", "b"], [[a], [b]]).figures}
    for f in fig.values():
        assert [v.n for v in f.values] == [0 if v.value is None else 1 for v in f.values], f.name
    assert [v.n for v in fig["energy"].values] == [1, 1]
    # one epoch: 4 steps of 0.2 s = 0.8 s; RAPL 25 + 5 = 30 W: 24 J; the wall's 200 W: 160 J
    epoch = fig["energy per epoch"].values
    assert [v.value for v in epoch] == [pytest.approx(24.0), pytest.approx(160.0)]
    assert [v.error for v in epoch] == [None, None]
    # the wall meter: none for a; 200 W × (0.8 s of steps + 0.5 s of evaluation) = 260 J for b
    wall = fig["energy emonpi:5"].values
    assert wall[0].value is None and wall[0].n == 0
    assert wall[1].value == pytest.approx(200.0 * 1.3)
    assert wall[1].diff is None and wall[1].significant is None


def test_compare_shows_every_figure_in_order_with_its_unit_and_value() -> None:
    """Guards: a comparison has every figure, in order and in its unit, each run's value and
    the difference. KnownRun: RAPL 25 + 5 = 30 W over 3.9 s (12 steps of 0.2 s and 3
    evaluations of 0.5 s, 32 samples a step); the other run's package draws 45 W: 50 W."""
    base = summarize(KnownRun(run="a").points())
    hot = summarize(KnownRun(run="b", package_w=45.0).points())
    figures = compare(["a", "b"], [[base], [hot]]).figures
    kwh = 3.6e6  # J
    expected = [
        ("duration", "s", 3.9, 3.9),
        ("energy", "J", 30 * 3.9, 50 * 3.9),  # 117 J, 195 J
        ("mean power", "W", 30.0, 50.0),
        ("energy rapl:dram-0", "J", 5 * 3.9, 5 * 3.9),
        ("energy rapl:package-0", "J", 25 * 3.9, 45 * 3.9),
        ("energy per epoch", "J", 30 * 0.8, 50 * 0.8),  # 4 steps of 0.2 s
        ("energy per step", "J", 30 * 0.2, 50 * 0.2),
        ("energy per sample", "J", 6.0 / 32, 10.0 / 32),
        ("energy outside steps", "J", 30 * 1.5, 50 * 1.5),  # 3 evaluations of 0.5 s
        ("peak memory (combined RSS)", "MB", None, None),  # no process points
        ("CO2e", "g", 117 / kwh * 480, 195 / kwh * 480),  # the default 480 g/kWh
        ("carbon intensity", "g/kWh", 480.0, 480.0),
        ("energy per forward FLOP", "J", None, None),  # no FLOPs reported
    ]
    assert [(f.name, f.unit) for f in figures] == [(n, u) for n, u, _, _ in expected]
    for f, (name, _, a, b) in zip(figures, expected, strict=True):
        got = [v.value for v in f.values]
        assert got == ([None, None] if a is None else [pytest.approx(a), pytest.approx(b)]), name
        if a is not None and b is not None:
            assert f.values[1].diff == pytest.approx(b - a), name


def test_compare_runs_of_one_step_show_no_error_bar_per_step() -> None:
    """Guards: a run of a single step has that step's energy per step and no error bar (one
    value has no standard error: none shown, not ± 0 J). RAPL 25 + 5 = 30 W: one step of
    0.2 s is 6 J; the other run's package 45 W: 50 × 0.2 = 10 J."""
    a = summarize(KnownRun(run="a", epochs=1, steps=1).points())
    b = summarize(KnownRun(run="b", epochs=1, steps=1, package_w=45.0).points())
    fig = {f.name: f for f in compare(["a", "b"], [[a], [b]]).figures}
    step = fig["energy per step"].values
    assert [v.value for v in step] == [pytest.approx(6.0), pytest.approx(10.0)]
    assert [v.error for v in step] == [None, None]
    assert step[1].diff == pytest.approx(10.0 - 6.0)


def test_compare_json_carries_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guards: ``compare --format json`` (what scripts and dashboards read) names its schema and
    the runs compared, and carries each figure with its unit and values. KnownRun: RAPL 25 + 5 =
    30 W over 3.9 s, 117 J; the other run's package draws 45 W: 50 × 3.9 = 195 J, 78 J or
    2/3 more, beyond the error bars (both 0 J: a counter read without gaps)."""
    d = store_runs(
        tmp_path / "d",
        [KnownRun(run="x"), KnownRun(run="y", t0=T0 + 100 * NS, package_w=45.0)],
    )
    assert compare_main(["--data", str(d), "x", "y", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["schema"], data["labels"]) == ("nrg.compare/1", ["x", "y"])
    names = [f.name for f in compare(["x", "y"], [[summarize(KnownRun().points())]] * 2).figures]
    assert [f["name"] for f in data["figures"]] == names
    energy = next(f for f in data["figures"] if f["name"] == "energy")
    assert energy["unit"] == "J"
    a, b = energy["values"]
    assert (a["value"], a["error"], a["n"], a["diff"]) == (pytest.approx(117.0), 0.0, 1, None)
    assert (b["value"], b["diff"]) == (pytest.approx(195.0), pytest.approx(78.0))
    assert (b["diff_ratio"], b["significant"]) == (pytest.approx(2 / 3), True)


def test_compare_experiments_where_only_some_runs_have_a_meter() -> None:
    """Guards: an experiment whose runs do not all have a figure (a wall meter plugged in for
    one of its two runs) shows that run's value with n = 1 and no error bar (one value has no
    standard deviation: no crash), beside an experiment whose two runs both have it (mean, sd,
    2·sd/√n). Each run: one epoch, 0.8 s of steps and 0.5 s of evaluation, 1.3 s.
    A: 200 W × 1.3 s = 260 J (one run; the other has no meter). B: 200 W and 220 W: 260 and
    286 J, mean 273 J, sd = 26/√2 J, error 2 × (26/√2)/√2 = 26 J; 13 J more than A, and no
    significance without A's error bar."""
    a = [
        summarize(KnownRun(run="a0", epochs=1, wall_w=200.0).points()),
        summarize(KnownRun(run="a1", epochs=1).points()),
    ]
    b = [
        summarize(KnownRun(run=f"b{i}", epochs=1, wall_w=w).points())
        for i, w in enumerate((200.0, 220.0))
    ]
    fig = {f.name: f for f in compare(["A", "B"], [a, b]).figures}
    wall_a, wall_b = fig["energy emonpi:5"].values
    assert (wall_a.value, wall_a.n) == (pytest.approx(260.0), 1)
    assert (wall_a.sd, wall_a.error) == (None, None)
    assert (wall_b.value, wall_b.n) == (pytest.approx(273.0), 2)
    assert wall_b.sd == pytest.approx(26.0 / 2**0.5)
    assert wall_b.error == pytest.approx(26.0)
    assert wall_b.diff == pytest.approx(13.0) and wall_b.significant is None


def test_compare_a_run_without_steps_beside_one_with_steps() -> None:
    """Guards: a run that recorded no training steps (the agent alone, no Tracker) compares
    beside one that did: its step figures are empty (no value, n = 0, no difference), not a
    crash, and the other run's are shown. KnownRun: RAPL 25 + 5 = 30 W; 4 steps of 0.2 s an
    epoch: 30 × 0.2 = 6 J a step, 4 × 6 = 24 J an epoch, 6 J / 32 samples a sample."""
    step_kinds = ("nrg_step", "nrg_energy", "nrg_model")
    plain = [p for p in KnownRun(run="a").points() if p.measurement not in step_kinds]
    a = summarize(plain)
    assert a.steps.energy_j is None and a.epochs == []
    b = summarize(KnownRun(run="b").points())
    fig = {f.name: f for f in compare(["a", "b"], [[a], [b]]).figures}
    for name, expected in (
        ("energy per step", 6.0),
        ("energy per epoch", 24.0),
        ("energy per sample", 6.0 / 32),
    ):
        none, value = fig[name].values
        assert (none.value, none.error, none.n) == (None, None, 0), name
        assert (value.value, value.n) == (pytest.approx(expected), 1), name
        assert (value.diff, value.significant) == (None, None), name
    assert [v.value for v in fig["energy per forward FLOP"].values] == [None, None]
    assert [v.n for v in fig["energy"].values] == [1, 1]
