"""The energy-aware profiler on real CPU torch, with a RAPL powercap tree at known power.

The real RAPL collector samples the tree every 5 ms (in a child process, so that a busy Python
loop here cannot delay its reads behind the GIL; see :class:`ProcessRaplSampler`), its counters
read as hardware counts (the profile's energy at each reading's stamp, however late the tree's
writer runs); the truth for any event is the known power profile integrated over the event's
own interval. The tolerance per event is the fixture's timing granularity (4 ms of the total
power) plus the event's own error estimate.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from acquisition.lineproto import decode_line
from acquisition.point import Point
from acquisition.profiler import profile
from acquisition.profiler.tables import UNKNOWN_SORT_KEY
from acquisition.profiler.trace import ENERGY_ARG, SELF_ENERGY_ARG, load_trace
from acquisition.profiler.wrapper import NO_SOURCE, EnergyProfile, TimedEvent
from tests.profiler.power import (
    ProcessRaplSampler,
    Profile,
    energy_between,
    powercap_tree,
    set_profiles,
)

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, record_function  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PACKAGE_W, DRAM_W = 20.0, 5.0
SLACK_S = 0.004


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op thread: two would fight the sampler and the fixture's writer for 2 CPUs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def constant() -> Iterator[tuple[Path, dict[str, Profile]]]:
    t0 = time.time_ns()
    profiles: dict[str, Profile] = {"package-0": [(t0, PACKAGE_W)], "dram": [(t0, DRAM_W)]}
    with powercap_tree(profiles) as root:
        yield root, profiles


def truth(profiles: Mapping[str, Profile], start: int, end: int) -> float:
    return sum(energy_between(p, start, end) for p in profiles.values())


def max_power(profiles: Mapping[str, Profile]) -> float:
    return sum(max(w for _, w in p) for p in profiles.values())


def assert_energy(ev: TimedEvent, profiles: Mapping[str, Profile]) -> None:
    expected = truth(profiles, ev.start_ns, ev.end_ns)
    assert ev.total_j is not None, ev.name
    tolerance = SLACK_S * max_power(profiles) + ev.error_j
    assert abs(ev.total_j - expected) <= tolerance, (ev.name, ev.total_j, expected, tolerance)


def waited_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (its scheduler statistics);
    0 where the kernel keeps none."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def workload() -> None:
    with record_function("outer"):
        with record_function("busy"):
            busy(0.2)
        with record_function("sleep"):
            time.sleep(0.2)
        with record_function("matmul"):
            a = torch.randn(128, 128)
            for _ in range(20):
                a = torch.tanh(a @ a)


def named(prof: EnergyProfile) -> dict[str, TimedEvent]:
    return {
        e.name: e for e in prof.energy_events() if e.name in ("outer", "busy", "sleep", "matmul")
    }


def test_busy_wait_and_sleep_get_power_times_their_time(
    constant: tuple[Path, dict[str, Profile]],
) -> None:
    root, profiles = constant
    sampler = ProcessRaplSampler(root)
    with profile(activities=[ProfilerActivity.CPU], sampler=sampler) as prof:
        time.sleep(0.03)
        workload()
        time.sleep(0.03)
    events = named(prof)
    for name in ("busy", "sleep", "matmul", "outer"):
        assert_energy(events[name], profiles)
    busy_s = (events["busy"].end_ns - events["busy"].start_ns) / 1e9
    assert events["busy"].by_source["rapl:package-0"] == pytest.approx(PACKAGE_W * busy_s, rel=0.05)
    assert events["busy"].by_source["rapl:dram-0"] == pytest.approx(DRAM_W * busy_s, rel=0.05)
    # nested: the parent's self energy plus its children's totals is its total
    outer = events["outer"]
    children = [e for e in prof.energy_events() if e.name in ("busy", "sleep", "matmul")]
    assert outer.self_j is not None
    assert outer.self_j + sum(c.total_j or 0.0 for c in children) == pytest.approx(
        outer.total_j, rel=1e-9
    )
    # the thread: its self energies plus the time outside any event make the window's energy
    result = prof.last_energy
    assert result is not None and result.unmeasured == 0
    (thread,) = [t for t in result.tracks if t.track[0] == "cpu"]
    selfs = sum(e.self_j or 0.0 for e in prof.energy_events() if not e.device)
    assert selfs == pytest.approx(thread.events_j, rel=1e-9)
    assert thread.events_j + thread.outside_j == pytest.approx(thread.window_j, rel=1e-9)
    window_truth = truth(profiles, *result.window)
    assert thread.window_j == pytest.approx(window_truth, abs=SLACK_S * max_power(profiles))
    assert thread.outside_j > 0.0  # the two 30 ms sleeps outside any event


def test_a_power_step_is_seen_by_the_events_on_each_side() -> None:
    """The step is placed once the 'before' event has ended (however late a loaded machine ran
    it), 50 ms ahead; 'after' starts 30 ms past it."""
    t0 = time.time_ns()
    profiles: dict[str, Profile] = {"package-0": [(t0, 10.0)], "dram": [(t0, 2.0)]}
    with (
        powercap_tree(profiles) as root,
        profile(activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(root)) as prof,
    ):
        time.sleep(0.1)
        with record_function("before"):
            time.sleep(0.2)
        switch = time.time_ns() + 50_000_000
        profiles["package-0"] = [(t0, 10.0), (switch, 40.0)]
        set_profiles(root, profiles)
        while time.time_ns() < switch + 30_000_000:
            time.sleep(0.005)
        with record_function("after"):
            busy(0.2)
    events = {e.name: e for e in prof.energy_events() if e.name in ("before", "after")}
    assert events["before"].end_ns < switch < events["after"].start_ns
    for ev in events.values():
        assert_energy(ev, profiles)
    seconds = {n: (e.end_ns - e.start_ns) / 1e9 for n, e in events.items()}
    before_w = events["before"].by_source["rapl:package-0"] / seconds["before"]
    after_w = events["after"].by_source["rapl:package-0"] / seconds["after"]
    assert before_w == pytest.approx(10.0, rel=0.05)
    assert after_w == pytest.approx(40.0, rel=0.05)


def test_exported_trace_has_power_counters_and_keeps_every_event(
    constant: tuple[Path, dict[str, Profile]], tmp_path: Path
) -> None:
    root, profiles = constant
    with profile(
        activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(root), record_shapes=True
    ) as prof:
        workload()
    # Keep a copy of what torch's own exporter writes (Kineto saves a trace only once).
    torch_export = prof.profiler.export_chrome_trace

    def spy(path: str, *args: object, **kwargs: object) -> None:
        torch_export(path, *args, **kwargs)
        shutil.copy(path, tmp_path / "plain.json")

    prof.profiler.export_chrome_trace = spy
    prof.export_chrome_trace(str(tmp_path / "energy.json"))
    trace = json.loads((tmp_path / "energy.json").read_text())  # plain Chrome trace JSON
    plain = json.loads((tmp_path / "plain.json").read_text())

    def key(event: dict[str, Any]) -> str:
        args = {k: v for k, v in (event.get("args") or {}).items() if not k.startswith("nrg_")}
        return json.dumps({**event, "args": args}, sort_keys=True)

    ours = {key(e) for e in trace["traceEvents"]}
    missing = [e for e in plain["traceEvents"] if key(e) not in ours]
    assert not missing
    assert trace["baseTimeNanoseconds"] == plain["baseTimeNanoseconds"]
    assert trace["traceName"] == str(tmp_path / "energy.json")

    counters = [e for e in trace["traceEvents"] if e.get("ph") == "C"]
    for source, watts in (("rapl:package-0", PACKAGE_W), ("rapl:dram-0", DRAM_W)):
        power = [e for e in counters if e["name"] == f"nrg power {source}"]
        assert len(power) >= 20
        # Weighted by the time each value holds: the fixture's counters move in steps of its
        # rewrite period, so single 5 ms readings alias to one or the other side of the power.
        spans = [(b["ts"] - a["ts"], a["args"]["W"]) for a, b in itertools.pairwise(power)]
        mean = sum(dt * w for dt, w in spans) / sum(dt for dt, _ in spans)
        assert mean == pytest.approx(watts, rel=0.05)
        energy = [e for e in counters if e["name"] == f"nrg energy {source}"]
        first, last = energy[0], energy[-1]
        seconds = (last["ts"] - first["ts"]) / 1e6
        assert last["args"]["J"] - first["args"]["J"] == pytest.approx(watts * seconds, rel=0.05)

    ops = {e["name"]: e for e in trace["traceEvents"] if e.get("ph") == "X"}
    base = trace["baseTimeNanoseconds"]
    for name in ("busy", "sleep"):
        ev = ops[name]
        start = base + round(ev["ts"] * 1000)
        expected = truth(profiles, start, start + round(ev["dur"] * 1000))
        assert ev["args"][ENERGY_ARG] == pytest.approx(expected, abs=0.004 * 25 + 0.05)
        assert ev["args"][SELF_ENERGY_ARG] == ev["args"][ENERGY_ARG]  # leaves
    assert ENERGY_ARG in ops["aten::mm"]["args"]
    (thread,) = [t for t in trace["nrg"]["tracks"] if t["kind"] == "cpu"]
    assert thread["events_self_energy_j"] + thread["outside_energy_j"] == pytest.approx(
        thread["window_energy_j"]
    )


def test_tensorboard_handler_with_a_schedule_and_step_energies(
    constant: tuple[Path, dict[str, Profile]], tmp_path: Path
) -> None:
    root, profiles = constant
    logdir = tmp_path / "tb"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(logdir), use_gzip=True),
        sampler=ProcessRaplSampler(root),
    ) as prof:
        for _ in range(6):
            time.sleep(0.05)
            prof.step()
    (written,) = list(logdir.iterdir())
    assert written.name.endswith(".pt.trace.json.gz")
    trace = load_trace(written)
    assert {e["name"] for e in trace["traceEvents"] if e.get("ph") == "C"} >= {
        "nrg power rapl:package-0",
        "nrg energy rapl:dram-0",
    }
    steps = [e for e in trace["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")]
    assert len(steps) == 2
    base = trace["baseTimeNanoseconds"]
    for ev in steps:
        start = base + round(ev["ts"] * 1000)
        expected = truth(profiles, start, start + round(ev["dur"] * 1000))
        assert ev["args"][ENERGY_ARG] == pytest.approx(expected, abs=SLACK_S * 25 + 0.02)
    in_trace = {s["step"]: s for s in trace["nrg"]["steps"]}
    recorded = {int(str(e["name"]).split("#")[1]) for e in steps}
    assert recorded <= set(in_trace)
    for n in recorded:
        s = in_trace[n]
        assert s["energy_j"] == pytest.approx(
            truth(profiles, s["start_ns"], s["end_ns"]), abs=SLACK_S * 25 + s["error_j"]
        )
    energies = prof.step_energies()
    assert [s.step for s in energies] == list(range(7))
    for s in energies:
        assert s.energy_j is not None
        assert s.energy_j == pytest.approx(
            truth(profiles, s.start_ns, s.end_ns), abs=SLACK_S * 25 + s.error_j
        )
    assert sum(s.duration_s for s in energies[:6]) >= 0.3


def test_energy_averages_and_table(constant: tuple[Path, dict[str, Profile]]) -> None:
    root, _ = constant
    with profile(
        activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(root), record_shapes=True
    ) as prof:
        workload()
        x = torch.randn(64, 32)
        busy(0.05)
        for _ in range(3):
            x @ torch.randn(32, 16)
    rows = prof.energy_averages()
    by_key = {r.key: r for r in rows}
    averages = {a.key: a for a in prof.key_averages()}
    for name in ("busy", "aten::mm", "aten::tanh"):
        row, avg = by_key[name], averages[name]
        assert row.count == avg.count
        assert row.cpu_time_total == pytest.approx(avg.cpu_time_total)
        assert row.self_cpu_time_total == pytest.approx(avg.self_cpu_time_total)
    busy_s = by_key["busy"].duration_total_us / 1e6
    assert busy_s >= 0.2
    assert by_key["busy"].energy_total_j == pytest.approx(25.0 * busy_s, abs=SLACK_S * 25 + 0.05)
    assert by_key["busy"].mean_power_w == pytest.approx(25.0, rel=0.05)
    shaped = prof.energy_averages(group_by_input_shape=True)
    mm = [r for r in shaped if r.key == "aten::mm"]
    assert len(mm) == 2  # 128x128 @ 128x128 and 64x32 @ 32x16
    assert sum(r.count for r in mm) == by_key["aten::mm"].count
    assert sum(r.energy_total_j for r in mm) == pytest.approx(by_key["aten::mm"].energy_total_j)

    table = prof.energy_table(sort_by="energy_total", row_limit=3)
    lines = table.splitlines()
    assert "Self energy" in lines[1] and "Total energy" in lines[1] and "# of Calls" in lines[1]
    body = lines[3:6]
    assert body[0].startswith("outer")
    assert lines[6].startswith("---") and "Self energy total" in table
    top_self = max(rows, key=lambda r: r.self_energy_j).key
    by_self = prof.energy_table(sort_by="self_energy", row_limit=2).splitlines()[3]
    assert by_self.startswith(top_self[:40])
    by_time = prof.energy_table(sort_by="cpu_time_total").splitlines()[3]
    assert by_time.startswith("outer")
    with pytest.raises(ValueError) as err:
        prof.energy_table(sort_by="joules")
    assert str(err.value) == UNKNOWN_SORT_KEY.format(
        key="joules", known=str(err.value).split("use one of: ")[1]
    )


def test_profiler_steps_line_up_with_nrg_steps(
    constant: tuple[Path, dict[str, Profile]], tmp_path: Path
) -> None:
    from acquisition.torch import instrument

    root, _ = constant
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    x = torch.randn(8, 16)
    with (
        instrument(
            model,
            example_inputs=(x,),
            run="prof",
            socket_path=tmp_path / "nobody.sock",
            fallback_dir=tmp_path / "fallback",
            graph=False,
        ) as session,
        profile(
            activities=[ProfilerActivity.CPU], sampler=ProcessRaplSampler(root), session=session
        ) as prof,
    ):
        waited0 = waited_s()
        for _ in range(4):
            model(x).sum().backward()
            time.sleep(0.03)
            prof.step()
        waited = waited_s() - waited0
    (spool,) = (tmp_path / "fallback").glob("*.lp")
    steps = [
        p for p in map(decode_line, spool.read_text().splitlines()) if p.measurement == "nrg_step"
    ]
    ends = sorted(int(p.fields["end_time_ns"]) for p in steps)
    marks = [s.end_ns for s in prof.step_energies()][:4]
    assert len(ends) >= 4
    for nrg_end, prof_end in zip(ends[:4], marks, strict=True):
        # the same boundary: both are taken in the same call, steps last over 30 ms; a loaded
        # machine may take the CPU from this thread between the two (at most what it waited)
        assert abs(nrg_end - prof_end) < 5_000_000 + waited * 1e9


def test_importing_the_package_does_not_import_torch() -> None:
    code = (
        "import sys, acquisition, acquisition.profiler, acquisition.torch; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert callable(acquisition.torch.profile); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class NothingHere:
    """A sampler that found no source (as the in-process Sampler reports it)."""

    def __init__(self) -> None:
        self.available: list[str] = []
        self.unavailable = {
            "rapl": "no RAPL zones under /sys/class/powercap",
            "nvml": "no NVIDIA driver",
        }

    def start(self) -> None: ...

    def stop(self) -> list[Point]:
        return []

    def snapshot(self) -> list[Point]:
        return []


def test_no_source_says_why_and_leaves_events_without_energy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        profile(activities=[ProfilerActivity.CPU], sampler=NothingHere()) as prof,
        record_function("sleep"),
    ):
        time.sleep(0.01)
    assert caplog.messages[0] == NO_SOURCE % (
        "rapl: no RAPL zones under /sys/class/powercap; nvml: no NVIDIA driver"
    )
    (sleep,) = [e for e in prof.energy_events() if e.name == "sleep"]
    assert sleep.total_j is None
    assert prof.last_energy is not None
    assert prof.last_energy.unmeasured == len(prof.energy_events())
    row = next(r for r in prof.energy_averages() if r.key == "sleep")
    assert (row.count, row.measured, row.mean_power_w) == (1, 0, None)
    line = next(x for x in prof.energy_table().splitlines() if x.startswith("sleep"))
    assert line.split()[5:10] == ["-", "-", "-", "-", "-"]  # no energy, no error, no power
    assert prof.step_energies()[0].energy_j is None


class Drained:
    """A sampler that hands its points over once (``drain``) and keeps none."""

    def __init__(self, inner: ProcessRaplSampler) -> None:
        self.inner = inner
        self.handed = 0
        self.drains = 0

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> list[Point]:
        self.inner.stop()
        return []

    def drain(self) -> list[Point]:
        points = self.inner.snapshot()
        new, self.handed = points[self.handed :], len(points)
        self.drains += 1
        return new

    def snapshot(self) -> list[Point]:
        raise AssertionError("a drained sampler's snapshot is not needed")


def test_a_drained_sampler_keeps_no_points_and_gives_the_same_energy(
    constant: tuple[Path, dict[str, Profile]],
) -> None:
    root, profiles = constant
    sampler = Drained(ProcessRaplSampler(root))
    with (
        profile(activities=[ProfilerActivity.CPU], sampler=sampler) as prof,
        record_function("sleep"),
    ):
        time.sleep(0.15)
    (sleep,) = [e for e in prof.energy_events() if e.name == "sleep"]
    assert_energy(sleep, profiles)
    # every reading went through drain(), in more than one
    assert sampler.drains >= 2 and sampler.handed == len(sampler.inner.snapshot()) > 0
    assert prof.step_energies()[0].energy_j is not None


def test_profiler_events_map_to_thread_gpu_and_async_tracks() -> None:
    """The profiler's own events (``prof.events()``): CPU ones on their thread, device ones
    (kernels, which this machine cannot record) on their GPU, async ones alone; µs from the
    trace start → Unix-epoch ns."""
    from types import SimpleNamespace

    from acquisition.profiler.wrapper import _span

    device = torch.autograd.DeviceType
    base = 1_790_000_000_000_000_000

    def event(**kw: Any) -> Any:
        return SimpleNamespace(time_range=SimpleNamespace(start=1.5, end=4.0), **kw)

    cpu = _span(event(device_type=device.CPU, thread=7, is_async=False), base)
    assert (cpu.track, cpu.start_ns, cpu.end_ns) == (("cpu", 7), base + 1500, base + 4000)
    gpu = _span(event(device_type=device.CUDA, device_index=1, thread=0, is_async=False), base)
    assert gpu.track == ("gpu", 1)
    lone = _span(event(device_type=device.CPU, thread=7, is_async=True), base)
    assert lone.track[0] == "async"
