"""Overhead of the energy-aware profiler (``acquisition.torch.profile``) over ``torch.profiler``.

A ResNet-18-sized CPU training step (BasicBlock [2, 2, 2, 2]; batch 8×3×64×64; SGD), ``steps``
steps per profile, recorded three ways in alternating rounds so drift hits them alike:

- ``none``: no profiler;
- ``torch``: ``torch.profiler.profile(activities=[CPU])``;
- ``nrg``: ``acquisition.profiler.profile(activities=[CPU])`` sampling the real RAPL collector
  every 10 ms in-process. This machine has no RAPL: the collector reads a powercap tree on tmpfs
  whose counters a writer process advances every 1 ms (as ``tests/profiler`` does); the writer
  runs through every round, so it costs all three variants alike.

Reported (medians): wall time of the recorded steps, the training thread's and the whole
process's CPU time over them (the sampler thread counts in the latter; on a shared machine CPU
time is steadier than wall time), wall time of the whole ``with`` block (start, steps, stop), and
the post-processing: ``key_averages().table()`` against ``energy_table()``, and
``export_chrome_trace`` of each.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_profiler.py [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
from torch import nn
from torch.profiler import ProfilerActivity

from acquisition.profiler import profile as energy_profile
from tests.profiler.power import RaplSampler, powercap_tree


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


def resnet18(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    args = parser.parse_args()
    rounds, steps = (2, 3) if args.quick else (9, 10)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = resnet18()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 100, (8,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.time_ns()
    results: dict[str, dict[str, list[float]]] = {
        v: {"steps": [], "cpu": [], "process": [], "block": [], "table": [], "export": []}
        for v in ("none", "torch", "nrg")
    }
    with (
        powercap_tree({"package-0": [(t0, 25.0)], "dram": [(t0, 4.0)]}) as root,
        tempfile.TemporaryDirectory() as tmp,
    ):
        makers: dict[str, Callable[[], Any]] = {
            "torch": lambda: torch.profiler.profile(activities=[ProfilerActivity.CPU]),
            "nrg": lambda: energy_profile(
                activities=[ProfilerActivity.CPU], sampler=RaplSampler(root, interval_s=0.01)
            ),
        }
        for r in range(rounds):
            order = ("none", "torch", "nrg") if r % 2 == 0 else ("nrg", "torch", "none")
            for variant in order:
                run_one(variant, makers.get(variant), step, steps, results[variant], tmp)
    report(results, steps, rounds)


def run_one(
    variant: str,
    make: Callable[[], Any] | None,
    step: Callable[[], None],
    steps: int,
    out: dict[str, list[float]],
    tmp: str,
) -> None:
    t_block = time.perf_counter()
    with make() if make is not None else contextlib.nullcontext() as prof:
        t, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
        for _ in range(steps):
            step()
        out["steps"].append(time.perf_counter() - t)
        out["cpu"].append(time.thread_time() - cpu)
        out["process"].append(time.process_time() - process)
    out["block"].append(time.perf_counter() - t_block)
    if prof is None:
        return
    t = time.perf_counter()
    if variant == "nrg":
        prof.energy_table(row_limit=10)
    else:
        prof.key_averages().table(row_limit=10)
    out["table"].append(time.perf_counter() - t)
    t = time.perf_counter()
    prof.export_chrome_trace(os.path.join(tmp, f"{variant}.json"))
    out["export"].append(time.perf_counter() - t)


def report(results: dict[str, dict[str, list[float]]], steps: int, rounds: int) -> None:
    med = {
        v: {k: statistics.median(x) if x else 0.0 for k, x in r.items()} for v, r in results.items()
    }
    print(
        f"== energy-aware profiler vs torch.profiler: ResNet-18-sized CPU step, batch 8x3x64x64, "
        f"1 intra-op thread, {steps} steps per profile, {rounds} rounds (medians) =="
    )
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    none, plain, nrg = med["none"], med["torch"], med["nrg"]
    print(f"{'':34}{'none':>10}{'torch':>10}{'nrg':>10}{'nrg/torch':>11}")
    rows = (
        ("recorded steps, wall s per step", "steps", steps),
        ("  training thread CPU s per step", "cpu", steps),
        ("  process CPU s per step", "process", steps),
        ("with-block (start..stop), wall s", "block", 1),
    )
    for label, key, div in rows:
        print(
            f"{label:34}{none[key] / div:10.4f}{plain[key] / div:10.4f}{nrg[key] / div:10.4f}"
            f"{nrg[key] / plain[key]:11.3f}"
        )
    for label, key in (("table, s", "table"), ("export_chrome_trace, s", "export")):
        print(f"{label:34}{'':>10}{plain[key]:10.4f}{nrg[key]:10.4f}{nrg[key] / plain[key]:11.3f}")
    print(
        f"profiler overhead on the steps: torch {100 * (plain['steps'] / none['steps'] - 1):+.1f} %,"
        f" nrg {100 * (nrg['steps'] / none['steps'] - 1):+.1f} %; nrg over torch: "
        f"{100 * (nrg['steps'] / plain['steps'] - 1):+.1f} % (steps), "
        f"{100 * (nrg['block'] / plain['block'] - 1):+.1f} % (whole block), "
        f"{100 * (nrg['cpu'] / plain['cpu'] - 1):+.1f} % (training thread CPU), "
        f"{100 * (nrg['process'] / plain['process'] - 1):+.1f} % (process CPU)"
    )


if __name__ == "__main__":
    main()
