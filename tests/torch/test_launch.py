"""Rank, local rank, world size and run id from each launcher's environment, the order when
several are set, the CUDA device's UUID, and graph capture of a DDP-wrapped model."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from acquisition.lineproto import decode_line
from acquisition.torch import instrument
from acquisition.torch.launch import Launch, cuda_uuid, detect_launch, unwrap_model
from acquisition.torch.session import resolve_tags

# Rank 5 of 8, local rank 1 on its node, job 4242 / run id abc, as each launcher sets it.
TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "abc"}
SLURM = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "4242"}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "8",
    "PMIX_NAMESPACE": "prterun-node1-77@1",
}
MPICH = {"PMI_RANK": "5", "MPI_LOCALRANKID": "1", "PMI_SIZE": "8"}
ACCELERATE = {**TORCHRUN, "ACCELERATE_MIXED_PRECISION": "no"}


@pytest.mark.parametrize(
    ("env", "launcher", "run"),
    [
        (TORCHRUN, "torchrun", "torchrun-abc"),
        (ACCELERATE, "accelerate", "torchrun-abc"),
        (SLURM, "slurm", "slurm-4242"),
        (OPENMPI, "openmpi", "openmpi-prterun-node1-77_1"),
        (MPICH, "mpich", ""),
    ],
)
def test_each_launcher_gives_the_same_rank(env: dict[str, str], launcher: str, run: str) -> None:
    assert detect_launch(env) == Launch(launcher, "5", "1", "8", run)
    tags = resolve_tags(None, None, None, pid=1, launch=detect_launch(env))
    assert tags["rank"] == "5"
    if run:
        assert tags["run"] == run


def test_torchrun_inside_slurm_numbers_ranks_and_keeps_the_job_id() -> None:
    # srun starts one torchrun per node (SLURM_PROCID numbers the nodes); torchrun's RANK wins,
    # and without a rendezvous id of its own ("none", the default) the job id names the run.
    env = {**SLURM, "SLURM_PROCID": "1", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
    env["TORCHELASTIC_RUN_ID"] = "none"
    assert detect_launch(env) == Launch("torchrun", "5", "1", "8", "slurm-4242")


def test_mpi_inside_slurm_uses_the_mpi_rank() -> None:
    env = {**SLURM, "SLURM_PROCID": "0", **OPENMPI}
    launch = detect_launch(env)
    assert (launch.launcher, launch.rank, launch.run) == ("openmpi", "5", "slurm-4242")


def test_explicit_and_nrg_settings_come_first(monkeypatch: pytest.MonkeyPatch) -> None:
    launch = detect_launch(TORCHRUN)
    assert resolve_tags(None, "mine", 2, pid=1, launch=launch) == {"run": "mine", "rank": "2"}
    monkeypatch.setenv("NRG_RUN", "agents")
    assert resolve_tags(None, None, None, pid=1, launch=launch)["run"] == "agents"


def test_no_launcher() -> None:
    assert detect_launch({"RANK": "x", "SLURM_JOB_ID": ""}) == Launch()
    assert detect_launch({"LOCAL_RANK": "2"}) == Launch("torchrun", "2", "2", "", "")


class _Props:
    uuid = "58AEB4E1-F1D0-4F3A-8F6B-0C2D3E4F5A6B"


class _Param:
    is_cuda = True
    device = SimpleNamespace(index=1)


def test_cuda_uuid_names_the_physical_device_of_the_model() -> None:
    # torch.cuda numbers the devices CUDA_VISIBLE_DEVICES leaves; the UUID is the device's own.
    asked: list[int] = []

    def props(index: int) -> _Props:
        asked.append(index)
        return _Props()

    cuda = SimpleNamespace(get_device_properties=props, current_device=lambda: 0)
    model = SimpleNamespace(parameters=lambda: iter([_Param()]))
    assert cuda_uuid(model, cuda) == "GPU-58aeb4e1-f1d0-4f3a-8f6b-0c2d3e4f5a6b"
    assert asked == [1]
    assert cuda_uuid(SimpleNamespace(parameters=lambda: iter([])), cuda) == ""


class Wrapper(nn.Module):
    """Stands in for DDP's wrapper (same class name and ``module``), without a process group:
    its forward, like DDP's, is not one torch.export can take (DDP's runs collectives; this
    one branches on data)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: Any) -> Any:
        if x.sum() > -1e30:  # data-dependent: torch.export refuses it
            return self.module(x)
        return self.module(-x)


Wrapper.__name__ = Wrapper.__qualname__ = "DistributedDataParallel"


def _points(path: Path) -> list[Any]:
    return [decode_line(line) for line in path.read_text().splitlines() if line.strip()]


def _train(model: nn.Module) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()


def test_wrapped_model_graph_is_the_inner_model(private_dirs: Path) -> None:
    inner = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
    wrapped = Wrapper(inner)
    assert unwrap_model(wrapped) == (inner, "module.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no jit.trace deprecation warnings
        with instrument(wrapped, run="w") as session:
            _train(wrapped)
    assert session.capture is not None and session.capture.source == "torch.export"
    graph = json.loads(Path(session.graph_path or "").read_text())
    assert graph["modules"]["module.0"]["flops"] == 2 * 4 * 8 * 4
    pts = _points(session.fallback_path)
    flops = {p.tags["module"]: p.fields.get("flops") for p in pts if p.measurement == "nrg_model"}
    assert flops["(root)"] == flops["module"] == 2 * 4 * 8 * 4


@pytest.mark.parametrize(("rank", "graphs"), [("0", 1), ("1", 0)])
def test_graph_once_per_run_on_rank_zero(
    rank: str, graphs: int, private_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**TORCHRUN, "RANK": rank}.items():
        monkeypatch.setenv(name, value)
    model = nn.Sequential(nn.Linear(8, 4))
    with instrument(model) as session:
        _train(model)
    assert session.tags["run"] == "torchrun-abc" and session.tags["rank"] == rank
    assert len(list((private_dirs / "graphs").glob("*.json"))) == graphs
    start = next(
        p
        for p in _points(session.fallback_path)
        if p.measurement == "nrg_run" and p.fields["event"] == "start"
    )
    assert start.fields["launcher"] == "torchrun"
    assert bool(start.fields["graph_path"]) == (rank == "0")
    assert (start.fields["local_rank"], start.fields["world_size"]) == (1, 8)
