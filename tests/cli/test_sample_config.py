"""``nrg-collect config``: valid once uncommented, only the keys each plugin reads."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from acquisition.config import build_dataclass, parse_config
from acquisition.registry import COLLECTORS, PROCESSORS, SINKS, load_class
from acquisition.sample import common_keys, plugin_sample, sample_path, uncomment

NRG = str(Path(sys.executable).with_name("nrg-collect"))
PLUGINS = [
    (kind, name)
    for kind, table in (("collectors", COLLECTORS), ("sinks", SINKS), ("processors", PROCESSORS))
    for name in table
]


def _fields(cls: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def _table(lines: list[str], kind: str, name: str) -> dict[str, Any]:
    data = tomllib.loads(uncomment("\n".join(lines) + "\n"))
    (table,) = data[kind][name]
    return dict(table)


def test_the_printout_uncommented_is_a_config_every_plugin_accepts() -> None:
    out = subprocess.run([NRG, "config"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[[collectors.procfs]]" not in out.stdout.replace("# [[collectors.procfs]]", "")
    parse_config(out.stdout)  # as printed: everything commented
    config = parse_config(uncomment(out.stdout))
    specs = [*config.collectors, *config.sinks, *config.processors]
    assert sorted((s.kind, s.name) for s in specs) == sorted(PLUGINS)
    for spec in specs:
        cls = load_class(spec.kind, spec.name)
        if getattr(cls, "config_class", None) is not None:
            build_dataclass(cls.config_class, spec.options, spec.where)
        else:
            assert spec.options == {}


@pytest.mark.parametrize(("kind", "name"), PLUGINS)
def test_each_plugin_lists_exactly_the_keys_it_reads(kind: str, name: str) -> None:
    cls = load_class(kind, name)
    table = _table(plugin_sample(kind, name), kind, name)
    config_class = getattr(cls, "config_class", None)
    expected = (_fields(config_class) if config_class else set()) | common_keys(kind, cls)
    # Keys without a default are shown as prose only (TOML has no null).
    optional = {f.name for f in dataclasses.fields(config_class or object) if _unset(f)}
    assert set(table) == expected - optional


def _unset(f: dataclasses.Field[Any]) -> bool:
    return f.default is None


def test_push_sources_offer_no_interval() -> None:
    for name in ("hooks", "emonpi"):
        table = _table(plugin_sample("collectors", name), "collectors", name)
        assert "interval" not in table and "timeout" not in table
    assert "interval" in _table(plugin_sample("collectors", "procfs"), "collectors", "procfs")


@pytest.mark.parametrize(("kind", "name"), [p for p in PLUGINS if sample_path(*p) is not None])
def test_each_sample_toml_has_the_keys_of_its_config_dataclass(kind: str, name: str) -> None:
    path = sample_path(kind, name)
    assert path is not None
    cls = load_class(kind, name)
    table = _table(path.read_text().splitlines(), kind, name)
    config_class = getattr(cls, "config_class", None)
    fields = _fields(config_class) if config_class else set()
    optional = {f.name for f in dataclasses.fields(config_class or object) if _unset(f)}
    assert set(table) - common_keys(kind, cls) == fields - optional, path
