"""Test-wide settings.

Hypothesis: no per-example deadline (these 2-core machines are often loaded, and a slow example
is not a failure), and under CI (``CI`` set) a derandomised search, so a landing run explores the
same examples as the run before it; run locally without ``CI`` to keep searching new ones.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("nrg", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "nrg-ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("nrg-ci" if os.environ.get("CI") else "nrg")


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path: a Unix socket's path has a ~100-byte limit."""
    with tempfile.TemporaryDirectory(prefix="nrg-sim-") as d:
        yield Path(d)
