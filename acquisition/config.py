"""TOML configuration: ``[agent]``, ``[[collectors.NAME]]``, ``[[sinks.NAME]]``, ``[[processors.NAME]]``.

Defaults live in dataclasses (``AgentConfig`` here, each plugin's ``config_class``). Unknown keys are
a startup error naming the table and key. ``${ENV}`` and ``${ENV:-default}`` in strings are expanded
from the environment. Durations accept numbers (seconds) or strings such as ``"500ms"``, ``"2s"``,
``"1m"``; sizes accept numbers (bytes) or ``"64MiB"``-style strings.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import socket
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from acquisition.carbon import check_setting
from acquisition.errors import ConfigError
from acquisition.summary_options import DEFAULT_CARBON_INTENSITY, DEFAULT_CARBON_SOURCE

__all__ = [
    "BUFFER_RULE",
    "COLLECTOR_KEYS",
    "MAX_DURATION_S",
    "MAX_INT",
    "SINK_KEYS",
    "AgentConfig",
    "Config",
    "PluginSpec",
    "build_dataclass",
    "check_buffer",
    "duration",
    "expand_env",
    "load_config",
    "option",
    "parse_config",
    "parse_duration",
    "parse_size",
    "sanitize_tag",
    "size",
    "unknown_key_message",
]

T = TypeVar("T")

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def sanitize_tag(value: str) -> str:
    """A tag value that can always be written: bytes that are not UTF-8 (a file name passed
    through ``surrogateescape``) become U+FFFD, control characters a space."""
    text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)


MAX_DURATION_S = 366 * 86400.0
"""The longest duration accepted anywhere (a year): longer is a typo, and would overflow the
nanosecond clocks."""
MAX_INT = 2**63 - 1
"""The largest integer or size accepted (int64, what every consumer can hold)."""
_MAX_NUMBER_CHARS = 64


def parse_duration(value: object, where: str = "duration") -> float:
    """Seconds from ``1.5``, ``"500ms"``, ``"2s"``, ``"1m"``, ``"250us"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        seconds = _finite(value, where)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value) if len(value) <= _MAX_NUMBER_CHARS else None
        if not m or (m.group(2) and m.group(2) not in _DURATION_UNITS):
            raise ConfigError(
                f"{where}: {_short(value)} is not a duration (use e.g. 500ms, 2s, 1m, "
                "or a number of seconds)"
            )
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]
    else:
        raise ConfigError(f"{where}: expected a duration, got {_short(value)}")
    if seconds < 0:
        raise ConfigError(f"{where}: duration must not be negative, got {_short(value)}")
    if not seconds <= MAX_DURATION_S:
        raise ConfigError(f"{where}: {_short(value)} is too long (at most 366 days)")
    return seconds


def _finite(value: int | float, where: str) -> float:
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"{where}: expected a finite number, got {_short(value)}")
    return number


def _short(value: object) -> str:
    """``repr(value)``, cut to 60 characters (a 5,000-digit number is not worth echoing)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr
        return "a number too large"
    return text if len(text) <= 60 else text[:57] + "..."


def parse_size(value: object, where: str = "size") -> int:
    """Bytes from ``1048576``, ``"64MiB"``, ``"1GB"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a size, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = _SIZE_RE.match(value) if len(value) <= _MAX_NUMBER_CHARS else None
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ConfigError(
                f"{where}: {_short(value)} is not a size (use e.g. 512MiB, 2GB, or bytes)"
            )
        n = int(_finite(float(m.group(1)), where) * _SIZE_UNITS[m.group(2).lower()])
    else:
        raise ConfigError(f"{where}: expected a size, got {_short(value)}")
    if n < 0:
        raise ConfigError(f"{where}: size must not be negative")
    if n > MAX_INT:
        raise ConfigError(f"{where}: {_short(value)} is too large (at most {MAX_INT} bytes)")
    return n


def option(default: Any, doc: str = "") -> Any:
    """A dataclass field with the comment ``nrg-collect config`` prints beside it.

    A list or dict default is copied for every instance."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def duration(default: float, doc: str = "") -> Any:
    """A dataclass field holding seconds that users may write as ``"500ms"``."""
    return field(default=default, metadata={"duration": True, "doc": doc})


def size(default: int, doc: str = "") -> Any:
    """A dataclass field holding bytes that users may write as ``"64MiB"``."""
    return field(default=default, metadata={"size": True, "doc": doc})


def expand_env(value: Any, where: str, env: Mapping[str, str] | None = None) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of ``value``."""
    env = os.environ if env is None else env
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")

        return _ENV_RE.sub(sub, value)
    if isinstance(value, list):
        return [expand_env(v, f"{where}[{i}]", env) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: expand_env(v, f"{where}.{k}", env) for k, v in value.items()}
    return value


