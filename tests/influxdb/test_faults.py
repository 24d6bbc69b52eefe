"""The fault-injection trials (:mod:`tests.influxdb.faults`), short variant: ``pytest -m faults``.

The long variant with figures: ``python bench/faults.py --scale 12``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.influxdb.faults import TRIALS, run_trial_in_pytest

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.server]


@pytest.mark.parametrize("name", sorted(TRIALS))
def test_fault_trial(name: str, tmp_path: Path) -> None:
    run_trial_in_pytest(TRIALS[name], name, tmp_path)
