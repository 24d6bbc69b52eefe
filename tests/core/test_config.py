from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from acquisition.agent import Agent
from acquisition.config import (
    build_dataclass,
    duration,
    parse_config,
    parse_duration,
    parse_size,
    size,
)
from acquisition.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m", 60.0),
        ("250us", 250e-6),
        ("1.5", 1.5),
        (3, 3.0),
        ("1h", 3600.0),
        ("10 ms", 0.01),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["fast", "5 parsecs", "-1s", True, [1]])
def test_bad_durations_name_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"\[agent\] interval"):
        parse_config(f"[agent]\ninterval = {_toml(bad)}\n")


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def test_sizes() -> None:
    assert parse_size("64MiB") == 64 * 1024 * 1024
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size(1024) == 1024
    with pytest.raises(ConfigError, match="not a size"):
        parse_size("lots")


def test_unknown_agent_key_is_named_with_its_table() -> None:
    with pytest.raises(
        ConfigError, match=r"\[agent\] unknown key 'intervall'; known keys: .*interval"
    ):
        parse_config("[agent]\nintervall = '1s'\n")


def test_unknown_top_level_table() -> None:
    with pytest.raises(ConfigError, match="unknown top-level table or key 'agnet'"):
        parse_config("[agnet]\ninterval = 1\n")


def test_invalid_toml_says_so() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[agent\n")


def test_wrong_types_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"\[agent\] batch_size: expected an integer"):
        parse_config("[agent]\nbatch_size = 'many'\n")
    with pytest.raises(ConfigError, match=r"\[agent\] interval must be > 0"):
        parse_config("[agent]\ninterval = 0\n")


def test_env_expansion_with_default_and_missing() -> None:
    cfg = parse_config(
        "[agent]\nexperiment = '${EXP}'\nrun = '${RUN:-r0}'\n", env={"EXP": "resnet"}
    )
    assert (cfg.agent.experiment, cfg.agent.run) == ("resnet", "r0")
    with pytest.raises(ConfigError, match="environment variable TOKEN is not set"):
        parse_config("[[sinks.file]]\ndir = '${TOKEN}'\n", env={})


def test_plugin_tables_split_core_keys_from_plugin_options() -> None:
    cfg = parse_config(
        """
[[collectors.procfs]]
interval = "100ms"
timeout = "1s"
pids = [1]

[[collectors.procfs]]
root = "/host"

[[sinks.file]]
batch_size = 10
flush_interval = "250ms"
dir = "/tmp/x"
"""
    )
    a, b = cfg.collectors
    assert (a.interval, a.timeout, a.options) == (0.1, 1.0, {"pids": [1]})
    assert (b.index, b.interval, b.options) == (1, None, {"root": "/host"})
    (s,) = cfg.sinks
    assert (s.batch_size, s.flush_interval, s.options) == (10, 0.25, {"dir": "/tmp/x"})


def test_plugin_table_must_be_an_array_of_tables() -> None:
    with pytest.raises(ConfigError, match=r"\[sinks.file\] must be written \[\[sinks.file\]\]"):
        parse_config("[sinks]\nfile = 3\n")


async def test_unknown_plugin_and_unknown_plugin_key_fail_at_startup(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = parse_config("[[sinks.kafka]]\n")
    with pytest.raises(
        ConfigError, match="unknown plugin 'kafka'; known sinks: file, influxdb, stdout"
    ):
        await Agent(cfg).open_sinks()
    cfg = parse_config(f"[[sinks.file]]\ndir = '{tmp_path}'\nrotate = 1\n")
    with pytest.raises(ConfigError, match=r"\[sinks.file\[0\]\] unknown key 'rotate'"):
        await Agent(cfg).open_sinks()


@dataclass
class _Example:
    every: float = duration(1.0)
    cap: int = size(10)
    names: list[str] = field(default_factory=list)
    mode: str = "a"


def test_build_dataclass_converts_and_checks() -> None:
    obj = build_dataclass(_Example, {"every": "20ms", "cap": "1KiB", "names": ["x"]}, "t")
    assert (obj.every, obj.cap, obj.names) == (0.02, 1024, ["x"])
    with pytest.raises(ConfigError, match=r"\[t\] names\[1\]: expected a string"):
        build_dataclass(_Example, {"names": ["x", 2]}, "t")


def test_global_tags_come_from_config_then_environment() -> None:
    cfg = parse_config("[agent]\nhost = 'h'\ntags = {lab = 'l1'}\n")
    env = {"NRG_EXPERIMENT": "e", "NRG_RUN": "r"}
    assert cfg.agent.global_tags(env) == {"host": "h", "lab": "l1", "experiment": "e", "run": "r"}
    cfg = parse_config("[agent]\nhost = 'h'\nrun = 'mine'\n")
    assert cfg.agent.global_tags(env)["run"] == "mine"
