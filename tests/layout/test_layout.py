"""The layout stays easy to read: one package per plugin, no oversized source files."""

from __future__ import annotations

from pathlib import Path

import pytest

from acquisition.registry import COLLECTORS, SINKS

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600


def test_no_source_file_above_the_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): n
        for top in ("acquisition", "collectors", "sinks")
        for path in (ROOT / top).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}


@pytest.mark.parametrize(
    ("kind", "name"), [("collectors", n) for n in COLLECTORS] + [("sinks", n) for n in SINKS]
)
def test_every_plugin_is_a_package_with_its_docs(kind: str, name: str) -> None:
    package = ROOT / kind / name
    assert (package / "__init__.py").is_file()
    assert (package / "README.md").is_file()
    assert (package / "sample.toml").is_file()
