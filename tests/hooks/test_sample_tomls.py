"""Each collector's sample.toml, uncommented as ``nrg-collect config`` does, is a valid table with
exactly its config's keys (and the core's common keys for polled collectors) at their defaults."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from acquisition.config import build_dataclass
from acquisition.registry import COLLECTORS, load_class
from acquisition.sample import common_keys, uncomment

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(COLLECTORS))
def test_sample_toml_uncommented_gives_exactly_the_defaults(name: str) -> None:
    text = (ROOT / "collectors" / name / "sample.toml").read_text()
    table = dict(tomllib.loads(uncomment(text))["collectors"][name][0])
    cls = load_class("collectors", name)
    config_class = cls.config_class
    fields = {f.name for f in dataclasses.fields(config_class)}
    common = common_keys("collectors", cls)
    assert set(table) == fields | common
    options = {k: v for k, v in table.items() if k not in common}
    assert build_dataclass(config_class, options, f"collectors.{name}") == config_class()
    # As shipped everything is commented out: the file holds no table at all.
    assert tomllib.loads(text) == {}
