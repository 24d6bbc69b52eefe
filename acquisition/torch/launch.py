"""Which rank this process is, read from the launcher's environment.

Order, first found wins (the innermost launcher sets the most specific figures: torchrun started
by ``srun`` on each node sets ``RANK`` for its workers while ``SLURM_PROCID`` numbers the nodes):

1. torchrun / ``python -m torch.distributed.run`` and ``accelerate launch`` (which runs torchrun):
   ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``; run id ``TORCHELASTIC_RUN_ID`` (not its default
   ``none``);
2. Open MPI (``mpirun``): ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``,
   ``OMPI_COMM_WORLD_SIZE``; run id ``PMIX_NAMESPACE``;
3. MPICH / Intel MPI (Hydra, PMI): ``PMI_RANK``, ``MPI_LOCALRANKID``, ``PMI_SIZE``;
4. SLURM (``srun``): ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``.

The run id, the same on every host of the job, comes from the first launcher that has one:
``TORCHELASTIC_RUN_ID``, then ``SLURM_JOB_ID`` (also when torchrun or MPI runs inside the
allocation), then ``PMIX_NAMESPACE``. ``NRG_RUN`` and an explicit ``run=`` come before all of
them.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LAUNCHERS",
    "WRAPPERS",
    "Launch",
    "cuda_uuid",
    "detect_launch",
    "launch_fields",
    "prefixed",
    "records_graph",
    "resolve_tags",
    "unwrap_model",
]

WRAPPERS = frozenset({"DistributedDataParallel", "FullyShardedDataParallel", "DataParallel"})
"""Module wrappers whose ``module`` attribute is the model they train."""

log = logging.getLogger("acquisition.torch")

LAUNCHERS: tuple[tuple[str, str, str, str], ...] = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mpich", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)
"""(launcher, rank, local rank, world size) variables, in the order they are looked at."""

_RUN_IDS = (
    ("torchrun", "TORCHELASTIC_RUN_ID"),
    ("slurm", "SLURM_JOB_ID"),
    ("openmpi", "PMIX_NAMESPACE"),
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


@dataclass(frozen=True)
class Launch:
    """What the launcher says about this process (empty strings where it says nothing)."""

    launcher: str = ""
    rank: str = ""
    local_rank: str = ""
    world_size: str = ""
    run: str = ""
    """A run name the same on every host: ``<launcher>-<id>``."""


def _number(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    return value if value.isdigit() else ""


def _run_id(env: Mapping[str, str]) -> str:
    for launcher, name in _RUN_IDS:
        value = env.get(name, "").strip()
        if value and value != "none":
            return f"{launcher}-{_UNSAFE.sub('_', value)}"
    return ""


def detect_launch(env: Mapping[str, str]) -> Launch:
    """The launcher, rank, local rank, world size and run id found in ``env``."""
    run = _run_id(env)
    for launcher, rank, local, size in LAUNCHERS:
        if _number(env, rank):
            name = "accelerate" if launcher == "torchrun" and _accelerate(env) else launcher
            return Launch(name, _number(env, rank), _number(env, local), _number(env, size), run)
    if _number(env, "LOCAL_RANK"):
        return Launch("torchrun", _number(env, "LOCAL_RANK"), _number(env, "LOCAL_RANK"), "", run)
    return Launch(run=run)


def _accelerate(env: Mapping[str, str]) -> bool:
    return any(k.startswith("ACCELERATE_") for k in env)


def launch_fields(launch: Launch, gpu_uuid: str) -> dict[str, str | int]:
    """The ``nrg_run`` start fields that say where the rank ran."""
    fields: dict[str, str | int] = {}
    if launch.launcher:
        fields["launcher"] = launch.launcher
    if launch.local_rank:
        fields["local_rank"] = int(launch.local_rank)
    if launch.world_size:
        fields["world_size"] = int(launch.world_size)
    if gpu_uuid:
        fields["gpu_uuid"] = gpu_uuid
    return fields


def cuda_uuid(model: Any, cuda: Any = None) -> str:
    """``GPU-<uuid>`` of the CUDA device holding ``model``'s first CUDA parameter, as NVML names
    it. ``cuda`` is ``torch.cuda`` (the default); its device index counts the devices
    ``CUDA_VISIBLE_DEVICES`` leaves visible, the UUID names the physical device. Empty when it
    cannot be read."""
    try:
        if cuda is None:
            import torch

            cuda = torch.cuda
        device = next(p.device for p in model.parameters() if p.is_cuda)
        index = device.index if device.index is not None else cuda.current_device()
        uuid = str(cuda.get_device_properties(index).uuid).strip().lower()
    except Exception as exc:  # never into training: the rank then has no GPU of its own
        log.warning("nrg: cannot read the CUDA device's UUID (%s)", exc)
        return ""
    return "GPU-" + uuid.removeprefix("gpu-") if uuid else ""


def unwrap_model(model: Any) -> tuple[Any, str]:
    """The model a DDP/FSDP/DataParallel wrapper trains, and the qualname prefix of its modules
    in the wrapper (``module.``); the model itself and ``""`` when not wrapped."""
    prefix = ""
    while type(model).__name__ in WRAPPERS and hasattr(model, "module"):
        model = model.module
        prefix += "module."
    return model, prefix


def prefixed(per_module: Mapping[str, int], prefix: str) -> dict[str, int]:
    """Per-module figures of the wrapped model named as in the wrapper (its root keeps the
    whole model's figure)."""
    if not prefix:
        return dict(per_module)
    out = {(prefix + name if name else prefix.rstrip(".")): v for name, v in per_module.items()}
    if "" in per_module:
        out[""] = per_module[""]
    return out


def resolve_tags(
    experiment: str | None,
    run: str | None,
    rank: int | str | None,
    *,
    pid: int,
    launch: Launch | None = None,
) -> dict[str, str]:
    """``experiment``, ``run`` and ``rank`` from arguments, else ``NRG_EXPERIMENT``, ``NRG_RUN``,
    else the launcher's (:func:`detect_launch`); a missing run gets ``<UTC time>-<pid>`` so its
    steps group together."""
    env = os.environ
    launch = launch or detect_launch(env)
    experiment = experiment or env.get("NRG_EXPERIMENT") or ""
    run = run or env.get("NRG_RUN") or launch.run
    run = run or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{pid}"
    if rank is None:
        rank = launch.rank or None
    tags = {"experiment": experiment, "run": run, "rank": "" if rank is None else str(rank)}
    return {k: v for k, v in tags.items() if v}


def records_graph(tags: Mapping[str, str], launch: Launch) -> bool:
    """Whether this process records the model graph: once per run, on rank 0 of a job its
    launcher says has several ranks."""
    size = launch.world_size
    return tags.get("rank", "0") == "0" or not (size and int(size) > 1)
