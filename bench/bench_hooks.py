"""Overhead of nrg's training-side hooks, beside no hooks, no-op hooks and torch.profiler.

1. Per module call: ``nn.Linear(4, 4)`` on a 1×4 CPU input under ``no_grad`` — no hooks, global
   no-op pre/post hooks, nrg's hook bodies alone (``ModuleHooks`` + ``EventLog``), a preallocated
   ring for comparison, and a full ``instrument()`` session (with its aggregator thread).
2. The small-module model: 100 x (``Linear(64, 64)`` + ``ReLU``) and a ``Linear(64, 10)`` head,
   batch 8, SGD: plain, a full ``instrument()`` session with its default module detail (every
   4th step for these 202 modules), the same session with detail on every step, and
   ``torch.profiler`` (CPU activity, no shapes). A fresh session per round, events reaching
   the fallback file through the real sender thread. CPU is whole-process CPU time (nrg's
   threads included) per step, averaged over each round (a median would pick the steps
   without module detail).
3. A ResNet-18-sized CPU training step (BasicBlock [2, 2, 2, 2], 11.7 M parameters; batch
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
from acquisition.torch.hooks import STEP, EventLog, ModuleHooks
from acquisition.torch.steps import StepAggregator, StepLines


def bench_module_call(n: int, rounds: int, tmp: str) -> None:
    model = nn.Linear(4, 4)
    x = torch.randn(1, 4)
    log = EventLog()
    nrg_hooks = ModuleHooks(log)
    size = 1 << 22
    ring: list[object] = [None] * size
    counter = itertools.count()

    def ring_pre(m: object, a: object, r=ring, c=counter, t=perf_counter_ns) -> None:  # type: ignore[no-untyped-def]
        r[next(c) & (size - 1)] = (m, t(), 0)

    def ring_post(m: object, a: object, o: object, r=ring, c=counter, t=perf_counter_ns) -> None:  # type: ignore[no-untyped-def]
        r[next(c) & (size - 1)] = (m, t(), 1)

    def global_pair(
        pre: Callable[..., None], post: Callable[..., None]
    ) -> Callable[[], Callable[[], None]]:
        def install() -> Callable[[], None]:
            handles = [
                torch_module.register_module_forward_pre_hook(pre),
                torch_module.register_module_forward_hook(post, always_call=True),
            ]
            return lambda: [h.remove() for h in handles] and None

        return install

    def nrg_bodies() -> Callable[[], None]:
        nrg_hooks.install_forward()

        def undo() -> None:
            nrg_hooks.remove_all()
            log.drain()

        return undo

    def nrg_session() -> Callable[[], None]:
        session = instrument(
            model,
            example_inputs=(x,),
            graph=False,
            run="bench",
            socket_path=f"{tmp}/none.sock",
            fallback_dir=tmp,
            graph_dir=tmp,
        ).start()
        return session.close

    configs: dict[str, Callable[[], Callable[[], None]]] = {
        "no hooks": lambda: lambda: None,
        "global no-op pre+post": global_pair(lambda m, a: None, lambda m, a, o: None),
        "nrg hook bodies (list append)": nrg_bodies,
        "preallocated ring (for comparison)": global_pair(ring_pre, ring_post),
        "nrg session (+ aggregator thread)": nrg_session,
    }
    best = dict.fromkeys(configs, float("inf"))
    order = list(configs)
    rng = random.Random(1)
    with torch.no_grad():
        for _ in range(2000):
            model(x)
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                undo = configs[name]()
                for _ in range(200):
                    model(x)
                t = time.perf_counter()
                for _ in range(n):
                    model(x)
                best[name] = min(best[name], (time.perf_counter() - t) / n * 1e6)
                undo()
    base = best["no hooks"]
    noop = best["global no-op pre+post"]
    print(
        f"\n== per module call: nn.Linear(4, 4), 1x4 input, no_grad; best of {rounds} "
        f"interleaved rounds of {n} calls =="
    )
    print(f"{'configuration':38} {'us/call':>8} {'vs none':>8} {'vs no-op':>9}")
    for name, us in best.items():
        print(f"{name:38} {us:8.2f} {us - base:+8.2f} {us - noop:+9.2f}")


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

    names = ["plain", "plain (again: noise)", "nrg", "torch.profiler"]
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}

    def timed(name: str) -> None:
        for _ in range(steps):
            t, c = time.perf_counter(), time.process_time()
            step()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)

    for _ in range(3):
        step()
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
        f"nrg: module detail every {session.module_detail_every} steps (forward on every module, "
        f"backward on {len(session.backward_modules)} leaf modules); wall and whole-process CPU "
        f"time (nrg's threads included) per step, medians"
    )
    session.pause()
    from torch.profiler import ProfilerActivity, profile

    order = list(names)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            if name.startswith("plain"):
                timed(name)
            elif name == "nrg":
                session.resume()
                timed(name)
                session.pause()
            else:
                with profile(activities=[ProfilerActivity.CPU], with_modules=True):
                    timed(name)
    session.close()
    print(f"{'configuration':22} {'wall ms':>9} {'slowdown':>9} {'CPU ms':>9} {'slowdown':>9}")
    base_w, base_c = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    for name in wall:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:22} {w * 1e3:9.2f} {(w / base_w - 1) * 100:+8.2f}% "
            f"{c * 1e3:9.2f} {(c / base_c - 1) * 100:+8.2f}%"
        )
    for label, table, base in (("wall", wall, base_w), ("CPU", cpu, base_c)):
        nrg = statistics.median(table["nrg"]) - base
        prof = statistics.median(table["torch.profiler"]) - base
        ratio = f"{prof / nrg:.1f}x" if nrg > 0 else "n/a (nrg overhead below noise)"
        print(f"{label}: profiler overhead / nrg overhead = {ratio}")
    breakdown(model, step, base_c)


def breakdown(model: nn.Module, step: Callable[[], None], step_cpu_s: float) -> None:
    """nrg's own work for one ResNet step, timed in isolation (best of 30): robust to the noise
    of a shared machine, unlike the end-to-end medians above."""
    log = EventLog()
    hooks = ModuleHooks(log)
    leaves = [m for m in model.modules() if next(m.children(), None) is None]
    hooks.install_forward()
    hooks.set_backward(leaves)
    step()
    hooks.remove_all()
    events = [*log.drain(), (None, perf_counter_ns(), STEP)]
    calls = sum(1 for e in events if e[2] == 0)
    backward = sum(1 for e in events if e[2] == 2)
    names = {id(m): n for n, m in model.named_modules()}
    lines = StepLines({"experiment": "bench", "run": "r"}, 0)
    best = [float("inf")] * 2
    for _ in range(30):
        agg = StepAggregator(names)
        t0 = time.perf_counter()
        (record,) = agg.feed(events)
        t1 = time.perf_counter()
        text = lines.lines(record)
        t2 = time.perf_counter()
        best = [min(b, v) for b, v in zip(best, (t1 - t0, t2 - t1), strict=True)]

    # Hot-path cost per module call, in this model's own calls: the hooked step minus the plain
    # one would drown in noise, so time the hooks on a tiny module and scale by the call counts.
    tiny = nn.Linear(4, 4)
    xt = torch.randn(1, 4)
    with torch.no_grad():
        plain_us = min(per_call(tiny, xt) for _ in range(5))
        hooks.install_forward()
        hooked_us = min(per_call(tiny, xt) for _ in range(5))
        hooks.remove_all()
        log.drain()
    node_us = node_hook_cost_us(hooks, log)
    hot_ms = (calls * (hooked_us - plain_us) + backward * node_us) / 1e3
    background_ms = sum(best) * 1e3
    total_ms = hot_ms + background_ms
    print("\n== nrg's work per ResNet step, timed in isolation ==")
    print(
        f"{calls} module calls, {backward} leaf backward nodes, {len(events)} events, "
        f"{text.count(chr(10))} lines"
    )
    print(
        f"hot path: {calls} x {hooked_us - plain_us:.2f} us + {backward} x {node_us:.2f} us "
        f"(node hooks) = {hot_ms:.2f} ms"
    )
    print(
        f"background thread: aggregate {best[0] * 1e3:.2f} ms + line protocol "
        f"{best[1] * 1e3:.2f} ms = {background_ms:.2f} ms"
    )
    print(
        f"total {total_ms:.2f} ms of CPU per step = {total_ms / (step_cpu_s * 1e3) * 100:.2f} % "
        f"of the plain step's {step_cpu_s * 1e3:.0f} ms"
    )


def per_call(module: nn.Module, x: torch.Tensor, n: int = 20_000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        module(x)
    return (time.perf_counter() - t) / n * 1e6


def node_hook_cost_us(hooks: ModuleHooks, log: EventLog, n: int = 5_000) -> float:
    """Registering the two node hooks at a leaf's exit plus both firing in backward, per leaf."""
    leaf = nn.Tanh()
    x = torch.randn(4, requires_grad=True)

    def run() -> float:
        t = time.perf_counter()
        for _ in range(n):
            leaf(x).sum().backward()
        return (time.perf_counter() - t) / n * 1e6

    hooks.install_forward()
    with_node = min(run() for _ in range(3))
    hooks.set_backward([leaf])
    with_node = min(run() for _ in range(3)) - with_node
    hooks.remove_all()
    log.drain()
    return max(with_node, 0.0)


