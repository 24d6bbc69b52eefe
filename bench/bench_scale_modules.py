"""How the training-side cost grows with the number of modules: 10 to 10,000.

Models of ``n`` modules (a root and blocks of ``Linear(8, 8)`` + ``Tanh``), batch 4, SGD, one
intra-op thread. Per size: whole-process CPU time per step (after a warm-up step) plain and
with a full ``instrument()`` session timing every module on every step
(``module_detail_every=1``, events through the real sender to a fallback file), in interleaved
rounds; the extra CPU per step is fitted against the module count (least squares through the
measured points) and the constant per module printed. A plot goes to
``bench/scale_modules.png``.

Run: ``.venv/bin/python bench/bench_scale_modules.py [--quick] [--freeze-gc]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
from torch import nn

from acquisition.torch import instrument

HERE = Path(__file__).resolve().parent


def model_of(modules: int) -> nn.Module:
    """A root and (modules - 1) / 3 blocks of Sequential(Linear, Tanh): about ``modules``."""
    blocks = max(1, (modules - 1) // 3)
    return nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(blocks)))


def cpu_per_step(model: nn.Module, steps: int, tmp: str, session: bool) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 8)

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    def run() -> float:
        step()  # warm-up: a session escapes each series' tags once, on its first step
        t = time.process_time()
        for _ in range(steps):
            step()
        return (time.process_time() - t) / steps

    if not session:
        return run()
    with instrument(
        model,
        example_inputs=(x,),
        graph=False,
        run="scale",
        socket_path=f"{tmp}/none.sock",
        fallback_dir=tmp,
        module_detail_every=1,
    ):
        return run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--freeze-gc", action="store_true", help="gc.freeze() each model: the collector's share"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    sizes = [10, 100, 1_000, 10_000]
    rounds = 2 if args.quick else 5
    extra: dict[int, float] = {}
    plain_ms: dict[int, float] = {}
    print(f"torch {torch.__version__}, 1 intra-op thread, {rounds} interleaved rounds per size")
    print(f"{'modules':>8} {'plain ms/step':>14} {'nrg ms/step':>12} {'extra us/module':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            torch.manual_seed(0)
            model = model_of(n)
            if args.freeze_gc:
                gc.collect()
                gc.freeze()
            count = sum(1 for _ in model.modules())
            steps = max(5, 20_000 // count)
            cpu_per_step(model, 2, tmp, session=False)
            plain, nrg = [], []
            for _ in range(rounds):
                plain.append(cpu_per_step(model, steps, tmp, session=False))
                nrg.append(cpu_per_step(model, steps, tmp, session=True))
            p, q = statistics.median(plain), statistics.median(nrg)
            extra[count], plain_ms[count] = q - p, p
            print(f"{count:8d} {p * 1e3:14.3f} {q * 1e3:12.3f} {(q - p) / count * 1e6:16.2f}")
    xs = list(extra)
    ys = [extra[x] for x in xs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    intercept = my - slope * mx
    print(
        f"fit: extra CPU per step = {intercept * 1e6:.1f} us + {slope * 1e6:.2f} us x modules "
        f"(every module called once forward and timed in backward, every step)"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(xs, [y * 1e3 for y in ys], "o-", label="nrg extra CPU per step")
    ax.loglog(xs, [plain_ms[x] * 1e3 for x in xs], "s--", label="plain step CPU")
    ax.set_xlabel("modules in the model")
    ax.set_ylabel("ms of CPU per step")
    ax.set_title(f"acquisition.torch cost vs modules ({slope * 1e6:.1f} us per module)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = HERE / ("scale_modules_frozen_gc.png" if args.freeze_gc else "scale_modules.png")
    fig.savefig(out, dpi=100)
    print(f"plot: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
