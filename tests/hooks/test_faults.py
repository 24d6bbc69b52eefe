"""The hook-socket fault trials (:mod:`tests.hooks.faults`), short variant: ``pytest -m faults``.

The long variant with figures: ``python bench/faults.py --only hooks_oversize_line,...``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hooks.faults import TRIALS
from tests.influxdb.faults import run_trial_in_pytest

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("name", sorted(TRIALS))
def test_hook_fault_trial(name: str, tmp_path: Path) -> None:
    run_trial_in_pytest(TRIALS[name], name, tmp_path)
