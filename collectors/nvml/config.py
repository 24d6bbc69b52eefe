"""``[[collectors.nvml]]`` keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from acquisition.config import duration

__all__ = ["NvmlConfig"]


@dataclass
class NvmlConfig:
    """``[[collectors.nvml]]`` keys."""

    root: str = field(
        default="/", metadata={"doc": "where proc/<pid>/stat is read (fixture trees, /host)"}
    )
    gpus: str = field(
        default="all",
        metadata={
            "doc": '"all"; "visible" = the GPUs of this job (CUDA_VISIBLE_DEVICES); or NVML'
            " indices and GPU-... UUIDs (unique prefixes), comma-separated"
        },
    )
    samples: bool = field(
        default=True, metadata={"doc": "read the driver's power/utilisation sample buffer"}
    )
    processes: bool = field(
        default=True, metadata={"doc": "per-process and per-tracked-tree GPU memory and use"}
    )
    pid_tag: bool = field(
        default=False,
        metadata={"doc": "gpu_process points carry the pid as a tag (one series per process)"},
    )
    energy_interval: float = duration(
        1.0,
        "read the energy counter (the costly call) at most this often; ticks between emit power",
    )
    detail_interval: float = duration(
        1.0,
        "read clocks, power limit, processes and the driver's sample buffers at most this often",
    )
    process_interval: float = duration(
        5.0,
        "read per-process utilisation (a costly call) at most this often, on a detail read",
    )
    simulate: str = field(
        default="",
        metadata={
            "doc": "a directory of GPUs simulated by nrg-collect simulate nvml: read them"
            " through the fake NVML binding instead of the driver"
        },
    )

    def validate(self) -> None:
        if min(self.energy_interval, self.detail_interval, self.process_interval) < 0:
            raise ValueError("energy_interval, detail_interval and process_interval must be >= 0")
