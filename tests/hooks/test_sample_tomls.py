"""Each collector's sample.toml, uncommented, is a valid table with exactly its config's keys and
their default values."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from acquisition.config import build_dataclass
from acquisition.registry import COLLECTORS, load_class

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(COLLECTORS))
def test_sample_toml_uncommented_gives_exactly_the_defaults(name: str) -> None:
    text = (ROOT / "collectors" / name / "sample.toml").read_text()
    # Uncomment "# key = value" lines; comment-only continuation lines stay comments.
    uncommented = re.sub(r"(?m)^# (\w+ = )", r"\1", text)
    table = tomllib.loads(uncommented)["collectors"][name][0]
    config_class = load_class("collectors", name).config_class
    fields = {f.name for f in dataclasses.fields(config_class)}
    assert set(table) == fields
    assert build_dataclass(config_class, table, f"collectors.{name}") == config_class()
    # As shipped (all commented out) the table is empty: every default applies.
    assert tomllib.loads(text)["collectors"][name] == [{}]
