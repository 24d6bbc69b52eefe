"""A model of the whole agent on a GPU machine at 100 ms: CPU-s per minute, and where it goes.

The real agent (:class:`acquisition.agent.Agent`, its bus, the default processors, the summary
recorder a tracked run attaches, the default file sink) runs in this process at
``--interval 100ms`` with every collector of a GPU machine:

- procfs on this machine's ``/proc``, its ``/proc/stat`` read as usual but its cpu lines replaced
  by those of a 16-core machine (``bench_procfs``'s synthetic lines, every core a little busier
  than the last), tracking a tree of 3 sleeping processes (as ``nrg-collect -- JOB`` does);
- RAPL on a captured powercap tree (two sockets with DRAM);
- NVML on the fake binding, one GPU, each call busy-waiting the CPU time it costs on an NVIDIA
  H200 (``H200_COSTS_US``), the fake's step following the clock (one per 100 ms), its driver
  sample buffers filled every 20 ms, the tracked tree's processes on the GPU;
- hooks listening on a socket of its own (no job connects).

Each variant runs ``--seconds`` after a 2 s warm-up (start-up is not counted): its process CPU,
that of the event loop's thread and of the NVML worker thread, per minute. A second, shorter
run of the same variant is instrumented (:mod:`bench.agent_parts`): exclusive CPU time of each
part (each collector's collect, the runners' timer callbacks, the bus's dispatch, each
processor, the summary recorder, the sinks' queues, the line-protocol encoder, the file sink's
write, the end-of-tick work; the NVML worker's job on its thread), less the cost of the timers
(calibrated in the same run), the rest of the loop thread being the event loop's own wake-ups,
timers and tasks; and the loop's passes per tick. The instrumented total is printed beside the
plain one: read the parts as proportions.

H200 estimate: the CPU spent inside the fake's calls (their busy-wait and the fake's own
bookkeeping, which no driver does) replaced by the H200's cost of the same calls. "Scaled to
the H200's speed" further divides the rest by how much slower this machine was at the agent's
own work than the H200, from procfs alone the previous way (0.60 CPU-s per minute there).
Variants and sets are run interleaved, so the machine's load hits them alike:

- ``previous``: the agent as it was: per-core ``cpu`` points every tick (``core_interval`` 0),
  each collector ticking on its own timer (``shared_ticks = false``);
- ``now``: the defaults;
- baseline: a bare asyncio loop waking every 100 ms and doing nothing.

Also the bus's cost per point with the default processors and without any, over the last run's
points. ``--real`` runs this machine's own procfs, RAPL (where present) and NVML instead (on a
GPU machine: ``bench/bench_gpu.py`` section 6 runs it with the GPU kept busy).

Run: ``.venv/bin/python bench/bench_agent_gpu.py [--seconds 30] [--profile-seconds 10]
[--rounds 1] [--sets all,procfs,rapl,nvml] [--variants previous,now] [--real]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from acquisition import registry
from acquisition.agent import Agent, default_config
from acquisition.api import PluginContext
from acquisition.bus import Bus
from acquisition.config import PluginSpec, parse_config
from acquisition.point import Point
from acquisition.registry import PROCESSORS, build_plugin
from acquisition.report.recorder import attach_recorder
from bench.agent_parts import Parts, instrument, timer_cost_ns
from bench.bench_nvml import scenario as nvml_scenario
from bench.bench_procfs import _stat_text
from collectors.nvml import NvmlCollector, NvmlConfig
from collectors.nvml.fake import H200_COSTS_US, FakeNvml
from collectors.procfs import ProcfsCollector
from collectors.procfs.parsers import parse_forks, parse_proc_stat
from collectors.procfs.sources import ProcfsSource, _pread_all
from tests.rapl.scenarios import install_tree

CORES = 16
H200_PROCFS_S = 0.60
"""CPU-s per minute of the agent with procfs only at 100 ms on the H200 (16 vCPUs), before the
per-core cadence (``bench/bench_gpu.py`` section 6, ``bench/RESULTS.md``)."""
TICK_S = 0.1
WARM_S = 2.0
STAT_LINES = [_stat_text(CORES, k).partition(b"\nintr")[0] for k in range(1, 6001)]
"""The cpu lines of a 16-core /proc/stat at each of 6,000 reads (10 minutes at 10 Hz)."""


# -- the collectors of the model --------------------------------------------------------------


class SyntheticStat(ProcfsSource):
    """This machine's ``/proc/stat``, read as usual, its cpu lines those of 16 cores."""

    reads = 0

    def cpu_times(self) -> dict[str, Any]:
        real = _pread_all(self._stat_fd, self._stat_size)
        SyntheticStat.reads += 1
        data = STAT_LINES[SyntheticStat.reads % len(STAT_LINES)] + real[real.find(b"\nintr") :]
        self._forks = parse_forks(data)
        return parse_proc_stat(data)