def small_modules() -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(100):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    layers.append(nn.Linear(64, 10))
    return nn.Sequential(*layers)


def compare_sessions(
    title: str,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rounds: int,
    steps: int,
    tmp: str,
) -> None:
    """Per-step CPU and wall time, plain vs nrg (default and every-step detail) vs profiler."""
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    def timed() -> tuple[float, float]:
        c, w = time.process_time(), time.perf_counter()
        for _ in range(steps):
            step()
        return (time.process_time() - c) / steps, (time.perf_counter() - w) / steps

    def session(every: int | None) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            with instrument(
                model,
                example_inputs=(x,),
                graph=False,
                run="bench",
                socket_path=f"{tmp}/none.sock",
                fallback_dir=tmp,
                graph_dir=tmp,
                module_detail_every=every,
            ):
                return timed()

        return run

    def profiled() -> tuple[float, float]:
        with profile(activities=[ProfilerActivity.CPU]):
            return timed()

    probe = instrument(model, graph=False, socket_path=f"{tmp}/none.sock", fallback_dir=tmp)
    configs: dict[str, Callable[[], tuple[float, float]]] = {
        "plain": timed,
        f"nrg (detail every {probe.module_detail_every})": session(None),
        "nrg (detail every step)": session(1),
        "torch.profiler": profiled,
    }
    for _ in range(5):
        step()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    order = list(configs)
    rng = random.Random(2)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            results[name].append(configs[name]())
    print(f"\n== {title}: {rounds} rounds x {steps} steps, order shuffled per round, medians ==")
    print(f"{'configuration':28} {'CPU ms':>8} {'slowdown':>9} {'wall ms':>8} {'slowdown':>9}")
    base_c = statistics.median(c for c, _ in results["plain"])
    base_w = statistics.median(w for _, w in results["plain"])
    for name, values in results.items():
        c = statistics.median(v[0] for v in values)
        w = statistics.median(v[1] for v in values)
        print(
            f"{name:28} {c * 1e3:8.3f} {(c / base_c - 1) * 100:+8.1f}% "
            f"{w * 1e3:8.3f} {(w / base_w - 1) * 100:+8.1f}%"
        )


def bench_small_modules(rounds: int, steps: int, tmp: str) -> None:
    torch.manual_seed(0)
    compare_sessions(
        "small-module model (100 x Linear(64)+ReLU, head), batch 8",
        small_modules(),
        torch.randn(8, 64),
        torch.randint(0, 10, (8,)),
        rounds,
        steps,
        tmp,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads")
    parser.add_argument("--skip-calls", action="store_true", help="skip the per-call figures")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_calls:
            bench_module_call(20_000 if args.quick else 50_000, 3 if args.quick else 15, tmp)
        bench_small_modules(3 if args.quick else 15, 20 if args.quick else 40, tmp)
        torch.manual_seed(0)
        compare_sessions(
            "ResNet-18-sized model, batch 8x3x64x64",
            resnet18(),
            torch.randn(8, 3, 64, 64),
            torch.randint(0, 100, (8,)),
            2 if args.quick else 9,
            4 if args.quick else 8,
            tmp,
        )
        bench_resnet(2 if args.quick else 12, 2 if args.quick else 5, tmp)


if __name__ == "__main__":
    main()
