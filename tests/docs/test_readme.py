"""README.md stays short, shows the very command CI runs, and links only to what exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (and MkDocs' for the headings used here)."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(slug(m.group(1)))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or (
            anchor and where.suffix == ".md" and anchor not in anchors(where)
        ):
            broken.append(target)
    return broken


def ci_command() -> str:
    """The test command that ``.ci/run`` runs (its last line)."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    return lines[-1].strip()


def test_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_readme_shows_the_command_ci_runs_as_a_command_line_of_its_own() -> None:
    command = ci_command()
    assert command == "bash scripts/test.sh"
    assert command in README.read_text(encoding="utf-8").splitlines()


def test_readme_links_resolve() -> None:
    assert broken_links(README) == []


def test_the_link_check_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A `title` here\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-title-here) [gone](missing.md#x) [bad](there.md#not-a-heading) "
        "[web](https://example.com/x)\n"
    )
    assert broken_links(page) == ["missing.md#x", "there.md#not-a-heading"]