class BenchProcfs(ProcfsCollector):
    def _make_source(self) -> ProcfsSource:
        cfg = self.config
        return SyntheticStat(
            cfg.root,
            hz=self._hz,
            page_size=self._page_size,
            descendants=cfg.descendants,
            relist_ns=max(self._detail_ns, 1_000_000_000),
        )


class ClockedFake(FakeNvml):
    """The fake binding, its step the number of 100 ms since it was made."""

    t0 = 0.0

    @property  # type: ignore[override]
    def step(self) -> int:
        return 1 + int((time.monotonic() - self.t0) / TICK_S)

    @step.setter
    def step(self, value: int) -> None:
        pass


FAKES: list[ClockedFake] = []
TREE: list[int] = []


def make_fake() -> ClockedFake:
    gpu = dict(nvml_scenario(1)["gpu"][0])
    gpu["energy_mj"] = [1_000_000 + 35_000 * step for step in range(20_000)]
    step_us = round(TICK_S * 1e6)
    gpu["sample_generator"] = {**gpu["sample_generator"], "step_us": step_us}
    gpu["process_generator"] = {**gpu["process_generator"], "step_us": step_us, "pids": TREE[:2]}
    fake = ClockedFake({"gpu": [gpu], "driver_version": "580.159.04"}, costs=H200_COSTS_US)
    fake.t0 = time.monotonic()
    FAKES.append(fake)
    return fake


class TimedFake:
    """The fake binding, the CPU its calls take (the H200's cost busy-waited, and the fake's own
    bookkeeping, which a driver does not do) counted on the calling thread."""

    def __init__(self, fake: ClockedFake) -> None:
        self.fake = fake
        self.inside_ns = 0
        self._wrapped: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.fake, name)
        if not name.startswith("nvml") or not callable(value):
            return value
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            clock = time.thread_time_ns

            def wrapped(*args: Any, **kwargs: Any) -> Any:
                t0 = clock()
                try:
                    return value(*args, **kwargs)
                finally:
                    self.inside_ns += clock() - t0

            self._wrapped[name] = wrapped
        return wrapped


TIMED: list[TimedFake] = []
REAL: list[bool] = []
"""Set by ``--real``."""
TAP: deque[Point] = deque(maxlen=4000)
"""The last points of the last run, as they crossed the bus (for :func:`bus_cost`)."""


class BenchNvml(NvmlCollector):
    def __init__(self, config: NvmlConfig, context: PluginContext) -> None:
        timed = TimedFake(make_fake())
        TIMED.append(timed)
        super().__init__(config, context, nvml=timed, environ={})


class RealNvml(NvmlCollector):
    """The real NVML (``--real``), the CPU of its calls counted."""

    def __init__(self, config: NvmlConfig, context: PluginContext) -> None:
        import pynvml

        timed = TimedFake(pynvml)  # type: ignore[arg-type]
        TIMED.append(timed)
        super().__init__(config, context, nvml=timed)


# -- one run ------------------------------------------------------------------------------------


CONFIG = """
[agent]
interval = "100ms"
data_dir = "{data}"
state_dir = "{state}"
host = "bench"
run = "bench"
{agent_extra}
{collectors}
[[sinks.file]]
"""
COLLECTORS = {
    "procfs": "[[collectors.procfs]]\n{procfs_extra}\n",
    "rapl": '[[collectors.rapl]]\nroot = "{rapl}"\n',
    "nvml": "[[collectors.nvml]]\n",
    "hooks": '[[collectors.hooks]]\nsocket_path = "{socket}"\n',
}
SETS = {
    "all": ["procfs", "rapl", "nvml", "hooks"],
    "procfs": ["procfs"],
    "rapl": ["rapl"],
    "nvml": ["nvml"],
}
VARIANTS: dict[str, dict[str, str]] = {
    "previous": {"agent_extra": "shared_ticks = false", "procfs_extra": 'core_interval = "0s"'},
    "now": {"agent_extra": "", "procfs_extra": ""},
}


