"""The fake NVML binding over the GPUs ``nrg-collect simulate nvml`` runs (:mod:`.sim`): what the
nvml collector configured with ``simulate = "DIR"`` calls in place of ``pynvml``."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from acquisition.errors import NoData

from .fake import FakeHandle, FakeNvml
from .sim import NOT_SIMULATED, SCENARIO, STATE, STEP_US

__all__ = ["SimulatedNvml"]


class SimulatedNvml(FakeNvml):
    """:class:`FakeNvml` whose step (one per ms) and energy counters follow the simulator's
    ``state`` file: every call sees the GPUs as the simulator last wrote them."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        """NoData where ``directory`` holds no simulated GPUs."""
        self.directory = Path(directory).expanduser()
        try:
            with (self.directory / SCENARIO).open("rb") as f:
                data = tomllib.load(f)
            self._start_us = int(data["start_us"])
        except (OSError, KeyError, ValueError) as exc:
            raise NoData(NOT_SIMULATED.format(dir=self.directory, why=exc)) from exc
        super().__init__(data)
        self.energy_mj = [0] * len(self.gpus)

    def _enter(self, function: str) -> None:
        words = (self.directory / STATE).read_text().split()
        self.step = max(0, (int(words[0]) - self._start_us) // STEP_US)
        self.energy_mj = [int(w) for w in words[1:]]
        super()._enter(function)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle)
        return self.energy_mj[handle.index]
