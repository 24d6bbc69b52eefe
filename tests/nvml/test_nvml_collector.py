"""The NVML collector against the scenario-driven fake of pynvml (collectors/nvml/fake.py)."""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path

import pytest

from acquisition.errors import NoData, NrgError
from acquisition.point import Point
from collectors.nvml.state import WHY_NVML
from tests.nvml.conftest import T0_NS, MakeCollector, only, tick, write_stat
from tests.nvml.scenarios import load_scenario

H100 = "GPU-5c1e0b1a-7d2f-4a6e-9b51-0c2d3e4f5a61"
P100 = "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"


async def test_mixed_generations_fields_and_units(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("mixed"), processes=False)
    await collector.open()
    try:
        assert collector.describe() == (
            "2 GPU(s) (0: NVIDIA H100 80GB HBM3, 1: Tesla P100-PCIE-16GB), driver 550.54.15"
        )
        first = await tick(collector, fake, 1)
        second = await tick(collector, fake, 2)
        third = await tick(collector, fake, 3)
    finally:
        await collector.aclose()

    h100 = {"gpu": "0", "uuid": H100, "name": "NVIDIA H100 80GB HBM3"}
    p100 = {"gpu": "1", "uuid": P100, "name": "Tesla P100-PCIE-16GB"}
    [h1] = only(first, "gpu", gpu="0")
    assert h1.tags == h100
    assert h1.time_ns == T0_NS + 1_000_000_000
    assert h1.fields == {
        "power_watts": 312.5,
        "power_average_watts": 305.0,
        "energy_joules": 698.0,  # since open (step 0: 1_000_000_000 mJ)
        "utilization_ratio": 0.97,
        "memory_utilization_ratio": 0.45,
        "memory_reserved_bytes": 567279616,
        "memory_used_bytes": 40000000000,
        "memory_total_bytes": 85520809984,
        "temperature_celsius": 61,
        "sm_clock_hertz": 1980000000,
        "memory_clock_hertz": 2619000000,
        "power_limit_watts": 700.0,
    }
    [p1] = only(first, "gpu", gpu="1")
    assert p1.tags == p100
    # Pascal: GetPowerUsage is instantaneous and stands in for the unsupported field 186; no
    # energy counter, so energy is integrated from the first tick on; MemoryInfo v1 (no reserved).
    assert p1.fields == {
        "power_watts": 100.0,
        "energy_integrated_joules": 0.0,
        "utilization_ratio": 0.8,
        "memory_utilization_ratio": 0.2,
        "memory_used_bytes": 8000000000,
        "memory_total_bytes": 17071734784,
        "temperature_celsius": 50,
        "sm_clock_hertz": 1328000000,
        "memory_clock_hertz": 715000000,
        "power_limit_watts": 250.0,
    }
    [h2] = only(second, "gpu", gpu="0")
    assert h2.fields["energy_joules"] == 2048.25
    assert h2.fields["power_watts"] == 698.0
    [p2] = only(second, "gpu", gpu="1")
    # A transient NVML_ERROR_UNKNOWN from GetUtilizationRates: those fields are left out, never 0.
    assert "utilization_ratio" not in p2.fields
    assert "memory_utilization_ratio" not in p2.fields
    assert p2.fields["energy_integrated_joules"] == 125.0  # (100 W + 150 W) / 2 × 1 s
    [h3] = only(third, "gpu", gpu="0")
    assert h3.fields["energy_joules"] == 2348.5
    [p3] = only(third, "gpu", gpu="1")
    assert p3.fields["utilization_ratio"] == 0.05  # retried and back
    assert p3.fields["energy_integrated_joules"] == 225.0
    stats = collector.stats()
    assert stats["errors_transient"] == 1
    assert stats["gpus"] == 2


