from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acquisition.agent import Agent
from acquisition.config import (
    AgentConfig,
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
        ConfigError,
        match=r"\[agent\] unknown key 'intervall' \(did you mean 'interval'\?\); valid keys: .*",
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


# -- values that are not numbers a program can use ----------------------------------------------


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        ("[agent]\ninterval = nan\n", r"\[agent\] interval: expected a finite number"),
        ("[agent]\ninterval = inf\n", r"\[agent\] interval: expected a finite number"),
        ("[agent]\nflush_interval = nan\n", r"\[agent\] flush_interval: expected a finite"),
        ("[agent]\ninterval = '1e999s'\n", r"\[agent\] interval: .* too long"),
        ("[agent]\ninterval = 1e300\n", r"\[agent\] interval: .* too long"),
        ("[agent]\nbatch_size = 99999999999999999999\n", r"\[agent\] batch_size: .*out of range"),
        (
            f'[[sinks.file]]\nmax_bytes = "{"9" * 400}"\n',
            r"\[sinks.file\[0\]\] max_bytes: .*(not a size|too large)",
        ),
        (
            "[[sinks.file]]\nmax_bytes = 99999999999999999999\n",
            r"\[sinks.file\[0\]\] max_bytes: .*too large",
        ),
        (
            "[[sinks.file]]\nflush_interval = nan\n",
            r"\[sinks.file\[0\]\] flush_interval: expected a finite",
        ),
        (
            "[[sinks.file]]\nbatch_size = 99999999999999999999\n",
            r"\[sinks.file\[0\]\] batch_size: .*out of range",
        ),
        (f"[agent]\nbatch_size = {'9' * 5000}\n", r"a value cannot be read"),
        ("[agent]\ntags = " + "{a = " * 1200 + "1" + "}" * 1200 + "\n", r"nested too deeply"),
    ],
)
async def test_bad_values_are_config_errors_naming_table_and_key(toml: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        cfg = parse_config(toml)
        await Agent(cfg).open_sinks()  # plugin options are checked when the plugin is built


def test_buffer_limit_below_batch_size_is_one_rule_everywhere() -> None:
    from acquisition.config import BUFFER_RULE

    text = BUFFER_RULE.format(buffer_limit=10, batch_size=20)
    with pytest.raises(ConfigError) as agent_err:
        parse_config("[agent]\nbatch_size = 20\nbuffer_limit = 10\n")
    assert str(agent_err.value) == f"[agent] {text}"
    with pytest.raises(ConfigError) as sink_err:
        parse_config("[[sinks.file]]\nbatch_size = 20\nbuffer_limit = 10\n")
    assert str(sink_err.value) == f"[sinks.file[0]] {text}"
    # A sink's own batch_size against the agent's default buffer_limit counts too.
    with pytest.raises(ConfigError, match=r"\[sinks.file\[0\]\] buffer_limit \(100000\)"):
        parse_config("[[sinks.file]]\nbatch_size = 200000\n")


async def test_unknown_plugin_key_lists_every_valid_key_and_the_closest() -> None:
    cfg = parse_config("[[collectors.procfs]]\nintervall = '1s'\n")
    with pytest.raises(ConfigError) as err:
        Agent(cfg)._build(cfg.collectors[0])
    message = str(err.value)
    assert "unknown key 'intervall' (did you mean 'interval'?)" in message
    valid = message.split("valid keys: ")[1].split(", ")
    assert {"interval", "timeout", "root"} <= set(valid)
    cfg = parse_config("[[sinks.file]]\nbatchsize = 3\n")
    with pytest.raises(ConfigError, match=r"did you mean 'batch_size'\?.*flush_interval"):
        Agent(cfg)._build(cfg.sinks[0])


_TOML_SCALARS = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=30),
    st.sampled_from(["1s", "500ms", "nan", "1e999", "64MiB", "-1", "1e309s", "0", "ns"]),
)
_AGENT_KEYS = [f.name for f in dataclasses.fields(AgentConfig)] + ["nope"]


def _toml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@given(
    agent=st.dictionaries(st.sampled_from(_AGENT_KEYS), _TOML_SCALARS, max_size=5),
    sink=st.dictionaries(
        st.sampled_from(["batch_size", "buffer_limit", "flush_interval", "max_bytes", "path"]),
        _TOML_SCALARS,
        max_size=4,
    ),
    garbage=st.text(max_size=40),
)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_config_loader_raises_only_config_error(
    agent: dict[str, object], sink: dict[str, object], garbage: str
) -> None:
    """Whatever the values, the loader returns a Config or raises ConfigError, nothing else."""
    lines = ["[agent]"] + [f"{k} = {_toml_scalar(v)}" for k, v in agent.items()]
    lines += ["[[sinks.file]]"] + [f"{k} = {_toml_scalar(v)}" for k, v in sink.items()]
    for text in ("\n".join(lines) + "\n", garbage, "\n".join(lines) + "\n" + garbage):
        try:
            cfg = parse_config(text)
            from acquisition.registry import load_class

            load_class("sinks", "file")
            for spec in cfg.sinks:
                build_dataclass(load_class("sinks", spec.name).config_class, spec.options, "s")
        except ConfigError:
            pass


def test_report_table_is_part_of_the_config() -> None:
    from acquisition.config import ReportConfig

    config = parse_config('[report]\ncarbon_intensity_g_per_kwh = 56.0\n[agent]\ninterval = "1s"\n')
    assert config.report == ReportConfig(carbon_intensity_g_per_kwh=56.0)
    assert parse_config("").report == ReportConfig()
    with pytest.raises(ConfigError, match=r"report.*carbon_intensity_g_per_kwh"):
        parse_config("[report]\ncarbon_intensity_g_per_kwh = -1.0\n")
    with pytest.raises(ConfigError, match="carbon_intensity"):
        parse_config("[report]\ncarbon_intensty_g_per_kwh = 1.0\n")
