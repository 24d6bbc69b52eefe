"""The NVML scenarios of ``tests/fixtures/nvml`` for the fake binding (:mod:`collectors.nvml.fake`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectors.nvml import fake

__all__ = ["FIXTURES", "load_scenario"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def load_scenario(name: str) -> dict[str, Any]:
    """A scenario file from ``tests/fixtures/nvml`` (``.toml`` added)."""
    return fake.load_scenario(FIXTURES / f"{name}.toml")
