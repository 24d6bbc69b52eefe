"""The GPU check of the training-side path: every figure nrg's GPU goals are stated in, one run.

Workload: ResNet-50 (torchvision's when installed, else the same network defined here), 100
classes, batch 64×3×224×224 fp32, SGD, synthetic data, on CUDA device 0; warm-up steps first,
rounds interleaved across modes, medians reported. Sections:

1. hook cost per mode (plain, ``instrument()`` default, module detail on every step, the same
   without backward, steps only) beside ``torch.profiler`` (CPU + CUDA), how much slower a
   step with module detail is than the others (from the steps' own GPU intervals), and the
   training thread's CPU per part of the default mode (:mod:`bench.hook_parts`);
2. the first step, and the sum of the next steps: plain, instrumented without example inputs,
   and with them (their analysis runs at start);
3. per-epoch energy against NVML's energy counter read after ``torch.cuda.synchronize()`` at
   each epoch's start and end, with the agent (``nrg-collect -- JOB``) at its default interval
   and at 100 ms: three epochs of different power; each epoch's stated error bar beside its true
   error, and the stated bar of the run's steps against their energy;
4. ``acquisition.torch.profile(...).export_chrome_trace`` (seconds, size, events with energy);
5. an in-process ``Tracker(agent_data=False)`` against the counter, and its GPU memory;
6. the agent's CPU per collector (procfs, rapl, nvml, all) at 100 ms while a second process
   keeps the GPU busy: CPU-s per minute, start-up subtracted; all collectors the previous way
   too (per-core points every tick, each collector on its own timer: ``previous``); then
   ``bench/bench_agent_gpu.py --real``: the same agent in one process, previous and now, and
   where its CPU goes (each collector, the bus, processors, encoder, sink, the event loop).

Run: ``.venv/bin/python bench/bench_gpu.py`` (about 4 minutes on one H100). Without a GPU it
says so and exits; ``--smoke`` runs every section on the CPU, tiny and short, to check the
script (``tests/torch/test_bench_gpu.py`` does). ``--cpu-full`` runs section 2 on the CPU, full
size, one thread, batch 2 of 32×32 images (a short step, mostly Python's per-operation work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.torch import instrument
from bench.hook_parts import measure_parts, print_parts
from bench.resnet import resnet

NO_GPU = (
    "bench_gpu: no CUDA GPU here (torch.cuda.is_available() is False); nothing measured. "
    "Run it on a GPU machine, or with --smoke to check the script on the CPU."
)
HERE = Path(__file__).resolve()


# --- workload ------------------------------------------------------------------------------------


@dataclass
class Setup:
    device: torch.device
    smoke: bool
    batch: int
    size: int
    warmup: int
    steps: int
    rounds: int
    epoch_steps: int
    agent_s: float

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def model(self) -> nn.Module:
        if self.smoke:
            return resnet((1, 1, 1, 1), 8).to(self.device)
        try:
            import torchvision  # type: ignore[import-untyped]

            return torchvision.models.resnet50(num_classes=100).to(self.device)  # type: ignore[no-any-return]
        except ImportError:
            return resnet((3, 4, 6, 3), 64).to(self.device)

    def batch_of(self, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        n = n or self.batch
        x = torch.randn(n, 3, self.size, self.size, device=self.device)
        return x, torch.randint(0, 100, (n,), device=self.device)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def step_lines(directory: Path) -> list[Any]:
    """The nrg_step points a session without an agent wrote to its fallback file."""
    points = []
    for path in directory.glob("*.lp"):
        for line in path.read_text().splitlines():
            p = decode_line(line)
            if p.measurement == "nrg_step":
                points.append(p)
    return sorted(points, key=lambda p: int(p.fields["step"]))


# --- 1. hook cost ------------------------------------------------------------------------------


def _session(tmp: Path, x: torch.Tensor, **kwargs: Any) -> Callable[[nn.Module], Any]:
    def make(model: nn.Module) -> Any:
        return instrument(
            model,
            example_inputs=(x,),
            graph=False,
            run="bench-gpu",
            socket_path=tmp / "absent.sock",
            fallback_dir=tmp,
            **kwargs,
        )

    return make


def _profiler(setup: Setup) -> Callable[[nn.Module], Any]:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if setup.cuda else [])
    return lambda model: profile(activities=acts)


def hook_cost(setup: Setup) -> None:
    x, y = setup.batch_of()
    modes: dict[str, Callable[[nn.Module], Any]] = {}
    rows: dict[str, list[float]] = {}
    detail: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nrg-bench-gpu-") as tmp_name:
        tmp = Path(tmp_name)
        modes = {
            "plain": lambda model: nullcontext(),
            "instrument() default": _session(tmp / "default", x),
            "module detail every step": _session(tmp / "every", x, module_detail_every=1),
            "every step, backward=False": _session(
                tmp / "nobwd", x, module_detail_every=1, backward=False
            ),
            "steps only": _session(tmp / "steps", x, module_detail_every=10**9),
            "torch.profiler (CPU+CUDA)": _profiler(setup),
        }
        rows = {name: [] for name in modes}
        model = setup.model()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        every = 1
        for r in range(setup.rounds):
            for name, make in list(modes.items())[:: 1 if r % 2 == 0 else -1]:
                context = make(model)
                if name == "instrument() default":
                    every = context.module_detail_every
                with context:
                    for _ in range(setup.warmup):
                        train_step(model, opt, x, y)
                    setup.sync()
                    t0 = time.perf_counter()
                    for _ in range(setup.steps):
                        train_step(model, opt, x, y)
                    setup.sync()
                    rows[name].append((time.perf_counter() - t0) / setup.steps * 1e3)
            detail.append(_detailed_ratio(tmp / "default", every))
    plain = statistics.median(rows["plain"])
    print(f"\n== 1. hook cost: median of {setup.rounds} rounds of {setup.steps} steps ==")
    print(f"{'mode':30} {'ms/step':>9} {'vs plain':>9}")
    for name, values in rows.items():
        ms = statistics.median(values)
        print(f"{name:30} {ms:9.2f} {(ms / plain - 1) * 100:+8.1f}%")
    ratios = [d for d in detail if d == d]
    if ratios:
        print(
            f"detailed step / other steps (default mode, median): {statistics.median(ratios):.3f}"
        )
    print_parts(measure_parts(model, x, y, max(setup.steps, 3), setup.warmup))


def _detailed_ratio(directory: Path, every: int) -> float:
    """Median duration of the steps with module detail over that of the others (GPU interval
    on CUDA, else the host's), from the default session's step lines; NaN if unknown."""
    steps = step_lines(directory)
    for path in directory.glob("*.lp"):
        path.unlink()

    def seconds(p: Any) -> float:
        f = p.fields
        if "gpu_end_time_ns" in f:
            return (int(f["gpu_end_time_ns"]) - int(f["gpu_start_time_ns"])) / 1e9
        return float(f["duration_seconds"])

    detailed = [seconds(p) for p in steps[1:] if int(p.fields["step"]) % every == 0]
    others = [seconds(p) for p in steps[1:] if int(p.fields["step"]) % every != 0]
    if not detailed or not others:
        return float("nan")
    return statistics.median(detailed) / statistics.median(others)


# --- 2. the first step -------------------------------------------------------------------------


def first_step(setup: Setup) -> None:
    x, y = setup.batch_of()
    modes = ("plain", "no example inputs", "example inputs")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
    starts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nrg-bench-first-") as tmp_name:
        tmp = Path(tmp_name)
        for r in range(max(1, setup.rounds)):
            for name in list(results)[:: 1 if r % 2 == 0 else -1]:
                model = setup.model()
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                train_step(model, opt, x, y)  # kernels, cuDNN plans, allocator: not nrg's cost
                setup.sync()
                t0 = time.perf_counter()
                context: AbstractContextManager[Any] = nullcontext()
                if name != "plain":
                    example = (x,) if name == "example inputs" else None
                    context = instrument(
                        model,
                        example_inputs=example,
                        run="bench-first",
                        socket_path=tmp / "absent.sock",
                        fallback_dir=tmp,
                        graph_dir=tmp,
                    )
                with context:
                    t1 = time.perf_counter()
                    train_step(model, opt, x, y)
                    setup.sync()
                    t2 = time.perf_counter()
                    for _ in range(setup.steps):
                        train_step(model, opt, x, y)
                    setup.sync()
                    t3 = time.perf_counter()
                results[name].append(((t2 - t1) * 1e3, (t3 - t2) * 1e3))
                if name == "example inputs":
                    starts.append((t1 - t0) * 1e3)

    def median(name: str, i: int) -> float:  # i: 0 the first step, 1 the next steps' sum
        return statistics.median(row[i] for row in results[name])

    print("\n== 2. the first step of a session (after one warm step of the same model) ==")
    for name in modes:
        ms, later, plain = median(name, 0), median(name, 1), median("plain", 1)
        print(
            f"{name:20} first step {ms:9.1f} ms  added {ms - median('plain', 0):+8.1f} ms"
            f"   next {setup.steps} steps {later:9.1f} ms  added {later - plain:+8.1f} ms"
        )
    print(f"{'':20} session start with example inputs: {statistics.median(starts):.1f} ms")


# --- 3. per-epoch energy against NVML's counter ---------------------------------------------------


class Counter:
    """NVML's energy counter of GPU 0, read after a synchronize (J); absent without NVML."""

    def __init__(self) -> None:
        self.handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception:  # no driver, no GPU, no counter: the figures say n/a
            self.handle = None

    def read(self) -> float | None:
        if self.handle is None:
            return None
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1e3


def child_train(out: str, smoke: bool, epoch_steps: int) -> None:
    """The tracked job of section 3: three epochs of different power, the counter read after a
    synchronize at each epoch's start and end."""
    setup = _setup(argparse.Namespace(smoke=smoke, epoch_steps=epoch_steps))
    model = setup.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    counter = Counter()
    epochs = []
    full = setup.batch_of()
    small = setup.batch_of(max(2, setup.batch // 4))  # batch norm needs two samples
    with instrument(model, example_inputs=(full[0],), run="bench-epochs") as session:
        for epoch, (batch, idle_ms) in enumerate(((full, 0.0), (full, 30.0), (small, 0.0))):
            session.epoch(epoch)
            start = counter.read()
            t0 = time.time_ns()
            for _ in range(epoch_steps):
                train_step(model, opt, *batch)
                if idle_ms:
                    setup.sync()
                    time.sleep(idle_ms / 1e3)  # a lower-power epoch: the GPU idles between steps
            end = counter.read()
            epochs.append(
                {
                    "epoch": epoch,
                    "start_ns": t0,
                    "end_ns": time.time_ns(),
                    "j": None if start is None or end is None else end - start,
                }
            )
    Path(out).write_text(json.dumps(epochs))


def epoch_energy(setup: Setup, interval: str | None) -> None:
    label = interval or "default"
    with tempfile.TemporaryDirectory(prefix="nrg-bench-epochs-") as tmp_name:
        tmp = Path(tmp_name)
        truth_path, summary_path = tmp / "truth.json", tmp / "summary.json"
        cmd = [sys.executable, "-m", "acquisition.cli", "-q", "--summary-file", str(summary_path)]
        if interval:
            cmd += ["--interval", interval]
        cmd += ["--", sys.executable, str(HERE), "--child-train", str(truth_path)]
        cmd += ["--epoch-steps", str(setup.epoch_steps)] + (["--smoke"] if setup.smoke else [])
        env = dict(os.environ, NRG_DATA_DIR=str(tmp / "data"), NRG_RUNTIME_DIR=str(tmp / "run"))
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        print(f"\n== 3. per-epoch energy, agent interval {label} ==")
        if done.returncode != 0 or not summary_path.exists():
            print(f"agent run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
            return
        truth = json.loads(truth_path.read_text())
        summary = json.loads(summary_path.read_text())
    by_epoch = {e["epoch"]: e for e in summary.get("epochs", [])}
    print(
        f"{'epoch':>5} {'counter J':>10} {'nrg gpu J':>10} {'true err J':>11} {'true err':>9} "
        f"{'stated bar J':>13} {'inside':>6}"
    )
    for t in truth:
        e = by_epoch.get(t["epoch"], {})
        gpu = sum(
            v for k, v in (e.get("sources") or {}).items() if k.split(":")[0] in ("gpu", "nvml")
        )
        bar = e.get("error_j")
        true = t["j"]
        # The epoch's bar covers every source it counts; the GPU's part of it is what NVML
        # measures, so the GPU's true error must lie inside it.
        diff = gpu - true if true else None
        err = (
            f"{diff:+11.1f} {(gpu / true - 1) * 100:+8.2f}%" if diff is not None else f"{'n/a':>20}"
        )
        bar_text = f"{bar:13.1f}" if bar is not None else f"{'n/a':>13}"
        inside = "n/a" if bar is None or diff is None else ("yes" if abs(diff) <= bar else "NO")
        print(
            f"{t['epoch']:5d} {true or float('nan'):10.1f} {gpu:10.1f} {err} {bar_text} {inside:>6}"
        )
    steps = summary.get("steps") or {}
    energy = steps.get("energy_j") or {}
    total = (energy.get("mean") or 0.0) * (steps.get("count") or 0)
    bar = steps.get("error_j")
    if bar is not None and total:
        print(f"steps: stated error bar {bar:.1f} J for {total:.1f} J ({bar / total * 100:.1f} %)")
    else:
        print("steps: no stated error bar")
    ram = (summary.get("resources") or {}).get("max_gpu_ram") or {}
    print(f"GPU memory, main (tracked run): {ram.get('main')} {ram.get('unit', '')}")


def epoch_energies(setup: Setup) -> None:
    for interval in ("100ms",) if setup.smoke else (None, "100ms"):  # smoke: one covers the code
        epoch_energy(setup, interval)


# --- 4. profiler trace export ------------------------------------------------------------------


def profiler_export(setup: Setup) -> None:
    from torch.profiler import ProfilerActivity

    from acquisition.torch import profile

    x, y = setup.batch_of()
    model = setup.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if setup.cuda else [])
    print("\n== 4. acquisition.torch.profile(...).export_chrome_trace ==")
    with tempfile.TemporaryDirectory(prefix="nrg-bench-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        try:
            with profile(activities=acts) as prof:
                for _ in range(3):
                    train_step(model, opt, x, y)
                setup.sync()
            t0 = time.perf_counter()
            prof.export_chrome_trace(path)
            seconds = time.perf_counter() - t0
        except Exception as exc:
            print(f"FAILED: {type(exc).__name__}: {exc}")
            return
        trace = json.loads(Path(path).read_text())
        events = trace.get("traceEvents", [])
        energy = sum(1 for e in events if "nrg_energy_j" in (e.get("args") or {}))
        size = os.path.getsize(path) / 1e6
    print(f"ok: {seconds:.2f} s, {size:.1f} MB, {len(events)} events, {energy} with energy")


# --- 5. Tracker against the counter ------------------------------------------------------------


def tracker_vs_counter(setup: Setup) -> None:
    from acquisition.tracker import Tracker

    x, y = setup.batch_of()
    model = setup.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    counter = Counter()
    print("\n== 5. Tracker(agent_data=False) against NVML's counter ==")
    only = ["nvml", "procfs"] if setup.cuda else ["procfs"]
    # The counter is read inside the Tracker's span, right after it starts and right before it
    # stops: read outside, it would also count the idle GPU while the Tracker opens NVML and
    # while it waits at stop() for the reading after the span's end.
    with Tracker(agent_data=False, only=only) as tracker:
        start = counter.read()
        for _ in range(setup.epoch_steps):
            train_step(model, opt, x, y)
        end = counter.read()  # after a synchronize
    summary = tracker.summary()
    gpu = sum(
        s.energy_j for s in summary.energy.sources if s.source.split(":")[0] in ("gpu", "nvml")
    )
    true = None if start is None or end is None else end - start
    ram = summary.resources.get("max_gpu_ram", {})
    if true:
        print(f"tracker {gpu:.1f} J, counter {true:.1f} J: {(gpu / true - 1) * 100:+.2f} %")
    else:
        print(f"tracker {gpu:.1f} J, counter n/a")
    print(f"GPU memory, main: {ram.get('main')} {ram.get('unit', '')}")


# --- 6. the agent's CPU per collector ----------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _gpu_busy(setup: Setup) -> Iterator[None]:
    if not setup.cuda:
        yield
        return
    code = (
        "import torch, sys\n"
        "a = torch.randn(8192, 8192, device='cuda')\n"
        "while True:\n    a = (a @ a).clamp_(-1, 1)\n    torch.cuda.synchronize()\n"
    )
    busy = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(3.0)
        yield
    finally:
        busy.kill()
        busy.wait()


PREVIOUS = (
    '[agent]\nshared_ticks = false\n[[collectors.procfs]]\ncore_interval = "0s"\n'
    "[[collectors.rapl]]\n[[collectors.nvml]]\n[[collectors.hooks]]\n"
)
"""The agent as it was before the per-core cadence and the shared ticks, every collector."""


def agent_cpu(setup: Setup) -> None:
    sets = {"procfs": ["procfs"], "all": [], "previous": []}  # smoke: each way of configuring
    sets = sets if setup.smoke else {**sets, "rapl": ["rapl"], "nvml": ["nvml"]}
    print(f"\n== 6. the agent's CPU at 100 ms, {setup.agent_s:.0f} s each, start-up subtracted ==")
    with tempfile.TemporaryDirectory(prefix="nrg-bench-agent-") as tmp_name, _gpu_busy(setup):
        tmp = Path(tmp_name)
        for label, names in sets.items():
            config = tmp / f"{label}.toml"
            config.write_text("".join(f"[[collectors.{n}]]\n" for n in names))
            if label == "previous":  # all, the previous way
                config.write_text(PREVIOUS)
                names = ["procfs", "rapl", "nvml", "hooks"]
            cmd = [sys.executable, "-m", "acquisition.cli", "-q", "--interval", "100ms"]
            if names:
                cmd += ["--config", str(config)]
            cmd += ["--", sys.executable, "-c", f"import time; time.sleep({setup.agent_s + 2.0})"]
            env = dict(os.environ, NRG_DATA_DIR=str(tmp / label), NRG_RUNTIME_DIR=str(tmp / "r"))
            agent = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
            time.sleep(1.0 if setup.smoke else 2.0)  # start-up
            try:
                before = _cpu_seconds(agent.pid)
                time.sleep(setup.agent_s)
                after = _cpu_seconds(agent.pid)
            except (OSError, IndexError):
                print(f"{label:8} agent exited early: {(agent.communicate()[1] or '')[-300:]}")
                continue
            agent.wait()
            per_minute = (after - before) / setup.agent_s * 60
            print(
                f"{label:8} {per_minute:6.2f} CPU-s per minute ({per_minute / 60 * 100:.1f} % of a core)"
            )
        _agent_parts(setup)


def _agent_parts(setup: Setup) -> None:
    """The same agent in one process, where its CPU goes (``bench/bench_agent_gpu.py --real``)."""
    seconds = setup.agent_s if setup.smoke else max(setup.agent_s, 2.0)
    cmd = [sys.executable, str(HERE.parent / "bench_agent_gpu.py"), "--real", "--sets", "all"]
    cmd += ["--seconds", f"{seconds:g}", "--profile-seconds", f"{seconds / 2:g}"]
    print("\nwhere it goes (bench/bench_agent_gpu.py --real):", flush=True)
    done = subprocess.run(cmd, check=False)
    if done.returncode:
        print(f"bench_agent_gpu.py --real failed ({done.returncode})")


# --- main --------------------------------------------------------------------------------------


def _setup(args: argparse.Namespace) -> Setup:
    if args.smoke:
        torch.set_num_threads(1)
        return Setup(torch.device("cpu"), True, 2, 16, 1, 2, 1, args.epoch_steps or 2, 1.0)
    if getattr(args, "cpu_full", False):
        torch.set_num_threads(1)
        return Setup(torch.device("cpu"), False, 2, 32, 1, 20, 3, args.epoch_steps or 2, 1.0)
    return Setup(torch.device("cuda"), False, 64, 224, 20, 40, 3, args.epoch_steps or 150, 15.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="every section on the CPU, tiny")
    parser.add_argument("--cpu-full", action="store_true", help="section 2 on the CPU, full size")
    parser.add_argument("--epoch-steps", type=int, default=0, help="steps per epoch (section 3)")
    parser.add_argument("--only", default="", help="comma-separated section numbers to run")
    parser.add_argument("--child-train", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_train:
        child_train(args.child_train, args.smoke, _setup(args).epoch_steps)
        return 0
    if not args.smoke and not args.cpu_full and not torch.cuda.is_available():
        print(NO_GPU)
        return 0
    setup = _setup(args)
    torch.manual_seed(0)
    if setup.cuda:
        props = torch.cuda.get_device_properties(0)
        print(f"GPU: {props.name}; torch {torch.__version__}; {time.strftime('%Y-%m-%d')}")
        print(f"driver: {_driver()}; CPUs: {os.cpu_count()}")
    else:
        print(
            f"{'full-size' if args.cpu_full else 'smoke'} run on the CPU; torch {torch.__version__}"
        )
    sections: dict[str, Callable[[], None]] = {
        "1": lambda: hook_cost(setup),
        "2": lambda: first_step(setup),
        "3": lambda: epoch_energies(setup),
        "4": lambda: profiler_export(setup),
        "5": lambda: tracker_vs_counter(setup),
        "6": lambda: agent_cpu(setup),
    }
    wanted = [s for s in args.only.split(",") if s] or (["2"] if args.cpu_full else list(sections))
    began = time.perf_counter()
    for key in wanted:
        sections[key]()
    print(f"\nbench_gpu: done in {time.perf_counter() - began:.0f} s")
    return 0


def _driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


if __name__ == "__main__":
    sys.exit(main())