@dataclass
class Result:
    process_s: float  # CPU-s per minute, the whole process
    loop_s: float  # the event loop's thread
    worker_s: float  # the NVML worker thread
    ticks: int
    points: int
    calls: Counter[str]
    inside_s: float  # CPU-s per minute inside the fake's calls
    parts: Parts | None = None

    @property
    def modelled_s(self) -> float:
        """CPU-s per minute of the NVML calls made, at the H200's costs."""
        us = sum(H200_COSTS_US.get(n, 0.0) * k for n, k in self.calls.items())
        return us / 1e6 / (self.ticks * TICK_S) * 60 if self.ticks else 0.0

    @property
    def h200_s(self) -> float:
        """The estimate: the fake's calls replaced by the H200's costs of the same calls (on
        the real NVML: what was measured)."""
        if not self.calls:
            return self.process_s
        return self.process_s - self.inside_s + self.modelled_s


def _config_text(tmp: Path, names: list[str], variant: str) -> str:
    extra = VARIANTS[variant]
    rapl = "/" if REAL else tmp / "rapl" / "xeon-2s-dram"
    where = {"rapl": rapl, "socket": tmp / "hooks.sock"}
    body = "".join(
        COLLECTORS[n].format(rapl=where["rapl"], socket=where["socket"], **extra) for n in names
    )
    return CONFIG.format(
        data=tmp / "data" / variant,
        state=tmp / "state",
        collectors=body,
        agent_extra=extra["agent_extra"],
    )


async def _cpu_window(seconds: float) -> tuple[float, float, float]:
    """(process, loop thread, NVML worker thread) CPU seconds over ``seconds``."""
    worker = _thread_cpu("nrg-nvml")
    p0, l0, w0 = time.process_time(), time.thread_time(), worker()
    await asyncio.sleep(seconds)
    return time.process_time() - p0, time.thread_time() - l0, worker() - w0


def _thread_cpu(prefix: str) -> Callable[[], float]:
    """A reader of the CPU seconds of this process's thread named ``prefix``… (0 without)."""
    import threading

    idents = [t.native_id for t in threading.enumerate() if t.name.startswith(prefix)]
    if not idents:
        return lambda: 0.0
    path = f"/proc/self/task/{idents[0]}/stat"
    hz = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / hz

    return read


async def run_agent(
    tmp: Path, names: list[str], variant: str, seconds: float, profile: bool
) -> Result:
    config = default_config(parse_config(_config_text(tmp, names, variant)))
    agent = Agent(config)
    agent.context.status.setdefault("tracked_pids", set()).add(TREE[0])
    attach_recorder(agent)
    agent.bus.add_sink(TAP.append)
    FAKES.clear()
    TIMED.clear()
    await agent.start()
    parts = Parts() if profile else None
    try:
        await asyncio.sleep(WARM_S)
        if parts is not None:
            instrument(agent, parts, skip=TAP)
        calls0 = Counter(FAKES[0].calls) if FAKES else Counter()
        ticks0 = {c.label: c.runner.stats.runs for c in agent.collectors}
        points0 = agent.bus.points
        inside0 = sum(t.inside_ns for t in TIMED)
        proc, loop, worker = await _cpu_window(seconds)
        inside = (sum(t.inside_ns for t in TIMED) - inside0) / 1e9
        ticks = max((c.runner.stats.runs - ticks0[c.label] for c in agent.collectors), default=0)
        calls = (Counter(FAKES[0].calls) - calls0) if FAKES else Counter()
        points = agent.bus.points - points0
    finally:
        await agent.shutdown()
        if parts is not None:
            del asyncio.get_running_loop()._selector.select  # type: ignore[attr-defined]
    per_min = 60 / seconds
    return Result(
        proc * per_min, loop * per_min, worker * per_min, ticks, points, calls,
        inside * per_min, parts,
    )  # fmt: skip


