"""Overhead of nrg's training-side hooks, beside no hooks, no-op hooks and torch.profiler.

1. Per module call: ``nn.Linear(4, 4)`` on a 1×4 CPU input under ``no_grad`` — no hooks, global
   no-op pre/post hooks, nrg's hook bodies alone (``ModuleHooks`` + ``EventLog``), a preallocated
   ring for comparison, and a full ``instrument()`` session (with its aggregator thread).
2. A ResNet-18-sized CPU training step (BasicBlock [2, 2, 2, 2], 11.7 M parameters; batch
   8×3×64×64; SGD): plain, instrumented (forward + backward where safe), and under
   ``torch.profiler.profile(activities=[CPU], with_modules=True)``. Rounds alternate between the
   three so drift hits them alike; medians are reported.

Run: ``.venv/bin/python bench/bench_hooks.py [--quick]``. All figures come from this one run.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from time import perf_counter_ns

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
from torch import nn
from torch.nn.modules import module as torch_module

from acquisition.torch import instrument
from acquisition.torch.hooks import EventLog, ModuleHooks


def per_call_us(fn: Callable[[], object], n: int, repeats: int = 5) -> float:
    for _ in range(min(n, 2000)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def bench_module_call(n: int, tmp: str) -> None:
    model = nn.Linear(4, 4)
    x = torch.randn(1, 4)

    def call() -> object:
        return model(x)

    results = {}
    with torch.no_grad():
        results["no hooks"] = per_call_us(call, n)

        handles = [
            torch_module.register_module_forward_pre_hook(lambda m, a: None),
            torch_module.register_module_forward_hook(lambda m, a, o: None, always_call=True),
        ]
        results["global no-op pre+post"] = per_call_us(call, n)
        for h in handles:
            h.remove()

        log = EventLog()
        hooks = ModuleHooks(log)
        hooks.install_forward()
        results["nrg hook bodies (append)"] = per_call_us(call, n)
        hooks.remove_all()

        size = 1 << 22
        ring: list[object] = [None] * size
        counter = itertools.count()

        def pre(m: object, a: object, r=ring, c=counter, t=perf_counter_ns) -> None:  # type: ignore[no-untyped-def]
            r[next(c) & (size - 1)] = (m, t(), 0)

        def post(m: object, a: object, o: object, r=ring, c=counter, t=perf_counter_ns) -> None:  # type: ignore[no-untyped-def]
            r[next(c) & (size - 1)] = (m, t(), 1)

        handles = [
            torch_module.register_module_forward_pre_hook(pre),
            torch_module.register_module_forward_hook(post, always_call=True),
        ]
        results["preallocated ring (compare)"] = per_call_us(call, n)
        for h in handles:
            h.remove()

        session = instrument(
            model,
            graph=False,
            backward=False,
            run="bench",
            socket_path=f"{tmp}/none.sock",
            fallback_dir=tmp,
            graph_dir=tmp,
        ).start()
        results["nrg session (hooks + aggregator thread)"] = per_call_us(call, n)
        session.close()

    base = results["no hooks"]
    noop = results["global no-op pre+post"]
    print("\n== per module call: nn.Linear(4, 4), 1x4 input, no_grad ==")
    print(f"{'configuration':42} {'us/call':>8} {'vs none':>8} {'vs no-op':>9}")
    for name, us in results.items():
        print(f"{name:42} {us:8.2f} {us - base:+8.2f} {us - noop:+9.2f}")


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


def resnet18(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def bench_resnet(rounds: int, steps: int, tmp: str) -> None:
    torch.manual_seed(0)
    model = resnet18()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(8, 3, 64, 64)
    y = torch.randint(0, 100, (8,))

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    wall: dict[str, list[float]] = {"plain": [], "nrg": [], "torch.profiler": []}
    cpu: dict[str, list[float]] = {"plain": [], "nrg": [], "torch.profiler": []}

    def timed(name: str) -> None:
        for _ in range(steps):
            t, c = time.perf_counter(), time.process_time()
            step()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)

    for _ in range(3):
        step()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = instrument(
            model,
            example_inputs=(x,),
            run="bench-resnet",
            socket_path=f"{tmp}/none.sock",
            fallback_dir=tmp,
            graph_dir=tmp,
        ).start()
    print(
        f"\n== ResNet-18-sized training step: {params / 1e6:.1f} M params, batch 8x3x64x64, "
        f"SGD, {rounds} rounds x {steps} steps per configuration, order shuffled per round =="
    )
    print(
        f"nrg: backward timed on {len(session.backward_modules)} modules, "
        f"{len(session.backward_unsafe)} excluded ({len(caught)} warning)"
    )
    session.pause()
    from torch.profiler import ProfilerActivity, profile

    order = ["plain", "nrg", "torch.profiler"]
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            if name == "plain":
                timed(name)
            elif name == "nrg":
                session.resume()
                timed(name)
                session.pause()
            else:
                with profile(activities=[ProfilerActivity.CPU], with_modules=True):
                    timed(name)
    session.close()
    print(f"{'configuration':16} {'wall ms':>9} {'slowdown':>9} {'CPU ms':>9} {'slowdown':>9}")
    base_w, base_c = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    for name in wall:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:16} {w * 1e3:9.2f} {(w / base_w - 1) * 100:+8.2f}% "
            f"{c * 1e3:9.2f} {(c / base_c - 1) * 100:+8.2f}%"
        )
    for label, table, base in (("wall", wall, base_w), ("CPU", cpu, base_c)):
        nrg = statistics.median(table["nrg"]) - base
        prof = statistics.median(table["torch.profiler"]) - base
        ratio = f"{prof / nrg:.1f}x" if nrg > 0 else "n/a (nrg overhead below noise)"
        print(f"{label}: profiler overhead / nrg overhead = {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as tmp:
        bench_module_call(20_000 if args.quick else 200_000, tmp)
        bench_resnet(2 if args.quick else 12, 2 if args.quick else 5, tmp)


if __name__ == "__main__":
    main()
