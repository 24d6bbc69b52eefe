"""Small real models shared by the torch tests."""

from __future__ import annotations

import torch
from torch import nn


class Scaled(nn.Module):
    """A forward that takes a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return self.fc(x) * scale


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


class Residual(nn.Module):
    """ResNet's pattern: in-place add and in-place ReLU at module boundaries."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        out += x
        return self.act(out)


class DataDependent(nn.Module):
    """Branches on a tensor value: torch.export refuses it, jit.trace records one branch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return y


def nested() -> nn.Sequential:
    """Sequential in Sequential, with one Linear used twice."""
    torch.manual_seed(0)
    shared = nn.Linear(4, 4)
    return nn.Sequential(shared, nn.Sequential(nn.Linear(4, 4), nn.Tanh()), shared)
