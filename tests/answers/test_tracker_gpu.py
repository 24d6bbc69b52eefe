"""An in-process ``Tracker`` on a GPU machine (the fake NVML, since this one has none): the job's
GPU memory, as an agent's tracked run gives it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from acquisition.config import parse_config
from acquisition.tracker import Tracker
from collectors.nvml.fake import FakeNvml
from tests.nvml.conftest import write_stat

USED = 7_800_000_000


def scenario(pid: int) -> dict[str, object]:
    return {
        "driver_version": "580.159.04",
        "gpu": [
            {
                "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000",
                "name": "NVIDIA H100 80GB HBM3",
                "architecture": 9,
                "memory_total": 85520809984,
                "memory_reserved": 567279616,
                "power_limit_mw": 700000,
                "power_instant_mw": 400000,
                "power_usage_mw": 400000,
                "energy_mj": 0,
                "utilization_gpu": 90,
                "utilization_memory": 40,
                "memory_used": 9_000_000_000,
                "temperature_c": 60,
                "clock_sm_mhz": 1980,
                "clock_mem_mhz": 2619,
                "processes": [[0, pid, USED], [0, pid + 100_000, 1_000_000_000]],
            }
        ],
    }


def test_in_process_tracker_gives_this_jobs_gpu_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = os.getpid()
    write_stat(tmp_path, pid, 1, 1000)  # the collector's /proc: this process, and a stranger
    write_stat(tmp_path, pid + 100_000, 1, 2000)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(scenario(pid)))
    config = parse_config(f'[[collectors.nvml]]\nroot = "{tmp_path}"\n', "<test>")
    with Tracker(config, agent_data=False, interval_s=0.05, gpu_ram_unit="bytes") as tracker:
        time.sleep(0.3)
    assert tracker.available == ["nvml"]
    ram = tracker.summary().resources["max_gpu_ram"]
    assert ram["main"] == USED
    assert ram["combined"] == USED
    assert ram["system"] == 9_000_000_000
