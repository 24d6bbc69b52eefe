"""The generated reference pages match the code they are generated from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts/gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_pages_are_what_the_code_generates() -> None:
    gen = generator()
    for name, path in gen.PAGES.items():
        assert path.read_text(encoding="utf-8") == gen.RENDER[name](), (
            f"{path.relative_to(ROOT)} is out of date: run python scripts/gen_reference.py"
        )


def test_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    pages = {name: tmp_path / f"{name}.md" for name in gen.PAGES}
    monkeypatch.setattr(gen, "PAGES", pages)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    pages["config"].write_text(pages["config"].read_text().replace("`grace`", "`grase`"))
    assert gen.main(["--check"]) == 1


def test_every_plugin_and_key_is_on_the_config_page() -> None:
    import dataclasses

    from acquisition.config import AgentConfig
    from acquisition.registry import COLLECTORS, PROCESSORS, SINKS, load_class

    page = generator().render_config()
    for f in dataclasses.fields(AgentConfig):
        assert f"| `{f.name}` |" in page
    for kind, table in (("collectors", COLLECTORS), ("sinks", SINKS), ("processors", PROCESSORS)):
        for name in table:
            section = page.split(f"### `[[{kind}.{name}]]`")[1].split("\n## ")[0].split("\n### ")[0]
            config_class = getattr(load_class(kind, name), "config_class", None)
            for f in dataclasses.fields(config_class) if config_class else ():
                assert f"| `{f.name}` |" in section, f"{kind}.{name}: {f.name}"
