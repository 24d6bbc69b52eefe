"""A real instrumented CPU training loop, read back from the socket peer or the fallback file."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.torch import instrument
from acquisition.torch.session import (
    DETAIL_EVERY_ERROR,
    DETAIL_MODULES,
    SAMPLES_ERROR,
    detail_every,
)
from tests.torch.conftest import Listener
from tests.torch.models import Scaled

EPOCHS, BATCHES = 2, 3


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.Tanh(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 1)
    )


def train(model: nn.Module, session=None) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()  # not part of the model: ignored by the aggregator
    for epoch in range(EPOCHS):
        if session is not None:
            session.epoch(epoch)
        for _ in range(BATCHES):
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        with torch.no_grad():  # evaluation: no optimizer step, so it joins the next step
            model(torch.randn(4, 4))


def points(text: str) -> list[Point]:
    return [decode_line(line) for line in text.splitlines()]


def check_run(pts: list[Point], run: str, pid: int) -> None:
    by = Counter(p.measurement for p in pts)
    steps = [p for p in pts if p.measurement == "nrg_step"]
    # Six optimizer steps, plus the last evaluation as a final partial step.
    assert [(p.fields["step"], p.tags["epoch"]) for p in steps] == [
        (0, "0"),
        (1, "0"),
        (2, "0"),
        (3, "1"),
        (4, "1"),
        (5, "1"),
        (6, "1"),
    ]
    for p in steps:
        assert p.tags == {"experiment": "unit", "run": run, "rank": "3", "epoch": p.tags["epoch"]}
        assert "epoch" not in p.fields and "samples" not in p.fields
        assert p.time_ns == p.fields["end_time_ns"]
        assert (
            p.fields["duration_seconds"]
            == (p.fields["end_time_ns"] - p.fields["start_time_ns"]) / 1e9
        )
    for prev, cur in itertools.pairwise(steps):
        assert cur.fields["start_time_ns"] == prev.fields["end_time_ns"]
    modules = [p for p in pts if p.measurement == "nrg_module"]
    calls = Counter()
    for p in modules:
        calls[p.fields["step"], p.tags["module"], p.tags["phase"]] += p.fields["calls"]
        assert p.fields["exclusive_seconds"] <= p.fields["inclusive_seconds"]
        assert p.time_ns == steps[p.fields["step"]].time_ns
        assert p.tags["epoch"] == steps[p.fields["step"]].tags["epoch"]
    # step 1: one training forward; backward timed on every leaf module.
    assert {k[1:]: v for k, v in calls.items() if k[0] == 1} == {
        ("(root)", "forward"): 1,
        ("0", "forward"): 1,
        ("1", "forward"): 1,
        ("2", "forward"): 1,
        ("2.0", "forward"): 1,
        ("2.1", "forward"): 1,
        ("3", "forward"): 1,
        ("3", "backward"): 1,
        ("2.1", "backward"): 1,
        ("2.0", "backward"): 1,
        ("1", "backward"): 1,
        ("0", "backward"): 1,
    }
    # Step 3 starts epoch 1 and holds epoch 0's evaluation forward too.
    assert calls[3, "(root)", "forward"] == 2 and calls[3, "(root)", "backward"] == 0
    assert calls[6, "(root)", "forward"] == 1 and calls[6, "3", "backward"] == 0
    model_points = {p.tags["module"]: p for p in pts if p.measurement == "nrg_model"}
    assert model_points["(root)"].fields == {
        "params": 121,
        "buffers": 0,
        "flops": 2 * 16 * (32 + 64 + 8),
        "macs": 16 * (32 + 64 + 8),
    }
    assert model_points["2.0"].fields == {
        "params": 72,
        "buffers": 0,
        "flops": 2 * 16 * 64,
        "macs": 16 * 64,
    }
    assert model_points["(root)"].tags == {"experiment": "unit", "run": run, "module": "(root)"}
    runs = [p for p in pts if p.measurement == "nrg_run"]
    assert [p.fields["event"] for p in runs] == ["start", "end"]
    assert all(p.fields["pid"] == pid for p in runs)
    assert by == {"nrg_run": 2, "nrg_model": 7, "nrg_step": 7, "nrg_module": len(modules)}


def test_training_loop_to_the_agent(listener: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    model = make_model()
    session = instrument(model, experiment="unit", run="to-agent")
    with session:
        train(model, session)
    check_run(points(listener.text()), "to-agent", os.getpid())
    assert not session.fallback_path.exists()
    graph = json.loads(Path(session.graph_path or "").read_text())
    assert graph["source"] == "torch.export"
    assert [n["op"] for n in graph["nodes"] if n["kind"] == "op"] == [
        "aten.linear.default",
        "aten.tanh.default",
        "aten.linear.default",
        "aten.tanh.default",
        "aten.linear.default",
    ]
    assert graph["modules"]["2.0"] == {
        "type": "Linear",
        "params": 72,
        "buffers": 0,
        "flops": 2 * 16 * 64,
    }


def test_training_loop_without_agent_fills_the_fallback_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NRG_EXPERIMENT", "unit")
    monkeypatch.setenv("LOCAL_RANK", "3")
    model = make_model()
    with instrument(model, run="no-agent") as session:
        train(model, session)
    assert session.fallback_path.name == f"nrg-no-agent-{os.getpid()}.lp"
    check_run(points(session.fallback_path.read_text()), "no-agent", os.getpid())


def test_manual_steps_and_kwargs_at_first_call(listener: Listener) -> None:
    model = Scaled()
    with instrument(model, run="manual", experiment="unit") as session:
        for _ in range(3):
            with torch.no_grad():
                model(torch.randn(2, 4), scale=2.0)
            session.step()
    pts = points(listener.text())
    assert [p.fields["step"] for p in pts if p.measurement == "nrg_step"] == [0, 1, 2]
    assert session.capture is not None and session.capture.source == "torch.export"
    graph = json.loads(Path(session.graph_path or "").read_text())
    assert [n["op"] for n in graph["nodes"] if n["kind"] == "op"] == [
        "aten.linear.default",
        "aten.mul.Tensor",
    ]
    root = [p for p in pts if p.measurement == "nrg_module" and p.tags["module"] == "(root)"]
    assert [p.fields["calls"] for p in root] == [1, 1, 1]


def test_importing_acquisition_does_not_import_torch() -> None:
    code = (
        "import sys, acquisition, acquisition.torch, acquisition.torch.session;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_paused_evaluation_stays_out_of_every_step(listener: Listener) -> None:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with instrument(model, run="paused", experiment="unit") as session:
        for _ in range(2):
            model(torch.randn(16, 4)).sum().backward()
            opt.step()
            with session.paused():
                model(torch.randn(4, 4))  # not recorded
                opt.step()  # not a step either
    pts = points(listener.text())
    steps = [p for p in pts if p.measurement == "nrg_step"]
    assert [p.fields["step"] for p in steps] == [0, 1]
    # Step 1 starts when recording resumed, after step 0 ended: the pause is in neither.
    assert steps[1].fields["start_time_ns"] > steps[0].fields["end_time_ns"]
    calls = Counter()
    for p in pts:
        if p.measurement == "nrg_module":
            calls[p.fields["step"], p.tags["module"], p.tags["phase"]] += p.fields["calls"]
    assert calls[0, "(root)", "forward"] == 1 and calls[1, "(root)", "forward"] == 1
    assert calls[1, "3", "backward"] == 1


def test_modules_added_during_the_run_are_named(listener: Listener) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4))
    with instrument(model, run="grow", experiment="unit") as session:
        with torch.no_grad():
            model(torch.randn(2, 4))
        session.step()
        model.add_module("extra", nn.Linear(4, 4))  # names are rebuilt off the hot path
        with torch.no_grad():
            model(torch.randn(2, 4))
        session.step()
    rows = {
        (p.fields["step"], p.tags["module"])
        for p in points(listener.text())
        if p.measurement == "nrg_module"
    }
    assert rows == {(0, "(root)"), (0, "0"), (1, "(root)"), (1, "0"), (1, "extra")}


def test_samples_per_step_and_per_call(listener: Listener) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with instrument(model, run="samples", graph=False, samples_per_step=16) as session:
        for _ in range(2):  # optimizer steps: samples_per_step
            model(torch.randn(16, 4)).sum().backward()
            opt.step()
        model(torch.randn(5, 4)).sum().backward()
        session.step(samples=5)  # the last, smaller batch says its own size
        model(torch.randn(16, 4)).sum().backward()
        session.step()
    steps = [p for p in points(listener.text()) if p.measurement == "nrg_step"]
    assert [(p.fields["step"], p.fields["samples"]) for p in steps] == [
        (0, 16),
        (1, 16),
        (2, 5),
        (3, 16),
    ]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_samples_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError) as err:
        instrument(nn.Linear(2, 2), samples_per_step=bad)  # type: ignore[arg-type]
    assert str(err.value) == SAMPLES_ERROR.format(value=bad)
    session = instrument(nn.Linear(2, 2), graph=False).start()
    try:
        with pytest.raises(ValueError) as err:
            session.step(samples=bad)  # type: ignore[arg-type]
        assert str(err.value) == SAMPLES_ERROR.format(value=bad)
    finally:
        session.close()


def test_run_experiment_and_socket_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``nrg-collect -- CMD`` passes its job: the job's points carry the agent's tags and
    go to the agent's own socket."""
    peer = Listener(tmp_path / "job.sock")
    monkeypatch.setenv("NRG_SOCKET", str(peer.path))
    monkeypatch.setenv("NRG_RUN", "train.py-20261125T110000Z")
    monkeypatch.setenv("NRG_EXPERIMENT", "sweep-a")
    model = nn.Linear(2, 2)
    try:
        with instrument(model, graph=False) as session:
            model(torch.randn(1, 2))
            session.step()
    finally:
        peer.kill()
    pts = points(peer.text())
    start = pts[0]
    assert (start.measurement, start.fields["event"]) == ("nrg_run", "start")
    assert start.tags == {"experiment": "sweep-a", "run": "train.py-20261125T110000Z"}
    assert {p.tags["run"] for p in pts} == {"train.py-20261125T110000Z"}
    assert session.socket_path == peer.path


