"""End to end on a CPU machine: a training session on the stand-in GPU (lagging the host by a
known queue delay) sends its steps; the agent's real attribution, fed the GPU's power with a step
change, gives each step the energy of its interval on the GPU's timeline, computed by hand."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.torch import instrument
from tests.attribution.test_processor import Harness
from tests.torch.conftest import Listener
from tests.torch.cuda_standin import install

DELAY_NS = 30_000_000
STEPS = 10
SAMPLE_NS = 2_000_000
LOW_W, HIGH_W = 200.0, 700.0
GPU = {"gpu": "0", "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3"}


def test_each_step_gets_the_gpu_energy_of_its_gpu_interval(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, DELAY_NS)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with instrument(model, run="energy", module_detail_every=STEPS * 10):
        for _ in range(STEPS):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            time.sleep(0.02)
    points = [decode_line(line) for line in listener.text().splitlines()]
    steps = sorted(
        (p for p in points if p.measurement == "nrg_step"), key=lambda p: int(p.fields["step"])
    )
    assert len(steps) == STEPS
    interval = {
        int(p.fields["step"]): (
            int(p.fields["gpu_start_time_ns"]),
            int(p.fields["gpu_end_time_ns"]),
        )
        for p in steps
    }
    # The GPU's power steps up over one sample interval inside step 5's GPU interval: on the
    # host's timeline (DELAY_NS earlier, more than a step) that is a later step.
    ramp = (interval[5][0] // SAMPLE_NS + 1) * SAMPLE_NS
    first = min(p.time_ns for p in points) - 200_000_000
    last = max(p.time_ns for p in points) + 300_000_000

    def watts(t: int) -> float:
        if t <= ramp:
            return LOW_W
        if t >= ramp + SAMPLE_NS:
            return HIGH_W
        return LOW_W + (HIGH_W - LOW_W) * (t - ramp) / SAMPLE_NS

    def joules(t: int) -> float:
        """∫ watts from ``first`` to t, by hand: two constant parts and the ramp's trapezoid."""
        if t <= ramp:
            return LOW_W * (t - first) / 1e9
        ramp_end = min(t, ramp + SAMPLE_NS)
        out = LOW_W * (ramp - first) / 1e9 + (LOW_W + watts(ramp_end)) / 2 * (ramp_end - ramp) / 1e9
        return out + HIGH_W * max(0, t - ramp - SAMPLE_NS) / 1e9

    start = (first // SAMPLE_NS + 1) * SAMPLE_NS
    bus: list[Point] = []
    for t in range(start, last, SAMPLE_NS):
        bus.append(Point("gpu_sample", GPU, {"power_watts": watts(t)}, t))
        if (t - start) % 100_000_000 == 0:  # the agent's tick: the counter and power
            fields = {"energy_joules": joules(t), "power_watts": watts(t)}
            bus.append(Point("gpu", GPU, fields, t))
    for p in points:
        if p.measurement in ("nrg_step", "nrg_run"):
            bus.append(p)
    bus.sort(key=lambda p: p.time_ns)
    h = Harness(module_detail="off")
    h.feed(bus)
    h.proc.flush(h.out.append)
    got = {
        int(p.fields["step"]): float(p.fields["energy_joules"])
        for p in h.out
        if p.tags["source"] == "nvml:0" and p.tags["scope"] == "step"
    }
    assert sorted(got) == list(range(STEPS))
    cpu = {
        int(p.fields["step"]): (int(p.fields["start_time_ns"]), int(p.fields["end_time_ns"]))
        for p in steps
    }
    for n, (c0, c1) in cpu.items():
        # By hand: the GPU ran the step DELAY_NS after the host launched it.
        expected = joules(c1 + DELAY_NS) - joules(c0 + DELAY_NS)
        assert got[n] == pytest.approx(expected, rel=1e-6, abs=1e-9), n
    # On the host's interval the power step would land elsewhere: the two timelines differ.
    assert any(abs((joules(c1) - joules(c0)) - got[n]) > 0.5 for n, (c0, c1) in cpu.items())
