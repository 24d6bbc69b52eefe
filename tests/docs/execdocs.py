"""Executed docs: the fenced blocks of README.md and docs/ that a reader is meant to run.

A block is marked by an HTML comment on the line just before its fence (MkDocs and GitHub show
nothing of it):

- ``<!-- run -->``: the test runs it. ``sh`` / ``bash``: the block as one bash script.
  ``console``: each ``$ `` line is a command, and the lines after it, up to the next ``$ ``
  line, are the output it must print (stdout and stderr together); ``…`` in a line matches any
  text, a line of only ``…`` any number of lines, and runs of spaces match any spacing.
  ``python``: the block as a script. ``toml`` (and any other language) with ``save=FILE``.
- options after ``run``, separated by spaces: ``save=FILE`` writes the block to ``FILE`` in the
  page's directory instead of running it (``train.py``, ``nrg.toml``); ``uses=FILE,...``: the
  files other pages save are put in this page's directory first; ``numbers-vary``: every
  number in the shown output matches any number (times, energies, sizes), and a unit of
  energy or power any of its prefixes (``J``, ``kJ``, ``MJ``: a slower machine's run is longer); ``exit=N``: the
  commands must exit with status N; ``define=a,b``: the Python block calls placeholders
  (``train()``, ``evaluate()``...) that the test defines as small workloads first; ``host=NAME``:
  the output shows this machine's name as ``NAME``.
- ``<!-- skip: REASON -->``: not run, for what a test machine cannot do (Docker, a GPU, a
  serial device, an install); the reason is required.

Every ``sh``, ``bash``, ``console`` and ``python`` block must carry one of the two markers, so a
new page's blocks cannot be forgotten. The blocks of one page run in order in one directory
(files saved by one block are there for the next; ``cmd &`` keeps running until the page is
done), with nrg's directories (``NRG_DATA_DIR``...) and ``HOME`` inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MARKED_LANGUAGES",
    "Block",
    "blocks",
    "output_matches",
    "parse_console",
]

MARKED_LANGUAGES = frozenset({"sh", "bash", "console", "python"})
"""Languages whose blocks must be marked ``run`` or ``skip``."""

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<lang>[\w-]*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*(?P<kind>run|skip)\b(?P<rest>.*?)-->\s*$")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
_ANY = "…"
_UNIT = re.compile(r"[kMG]?(J|W|Wh)([,;.)]*)")
"""Units whose prefix follows the value's size (``151.8 J``, ``1.35 kJ``)."""


@dataclass
class Block:
    """One fenced block and its marker."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    lang: str
    text: str
    kind: str = ""
    """``run``, ``skip`` or empty (unmarked)."""
    options: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _marker(line: str) -> tuple[str, dict[str, str], str] | None:
    m = _MARK.match(line)
    if m is None:
        return None
    rest = m.group("rest").strip()
    if m.group("kind") == "skip":
        return "skip", {}, rest.removeprefix(":").strip()
    options: dict[str, str] = {}
    for word in rest.split():
        key, _, value = word.partition("=")
        options[key] = value
    return "run", options, ""


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the marker on the line before it."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        block = Block(path, i + 1, m.group("lang"), "\n".join(body) + "\n")
        mark = _marker(lines[i - 1]) if i > 0 else None
        if mark is not None:
            block.kind, block.options, block.reason = mark
        out.append(block)
        i = end + 1
    return out


def parse_console(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the output lines shown after each."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def _line_pattern(expected: str, numbers_vary: bool) -> re.Pattern[str]:
    parts: list[str] = []
    for chunk in re.split(r"(…|\s+)", expected.rstrip()):
        if chunk == _ANY:
            parts.append(".*?")
        elif chunk.isspace():
            parts.append(r"\s*" if not "".join(parts) else r"\s+")
        elif numbers_vary and (unit := _UNIT.fullmatch(chunk)):
            parts.append(f"[kMG]?{unit.group(1)}{re.escape(unit.group(2))}")
        elif numbers_vary:
            pieces = _NUMBER.split(chunk)
            nums = len(pieces) - 1
            parts.append(
                "".join(
                    re.escape(p) + (_NUMBER.pattern if k < nums else "")
                    for k, p in enumerate(pieces)
                )
            )
        elif chunk:
            parts.append(re.escape(chunk))
    return re.compile("".join(parts) + r"\s*")


def output_matches(expected: list[str], actual: list[str], *, numbers_vary: bool = False) -> bool:
    """Whether ``actual`` lines match the shown ``expected`` lines (see the module docstring)."""
    patterns: list[re.Pattern[str] | None] = [
        None if e.strip() == _ANY else _line_pattern(e, numbers_vary) for e in expected
    ]
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(patterns):
            result = j == len(actual)
        elif patterns[i] is None:
            result = match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        else:
            pattern = patterns[i]
            assert pattern is not None
            result = j < len(actual) and bool(pattern.fullmatch(actual[j])) and match(i + 1, j + 1)
        memo[(i, j)] = result
        return result

    return match(0, 0)