def test_arguments_win_over_the_environment(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRG_RUN", "from-env")
    monkeypatch.setenv("NRG_EXPERIMENT", "env-exp")
    model = nn.Linear(2, 2)
    with instrument(model, graph=False, run="mine", experiment="exp") as session:
        model(torch.randn(1, 2))
        session.step()
    start = points(listener.text())[0]
    assert start.tags == {"experiment": "exp", "run": "mine"}


def _module_steps(text: str) -> dict[int, int]:
    """Step → number of ``nrg_module`` points."""
    counts: Counter[int] = Counter()
    for p in points(text):
        if p.measurement == "nrg_module":
            counts[p.fields["step"]] += 1
    return dict(counts)


def test_module_detail_every_nth_step(listener: Listener) -> None:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with instrument(model, run="sampled", graph=False, module_detail_every=3) as session:
        for _ in range(7):
            model(torch.randn(16, 4)).sum().backward()
            opt.step()
    text = listener.text()
    steps = [p.fields["step"] for p in points(text) if p.measurement == "nrg_step"]
    assert steps == list(range(7))  # every step is reported
    per_step = 12  # 7 modules forward (the root included), 5 leaves backward
    assert _module_steps(text) == {0: per_step, 3: per_step, 6: per_step}
    assert session.module_detail_every == 3


def test_default_module_detail_follows_the_model_size() -> None:
    assert detail_every(DETAIL_MODULES, None) == 1
    assert detail_every(DETAIL_MODULES + 1, None) == 2
    assert detail_every(202, None) == 5
    assert detail_every(10_001, None) == 209
    assert detail_every(10_001, 1) == 1
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError) as err:
            detail_every(10, bad)  # type: ignore[arg-type]
        assert str(err.value) == DETAIL_EVERY_ERROR.format(value=bad)


