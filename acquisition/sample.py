"""``nrg-collect config``: a commented sample configuration of the agent and every plugin.

Each plugin's part is its package's ``sample.toml`` where it has one (``collectors/<name>/``,
``sinks/<name>/``), else it is written from the plugin's config dataclass. Both follow one
convention, so that the whole printout is a valid configuration once uncommented
(:func:`uncomment`):

- a setting, or a table header, is commented with ``# `` (``# interval = "1s"``);
- prose is commented with ``## `` and stays a comment after uncommenting;
- a key without a default (``None``) is shown as prose, since TOML has no null.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import typing
from pathlib import Path
from typing import Any

from acquisition.config import COLLECTOR_KEYS, SINK_KEYS, AgentConfig, ReportConfig
from acquisition.registry import COLLECTORS, PROCESSORS, SINKS, load_class

__all__ = ["plugin_sample", "sample_config", "sample_path", "uncomment"]

_UNCOMMENT = re.compile(r"^# ?(?!#)", re.MULTILINE)

_COMMON = {
    "collectors": (
        '# interval = "1s"  ## this collector\'s own interval (default: [agent] interval)',
        '# timeout = "5s"  ## longest a read may take (default: 5 × the interval)',
    ),
    "sinks": (
        "# batch_size = 5000  ## points per write (default: [agent] batch_size)",
        '# flush_interval = "1s"  ## (default: [agent] flush_interval)',
        "# buffer_limit = 100000  ## points held in memory (default: [agent] buffer_limit)",
    ),
}
_TABLES = {"collectors": COLLECTORS, "sinks": SINKS, "processors": PROCESSORS}


def uncomment(text: str) -> str:
    """The sample with every setting switched on: one leading ``# `` removed from each line
    (prose, written ``## ``, stays a comment)."""
    return _UNCOMMENT.sub("", text)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return _toml_value(str(value))


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _doc(f: dataclasses.Field[Any], hint: Any) -> str:
    doc = str(f.metadata.get("doc", ""))
    if typing.get_origin(hint) is typing.Literal:
        choices = ", ".join(map(repr, typing.get_args(hint)))
        doc = f"{doc}; one of {choices}" if doc else f"one of {choices}"
    return doc


def dataclass_lines(cls: type[Any]) -> list[str]:
    """``# key = default  ## doc`` for every field of the config dataclass ``cls``."""
    lines = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = _default(f)
        doc = _doc(f, hints[f.name])
        comment = f"  ## {doc}" if doc else ""
        if default is None:
            lines.append(f"## {f.name} = ...  (unset by default){comment.replace('  ##', ';')}")
            continue
        if f.metadata.get("duration"):
            default = f"{default:g}s"
        lines.append(f"# {f.name} = {_toml_value(default)}{comment}")
    return lines


def sample_path(kind: str, name: str) -> Path | None:
    """The plugin package's ``sample.toml``, found without importing the plugin."""
    target = _TABLES[kind].get(name)
    if target is None:
        return None
    module = target.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "sample.toml"
        if path.is_file():
            return path
    return None


def _reads_interval(cls: type[Any]) -> bool:
    """A polled collector (``collect``) runs on an interval; a push source does not."""
    return hasattr(cls, "collect")


def plugin_sample(kind: str, name: str) -> list[str]:
    """The sample lines of one plugin: its ``sample.toml``, else from its config dataclass."""
    try:
        cls = load_class(kind, name)
    except ImportError as exc:
        return [f"## [[{kind}.{name}]]  (not installed here: {exc})"]
    path = sample_path(kind, name)
    if path is not None:
        return _from_sample_file(kind, cls, path.read_text(encoding="utf-8"))
    out = []
    doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
    if doc:
        out.append(f"## {doc[0]}")
    out.append(f"# [[{kind}.{name}]]")
    if kind == "sinks" or (kind == "collectors" and _reads_interval(cls)):
        out.extend(_COMMON[kind])
    config_class = getattr(cls, "config_class", None)
    if config_class is not None:
        out.extend(dataclass_lines(config_class))
    return out


def _from_sample_file(kind: str, cls: type[Any], text: str) -> list[str]:
    """A plugin's ``sample.toml`` as the printout shows it: the table header commented (the
    plugin runs only once it is uncommented) and the keys the core reads for it added below."""
    out: list[str] = []
    for line in text.strip().splitlines():
        if line.startswith("[["):
            out.append(f"# {line}")
            if kind == "sinks" or (kind == "collectors" and _reads_interval(cls)):
                out.extend(_COMMON[kind])
        else:
            out.append(line)
    return out


def common_keys(kind: str, cls: type[Any]) -> set[str]:
    """Keys the core reads for a plugin of ``kind``: none for push sources and processors."""
    if kind == "sinks":
        return set(SINK_KEYS)
    if kind == "collectors" and _reads_interval(cls):
        return set(COLLECTOR_KEYS)
    return set()


def sample_config() -> str:
    """A commented TOML config with every key of the agent and of every plugin, at its default."""
    out = [
        "## nrg-collect configuration (TOML). Every key is shown at its default; uncomment to "
        "change it.",
        "## Strings may use ${ENV} or ${ENV:-default}; durations take 500ms, 2s, 1m; sizes 64MiB.",
        "## Without any [[collectors.*]] table every collector that works here runs; without "
        "any [[sinks.*]] table points go to the file sink.",
        "",
        "[agent]",
        *dataclass_lines(AgentConfig),
        "",
        "[report]",
        *dataclass_lines(ReportConfig),
    ]
    for kind, table in _TABLES.items():
        for name in table:
            out.append("")
            out.extend(plugin_sample(kind, name))
    return "\n".join(out) + "\n"
