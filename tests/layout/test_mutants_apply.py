"""The mutation lists still apply: every mutant's snippet occurs exactly once in its file (a
refactor that moves or rewrites the code would otherwise leave ``scripts/mutate.py`` stopping
at that mutant, or measuring nothing)."""

from __future__ import annotations

import ast
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


def test_generated_sample_is_unique_applicable_and_reproducible() -> None:
    """``mutate.py --generate``: for a fixed seed, every generated snippet occurs exactly once in
    its file, its replacement differs and the mutated file still parses; the same seed draws the
    same sample, and every module has tests to run."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mutate
        import mutgen
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    drawn = mutgen.sample(1764234000, 60, mutate.ALL)
    assert len(drawn) == 60
    assert [m.name for m in drawn] == [m.name for m in mutgen.sample(1764234000, 60, mutate.ALL)]
    assert len({m.path for m in drawn}) > 5  # spread over the modules, not one
    for m in drawn:
        text = (ROOT / m.path).read_text()
        assert text.count(m.old) == 1, m.name
        assert m.new != m.old, m.name
        ast.parse(text.replace(m.old, m.new))
        assert m.tests, m.name
    for path in mutgen.MODULES:
        assert mutgen.module_tests(path, mutate.ALL), path


def test_a_generated_sample_can_be_drawn_from_earlier_module_text() -> None:
    """``mutate.py --generate --at COMMIT``: the draw follows the modules' text it is given, so a
    sample recorded at a commit is drawn again from that commit's text; the current files' text
    draws the same sample as no text given, and one edit more in the first module another."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mutate
        import mutgen
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    current = {p: (ROOT / p).read_text() for p in mutgen.MODULES}
    names = [m.name for m in mutgen.sample(1795774649, 20, mutate.ALL)]
    assert [m.name for m in mutgen.sample(1795774649, 20, mutate.ALL, current)] == names
    first = mutgen.MODULES[0]
    changed = {**current, first: current[first] + "\n_EXTRA = 1 + 1\n"}
    assert [m.name for m in mutgen.sample(1795774649, 20, mutate.ALL, changed)] != names