def test_no_event_lost_under_a_10000_module_model(listener: Listener) -> None:
    """Every call of every module reaches the agent: the hook buffer never drops or overwrites,
    whatever the model's size."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3_333)]
    model = nn.Sequential(*blocks)  # 1 + 3,333 x 3 = 10,000 modules
    assert sum(1 for _ in model.modules()) == 10_000
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with instrument(model, run="big", graph=False) as session:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    pts = points(listener.text())
    step0 = [p for p in pts if p.measurement == "nrg_module" and p.fields["step"] == 0]
    forward = {p.tags["module"]: p.fields["calls"] for p in step0 if p.tags["phase"] == "forward"}
    backward = {p.tags["module"] for p in step0 if p.tags["phase"] == "backward"}
    names = [n or "(root)" for n, _ in model.named_modules()]
    assert forward == dict.fromkeys(names, 1)
    leaves = {n for n, m in model.named_modules() if next(m.children(), None) is None}
    assert backward == leaves
    assert session.module_detail_every == 209
    assert [p.fields["step"] for p in pts if p.measurement == "nrg_module"].count(1) == 0


def test_step_lines_reach_the_agent_while_training_runs(listener: Listener) -> None:
    """Lines are handed to the sender in chunks, but none waits for close: with no further
    step, the agent gets them while the session is still open."""
    model = nn.Linear(2, 2)
    with instrument(model, run="live", graph=False) as session:
        for _ in range(3):
            model(torch.randn(1, 2))
            session.step()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            got = [p for p in points(listener.text()) if p.measurement == "nrg_step"]
            if len(got) == 3:
                break
            time.sleep(0.05)
        assert [p.fields["step"] for p in got] == [0, 1, 2]