async def test_driver_samples_each_at_its_own_timestamp(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("mixed"), processes=False)
    await collector.open()
    try:
        first = await tick(collector, fake, 1)
        second = await tick(collector, fake, 2)
    finally:
        await collector.aclose()
    # What was buffered before open (step 0) is not emitted; samples of the three types that
    # share a driver timestamp become one point.
    assert [(p.time_ns, dict(p.fields)) for p in only(first, "gpu_sample", gpu="0")] == [
        (1763884800000000000, {"power_watts": 300.0, "utilization_ratio": 0.97}),
        (1763884800050000000, {"power_watts": 325.0, "memory_utilization_ratio": 0.45}),
    ]
    assert [(p.time_ns, dict(p.fields)) for p in only(first, "gpu_sample", gpu="1")] == [
        (1763884800020000000, {"power_watts": 100.0, "utilization_ratio": 0.8}),
    ]
    assert [(p.time_ns, dict(p.fields)) for p in only(second, "gpu_sample")] == [
        (1763884800100000000, {"power_watts": 690.0}),
        (1763884800120000000, {"power_watts": 150.0}),
    ]


async def test_not_supported_is_skipped_and_never_asked_again(
    make: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    collector, fake = make(load_scenario("mixed"), processes=False)
    caplog.set_level(logging.INFO, logger="collectors.nvml")
    await collector.open()
    try:
        for step in (1, 2, 3):
            await tick(collector, fake, step)
    finally:
        await collector.aclose()
    # Energy is never asked of the Pascal GPU (the counter exists from Volta on): 1 call at open
    # + 3 ticks, all for the H100.
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 4
    # Field 186 on the P100 answered NOT_SUPPORTED once and is not asked again.
    assert fake.calls["nvmlDeviceGetFieldValues"] == 3 + 1
    # MemoryInfo v2: 3 on the H100, 1 refused on the P100, then v1 there.
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 4
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 3
    not_supported = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert len(not_supported) == 3
    assert all(message.startswith("GPU 1 (Tesla P100-PCIE-16GB)") for message in not_supported)


async def test_gpu_lost_mid_run_stops_that_gpu(
    make: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    collector, fake = make(load_scenario("gpu_lost"), processes=False)
    await collector.open()
    try:
        first = await tick(collector, fake, 1)
        calls_before = fake.calls.total()
        second = await tick(collector, fake, 2)
        calls_second = fake.calls.total() - calls_before
        third = await tick(collector, fake, 3)
    finally:
        await collector.aclose()
    assert sorted(p.tags["gpu"] for p in only(first, "gpu")) == ["0", "1"]
    assert [p.tags["gpu"] for p in second if p.measurement.startswith("gpu")] == ["0"]
    assert [p.tags["gpu"] for p in third if p.measurement.startswith("gpu")] == ["0"]
    assert only(third, "gpu")[0].fields["energy_joules"] == 183.0
    # Tick 2: 11 calls for GPU 0 (field values 186 and 185 in one, energy, utilisation, memory,
    # temperature, 2 clocks, power limit, and 3 sample buffers) and the single call that found
    # GPU 1 lost.
    assert calls_second == 11 + 1
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    assert len(lost) == 1
    assert lost[0].levelno == logging.WARNING
    assert "GPU-66666666-7777-8888-9999-000000000000" in lost[0].getMessage()
    assert collector.stats()["gpus"] == 1
    assert collector.stats()["gpus_lost"] == 1


async def test_gpu_lost_halfway_through_a_tick_emits_nothing_of_it(make: MakeCollector) -> None:
    scenario = copy.deepcopy(load_scenario("gpu_lost"))
    del scenario["gpu"][1]
    # lost after its `gpu` point was built, while listing its processes
    scenario["gpu"][0]["errors"] = [[2, "nvmlDeviceGetComputeRunningProcesses_v3", 15]]
    collector, fake = make(scenario)
    await collector.open()
    try:
        assert len(only(await tick(collector, fake, 1), "gpu")) == 1
        assert await tick(collector, fake, 2) == []
        assert await tick(collector, fake, 3) == []
    finally:
        await collector.aclose()
    assert collector.stats()["gpus_lost"] == 1


async def test_samples_not_found_and_driver_reload(
    make: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    collector, fake = make(load_scenario("samples"), processes=False)
    await collector.open()
    emitted: dict[int, list[tuple[int, dict[str, object]]]] = {}
    energy: dict[int, object] = {}
    try:
        for step in range(1, 10):
            points = await tick(collector, fake, step)
            emitted[step] = [
                (p.time_ns // 1000, dict(p.fields)) for p in only(points, "gpu_sample")
            ]
            energy[step] = only(points, "gpu")[0].fields["energy_joules"]
    finally:
        await collector.aclose()
    assert emitted[1] == [
        (1040000, {"power_watts": 220.0}),
        (1050000, {"utilization_ratio": 0.2}),
        (1060000, {"power_watts": 230.0}),
    ]
    assert emitted[2] == []  # NOT_FOUND: nothing new, not an error
    assert emitted[3] == [(1075000, {"utilization_ratio": 0.3}), (1080000, {"power_watts": 240.0})]
    # Driver reloaded at step 4: its new samples carry timestamps below the cursor, so the
    # driver answers NOT_FOUND until the buffer is re-read from 0, 5 s after the last news.
    assert emitted[4] == emitted[5] == emitted[6] == emitted[7] == []
    assert emitted[8] == [
        (200000, {"power_watts": 90.0}),
        (210000, {"utilization_ratio": 0.05}),
        (220000, {"power_watts": 95.0}),
        (240000, {"power_watts": 100.0}),
    ]
    assert emitted[9] == [(260000, {"power_watts": 105.0})]  # the new cursor works as before
    # The energy counter restarted too (mJ since driver load): the sum carries on.
    assert [energy[s] for s in range(1, 6)] == [100.0, 100.0, 200.0, 201.0, 203.0]
    went_back = [r for r in caplog.records if "went backwards" in r.getMessage()]
    assert len(went_back) == 1
    assert collector.stats()["sample_cursor_resets"] == 2  # power and GPU utilisation
    assert collector.stats()["errors_transient"] == 0


async def test_process_utilization_recovers_after_a_driver_reload(make: MakeCollector) -> None:
    collector, fake = make(
        load_scenario("samples"), samples=False, pid_tag=True, process_interval=0
    )
    await collector.open()
    seen: dict[int, object] = {}
    try:
        for step in range(1, 10):
            [point] = only(await tick(collector, fake, step), "gpu_process", pid="9000")
            seen[step] = point.fields.get("sm_utilization_ratio")
    finally:
        await collector.aclose()
    # step 1: the newest sample since 0; 2: nothing new; 3: new; 4-7: the reloaded driver's
    # samples are below the cursor (NOT_FOUND); 8: re-read from 0 after 5 s, newest of them
    assert seen == {1: 0.5, 2: None, 3: 0.6, 4: None, 5: None, 6: None, 7: None, 8: 0.75, 9: None}
    assert collector.stats()["sample_cursor_resets"] == 1


async def test_processes_and_tracked_trees(make: MakeCollector, tmp_path: Path) -> None:
    write_stat(tmp_path, 4000, 1, 900, "bash")
    write_stat(tmp_path, 4100, 4000, 1000)
    write_stat(tmp_path, 4101, 4100, 1010, "pt_data_worker")
    write_stat(tmp_path, 4102, 4101, 1020, "pt_data_worker")
    write_stat(tmp_path, 5000, 1, 500, "other job")
    collector, fake = make(
        load_scenario("processes"), samples=False, pid_tag=True, process_interval=0
    )
    collector._context.status["tracked_pids"] = {4100}
    await collector.open()
    try:
        first = await tick(collector, fake, 1)
        (tmp_path / "proc" / "4102" / "stat").unlink()  # exits before step 2's queries
        second = await tick(collector, fake, 2)
        write_stat(tmp_path, 4101, 5000, 2000, "reused pid")
        third = await tick(collector, fake, 3)
    finally:
        await collector.aclose()

    def per_pid(points: list[Point]) -> dict[tuple[str, str], dict[str, object]]:
        return {
            (p.tags["gpu"], p.tags["pid"]): dict(p.fields)
            for p in only(points, "gpu_process")
            if "pid" in p.tags
        }

    def trees(points: list[Point]) -> dict[str, dict[str, object]]:
        return {p.tags["scope"]: dict(p.fields) for p in only(points, "gpu_process", tree="4100")}

    assert per_pid(first) == {
        # the newest of 4100's samples since the last query
        ("0", "4100"): {
            "memory_used_bytes": 2000000000,
            "memory_used_max_bytes": 2000000000,
            "sm_utilization_ratio": 0.8,
            "memory_utilization_ratio": 0.4,
        },
        ("0", "4101"): {
            "memory_used_bytes": 1000000000,
            "memory_used_max_bytes": 1000000000,
            "sm_utilization_ratio": 0.1,
            "memory_utilization_ratio": 0.05,
        },
        ("1", "4102"): {"memory_used_bytes": 500000000, "memory_used_max_bytes": 500000000},
        ("1", "5000"): {
            "memory_used_bytes": 3000000000,
            "memory_used_max_bytes": 3000000000,
            "sm_utilization_ratio": 0.9,
            "memory_utilization_ratio": 0.6,
        },
    }
    first_pid_point = next(p for p in first if p.tags.get("pid") == "4100")
    assert first_pid_point.tags == {
        "gpu": "0",
        "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000",
        "pid": "4100",
    }
    assert trees(first) == {
        "main": {"memory_used_bytes": 2000000000, "memory_used_max_bytes": 2000000000},
        "descendants": {"memory_used_bytes": 1500000000, "memory_used_max_bytes": 1500000000},
        "combined": {"memory_used_bytes": 3500000000, "memory_used_max_bytes": 3500000000},
    }
    assert per_pid(second) == {
        ("0", "4100"): {
            "memory_used_bytes": 1500000000,
            "memory_used_max_bytes": 2000000000,
            "sm_utilization_ratio": 0.85,
            "memory_utilization_ratio": 0.42,
        },
        ("0", "4101"): {
            "memory_used_bytes": 2500000000,
            "memory_used_max_bytes": 2500000000,
            "sm_utilization_ratio": 0.15,
            "memory_utilization_ratio": 0.06,
        },
        # exited between the process list and the utilisation query: memory only, same process
        ("1", "4102"): {"memory_used_bytes": 700000000, "memory_used_max_bytes": 700000000},
        # no new utilisation sample on GPU 1 (NOT_FOUND): memory only
        ("1", "5000"): {"memory_used_bytes": 3000000000, "memory_used_max_bytes": 3000000000},
    }
    assert trees(second) == {
        "main": {"memory_used_bytes": 1500000000, "memory_used_max_bytes": 2000000000},
        "descendants": {"memory_used_bytes": 3200000000, "memory_used_max_bytes": 3200000000},
        "combined": {"memory_used_bytes": 4700000000, "memory_used_max_bytes": 4700000000},
    }
    assert per_pid(third) == {
        ("0", "4100"): {"memory_used_bytes": 1500000000, "memory_used_max_bytes": 2000000000},
        # pid 4101 reused by another process: a new maximum, and not part of the tree
        ("0", "4101"): {
            "memory_used_bytes": 300000000,
            "memory_used_max_bytes": 300000000,
            "sm_utilization_ratio": 0.03,
            "memory_utilization_ratio": 0.01,
        },
        # memory not available from NVML: no memory field rather than a zero
        ("1", "5000"): {"sm_utilization_ratio": 0.88, "memory_utilization_ratio": 0.55},
    }
    assert trees(third) == {
        "main": {"memory_used_bytes": 1500000000, "memory_used_max_bytes": 2000000000},
        "descendants": {"memory_used_bytes": 0, "memory_used_max_bytes": 3200000000},
        "combined": {"memory_used_bytes": 1500000000, "memory_used_max_bytes": 4700000000},
    }


async def test_old_driver_falls_back_and_integrates_instant_power(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("old_driver"), samples=False, process_interval=0)
    await collector.open()
    try:
        points = [await tick(collector, fake, step) for step in (1, 2, 3)]
    finally:
        await collector.aclose()
    gpu = [only(p, "gpu")[0].fields for p in points]
    assert gpu[0] == {
        "power_watts": 100.0,
        "power_average_watts": 90.0,  # architecture unknown: not assumed instantaneous
        "energy_integrated_joules": 0.0,
        "utilization_ratio": 0.6,
        "memory_utilization_ratio": 0.2,
        "memory_used_bytes": 2268435456,  # v1: used includes the reserved memory
        "memory_total_bytes": 25769803776,
        "temperature_celsius": 44,  # from the deprecated call, the only one this driver has
        "sm_clock_hertz": 1695000000,
        "memory_clock_hertz": 6251000000,
        "power_limit_watts": 150.0,
    }
    assert [g["energy_integrated_joules"] for g in gpu] == [0.0, 120.0, 220.0]
    assert "energy_joules" not in gpu[2]
    # the legacy per-process call answered; by default the pid is a field, not a tag
    [process] = only(points[1], "gpu_process")
    assert process.tags == {
        "gpu": "0",
        "uuid": process.tags["uuid"],
        "instance": "0",
    }
    assert dict(process.fields) == {
        "memory_used_bytes": 1600000000,
        "memory_used_max_bytes": 1600000000,
        "sm_utilization_ratio": 0.95,
        "memory_utilization_ratio": 0.3,
        "pid": 7000,
    }
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 1
    # steps 1 and 2; at step 3 no process runs, so there is nothing to ask about
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 2
    assert fake.calls["nvmlDeviceGetTemperatureV"] == 1


async def test_every_call_runs_on_one_worker_thread(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("mixed"))
    await collector.open()
    try:
        await tick(collector, fake, 1)
    finally:
        await collector.aclose()
    assert len(fake.threads) == 1
    [name] = fake.threads
    assert name.startswith("nrg-nvml")
    assert name != threading.current_thread().name
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"] == 1
    assert fake.refcount == 0
    await collector.open()  # a re-open starts afresh
    try:
        assert len([p for p in await tick(collector, fake, 2) if p.measurement == "gpu"]) == 2
    finally:
        await collector.aclose()
    assert fake.refcount == 0


async def test_init_failures_are_nodata_with_the_reason(make: MakeCollector) -> None:
    for code, reason in (
        (9, "NVIDIA driver not loaded"),
        (12, "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver here)"),
        (999, "nvmlInit failed: Unknown Error (NVML error 999)"),
    ):
        collector, fake = make({"init_error": code})
        with pytest.raises(NoData) as caught:
            await collector.open()
        assert str(caught.value) == reason
        assert fake.calls["nvmlShutdown"] == 0
        await collector.aclose()  # harmless after a failed open


async def test_no_gpu_is_nodata_and_shuts_nvml_down(make: MakeCollector) -> None:
    collector, fake = make({"gpu": []})
    with pytest.raises(NoData, match="no NVIDIA GPU found by NVML"):
        await collector.open()
    assert fake.refcount == 0


async def test_every_read_failing_raises_for_the_core_to_count(make: MakeCollector) -> None:
    scenario = copy.deepcopy(load_scenario("gpu_lost"))
    del scenario["gpu"][1]
    functions = [
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetEnforcedPowerLimit",
    ]
    scenario["gpu"][0]["errors"] = [[1, name, 10] for name in functions]  # NVML_ERROR_TIMEOUT
    collector, fake = make(scenario, samples=False, processes=False)
    await collector.open()
    try:
        with pytest.raises(NrgError, match=r"every NVML read failed this tick \(9 errors\)"):
            await tick(collector, fake, 1)
        assert only(await tick(collector, fake, 2), "gpu")[0].fields["power_watts"] == 61.0
    finally:
        await collector.aclose()


async def test_ampere_ga100_power_usage_is_instant_other_ampere_is_averaged(
    make: MakeCollector,
) -> None:
    collector, fake = make(load_scenario("ampere"), samples=False, processes=False)
    await collector.open()
    try:
        first = await tick(collector, fake, 1)
        second = await tick(collector, fake, 2)
    finally:
        await collector.aclose()

    def power(points: list[Point], gpu: str) -> dict[str, object]:
        [p] = only(points, "gpu", gpu=gpu)
        keys = ("power_watts", "power_average_watts", "energy_joules")
        return {k: p.fields[k] for k in keys if k in p.fields}

    # A100 (GA100): field 186 is the power; GetPowerUsage (instantaneous here) is not an average.
    # Energy since open: 2250000 - 2000000 mJ = 250 J, then 2640000 - 2000000 = 640 J.
    assert power(first, "0") == {"power_watts": 250.5, "energy_joules": 250.0}
    assert power(second, "0") == {"power_watts": 390.25, "energy_joules": 640.0}
    # A30 (GA100), field 186 not supported: GetPowerUsage 120000 mW is the instant power.
    assert power(first, "1") == {"power_watts": 120.0, "energy_joules": 120.0}
    assert power(second, "1") == {"power_watts": 150.5, "energy_joules": 270.0}
    # A10 (GA102): GetPowerUsage is the 1 s average, field 186 the instant power.
    assert power(first, "2") == {
        "power_watts": 140.25,
        "power_average_watts": 120.0,
        "energy_joules": 120.0,
    }
    assert power(second, "2") == {
        "power_watts": 90.0,
        "power_average_watts": 131.0,
        "energy_joules": 250.0,
    }


def test_power_usage_generation_rule() -> None:
    from collectors.nvml import is_ga100, power_usage_is_instant

    assert [is_ga100(n) for n in ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A30",
                                  "NVIDIA A800-SXM4-80GB", "NVIDIA A10", "NVIDIA A40",
                                  "NVIDIA RTX A6000", "NVIDIA H100 80GB HBM3")] == [
        True, True, True, True, False, False, False, False
    ]  # fmt: skip
    assert power_usage_is_instant(6, "Tesla T4") is True  # Turing
    assert power_usage_is_instant(7, "NVIDIA A100-PCIE-40GB") is True
    assert power_usage_is_instant(7, "NVIDIA GeForce RTX 3090") is False
    assert power_usage_is_instant(9, "NVIDIA H100 80GB HBM3") is False
    assert power_usage_is_instant(None, "NVIDIA A100-PCIE-40GB") is None


async def test_processes_on_one_gpu_get_distinct_instances_not_pid_tags(
    make: MakeCollector, tmp_path: Path
) -> None:
    for pid, ppid, start in ((4100, 1, 1000), (4101, 4100, 1010), (4102, 4101, 1020)):
        write_stat(tmp_path, pid, ppid, start)
    write_stat(tmp_path, 5000, 1, 500, "other job")
    collector, fake = make(load_scenario("processes"), samples=False)
    await collector.open()
    try:
        first = await tick(collector, fake, 1)
    finally:
        await collector.aclose()
    per_process = [p for p in only(first, "gpu_process") if "tree" not in p.tags]
    # Two processes per GPU: each GPU numbers its own (no two points share a series).
    assert sorted((p.tags["gpu"], p.tags["instance"], p.fields["pid"]) for p in per_process) == [
        ("0", "0", 4100),
        ("0", "1", 4101),
        ("1", "0", 4102),
        ("1", "1", 5000),
    ]
    assert all("pid" not in p.tags for p in per_process)


async def test_stats_survive_aclose_for_the_final_report(make: MakeCollector) -> None:
    collector, fake = make(load_scenario("mixed"), processes=False)
    await collector.open()
    await tick(collector, fake, 1)
    await tick(collector, fake, 2)  # one transient error on the P100
    before = collector.stats()
    await collector.aclose()
    assert collector.stats() == before
    assert before["errors_transient"] == 1


async def test_energy_counter_that_never_moves_is_not_advancing_then_joins(
    make: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    """A driver whose energy counter stands still (a virtual GPU): no energy_joules is written
    (power and the rest are), the collector says why after the window, and the counter joins
    when it moves."""
    scenario = load_scenario("ampere")
    for gpu in scenario["gpu"]:
        gpu["energy_mj"] = [1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_030_000]
    collector, fake = make(scenario, samples=False, processes=False)
    await collector.open()
    try:
        ticks = [await tick(collector, fake, step) for step in (1, 2, 3)]
        reason = collector.not_advancing()
        joined = only(await tick(collector, fake, 4), "gpu")
    finally:
        await collector.aclose()
    for step, points in enumerate(ticks, 1):
        gpus = only(points, "gpu")
        assert len(gpus) == 3 and all("power_watts" in p.fields for p in gpus)
        # the first reading is the baseline (0 J since open); then nothing while it stands still
        energies = [p.fields.get("energy_joules") for p in gpus]
        assert energies == ([0.0] * 3 if step == 1 else [None] * 3)
    assert reason == (
        "not advancing: GPU 0 energy counter, GPU 1 energy counter, GPU 2 energy counter did not "
        f"move in 2.0 s ({WHY_NVML})"
    )
    assert [p.fields["energy_joules"] for p in joined] == [30.0, 30.0, 30.0]
    assert collector.not_advancing() is None
    assert "nvml: GPU 0 energy counter is advancing now: it joins the run from here" in (
        caplog.messages
    )