async def bare_loop(seconds: float) -> float:
    """CPU-s per minute of an asyncio loop waking every 100 ms to do nothing."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    t0 = loop.time()
    deadline = [t0]

    def wake() -> None:
        deadline[0] += TICK_S
        if deadline[0] - t0 >= seconds:
            done.set_result(None)
        else:
            loop.call_at(deadline[0], wake)

    c0 = time.process_time()
    loop.call_at(t0, wake)
    await done
    return (time.process_time() - c0) * 60 / seconds


def bus_cost(context: PluginContext, rounds: int = 7) -> tuple[float, float, int]:
    """CPU µs per point through the bus with the default processors and without any (one
    list as the sink), over the points of the last run, interleaved, best of ``rounds``."""
    points = list(TAP)
    kept: list[Point] = []
    costs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for with_processors in (True, False):
            bus = Bus()
            bus.add_sink(kept.append)
            if with_processors:
                for name in PROCESSORS:
                    spec = PluginSpec("processors", name, {}, explicit=False)
                    bus.add_processor(name, build_plugin(spec, context))
            t0 = time.thread_time_ns()
            for p in points:
                bus.emit(p)
            costs[with_processors].append((time.thread_time_ns() - t0) / len(points) / 1000)
            kept.clear()
    return min(costs[True]), min(costs[False]), len(points)


# -- report -------------------------------------------------------------------------------------


def _spawn_tree() -> subprocess.Popen[bytes]:
    """A tracked tree: a shell and two sleeping children."""
    proc = subprocess.Popen(["sh", "-c", "sleep 1000 & sleep 1000 & wait"], start_new_session=True)
    for _ in range(200):
        try:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            kids = []
        if len(kids) == 2:
            TREE[:] = [proc.pid, int(kids[0]), int(kids[1])]
            break
        time.sleep(0.01)
    return proc


def _print_result(label: str, r: Result) -> None:
    ticks = max(r.ticks, 1)
    line = (
        f"  {label:18} {r.process_s:6.2f} (loop thread {r.loop_s:5.2f}, NVML worker "
        f"{r.worker_s:5.2f}), {r.points / ticks:5.1f} points/tick"
    )
    if r.inside_s and not r.calls:
        line += f"; inside NVML {r.inside_s:5.2f}"
    if r.calls:
        line += (
            f"; in the fake {r.inside_s:5.2f}, its calls at the H200's cost {r.modelled_s:5.2f}"
            f" -> H200 estimate {r.h200_s:5.2f}"
        )
    print(line)


def _print_parts(label: str, r: Result, plain: Result) -> None:
    parts = r.parts
    assert parts is not None
    ticks = max(r.ticks, 1)
    loop_ns = r.loop_s * 1e9 * ticks * TICK_S / 60  # back from per minute to the window
    counted = sum(parts.cpu.values())
    print(f"  {label}: µs per tick (instrumented run: {r.process_s:.2f} CPU-s/min, "
          f"plain {plain.process_s:.2f})")  # fmt: skip
    print(f"    event loop: {parts.selects / ticks:.1f} passes per tick, "
          f"{parts.sleeps / ticks:.1f} of them after a sleep (wake-ups)")  # fmt: skip
    cost = timer_cost_ns()
    print(f"    (a timed call costs {cost / 1000:.1f} µs here: each part is less half that for "
          "each of its calls and of the timed calls inside it; [calls per tick]; the event "
          "loop's row is the loop thread's CPU less every timed part)")  # fmt: skip
    rows = [
        (
            f"{k} [{parts.calls[k] / ticks:.1f}]",
            max(v - (parts.calls[k] + parts.children[k]) * cost / 2, 0),
        )
        for k, v in sorted(parts.cpu.items(), key=lambda kv: -kv[1])
    ]
    rows.append(("event loop: wakeups, timers, tasks, rest", max(loop_ns - counted, 0)))
    rows += [(f"(thread) {k}", v) for k, v in parts.worker.items()]
    window_ns = ticks * TICK_S * 1e9
    if r.calls:
        rows.append(("(thread) nvml: of which in the fake", r.inside_s / 60 * window_ns))
        rows.append(("(thread) nvml: the same calls at H200 cost", r.modelled_s / 60 * window_ns))
    elif r.inside_s:
        rows.append(("(thread) nvml: of which inside NVML", r.inside_s / 60 * window_ns))
    for name, ns in rows:
        us = ns / ticks / 1000
        print(f"    {name:56} {us:8.1f}  = {us * 600 / 1e6:5.3f} CPU-s/min")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window of each run")
    ap.add_argument("--profile-seconds", type=float, default=10.0, help="0: no breakdown")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sets", default="all", help="comma-separated: all, procfs, rapl, nvml")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--real",
        action="store_true",
        help="this machine's collectors: its /proc, RAPL (where present) and NVML (GPU 0 busy)",
    )
    args = ap.parse_args()
    logging.getLogger("nrg").setLevel(logging.ERROR)  # the captured RAPL tree stands still
    logging.getLogger("collectors").setLevel(logging.ERROR)
    if args.real:
        REAL.append(True)
        registry.COLLECTORS.update(nvml=f"{__name__}:RealNvml")
    else:
        registry.COLLECTORS.update(procfs=f"{__name__}:BenchProcfs", nvml=f"{__name__}:BenchNvml")
    tree = _spawn_tree()
    variants = [v for v in args.variants.split(",") if v]
    sets = [s for s in args.sets.split(",") if s]
    try:
        with tempfile.TemporaryDirectory(prefix="nrg-bench-agent-") as name:
            tmp = Path(name)
            (tmp / "rapl").mkdir()
            install_tree("xeon-2s-dram", tmp / "rapl")
            asyncio.run(_main(tmp, sets, variants, args))
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()


async def _main(tmp: Path, sets: list[str], variants: list[str], args: Any) -> None:
    model = (
        "this machine's /proc, RAPL and NVML"
        if REAL
        else f"{CORES} synthetic cores, fake NVML at the H200's costs"
    )
    print(
        f"agent at 100 ms, {model}, tree of {len(TREE)}; {args.seconds:g} s windows after "
        f"{WARM_S:g} s; this machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    plain: dict[tuple[str, str], list[Result]] = {}
    bare: list[float] = []
    for _ in range(args.rounds):  # interleaved
        bare.append(await bare_loop(min(args.seconds, 10.0)))
        for s in sets:
            for v in variants:
                plain.setdefault((s, v), []).append(
                    await run_agent(tmp, SETS[s], v, args.seconds, profile=False)
                )
    print(f"baseline: bare asyncio loop at 10 Hz {min(bare):.3f} CPU-s/min")
    print("CPU-s per minute, best of rounds (H200 estimate: the fake's calls, its own "
          "bookkeeping included, replaced by the H200's cost of each call):")  # fmt: skip
    best: dict[tuple[str, str], Result] = {}
    for key, results in plain.items():
        best[key] = min(results, key=lambda r: r.h200_s)
        _print_result(f"{key[0]}, {key[1]}", best[key])
    for v in variants:
        if all((s, v) in best for s in ("all", "procfs", "rapl", "nvml")):
            est = {s: best[s, v].h200_s if s != "procfs" else best[s, v].process_s
                   for s in ("all", "procfs", "rapl", "nvml")}  # fmt: skip
            print(f"  H200 estimate, {v}: procfs {est['procfs']:.2f}, RAPL {est['rapl']:.2f}, "
                  f"NVML {est['nvml']:.2f}, all {est['all']:.2f} CPU-s per minute")  # fmt: skip
    if ("procfs", "previous") in best and not REAL:
        # The H200 ran procfs only (the previous way) at H200_PROCFS_S: this machine, now, is
        # that many times slower at the agent's own work; the NVML calls keep their cost.
        k = best["procfs", "previous"].process_s / H200_PROCFS_S
        print(f"  scaled to the H200's speed (procfs only, previous: {k:.2f}x the "
              f"{H200_PROCFS_S} CPU-s/min it used there):")  # fmt: skip
        for (name, v), r in best.items():
            scaled = (r.process_s - r.inside_s) / k + r.modelled_s
            print(f"    {name}, {v}: {scaled:.2f} CPU-s per minute")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if TAP:
        context = PluginContext(host="bench", interval_s=TICK_S, state_dir=tmp,
                                data_dir=tmp, runtime_dir=tmp)  # fmt: skip
        with_p, without, n = bus_cost(context)
        print(f"bus, per point of the last run ({n}): {with_p:.2f} µs with the default "
              f"processors, {without:.2f} µs without any")  # fmt: skip
    if args.profile_seconds <= 0 or "all" not in sets:
        return
    print(f"\nwhere it goes: 'all', {args.profile_seconds:g} s instrumented runs")
    for v in variants:
        r = await run_agent(tmp, SETS["all"], v, args.profile_seconds, profile=True)
        _print_parts(v, r, best["all", v])
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
