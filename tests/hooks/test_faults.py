"""The hook-socket fault trials (:mod:`tests.hooks.faults`), short variant: ``pytest -m faults``.

The long variant with figures: ``python bench/faults.py --only hooks_oversize_line,...``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hooks.faults import TRIALS, describe, skip_reason

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("name", sorted(TRIALS))
def test_hook_fault_trial(name: str, tmp_path: Path) -> None:
    try:
        figures = TRIALS[name](tmp_path, 1.0)
    except Exception as exc:
        reason = skip_reason(exc)
        if reason is None:
            raise
        pytest.skip(reason)
    print(describe(name, figures))
