"""Where a CUDA module hook's time goes: the primitives, and ResNet-50 steps with each piece on.

Part 1 times the calls a CUDA hook can make (CPU µs per call, 5,000 calls each):
``torch.cuda.Event()`` construction, ``Event.record()`` (which looks up the current stream in
Python), ``torch.cuda.current_stream()``, the raw current-stream id, and a record on a stream
object fetched once.

Part 2 times ResNet-50 training steps (batch 64, fp32, SGD; median of rounds, modes
interleaved) with hooks that do only part of what nrg's hooks do, each against plain steps in
the same run: autograd's device threads off alone; forward hooks that append a tuple; the same
plus a CUDA event per call (default record, and record on a cached stream); backward node hooks
on the leaves (append only, then with events).

Part 3 times the training thread's work in ``instrument()``'s default mode, part by part
(:mod:`bench.hook_parts`): a detailed step's hooks, putting them in and out, processing a detailed
step's events at a later boundary, and the rest of a step boundary.

Run: ``python bench/bench_cuda_hooks.py`` on a CUDA machine (about a minute); ``--smoke`` runs
part 2 on the CPU with a tiny network and no events, to check the script; ``--stand-in`` runs
part 3 on the CPU with ResNet-50's shape (batch 2 of 16×16 images, one thread) and stand-in
CUDA events that the "GPU" reaches 1.5 steps after their record.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu import Setup, _setup, train_step
from hook_parts import (
    first_step,
    measure_parts,
    print_parts,
    processing_slices,
    stand_in_gpu,
)
from resnet import resnet


def per_call_us(fn: Callable[[], Any], n: int = 5000) -> float:
    for _ in range(100):
        fn()
    t0 = time.thread_time_ns()
    for _ in range(n):
        fn()
    return (time.thread_time_ns() - t0) / n / 1e3


def primitives() -> None:
    event_cls = torch.cuda.Event
    base_record = torch._C._CudaEventBase.record
    stream = torch.cuda.current_stream()
    raw = torch._C._cuda_getCurrentRawStream
    pool = [event_cls(enable_timing=True) for _ in range(5100)]
    pool_iter = iter(pool * 2)
    rows = {
        "perf_counter_ns": time.perf_counter_ns,
        "Event(enable_timing=True)": lambda: event_cls(enable_timing=True),
        "Event() + record()": lambda: event_cls(enable_timing=True).record(),
        "torch.cuda.current_stream()": torch.cuda.current_stream,
        "_cuda_getCurrentRawStream(0)": lambda: raw(0),
        "Event() + record(cached stream)": lambda: base_record(
            event_cls(enable_timing=True), stream
        ),
        "pooled event record(cached stream)": lambda: base_record(next(pool_iter), stream),
    }
    print("\n== 1. CPU µs per call ==")
    for name, fn in rows.items():
        print(f"{name:40} {per_call_us(fn):8.2f}")
    torch.cuda.synchronize()


def _leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


class Hooks:
    """Global forward hooks and leaf node hooks doing one of several amounts of work."""

    def __init__(self, model: nn.Module, *, event: str, backward: bool) -> None:
        self.log: list[tuple[Any, ...]] = []
        append, now = self.log.append, time.perf_counter_ns
        leaves = {m for m in model.modules() if _leaf(m)}
        stream = torch.cuda.current_stream() if event else None
        event_cls = torch.cuda.Event if event else None
        base_record = torch._C._CudaEventBase.record if event else None

        def mark(key: int, kind: int) -> None:
            if event_cls is None:
                append((key, now(), kind))
                return
            ev = event_cls(enable_timing=True)
            t = now()
            if event == "default":
                ev.record()
            else:
                base_record(ev, stream)  # type: ignore[misc]
            append((key, t, kind, ev))

        def fwd_pre(module: Any, args: Any) -> None:
            mark(id(module), 0)

        def fwd_post(module: Any, args: Any, output: Any) -> None:
            mark(id(module), 1)
            if backward and module in leaves:
                node = getattr(output, "grad_fn", None)
                if node is not None:
                    node.register_prehook(partial(_bwd, mark, id(module), 2))
                    node.register_hook(partial(_bwd, mark, id(module), 3))

        self.handles = [
            nn.modules.module.register_module_forward_pre_hook(fwd_pre),
            nn.modules.module.register_module_forward_hook(fwd_post, always_call=True),
        ]

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _bwd(mark: Callable[[int, int], None], key: int, kind: int, *args: Any) -> None:
    mark(key, kind)


def step_modes(setup: Setup) -> None:
    x, y = setup.batch_of()
    model = setup.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    switch = getattr(torch._C, "_set_multithreading_enabled", None)
    ev = "default" if setup.cuda else ""
    fast = "fast" if setup.cuda else ""
    modes: dict[str, tuple[str | None, bool, bool]] = {
        "plain": (None, False, False),
        "autograd device threads off": (None, False, True),
        "fwd hooks, append": ("", False, False),
        "fwd hooks, event default": (ev, False, False),
        "fwd hooks, event cached stream": (fast, False, False),
        "fwd+bwd hooks, append (threads off)": ("", True, True),
        "fwd+bwd hooks, event default": (ev, True, True),
        "fwd+bwd hooks, event cached stream": (fast, True, True),
        "fwd+bwd hooks, event default, threads on": (ev, True, False),
    }
    rows: dict[str, list[float]] = {name: [] for name in modes}
    for r in range(setup.rounds):
        for name, (event, backward, threads_off) in list(modes.items())[:: 1 if r % 2 else -1]:
            hooks = None if event is None else Hooks(model, event=event, backward=backward)
            if threads_off and switch is not None:
                switch(False)
            try:
                for _ in range(setup.warmup):
                    train_step(model, opt, x, y)
                setup.sync()
                t0 = time.perf_counter()
                for _ in range(setup.steps):
                    train_step(model, opt, x, y)
                    if hooks is not None:
                        hooks.log.clear()
                setup.sync()
                rows[name].append((time.perf_counter() - t0) / setup.steps * 1e3)
            finally:
                if switch is not None:
                    switch(True)
                if hooks is not None:
                    hooks.close()
    plain = statistics.median(rows["plain"])
    print(f"\n== 2. ResNet-50 step, median of {setup.rounds} rounds of {setup.steps} steps ==")
    for name, values in rows.items():
        ms = statistics.median(values)
        print(f"{name:40} {ms:8.2f} ms {(ms / plain - 1) * 100:+7.1f}%")


def stand_in(steps: int, rounds: int) -> None:
    """Part 3 on the CPU: ResNet-50's shape, stand-in CUDA events."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = resnet((3, 4, 6, 3), 64)
    x, y = torch.randn(2, 3, 16, 16), torch.randint(0, 100, (2,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        train_step(model, opt, x, y)
    t0 = time.perf_counter_ns()
    for _ in range(5):
        train_step(model, opt, x, y)
    delay = (time.perf_counter_ns() - t0) * 3 // 10  # 1.5 steps
    modules = sum(1 for _ in model.modules())
    print(f"ResNet-50 shape ({modules} modules), CPU, batch 2 of 16×16, torch {torch.__version__}")
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    figures = []
    with stand_in_gpu(delay):
        for _ in range(rounds):
            # Boundaries come faster than the flush interval on a GPU; here a step is longer.
            figures.append(measure_parts(model, x, y, steps, 4, flush_interval_s=60.0))
    merged = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
    print_parts(merged, f", median of {rounds} rounds of {steps} steps")
    with stand_in_gpu(0):
        slices = processing_slices(model, x, y, int(merged["every"]), 20)
    print(f"\n== processing one detailed step ({slices['events']:.0f} events), 20 rounds ==")
    for key in list(slices)[1:]:
        print(f"{key:40} {slices[key]:10.1f} µs")
    with stand_in_gpu(delay):
        first = first_step(lambda: resnet((3, 4, 6, 3), 64), x, y, 2 * rounds)
    print(f"\n== the first step without example_inputs, {2 * rounds} rounds (training thread) ==")
    for key, value in first.items():
        print(f"{key:40} {value:+10.1f}")
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--stand-in", action="store_true", help="part 3 on the CPU")
    parser.add_argument("--steps", type=int, default=30, help="steps per round (--stand-in)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (--stand-in)")
    args = parser.parse_args()
    if args.stand_in:
        stand_in(args.steps, args.rounds)
        return 0
    if not args.smoke and not torch.cuda.is_available():
        print("bench_cuda_hooks: no CUDA GPU here; nothing measured (--smoke checks the script)")
        return 0
    setup = _setup(argparse.Namespace(smoke=args.smoke, epoch_steps=0))
    if setup.cuda:
        print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
        primitives()
    step_modes(setup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
