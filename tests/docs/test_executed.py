"""The docs run as written: every marked block of README.md and docs/ (see ``execdocs.py``) is
executed, page by page, and the output it shows is compared with the real one. The pages run side
by side (``NRG_DOC_JOBS`` at a time); the blocks of each in order."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs.execdocs import MARKED_LANGUAGES, Block, blocks, output_matches, parse_console

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
OPTIONS = frozenset({"save", "uses", "numbers-vary", "exit", "define", "host"})
BLOCK_TIMEOUT_S = 300

DEFINES = {
    # Plain CPU work: the snippets that call it measure whatever runs (importing torch, not
    # needed there, cost seconds a block).
    "train": """
def train():
    total = 0
    for i in range(3_000_000):
        total += i * i % 7
    return total
""",
    "evaluate": """
def evaluate():
    import time
    time.sleep(0.2)
""",
    "train_step": """
import torch as _torch
_model = _torch.nn.Sequential(_torch.nn.Linear(64, 256), _torch.nn.ReLU(), _torch.nn.Linear(256, 10))
_opt = _torch.optim.SGD(_model.parameters(), lr=0.01)
def train_step():
    _opt.zero_grad()
    _model(_torch.randn(32, 64)).sum().backward()
    _opt.step()
""",
}
"""The placeholders doc snippets call (``define=...``), as small real workloads."""


def _page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def _runnable(page: Path) -> bool:
    return any(b.kind == "run" for b in blocks(page))


def test_every_runnable_block_is_marked() -> None:
    problems = []
    for page in PAGES:
        for b in blocks(page):
            if b.lang in MARKED_LANGUAGES and not b.kind:
                problems.append(
                    f"{b.where}: a {b.lang} block without <!-- run --> or <!-- skip -->"
                )
            if b.kind == "skip" and not b.reason:
                problems.append(f"{b.where}: <!-- skip --> needs a reason")
            if b.kind == "run" and set(b.options) - OPTIONS:
                problems.append(f"{b.where}: unknown options {sorted(set(b.options) - OPTIONS)}")
            if b.kind == "run" and b.lang not in MARKED_LANGUAGES and "save" not in b.options:
                problems.append(f"{b.where}: a {b.lang or 'plain'} block runs only with save=")
    assert problems == []


class Page:
    """One page's directory, environment and background processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NRG_", "XDG_"))}
        env.update(
            HOME=str(home),
            PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            NRG_RUNTIME_DIR=str(root / "run"),
            COLUMNS="100",
        )
        self.env = env
        self.sessions: list[int] = []

    def shell(self, script: str) -> tuple[int, list[str]]:
        """Run ``script`` with bash in the page's directory; its status and output lines.
        Output goes to a file, not a pipe: a command left running (``cmd &``) keeps running."""
        out = self.root / ".out"
        with out.open("wb") as f:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", script],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.sessions.append(proc.pid)
            rc = proc.wait(timeout=BLOCK_TIMEOUT_S)
        return rc, out.read_text(errors="replace").splitlines()

    def close(self) -> None:
        for pid_file in self.root.rglob("simulate.pid"):  # simulators left in the background
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        for pgid in self.sessions:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def _saved(name: str) -> str:
    """The text of the block some page saves as ``name``."""
    for page in PAGES:
        for b in blocks(page):
            if b.kind == "run" and b.options.get("save") == name:
                return b.text
    raise AssertionError(f"no page saves {name!r} (uses={name})")


def _run_block(page: Page, b: Block) -> None:
    want = int(b.options.get("exit") or 0)
    for name in filter(None, b.options.get("uses", "").split(",")):
        (page.root / name).write_text(_saved(name))
    if "save" in b.options:
        (page.root / b.options["save"]).write_text(b.text)
        return
    if b.lang in ("sh", "bash"):
        rc, out = page.shell(b.text)
        assert rc == want, f"{b.where}: exit {rc}, output:\n" + "\n".join(out[-40:])
        return
    if b.lang == "python":
        names = [n for n in b.options.get("define", "").split(",") if n]
        (page.root / ".block.py").write_text("".join(DEFINES[n] for n in names) + b.text)
        rc, out = page.shell("python .block.py")
        assert rc == want, f"{b.where}: exit {rc}, output:\n" + "\n".join(out[-40:])
        return
    for command, expected in parse_console(b.text):
        rc, out = page.shell(command)
        assert rc == want, f"{b.where}: `{command}` exit {rc}, output:\n" + "\n".join(out[-40:])
        if b.options.get("host"):  # the machine's name, shown as the page's
            out = [_host_as(line, b.options["host"]) for line in out]
        if expected:
            shown = "\n".join(expected)
            assert output_matches(expected, out, numbers_vary="numbers-vary" in b.options), (
                f"{b.where}: `{command}` printed\n" + "\n".join(out) + f"\nthe page shows\n{shown}"
            )


def _host_as(line: str, name: str) -> str:
    return re.sub(rf"(?<![\w.-]){re.escape(socket.gethostname())}(?![\w.-])", name, line)


def _run_page(path: Path) -> None:
    """Every marked block of the page, in order, in a directory of its own."""
    # Short: the hooks socket's path must fit a Unix socket address.
    page = Page(Path(tempfile.mkdtemp(prefix="nrg-doc-")))
    try:
        for b in blocks(path):
            if b.kind == "run":
                _run_block(page, b)
    finally:
        page.close()
        shutil.rmtree(page.root, ignore_errors=True)


@pytest.fixture(scope="session")
def executed_pages(request: pytest.FixtureRequest) -> Iterator[dict[Path, Future[None]]]:
    """The selected pages, run side by side (``NRG_DOC_JOBS`` at a time, default one per CPU):
    each page's blocks run in order, and the pages share nothing, so the wall time is that of
    the longest few rather than their sum. The pages with the most blocks start first."""
    wanted = [
        item.callspec.params["path"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_page_runs_as_written"
    ]
    wanted.sort(key=lambda p: -sum(b.kind == "run" for b in blocks(p)))
    jobs = int(os.environ.get("NRG_DOC_JOBS") or os.cpu_count() or 1)
    with ThreadPoolExecutor(max(1, min(jobs, len(wanted))), thread_name_prefix="page") as pool:
        futures = {path: pool.submit(_run_page, path) for path in wanted}
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.slow
@pytest.mark.timeout(900)  # a page runs several training jobs; a loaded machine is slow
@pytest.mark.parametrize("path", [p for p in PAGES if _runnable(p)], ids=_page_id)
def test_page_runs_as_written(path: Path, executed_pages: dict[Path, Future[None]]) -> None:
    executed_pages[path].result()  # its first failing block's AssertionError, as raised there