def _to_float(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _finite(value, where)
    raise ConfigError(f"{where}: expected a number, got {_short(value)}")


def _to_int(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if -MAX_INT - 1 <= value <= MAX_INT:
            return value
        raise ConfigError(f"{where}: {_short(value)} is out of range (a 64-bit integer)")
    raise ConfigError(f"{where}: expected an integer, got {_short(value)}")


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: expected true or false, got {_short(value)}")


def _to_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected a string, got {_short(value)}")


def _to_path(value: Any, where: str) -> Path:
    if isinstance(value, str):
        return Path(value).expanduser()
    raise ConfigError(f"{where}: expected a path string, got {_short(value)}")


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    float: _to_float,
    int: _to_int,
    bool: _to_bool,
    str: _to_str,
    Path: _to_path,
}
"""Type hint → converter: checks a TOML value and returns it as the field's type."""


def _check_union(value: Any, args: tuple[Any, ...], where: str) -> Any:
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _check_type(value, arg, where)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(errors[0] if errors else f"{where}: bad value {_short(value)}")


def _check_list(value: Any, args: tuple[Any, ...], where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {_short(value)}")
    item = args[0] if args else Any
    return [_check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)]


def _check_dict(value: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table, got {_short(value)}")
    vt = args[1] if len(args) == 2 else Any
    return {str(k): _check_type(v, vt, f"{where}.{k}") for k, v in value.items()}


def _check_literal(value: Any, args: tuple[Any, ...], where: str) -> Any:
    if value in args:
        return value
    raise ConfigError(f"{where}: expected one of {', '.join(map(repr, args))}, got {_short(value)}")


_GENERICS: dict[Any, Callable[[Any, tuple[Any, ...], str], Any]] = {
    typing.Union: _check_union,
    types.UnionType: _check_union,
    list: _check_list,
    dict: _check_dict,
    typing.Literal: _check_literal,
}
"""Generic origin (``list[str]``, ``X | None``, ``Literal[...]``) → checker."""


def _check_type(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against (and converted to) the type ``hint``; ConfigError if it is not."""
    if hint is Any or hint is object:
        return value
    scalar = _SCALARS.get(hint)
    if scalar is not None:
        return scalar(value, where)
    origin = typing.get_origin(hint) or hint
    checker = _GENERICS.get(origin)
    if checker is not None:
        return checker(value, typing.get_args(hint), where)
    return value


def unknown_key_message(where: str, key: str, valid: Iterable[str]) -> str:
    """``[where] unknown key 'x'; did you mean 'y'? valid keys: ...`` (every valid key)."""
    keys = sorted(set(valid))
    close = difflib.get_close_matches(str(key), keys, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"[{where}] unknown key {_short(key)}{hint}; valid keys: {', '.join(keys) or '(none)'}"


def build_dataclass(
    cls: type[T], table: Mapping[str, Any], where: str, common: Iterable[str] = ()
) -> T:
    """Build ``cls`` from a TOML table; unknown keys and wrong types are ConfigErrors.

    ``common``: keys the core handles for every plugin of this kind, listed as valid keys."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        f = fields.get(key)
        if f is None:
            raise ConfigError(unknown_key_message(where, key, [*fields, *common]))
        at = f"[{where}] {key}"
        if f.metadata.get("duration"):
            kwargs[key] = parse_duration(value, at)
        elif f.metadata.get("size"):
            kwargs[key] = parse_size(value, at)
        else:
            kwargs[key] = _check_type(value, hints[key], at)
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[{where}] {exc}") from exc
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"[{where}] {exc}") from exc
    return obj


BUFFER_RULE = "buffer_limit ({buffer_limit}) must be at least batch_size ({batch_size})"
"""The one rule for a sink's queue, in ``[agent]`` and in every ``[[sinks.X]]`` table."""


def check_buffer(batch_size: int, buffer_limit: int) -> None:
    """ValueError (BUFFER_RULE) when a sink's queue could not hold one whole batch."""
    if buffer_limit < batch_size:
        raise ValueError(BUFFER_RULE.format(buffer_limit=buffer_limit, batch_size=batch_size))


@dataclass
class AgentConfig:
    """The ``[agent]`` table."""

    interval: float = duration(1.0, "default collection interval of every collector")
    align: bool = False
    """Align ticks to wall-clock multiples of the interval (e.g. :00, :01 ...)."""
    shared_ticks: bool = True
    """Collectors tick together: every collector's ticks fall on one grid started once, so
    those of the same interval (and, at their common multiples, the others) are read in one
    wake-up of the agent instead of one each (false: each collector's grid starts when it does)."""
    flush_interval: float = duration(1.0, "how often sinks are flushed")
    batch_size: int = 5000
    """Points per write of every sink (a sink table may set its own)."""
    buffer_limit: int = 100_000
    """Points held in memory per sink before spilling to disk (or dropping, counted)."""
    stats_interval: float = duration(10.0, "how often nrg_collect self-stats are emitted")
    shutdown_timeout: float = duration(10.0, "deadline for the final flush on SIGINT/SIGTERM")
    precise_wakeup: Literal["auto", "always", "never"] = option(
        "auto",
        "end each sleep with a short blocking sleep so ticks are < 1 ms late; "
        "auto: for intervals under 50 ms (it costs ~0.1 % of a core at 10 Hz)",
    )
    host: str = ""
    """Value of the ``host`` tag (default: this machine's hostname)."""
    experiment: str = ""
    """Value of the ``experiment`` tag (default: $NRG_EXPERIMENT; none when unset)."""
    run: str = ""
    """Value of the ``run`` tag (default: $NRG_RUN, else derived from the tracked command)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra tags put on every point, e.g. ``{ lab = "b2" }``."""
    state_dir: str = ""
    """Spools and other state (default: the per-user state dir, e.g. ~/.local/state/nrg)."""
    data_dir: str = ""
    """Default place for the file sink's output (default: ~/.local/share/nrg)."""
    log_level: str = "info"
    """debug, info, warning or error."""

    def validate(self) -> None:
        if self.interval <= 0:
            raise ValueError("interval must be > 0")
        if self.flush_interval <= 0:
            raise ValueError("flush_interval must be > 0")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        check_buffer(self.batch_size, self.buffer_limit)
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ValueError(f"log_level {self.log_level!r} is not debug, info, warning or error")

    def global_tags(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``host`` always; ``experiment`` and ``run`` from config, else NRG_EXPERIMENT / NRG_RUN."""
        env = os.environ if env is None else env
        tags = dict(self.tags)
        tags["host"] = self.host or socket.gethostname()
        experiment = self.experiment or env.get("NRG_EXPERIMENT", "")
        run = self.run or env.get("NRG_RUN", "")
        if experiment:
            tags["experiment"] = experiment
        if run:
            tags["run"] = run
        return {k: sanitize_tag(v) for k, v in tags.items()}


COLLECTOR_KEYS = {"interval", "timeout"}
"""Keys of a ``[[collectors.X]]`` table that the core handles itself."""
SINK_KEYS = {"batch_size", "flush_interval", "buffer_limit"}
"""Keys of a ``[[sinks.X]]`` table that the core handles itself."""


@dataclass
class PluginSpec:
    """One ``[[collectors.X]]`` / ``[[sinks.X]]`` / ``[[processors.X]]`` table, not yet built."""

    kind: str
    name: str
    options: dict[str, Any]
    index: int = 0
    interval: float | None = None
    timeout: float | None = None
    batch_size: int | None = None
    flush_interval: float | None = None
    buffer_limit: int | None = None
    explicit: bool = True
    """False for the embedded default, where an unavailable collector is silently skipped."""

    @property
    def where(self) -> str:
        return f"{self.kind}.{self.name}[{self.index}]"


@dataclass
class Config:
    agent: AgentConfig
    collectors: list[PluginSpec]
    sinks: list[PluginSpec]
    processors: list[PluginSpec]
    source: str = "<embedded default>"
    report: ReportConfig = field(default_factory=lambda: ReportConfig())


@dataclass
class ReportConfig:
    """``[report]``: settings of the run summary, ``report`` and ``compare``."""

    carbon_intensity_g_per_kwh: float = option(
        DEFAULT_CARBON_INTENSITY,
        "grams CO2e per kWh for the summary's CO2e (default: the " + DEFAULT_CARBON_SOURCE + ")",
    )
    carbon_intensity: object = option(
        "", 'a number (g/kWh), a country code ("DE") or {cloud = "aws", region = "eu-west-1"}'
    )
    carbon_service_url: str = option("", "live intensity service (Electricity Maps' API)")
    carbon_service_token: str = option("", "its auth-token (or carbon_service_token_file)")
    carbon_service_token_file: str = option("", "file holding the token")
    carbon_service_timeout: float = duration(5.0, "how long to wait for the service")
    carbon_service_cache: float = duration(900.0, "how long an answer of the service is kept")

    def validate(self) -> None:
        if not self.carbon_intensity_g_per_kwh >= 0:
            raise ValueError("carbon_intensity_g_per_kwh must be >= 0")
        try:
            check_setting(self.carbon_intensity)
        except ValueError as exc:
            raise ValueError(f"carbon_intensity: {exc}") from None


def _collector_keys(spec: PluginSpec, where: str) -> None:
    options = spec.options
    if "interval" in options:
        spec.interval = parse_duration(options.pop("interval"), f"[{where}] interval")
        if spec.interval <= 0:
            raise ConfigError(f"[{where}] interval must be > 0")
    if "timeout" in options:
        spec.timeout = parse_duration(options.pop("timeout"), f"[{where}] timeout")


def _sink_keys(spec: PluginSpec, where: str) -> None:
    options = spec.options
    if "flush_interval" in options:
        spec.flush_interval = parse_duration(
            options.pop("flush_interval"), f"[{where}] flush_interval"
        )
        if spec.flush_interval <= 0:
            raise ConfigError(f"[{where}] flush_interval must be > 0")
    for key in ("batch_size", "buffer_limit"):
        if key in options:
            v = _to_int(options.pop(key), f"[{where}] {key}")
            if v < 1:
                raise ConfigError(f"[{where}] {key}: expected a positive integer")
            setattr(spec, key, v)


def _check_sink_buffers(agent: AgentConfig, sinks: list[PluginSpec]) -> None:
    for spec in sinks:
        try:
            check_buffer(
                spec.batch_size or agent.batch_size, spec.buffer_limit or agent.buffer_limit
            )
        except ValueError as exc:
            raise ConfigError(f"[{spec.where}] {exc}") from exc


def _specs(kind: str, table: object, env: Mapping[str, str] | None) -> list[PluginSpec]:
    if not isinstance(table, dict):
        raise ConfigError(f"[{kind}] must be a table of [[{kind}.NAME]] arrays")
    out: list[PluginSpec] = []
    for name, entries in table.items():
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(
                f"[{kind}.{name}] must be written [[{kind}.{name}]] (array of tables)"
            )
        for i, raw in enumerate(entries):
            where = f"{kind}.{name}[{i}]"
            options = expand_env(dict(raw), where, env)
            spec = PluginSpec(kind, name, options, i)
            if kind == "collectors":
                _collector_keys(spec, where)
            elif kind == "sinks":
                _sink_keys(spec, where)
            out.append(spec)
    return out


def parse_config(
    text: str, source: str = "<string>", env: Mapping[str, str] | None = None
) -> Config:
    """Parse TOML text into a Config (plugin options are validated when plugins are built)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: tables or arrays are nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ConfigError(f"{source}: a value cannot be read: {exc}") from exc
    try:
        return _build_config(data, source, env)
    except RecursionError as exc:
        raise ConfigError(f"{source}: tables or arrays are nested too deeply") from exc


def _build_config(data: dict[str, Any], source: str, env: Mapping[str, str] | None) -> Config:
    known = {"agent", "collectors", "sinks", "processors", "report"}
    for key in data:
        if key not in known:
            raise ConfigError(
                f"{source}: unknown top-level table or key {key!r}; "
                "known: [agent], [report], [[collectors.NAME]], [[sinks.NAME]], [[processors.NAME]]"
            )
    agent_table = expand_env(data.get("agent", {}), "agent", env)
    if not isinstance(agent_table, dict):
        raise ConfigError("[agent] must be a table")
    agent = build_dataclass(AgentConfig, agent_table, "agent")
    sinks = _specs("sinks", data.get("sinks", {}), env)
    _check_sink_buffers(agent, sinks)
    return Config(
        agent=agent,
        collectors=_specs("collectors", data.get("collectors", {}), env),
        sinks=sinks,
        processors=_specs("processors", data.get("processors", {}), env),
        source=source,
        report=_report(data.get("report", {}), env),
    )


def _report(table: Any, env: Mapping[str, str] | None) -> ReportConfig:
    table = expand_env(table, "report", env)
    if not isinstance(table, dict):
        raise ConfigError("[report] must be a table")
    return build_dataclass(ReportConfig, table, "report")


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and parse a TOML config file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from exc
    return parse_config(text, str(p), env)
