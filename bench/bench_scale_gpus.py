"""How the NVML collector's CPU per tick grows with the number of GPUs: 1, 2, 4, 8.

There is no GPU here: the collector runs against the scenario-driven fake of ``pynvml``
(``collectors/nvml/fake.py``, H100s with a driver sample buffer and two compute processes
each), through ``bench/bench_nvml.py``'s scenario. Per size: CPU µs per tick of the collector's
worker job plus encoding its points to line protocol, best of interleaved rounds, beside the
bare loop making the same fake calls (the fake's own cost, which a real driver replaces). The
extra CPU per tick is fitted against the GPU count and the constant per GPU printed; a plot goes
to ``bench/scale_gpus.png``.

Run: ``.venv/bin/python bench/bench_scale_gpus.py [--ticks 100] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_nvml  # noqa: E402

from acquisition.lineproto import LineEncoder  # noqa: E402
from collectors.nvml.fake import FakeNvml  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sizes = [1, 2, 4, 8]
    ours: dict[int, float] = dict.fromkeys(sizes, float("inf"))
    bare: dict[int, float] = dict.fromkeys(sizes, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bench_nvml.GPUS = max(sizes)
        bench_nvml.write_proc(root)
        for _ in range(args.rounds):
            for g in sizes:
                bench_nvml.GPUS = g
                _, cpu, points = asyncio.run(
                    bench_nvml.collector_ticks(root, args.ticks, via_collect=False)
                )
                c0 = time.thread_time()
                LineEncoder({"host": "bench"}).encode_many(points)
                encode_us = (time.thread_time() - c0) / args.ticks * 1e6
                ours[g] = min(ours[g], cpu + encode_us)
                fake = FakeNvml(bench_nvml.scenario(args.ticks))
                bare[g] = min(bare[g], bench_nvml.bare_loop(fake, args.ticks)[1])
    print(f"NVML collector + encoder, fake H100s, {args.ticks} ticks, best of {args.rounds}")
    print(f"{'GPUs':>5} {'nrg CPU us/tick':>16} {'bare calls us/tick':>19} {'nrg - bare':>11}")
    extra = {g: ours[g] - bare[g] for g in sizes}
    for g in sizes:
        print(f"{g:5d} {ours[g]:16.0f} {bare[g]:19.0f} {extra[g]:11.0f}")
    xs, ys = sizes, [extra[g] for g in sizes]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    print(f"fit (nrg - bare): {my - slope * mx:.0f} us + {slope:.0f} us x GPUs per tick")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [ours[g] for g in xs], "o-", label="nrg collector + encoder")
    ax.plot(xs, [bare[g] for g in xs], "s--", label="bare fake-NVML calls")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("CPU us per tick")
    ax.set_title(f"NVML collector cost vs GPUs ({slope:.0f} us per GPU over the calls)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = HERE / "scale_gpus.png"
    fig.savefig(out, dpi=100)
    print(f"plot: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
