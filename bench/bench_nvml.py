"""Benchmark of the NVML collector with 8 fake GPUs: cost per tick and rate of the power series.

There is no GPU here, so the collector runs against the scenario-driven fake of ``pynvml``
(collectors/nvml/fake.py): 8 H100s, each with a driver sample buffer filled every 20 ms (the
fake's rate; the real period depends on the driver) and 2 compute processes with a
fresh utilisation sample per tick, tracked as one process tree (stat files in a temporary root).

Prints, in one run:
- wall and CPU µs per tick of the collector's worker-thread job (``_tick``), and per tick through
  ``collect()`` on an event loop (the executor hop and ``emit`` included);
- the baseline: a bare loop making the same fake calls with the same arguments per tick and
  keeping only the cursors, i.e. the cost of the fake itself, which a real driver replaces;
- points per tick and the rate of the emitted ``gpu_sample`` power series per GPU, beside the
  fake driver's sample rate.

Then, on one GPU at a 100 ms tick, the CPU per tick of three cadences: every call every tick
(every interval 0, the collector before its cadences), the previous defaults (energy counter,
detail reads and per-process utilisation once a second, the power sample buffer every tick) and
the defaults (the same once a second, the sample buffers with them, per-process utilisation
every 5 s):

- with the fake, each call busy-waiting its cost measured on an H200 (``H200_COSTS_US``); the
  estimates per GPU add the collector's own CPU (outside the calls) to the calls it made at the
  costs measured on the H200 and on the H100 (``H100_COSTS_US``: the H100's figure where
  measured), so the proportions are the real ones;
- with ``--real``, on the real NVML of this machine (GPU 0, real 100 ms ticks), after the cost of
  each call the collector makes (200 calls each; also the energy counter read as field 191)
  and the depth of the driver's sample buffers (one read from 0 of each: samples, the time
  they span, their period).

Run: ``.venv/bin/python bench/bench_nvml.py [--ticks 200] [--rounds 5] [--real]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acquisition.api import PluginContext
from acquisition.point import Point
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import COST_SOURCES, H100_COSTS_US, H200_COSTS_US, FakeNvml
from collectors.nvml.parse import _SAMPLE_TYPES, decode_samples

GPUS = 8
PERIOD_US = 20_000
STEP_US = 1_000_000
T0_NS = 1_763_884_800_000_000_000


def scenario(ticks: int) -> dict[str, Any]:
    gpus = []
    for i in range(GPUS):
        gpus.append(
            {
                "uuid": f"GPU-{i:08x}-0000-4000-8000-000000000000",
                "name": "NVIDIA H100 80GB HBM3",
                "architecture": 9,
                "memory_total": 85520809984,
                "memory_reserved": 567279616,
                "power_limit_mw": 700000,
                "power_instant_mw": 350000 + i,
                "power_usage_mw": 340000,
                "energy_mj": [1_000_000 + 350_000 * step for step in range(ticks + 2)],
                "utilization_gpu": 90,
                "utilization_memory": 40,
                "memory_used": 40_000_000_000,
                "temperature_c": 60,
                "clock_sm_mhz": 1980,
                "clock_mem_mhz": 2619,
                "sample_generator": {
                    "period_us": PERIOD_US,
                    "step_us": STEP_US,
                    "depth": 120,
                    "power_mw": 350000,
                    "gpu_util": 90,
                    "memory_util": 40,
                },
                "process_generator": {
                    "pids": [41000 + 2 * i, 41001 + 2 * i],
                    "used": 2_000_000_000,
                    "sm": 45,
                    "mem": 20,
                    "step_us": STEP_US,
                },
            }
        )
    return {"gpu": gpus, "driver_version": "550.54.15"}


def write_proc(root: Path) -> None:
    """The tracked tree: 41000 (root) and its children, as /proc/<pid>/stat."""
    for pid in range(41000, 41000 + 2 * GPUS):
        parent = 40999 if pid == 41000 else 41000
        fields = ["S", str(parent), *["0"] * 17, str(100 + pid), *["0"] * 32]
        (root / "proc" / str(pid)).mkdir(parents=True)
        (root / "proc" / str(pid) / "stat").write_text(f"{pid} (python) {' '.join(fields)}\n")


def context(root: Path) -> PluginContext:
    return PluginContext(
        host="bench",
        interval_s=1.0,
        state_dir=root,
        data_dir=root,
        runtime_dir=root,
        status={"tracked_pids": {41000}},
    )


def bare_loop(fake: FakeNvml, ticks: int) -> tuple[float, float]:
    """The same fake calls per tick, keeping only the cursors. Returns (wall, CPU) µs per tick."""
    fake.nvmlInit()
    handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(fake.nvmlDeviceGetCount())]
    cursors = {(i, t): 0 for i in range(len(handles)) for t in (0, 1, 2)}
    process_cursors = dict.fromkeys(range(len(handles)), 0)
    wall = cpu = 0.0
    for step in range(1, ticks + 1):
        fake.step = step
        w0, c0 = time.perf_counter(), time.thread_time()
        for i, h in enumerate(handles):
            fake.nvmlDeviceGetFieldValues(h, [186])
            fake.nvmlDeviceGetPowerUsage(h)
            fake.nvmlDeviceGetTotalEnergyConsumption(h)
            fake.nvmlDeviceGetUtilizationRates(h)
            fake.nvmlDeviceGetMemoryInfo(h, version=0x02000028)
            fake.nvmlDeviceGetTemperatureV(h, 0)
            fake.nvmlDeviceGetClockInfo(h, 1)
            fake.nvmlDeviceGetClockInfo(h, 2)
            fake.nvmlDeviceGetEnforcedPowerLimit(h)
            for t in (0, 1, 2):
                _, samples = fake.nvmlDeviceGetSamples(h, t, cursors[i, t])
                cursors[i, t] = samples[-1].timeStamp
            fake.nvmlDeviceGetComputeRunningProcesses(h)
            util = fake.nvmlDeviceGetProcessesUtilizationInfo(h, process_cursors[i])
            process_cursors[i] = max(s.timeStamp for s in util)
        wall += time.perf_counter() - w0
        cpu += time.thread_time() - c0
    fake.nvmlShutdown()
    return wall / ticks * 1e6, cpu / ticks * 1e6


async def collector_ticks(
    root: Path, ticks: int, via_collect: bool
) -> tuple[float, float, list[Point]]:
    """(wall µs, CPU µs of the worker job) per tick, and every point emitted."""
    fake = FakeNvml(scenario(ticks))
    collector = NvmlCollector(NvmlConfig(root=str(root)), context(root), nvml=fake, environ={})
    await collector.open()
    points: list[Point] = []
    wall = cpu = 0.0
    roots = frozenset({41000})
    try:
        for step in range(1, ticks + 1):
            fake.step = step
            now_ns = T0_NS + step * STEP_US * 1000
            if via_collect:
                w0 = time.perf_counter()
                await collector.collect(points.append, now_ns)
                wall += time.perf_counter() - w0
            else:
                w0, c0 = time.perf_counter(), time.thread_time()
                points.extend(collector._tick(now_ns, roots))
                wall += time.perf_counter() - w0
                cpu += time.thread_time() - c0
    finally:
        await collector.aclose()
    return wall / ticks * 1e6, cpu / ticks * 1e6, points


TICK_NS = 100_000_000
CADENCES: dict[str, dict[str, float]] = {
    "every call every tick (intervals 0)": {
        "energy_interval": 0.0,
        "detail_interval": 0.0,
        "process_interval": 0.0,
    },
    "previous defaults (power buffer every tick)": {"process_interval": 0.0},
    "defaults (buffers 1 s, processes 5 s)": {},
}


class PreviousDefaults(NvmlCollector):
    """The collector as its defaults were before the sample buffers moved to the detail reads:
    the power buffer on every tick, per-process utilisation with every detail read."""

    def _buffers_due(self, gpu: Any, now_ns: int, *, energy: bool, detail: bool) -> Any:
        return super()._buffers_due(gpu, now_ns, energy=energy, detail=detail) or _SAMPLE_TYPES[:1]


class Timed:
    """An NVML module whose calls' CPU time is counted apart from the caller's."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.inside = 0.0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.nvml, name)
        if not name.startswith("nvml") or not callable(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            c0 = time.thread_time()
            try:
                return value(*args, **kwargs)
            finally:
                self.inside += time.thread_time() - c0

        return timed


def cadence_ticks(
    nvml: Any, root: Path, ticks: int, label: str, real: bool
) -> tuple[float, float, Counter[str]]:
    """Per 100 ms tick on GPU 0 (``real``: real time between ticks): CPU µs of the worker job,
    CPU µs inside the NVML calls, and the calls made (the fake's count; empty on a real GPU)."""
    timed = Timed(nvml)
    kind = PreviousDefaults if label.startswith("previous") else NvmlCollector
    config = NvmlConfig(root=str(root), gpus="0", **CADENCES[label])
    collector = kind(config, context(root), nvml=timed, environ={})
    asyncio.run(collector.open())
    calls = Counter(getattr(nvml, "calls", {}))
    timed.inside = cpu = 0.0
    start = time.time_ns()
    try:
        for step in range(1, ticks + 1):
            now_ns = start + step * TICK_NS
            if real:
                time.sleep(max(now_ns - time.time_ns(), 0) / 1e9)
            else:
                nvml.step = step
            c0 = time.thread_time()
            collector._tick(now_ns, frozenset({41000}))
            cpu += time.thread_time() - c0
    finally:
        asyncio.run(collector.aclose())
    made = Counter(getattr(nvml, "calls", {})) - calls
    made["nvmlShutdown"] = 0
    return cpu / ticks * 1e6, timed.inside / ticks * 1e6, +made


def fake_gpu(ticks: int, costs: dict[str, float] = H200_COSTS_US) -> FakeNvml:
    """One GPU of the scenario, each call costing what it costs on an H200, 100 ms per step."""
    one = scenario(ticks)
    gpu = dict(one["gpu"][0])
    gpu["sample_generator"] = {**gpu["sample_generator"], "step_us": TICK_NS // 1000}
    gpu["process_generator"] = {**gpu["process_generator"], "step_us": TICK_NS // 1000}
    return FakeNvml({"gpu": [gpu]}, costs=costs)


def call_costs(nvml: Any, calls: int = 200) -> dict[str, float]:
    """CPU µs per call of each NVML call the collector makes, on GPU 0."""
    nvml.nvmlInit()
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        probes = {
            "nvmlDeviceGetTotalEnergyConsumption": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h),
            "nvmlDeviceGetFieldValues": lambda: nvml.nvmlDeviceGetFieldValues(h, [186]),
            # the energy counter as a field (191, mJ): whether it costs what the call costs
            "nvmlDeviceGetFieldValues (191, energy)": lambda: nvml.nvmlDeviceGetFieldValues(h, [191]),
            "nvmlDeviceGetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
            "nvmlDeviceGetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
            "nvmlDeviceGetMemoryInfo_v2": lambda: nvml.nvmlDeviceGetMemoryInfo(h, version=0x02000028),
            "nvmlDeviceGetTemperatureV": lambda: nvml.nvmlDeviceGetTemperatureV(h, 0),
            "nvmlDeviceGetClockInfo": lambda: nvml.nvmlDeviceGetClockInfo(h, 1),
            "nvmlDeviceGetEnforcedPowerLimit": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h),
            "nvmlDeviceGetSamples": lambda: nvml.nvmlDeviceGetSamples(h, 0, 0),
            "nvmlDeviceGetSamples (GPU utilisation)": lambda: nvml.nvmlDeviceGetSamples(h, 1, 0),
            "nvmlDeviceGetSamples (memory utilisation)": lambda: nvml.nvmlDeviceGetSamples(h, 2, 0),
            "nvmlDeviceGetComputeRunningProcesses_v3": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h),
            "nvmlDeviceGetProcessesUtilizationInfo": lambda: nvml.nvmlDeviceGetProcessesUtilizationInfo(h, 0),
        }  # fmt: skip
        out: dict[str, float] = {}
        for name, probe in probes.items():
            c0 = time.thread_time()
            for _ in range(calls):
                try:
                    probe()
                except nvml.NVMLError:
                    pass  # NOT_FOUND and the like cost what they cost
            out[name] = (time.thread_time() - c0) / calls * 1e6
        return out
    finally:
        nvml.nvmlShutdown()


