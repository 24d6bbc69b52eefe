"""The mutation lists still apply: every mutant's snippet occurs exactly once in its file (a
refactor that moves or rewrites the code would otherwise leave ``scripts/mutate.py`` stopping
at that mutant, or measuring nothing)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_snippet_occurs_once() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mutate
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    stale = [
        f"{m.name}: {m.path} has it {(ROOT / m.path).read_text().count(m.old)} times"
        for m in mutate.ALL
        if (ROOT / m.path).read_text().count(m.old) != 1
    ]
    assert len(mutate.ALL) > 100
    assert stale == []