def buffer_depths(nvml: Any) -> None:
    """How much each sample buffer of GPU 0 holds: one read from 0 of each."""
    nvml.nvmlInit()
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        print("\nDriver sample buffers of GPU 0 (one read from 0 each):")
        for stype, name, _ in _SAMPLE_TYPES:
            try:
                stamps = sorted(
                    t for t, _ in decode_samples(*nvml.nvmlDeviceGetSamples(h, stype, 0))
                )
            except nvml.NVMLError as exc:
                print(f"  {name:26} {exc}")
                continue
            gaps = sorted(b - a for a, b in itertools.pairwise(stamps)) or [0]
            span = (stamps[-1] - stamps[0]) / 1e6 if stamps else 0.0
            print(f"  {name:26} {len(stamps):5d} samples over {span:6.2f} s, "
                  f"period {gaps[len(gaps) // 2] / 1e3:.1f} ms (max gap {gaps[-1] / 1e3:.1f} ms)")  # fmt: skip
    finally:
        nvml.nvmlShutdown()


def modelled(made: Counter[str], ticks: int, costs: dict[str, float]) -> float:
    """CPU µs per tick of the calls made, at ``costs``."""
    return sum(costs.get(name, 0.0) * n for name, n in made.items()) / ticks


def cadence_report(root: Path, ticks: int, rounds: int, real: bool) -> None:
    make: Any
    if real:
        import pynvml

        costs = call_costs(pynvml)
        print("\nNVML call costs on GPU 0 here (CPU µs per call, 200 calls each; the model's):")
        for name, us in costs.items():
            known = H100_COSTS_US.get(name)
            line = "" if known is None else f"{known:9.1f} ({COST_SOURCES[name]})"
            print(f"  {name:44} {us:9.1f}   {line}")
        buffer_depths(pynvml)
        make = lambda: pynvml  # noqa: E731
    else:
        make = lambda: fake_gpu(ticks)  # noqa: E731
    runs: dict[str, list[tuple[float, float, Counter[str]]]] = {label: [] for label in CADENCES}
    for _ in range(rounds):  # interleaved, best of each
        for label in CADENCES:
            runs[label].append(cadence_ticks(make(), root, ticks, label, real))
    where = "the real NVML (GPU 0)" if real else "the fake NVML, calls at the H200's costs"
    print(f"\nOne GPU, {ticks} ticks of 100 ms, {where}, best of {rounds}: CPU µs per tick")
    if real:
        print(f"  {'':44} {'total':>8} {'in NVML':>8} {'CPU-s/min':>10}")
    else:
        print(f"  {'':44} {'total':>8} {'in fake':>8} {'own':>8} {'H200 est.':>10} "
              f"{'H100 est.':>10} {'CPU-s/min (H200)':>17}")  # fmt: skip
    for label, results in runs.items():
        total = min(r[0] for r in results)
        inside = min(r[1] for r in results)
        own = min(r[0] - r[1] for r in results)  # the collector's own work
        line = f"  {label:44} {total:8.0f} {inside:8.0f}"
        if real:
            line += f" {total * 600 / 1e6:10.2f}"
        else:
            h200 = own + modelled(results[0][2], ticks, H200_COSTS_US)
            h100 = own + modelled(results[0][2], ticks, H100_COSTS_US)
            line += f" {own:8.0f} {h200:10.0f} {h100:10.0f} {h200 * 600 / 1e6:17.2f}"
        print(line)
        if not real:
            per_s = {
                name.removeprefix("nvmlDevice"): n * 10 / ticks for name, n in results[0][2].items()
            }
            print("      calls per second: " + ", ".join(f"{k} {v:g}" for k, v in sorted(per_s.items())))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200, help="ticks per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--real", action="store_true", help="also on this machine's real NVML")
    args = parser.parse_args()
    ticks = args.ticks
    bare: list[tuple[float, float]] = []
    job: list[tuple[float, float]] = []
    hop: list[float] = []
    points: list[Point] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_proc(root)
        # Interleaved rounds, best of each: this machine is shared, and a disturbed round only
        # ever makes a figure worse.
        for _ in range(args.rounds):
            bare.append(bare_loop(FakeNvml(scenario(ticks)), ticks))
            wall, cpu, points = asyncio.run(collector_ticks(root, ticks, via_collect=False))
            job.append((wall, cpu))
            hop.append(asyncio.run(collector_ticks(root, ticks, via_collect=True))[0])
    bare_wall, bare_cpu = min(w for w, _ in bare), min(c for _, c in bare)
    tick_wall, tick_cpu = min(w for w, _ in job), min(c for _, c in job)
    power = [p for p in points if p.measurement == "gpu_sample" and "power_watts" in p.fields]
    rate = len(power) / GPUS / (ticks * STEP_US / 1e6)
    print(
        f"NVML collector, {GPUS} fake GPUs, {ticks} ticks of 1 s (fake time), best of {args.rounds}"
    )
    print(f"{'':42} {'wall µs/tick':>13} {'CPU µs/tick':>12}")
    print(f"{'baseline: bare loop over the same calls':42} {bare_wall:13.0f} {bare_cpu:12.0f}")
    print(f"{'collector worker job (_tick)':42} {tick_wall:13.0f} {tick_cpu:12.0f}")
    print(f"{'collector via collect() (executor + emit)':42} {min(hop):13.0f} {'':>12}")
    print(
        f"collector overhead over the bare calls: {tick_cpu - bare_cpu:.0f} µs CPU per tick "
        f"({(tick_cpu - bare_cpu) / GPUS:.0f} µs per GPU), x{tick_cpu / bare_cpu:.2f}"
    )
    print(f"points per tick: {len(points) / ticks:.1f}")
    print(
        f"emitted power series: {rate:.1f} samples/s per GPU "
        f"(fake driver buffer: {1e6 / PERIOD_US:.1f}/s; a 1 Hz agent alone would give 1.0/s)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        write_proc(Path(tmp))
        cadence_report(Path(tmp), min(ticks, 100), min(args.rounds, 3), real=False)
        if args.real:
            try:
                cadence_report(Path(tmp), min(ticks, 100), 1, real=True)
            except Exception as exc:  # the driver's reason, on one line
                sys.exit(f"--real: no usable NVIDIA GPU here: {exc}")


if __name__ == "__main__":
    main()
